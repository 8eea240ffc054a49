"""Step 2, Identity: the twelve components as a form, declared beside observed; save, pin, diff.

The form is the declaration (``execsys.toml``): one panel per component with a field per known
key, pre-filled from the file or, when there is none yet, from what ``execsys init`` detects.
Beside each panel, read-only, is what this machine observes for that component -- the two are
never merged, because the gap between them is the finding. Pin hashes the artifact in a worker
with a progress bar, writes the lock and the ledger record, and states the diff against the lock
that was there before ("isolates <component>" or "descriptive only").

The screen remembers each field's text as last read from or written to the declaration, so it can
say which edits are unsaved (``unsaved_fields``): quitting with any asks first (the app's quit
dialog). Integer and number fields refuse other characters as they are typed; the status line
always says what happened last, a rejected save or pin included.
"""

from __future__ import annotations

from typing import Any

from execsys.tui import adapter
from execsys.tui.screens.base import StepScreen, error_line
from execsys.tui.widgets.fields import FieldLabel, FormInput
from execsys.tui.widgets.marked import MarkedOptionList
from execsys.tui.widgets.values import compare_observed, from_field, placeholder, to_field
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Button, ContentSwitcher, Input, Label, OptionList, ProgressBar, Static
from textual.widgets.option_list import Option
from textual.worker import Worker

from execsys import COMPONENTS
from execsys.termsafe import shown

INPUT_TYPES: dict[Any, str] = {int: "integer", (int, float): "number"}
"""The Textual input type of a field by its SCHEMA type: such a field refuses other characters as typed."""


class Panel(VerticalScroll):
    """A component's form: Tab goes from the component list straight to its first field, not to the
    scrolling container (it still scrolls to follow the focused field)."""

    can_focus = False


