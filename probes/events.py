"""What a running probe tells its face: typed, frozen events carrying everything a face shows.

:func:`execsys.probes.runner.run_probe` hands these to ``on_event`` as they happen (on the probe's
own thread). Each carries what the CLI's progress lines and the TUI's live view need -- the run id
to resume, a case's output text and digest, whether it agrees with the earlier passes, the running
agreement -- so no face reads the ledger or recomputes a figure. Importing this module is cheap
(no HTTP client, no ledger), so a face can import it at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from execsys.operation import Event

from .agreement import Tally

if TYPE_CHECKING:
    from .record import ProbeRecord

__all__ = ["CaseDone", "Note", "PassFinished", "PassStarted", "ProbeFinished", "RunOpened", "ServedModelDiffers",
           "SystemDiffers"]


@dataclass(frozen=True)
class RunOpened(Event):
    """The probe-run the results go to: what ``--resume RUN_ID`` takes. ``resumed``: it existed before."""

    run_id: str
    resumed: bool


@dataclass(frozen=True)
class PassStarted(Event):
    pass_index: int
    label: str
    total: int
    done: int  # already recorded (a resumed pass)
    run_id: str | None = None


@dataclass(frozen=True)
class CaseDone(Event):
    """One case answered on one pass and recorded.

    ``agrees``: whether its result matches every earlier pass at the probe's headline level; None on
    the first pass, or when this or an earlier pass of the case errored (``excluded`` says which).
    ``agreement`` is the pass's running tally over the cases compared in this session."""

    pass_index: int
    case_id: str
    done: int
    total: int
    error: str | None = None
    digest: str | None = None
    text: str | None = None
    outcome: str | None = None
    agrees: bool | None = None
    excluded: bool = False
    agreement: Tally = field(default_factory=Tally)


@dataclass(frozen=True)
class PassFinished(Event):
    pass_index: int
    label: str
    completed: int
    errored: int
    agreement: Tally = field(default_factory=Tally)  # running agreement after this pass (this session)


@dataclass(frozen=True)
class Note(Event):
    """A line worth showing: restart progress, a warning, "resuming run ..." (already redacted)."""

    message: str

    @property
    def text(self) -> str:
        return self.message


@dataclass(frozen=True)
class ServedModelDiffers(Note):
    """A response on this pass named another model than the one requested (said once per pass, at the
    first such case; the record's pass says how many). A Note, so every face that shows notes shows it;
    the fields are there for a face that wants them apart."""

    pass_index: int = 0
    case_id: str = ""
    requested: str = ""
    answered: str = ""


@dataclass(frozen=True)
class SystemDiffers(Note):
    """The runtime observed at the start or end of a pass is not the pinned system (``message`` names what
    differs: "the engine answering this probe is not the pinned system: runtime argv +--n_batch 7"); the
    record will count toward no identity. Said once per distinct difference, as it is seen."""

    pass_index: int = 0
    at: str = ""  # "start" | "end" of the pass


@dataclass(frozen=True)
class ProbeFinished(Event):
    record: ProbeRecord
