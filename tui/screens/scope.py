"""Step 4, Scope & plan: what the measurements license, as a sentence and a chart; the contract; a paired plan.

The licence is the scope engine's statement for the current identity; the chart shows each
axis's agreement rate with its interval, and says "not probed" for axes nobody measured (never
"probably fine"). The contract snippet is the comparability section of an experiment contract,
saved where the operator says. A paired plan (both arms in one session, order pre-registered and
counterbalanced) is registered in the ledger -- behind the same doctor gate as the probes -- and
then run here (ctrl+n) through the engine ``execsys plan run`` uses: a bar over the registered
sequence, each arm's answer as it comes, Esc to stop after the case in hand (the run is then
recorded as cancelled and descriptive), and the checks and the paired difference at the end.

Recent runs (``execsys run`` records) are listed with their verdicts. Space on the list marks the
highlighted run as A, then another as B (space again unmarks; a third mark makes the last B the new A);
with two marked, the step shows ``execsys explain A B`` for them -- the one-sentence verdict, what
moved, the flips, the noise floor of each separating axis -- from the engine call the CLI makes
(ctrl+r explains them again, after new probes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execsys.tui import adapter
from execsys.tui.screens.base import GatedStep, error_line
from execsys.tui.widgets.fields import FieldLabel, FormInput
from execsys.tui.widgets.gate import GateBanner
from execsys.tui.widgets.marked import MarkedOptionList
from execsys.tui.widgets.rates import AxisRate, RateChart
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Collapsible, Input, Label, OptionList, ProgressBar, Select, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, get_current_worker

from execsys.errors import ExecsysError

if TYPE_CHECKING:
    from execsys.plan import PlanRun


MARKS = ("A", "B")
"""The two marked runs, in the order they were marked: explain's A and B."""


class RunList(MarkedOptionList):
    """The recent runs; space marks the highlighted one (A, then B) for explain, or unmarks it."""

    BINDINGS = [Binding("space", "mark_run", "Mark A/B")]

    class MarkToggled(Message):
        def __init__(self, run_id: str) -> None:
            super().__init__()
            self.run_id = run_id

    def action_mark_run(self) -> None:
        option = self.highlighted_option
        if option is not None and option.id and not option.disabled:
            self.post_message(self.MarkToggled(option.id))


