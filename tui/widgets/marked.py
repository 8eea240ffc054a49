"""An OptionList whose highlighted option carries a ``▸`` in its text, not only a coloured band.

Textual shows the highlighted option by its background colour; under NO_COLOR, on a monochrome
terminal or in a plain-text screenshot that band disappears and the operator cannot tell which
component or case is selected. Each option gets a two-cell left gutter (padding), and the
highlighted option's gutter shows ``▸`` -- drawn as text, so it survives all three. The options'
own prompts are left as they are (the step line and the Doctor table use the same ``▸``).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widgets import OptionList

MARK = "▸"


class MarkedOptionList(OptionList):
    """An OptionList that marks the highlighted option with ``▸`` in a gutter left of its text."""

    DEFAULT_CSS = """
    MarkedOptionList > .option-list--option {
        padding: 0 0 0 2;
    }
    """

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        highlighted = self.highlighted
        if highlighted is None or not strip.cell_length:
            return strip
        first = next(iter(strip), None)
        style = first.style if first is not None else None
        if style is None or style.meta.get("option") != highlighted:
            return strip
        return Strip.join([Strip([Segment(MARK, style + Style(bold=True))], 1), strip.crop(1, strip.cell_length)])
