"""The grader's own reproducibility: the same outputs graded twice (or ``--repeats N``) by the declared grader.

Judges give different verdicts for the same input on different runs, and a score difference
smaller than the grader's own flip rate is not a difference between models. This probe holds
the outputs fixed -- a JSON Lines cases file of ``{id, prompt, output, expected?}`` -- and grades
each one N times through the grader the declaration names: ``[grader.judge]`` (an
OpenAI-compatible endpoint, its ``prompt`` template filled with ``{id}``, ``{prompt}``,
``{output}``, ``{expected}``) or ``[grader] command`` (one JSON object ``{id, prompt, output,
expected}`` on stdin, its verdict on stdout). Verdicts are compared exactly, or through
``--extract`` as the other probes compare outcomes (:mod:`execsys.probes.compare`).

The result is agreement m/n (a case agrees when all N verdicts are equal: TARa-style all-N
agreement) with the Wilson interval, the flipped cases with every verdict and the judge's full
reply as its rationale, and a ledger ``probe`` record with axis ``grader`` that ``scope`` states
beside the model's boundaries. Self-contained: its own small run loop, not the axis runner.

    options = GraderProbeOptions.from_sources(declaration, lock, cases="graded.jsonl", repeats=3)
    report = run_grader_probe(options, on_event=print)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execsys.declaration import Declaration
from execsys.errors import InputError, UsageError
from execsys.operation import Cancel, Event, OnEvent, emit, first_given

from .cases import Case, parse_case
from .compare import Extractor, parse_extractor

SCHEMA = "execsys.probe-grader/1"
AXIS = "grader"
DEFAULT_TIMEOUT = 120.0
DEFAULT_TEMPLATE = ("Grade the answer.\nQuestion: {prompt}\nAnswer: {output}\nReference: {expected}\n"
                    "Reply with one word: correct or incorrect.")


@dataclass(frozen=True)
class GradedCase:
    """One case to grade: the fixed output and what it should have been."""

    id: str
    prompt: str
    output: str
    expected: Any = None

    def payload(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "output": self.output, "expected": self.expected}


def load_graded_cases(path: str | os.PathLike[str]) -> list[GradedCase]:
    """``{id, prompt, output, expected?}`` per line; the probes' own case checks plus a string ``output``."""
    target = Path(path)
    try:
        lines = target.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"cases file {target}: not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cases file {target}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    cases: list[GradedCase] = []
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{target} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        case: Case = parse_case(obj, where)
        if not isinstance(obj.get("output"), str):
            raise InputError(f"{where}: case {case.id}: \"output\" (the text to grade) must be a string")
        if case.id in seen:
            raise InputError(f"{target}: case id {case.id!r} appears more than once")
        seen.add(case.id)
        prompt = case.prompt if case.prompt is not None else json.dumps(case.messages, ensure_ascii=False)
        cases.append(GradedCase(case.id, prompt, obj["output"], case.expected))
    if not cases:
        raise InputError(f"cases file {target}: no cases (expected JSON Lines with \"id\", \"prompt\" and \"output\")")
    return cases


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseGraded(Event):
    """One grading of one case (``repeat`` counting from 1 of ``repeats``)."""

    case_id: str
    repeat: int
    repeats: int
    verdict: str | None
    error: str | None
    done: int
    total: int


@dataclass(frozen=True)
class GraderProbeFinished(Event):
    m: int
    n: int
    sentence: str
    record_id: str | None


