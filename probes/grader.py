"""The grader's own reproducibility: the same outputs graded twice (or ``--repeats N``) by the declared grader.

Judges give different verdicts for the same input on different runs, and a score difference
smaller than the grader's own flip rate is not a difference between models. This probe holds
the outputs fixed -- a JSON Lines cases file of ``{id, prompt, output, expected?}`` -- and grades
each one N times through the grader the declaration names: ``[grader.judge]`` (an
OpenAI-compatible endpoint, its ``prompt`` template filled with ``{id}``, ``{prompt}``,
``{output}``, ``{expected}``) or ``[grader] command`` (one JSON object ``{id, prompt, output,
expected}`` on stdin, its verdict on stdout). Verdicts are compared exactly, or through
``--extract`` as the other probes compare outcomes (:mod:`execsys.probes.compare`).

The cases may also be a harness's own log of what it graded, read by the adapters ``compare``
uses (:mod:`execsys.harnesses`): an lm-eval ``samples_<task>_<time>.jsonl`` or an Inspect ``.eval``
/ ``.json`` log, each sample's id the key ``compare`` gives its outcome.

The result is agreement m/n (a case agrees when all N verdicts are equal: TARa-style all-N
agreement) with the Wilson interval, the flipped cases with every verdict and the judge's full
reply as its rationale, and a ledger ``probe`` record with axis ``grader`` that ``scope`` states
beside the model's boundaries. Self-contained: its own small run loop, not the axis runner, but
resumable as the runner is. Ledger: a ``probe-run`` row with the parameters (axis ``grader``), one
``probe-grading`` row per grading as soon as it is graded (parent = run id, key ``<repeat>:<case
id>``, ``#retry<r>`` for a retried error), and the ``probe`` record under key ``final``. A run killed
mid-way loses at most the grading in flight: ``--resume [RUN_ID]`` grades only what is missing and
refuses a run started with other parameters; ``--retry-errored`` grades the errored ones again.

    options = GraderProbeOptions.from_sources(declaration, lock, cases="graded.jsonl", repeats=3)
    report = run_grader_probe(options, on_event=print)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execsys.canonical import content_id
from execsys.declaration import Declaration
from execsys.errors import InputError, UsageError
from execsys.fsutil import DECLARATION_LIMIT, RECORD_FILE_LIMIT, read_bounded
from execsys.harnesses.base import SampleOutput
from execsys.ledger import Ledger, new_id, now_iso
from execsys.operation import Cancel, Event, OnEvent, emit, first_given

from .cases import Case, parse_case
from .compare import Extractor, parse_extractor
from .events import Note, RunOpened, SystemDiffers
from .grader_system import STEP_KEYS, GraderObserver, summarise
from .record import GRADING_KIND
from .runner import RUN_SCHEMA, ProbeInterrupted
from .store import RETRY_MARK, SYSTEM_KIND, case_key, case_row, final_row
from .system import DIFFERS

SCHEMA = "execsys.probe-grader/2"  # /2: system_check (the grader observed at start and end), identity_reason
READABLE_SCHEMAS = ("execsys.probe-grader/1", SCHEMA)
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


def load_graded_cases(path: str | os.PathLike[str], ledger_path: Path | None = None) -> list[GradedCase]:
    """The cases to grade: an execsys probe (its run or record id: what the model answered on its
    first pass), an lm-eval samples file or an Inspect log (read by the harness adapters), else JSON
    Lines of ``{id, prompt, output, expected?}`` (the probes' own case checks plus a string ``output``)."""
    from execsys.harnesses import inspect as inspect_log
    from execsys.harnesses import lm_eval

    target = Path(path)
    if _PROBE_ID.match(str(path)) and not target.exists():
        return _probe_cases(str(path), ledger_path)
    if lm_eval.SAMPLES_NAME.match(target.name):
        return _harness_cases(target, lm_eval.graded_samples(target))
    if target.suffix == ".eval" or (target.suffix == ".json" and inspect_log.ADAPTER.owns(target)):
        return _harness_cases(target, inspect_log.graded_samples(target))
    try:
        # bounded: a FIFO or /dev/zero given as the cases is refused, never read forever
        lines = read_bounded(target, RECORD_FILE_LIMIT, "cases file").decode("utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"cases file {target}: not found") from None
    except UnicodeDecodeError:
        raise InputError(f"cases file {target}: not UTF-8 text") from None
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


_PROBE_ID = re.compile(r"^probe(-run)?-\S+$")


def _probe_cases(reference: str, ledger_path: Path | None) -> list[GradedCase]:
    """What a probe's model answered on its first pass, with the prompts and expectations of the cases
    file it was given -- so the grader is probed on outputs this execution system really produced.
    Cases that errored or got no answer there are left out; a cases file that changed since is refused."""
    from .cases import CaseFile, cases_digest, select
    from .store import case_row

    with Ledger.open(ledger_path) as ledger:
        record = ledger.get(reference)
        run = record if record.kind == "probe-run" else (
            ledger.get(record.parent) if record.kind == "probe" and record.parent else None)
        if run is None or run.kind != "probe-run":
            raise InputError(f"--cases {reference}: a {record.kind} record, not a probe run or a probe's record "
                             "(see 'execsys ledger list --kind probe')")
        parameters = run.body.get("parameters") or {}
        if parameters.get("axis") == "grader":
            raise InputError(f"--cases {reference}: a grader probe holds verdicts, not model outputs to grade")
        cases_file = parameters.get("cases_file")
        if not cases_file:
            raise InputError(f"--cases {reference}: that probe was given its cases in memory, not a file: "
                             "give the cases as JSON Lines with an \"output\" each")
        try:
            chosen = select(CaseFile(cases_file), parameters.get("n"), parameters.get("sample_seed"))
        except InputError as exc:
            raise InputError(f"--cases {reference}: the probe's cases file: {exc}") from None
        if cases_digest(chosen) != parameters.get("cases_digest"):
            raise InputError(f"--cases {reference}: {cases_file} has changed since that probe ran "
                             "(its cases digest differs): the outputs no longer belong to these prompts")
        cases: list[GradedCase] = []
        for case in chosen:
            row, _retry = case_row(ledger, run.id, 0, case.id)
            text = row.body.get("text") if row is not None and not row.body.get("error") else None
            if isinstance(text, str):
                prompt = case.prompt if case.prompt is not None else json.dumps(case.messages, ensure_ascii=False)
                cases.append(GradedCase(case.id, prompt, text, case.expected))
    if not cases:
        raise InputError(f"--cases {reference}: no case of that probe has an answer on its first pass")
    return cases


def _harness_cases(target: Path, samples: list[SampleOutput]) -> list[GradedCase]:
    cases: list[GradedCase] = []
    seen: set[str] = set()
    for sample in samples:
        if sample.id in seen:
            raise InputError(f"{target}: sample {sample.id!r} appears more than once")
        seen.add(sample.id)
        cases.append(GradedCase(sample.id, sample.prompt, sample.output, sample.expected))
    if not cases:
        raise InputError(f"{target}: no sample with an output to grade")
    return cases


def cases_digest(cases: list[GradedCase]) -> str:
    """What was graded, whatever file it came from: a resumed run must grade the very same cases."""
    return content_id([case.payload() for case in cases])


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
    resume: bool | str = False  # True: the newest unfinished run with these parameters; str: that run id
    retry_errored: bool = False  # with resume: grade the errored gradings again
    declared_grader: dict[str, Any] = field(default_factory=dict)  # [grader] as declared now: what is observed
    pinned_grader: dict[str, Any] | None = None  # the lock's grader component, {"declared", "observed"}
    harness_interpreter: str | None = None  # where pin read [grader] packages from without a command

    @classmethod
    def from_sources(cls, declaration: Declaration, lock: Any = None, *, cases: str | None = None,
                     repeats: int | None = None, extract: str | None = None, via: str | None = None,
                     n: int | None = None, timeout: float | None = None, ledger: str | None = None,
                     record: bool | None = None, resume: bool | str | None = None,
                     retry_errored: bool | None = None) -> GraderProbeOptions:
        """Flags over the declaration's ``[grader]`` (and ``[probe]`` cases/extract/timeout); the lock's id.

        The declared grader command (and a declared ``command:`` extractor) runs only from a trusted
        declaration (:mod:`execsys.trust`): otherwise this refuses, exit 2, before any case is read."""
        from execsys.observe.grader import check_judge

        grader = declaration.component("grader")
        probe = declaration.tables.get("probe", {})
        cases_path = first_given(cases, probe.get("cases"))
        if not cases_path:
            raise UsageError("--cases FILE is required (JSON Lines: {\"id\", \"prompt\", \"output\", \"expected\"?})")
        count = first_given(repeats, 2)
        if not isinstance(count, int) or count < 2:
            raise UsageError("--repeats must be at least 2")
        from .options import MAX_REPEATS

        if count > MAX_REPEATS:  # each grading of each case is planned up front
            raise UsageError(f"--repeats is at most {MAX_REPEATS} gradings")
        if n is not None and n < 1:
            raise UsageError("--n must be at least 1")
        if retry_errored and not resume:
            raise UsageError("--retry-errored goes with --resume (it grades the errored cases of a stored run again)")
        if resume and record is False:
            raise UsageError("--resume needs the ledger: a run that is not recorded cannot be resumed")
        judge = check_judge(grader["judge"]) if grader.get("judge") else {}
        command = grader.get("command")
        chosen = first_given(via, "judge" if judge.get("endpoint") else ("command" if command else None))
        if chosen is None:
            raise UsageError("no grader declared: set [grader] command or [grader.judge] endpoint in execsys.toml")
        if chosen == "judge" and not judge.get("endpoint"):
            raise UsageError("--via judge: [grader.judge] endpoint is not declared")
        if chosen == "command" and not command:
            raise UsageError("--via command: [grader] command is not declared")
        from execsys import trust

        if chosen == "command":
            trust.require(declaration, "grader.command")  # a declared command: refused until trusted
        declared_extract = probe.get("extract")
        if extract is None and isinstance(declared_extract, str) and declared_extract.startswith("command:"):
            trust.require(declaration, "probe.extract = command:...")
        base = Path(os.path.abspath(declaration.path)).parent if declaration.path else Path.cwd()
        template = DEFAULT_TEMPLATE
        if chosen == "judge" and judge.get("prompt"):
            from execsys.observe.artifact import resolve

            prompt_path = resolve(str(judge["prompt"]), base)
            try:
                template = read_bounded(prompt_path, DECLARATION_LIMIT, "[grader.judge] prompt").decode("utf-8")
            except InputError:
                raise
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"[grader.judge] prompt {prompt_path}: cannot read "
                                 f"({getattr(exc, 'strerror', None) or exc})") from None
        cases_file = Path(str(cases_path))
        if not cases_file.is_absolute() and cases is None:
            cases_file = base / cases_file  # declared paths resolve beside the declaration
        from .options import _seconds

        # finite and above 0, as every probe's --timeout ('0' was replaced by the default, nan crashed)
        wait = _seconds(first_given(timeout, probe.get("timeout"), DEFAULT_TIMEOUT), "--timeout")
        return cls(cases=cases_file, via=chosen, repeats=count, command=command, judge=judge, template=template,
                   extract=parse_extractor(first_given(extract, probe.get("extract")), wait), base_dir=base,
                   identity=getattr(lock, "id", None), n=n, timeout=wait,
                   ledger_path=Path(ledger).expanduser() if ledger else None,
                   record=bool(first_given(record, True)), resume=resume or False,
                   retry_errored=bool(retry_errored), declared_grader=dict(grader),
                   pinned_grader=_pinned_grader(lock), harness_interpreter=_pinned_interpreter(lock))


def _pinned_grader(lock: Any) -> dict[str, Any] | None:
    """The lock's grader component, when the lock is of the identity schema this execsys compares."""
    from execsys.identity.model import SCHEMA as IDENTITY_SCHEMA

    if lock is None or getattr(lock, "schema", None) != IDENTITY_SCHEMA:
        return None
    component = lock.components.get("grader")
    return component if isinstance(component, dict) else None


def _pinned_interpreter(lock: Any) -> str | None:
    from execsys.identity.observe import _harness_interpreter

    return _harness_interpreter(lock.observed("harness")) if lock is not None else None


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
    run: str | None = None  # the probe-run its gradings are recorded under (what --resume takes)
    system_check: dict[str, Any] | None = None  # the grader observed at start and end against the lock
    identity_reason: str | None = None  # why identity is null (the grader that answered was not the pinned one)

    @classmethod
    def from_json(cls, data: dict[str, Any], *, record_id: str | None = None) -> GraderProbeReport:
        """A stored ``execsys.probe-grader/2`` record, or a ``/1`` one (no system check: None), as it was
        (a resumed, finished run reports it so)."""
        check = data.get("system_check")
        return cls(int(data.get("m") or 0), int(data.get("n") or 0), int(data.get("repeats") or 2),
                   list(data.get("errored") or []), list(data.get("flipped") or []), dict(data.get("grader") or {}),
                   str(data.get("cases_file") or ""), data.get("identity"), str(data.get("sentence") or ""),
                   record_id or data.get("record_id"), data.get("run"),
                   check if isinstance(check, dict) else None, data.get("identity_reason"))

    @property
    def agreement_rate(self) -> float | None:
        return self.m / self.n if self.n else None

    @property
    def exit_code(self) -> int:
        if self.n == 0:
            return 2
        if (self.system_check or {}).get("verdict") == DIFFERS:
            return 1  # agreement of another grader than the pinned one: as a probe of another system
        return 0 if self.m == self.n else 1

    def to_json(self) -> dict[str, Any]:
        from execsys.stats import wilson

        ci = wilson(self.m, self.n)
        return {"schema": SCHEMA, "axis": AXIS, "record_id": self.record_id, "run": self.run, "identity": self.identity,
                "grader": self.grader, "cases_file": self.cases_file, "repeats": self.repeats,
                "m": self.m, "n": self.n, "agreement_rate": self.agreement_rate,
                "ci95": list(ci) if ci else None, "agreement": "all-N" if self.repeats > 2 else "pairwise",
                "flipped": self.flipped, "errored": self.errored, "sentence": self.sentence,
                "system_check": self.system_check, "identity_reason": self.identity_reason}


def run_grader_probe(options: GraderProbeOptions, on_event: OnEvent | None = None,
                     cancel: Cancel | None = None) -> GraderProbeReport:
    """Grade every case ``repeats`` times, repeat by repeat, recording each grading as it is made;
    fold agreement; record the ``probe`` (axis grader) under the run.

    A case whose grading errored on any repeat is excluded from n and listed under ``errored``.
    A cancel stops after the grading in flight and raises
    :class:`~execsys.probes.runner.ProbeInterrupted` naming the run to ``--resume`` (unrecorded,
    ``record=False``: reports the cases graded every time). A resumed run
    whose final record exists returns that record and grades nothing (with ``retry_errored`` and
    errored gradings: grades those again and records a new final, ``final#retry<r>``)."""
    cases = load_graded_cases(options.cases, options.ledger_path)
    if options.n is not None:
        cases = cases[: options.n]
    grader = _Grader(options)  # a judge that cannot name its model fails here, before anything is opened
    try:
        if not options.record:
            return _grade(options, cases, grader, None, on_event, cancel)
        with Ledger.open(options.ledger_path) as ledger:  # opened before any grading: a bad ledger costs none
            return _grade(options, cases, grader, ledger, on_event, cancel)
    finally:
        grader.close()


def _parameters(options: GraderProbeOptions, cases: list[GradedCase], grader: _Grader) -> dict[str, Any]:
    """What makes two runs the same grader probe (and so resumable into each other)."""
    return {"axis": AXIS, "grader": grader.describe(),
            "template": content_id(options.template) if options.via == "judge" else None,
            "extract": options.extract.spec if options.extract else None,
            "cases_file": os.path.abspath(options.cases), "cases_digest": cases_digest(cases), "n": options.n,
            "repeats": options.repeats, "identity": options.identity}


def _open_run(ledger: Ledger, options: GraderProbeOptions, parameters: dict[str, Any],
              on_event: OnEvent | None) -> str:
    """The probe-run to record into: the one ``--resume`` names (refused when its parameters differ),
    the newest unfinished one with these parameters, or a new one."""
    match = content_id(parameters)
    if isinstance(options.resume, str):
        run = ledger.get(options.resume)
        stored = run.body.get("parameters") if run.kind == "probe-run" else None
        if not isinstance(stored, dict) or stored.get("axis") != AXIS:
            what = f"a {stored.get('axis')} probe run" if isinstance(stored, dict) else f"a {run.kind}"
            raise InputError(f"--resume {options.resume}: record {run.id} is {what}, not a grader probe run")
        if run.body.get("match") != match:
            moved = sorted(k for k, v in parameters.items() if stored.get(k) != v)
            raise InputError(f"--resume {run.id}: that run was started with different parameters "
                             f"({', '.join(moved)}); repeat its exact command line, or drop --resume to start anew")
        emit(on_event, RunOpened(run.id, True))
        return run.id
    if options.resume:
        for run in ledger.iter(kind="probe-run", newest_first=True):
            if run.body.get("match") == match and (options.retry_errored or final_row(ledger, run.id)[0] is None):
                emit(on_event, Note(f"resuming run {run.id}"))
                emit(on_event, RunOpened(run.id, True))
                return run.id
        emit(on_event, Note("nothing unfinished to resume with these parameters: starting a new grader probe"))
    run_id = ledger.append("probe-run", {"schema": RUN_SCHEMA, "parameters": parameters, "match": match,
                                         "started_at": now_iso()})
    emit(on_event, RunOpened(run_id, False))
    return run_id


def _grade(options: GraderProbeOptions, cases: list[GradedCase], grader: _Grader, ledger: Ledger | None,
           on_event: OnEvent | None, cancel: Cancel | None) -> GraderProbeReport:
    repeats = options.repeats
    gradings: dict[str, list[Grading | None]] = {case.id: [None] * repeats for case in cases}
    run_id: str | None = None
    final, final_retry = None, 0
    if ledger is not None:
        run_id = _open_run(ledger, options, _parameters(options, cases, grader), on_event)
        final, final_retry = final_row(ledger, run_id)
    todo: list[tuple[int, GradedCase, str]] = []  # (repeat, case, the ledger key its grading goes under)
    for repeat in range(1, repeats + 1):
        for case in cases:
            row, retry = case_row(ledger, run_id, repeat, case.id) if ledger is not None and run_id else (None, 0)
            if row is None:
                todo.append((repeat, case, case_key(repeat, case.id)))
            elif row.body.get("error") and options.retry_errored:
                todo.append((repeat, case, case_key(repeat, case.id, retry + 1)))
            else:
                gradings[case.id][repeat - 1] = Grading(row.body.get("verdict"), row.body.get("reply"),
                                                        row.body.get("error"))
    if final is not None and not (options.retry_errored and todo):
        report = GraderProbeReport.from_json(final.body, record_id=final.id)
        emit(on_event, GraderProbeFinished(report.m, report.n, report.sentence, report.record_id))
        return report
    total = len(cases) * repeats
    done = total - len(todo)
    observer = GraderObserver(declared=options.declared_grader, base_dir=options.base_dir,
                              pinned=options.pinned_grader, lock_id=options.identity,
                              harness_interpreter=options.harness_interpreter)
    looks = [_look(observer, "start", ledger, run_id, on_event)]  # before the first grading
    for repeat, case, key in todo:
        if cancel is not None and cancel.is_set():
            if run_id is None:
                break  # nothing recorded, nothing to resume: report the cases graded every time
            raise ProbeInterrupted(run_id, done, total)
        grading = grader.grade(case)
        if ledger is not None:
            ledger.append(GRADING_KIND, {"repeat": repeat, "case": case.id, "verdict": grading.verdict,
                                         "reply": grading.reply, "error": grading.error}, parent=run_id, key=key)
        gradings[case.id][repeat - 1] = grading
        done += 1
        emit(on_event, CaseGraded(case.id, repeat, repeats, grading.verdict, grading.error, done, total))
    looks.append(_look(observer, "end", ledger, run_id, on_event, said=looks[0]))  # after the last
    report = _fold(options, cases, gradings, grader.describe(), run_id)
    report.system_check = summarise(looks, lock_id=options.identity)
    if report.system_check["verdict"] == DIFFERS and options.identity:
        # the agreement of another grader than the pinned one counts toward no identity
        report.identity = None
        report.identity_reason = (f"{report.system_check['sentence']} (identity {options.identity[:12]} was "
                                  "pinned): this grader probe counts toward no identity")
    if ledger is not None and report.n > 0:
        from execsys.redact import scrub

        body = scrub(report.to_json())
        body.pop("record_id", None)
        record_id = new_id("probe")
        stored = ledger.append("probe", body, identity=report.identity, parent=run_id, record_id=record_id,
                               key="final" if final is None else f"final{RETRY_MARK}{final_retry + 1}")
        if stored != record_id:  # another process finished the same run first: report theirs
            report = GraderProbeReport.from_json(ledger.get(stored).body, record_id=stored)
        else:
            report.record_id = record_id
    emit(on_event, GraderProbeFinished(report.m, report.n, report.sentence, report.record_id))
    return report


def _look(observer: GraderObserver, at: str, ledger: Ledger | None, run_id: str | None,
          on_event: OnEvent | None, said: dict[str, Any] | None = None) -> dict[str, Any]:
    """The grader observed now and judged (a resumed run keeps its first start), recorded as a
    ``probe-system`` row; a differing grader said at once, once per distinct difference."""
    from execsys.redact import redact_text

    from .grader_system import sentence

    stored = ledger.child(run_id, STEP_KEYS[at]) if ledger is not None and run_id and at == "start" else None
    if stored is not None:
        return {k: v for k, v in stored.body.items() if k != "step"}
    entry = observer.observe(at)
    if ledger is not None and run_id:
        ledger.append(SYSTEM_KIND, {"step": STEP_KEYS[at], **entry}, parent=run_id, key=STEP_KEYS[at])
    before = {d.get("words") for d in (said or {}).get("differences") or []}
    fresh = [d for d in entry.get("differences") or [] if d.get("words") not in before]
    if entry.get("verdict") == DIFFERS and fresh:
        emit(on_event, SystemDiffers(redact_text(sentence(fresh)), 0, at))
    return entry


def _fold(options: GraderProbeOptions, cases: list[GradedCase], gradings: dict[str, list[Grading | None]],
          described: dict[str, Any], run_id: str | None) -> GraderProbeReport:
    """Agreement over the cases graded every time without an error; the flipped ones with every verdict."""
    errored: list[dict[str, Any]] = []
    flipped: list[dict[str, Any]] = []
    n = 0
    for case in cases:
        done = [g for g in gradings[case.id] if g is not None]
        if len(done) < options.repeats:
            continue
        if any(g.error for g in done):
            errored.append({"id": case.id, "errors": [g.error for g in done if g.error]})
            continue
        n += 1
        verdicts = [g.verdict for g in done]
        if len(set(verdicts)) > 1:
            flipped.append({"id": case.id, "verdicts": verdicts, "output": case.output,
                            "rationales": [g.reply for g in done] if options.via == "judge" else None})
    m = n - len(flipped)
    return GraderProbeReport(m, n, options.repeats, errored, flipped, described, str(options.cases),
                             options.identity, noise_sentence(m, n, options.repeats), run=run_id)
