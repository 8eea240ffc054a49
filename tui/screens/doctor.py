"""Step 1, Doctor: the registry's hazards checked live, host by host, side by side.

The checks run in a thread worker that calls the doctor engine; each finished hazard arrives as
a ``HazardChecked`` message and fills its cell, so the table fills in while slower checks (SSH,
timeouts) are still running. Select a cell for its evidence and fix; re-run one hazard or all;
add remote hosts to see them beside this machine. Each finished run is stored in the ledger.
A declaration that declares commands and is not trusted (``execsys trust``) has them skipped; a
line above the table says so and ``t`` offers to trust it.
"""

from __future__ import annotations

from typing import Any

from execsys.tui import adapter
from execsys.tui.screens.base import StepScreen, error_line
from execsys.tui.screens.dialogs import AddHostDialog, TrustDialog
from execsys.tui.state import LOCAL, STATUS_ORDER
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static
from textual.worker import Worker, get_current_worker

from execsys.console import STYLES, SYMBOLS
from execsys.termsafe import shown

CURSOR_MARK = "▸ "
"""Marks the selected hazard's row in text, so the selection shows without colour (NO_COLOR, monochrome)."""
# the longest hazard id with the cursor mark, so a new hazard's id is never cut
HAZARD_COLUMN_WIDTH = len(CURSOR_MARK) + max(len(hazard_id) for hazard_id, _title in adapter.hazard_list())


