"""What every step's screen shares: the header, the footer, and central handling of worker failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execsys.tui.widgets.header import StateHeader
from textual.app import ComposeResult
from textual.binding import ActiveBinding
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

if TYPE_CHECKING:
    from execsys.tui.app import ExecsysApp


class StepFooter(Footer):
    """The footer with Quit first: whatever the width, the way out is never the key that is cut off."""

    def compose(self) -> ComposeResult:
        widgets = list(super().compose())
        quits = [w for w in widgets if getattr(w, "action", None) in ("quit", "app.quit")]  # FooterKeys
        yield from quits
        yield from (w for w in widgets if w not in quits)


class StepScreen(Screen):
    """A step of the procedure. Subclasses set ``STEP`` and implement ``compose_body``."""

    STEP = ""
    HOME = ""
    """The widget (a selector) Esc moves the focus to from a text field; "" for the field's nearest focusable pane."""

    if TYPE_CHECKING:
        @property
        def app(self) -> ExecsysApp: ...  # the screens only ever run inside ExecsysApp

    def compose(self) -> ComposeResult:
        yield StateHeader(self.STEP)
        yield from self.compose_body()
        yield StepFooter(compact=True)

    def compose_body(self) -> ComposeResult:  # pragma: no cover - overridden
        yield from ()

    def on_mount(self) -> None:
        self.app.step_screens[self.STEP] = self  # the app asks the steps about unsaved edits before quitting

    def leave_field(self, field: Widget) -> None:
        """Esc in a text field: the focus goes to the step (``HOME``, else the field's nearest focusable
        pane), never nowhere, so the step's keys -- ``?``, 1-4, its own -- answer again."""
        home = next(iter(self.query(self.HOME)), None) if self.HOME else None
        if home is None or not home.focusable:
            home = next((node for node in field.ancestors if isinstance(node, Widget) and node.focusable), None)
        self.set_focus(home)

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        """The keys the footer and the help show: only those that do something in this state (see ``offers``).

        Key presses do not go through this map, so a key left out still answers (with a line saying
        why it has nothing to do), it is only not advertised."""
        found = super().active_bindings
        return {key: active for key, active in found.items() if self.offers(active.binding.action)}

    def has_first_content(self) -> bool:
        """Hook: False until the screen shows what its first paint must (the app's first-paint signal waits)."""
        return True

    def offers(self, action: str) -> bool:
        """Hook: False while ``action`` would do nothing useful here (call ``refresh_bindings`` when that changes)."""
        return True

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

    def on_mount(self) -> None:  # StepScreen.on_mount runs too (Textual calls each class's handler)
        for name in ("doctor_verdict", "gate_override"):
            self.watch(self.app, name, lambda *_: self.refresh_bindings(), init=False)

    def offers(self, action: str) -> bool:
        if action == "override_gate":  # an open or already overridden gate has nothing to override
            return not self.app.doctor.gate_open() and self.app.gate_override is None
        return super().offers(action)

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


def error_line(error: BaseException | None) -> str:
    """A worker's error as one line, for the step's own status: a notification fades in seconds, the pane keeps it."""
    from execsys.errors import ExecsysError

    message = " ".join(str(error).split()) or type(error).__name__
    return message if isinstance(error, ExecsysError) else f"{type(error).__name__}: {message}"
