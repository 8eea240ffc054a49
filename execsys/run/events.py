"""What ``run_eval`` tells a face while it works: one frozen dataclass per thing that happened."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from execsys.operation import Event

if TYPE_CHECKING:
    from execsys.run.record import RunVerdict

STEPS = ("gate", "identity", "run", "watch", "verify", "results", "record")


@dataclass(frozen=True)
class StepStarted(Event):
    """A step began; ``text`` is the line a face shows for it."""

    step: str
    text: str


@dataclass(frozen=True)
class StepFinished(Event):
    """A step ended: ``status`` is ok | warn | fail | skip, ``text`` says what came of it."""

    step: str
    status: Literal["ok", "warn", "fail", "skip"]
    text: str


@dataclass(frozen=True)
class ChildStarted(Event):
    pid: int
    argv: tuple[str, ...]  # redacted


@dataclass(frozen=True)
class SignalForwarded(Event):
    signal: str  # SIGINT | SIGTERM | SIGKILL
    pid: int


@dataclass(frozen=True)
class DriftDetected(Event):
    """The serving runtime changed while the harness ran, as one look at it found: ``events`` is every
    ``{at, component, before, after}`` that look found (one ``at``), ``event`` the first of them."""

    event: dict[str, Any] = field(default_factory=dict)
    events: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class ResultFound(Event):
    path: str
    blake3: str
    harness: str


@dataclass(frozen=True)
class RunRecorded(Event):
    run_id: str
    verdict: RunVerdict | Literal["attached"]  # attach records a run it did not watch
    sidecars: tuple[str, ...]
