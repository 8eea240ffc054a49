"""The probe axes: what moves between the passes of a probe.

Each axis is one module with an :class:`Axis` subclass that says which passes to run
(``schedule``), what to do before a pass (``before_pass``: the restart axis restarts the
server there), how to phrase the result and what a change of served model or fingerprint
between passes means on it (``served_changed``, ``fingerprint_notes``), and whether the event it measures was seen to happen
(``evidence``: a restart that restarted nothing measures nothing across restarts). The runner knows no
axis by name: everything axis-specific is one of these hooks. ``AXES`` is the registry, one
line per axis::

    from execsys.probes.axes import AXES
    AXES["restart"].schedule(options)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execsys.probes.record import ProbeRecord
    from execsys.probes.runner import ProbeOptions, RunContext


@dataclass(frozen=True)
class PassSchedule:
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
    """Base class: subclasses set the phrases and override ``schedule`` (and the hooks they need)."""

    name = ""
    summary = ""  # one line for --help
    across = ""  # "across restarts"
    advice = ""  # what to do when unstable: "scope comparisons to one session"
    stable_advice = ""  # what the result licenses when stable
    uses_baseline = False  # pass 0 comes from a stored record (--baseline)
    simultaneous = False  # every pass is sent at the same instant (one per target), not one after another

    def validate(self, options: ProbeOptions) -> None:
        """Raise UsageError when the options do not make sense for this axis."""

    def schedule(self, options: ProbeOptions) -> list[PassSchedule]:
        raise NotImplementedError

    def before_pass(self, ctx: RunContext, schedule: PassSchedule) -> None:
        """Hook run before each pass that still has cases to send (the restart axis restarts here)."""

    def boundary(self, options: ProbeOptions | None = None) -> str:
        return self.across

    def served_changed(self, ctx: RunContext, message: str) -> None:
        """The served model or system_fingerprint differs between two passes: by default a note beside
        the rate (the restart axis says the engine changed instead)."""
        ctx.note_once(message)

    def evidence(self, ctx: RunContext, schedules: list[PassSchedule],
                 baseline: ProbeRecord | None) -> dict[str, Any] | None:
        """Whether the event this axis measures happened (the restart and redeploy axes): ``{"event",
        "verdict": "observed" | "not-observed" | "unverified", "sentence", ...}``; None for an axis whose
        passes are themselves the event (a session, a load, two hosts)."""
        return None

    def fingerprint_notes(self, passes: list[dict[str, Any]], baseline: ProbeRecord | None) -> list[str]:
        """Notes about the passes' fingerprints once they are known (the redeploy axis says whether
        the baseline's fingerprint still holds)."""
        return []

    def statement(self, boundary: str, n: int | None, holds: bool, engine_change: str | None) -> str:
        """The part of the sentence after the rate; ``n`` None when the count is not worth repeating."""
        if n == 0:
            return f"no case completed on every pass: nothing is known {boundary}"
        if engine_change:
            return f"{engine_change}: this measures an engine change, not {boundary}"
        if holds:
            counted = f"these {n} cases" if n is not None else "these cases"
            return f"stable {boundary} for {counted}: {self.stable_advice}"
        return f"unstable {boundary}: {self.advice}"


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
