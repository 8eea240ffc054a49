"""Step 3, Probes: measure where the stack's reproducibility boundary lies, live.

Choose the axis, the target (an OpenAI-compatible endpoint or a command), the cases, n, and the
axis's own settings (restart/ready commands, concurrent load); the probe engine runs in a thread
worker and its events arrive as messages: one progress bar per pass, the agreement rate as cases
complete, the flipped cases as they appear. Select a flipped case to see its two outputs side by
side with the first divergence marked. Escape stops the probe; what completed is already in the
ledger, and starting again with "resume" picks up where it stopped.
"""

from __future__ import annotations

from typing import Any

from execsys.probes.events import CaseDone, Note, PassFinished, PassStarted, RunOpened
from execsys.tui import adapter
from execsys.tui.screens.base import GatedStep, error_line
from execsys.tui.widgets.divergence import SideBySide
from execsys.tui.widgets.fields import FieldLabel, FormInput
from execsys.tui.widgets.gate import GateBanner
from execsys.tui.widgets.marked import MarkedOptionList
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Input, Label, OptionList, ProgressBar, Select, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, get_current_worker

PASS_NAMES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class ProbesScreen(GatedStep):
    STEP = "probes"
    HOME = "#probe-form"  # Esc in a field: back to the form's pane (Tab goes on to its fields)
    GATE_WHAT = "probe"
    CSS_PATH = "probes.tcss"
    BINDINGS = [
        Binding("ctrl+g", "start", "Start probe", priority=True),
        Binding("escape", "cancel", "Stop (resumable)"),
        Binding("ctrl+o", "override_gate", "Override"),
    ]

    class ProbeEvent(Message):
        """An event from the probe runner (run opened, pass started, case done, pass finished, note)."""

        def __init__(self, run: int, event: Any) -> None:
            super().__init__()
            self.run, self.event = run, event

    class ProbeFinished(Message):
        def __init__(self, run: int, record: Any, cancelled: bool) -> None:
            super().__init__()
            self.run, self.record, self.cancelled = run, record, cancelled

    def __init__(self) -> None:
        super().__init__()
        self._run = 0
        self._bars: dict[int, ProgressBar] = {}
        self._outputs: dict[str, dict[int, str | None]] = {}
        self._divergence: dict[str, int | None] = {}
        self._why: dict[str, tuple[Any, list[str]]] = {}  # case id -> (its margin at the divergence, how sent)
        self._flipped: list[str] = []
        self._contexts: dict[str, tuple[str | None, str | None, int | None]] = {}
        self.running = False
        self.probe_run_id: str | None = None
        self._running_label: str | None = None
        self._note_shown = False

    def compose_body(self) -> ComposeResult:
        yield GateBanner(self.GATE_WHAT, id="gate")
        with Horizontal(classes="step-body"):
            with VerticalScroll(id="probe-form"):
                yield FieldLabel("axis", "axis", classes="field-name")
                # no type-to-search: a handful of choices, and with it an open list would take `?` and
                # the step digits as search text
                yield Select([(a, a) for a in adapter.probe_axes()], value="session", allow_blank=False,
                             id="axis", compact=True, type_to_search=False)
                yield FieldLabel("endpoint (base URL)", "endpoint", classes="field-name")
                yield FormInput(placeholder="e.g. http://127.0.0.1:8000/v1", id="endpoint",
                                tooltip="OpenAI base URL; for the hosts axis, several separated by commas")
                yield FieldLabel("or command (stdin)", "command", classes="field-name")
                yield FormInput(placeholder="e.g. python harness.py", id="command")
                yield FieldLabel("cases file (JSONL)", "cases", classes="field-name")
                yield FormInput(placeholder="e.g. cases.jsonl", id="cases")
                yield FieldLabel("n (empty = all cases)", "n", classes="field-name")
                yield FormInput(id="n", type="integer", placeholder="e.g. 20")
                yield FieldLabel("restart command", "restart", classes="field-name")
                yield FormInput(id="restart", placeholder="e.g. systemctl restart vllm")
                yield FieldLabel("ready URL or command", "ready", classes="field-name")
                yield FormInput(id="ready", placeholder="e.g. http://127.0.0.1:8000/health")
                yield FieldLabel("load K (concurrency)", "load", classes="field-name")
                yield FormInput(id="load", type="integer", placeholder="e.g. 16")
                yield FieldLabel("baseline (redeploy)", "baseline", classes="field-name")
                yield FormInput(id="baseline", placeholder="e.g. probe-20261201T…")
                yield FieldLabel("run", "run-mode", classes="field-name")
                yield Select([("new probe", "new"), ("resume the stopped run", "resume")], value="new",
                             allow_blank=False, id="run-mode", compact=True, type_to_search=False)
                yield Button("Start ^g", id="start", compact=True, variant="primary")
            with Vertical(id="probe-run"):
                yield Static("Set up the probe on the left and start it (ctrl+g).", id="probe-status")
                yield Vertical(id="passes")
                yield Static("", id="agreement")
                yield Label("flipped cases", classes="section-title")
                yield MarkedOptionList(id="flipped")
                with VerticalScroll(id="outputs-scroll"):
                    yield SideBySide(id="outputs")

    def on_mount(self) -> None:
        self.query_one("#outputs", SideBySide).clear_case()
        for field_id, value in adapter.probe_defaults(self.app.paths).items():
            if value not in (None, ""):
                self.query_one(f"#{field_id}", Input).value = str(value)

    # -- starting ----------------------------------------------------------------------
    def form(self) -> dict[str, Any]:
        def text(field_id: str) -> str:
            return self.query_one(f"#{field_id}", Input).value.strip()

        return {
            "axis": str(self.query_one("#axis", Select).value),
            "endpoint": text("endpoint") or None,
            "command": text("command") or None,
            "cases": text("cases") or None,
            "n": int(text("n")) if text("n") else None,
            "restart": text("restart") or None,
            "ready": text("ready") or None,
            "load": int(text("load")) if text("load") else None,
            "baseline": text("baseline") or None,
            "resume": self.query_one("#run-mode", Select).value == "resume",
        }

    @on(Button.Pressed, "#start")
    def action_start(self) -> None:
        if self.running:
            self.notify("A probe is running; Escape stops it (progress is kept).", severity="warning")
            return
        form = self.form()
        problem = adapter.probe_form_problem(form)
        if problem:
            self.notify(problem, title="Not started", severity="error")
            return
        self.with_gate(lambda override: self._start(form, override))

    def _start(self, form: dict[str, Any], override: dict[str, Any] | None) -> None:
        self._run += 1
        self.running = True
        self._reset_view()
        self.query_one("#start", Button).disabled = True
        self._set_status(f"starting the {form['axis']} probe … (Escape stops it; progress is kept)")
        self.probe(self._run, form, override)

    @work(thread=True, exclusive=True, exit_on_error=False, group="probe")
    def probe(self, run: int, form: dict[str, Any], override: dict[str, Any] | None) -> None:
        worker = get_current_worker()

        def forward(event: Any) -> None:
            self.post_message(self.ProbeEvent(run, event))

        record = adapter.run_probe(self.app.paths, form, override=override, on_event=forward,
                                   cancel=worker.cancelled_event)
        self.post_message(self.ProbeFinished(run, record, record is None))

    # -- live view -------------------------------------------------------------------------
    def _reset_view(self) -> None:
        self.query_one("#passes", Vertical).remove_children()
        self._bars.clear()
        self._outputs.clear()
        self._divergence.clear()
        self._why.clear()
        self._flipped.clear()
        self._contexts.clear()
        self.query_one("#flipped", OptionList).clear_options()
        self.query_one("#agreement", Static).update("")
        self.query_one("#outputs", SideBySide).clear_case()

    @on(ProbeEvent)
    def probe_event(self, message: ProbeEvent) -> None:
        if message.run != self._run:
            return
        event = message.event
        if isinstance(event, RunOpened):
            self.probe_run_id = event.run_id
        elif isinstance(event, PassStarted):
            bar = self._pass_bar(event.pass_index, event.total)
            bar.update(total=event.total, progress=event.done)
            self._running_label = event.label
            self._set_status(f"pass {event.label} running … (Escape stops; progress is kept)")
        elif isinstance(event, CaseDone):
            if self._note_shown and self._running_label is not None:
                # the axis spoke between PassStarted and the first case ("restarting the server before
                # pass B"): the pass's first case says that is over, so the status says what runs now
                self._note_shown = False
                self._set_status(f"pass {self._running_label} running … (Escape stops; progress is kept)")
            self._pass_bar(event.pass_index, event.total).update(total=event.total, progress=event.done)
            self._outputs.setdefault(event.case_id, {})[event.pass_index] = event.text
            if event.agrees is False and event.case_id not in self._flipped:
                self._flipped.append(event.case_id)
                self.query_one("#flipped", OptionList).add_option(Option(f"✗ {event.case_id}", id=event.case_id))
            if event.pass_index > 0:
                self.query_one("#agreement", Static).update(adapter.live_line(event.agreement))
        elif isinstance(event, PassFinished):
            errored = f", ? {event.errored} errored" if event.errored else ""
            self._set_status(f"pass {event.label} finished: {event.completed} completed{errored}")
        elif isinstance(event, Note):
            self._note_shown = True
            self._set_status(event.message)

    def _pass_bar(self, index: int, total: int | None) -> ProgressBar:
        bar = self._bars.get(index)
        if bar is None:
            row = Horizontal(classes="pass-row")
            self.query_one("#passes", Vertical).mount(row)
            row.mount(Label(f"pass {PASS_NAMES[index % 26]}", classes="pass-name"))
            bar = ProgressBar(total=total, show_eta=False)
            row.mount(bar)
            self._bars[index] = bar
        elif total and bar.total != total:
            bar.update(total=total)
        return bar

    @on(ProbeFinished)
    def probe_finished(self, message: ProbeFinished) -> None:
        if message.run != self._run:
            return
        self.running = False
        self.query_one("#start", Button).disabled = False
        record = message.record
        if message.cancelled or record is None:
            where = f" (run {self.probe_run_id})" if self.probe_run_id else ""
            self._set_status(
                f"! stopped: the completed cases are kept in the ledger{where}; start again with "
                "\"resume\" to continue where it stopped"
            )
            self.query_one("#run-mode", Select).value = "resume"
            return
        text = Text()
        symbol = "✓" if record.n and record.m == record.n else "✗"
        text.append(f"{symbol} {record.sentence}", style="bold")
        self.query_one("#probe-status", Static).update(text)
        self.query_one("#agreement", Static).update(adapter.record_line(record))
        flipped = self.query_one("#flipped", OptionList)
        flipped.clear_options()
        self._flipped = list(record.flipped)
        shown = set(self._flipped)
        for case in record.cases:
            if case.id in shown and case.first_divergence:
                div = case.first_divergence
                self._divergence[case.id] = div.get("char")
                self._contexts[case.id] = (div.get("a"), div.get("b"), div.get("pass"))
                self._why[case.id] = (div.get("logprobs"), adapter.sent_lines(div, [p.get("label", "")
                                                                                    for p in record.passes]))
        for case_id in self._flipped:
            flipped.add_option(Option(f"✗ {case_id}", id=case_id))
        if self._flipped:
            flipped.highlighted = 0
        self.app.refresh_session_facts()

    @on(OptionList.OptionHighlighted, "#flipped")
    def show_case(self, event: OptionList.OptionHighlighted) -> None:
        case_id = event.option.id
        if case_id is None:
            return
        per_pass = self._outputs.get(case_id, {})
        if len(per_pass) < 2 and case_id in self._contexts:
            # sent in an earlier session (a resumed probe): the record's excerpts around the divergence
            a, b, k = self._contexts[case_id]
            labels = ("pass A (excerpt)", f"pass {PASS_NAMES[(k or 1) % 26]} (excerpt)")
            margin, sent = self._why.get(case_id, (None, []))
            self.query_one("#outputs", SideBySide).show(case_id, a, b, labels, None, margin=margin, sent=sent)
            return
        passes = sorted(per_pass)
        first = per_pass.get(passes[0]) if passes else None
        # the pass that differs from the first (the engine's divergence is against pass 0)
        other_index = next((p for p in passes[1:] if per_pass.get(p) != first), passes[-1] if len(passes) > 1 else None)
        other = per_pass.get(other_index) if other_index is not None else None
        labels = (f"pass {PASS_NAMES[passes[0] % 26]}" if passes else "pass A",
                  f"pass {PASS_NAMES[other_index % 26]}" if other_index is not None else "pass B")
        margin, sent = self._why.get(case_id, (None, []))
        self.query_one("#outputs", SideBySide).show(case_id, first, other, labels, self._divergence.get(case_id),
                                                    margin=margin, sent=sent)

    # -- stopping ----------------------------------------------------------------------------
    def action_cancel(self) -> None:
        if self.running:
            self.workers.cancel_group(self, "probe")
            self._set_status("stopping after the requests in flight … (completed cases are kept)")

    def worker_failed(self, worker: Worker) -> None:
        if worker.group == "probe":
            self.running = False
            self.query_one("#start", Button).disabled = False
            self._set_status(f"✗ the probe stopped with an error: {error_line(worker.error)}; completed cases are kept")

    def _set_status(self, line: str) -> None:
        self.query_one("#probe-status", Static).update(line)
