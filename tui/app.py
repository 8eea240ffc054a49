"""The execsys app: four steps (Doctor, Identity, Probes, Scope & plan) over the same engines as the CLI.

The app holds the session's state (paths, doctor results, the gate, the header's facts) and
switches between one screen per step (Textual modes, so each step keeps its state while the
operator looks at another). ctrl+q quits at once unless a step holds an unsaved edit (the
Identity step's declaration form): then it asks -- save and quit, discard, or stay. Every action calls the engine functions the CLI calls; the screens
only start workers and render what comes back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from execsys.tui.screens.base import StepScreen
from execsys.tui.screens.doctor import DoctorScreen
from execsys.tui.state import STEPS, DoctorState, Paths
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import ModalScreen, Screen
from textual.widgets import Input
from textual.worker import Worker

DARK, LIGHT = "textual-dark", "textual-light"
EXIT_AFTER_PAINT_ENV = "EXECSYS_TUI_EXIT_AFTER_PAINT"
"""Set to 1 and the app exits right after its first paint (used by benchmarks/bench_tui_startup.py)."""
PAINT_STAMP_ENV = "EXECSYS_TUI_PAINT_STAMP"
"""A file to receive ``time.time()`` at the first paint (the benchmark's stop watch)."""


def _identity_screen() -> Screen:
    from execsys.tui.screens.identity import IdentityScreen

    return IdentityScreen()


def _probes_screen() -> Screen:
    from execsys.tui.screens.probes import ProbesScreen

    return ProbesScreen()


def _scope_screen() -> Screen:
    from execsys.tui.screens.scope import ScopeScreen

    return ScopeScreen()


class ExecsysApp(App[int]):
    """``execsys tui``: the procedure in order, and a gate before any run counts."""

    TITLE = "execsys"
    CSS_PATH = "app.tcss"
    # The first step is imported with the app; the other three when first opened (their modules and
    # the engines they name are not needed for the first paint).
    MODES = {"doctor": DoctorScreen, "identity": _identity_screen, "probes": _probes_screen, "scope": _scope_screen}
    # Bare digits switch steps only while no text field has the focus (a digit typed into a field
    # belongs to the field); F1-F4 and alt+digit always switch.
    BINDINGS = [
        Binding("1", "digit_step('doctor')", "Doctor", show=False),
        Binding("2", "digit_step('identity')", "Identity", show=False),
        Binding("3", "digit_step('probes')", "Probes", show=False),
        Binding("4", "digit_step('scope')", "Scope", show=False),
        # Function keys switch steps even while a text field has the focus.
        Binding("f1", "step('doctor')", show=False, priority=True),
        Binding("f2", "step('identity')", show=False, priority=True),
        Binding("f3", "step('probes')", show=False, priority=True),
        Binding("f4", "step('scope')", show=False, priority=True),
        Binding("alt+1", "step('doctor')", show=False, priority=True),
        Binding("alt+2", "step('identity')", show=False, priority=True),
        Binding("alt+3", "step('probes')", show=False, priority=True),
        Binding("alt+4", "step('scope')", show=False, priority=True),
        # In the palette and on ctrl+t, not in the footer: at 80 columns the footer keeps the step's own keys.
        Binding("ctrl+t", "toggle_theme", "Theme", show=False),
        # `?` opens the help wherever the focus is (a list, a table, a select), except in a text field,
        # where it is typed (check_action): priority, so no focused widget takes the key first.
        Binding("question_mark", "help", "Help", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        # The palette's Keys entry opens Textual's keys panel beside the step; Esc closes it first
        # (priority, so a step's own Esc -- stop a probe, a plan run -- waits for the next press).
        Binding("escape", "close_keys_panel", show=False, priority=True),
    ]

    identity_id: reactive[str | None] = reactive(None)
    doctor_verdict: reactive[str] = reactive("not run", always_update=True)
    doctor_detail: reactive[str] = reactive("")
    licence: reactive[str] = reactive("")
    gate_override: reactive[dict[str, Any] | None] = reactive(None)

    def __init__(
        self,
        *,
        config: str | Path | None = None,
        lock: str | Path | None = None,
        ledger: str | Path | None = None,
        hosts: Iterable[str] = (),
        autostart: bool = True,
        theme: str = DARK,
        show_tracebacks: bool = False,
    ) -> None:
        super().__init__()
        self.show_tracebacks = show_tracebacks
        self.crash: BaseException | None = None
        self.paths = Paths.resolve(config, ledger, lock)
        self.doctor = DoctorState()
        self.doctor.hosts.extend(h for h in hosts if h not in self.doctor.hosts)
        self.autostart = autostart
        self._initial_theme = theme
        self._exit_after_paint = os.environ.get(EXIT_AFTER_PAINT_ENV) == "1"
        self._frames_with_content = 0  # frames written since the first step's screen had its content
        self.step_screens: dict[str, StepScreen] = {}  # each step's screen once opened (StepScreen.on_mount)

    # -- start-up --------------------------------------------------------
    def on_mount(self) -> None:
        self.theme = self._initial_theme
        self.switch_mode("doctor")

    def _display(self, screen: Any, renderable: Any) -> None:
        """The first paint is a frame of the first step with its content, written to the terminal.

        Textual calls ``post_display_hook`` after every display attempt, also one that wrote nothing
        (no region to update, or inside a batch): counting those let the app leave before anything
        was drawn. So a frame counts only when it had something to write and was not held back by a
        batch, and only while the step's screen says it has its content; acting after the second
        means that a whole frame of it reached the terminal before anything follows."""
        writes = renderable is not None and not getattr(self, "_batch_count", 0)
        super()._display(screen, renderable)
        if not writes or self._frames_with_content >= 2:
            return
        shown = self.screen
        if isinstance(shown, StepScreen) and shown.is_mounted and shown.has_first_content():
            self._frames_with_content += 1
            if self._frames_with_content == 2:
                self.call_later(self._first_paint)

    def _first_paint(self) -> None:
        """Paint first, then read the ledger: the first screen never waits on disk or a check."""
        if not self._exit_after_paint:
            self.refresh_session_facts()
        stamp = os.environ.get(PAINT_STAMP_ENV)
        if stamp:
            import time

            with open(stamp, "w", encoding="utf-8") as fh:
                fh.write(repr(time.time()))
        if self._exit_after_paint:
            self.exit(0)

    def refresh_session_facts(self) -> None:
        """Re-read the identity (lock file) and the licence (scope over the ledger) in a worker."""
        self.run_worker(self._read_session_facts, thread=True, exclusive=True, group="session", exit_on_error=False)

    def _read_session_facts(self) -> None:
        from execsys.tui import adapter

        identity_id = adapter.current_identity_id(self.paths)
        licence = adapter.licence_for(self.paths, identity_id)
        self.call_from_thread(self._set_session_facts, identity_id, licence)

    def _set_session_facts(self, identity_id: str | None, licence: str) -> None:
        self.identity_id = identity_id
        self.licence = licence

    # -- ledger ----------------------------------------------------------
    def open_ledger(self):
        """A fresh connection for the calling thread (SQLite connections are not shared across threads)."""
        from execsys.ledger import Ledger

        return Ledger.open(self.paths.ledger)

    # -- doctor state, the gate ------------------------------------------
    def doctor_changed(self) -> None:
        """Screens call this after changing ``self.doctor``; the header and the gate follow."""
        self.doctor_verdict = self.doctor.verdict()
        # counted and named as the Doctor's summary line counts them ("1 fail, 10 error"), never a third way
        self.doctor_detail = self.doctor.blocking_summary()
        if self.doctor.running:
            self.gate_override = None  # an override speaks for the verdict it was given against

    def gate_open(self) -> bool:
        return self.doctor.gate_open() or self.gate_override is not None

    def grant_override(self) -> dict[str, Any]:
        """The operator chose to run despite the doctor: remember what they overrode, and when."""
        from execsys.ledger import now_iso

        self.gate_override = {
            "verdict": self.doctor.verdict(),
            "reason": self.doctor.gate_reason(),
            "failing": [{"host": h, "hazard": z} for h, z in self.doctor.failing()],
            "hosts": list(self.doctor.hosts),
            "at": now_iso(),
        }
        return self.gate_override

    # -- actions -----------------------------------------------------------
    def action_step(self, mode: str) -> None:
        """F1-F4 (and 1-4, alt+1-4): open a step. Over the help, the help closes first; a dialog that asks
        something is answered first (switching away would leave its question pending out of sight)."""
        from execsys.tui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss(None)
        elif isinstance(self.screen, ModalScreen):
            self.bell()
            self.notify("Answer this dialog first (Esc closes it), then switch steps.", title="Not switched")
            return
        if self.current_mode != mode:
            self.switch_mode(mode)

    # -- quitting: never with an edit lost unasked ----------------------------------------
    def unsaved_edits(self) -> tuple[Any, list[str]] | None:
        """The step holding unsaved edits and which (``component.key``), or None: the Identity step's form."""
        identity = self.step_screens.get("identity")
        if identity is None or not identity.is_mounted:
            return None  # never opened: nothing typed (and its module need not load to quit)
        from execsys.tui.screens.identity import IdentityScreen

        if not isinstance(identity, IdentityScreen):
            return None
        fields = identity.unsaved_fields()
        return (identity, fields) if fields else None

    def action_quit(self) -> None:
        """ctrl+q: quit at once, unless an edit is unsaved -- then ask: save and quit, discard, or stay."""
        from execsys.tui.screens.dialogs import QuitDialog

        if isinstance(self.screen, QuitDialog):
            return  # already asking
        unsaved = self.unsaved_edits()
        if unsaved is None:
            self.exit()
            return
        screen, fields = unsaved

        def decided(choice: str | None) -> None:
            if choice == "discard":
                self.exit()
            elif choice == "save" and not screen.save_form(then=self.exit):
                # a field does not parse: show the step and its status line, which says why
                self.action_step(screen.STEP)

        self.push_screen(QuitDialog("The Identity step's declaration", fields, str(self.paths.config)), decided)

    def action_help(self) -> None:
        """Help for the step on screen, with the keys that work there now."""
        from execsys.tui.screens.help import HelpScreen

        keys = []
        for active in self.active_bindings.values():
            binding = active.binding
            if binding.show and binding.description and active.enabled and binding.action != "quit":
                keys.append((binding.key_display or self.get_key_display(binding), binding.description))
        self.push_screen(HelpScreen(str(self.current_mode), keys))

    def action_close_keys_panel(self) -> None:
        self.action_hide_help_panel()

    def action_digit_step(self, mode: str) -> None:
        self.action_step(mode)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "close_keys_panel":  # without the panel, Esc goes on to the step (or the field)
            return bool(self.screen.query("HelpPanel"))
        # a digit or a ? typed while a field has the focus belongs to the field
        if action in ("digit_step", "help") and isinstance(self.focused, Input):
            return False
        if action == "help":  # over a dialog (or the help itself, whose ? closes it) the key is theirs
            return not isinstance(self.screen, ModalScreen)
        return True

    def action_toggle_theme(self) -> None:
        self.theme = LIGHT if self.theme == DARK else DARK

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for number, (mode, label) in enumerate(STEPS, start=1):
            yield SystemCommand(f"Step {number}: {label}", f"Open the {label} step", lambda m=mode: self.action_step(m))
        yield SystemCommand("Toggle dark/light theme", "Switch between the dark and the light theme", self.action_toggle_theme)
        yield SystemCommand("Re-run the doctor", "Check every hazard on every host again", self._rerun_doctor)

    def _rerun_doctor(self) -> None:
        self.switch_mode("doctor")
        self.call_after_refresh(lambda: self.screen.run_action("rerun_all"))

    # -- a crash: one line and a non-zero exit, the traceback only with --debug ---------
    def _handle_exception(self, error: Exception) -> None:
        self.crash = error
        super()._handle_exception(error)

    def _fatal_error(self) -> None:
        # Textual renders a full traceback with locals on exit; without --debug the CLI prints
        # one line instead (execsys.commands.tui.exit_code_of), so only close the app here.
        if self.show_tracebacks:
            super()._fatal_error()
            return
        self.bell()
        self._close_messages_no_wait()

    # -- workers: failures handled in one place -------------------------------
    def report_worker_failure(self, worker: Worker) -> None:
        """Every step's worker failures end here: one notification, one line, no traceback on screen."""
        error = worker.error
        what = worker.group if worker.group != "default" else (worker.name or "work")
        from execsys.tui.screens.base import error_line

        message = error_line(error)
        self.log.error(f"worker {what} failed", error=error)
        self.notify(message, title=f"{what} failed", severity="error", timeout=10)


def main() -> None:  # pragma: no cover - for `python -m execsys.tui.app`
    ExecsysApp().run()


if __name__ == "__main__":  # pragma: no cover
    main()
