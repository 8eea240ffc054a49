"""The ``hosts`` axis: the same cases against two or more endpoints, one per host, in one window.

Different GPUs, drivers and kernel selections change floating-point order. Each
``--endpoint`` gets one pass with the same cases in the same order; agreement means every
host gave the same output. Records taken separately on each host combine with
``execsys probe merge RECORD...`` when their identities differ only in hardware.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execsys.errors import UsageError

from . import Axis, PassSchedule

if TYPE_CHECKING:
    from execsys.probes.runner import ProbeOptions


class HostsAxis(Axis):
    name = "hosts"
    summary = "the same cases against two or more endpoints (repeat --endpoint), one pass per host"
    across = "across hosts"
    advice = "scope comparisons to one host (same hardware and drivers)"
    stable_advice = "outputs carry across these hosts"
    # At one instant: a provider that varies over time must not pass for a difference between hosts.
    simultaneous = True

    def validate(self, options: ProbeOptions) -> None:
        if options.command:
            raise UsageError("the hosts axis compares endpoints: give --endpoint once per host")
        if len(options.endpoints) < 2:
            raise UsageError("the hosts axis needs two or more --endpoint URLs (one per host)")
        if options.repeats_given:
            raise UsageError("the hosts axis runs one pass per endpoint; --repeats does not apply")

    def schedule(self, options: ProbeOptions) -> list[PassSchedule]:
        return [
            PassSchedule(i, f"host {i + 1}", target=i, concurrency=options.concurrency)
            for i in range(len(options.endpoints))
        ]
