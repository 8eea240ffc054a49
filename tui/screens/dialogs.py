"""Small modal dialogs: add a remote host to the doctor, confirm a gate override, trust a declaration,
quit with unsaved edits."""

from __future__ import annotations

from execsys.tui.widgets.fields import FieldLabel, FormInput
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static


class AddHostDialog(ModalScreen[str | None]):
    """Ask for an SSH destination (an alias, user@host, or ssh://user@host:port)."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Add a remote host", classes="section-title")
            yield Static("Anything ssh accepts: an alias from ~/.ssh/config, user@host, ssh://user@host:port.",
                         classes="muted")
            yield FieldLabel("SSH destination", "host-input")
            yield FormInput(placeholder="e.g. user@gpu1 (or an alias, or ssh://user@gpu1:2222)", id="host-input",
                            compact=False)
            with Horizontal(classes="actions"):
                yield Button("Add", variant="primary", id="add")
                yield Button("Cancel", id="cancel")

    @on(Input.Submitted)
    @on(Button.Pressed, "#add")
    def submit(self) -> None:
        value = self.query_one("#host-input", Input).value.strip()
        self.dismiss(value or None)

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)


class OverrideDialog(ModalScreen[bool]):
    """The explicit, recorded decision to run although the doctor has not given a clean verdict."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS = [
        Binding("escape", "dismiss(False)", "Keep the gate"),
        Binding("y", "dismiss(True)", "Override", show=False),
    ]

    def __init__(self, reason: str, what: str) -> None:
        super().__init__()
        self.reason = reason
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("✗ Override the doctor's gate?", classes="section-title")
            yield Static(f"Gate closed: {self.reason}.")
            yield Static(
                f"A {self.what} started now will carry the override (the verdict and the time) in its "
                "ledger record, so anyone reading the result sees it ran on an environment with hazards.",
                classes="muted",
            )
            with Horizontal(classes="actions"):
                yield Button("Override (y)", variant="error", id="yes")
                yield Button("Keep the gate (Esc)", variant="primary", id="no")

    @on(Button.Pressed, "#yes")
    def yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def no(self) -> None:
        self.dismiss(False)


class TrustDialog(ModalScreen[bool]):
    """Trust the session's declaration (``execsys trust``): the commands it declares are listed first."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS = [
        Binding("escape", "dismiss(False)", "Do not trust"),
        Binding("y", "dismiss(True)", "Trust", show=False),
    ]

    def __init__(self, path: str, line: str, commands: list[tuple[str, str]]) -> None:
        super().__init__()
        self.path, self.line, self.commands = path, line, commands

    def compose(self) -> ComposeResult:
        from rich.text import Text

        with Vertical(classes="dialog"):
            yield Label("Trust this declaration?", classes="section-title")
            yield Static(Text(f"{self.line}: {self.path} declares commands execsys would run. Trust it only "
                              "if you wrote it or have read it; an edit untrusts it again."))
            # file-controlled text: a Text, never markup
            yield Static(Text("\n".join(f"  {key}: {command}" for key, command in self.commands)), id="trust-commands",
                         classes="muted")
            with Horizontal(classes="actions"):
                yield Button("Trust (y)", variant="warning", id="yes")
                yield Button("Not now (Esc)", variant="primary", id="no")

    @on(Button.Pressed, "#yes")
    def yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def no(self) -> None:
        self.dismiss(False)


QUIT_FIELDS_SHOWN = 6


class QuitDialog(ModalScreen[str]):
    """ctrl+q with unsaved edits: ``save`` them and quit, ``discard`` them and quit, or ``stay``."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS = [
        Binding("escape", "dismiss('stay')", "Stay"),
        Binding("s", "dismiss('save')", "Save and quit", show=False),
        Binding("d", "dismiss('discard')", "Discard and quit", show=False),
    ]

    def __init__(self, where: str, fields: list[str], path: str) -> None:
        super().__init__()
        self.where, self.fields, self.path = where, fields, path

    def compose(self) -> ComposeResult:
        from rich.text import Text

        shown = ", ".join(self.fields[:QUIT_FIELDS_SHOWN])
        more = f" and {len(self.fields) - QUIT_FIELDS_SHOWN} more" if len(self.fields) > QUIT_FIELDS_SHOWN else ""
        with Vertical(classes="dialog"):
            yield Label("! Quit with unsaved edits?", classes="section-title")
            yield Static(Text(f"{self.where} has {len(self.fields)} unsaved edit{'s' if len(self.fields) != 1 else ''}: "
                              f"{shown}{more}."), id="quit-fields")
            yield Static(Text(f"Save writes them to {self.path}, then quits; discard quits without them; "
                              "stay goes back to them."), classes="muted")
            with Horizontal(classes="actions"):
                yield Button("Save and quit (s)", variant="primary", id="save")
                yield Button("Discard (d)", variant="error", id="discard")
                yield Button("Stay (Esc)", id="stay")

    @on(Button.Pressed)
    def chosen(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "stay")
