"""``?``: what the current step is for, what its symbols mean, and the keys that work on it now.

The text is written for someone who opened the TUI for the first time: the step's purpose in the
procedure, the symbol legend (every state is a symbol or a word, never colour alone), and the keys
read from the live bindings, so the list never promises a key that does nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

PURPOSE: dict[str, str] = {
    "identity": (
        "Step 2, Identity: declare the twelve components of the execution system (model, artifact, runtime, "
        "hardware, harness, context policy, retrieval, tools, workflow, budget, grader, environment) beside "
        "what this machine observes, then pin them. A result compares with another only under the same "
        "identity, or across a declared intervention."
    ),
    "probes": (
        "Step 3, Probes: send the same cases twice across one axis (session, restart, concurrent load, hosts, "
        "redeploy) and read the agreement rate m/n with its 95% interval. Even at temperature 0 a serving "
        "stack can disagree with itself; where it starts is a fact to measure, not a pass/fail label."
    ),
    "scope": (
        "Step 4, Scope & plan: which comparisons the probes license for the pinned identity, which axes were "
        "never probed (unlicensed), which are unstable (a causal claim must cross them with a paired control), "
        "and a pre-registered paired plan for such a control: register it (ctrl+g), then run it here (ctrl+n, "
        "each arm's endpoint given; Esc stops after the case in hand) or with the `execsys plan run` shown. "
        "In Recent runs, space marks a run A, then another B: the step explains their score difference as "
        "`execsys explain A B` does (the verdict in one sentence, what moved, the flips, the noise floor)."
    ),
}

LEGEND: tuple[tuple[str, str], ...] = (
    ("✓", "ok"),
    ("!", "warning"),
    ("✗", "failing"),
    ("–", "skipped or not applicable"),
    ("?", "could not check (error)"),
    ("▸", "the selected row (in the Doctor table also the selected cell's column)"),
    ("●", "declared"),
    ("○", "not declared"),
    ("◇", "observed only (nothing declared to compare with)"),
    ("=", "observed equals declared"),
    ("≠", "observed differs from declared"),
    ("▼", "where two outputs first differ (the rest is underlined)"),
)


def doctor_purpose() -> str:
    """The Doctor's purpose with the hazards the registry has, listed from it: the count and the list
    cannot disagree (the help once said "ten hazards" and listed nine)."""
    from execsys.doctor.registry import HAZARDS

    width = max(len(hazard.id) for hazard in HAZARDS)
    listed = "\n".join(f"  {hazard.id:<{width}}  {hazard.title}" for hazard in HAZARDS)
    return (f"Step 1, Doctor: is this environment fit to produce a number at all? It checks these {len(HAZARDS)} "
            f"layered-environment hazards, here and on every host you add:\n{listed}\n"
            "Probes and plans wait behind this gate until nothing fails.")


def purpose(mode: str) -> str:
    """What the step ``mode`` is for, as the help's first paragraph."""
    return doctor_purpose() if mode == "doctor" else PURPOSE.get(mode, "")


def help_text(mode: str, keys: Iterable[tuple[str, str]]) -> str:
    lines = [purpose(mode), "", "Symbols:"]
    lines += [f"  {symbol}  {meaning}" for symbol, meaning in LEGEND]
    lines += ["", "Keys here:"]
    lines += [f"  {key:<10} {description}" for key, description in keys]
    lines += ["  F1-F4      switch steps (also 1-4 when no field has the focus, alt+1-4)",
              "  ctrl+p     command palette", "  ctrl+q     quit", "", "Esc closes this help."]
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    """The help for one step, over it; Esc (or ?) closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; background: $background 60%; }
    HelpScreen > VerticalScroll { width: 90; max-width: 95%; height: auto; max-height: 90%;
        border: thick $accent; background: $surface; padding: 1 2; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Close"), Binding("question_mark", "dismiss(None)", "Close")]

    def __init__(self, mode: str, keys: Iterable[tuple[str, str]]) -> None:
        super().__init__()
        self.mode = mode
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_text(self.mode, self.keys), id="help-text", markup=False)
