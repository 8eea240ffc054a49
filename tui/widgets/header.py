"""The header every step shows: where you are in the procedure, and the state that gates it.

Two lines: the four steps (the current one marked with ▸ and its number, not colour alone),
then the identity id, the doctor verdict (with its symbol) and the licence. It watches the
app's reactive facts, so any step that changes them updates every header at once.
"""

from __future__ import annotations

from execsys.tui.state import STEPS
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from execsys.console import SYMBOLS

VERDICT_LOOK = {
    "clean": (SYMBOLS["ok"], "success"),
    "hazards": (SYMBOLS["fail"], "error"),
    "checking": ("…", "warning"),
    "not run": ("–", "muted"),
    "incomplete": ("?", "warning"),
    "cancelled": ("–", "muted"),
}


class StateHeader(Vertical):
    """Steps on one line, the session's identity / doctor / licence on the next."""

    DEFAULT_CSS = """
    StateHeader {
        height: 2;
        background: $panel;
        padding: 0 1;
    }
    StateHeader > Static {
        height: 1;
        width: 1fr;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, step: str) -> None:
        super().__init__()
        self.step = step

    def compose(self) -> ComposeResult:
        yield Static(self._steps_line(), id="steps-line")
        yield Static("", id="state-line")

    def on_mount(self) -> None:
        for name in ("identity_id", "doctor_verdict", "doctor_detail", "licence", "gate_override"):
            self.watch(self.app, name, self._refresh_state, init=False)
        self._refresh_state()

    def _steps_line(self) -> Text:
        line = Text("execsys  ", style="bold")
        for number, (mode, label) in enumerate(STEPS, start=1):
            if mode == self.step:
                line.append(f"▸{number} {label}", style="bold reverse")
            else:
                line.append(f" {number} {label}", style="dim")
            line.append("  ")
        return line

    def on_resize(self) -> None:
        self._refresh_state()

    def _refresh_state(self, *_: object) -> None:
        """Identity │ doctor │ licence, each cell cut to its share of the width with ``…``, never silently.

        A cut that falls at the end of the whole line would take the licence away entirely once the
        doctor cell grows ("✗ hazards (3 failing) (gate overridden)"), so each cell has its own budget."""
        app = self.app
        identity = getattr(app, "identity_id", None)
        verdict = getattr(app, "doctor_verdict", "not run")
        symbol, look = VERDICT_LOOK.get(verdict, ("?", "warning"))
        detail = getattr(app, "doctor_detail", "")
        doctor = f"{symbol} {verdict}" + (f" ({detail})" if detail else "")
        if getattr(app, "gate_override", None):
            doctor += " (gate overridden)"
        licence = getattr(app, "licence", "") or "—"
        width = self.size.width or 78  # the content width (the padding is outside it)
        fixed = len("identity ") + 12 + len(" │ doctor ") + len(" │ licence ")
        rest = max(16, width - fixed)
        doctor_budget = max(rest - len(licence), rest // 2, 14)
        doctor = ellipsise(doctor, doctor_budget)
        licence = ellipsise(licence, max(8, rest - len(doctor)))
        line = Text()
        line.append("identity ", style="dim")
        line.append(identity[:12] if identity else "not pinned", style="bold" if identity else "italic")
        line.append(" │ ", style="dim")
        line.append("doctor ", style="dim")
        line.append(doctor, style=f"bold {_colour(look)}")
        line.append(" │ ", style="dim")
        line.append("licence ", style="dim")
        line.append(licence)
        self.query_one("#state-line", Static).update(line)


def ellipsise(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells, ending in ``…`` when anything was cut."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def _colour(look: str) -> str:
    # Rich styles, not theme variables: the symbol and word carry the meaning, colour only helps.
    return {"success": "green", "error": "red", "warning": "yellow", "muted": "dim"}.get(look, "")