class ScopeScreen(GatedStep):
    STEP = "scope"
    GATE_WHAT = "plan registration"
    CSS_PATH = "scope.tcss"
    BINDINGS = [
        Binding("ctrl+r", "refresh_scope", "Refresh"),
        Binding("ctrl+s", "save_contract", "Save contract", priority=True),
        Binding("ctrl+g", "register_plan", "Register plan", priority=True),
        Binding("ctrl+n", "run_plan", "Run plan", priority=True),
        Binding("escape", "cancel_plan_run", "Stop plan run"),
        Binding("ctrl+o", "override_gate", "Override"),
    ]

    class ScopeComputed(Message):
        def __init__(self, identity_id: str | None, report: Any, contract: str, runs: list[Any]) -> None:
            super().__init__()
            self.identity_id, self.report, self.contract, self.runs = identity_id, report, contract, runs

    class RunRead(Message):
        """One `execsys run` record's body, for the selected run's drift events and result files."""

        def __init__(self, run_id: str, body: dict[str, Any]) -> None:
            super().__init__()
            self.run_id, self.body = run_id, body

    class Explained(Message):
        """``execsys explain A B`` for the two marked runs: the report, or the one line why it could not be made."""

        def __init__(self, pair: tuple[str, str], report: Any, problem: str | None) -> None:
            super().__init__()
            self.pair, self.report, self.problem = pair, report, problem

    class PlanRegistered(Message):
        def __init__(self, plan: dict[str, Any], record_id: str, out: str | None) -> None:
            super().__init__()
            self.plan, self.record_id, self.out = plan, record_id, out

    class PlanRunEvent(Message):
        """An event from the plan run (placement, window, case sent, arm answered, pair scored, ...)."""

        def __init__(self, run: int, event: Any) -> None:
            super().__init__()
            self.run, self.event = run, event

    class PlanRunFinished(Message):
        def __init__(self, run: int, report: PlanRun) -> None:
            super().__init__()
            self.run, self.report = run, report

    def __init__(self) -> None:
        super().__init__()
        self._contract = ""
        self._registered: tuple[str, list[str]] | None = None  # (plan file, arms) of the plan to run
        self._plan_run = 0  # which run the events belong to (a stopped run's late events are dropped)
        self.plan_running = False
        self._runs: list[Any] = []  # the listed runs (RunSummary), newest first
        self._runs_identity: str | None = None  # the identity they were listed against
        self._marked: list[str] = []  # run ids, in the order marked: [A] or [A, B]

    def compose_body(self) -> ComposeResult:
        yield GateBanner(self.GATE_WHAT, id="gate")
        with VerticalScroll(classes="step-body", id="scope-body"):
            yield Label("Licence", classes="section-title")
            yield Static("… reading the ledger", id="statement")
            yield Label("Measured boundaries (agreement m/n, 95% CI)", classes="section-title")
            yield RateChart(id="chart")
            with Collapsible(title="Recent runs (execsys run)", id="runs-box", collapsed=False):
                yield RunList(id="runs")
                yield Static("", id="run-detail")
                yield Static("", id="explain")
            with Collapsible(title="Contract snippet (Markdown)", id="contract-box", collapsed=True):
                yield Static("", id="contract")
                with Horizontal(classes="row"):
                    yield FormInput(value="contract.md", id="contract-path", placeholder="e.g. contract.md")
                    yield Button("Save ^s", id="save-contract", compact=True)
            with Collapsible(title="Register a paired plan (both arms in one session)", id="plan-box", collapsed=False):
                with Horizontal(classes="row"):
                    yield FieldLabel("arms", "arm-a", classes="field-name")
                    yield FormInput(placeholder="e.g. A (baseline)", id="arm-a", classes="arm")
                    yield FormInput(placeholder="e.g. B (intervention)", id="arm-b", classes="arm")
                with Horizontal(classes="row"):
                    yield FieldLabel("cases file", "plan-cases", classes="field-name")
                    yield FormInput(placeholder="e.g. cases.jsonl", id="plan-cases")
                with Horizontal(classes="row"):
                    yield FieldLabel("design, seed", "design", classes="field-name")
                    yield Select([("abba", "abba"), ("ab", "ab")], value="abba", allow_blank=False,
                                 id="design", compact=True)
                    yield FormInput(value="0", id="seed", type="integer", placeholder="e.g. 7")
                with Horizontal(classes="row"):
                    yield FieldLabel("save plan to", "plan-out", classes="field-name")
                    yield FormInput(value="plan.json", id="plan-out", placeholder="e.g. plan.json")
                    yield Button("Register ^g", id="register", compact=True, variant="primary")
                yield Static("", id="plan-result")
                with Horizontal(classes="row"):
                    yield FieldLabel("endpoints", "url-a", classes="field-name")
                    yield FormInput(placeholder="e.g. http://127.0.0.1:8001/v1", id="url-a", classes="arm")
                    yield FormInput(placeholder="e.g. http://127.0.0.1:8002/v1", id="url-b", classes="arm")
                    yield Button("Run ^n", id="run-plan", compact=True, disabled=True)
                yield Static("", id="plan-run-status")
                yield ProgressBar(id="plan-run-progress", show_eta=False)
                yield Static("", id="plan-run-result")

    def on_mount(self) -> None:
        self._fill_from_declaration()
        self.action_refresh_scope()
        self.watch(self.app, "identity_id", lambda *_: self.action_refresh_scope(), init=False)

    def on_screen_resume(self) -> None:
        self.action_refresh_scope()

    def _fill_from_declaration(self) -> None:
        cases = adapter.declared(self.app.paths, "probe", "cases")
        if cases:
            self.query_one("#plan-cases", Input).value = str(cases)

    # -- scope ---------------------------------------------------------------------
    def action_refresh_scope(self) -> None:
        self.compute(self.app.identity_id)
        if len(self._marked) == 2:
            self._explain_marked()

    @work(thread=True, exclusive=True, exit_on_error=False, group="scope")
    def compute(self, identity_id: str | None) -> None:
        report, contract = adapter.scope_and_contract(self.app.paths, identity_id)
        runs = adapter.recent_runs(self.app.paths)
        self.post_message(self.ScopeComputed(identity_id, report, contract, runs))

    @on(ScopeComputed)
    def scope_computed(self, message: ScopeComputed) -> None:
        if message.identity_id != self.app.identity_id:
            # computed for an identity read before the current one (a thread worker is not stopped by
            # its successor, so its answer can arrive last): the newer computation draws the screen
            return
        self._show_runs(message.runs, message.identity_id)
        chart = self.query_one("#chart", RateChart)
        if message.report is None:
            self.query_one("#statement", Static).update(
                Text("– no pinned identity: pin one on the Identity step (2); a licence belongs to one identity.")
            )
            chart.rates = tuple(AxisRate(axis) for axis in adapter.scope_axes())
            self._contract = ""
            self.query_one("#contract", Static).update(Text("(pin an identity first)", style="dim"))
            self.refresh_bindings()
            return
        report = message.report
        self.query_one("#statement", Static).update(report.statement)
        rates = []
        for axis in adapter.scope_axes():
            measure = report.measured.get(axis)
            if measure is None:
                rates.append(AxisRate(axis))
            else:
                rates.append(AxisRate(axis, measure.m, measure.n, tuple(measure.ci95) if measure.ci95 else None))
        chart.rates = tuple(rates)
        self._contract = message.contract
        self.query_one("#contract", Static).update(Text(message.contract))
        self.refresh_bindings()

    # -- runs ---------------------------------------------------------------------------
    def _show_runs(self, runs: list[Any], identity_id: str | None) -> None:
        options = self.query_one("#runs", OptionList)
        selected = options.highlighted_option.id if options.highlighted_option is not None else None
        self._runs, self._runs_identity = list(runs), identity_id
        ids = [run.id for run in runs]
        self._marked = [run_id for run_id in self._marked if run_id in ids]  # a run no longer listed: unmarked
        options.clear_options()
        explain = self.query_one("#explain", Static)
        if not runs:
            options.add_option(Option("– no run recorded yet: execsys run -- <your harness command>", disabled=True))
            self.query_one("#run-detail", Static).update("")
            explain.display = False
            return
        for run in runs:
            options.add_option(Option(self._run_prompt(run), id=run.id))
        options.highlighted = ids.index(selected) if selected in ids else 0
        explain.display = True
        if len(self._marked) < 2:  # two marked: their explanation stays (ctrl+r explains them again)
            self._show_explain_hint()

    def _run_prompt(self, run: Any) -> Text:
        """One run's line: its mark (A or B) when marked, its verdict with a symbol, id, result count."""
        identity_id = self._runs_identity
        other = "" if identity_id is None or run.identity == identity_id else \
            f" · identity {str(run.identity or 'none')[:12]} (not this one)"
        line = Text()
        if run.id in self._marked:
            line.append(f"{MARKS[self._marked.index(run.id)]}: ", style="bold reverse")
        line.append(f"{VERDICT_SYMBOLS.get(run.verdict, '?')} {run.verdict:<11} {run.id} · "
                    f"{run.results} result{'s' if run.results != 1 else ''}{other}")
        return line

    @on(RunList.MarkToggled)
    def _mark_toggled(self, message: RunList.MarkToggled) -> None:
        run_id = message.run_id
        if run_id in self._marked:
            self._marked.remove(run_id)
        else:
            self._marked = [*self._marked, run_id][-2:]  # a third mark: the last B becomes the new A
        options = self.query_one("#runs", OptionList)
        for run in self._runs:
            options.replace_option_prompt(run.id, self._run_prompt(run))
        if len(self._marked) == 2:
            self._explain_marked()
        else:
            self._show_explain_hint()

    def _show_explain_hint(self) -> None:
        self.workers.cancel_group(self, "explain")
        text = Text()
        if self._marked:
            text.append(f"A: {self._marked[0]}", style="bold")
            text.append(" · space on another run marks it B: explain says why their scores differ")
        else:
            text.append("space marks a run A, then another B: explain says why their scores differ", style="dim")
        self.query_one("#explain", Static).update(text)

    def _explain_marked(self) -> None:
        a, b = self._marked
        self.query_one("#explain", Static).update(Text(f"… explaining A {a} against B {b}"))
        self.explain_pair(a, b)

    @work(thread=True, exclusive=True, exit_on_error=False, group="explain")
    def explain_pair(self, a: str, b: str) -> None:
        try:
            report, problem = adapter.explain_runs(self.app.paths, a, b), None
        except ExecsysError as error:  # two runs explain cannot pair (no result, no shared case): said, not a crash
            report, problem = None, error_line(error)
        self.post_message(self.Explained((a, b), report, problem))

    @on(Explained)
    def explained(self, message: Explained) -> None:
        if list(message.pair) != self._marked:  # the marks changed since: a newer explanation follows
            return
        explain = self.query_one("#explain", Static)
        a, b = message.pair
        if message.report is None:
            explain.update(Text(f"✗ explain A {a} B {b}: {message.problem}"))
        else:
            explain.update(explain_text(a, b, adapter.explain_lines(message.report), message.report.verdict))
        body = self.query_one("#scope-body", VerticalScroll)
        # the verdict in view (below the fold at 80x24), after the layout that sized it
        self.call_after_refresh(lambda: body.call_after_refresh(body.scroll_to_widget, explain, top=True,
                                                                animate=False))

    @on(OptionList.OptionHighlighted, "#runs")
    def _run_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.read_run(event.option.id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="run-detail")
    def read_run(self, run_id: str) -> None:
        self.post_message(self.RunRead(run_id, adapter.body_of_run(self.app.paths, run_id)))

    @on(RunRead)
    def run_read(self, message: RunRead) -> None:
        self.query_one("#run-detail", Static).update(detail_text_of_run(message.run_id, message.body))

    # -- contract ---------------------------------------------------------------------
    @on(Button.Pressed, "#save-contract")
    def action_save_contract(self) -> None:
        if not self._contract:
            self.notify("Nothing to save yet: pin an identity first.", severity="warning")
            return
        path = self.query_one("#contract-path", Input).value.strip()
        if not path:
            self.notify("Give a file name for the contract.", severity="warning")
            return
        written = adapter.save_text(path, self._contract)
        self.notify(f"Saved the contract section to {written}", title="Contract")

    # -- plan -----------------------------------------------------------------------
    @on(Button.Pressed, "#register")
    def action_register_plan(self) -> None:
        arms = [self.query_one(f"#arm-{x}", Input).value.strip() for x in ("a", "b")]
        cases = self.query_one("#plan-cases", Input).value.strip()
        seed_text = self.query_one("#seed", Input).value.strip() or "0"
        design = str(self.query_one("#design", Select).value)
        out = self.query_one("#plan-out", Input).value.strip() or None
        if not all(arms) or not cases:
            self.notify("A plan needs two arm names and a cases file.", title="Not registered", severity="warning")
            return
        if arms[0] == arms[1]:
            self.notify("The two arms need different names.", title="Not registered", severity="warning")
            return
        self.with_gate(lambda override: self.register(arms, cases, design, int(seed_text), out, override))

    @work(thread=True, exclusive=True, exit_on_error=False, group="plan")
    def register(self, arms: list[str], cases: str, design: str, seed: int, out: str | None,
                 override: dict[str, Any] | None) -> None:
        plan, record_id = adapter.register_plan(self.app.paths, arms=arms, cases=cases, design=design, seed=seed,
                                               out=out, identity_id=self.app.identity_id, override=override)
        self.post_message(self.PlanRegistered(plan, record_id, out))

    @on(PlanRegistered)
    def plan_registered(self, message: PlanRegistered) -> None:
        plan = message.plan
        order = plan.get("order") or []
        firsts: dict[str, int] = {}
        for item in order:
            firsts[item.get("first")] = firsts.get(item.get("first"), 0) + 1
        balance = ", ".join(f"{arm} first in {count}" for arm, count in sorted(firsts.items()))
        text = Text()
        text.append(f"✓ registered {message.record_id}", style="bold")
        text.append(f"\n  digest {str(plan.get('digest', ''))[:16]} · {len(order)} cases · {balance}")
        if message.out:
            arms = list(plan["arms"])
            self._registered = (message.out, arms)
            text.append(f"\n  written to {message.out}. Run it here: give each arm's endpoint below, then "
                        "ctrl+n; or in a shell (URL: each arm's endpoint, e.g. http://127.0.0.1:8001/v1):\n")
            text.append(f"  {adapter.plan_run_command(self.app.paths, message.out, arms)}", style="bold")
            self.query_one("#url-a", Input).placeholder = f"e.g. http://127.0.0.1:8001/v1 ({arms[0]})"
            self.query_one("#url-b", Input).placeholder = f"e.g. http://127.0.0.1:8002/v1 ({arms[1]})"
        else:
            self._registered = None
            text.append("\n  not written to a file: `execsys plan run` reads the plan from one (give 'save plan to')")
        self.query_one("#plan-result", Static).update(text)
        self.query_one("#run-plan", Button).disabled = self._registered is None or self.plan_running
        self.refresh_bindings()

    # -- running the registered plan --------------------------------------------------------
    @on(Button.Pressed, "#run-plan")
    def action_run_plan(self) -> None:
        if self.plan_running:
            self.notify("The plan is running; Esc stops it after the case in hand.", severity="warning")
            return
        if self._registered is None:
            self.notify("Register a plan and save it to a file first (ctrl+g).", title="Nothing to run",
                        severity="warning")
            return
        plan_file, arms = self._registered
        urls = [self.query_one(f"#url-{x}", Input).value.strip() for x in ("a", "b")]
        if not all(urls):
            self.notify(f"Give each arm's endpoint ({arms[0]} and {arms[1]}) on the 'endpoints' row.",
                        title="Not started", severity="warning")
            return
        endpoints = dict(zip(arms, urls, strict=True))
        self.with_gate(lambda override: self._start_plan_run(plan_file, endpoints, override))

    def _start_plan_run(self, plan_file: str, endpoints: dict[str, str], override: dict[str, Any] | None) -> None:
        self._plan_run += 1
        self.plan_running = True
        self.query_one("#run-plan", Button).disabled = True
        bar = self.query_one("#plan-run-progress", ProgressBar)
        bar.update(total=None, progress=0)
        bar.display = True
        self.query_one("#plan-run-result", Static).update("")
        self._set_run_status(f"starting {plan_file}: checking where each arm runs … (Esc stops it)")
        self.query_one("#plan-run-status", Static).scroll_visible(animate=False)
        self.refresh_bindings()
        self.run_plan(self._plan_run, plan_file, endpoints, override)

    @work(thread=True, exclusive=True, exit_on_error=False, group="plan-run")
    def run_plan(self, run: int, plan_file: str, endpoints: dict[str, str], override: dict[str, Any] | None) -> None:
        worker = get_current_worker()

        def forward(event: Any) -> None:
            self.post_message(self.PlanRunEvent(run, event))

        report = adapter.run_registered_plan(self.app.paths, plan_file, endpoints, override=override,
                                             on_event=forward, cancel=worker.cancelled_event)
        self.post_message(self.PlanRunFinished(run, report))

    @on(PlanRunEvent)
    def plan_run_event(self, message: PlanRunEvent) -> None:
        if message.run != self._plan_run:
            return
        from execsys.plan import (  # not at import: the plan engine is not needed before the first paint
            ArmAnswered,
            ArmSystemDiffers,
            CaseSent,
            NoPinnedIdentity,
            PairScored,
            PlacementChecked,
            RestartSeen,
            WindowOpened,
        )

        event = message.event
        bar = self.query_one("#plan-run-progress", ProgressBar)
        if isinstance(event, PlacementChecked):
            failed = [c.name for c in event.checks if not c.passed]
            where = f"{event.arm} on {event.host}" + (f": ✗ {', '.join(failed)}" if failed else "")
            self._set_run_status(f"placement {where} … (Esc stops it)")
        elif isinstance(event, NoPinnedIdentity):
            self._set_run_status(f"! {event.reason}")
        elif isinstance(event, WindowOpened):
            bar.update(total=2 * event.cases, progress=0)
            self._set_run_status(f"window open: {event.cases} cases on both arms … (Esc stops after the case in hand)")
        elif isinstance(event, CaseSent):
            self._set_run_status(f"case {event.case_id}: {event.arm} ({event.position}) … step {event.step} of "
                                 f"{event.total} (Esc stops after this case)")
        elif isinstance(event, ArmAnswered):
            bar.update(total=event.total, progress=event.step)
        elif isinstance(event, PairScored):
            self._set_run_status(f"case {event.case_id} scored: {event.n} pairs so far, discordant {event.b} / "
                                 f"{event.c}{' · ? this pair errored (excluded)' if event.errored else ''}")
        elif isinstance(event, RestartSeen):
            self._set_run_status(f"! {event.arm}: {event.reason}")
        elif isinstance(event, ArmSystemDiffers):  # that arm will count toward no identity
            self._set_run_status(f"! {event.message}")

    @on(PlanRunFinished)
    def plan_run_finished(self, message: PlanRunFinished) -> None:
        if message.run != self._plan_run:
            return
        self._plan_run_over()
        result = self.query_one("#plan-run-result", Static)
        result.update(plan_run_text(message.report))
        # the outcome in view, from its status line down (it is below the fold at 80x24)
        status = self.query_one("#plan-run-status", Static)
        body = self.query_one("#scope-body", VerticalScroll)
        # after the layout that sized the result (a scroll before it stops at the old virtual height)
        self.call_after_refresh(lambda: body.call_after_refresh(body.scroll_to_widget, status, top=True, animate=False))
        self._set_run_status("cancelled: stopped after the case in hand" if message.report.cancelled
                             else f"finished: {message.report.label}")
        self.app.refresh_session_facts()

    def action_cancel_plan_run(self) -> None:
        if self.plan_running:
            self.workers.cancel_group(self, "plan-run")
            self._set_run_status("stopping after the case in hand … (what ran is kept in the executed log)")

    def _plan_run_over(self) -> None:
        self.plan_running = False
        self.query_one("#run-plan", Button).disabled = self._registered is None
        self.refresh_bindings()

    def _set_run_status(self, line: str) -> None:
        self.query_one("#plan-run-status", Static).update(Text(line))

    def worker_failed(self, worker: Worker) -> None:
        if worker.group == "plan-run":
            self._plan_run_over()
            self.query_one("#plan-run-progress", ProgressBar).display = False
            self._set_run_status(f"✗ the plan run stopped: {error_line(worker.error)}")
        elif worker.group == "plan":
            self.query_one("#plan-result", Static).update(Text(f"✗ not registered: {error_line(worker.error)}"))
        elif worker.group == "explain":
            self.query_one("#explain", Static).update(Text(f"✗ explain stopped: {error_line(worker.error)}"))
        elif worker.group == "scope":
            self.query_one("#statement", Static).update(Text(f"? the scope could not be read: "
                                                             f"{error_line(worker.error)}; ctrl+r tries again"))

    def offers(self, action: str) -> bool:
        if action == "save_contract":  # a contract to save once there is one
            return bool(self._contract)
        if action == "run_plan":  # a registered plan, saved to a file, not running yet
            return self._registered is not None and not self.plan_running
        if action == "cancel_plan_run":
            return self.plan_running
        return super().offers(action)


