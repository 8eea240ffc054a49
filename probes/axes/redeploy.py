"""The ``redeploy`` axis: a fresh pass compared against a stored baseline record.

A redeploy (new container, new node, a provider's silent update) is the boundary most
often crossed without anyone noticing. The baseline is a probe record in the ledger for the
same declared identity (``--baseline RECORD_ID``); its first pass is compared with a fresh
pass over the same cases, and ``system_fingerprint`` / served-model changes are reported
beside the rate. A redeploy needs evidence: the serving process (pid and start time) must differ from
the one the baseline observed; the same process is "no redeploy observed" (exit 1, licenses nothing),
and a process that cannot be seen from here (a remote endpoint, a provider's API) leaves it unverified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execsys.errors import UsageError

from . import Axis, PassSchedule, letters

if TYPE_CHECKING:
    from execsys.probes.record import ProbeRecord
    from execsys.probes.runner import ProbeOptions, RunContext


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

    def evidence(self, ctx: RunContext, schedules: list[PassSchedule],
                 baseline: ProbeRecord | None) -> dict[str, Any] | None:
        """Observed when the serving process (pid + start time) differs from the one the baseline saw."""
        from execsys.probes.system import process_of, process_words, step_key

        if baseline is None:
            return None
        base_check = baseline.system_check or {}
        base = process_of(base_check.get("at_start"))
        fresh = next((s for s in schedules if s.source == "send"), None)
        entry = ctx.step(step_key(fresh.index, "start")) if fresh is not None else None
        now = process_of((entry or {}).get("observed"))
        found = {"event": "redeploy", "baseline": baseline.id, "before": base, "after": now}
        if base is None:
            why = (f"the baseline {baseline.id} ({baseline.schema}) carries no observation of its serving process"
                   if not base_check else f"the baseline {baseline.id} could not observe its serving process")
            return {**found, "verdict": "unverified", "sentence": f"redeploy unverified: {why}"}
        if now is None:
            _, why = ctx.serving_process(fresh.target) if fresh is not None else (None, "nothing was sent")
            return {**found, "verdict": "unverified",
                    "sentence": f"redeploy unverified: the serving process could not be observed ({why})"}
        if (base["pid"], base["started_at"]) == (now["pid"], now["started_at"]):
            return {**found, "verdict": "not-observed",
                    "sentence": f"no redeploy observed: the serving process ({process_words(now)}) is the one "
                                f"baseline {baseline.id} measured"}
        return {**found, "verdict": "observed",
                "sentence": f"redeploy observed: {process_words(base)} -> {process_words(now)}"}

    def fingerprint_notes(self, passes: list[dict[str, Any]], baseline: ProbeRecord | None) -> list[str]:
        if baseline is None or not passes:
            return []
        a, b = passes[0]["system_fingerprints"], passes[-1]["system_fingerprints"]
        if not a and not b:
            return ["system_fingerprint: the engine reports none (a change of backend would not show there)"]
        if a == b:
            return [f"system_fingerprint unchanged: {', '.join(a)}"]
        return []
