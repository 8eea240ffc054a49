"""Human output for probes: a progress bar per pass on stderr, then the sentence and the flips.

Kept apart from the engine so the CLI and any other face render the same record the same
way; nothing here decides anything (the record already holds the numbers and the wording).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape as _escape
from rich.table import Table

from execsys.probes.margin import sent_phrases
from execsys.probes.record import ProbeRecord
from execsys.redact import redact_text
from execsys.stats import rate_with_ci


def escape(text: str) -> str:
    """Every piece of text a probe prints: secrets redacted, then made safe for rich markup."""
    return _escape(redact_text(text))

MAX_FLIPS_SHOWN = 10


class ProgressReporter:
    """``on_event`` for :func:`execsys.probes.runner.run_probe`: rich bars on a terminal, plain lines otherwise."""

    def __init__(self, console: Console, *, live: bool):
        self.console = console
        self.live = live
        self._progress: Any = None
        self._tasks: dict[int, Any] = {}
        self._errors: dict[int, int] = {}

    def __enter__(self) -> ProgressReporter:
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("[dim]{task.fields[errors]}"), TimeElapsedColumn(),
                console=self.console, transient=False,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, event: Any) -> None:
        from execsys.probes.events import CaseDone, Note, PassFinished, PassStarted, SystemDiffers

        if isinstance(event, PassStarted):
            self._errors.setdefault(event.pass_index, 0)
            if self._progress is not None and event.pass_index in self._tasks:
                # a later round of an --until-width probe: the same pass, over more cases
                self._progress.update(self._tasks[event.pass_index], total=event.total, completed=event.done)
            elif self._progress is not None:
                self._tasks[event.pass_index] = self._progress.add_task(
                    f"pass {event.label}", total=event.total, completed=event.done, errors="")
            else:
                resumed = f" ({event.done} already done)" if event.done else ""
                self.console.print(f"pass {escape(event.label)}: {event.total} cases{resumed}")
        elif isinstance(event, CaseDone):
            if event.error:
                self._errors[event.pass_index] = self._errors.get(event.pass_index, 0) + 1
            task = self._tasks.get(event.pass_index)
            if task is not None:
                errors = self._errors.get(event.pass_index, 0)
                self._progress.update(task, completed=event.done, errors=f"{errors} errored" if errors else "")
        elif isinstance(event, PassFinished):
            if self._progress is None:
                extra = f", {event.errored} errored" if event.errored else ""
                self.console.print(f"pass {escape(event.label)}: done ({event.completed} completed{extra})")
        elif isinstance(event, SystemDiffers):
            # a warning that changes what the record counts for: one line, never wrapped
            target = self._progress.console if self._progress is not None else self.console
            target.print(f"[yellow]{escape(event.message)}[/]", soft_wrap=True)
        elif isinstance(event, Note):
            target = self._progress.console if self._progress is not None else self.console
            target.print(f"[dim]{escape(event.message)}[/]")


def render_record(record: ProbeRecord, console: Console) -> None:
    """The one sentence, the other comparison level, notes, and the flipped cases side by side."""
    style = "green" if record.exit_code == 0 else ("red" if record.exit_code == 1 else "magenta")
    console.print(f"[{style}]{escape(record.sentence)}[/]")
    other = record.compare.get("outcome") if record.compare.get("level") == "output" else record.compare.get("output")
    if other and other.get("n"):
        name = "outcome" if record.compare.get("level") == "output" else "output"
        how = f", extract {other['extract']}" if other.get("extract") else ""
        console.print(f"{name} level: {rate_with_ci(other['m'], other['n'], other.get('ci95'))}{escape(how)}")
    for note in record.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    if record.errored:
        shown = ", ".join(record.errored_cases[:10]) + (" …" if record.errored > 10 else "")
        first_error = _first_error(record)
        console.print(f"errored: {record.errored} ({escape(shown)})" + (f": {escape(first_error)}" if first_error else ""))
    if record.flipped:
        table = Table(title=f"flipped cases ({len(record.flipped)})", title_justify="left", show_edge=False)
        table.add_column("case")
        table.add_column("first divergence")
        labels = [p.get("label", str(i)) for i, p in enumerate(record.passes)] or ["A", "B"]
        shown_ids = set(record.flipped[:MAX_FLIPS_SHOWN])
        by_id = {case.id: case for case in record.cases if case.id in shown_ids}  # not every case: n may be large
        table.add_column(f"pass {labels[0]}", overflow="fold")
        table.add_column(f"pass {labels[1]}" if len(labels) == 2 else "first differing pass", overflow="fold")
        with_margins = any((case.first_divergence or {}).get("logprobs") or (case.first_divergence or {}).get("sent")
                           for case in by_id.values())
        if with_margins:
            table.add_column("why (margin at the divergent token)", overflow="fold")
        for case_id in record.flipped[:MAX_FLIPS_SHOWN]:
            case = by_id.get(case_id)
            div = (case.first_divergence if case else None) or {}
            where = []
            if div.get("char") is not None:
                where.append(f"char {div['char']}")
            if div.get("token") is not None:
                where.append(f"token {div['token']}")
            k = div.get("pass")
            if k is not None and k < len(labels) and len(labels) > 2:
                where.append(f"pass {labels[k]}")
            if not where and case is not None and case.outcome_agree is False:
                where.append("outcome")
            a, b = div.get("a"), div.get("b")
            if a is None and case is not None:
                outcomes = [str((p or {}).get("outcome")) for p in case.passes]
                a, b = outcomes[0], " / ".join(outcomes[1:])
            row = [escape(case_id), ", ".join(where) or "-", escape(repr(a)), escape(repr(b))]
            if with_margins:
                row.append(escape(why(div, labels)))
            table.add_row(*row)
        console.print(table)
        if len(record.flipped) > MAX_FLIPS_SHOWN:
            console.print(f"… and {len(record.flipped) - MAX_FLIPS_SHOWN} more (--json lists every case)")
    if record.tar_n and record.n:
        tara = f", TARa@{record.tar_n} = {record.tara:.2f}" if record.tara is not None else ""
        console.print(f"TARr@{record.tar_n} = {record.tarr:.2f}{tara} (Atil et al.: share of the {record.n} "
                      f"cases whose {record.tar_n} outputs are all identical)")
    logprobs = record.logprobs or {}
    if logprobs.get("status") == "unsupported":
        console.print("logprobs: unsupported (the endpoint gave none: flips cannot be told near-ties)")
    if record.stopped:
        console.print(escape(stopped_line(record)))
    if record.repeats > 2 and record.n:
        line = distinct_line(record)
        if line:
            console.print(line)
    console.print(f"[dim]ledger: {escape(record.id or '')} (run {escape(record.run or '')})[/]")


def distinct_line(record: ProbeRecord) -> str | None:
    """How many distinct outputs each case gave over the passes: ``3 passes: 1 distinct output per case
    (20 cases)``, or when cases differ ``3 passes: 1-3 distinct outputs per case (20 cases: 17 with 1, 2
    with 2, 1 with 3)``. Cases that errored are not counted (None when every case did)."""
    from collections import Counter

    per_case = Counter(c.distinct for c in record.cases if c.agree is not None and c.distinct)
    if not per_case:
        return None
    cases = sum(per_case.values())
    low, high = min(per_case), max(per_case)
    counted = f"{cases} case{'s' if cases != 1 else ''}"
    if low == high:
        return f"{record.repeats} passes: {low} distinct output{'s' if low != 1 else ''} per case ({counted})"
    spread = ", ".join(f"{per_case[k]} with {k}" for k in sorted(per_case))
    return f"{record.repeats} passes: {low}-{high} distinct outputs per case ({counted}: {spread})"


def top_k_text(top: list[Any] | None, limit: int = 5) -> str:
    """``'4' -0.512, '5' -0.514, ...``: one pass's top-K at the divergent token."""
    return ", ".join(f"{str(t)!r} {float(lp):.3f}" for t, lp in (top or [])[:limit]) or "-"


