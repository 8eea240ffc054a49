"""Two outputs side by side, with the first divergence marked so it shows without colour.

The common prefix is shown plain; a ▼ stands in the text where the two first differ, and from
there on both sides are underlined and reversed -- the ▼ is a character, so the place shows under
NO_COLOR, on a monochrome terminal and in a plain-text copy, where reverse and underline may not;
the title above the columns gives the character offset. Long
outputs are trimmed around the divergence so the difference is what fills the view. Where the
probe kept logprobs, both passes' top-K at the first divergent token sit under the outputs with
the verdict (near-tie or not) and how each pass was sent (after its twin, with others in flight):
the question after "it flipped" is "why".
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

CONTEXT_BEFORE = 160
DIVERGENCE_MARK = "▼"
"""Put in both outputs' text where they first differ (the title's ``▼ first divergence at character N``)."""


def first_divergence(a: str, b: str) -> int | None:
    """Character offset of the first difference (None when equal): the probe engine's own rule."""
    from execsys.probes.compare import first_divergence as engine_rule

    return engine_rule(a, b)


def marked(text: str, offset: int | None) -> Text:
    """``text`` with a ▼ at ``offset`` and everything from there on styled as divergent, trimmed to nearby context."""
    start = 0
    if offset is not None and offset > CONTEXT_BEFORE:
        start = offset - CONTEXT_BEFORE
    shown = Text("…" if start else "")
    if offset is None:
        shown.append(text[start:])
        return shown
    shown.append(text[start:offset])
    shown.append(DIVERGENCE_MARK, style="bold")
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
             offset: int | None = None, *, margin: dict[str, Any] | str | None = None,
             sent: list[str] | None = None) -> None:
        """``margin``: the record's ``first_divergence.logprobs`` (a dict, or "unsupported"); ``sent``:
        the lines saying how the passes were sent."""
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
        why = why_table(margin, labels, sent or [])
        self.update(table if why is None else Group(table, why))

    def clear_case(self, message: str = "Select a flipped case to compare its outputs.") -> None:
        self.update(Text(message, style="dim"))


def top_k(top: list[Any] | None, chosen: str | None) -> Text:
    """One pass's top-K at the divergent token, one per line, its chosen token in bold."""
    text = Text()
    for i, (token, logprob) in enumerate(top or []):
        if i:
            text.append("\n")
        text.append(f"{str(token)!r:>10} {float(logprob):9.4f}", style="bold" if token == chosen else "")
    return text


def why_table(margin: dict[str, Any] | str | None, labels: tuple[str, str], sent: list[str]) -> Table | None:
    """Both passes' top-K at the first divergent token, with the verdict and the send conditions."""
    if margin is None and not sent:
        return None
    if isinstance(margin, dict):
        bound = "≥" if margin.get("bound") != "exact" else ""
        title = (f"why: {margin.get('verdict')} at token {margin.get('token')} "
                 f"(margin {bound}{float(margin.get('margin') or 0):.4g} nats, near-tie at most "
                 f"{margin.get('tie_margin')})")
    elif margin == "unsupported":
        title = "why: logprobs: unsupported (the endpoint gave none)"
    else:
        title = "why: no logprobs at the divergence"
    table = Table(box=None, expand=True, show_edge=False, pad_edge=False, padding=(0, 1),
                  title=Text(title, style="bold"), title_justify="left",
                  caption=Text("; ".join(sent)) if sent else None, caption_justify="left")
    table.add_column(Text(f"{labels[0]} top-K", style="underline"), ratio=1)
    table.add_column(Text(f"{labels[1]} top-K", style="underline"), ratio=1)
    if isinstance(margin, dict):
        table.add_row(top_k(margin.get("top_a"), margin.get("token_a")), top_k(margin.get("top_b"), margin.get("token_b")))
    return table