class DoctorScreen(StepScreen):
    STEP = "doctor"
    CSS_PATH = "doctor.tcss"
    BINDINGS = [
        Binding("r", "rerun_one", "Re-run"),
        Binding("R", "rerun_all", "Re-run all", key_display="R"),
        Binding("a", "add_host", "Add host"),
        Binding("x", "remove_host", "Remove host"),
        Binding("t", "trust", "Trust declaration"),
        Binding("escape", "cancel", "Stop"),
    ]

    class HazardChecked(Message):
        """One hazard finished on one host."""

        def __init__(self, run: int, host: str, result: Any) -> None:
            super().__init__()
            self.run, self.host, self.result = run, host, result

    class DoctorFinished(Message):
        """A doctor run finished and was recorded (``record_id``) in the ledger."""

        def __init__(self, run: int, report: Any, record_id: str | None) -> None:
            super().__init__()
            self.run, self.report, self.record_id = run, report, record_id

    def __init__(self) -> None:
        super().__init__()
        self._run = 0
        self._pending: set[tuple[str, str]] = set()
        self._hazards: list[tuple[str, str]] = []
        self._cancelling: int | None = None  # the run Esc stopped: its abandoned checks are cancelled, not errors
        self.untrusted: Any = None  # adapter.UntrustedDeclaration while the declaration's commands are withheld

    def compose_body(self) -> ComposeResult:
        with Vertical(classes="step-body"):
            yield Static("", id="trust-line", classes="muted")
            yield DataTable(id="hazards", cursor_type="cell", zebra_stripes=False)
            yield Static("", id="doctor-status", classes="muted")
            with VerticalScroll(id="detail-scroll"):
                yield Static("Select a hazard to see its evidence and fix.", id="detail")

    class DeclaredHosts(Message):
        """The remote hosts the declaration names, read after the first paint."""

        def __init__(self, hosts: list[str], untrusted: Any = None) -> None:
            super().__init__()
            self.hosts = hosts
            self.untrusted = untrusted

    def has_first_content(self) -> bool:
        table = self.query_one("#hazards", DataTable)
        return bool(self._hazards) and table.row_count == len(self._hazards) and table.size.height > 0

    def on_mount(self) -> None:
        self._hazards = adapter.hazard_list()
        self.state.hazard_ids = [hazard_id for hazard_id, _ in self._hazards]
        self.query_one("#trust-line", Static).display = False
        self._build_table()
        self.query_one("#hazards", DataTable).focus()
        # Paint the table first, then read the declaration (loading it brings in the doctor's engine,
        # a third of a second on a loaded machine) and start checking: the first screen waits on neither.
        self.call_after_refresh(self.read_declared_hosts)

    @work(thread=True, exit_on_error=False, group="declared-hosts")
    def read_declared_hosts(self) -> None:
        self.post_message(self.DeclaredHosts(adapter.declared_doctor_hosts(self.app.paths),
                                             adapter.untrusted_declaration(self.app.paths)))

    @on(DeclaredHosts)
    def declared_hosts(self, message: DeclaredHosts) -> None:
        self._set_untrusted(message.untrusted)
        added = [host for host in message.hosts if host not in self.state.hosts and host not in self.state.removed]
        if added:
            self.state.hosts.extend(added)
            self._build_table()
        if self.app.autostart and not self.state.running and not self.state.finished_once:
            self.action_rerun_all()

    def on_resize(self) -> None:
        if self.is_mounted:
            self._build_table()

    # -- state ------------------------------------------------------------
    @property
    def state(self):
        return self.app.doctor

    def _remote_hosts(self) -> list[str]:
        return [h for h in self.state.hosts if h != LOCAL]

    def _start(self, hosts: list[str], only: list[str] | None, include_local: bool = True) -> None:
        self._run += 1
        ids = only or [hazard_id for hazard_id, _ in self._hazards]
        checked = [LOCAL, *hosts] if include_local else list(hosts)
        for host in checked:
            for hazard_id in ids:
                self._pending.add((host, hazard_id))
                self.state.cancelled.discard((host, hazard_id))
        self._cancelling = None
        self.state.last_run_cancelled = False
        self.state.running = True
        self.app.doctor_changed()
        self.refresh_bindings()
        self._refresh_cells()
        self._set_status(f"checking {len(ids)} hazard{'s' if len(ids) != 1 else ''} on "
                         f"{', '.join(checked)} … (Esc stops)")
        self.check(self._run, hosts, only, include_local)

    @work(thread=True, exclusive=True, exit_on_error=False, group="doctor")
    def check(self, run: int, hosts: list[str], only: list[str] | None, include_local: bool = True) -> None:
        """Run the doctor engine; results arrive as messages while the rest still run."""
        from execsys.doctor.runner import HazardChecked

        worker = get_current_worker()
        remote = set(hosts)

        def on_event(event: object) -> None:
            if isinstance(event, HazardChecked):
                self.post_message(self.HazardChecked(run, event.host if event.host in remote else LOCAL,
                                                     event.result))

        options = adapter.doctor_options(self.app.paths, hosts, only)
        report = adapter.run_doctor(options, on_event, worker.cancelled_event, include_local=include_local)
        record_id = None if worker.is_cancelled else adapter.record_doctor(self.app.paths, report)
        self.post_message(self.DoctorFinished(run, report, record_id))

    @on(HazardChecked)
    def hazard_checked(self, message: HazardChecked) -> None:
        self._pending.discard((message.host, message.result.id))
        if message.host not in self.state.hosts:
            return  # a host removed while the run still checked it
        if self._was_cancelled(message.run, message.result):
            self.state.cancelled.add((message.host, message.result.id))
        else:
            self.state.results.setdefault(message.host, {})[message.result.id] = message.result
        self._refresh_cells()
        self._show_detail()

    @on(DoctorFinished)
    def doctor_finished(self, message: DoctorFinished) -> None:
        if message.run != self._run:
            return  # a superseded run: its results were already shown, its verdict is not the current one
        self._pending.clear()
        self.state.running = False
        self.state.finished_once = True
        cancelled = message.run == self._cancelling
        # The report is authoritative: it also carries hosts that could not be inspected at all. A stopped
        # run's abandoned checks say nothing about the system: the earlier results stay, marked cancelled.
        for host_report in getattr(message.report, "hosts", []):
            if host_report.name in self.state.removed:
                continue  # removed while the run checked it: its report is not this machine's
            name = host_report.name if host_report.name in self.state.hosts else LOCAL
            if not cancelled:
                if host_report.error:
                    self.state.host_errors[name] = host_report.error
                else:
                    self.state.host_errors.pop(name, None)
            for result in host_report.hazards:
                if self._was_cancelled(message.run, result):
                    self.state.cancelled.add((name, result.id))
                else:
                    self.state.results.setdefault(name, {})[result.id] = result
        self.state.last_run_cancelled = cancelled
        if message.record_id:
            self.state.report_ids.append(message.record_id)
        self.app.doctor_changed()
        self._refresh_cells()
        self.refresh_bindings()
        self._summarise()

    def _was_cancelled(self, run: int, result: Any) -> bool:
        """A check the operator's Esc abandoned (the engine reports it as an error: it did not finish)."""
        return run == self._cancelling and result.status == "error"

    def _summarise(self) -> None:
        """The status line: the verdict and the counts for the hosts shown now."""
        counts = _count(self.state.results, self.state.hosts)
        unreachable = self.state.unreachable_hosts()
        if unreachable:  # the header counts them too (DoctorState.blocking_summary): the same words here
            counts += (", " if counts else "") + f"{SYMBOLS['error']} {len(unreachable)} host" \
                      f"{'s' if len(unreachable) != 1 else ''} unreachable"
        verdict = self.state.verdict()
        symbol = {"clean": SYMBOLS["ok"], "cancelled": "–", "incomplete": "?"}.get(verdict, SYMBOLS["fail"])
        line = f"{symbol} {verdict}: {counts}" if counts else f"{symbol} {verdict}"
        stopped = sorted(self.state.cancelled)
        if self.state.last_run_cancelled and stopped:
            line += (f" · – cancelled: {len(stopped)} check{'s' if len(stopped) != 1 else ''} stopped before "
                     "finishing (earlier results kept; R checks again)")
        self._set_status(line)

    def worker_failed(self, worker: Worker) -> None:
        if worker.group != "doctor":
            return
        self._pending.clear()
        self.state.running = False
        self.app.doctor_changed()
        self._refresh_cells()
        self.refresh_bindings()
        self._set_status(f"? the doctor run failed: {error_line(worker.error)}; R runs it again")

    # -- rendering ------------------------------------------------------------
    def _build_table(self) -> None:
        table = self.query_one("#hazards", DataTable)
        cursor = table.cursor_coordinate
        table.clear(columns=True)
        hosts = self.state.hosts
        usable = max(20, (self.size.width or 80) - HAZARD_COLUMN_WIDTH - 4)
        per_host = max(10, usable // max(1, len(hosts)) - 2)
        selected_column = cursor.column if 0 <= cursor.column <= len(hosts) else 0
        table.add_column(self._column_label("Hazard", selected_column == 0), key="hazard", width=HAZARD_COLUMN_WIDTH)
        for index, host in enumerate(hosts, start=1):
            table.add_column(self._column_label(host, selected_column == index), key=host, width=per_host)
        selected_row = cursor.row if 0 <= cursor.row < len(self._hazards) else 0
        for row, (hazard_id, _title) in enumerate(self._hazards):
            cells: list[Any] = [self._hazard_label(hazard_id, row == selected_row)]
            for host in hosts:
                cells.append(self._cell(host, hazard_id))
            table.add_row(*cells, key=hazard_id)
        if table.row_count:
            table.cursor_coordinate = cursor

    def _refresh_cells(self) -> None:
        """Update cells in place (no rebuild): the cursor and scroll position stay where the operator left them."""
        table = self.query_one("#hazards", DataTable)
        if len(table.columns) != len(self.state.hosts) + 1:
            self._build_table()
            return
        for hazard_id, _title in self._hazards:
            for host in self.state.hosts:
                table.update_cell(hazard_id, host, self._cell(host, hazard_id))

    def _hazard_label(self, hazard_id: str, selected: bool) -> Text:
        if selected:
            return Text(f"{CURSOR_MARK}{hazard_id}", style="bold")
        return Text(f"{' ' * len(CURSOR_MARK)}{hazard_id}")

    @staticmethod
    def _column_label(name: str, selected: bool) -> Text:
        """A column's heading, ``▸ name`` over the selected cell's column: with the row's ▸ it names the
        cell under the cursor in text (NO_COLOR, monochrome), not only by the cursor's colour."""
        return Text(f"{CURSOR_MARK}{name}", style="bold") if selected else Text(f"{' ' * len(CURSOR_MARK)}{name}")

    def _mark_column(self, column: int) -> None:
        table = self.query_one("#hazards", DataTable)
        names = ["Hazard", *self.state.hosts]
        for index, heading in enumerate(table.columns.values()):
            if index < len(names):
                heading.label = self._column_label(names[index], index == column)
        table.refresh()

    def _mark_row(self, row: int) -> None:
        """Move the ▸ to ``row``: the selection is readable in monochrome, not only as a coloured cell."""
        table = self.query_one("#hazards", DataTable)
        for index, (hazard_id, _title) in enumerate(self._hazards):
            if index < table.row_count:
                table.update_cell(hazard_id, "hazard", self._hazard_label(hazard_id, index == row))

    def _cell(self, host: str, hazard_id: str) -> Text:
        if (host, hazard_id) in self._pending:
            return Text("… checking", style="italic")
        result = self.state.results.get(host, {}).get(hazard_id)
        if (host, hazard_id) in self.state.cancelled:
            was = f" (was {SYMBOLS.get(result.status, '?')} {result.status})" if result is not None else ""
            return Text(f"– cancelled{was}", style="dim")
        if result is None and host in self.state.host_errors:
            return Text(f"? {self.state.host_errors[host]}", style=STYLES["error"])
        if result is None:
            return Text("– not checked", style="dim")
        return Text(f"{SYMBOLS.get(result.status, '?')} {result.summary}", style=STYLES.get(result.status, ""))

    def _selected(self) -> tuple[str, str] | None:
        table = self.query_one("#hazards", DataTable)
        if not table.row_count:
            return None
        row, column = table.cursor_coordinate
        hosts = self.state.hosts
        host = hosts[column - 1] if 1 <= column <= len(hosts) else hosts[0]
        return host, self._hazards[row][0]

    @on(DataTable.CellHighlighted)
    def _cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        self._mark_row(event.coordinate.row)
        self._mark_column(event.coordinate.column)
        self._show_detail()

    def _show_detail(self) -> None:
        selected = self._selected()
        if selected is None:
            return
        host, hazard_id = selected
        self.query_one("#detail", Static).update(self.detail_text(host, hazard_id))

    def detail_text(self, host: str, hazard_id: str) -> Text:
        """The detail pane for one cell: "<id> — <title> · on <host>", the status, evidence and fix."""
        title = dict(self._hazards).get(hazard_id, hazard_id)
        text = Text()
        text.append(f"{hazard_id}", style="bold")
        if title != hazard_id:
            text.append(f" — {title}")
        text.append(f" · on {host}\n")
        result = self.state.results.get(host, {}).get(hazard_id)
        if (host, hazard_id) in self._pending:
            text.append("… checking", style="italic")
        elif (host, hazard_id) in self.state.cancelled and result is None:
            text.append("– cancelled: the check was stopped (Esc) before it finished; r checks it again", style="dim")
        elif result is None and host in self.state.host_errors:
            text.append(f"? {host} could not be inspected: {self.state.host_errors[host]}", style="bold")
        elif result is None:
            text.append("– not checked on this host yet (R checks every hazard)", style="dim")
        else:
            text.append(f"{SYMBOLS.get(result.status, '?')} {result.status}: ", style=f"bold {STYLES.get(result.status, '')}")
            text.append(f"{shown(result.summary)}\n")
            if (host, hazard_id) in self.state.cancelled:
                text.append("– the last re-run of this check was cancelled; this is the earlier result\n", style="dim")
            fix = getattr(result, "fix", None)
            if fix:  # right under the problem, above the fold (flutter doctor's order)
                text.append("\nFix\n", style="bold underline")
                text.append(f"  {fix}\n")
            evidence = list(getattr(result, "evidence", None) or [])
            if evidence:
                text.append("\nEvidence\n", style="bold underline")
                for line in evidence:
                    text.append(f"  {shown(line)}\n")  # PATH entries, argv, file names: another's text
            findings = list(getattr(result, "findings", None) or [])
            if findings:
                # the ids are what [doctor] accept takes; an accepted finding is shown, marked, never hidden
                text.append("\nFindings\n", style="bold underline")
                for finding in findings:
                    mark = "accepted" if finding.accepted else finding.level
                    text.append(f"  {SYMBOLS.get('ok' if finding.accepted else finding.level, '?')} {finding.id}"
                                f" ({mark})\n")
        return text

    def _set_status(self, line: str) -> None:
        self.query_one("#doctor-status", Static).update(line)

    # -- actions ---------------------------------------------------------------
    def action_rerun_all(self) -> None:
        self._start(self._remote_hosts(), None)

    def action_rerun_one(self) -> None:
        selected = self._selected()
        if selected is None:
            return
        host, hazard_id = selected
        if host == LOCAL:
            self._start([], [hazard_id])
        else:  # only that host's cell: this machine's result stays as it was
            self._start([host], [hazard_id], include_local=False)

    def action_add_host(self) -> None:
        def added(host: str | None) -> None:
            if not host or host in self.state.hosts:
                return
            self.state.removed.discard(host)  # added back by hand
            self.state.hosts.append(host)
            self.app.doctor_changed()
            self._start(self._remote_hosts(), None)

        self.app.push_screen(AddHostDialog(), added)

    def _set_untrusted(self, untrusted: Any) -> None:
        self.untrusted = untrusted
        line = self.query_one("#trust-line", Static)
        line.display = untrusted is not None
        if untrusted is not None:
            line.update(Text(f"{SYMBOLS['skip']} {untrusted.line}: its declared commands are not run "
                             f"({', '.join(dict.fromkeys(key for key, _ in untrusted.commands))}); t trusts it",
                             style="bold"))
        self.refresh_bindings()

    def action_trust(self) -> None:
        untrusted = self.untrusted
        if untrusted is None:
            return

        def decided(yes: bool | None) -> None:
            if not yes:
                return
            adapter.trust_declaration(untrusted)
            self._set_untrusted(None)
            self.notify(f"trusted {untrusted.path}: its declared commands run from now on")
            self._start(self._remote_hosts(), None)

        self.app.push_screen(TrustDialog(str(untrusted.path), untrusted.line, untrusted.commands), decided)

    def action_remove_host(self) -> None:
        selected = self._selected()
        if selected is None or selected[0] == LOCAL:
            self.notify("Select a remote host's column to remove it (this machine always stays).")
            return
        host = selected[0]
        self.state.hosts.remove(host)
        self.state.removed.add(host)
        self._pending = {(h, hazard) for h, hazard in self._pending if h != host}
        self.state.results.pop(host, None)
        self.state.host_errors.pop(host, None)
        self.app.doctor_changed()
        self._build_table()
        self.refresh_bindings()
        if not self.state.running:
            self._summarise()  # the counts and verdict of the hosts still shown

    def action_cancel(self) -> None:
        if self.state.running:
            self._cancelling = self._run
            self.workers.cancel_group(self, "doctor")
            self._set_status("stopping … (checks already running finish their timeout)")

    def offers(self, action: str) -> bool:
        if action == "cancel":
            return self.state.running
        if action == "remove_host":
            return bool(self._remote_hosts())
        if action == "trust":
            return self.untrusted is not None
        return super().offers(action)


def _count(results: dict[str, dict[str, Any]], hosts: list[str]) -> str:
    """``✓ 8 ok, ✗ 1 fail, ? 1 error``: each status counted over ``hosts`` (the header names the blocking
    ones with the same words, DoctorState.blocking_summary)."""
    from execsys.tui.state import DoctorState

    totals = DoctorState(hosts=list(hosts), results=results).status_counts()
    return ", ".join(f"{SYMBOLS[s]} {totals[s]} {s}" for s in STATUS_ORDER if totals.get(s))
