"""A small bar chart of agreement rates per probe axis, readable without colour.

Each axis gets one line: the bar (filled share = agreement rate), the figure m/n with the rate
and its 95% interval, and a word with a symbol (✓ licensed, ✗ unstable, – not probed), so the
chart says the same thing in monochrome, in a screenshot, or read aloud.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from execsys.console import SYMBOLS


@dataclass(frozen=True)
class AxisRate:
    axis: str
    m: int | None = None
    n: int | None = None
    ci95: tuple[float, float] | None = None

    @property
    def measured(self) -> bool:
        return bool(self.n)

    @property
    def rate(self) -> float | None:
        return (self.m or 0) / self.n if self.n else None


class RateChart(Widget):
    """One bar per axis; the verdict words follow the scope engine's: licensed / unstable / not probed."""

    DEFAULT_CSS = """
    RateChart {
        height: auto;
        padding: 0 1;
    }
    """

    rates: reactive[tuple[AxisRate, ...]] = reactive((), layout=True)

    def render(self) -> Text:
        if not self.rates:
            return Text("no axes", style="dim")
        label_width = max(len(r.axis) for r in self.rates) + 1
        tail_width = 46
        bar_width = max(8, min(40, self.size.width - label_width - tail_width - 2))
        text = Text()
        for index, rate in enumerate(self.rates):
            if index:
                text.append("\n")
            text.append(rate.axis.ljust(label_width), style="bold")
            if not rate.measured:
                text.append("·" * bar_width, style="dim")
                text.append(f"  {SYMBOLS['skip']} not probed: unlicensed", style="dim")
                continue
            value = rate.rate or 0.0
            filled = round(value * bar_width)
            stable = rate.m == rate.n
            text.append("█" * filled, style="green" if stable else "red")
            text.append("░" * (bar_width - filled), style="dim")
            figure = f"  {rate.m}/{rate.n} = {value:.2f}"
            if rate.ci95:
                figure += f" (CI {rate.ci95[0]:.2f}–{rate.ci95[1]:.2f})"
            text.append(figure)
            if stable:
                text.append(f"  {SYMBOLS['ok']} licensed", style="bold")
            else:
                text.append(f"  {SYMBOLS['fail']} unstable", style="bold")
        return text

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self.rates))