class IdentityScreen(StepScreen):
    STEP = "identity"
    HOME = "#components"  # Esc in a field: back to the list of components
    CSS_PATH = "identity.tcss"
    BINDINGS = [
        Binding("ctrl+s", "save", "Save declaration", priority=True),
        Binding("ctrl+l", "pin", "Pin", priority=True),
        Binding("ctrl+r", "observe", "Re-observe"),
    ]

    class Observed(Message):
        """What this machine observes, per component (``observed``), and where the form came from."""

        def __init__(self, declared: dict[str, dict[str, Any]], observed: dict[str, Any], source: str,
                     diff: Any = None) -> None:
            super().__init__()
            self.declared, self.observed, self.source, self.diff = declared, observed, source, diff

    class Declared(Message):
        """The declaration's tables, read before anything is observed: the form is filled even when observing fails."""

        def __init__(self, declared: dict[str, dict[str, Any]]) -> None:
            super().__init__()
            self.declared = declared

    class PinProgressed(Message):
        def __init__(self, done: int, total: int) -> None:
            super().__init__()
            self.done, self.total = done, total

    class Pinned(Message):
        """Pinned, written to the lock and the ledger; ``diff`` is against the lock that was there before."""

        def __init__(self, identity: Any, diff: Any, lock_path: str, tables: dict[str, dict[str, Any]],
                     superseded: Any = None, texts: dict[str, str] | None = None) -> None:
            super().__init__()
            self.identity, self.diff, self.lock_path, self.tables = identity, diff, lock_path, tables
            self.superseded = superseded  # the licences a new identity leaves behind (SupersededLicences)
            self.texts = texts or {}  # the fields' texts that were saved with the pin

    def __init__(self) -> None:
        super().__init__()
        self._observed: dict[str, Any] = {}
        self._declared: dict[str, dict[str, Any]] = {}
        self._stored: dict[str, str] = {}  # field id -> its text as last read from or written to the declaration
        self._after_save: Any = None  # called once the save in flight is written (quit: save, then leave)

    def compose_body(self) -> ComposeResult:
        from execsys.declaration import SCHEMA

        with Horizontal(classes="step-body"):
            yield MarkedOptionList(*[Option(f"  {name}", id=name) for name in COMPONENTS], id="components")
            with ContentSwitcher(initial=f"panel-{COMPONENTS[0]}", id="panels"):
                for name in COMPONENTS:
                    with Panel(id=f"panel-{name}", classes="panel"):
                        yield Label(f"{name} · declared (edit; saved to the declaration)", classes="section-title")
                        for key, expected in SCHEMA[name].items():
                            with Horizontal(classes="field"):
                                yield FieldLabel(key, f"f-{name}-{key}", classes="field-name")
                                yield FormInput(id=f"f-{name}-{key}", classes="field-input",
                                                placeholder=placeholder(name, key, expected),
                                                type=INPUT_TYPES.get(expected, "text"))
                        yield Label(f"{name} · observed (read-only; = as declared, ≠ differs, ◇ observed only)",
                                    classes="section-title observed-title")
                        yield Static("… observing", id=f"obs-{name}", classes="observed")
        with Horizontal(classes="actions", id="identity-actions"):
            yield Button("Save ^s", id="save", compact=True)
            yield Button("Pin ^l", id="pin", compact=True, variant="primary")
            yield ProgressBar(id="pin-progress", show_eta=False)
        yield Static("", id="identity-status")

    def on_mount(self) -> None:
        self.query_one("#pin-progress", ProgressBar).display = False
        self.query_one("#components", OptionList).highlighted = 0
        self._set_status(f"reading {self.app.paths.config} …")
        self.observe(live=False)

    # -- observing -------------------------------------------------------------
    def action_observe(self) -> None:
        """Observe this machine now (hashes a declared artifact, with progress)."""
        self._set_status("observing this machine (hashing the declared artifact, if any) …")
        self._show_progress()
        self.observe(live=True)

    @work(thread=True, exclusive=True, exit_on_error=False, group="observe")
    def observe(self, live: bool) -> None:
        """The form's values, and the observed side: from the last lock, or live when asked (ctrl+r) or unpinned."""
        declared, source = adapter.declared_components(self.app.paths)
        self.post_message(self.Declared(declared))
        lock = None
        if not live:
            try:
                lock = adapter.last_lock(self.app.paths)
            except Exception as exc:  # an unreadable lock: say so and observe live instead
                source += f"; the lock could not be read ({' '.join(str(exc).split())})"
        diff = None
        if lock is not None:
            observed = {name: lock.observed(name) for name in COMPONENTS}
            source += f"; observed: as pinned in {self.app.paths.lock} at {lock.recorded_at} (ctrl+r observes now)"
        else:
            self.post_message(self.PinProgressed(0, 0))
            observed, diff = adapter.observe(self.app.paths, on_event=self._on_event())
            source += "; observed: now, on this machine"
        self.post_message(self.Observed(declared, observed, source, diff))

    @on(Declared)
    def declared(self, message: Declared) -> None:
        self._fill_form(message.declared)
        self._mark_components(message.declared)

    def _fill_form(self, declared_tables: dict[str, dict[str, Any]]) -> None:
        from execsys.declaration import SCHEMA

        self._declared = declared_tables
        for name in COMPONENTS:
            declared = declared_tables.get(name, {})
            for key in SCHEMA[name]:
                field = self.query_one(f"#f-{name}-{key}", Input)
                stored = to_field(declared.get(key))
                self._stored[f"f-{name}-{key}"] = stored
                if not field.value:  # never overwrite what the operator has typed
                    field.value = stored

    @on(Observed)
    def observed(self, message: Observed) -> None:
        self.query_one("#pin-progress", ProgressBar).display = False
        self._observed = message.observed
        self._fill_form(message.declared)
        for name in COMPONENTS:
            self._render_observed(name)
        self._mark_components(message.declared)
        text = Text(message.source)
        if message.diff is not None:  # observed now, against the lock: is it still the pinned system?
            symbol = "=" if not message.diff.moved else "≠"
            text.append(f"\n{symbol} now against {self.app.paths.lock}: {message.diff.sentence}", style="bold")
        self.query_one("#identity-status", Static).update(text)

    def _render_observed(self, name: str) -> None:
        """Observed facts, each marked: = same as declared, ≠ differs from declared, ◇ observed only."""
        rows = compare_observed(name, self._declared.get(name, {}), self._observed.get(name),
                                base_dir=self.app.paths.config.parent)
        text = Text()
        if not rows:
            text.append("– nothing observed for this component (declared only)", style="dim")
        for mark, key, value in rows:
            text.append(f"{mark} ", style={"≠": "bold", "◇": "dim"}.get(mark, ""))
            text.append(f"{shown(key)}: ", style="italic")
            text.append(f"{shown(value)}\n")  # model ids, versions, paths: the engine's and the disk's words
        self.query_one(f"#obs-{name}", Static).update(text)

    def _mark_components(self, declared: dict[str, dict[str, Any]]) -> None:
        options = self.query_one("#components", OptionList)
        highlighted = options.highlighted
        options.clear_options()
        for name in COMPONENTS:
            mark = "●" if declared.get(name) else "○"
            options.add_option(Option(f"{mark} {name}", id=name))
        options.highlighted = highlighted

    @on(OptionList.OptionHighlighted, "#components")
    def show_component(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.query_one("#panels", ContentSwitcher).current = f"panel-{event.option.id}"

    # -- saving ------------------------------------------------------------------
    def form_tables(self) -> dict[str, dict[str, Any]]:
        """The form as declaration tables; raises ValueError naming the first field that does not parse."""
        from execsys.declaration import SCHEMA

        tables: dict[str, dict[str, Any]] = {}
        for name in COMPONENTS:
            table: dict[str, Any] = {}
            for key, expected in SCHEMA[name].items():
                text = self.query_one(f"#f-{name}-{key}", Input).value
                try:
                    value = from_field(text, expected)
                except ValueError as exc:
                    raise ValueError(f"{name}.{key}: {exc}") from None
                if value is not None:
                    table[key] = value
            tables[name] = table
        return tables

    def form_texts(self) -> dict[str, str]:
        """Every field's text now, by field id."""
        return {field.id: field.value for field in self.query(".field-input").results(Input) if field.id}

    def unsaved_fields(self) -> list[str]:
        """``component.key`` of each field whose value differs from the declaration as last read or saved.

        Compared as values where both parse (``0.50`` and ``0.5`` are the same temperature), as text otherwise."""
        from execsys.declaration import SCHEMA

        changed = []
        for name in COMPONENTS:
            for key, expected in SCHEMA[name].items():
                field_id = f"f-{name}-{key}"
                now, stored = self.query_one(f"#{field_id}", Input).value, self._stored.get(field_id, "")
                if now == stored:
                    continue
                try:
                    same = from_field(now, expected) == from_field(stored, expected)
                except ValueError:
                    same = False
                if not same:
                    changed.append(f"{name}.{key}")
        return changed

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        self.save_form()

    def save_form(self, then: Any = None) -> bool:
        """Save the form to the declaration (``then()`` once it is written); False, with the reason on the
        status line, when a field does not parse."""
        try:
            tables = self.form_tables()
        except ValueError as exc:
            self._after_save = None
            self._set_status(f"✗ not saved: {exc}")  # the last thing that happened, not an earlier save
            self.notify(str(exc), title="Not saved", severity="error")
            return False
        self._after_save = then
        self._set_status(f"saving {self.app.paths.config} …")
        self.save(tables, self.form_texts())
        return True

    @work(thread=True, exclusive=True, exit_on_error=False, group="save")
    def save(self, tables: dict[str, dict[str, Any]], texts: dict[str, str]) -> None:
        path = adapter.save_declaration(self.app.paths, tables)
        self.app.call_from_thread(self._saved, str(path), tables, texts)

    def _saved(self, path: str, tables: dict[str, dict[str, Any]], texts: dict[str, str]) -> None:
        self._stored.update(texts)
        self._declared_now(tables)
        self._set_status(f"✓ saved {path}")
        self.notify(f"Saved {path}", title="Declaration")
        then, self._after_save = self._after_save, None
        if then is not None:
            then()

    def _declared_now(self, tables: dict[str, dict[str, Any]]) -> None:
        """What was just saved is what is declared: the ●/○ marks and the = ≠ ◇ marks follow at once."""
        self._declared = {name: dict(tables.get(name, {})) for name in COMPONENTS}
        self._mark_components(self._declared)
        for name in COMPONENTS:
            self._render_observed(name)

    # -- pinning ---------------------------------------------------------------------
    @on(Button.Pressed, "#pin")
    def action_pin(self) -> None:
        try:
            tables = self.form_tables()
        except ValueError as exc:
            self._set_status(f"✗ not pinned: {exc}")  # the last thing that happened, not an earlier pin
            self.notify(str(exc), title="Not pinned", severity="error")
            return
        self._show_progress()
        self.query_one("#pin", Button).disabled = True
        self._set_status("pinning: observing the twelve components and hashing the artifact …")
        self.pin(tables, self.form_texts())

    @work(thread=True, exclusive=True, exit_on_error=False, group="pin")
    def pin(self, tables: dict[str, dict[str, Any]], texts: dict[str, str]) -> None:
        identity, diff, superseded = adapter.pin(self.app.paths, tables, on_event=self._on_event())
        self.post_message(self.Pinned(identity, diff, str(self.app.paths.lock), tables, superseded, texts))

    def _show_progress(self) -> None:
        bar = self.query_one("#pin-progress", ProgressBar)
        bar.update(total=None, progress=0)
        bar.display = True

    def _on_event(self):
        """Pin's hashing events from the worker thread, posted about a hundred times, not once per block."""
        from execsys.identity import ArtifactHashed

        last = [-1.0]

        def on_event(event: object) -> None:
            if not isinstance(event, ArtifactHashed):
                return
            done, total = event.done_bytes, event.total_bytes
            fraction = done / total if total else 1.0
            if fraction - last[0] >= 0.01 or done >= total:
                last[0] = fraction
                self.post_message(self.PinProgressed(done, total))

        return on_event

    @on(PinProgressed)
    def pin_progressed(self, message: PinProgressed) -> None:
        bar = self.query_one("#pin-progress", ProgressBar)
        if message.total:
            bar.update(total=message.total, progress=message.done)

    @on(Pinned)
    def pinned(self, message: Pinned) -> None:
        self.query_one("#pin", Button).disabled = False
        bar = self.query_one("#pin-progress", ProgressBar)
        bar.update(total=1, progress=1)
        identity_id = adapter.identity_id_of(message.identity)
        self.app.identity_id = identity_id
        self._observed = {name: message.identity.observed(name) for name in COMPONENTS}
        self._stored.update(message.texts)  # pinning saved the declaration first
        self._declared_now(message.tables)
        self.app.refresh_session_facts()
        text = Text()
        text.append(f"✓ pinned {identity_id[:12] if identity_id else '?'} → {message.lock_path}", style="bold")
        if message.diff is None:
            text.append("  (no earlier lock to compare with)")
        else:
            moved = list(getattr(message.diff, "moved", []) or [])
            symbol = "=" if not moved else "≠"
            text.append(f"\n{symbol} against the previous lock: {message.diff.sentence}")
            changed = changed_fields(message.diff)
            if changed:
                text.append(f"\n  changed: {changed}")
        if message.superseded is not None:
            text.append(f"\n! {message.superseded.sentence()}")
        for note in getattr(message.identity, "notes", None) or []:
            text.append(f"\n! {shown(note)}")  # declared and observed disagree (e.g. the quantization)
        self.query_one("#identity-status", Static).update(text)

    def worker_failed(self, worker: Worker) -> None:
        if worker.group == "pin":
            self.query_one("#pin", Button).disabled = False
            self.query_one("#pin-progress", ProgressBar).display = False
            self._set_status(f"✗ not pinned: {error_line(worker.error)}")
        elif worker.group == "save":
            self._after_save = None  # a quit waiting on this save stays: the edit is not written
            self._set_status(f"✗ not saved: {error_line(worker.error)}")
        elif worker.group == "observe":
            self._set_status(f"? observation failed: {error_line(worker.error)}; ctrl+r tries again")
            for name in COMPONENTS:
                self.query_one(f"#obs-{name}", Static).update(Text("? not observed", style="dim"))

    def _set_status(self, line: str) -> None:
        self.query_one("#identity-status", Static).update(line)


CHANGED_SHOWN = 4


def changed_fields(diff: Any) -> str:
    """The fields that moved against the previous lock, as ``execsys diff`` words them (the first few)."""
    from execsys.identity import describe_changes

    changes = [words for name, found in (getattr(diff, "changes", None) or {}).items()
               for words in describe_changes(found, under=f"{name}.")]
    more = f" (+{len(changes) - CHANGED_SHOWN} more: execsys diff)" if len(changes) > CHANGED_SHOWN else ""
    return "; ".join(changes[:CHANGED_SHOWN]) + more

