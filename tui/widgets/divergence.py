"""Two outputs side by side, with the first divergence marked so it shows without colour.

The common prefix is shown plain; from the first differing character on, both sides are
underlined and reversed, and a ▼ marker with the character offset heads each column. Long
outputs are trimmed around the divergence so the difference is what fills the view.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

CONTEXT_BEFORE = 160


def first_divergence(a: str, b: str) -> int | None:
    """Character offset of the first difference (None when equal): the probe engine's own rule."""
    from execsys.probes.compare import first_divergence as engine_rule

    return engine_rule(a, b)


def marked(text: str, offset: int | None) -> Text:
    """``text`` with everything from ``offset`` on styled as divergent, trimmed to nearby context."""
    start = 0
    if offset is not None and offset > CONTEXT_BEFORE:
        start = offset - CONTEXT_BEFORE
    shown = Text("…" if start else "")
    if offset is None:
        shown.append(text[start:])
        return shown
    shown.append(text[start:offset])
    rest = text[offset:]
    shown.append(rest if rest else "⟂(output ends here)", style="bold underline reverse")
    return shown


class SideBySide(Static):
    """Pass A and pass B of one case; ``show(case_id, a, b, offset)`` fills it."""

    DEFAULT_CSS = """
    SideBySide {
        height: auto;
        padding: 0 1;
    }
    """

    def show(self, case_id: str, a: str | None, b: str | None, labels: tuple[str, str] = ("pass A", "pass B"),
             offset: int | None = None) -> None:
        if a is None or b is None:
            self.update(Text(f"{case_id}: outputs not available (the case errored on a pass)", style="dim"))
            return
        if offset is None:
            offset = first_divergence(a, b)
        table = Table(box=None, expand=True, show_edge=False, pad_edge=False, padding=(0, 1),
                      title=Text(f"{case_id}: " + ("outputs identical" if offset is None else
                                                   f"▼ first divergence at character {offset} (marked from there on)"),
                                 style="bold"), title_justify="left")
        table.add_column(Text(labels[0], style="bold underline"), ratio=1)
        table.add_column(Text(labels[1], style="bold underline"), ratio=1)
        table.add_row(marked(a, offset), marked(b, offset))
        self.update(table)

    def clear_case(self, message: str = "Select a flipped case to compare its outputs.") -> None:
        self.update(Text(message, style="dim"))
