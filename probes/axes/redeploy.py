"""The ``redeploy`` axis: a fresh pass compared against a stored baseline record.

A redeploy (new container, new node, a provider's silent update) is the boundary most
often crossed without anyone noticing. The baseline is a probe record in the ledger for the
same declared identity (``--baseline RECORD_ID``); its first pass is compared with a fresh
pass over the same cases, and ``system_fingerprint`` / served-model changes are reported
beside the rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execsys.errors import UsageError

from . import Axis, PassSchedule, letters

if TYPE_CHECKING:
    from execsys.probes.record import ProbeRecord
    from execsys.probes.runner import ProbeOptions


class RedeployAxis(Axis):
    name = "redeploy"
    summary = "a fresh pass compared against a stored baseline record (--baseline RECORD_ID)"
    across = "across redeploys"
    advice = "scope comparisons to one deployment: re-run the baseline after every redeploy"
    stable_advice = "this deployment reproduces the baseline"
    uses_baseline = True

    def validate(self, options: ProbeOptions) -> None:
        if not options.baseline:
            raise UsageError("the redeploy axis needs --baseline RECORD_ID (a probe record from the ledger)")
        if len(options.endpoints) > 1:
            raise UsageError("the redeploy axis takes one --endpoint")

    def schedule(self, options: ProbeOptions) -> list[PassSchedule]:
        return [PassSchedule(0, "baseline", source="baseline")] + [
            PassSchedule(i, letters(i), concurrency=options.concurrency) for i in range(1, options.repeats)
        ]

    def fingerprint_notes(self, passes: list[dict[str, Any]], baseline: ProbeRecord | None) -> list[str]:
        if baseline is None or not passes:
            return []
        a, b = passes[0]["system_fingerprints"], passes[-1]["system_fingerprints"]
        if not a and not b:
            return ["system_fingerprint: the engine reports none (a change of backend would not show there)"]
        if a == b:
            return [f"system_fingerprint unchanged: {', '.join(a)}"]
        return []
