"""The ``concurrency`` axis: pass A alone at concurrency 1, pass B under concurrent load.

Batched kernels reduce in a different order when a request shares a batch with others,
so greedy output can change with load. Pass B sends the cases themselves K at a time
and keeps K requests in flight to the end with filler requests (``--load K``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execsys.errors import UsageError

from . import Axis, PassSchedule, letters

if TYPE_CHECKING:
    from execsys.probes.runner import ProbeOptions


class ConcurrencyAxis(Axis):
    name = "concurrency"
    summary = "pass A alone at concurrency 1, pass B with the cases under K-way concurrent load (--load K)"
    across = "between serial and concurrent load"
    advice = "scope comparisons to runs at the same load and batch size"
    stable_advice = "load does not change outputs"

    def validate(self, options: ProbeOptions) -> None:
        if len(options.endpoints) > 1:
            raise UsageError("the concurrency axis takes one --endpoint")
        if options.load is None:
            raise UsageError("the concurrency axis needs --load K (requests in flight during pass B, K >= 2)")
        if options.load < 2:
            raise UsageError("--load must be at least 2 (pass A already runs at concurrency 1)")

    def schedule(self, options: ProbeOptions) -> list[PassSchedule]:
        load = options.load or 2
        return [PassSchedule(0, "A", concurrency=1)] + [
            PassSchedule(i, letters(i), concurrency=load, load=load) for i in range(1, options.repeats)
        ]

    def boundary(self, options: ProbeOptions | None = None) -> str:
        return f"between concurrency 1 and load {options.load}" if options is not None else self.across