VERDICT_SYMBOLS = {"clean": "✓", "drifted": "≠", "overridden": "!", "failed": "✗", "interrupted": "–", "refused": "✗"}
"""A symbol beside each run's verdict word (never colour alone)."""


EXPLAIN_SYMBOLS = {"within-measured-noise": "✓", "attributable": "≠", "not-attributable": "!", "unmeasured": "?"}
"""A symbol beside explain's verdict word (never colour alone)."""


def explain_text(a: str, b: str, lines: list[tuple[str, str]], verdict: str) -> Text:
    """``execsys explain A B`` for two marked runs: the one-sentence verdict first, then what moved, the
    flips, each axis's noise floor, the margins, the caveats and the plans that would separate the causes,
    in the CLI's words (``lines``: :func:`execsys.explain.report_lines`)."""
    text = Text()
    text.append(f"explain A {a} · B {b}", style="bold")
    for kind, line in lines:
        if kind == "verdict":
            text.append(f"\n{EXPLAIN_SYMBOLS.get(verdict, '?')} ", style="bold")
            text.append(verdict, style="bold")
            text.append(line[len(verdict):])
    for kind, line in lines:
        if kind != "verdict":
            text.append(f"\n  {line}", style="dim" if kind == "caveat" else "")
    return text


def plan_run_text(report: PlanRun) -> Text:
    """A finished (or cancelled) plan run: its label, the checks each with a symbol, the sentence, where it is."""
    text = Text()
    if report.cancelled:
        ran = sum(1 for arms in report.outcomes.values() if len(arms) == len(report.plan.arms))
        text.append(f"– cancelled after {ran} of {len(report.plan.order)} cases (both arms each): "
                    "recorded as descriptive", style="bold")
    elif report.label == "causal":
        text.append("✓ causal", style="bold")
    else:
        text.append("! descriptive", style="bold")
    for check in report.checks:
        text.append(f"\n  {'✓' if check.passed else '✗'} {check.name:<16} {check.detail}")
    text.append(f"\n{report.statement}")
    text.append(f"\nrecorded {report.record}" + (f"; executed log {report.log}" if report.log else ""), style="dim")
    return text


def detail_text_of_run(run_id: str, body: dict[str, Any]) -> Text:
    """The selected run: its verdict sentence, each field that drifted once (what moved, how many events,
    when), each result file with its digest."""
    text = Text()
    verdict = str(body.get("verdict") or "?")
    text.append(f"{VERDICT_SYMBOLS.get(verdict, '?')} {run_id}: ", style="bold")
    text.append(str(body.get("verdict_detail") or verdict))
    from execsys.run.drift import summary_lines

    drift = list(body.get("drift") or [])
    text.append(f"\nDrift during the run: {f'{len(drift)} event(s)' if drift else 'none'}", style="bold")
    for line in summary_lines(drift):  # each change once, as a delta: one restart is many events
        text.append(f"\n  ≠ {line}")
    results = list(body.get("results") or [])
    text.append(f"\nResult files: {len(results) or 'none'}", style="bold")
    for result in results:
        digest = str(result.get("blake3") or "")[:16]
        text.append(f"\n  {result.get('path', '?')}" + (f"  blake3 {digest}…" if digest else ""))
    return text