# -- options --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraderProbeOptions:
    """Which grader, which cases, how many gradings each, and where the record goes."""

    cases: Path
    via: str  # "judge" | "command"
    repeats: int = 2
    command: str | None = None
    judge: dict[str, Any] = field(default_factory=dict)
    template: str = DEFAULT_TEMPLATE
    extract: Extractor | None = None
    base_dir: Path = Path(".")
    identity: str | None = None
    n: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    ledger_path: Path | None = None
    record: bool = True

    @classmethod
    def from_sources(cls, declaration: Declaration, lock: Any = None, *, cases: str | None = None,
                     repeats: int | None = None, extract: str | None = None, via: str | None = None,
                     n: int | None = None, timeout: float | None = None, ledger: str | None = None,
                     record: bool | None = None) -> GraderProbeOptions:
        """Flags over the declaration's ``[grader]`` (and ``[probe]`` cases/extract/timeout); the lock's id."""
        from execsys.observe.grader import check_judge

        grader = declaration.component("grader")
        probe = declaration.tables.get("probe", {})
        cases_path = first_given(cases, probe.get("cases"))
        if not cases_path:
            raise UsageError("--cases FILE is required (JSON Lines: {\"id\", \"prompt\", \"output\", \"expected\"?})")
        count = first_given(repeats, 2)
        if not isinstance(count, int) or count < 2:
            raise UsageError("--repeats must be at least 2")
        if n is not None and n < 1:
            raise UsageError("--n must be at least 1")
        judge = check_judge(grader["judge"]) if grader.get("judge") else {}
        command = grader.get("command")
        chosen = first_given(via, "judge" if judge.get("endpoint") else ("command" if command else None))
        if chosen is None:
            raise UsageError("no grader declared: set [grader] command or [grader.judge] endpoint in execsys.toml")
        if chosen == "judge" and not judge.get("endpoint"):
            raise UsageError("--via judge: [grader.judge] endpoint is not declared")
        if chosen == "command" and not command:
            raise UsageError("--via command: [grader] command is not declared")
        base = Path(os.path.abspath(declaration.path)).parent if declaration.path else Path.cwd()
        template = DEFAULT_TEMPLATE
        if chosen == "judge" and judge.get("prompt"):
            from execsys.observe.artifact import resolve

            prompt_path = resolve(str(judge["prompt"]), base)
            try:
                template = prompt_path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"[grader.judge] prompt {prompt_path}: cannot read "
                                 f"({getattr(exc, 'strerror', None) or exc})") from None
        cases_file = Path(str(cases_path))
        if not cases_file.is_absolute() and cases is None:
            cases_file = base / cases_file  # declared paths resolve beside the declaration
        return cls(cases=cases_file, via=chosen, repeats=count, command=command, judge=judge, template=template,
                   extract=parse_extractor(first_given(extract, probe.get("extract"))), base_dir=base,
                   identity=getattr(lock, "id", None), n=n,
                   timeout=float(first_given(timeout, probe.get("timeout"), DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT),
                   ledger_path=Path(ledger).expanduser() if ledger else None,
                   record=bool(first_given(record, True)))


# -- grading --------------------------------------------------------------------------------------


@dataclass
class Grading:
    verdict: str | None
    reply: str | None = None  # the grader's full answer: the judge's rationale when it gives one
    error: str | None = None


def fill_template(template: str, case: GradedCase) -> str:
    """``{id}``, ``{prompt}``, ``{output}``, ``{expected}`` replaced; other braces left as written."""
    expected = case.expected if isinstance(case.expected, str) else json.dumps(case.expected, ensure_ascii=False)
    text = template
    for key, value in (("id", case.id), ("prompt", case.prompt), ("output", case.output),
                       ("expected", "" if case.expected is None else expected)):
        text = text.replace("{" + key + "}", value)
    return text


class _Grader:
    def __init__(self, options: GraderProbeOptions):
        self.options = options
        self.client: Any = None
        if options.via == "judge":
            from .client import EndpointClient

            judge = options.judge
            self.client = EndpointClient(str(judge["endpoint"]), api_key_env=judge.get("api_key_env"),
                                         timeout=options.timeout)
            self.model = self.client.resolve_model(judge.get("model"))
            self.params: dict[str, Any] = {"model": self.model, "temperature": judge.get("temperature", 0),
                                           "max_tokens": judge.get("max_tokens"), "seed": judge.get("seed")}

    def describe(self) -> dict[str, Any]:
        from execsys.redact import redact_text, redact_url

        if self.options.via == "judge":
            return {"via": "judge", "endpoint": redact_url(str(self.options.judge["endpoint"])), "model": self.model,
                    "decoding": {k: v for k, v in self.params.items() if k != "model" and v is not None}}
        return {"via": "command", "command": redact_text(str(self.options.command))}

    def grade(self, case: GradedCase) -> Grading:
        reply = self._judge(case) if self.options.via == "judge" else self._command(case)
        if reply.error is not None or reply.reply is None:
            return reply
        extract = self.options.extract
        verdict = extract(reply.reply) if extract is not None else reply.reply.strip()
        if verdict is None:
            return Grading(None, reply.reply, f"--extract {extract.spec if extract else ''} found no verdict")
        return Grading(verdict, reply.reply)

    def _judge(self, case: GradedCase) -> Grading:
        messages = [{"role": "user", "content": fill_template(self.options.template, case)}]
        completion = self.client.complete(Case(case.id, messages=messages), self.params)
        if not completion.ok:
            return Grading(None, None, completion.error or "no answer")
        return Grading(None, completion.text)

    def _command(self, case: GradedCase) -> Grading:
        from execsys.proc import run

        data = (json.dumps(case.payload(), ensure_ascii=False) + "\n").encode()
        result = run(["sh", "-c", str(self.options.command)], timeout=self.options.timeout, input=data,
                     cwd=self.options.base_dir)
        if result.ok:
            return Grading(None, result.text())
        if result.timed_out:
            return Grading(None, None, f"grader command gave no verdict within {self.options.timeout:g}s")
        tail = result.text("stderr").strip().splitlines()
        return Grading(None, None, f"grader command exited {result.returncode}" + (f": {tail[-1][:200]}" if tail else ""))

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


# -- the report -----------------------------------------------------------------------------------


def noise_sentence(m: int, n: int, repeats: int) -> str:
    """``verdicts agree 47/50 (0.94) across 2 gradings: a 6-point difference is within grader noise``."""
    from execsys.stats import wilson

    across = "2 gradings" if repeats == 2 else f"all {repeats} gradings"
    if n == 0:
        return f"no case could be graded {across}: the grader's agreement is unknown"
    rate = m / n
    low, high = wilson(m, n) or (0.0, 1.0)
    figure = f"verdicts agree {m}/{n} ({rate:.2f}, 95% CI {low:.2f}-{high:.2f}) across {across}"
    if m == n:
        return f"{figure}: every verdict repeated; score differences are not grader flips at this n"
    points = 100 * (n - m) / n
    return f"{figure}: a {points:.0f}-point score difference is within grader noise"


@dataclass
class GraderProbeReport:
    """Agreement m/n across the gradings, the flipped cases, and where it was recorded."""

    m: int
    n: int
    repeats: int
    errored: list[dict[str, Any]]
    flipped: list[dict[str, Any]]
    grader: dict[str, Any]
    cases_file: str
    identity: str | None
    sentence: str
    record_id: str | None = None

    @property
    def agreement_rate(self) -> float | None:
        return self.m / self.n if self.n else None

    @property
    def exit_code(self) -> int:
        if self.n == 0:
            return 2
        return 0 if self.m == self.n else 1

    def to_json(self) -> dict[str, Any]:
        from execsys.stats import wilson

        ci = wilson(self.m, self.n)
        return {"schema": SCHEMA, "axis": AXIS, "record_id": self.record_id, "identity": self.identity,
                "grader": self.grader, "cases_file": self.cases_file, "repeats": self.repeats,
                "m": self.m, "n": self.n, "agreement_rate": self.agreement_rate,
                "ci95": list(ci) if ci else None, "agreement": "all-N" if self.repeats > 2 else "pairwise",
                "flipped": self.flipped, "errored": self.errored, "sentence": self.sentence}


def run_grader_probe(options: GraderProbeOptions, on_event: OnEvent | None = None,
                     cancel: Cancel | None = None) -> GraderProbeReport:
    """Grade every case ``repeats`` times, repeat by repeat; fold agreement; record the ``probe`` (axis grader).

    A case whose grading errored on any repeat is excluded from n and listed under ``errored``.
    A cancel stops after the grading in flight and reports (and records) the cases graded every time."""
    from execsys.redact import scrub

    cases = load_graded_cases(options.cases)
    if options.n is not None:
        cases = cases[: options.n]
    grader = _Grader(options)  # a judge that cannot name its model fails here, before anything is opened
    ledger = None
    if options.record:
        from execsys.ledger import Ledger

        try:
            ledger = Ledger.open(options.ledger_path)  # fail before any grading
        except BaseException:
            grader.close()
            raise
    gradings: dict[str, list[Grading]] = {case.id: [] for case in cases}
    total = len(cases) * options.repeats
    done = 0
    try:
        for repeat in range(1, options.repeats + 1):
            for case in cases:
                if cancel is not None and cancel.is_set():
                    break
                grading = grader.grade(case)
                gradings[case.id].append(grading)
                done += 1
                emit(on_event, CaseGraded(case.id, repeat, options.repeats, grading.verdict, grading.error, done, total))
    finally:
        grader.close()
    complete = [c for c in cases if len(gradings[c.id]) == options.repeats]
    errored = [{"id": c.id, "errors": [g.error for g in gradings[c.id] if g.error]} for c in complete
               if any(g.error for g in gradings[c.id])]
    counted = [c for c in complete if not any(g.error for g in gradings[c.id])]
    flipped = []
    for case in counted:
        verdicts = [g.verdict for g in gradings[case.id]]
        if len(set(verdicts)) > 1:
            flipped.append({"id": case.id, "verdicts": verdicts, "output": case.output,
                            "rationales": [g.reply for g in gradings[case.id]] if options.via == "judge" else None})
    n = len(counted)
    m = n - len(flipped)
    report = GraderProbeReport(m, n, options.repeats, errored, flipped, grader.describe(), str(options.cases),
                               options.identity, noise_sentence(m, n, options.repeats))
    try:
        if ledger is not None and n > 0:
            body = scrub(report.to_json())
            body.pop("record_id", None)
            report.record_id = ledger.append("probe", body, identity=options.identity)
    finally:
        if ledger is not None:
            ledger.close()
    emit(on_event, GraderProbeFinished(m, n, report.sentence, report.record_id))
    return report
