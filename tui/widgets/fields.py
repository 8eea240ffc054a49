"""Form fields people can read and type into: a label bound to its field, and a field that keeps its value.

Textual marks the focused Input by colour only, and selects its whole value when Tab lands on it,
so the next key replaces what was there. ``FormInput`` keeps the value (the cursor goes to its
end), and Esc leaves it for the step (``StepScreen.leave_field``; in a dialog Esc stays the
dialog's own cancel); ``FieldLabel`` carries ``▸`` while its field has the focus -- text, so the focus shows under
NO_COLOR and on a monochrome terminal -- and clicking the label focuses the field, as a form
label does everywhere else.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Input, Label

FOCUS_MARK = "▸"


class FormInput(Input):
    """An Input that keeps its value when it gets the focus (no select-all for the next key to replace),
    and that Esc leaves on a step's screen."""

    BINDINGS = [Binding("escape", "leave_field", "Leave the field", show=False)]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("select_on_focus", False)
        kwargs.setdefault("compact", True)
        super().__init__(*args, **kwargs)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "leave_field":  # only a step leaves the field; a dialog's Esc is its cancel
            return hasattr(self.screen, "leave_field")
        return super().check_action(action, parameters)

    def action_leave_field(self) -> None:
        getattr(self.screen, "leave_field")(self)  # noqa: B009 - a StepScreen (check_action); fields know no screens


class FieldLabel(Label):
    """The label of one field (``field_id``): ``▸ name`` while the field has the focus; a click focuses it."""

    def __init__(self, text: str, field_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(self._text(text, False), **kwargs)
        self.text = text
        self.field_id = field_id

    @staticmethod
    def _text(text: str, focused: bool) -> str:
        return f"{FOCUS_MARK} {text}" if focused else f"  {text}"

    def on_mount(self) -> None:
        self.watch(self.screen, "focused", self._focus_moved)

    def _focus_moved(self, focused: Widget | None) -> None:
        marked = focused is not None and focused.id == self.field_id
        if marked == self.has_class("-focused"):
            return  # only the two labels whose field gained or lost the focus repaint, not every label
        self.set_class(marked, "-focused")
        self.update(self._text(self.text, marked))

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.screen.query_one(f"#{self.field_id}").focus()
