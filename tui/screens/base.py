"""What every step's screen shares: the header, the footer, and central handling of worker failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execsys.tui.widgets.header import StateHeader
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

if TYPE_CHECKING:
    from execsys.tui.app import ExecsysApp


class StepScreen(Screen):
    """A step of the procedure. Subclasses set ``STEP`` and implement ``compose_body``."""

    STEP = ""

    if TYPE_CHECKING:
        @property
        def app(self) -> ExecsysApp: ...  # the screens only ever run inside ExecsysApp

    def compose(self) -> ComposeResult:
        yield StateHeader(self.STEP)
        yield from self.compose_body()
        yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:  # pragma: no cover - overridden
        yield from ()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Worker failures from every step go to the app's one handler; the step may tidy up after."""
        if event.state == WorkerState.ERROR:
            self.app.report_worker_failure(event.worker)
            self.worker_failed(event.worker)

    def worker_failed(self, worker: Worker) -> None:
        """Hook: reset progress bars or buttons after a failed worker (the message is already shown)."""


class GatedStep(StepScreen):
    """A step whose runs count only after a clean doctor, or with an explicit, recorded override."""

    GATE_WHAT = "run"

    def action_override_gate(self) -> None:
        """ctrl+o: override the closed gate now, before starting anything (asked, then kept for the
        next run, which records it in the ledger); with the gate open there is nothing to override."""

        def overridden(override: dict[str, Any] | None) -> None:
            if override is None:
                self.notify("The gate is open: the doctor found nothing blocking, so there is nothing to override.",
                            title="Gate open")
            else:
                self.notify(f"Gate overridden ({override['reason']}); the next {self.GATE_WHAT} records it.",
                            title="Gate overridden")

        self.with_gate(overridden)

    def with_gate(self, proceed: Callable[[dict[str, Any] | None], object]) -> None:
        """Call ``proceed(override)`` when the gate is open (override None) or the operator overrides it."""
        app = self.app
        if app.doctor.gate_open():
            proceed(None)
            return
        if app.gate_override is not None:
            proceed(app.gate_override)
            return
        from execsys.tui.screens.dialogs import OverrideDialog

        def decided(yes: bool | None) -> None:
            if yes:
                proceed(app.grant_override())
            else:
                self.notify(f"Gate kept closed: {app.doctor.gate_reason()}.", title="Not started")

        app.push_screen(OverrideDialog(app.doctor.gate_reason(), self.GATE_WHAT), decided)
