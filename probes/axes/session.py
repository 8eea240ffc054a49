"""The ``session`` axis: the same cases twice (or N times) within one server session.

The second pass runs in a different, seeded and recorded order: an engine that reuses
cached prompt prefixes or batches neighbours together gives different numerics when
the order changes, and that is part of what "the same session" means in practice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execsys.errors import UsageError

from . import Axis, PassSchedule, letters

if TYPE_CHECKING:
    from execsys.probes.runner import ProbeOptions


class SessionAxis(Axis):
    name = "session"
    summary = "the same cases twice within one server session, the second pass in a seeded different order"
    across = "within one session"
    advice = "even one server session does not repeat itself: compare score distributions, not single runs"
    stable_advice = "repeated runs on one server agree"

    def validate(self, options: ProbeOptions) -> None:
        if len(options.endpoints) > 1:
            raise UsageError("the session axis takes one --endpoint (several endpoints: use the hosts axis)")

    def schedule(self, options: ProbeOptions) -> list[PassSchedule]:
        return [
            PassSchedule(i, letters(i), concurrency=options.concurrency, shuffled=i > 0)
            for i in range(options.repeats)
        ]
