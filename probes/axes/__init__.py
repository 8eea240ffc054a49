"""The probe axes: what moves between the passes of a probe.

Each axis is one module with an :class:`Axis` subclass that says which passes to run
(``plan``), what to do before a pass (``before_pass``: the restart axis restarts the
server there) and how to phrase the result. ``AXES`` is the registry, one line per axis::

    from execsys.probes.axes import AXES
    AXES["restart"].plan(options)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execsys.probes.runner import ProbeOptions, RunContext


@dataclass(frozen=True)
class PassPlan:
    """One pass: which target, at what concurrency, in which order, or taken from a baseline record."""

    index: int
    label: str
    target: int = 0
    concurrency: int = 1
    load: int = 0  # keep this many requests in flight with filler requests (0 = none)
    shuffled: bool = False  # a seeded, recorded order different from the pass before
    source: str = "send"  # "send" or "baseline" (redeploy: results come from a stored record)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index, "label": self.label, "target": self.target,
            "concurrency": self.concurrency, "load": self.load,
            "order": "shuffled" if self.shuffled else "file", "source": self.source,
        }


class Axis:
    """Base class: subclasses set the phrases and override ``plan`` (and ``before_pass`` if needed)."""

    name = ""
    summary = ""  # one line for --help
    across = ""  # "across restarts"
    advice = ""  # what to do when unstable: "scope comparisons to one session"
    stable_advice = ""  # what the result licenses when stable

    def validate(self, options: ProbeOptions) -> None:
        """Raise UsageError when the options do not make sense for this axis."""

    def plan(self, options: ProbeOptions) -> list[PassPlan]:
        raise NotImplementedError

    def before_pass(self, ctx: RunContext, plan: PassPlan) -> None:
        """Hook run before each pass that still has cases to send (the restart axis restarts here)."""

    def boundary(self, options: ProbeOptions) -> str:
        return self.across


def letters(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"P{i + 1}"


from . import concurrency, hosts, redeploy, restart, session  # noqa: E402

AXES: dict[str, Axis] = {
    "session": session.SessionAxis(),
    "restart": restart.RestartAxis(),
    "concurrency": concurrency.ConcurrencyAxis(),
    "hosts": hosts.HostsAxis(),
    "redeploy": redeploy.RedeployAxis(),
}
