"""The one shape every operation has: options from their sources, a run, a typed report.

Every operation -- pin, verify, doctor, probe, plan run, digest match, scope, run -- is::

    options = XOptions.from_sources(declaration, lock, **overrides)   # None = not given
    report = run_x(options, on_event=None, cancel=None)               # -> XReport (a dataclass)

``from_sources`` layers what was given (flags in the CLI, a form in the TUI) over the
declaration (``execsys.toml``) over the lock (the pinned identity), and validates: bad input
raises :class:`execsys.errors.UsageError`/``InputError`` there, before anything runs. ``run_x``
lives in the engine layer, never prints, and tells its caller what happens through typed
events: plain frozen dataclasses that carry everything a face shows, so neither the CLI nor the
TUI has to re-read the ledger or recompute a figure an event could have carried. ``cancel`` is
a :class:`threading.Event`; an operation checks it between units of work and keeps what it has.

The CLI's command modules and the TUI only build options, pass a callback and render the report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Cancel", "Event", "OnEvent", "emit", "first_given", "new_cancel"]

Cancel = threading.Event
"""Set it to ask a running operation to stop after the unit of work in hand."""


@dataclass(frozen=True)
class Event:
    """Base of every operation's events. Subclasses are frozen dataclasses named for what happened."""


OnEvent = Callable[[Any], None]
"""A face's callback: receives each :class:`Event` subclass instance as it happens, on any thread."""

T = TypeVar("T")


def emit(on_event: OnEvent | None, event: Event) -> None:
    """Hand ``event`` to the face, if one listens."""
    if on_event is not None:
        on_event(event)


def new_cancel(cancel: threading.Event | None) -> threading.Event:
    """The caller's cancel event, or a fresh one nobody will set."""
    return cancel if cancel is not None else threading.Event()


def first_given(*values: T | None) -> T | None:
    """The first value that is not None: an override, then the declaration, then the lock.

    ``0``, ``""`` and ``False`` count as given -- ``--timeout 0`` is a value to validate, not a
    missing flag to default away."""
    for value in values:
        if value is not None:
            return value
    return None