def sent_text(div: dict[str, Any], labels: list[str]) -> str:
    """``pass B sent after its twin; pass B in flight with 3 others``: how the passes went out."""
    return "; ".join(sent_phrases(div, labels))


def why(div: dict[str, Any], labels: list[str]) -> str:
    """The flipped-case table's last column: the verdict, the margin, both passes' top-K, the conditions."""
    margin = div.get("logprobs")
    if margin == "unsupported":
        text = "logprobs: unsupported"
    elif isinstance(margin, dict):
        bound = "≥" if margin.get("bound") != "exact" else ""
        k = div.get("pass", 1)
        text = (f"{margin['verdict']} (margin {bound}{margin['margin']:.3g} nats)\n"
                f"{labels[0]}: {top_k_text(margin.get('top_a'))}\n"
                f"{labels[k] if k < len(labels) else k}: {top_k_text(margin.get('top_b'))}")
    else:
        text = "no logprobs at the divergence"
    conditions = sent_text(div, labels)
    return text + (f"\n{conditions}" if conditions else "")


def stopped_line(record: ProbeRecord) -> str:
    stopped = record.stopped or {}
    width = stopped.get("width")
    reached = f"{width:.3f}" if isinstance(width, (int, float)) else "?"
    if stopped.get("reason") == "width":
        early = "stopped early" if stopped.get("early") else "stopped"
        return (f"{early} at n = {record.n}: the 95% interval is {reached} wide, at most --until-width "
                f"{stopped.get('until_width')}")
    if stopped.get("reason") == "max-n":
        return (f"reached --max-n {stopped.get('max_n')} before the interval was {stopped.get('until_width')} wide: "
                f"it is {reached} wide at n = {record.n}")
    return f"ran out of cases before the interval was {stopped.get('until_width')} wide: it is {reached} wide"


def _first_error(record: ProbeRecord) -> str | None:
    for case in record.cases:
        for p in case.passes:
            if p and p.get("error"):
                return str(p["error"])[:160]
    return None
