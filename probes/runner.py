"""The probe engine: run the passes of one axis, record every case as it completes, compute m/n.

One engine for every face: the CLI (``execsys probe``) and the TUI call :func:`run_probe`
and render what it returns or reports through ``on_event``. Public API::

    from execsys.probes.runner import ProbeOptions, run_probe, ProbeInterrupted
    options = ProbeOptions(axis="session", endpoints=["http://127.0.0.1:8000/v1"], cases="cases.jsonl")
    record = run_probe(options, ledger, on_event=print, cancel=threading.Event())
    record.to_json()        # execsys.probe/1

Events (small dataclasses): :class:`PassStarted` (pass index, label, total, done so far),
:class:`CaseDone` (pass index, case id, done, total, error), :class:`PassFinished`,
:class:`Note` (restart progress, warnings), :class:`ProbeFinished` (the record).
Setting ``cancel`` stops sending new requests (in-flight ones are recorded); ``run_probe``
then raises :class:`ProbeInterrupted` naming the run id to resume.

Ledger: kind ``probe-run`` at the start (the parameters), ``probe-case`` per case per pass
as it completes (parent = run id, key = ``"<pass>:<case id>"``, body with the output text,
digest and outcome), ``probe-step`` for axis steps such as a restart (key ``restart:<pass>``),
and kind ``probe`` for the final record (parent = run id, key ``final``, identity column set).
A resumed run reads what is there and sends only what is missing: nothing is lost or
counted twice, because a second append of the same parent+key is a no-op.

Memory stays flat in the number of cases: the cases file is held as byte offsets
(:class:`~execsys.probes.cases.CaseFile`), what each pass still has to send is asked of the
ledger, m/n is computed at the end by walking the cases against their ``probe-case`` rows, and a
probe of more than ``CASES_INLINE_LIMIT`` cases writes its per-case results as ``probe-result``
rows instead of one huge ``probe`` row (see :mod:`execsys.probes.record`).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execsys.canonical import content_id
from execsys.errors import InputError, UsageError
from execsys.ledger import Ledger, new_id, now_iso
from execsys.stats import wilson

from .axes import AXES, PassPlan
from .cases import Case, CaseFile, cases_digest, pass_indices, select
from .client import CommandClient, Completion, EndpointClient
from .compare import Extractor, context, digest, first_divergence, first_token_divergence, parse_extractor
from .record import (
    CASES_INLINE_LIMIT,
    RESULT_KIND,
    CaseResult,
    LedgerCases,
    ProbeRecord,
    load_record,
    result_key,
)

RUN_SCHEMA = "execsys.probe-run/1"


@dataclass
class ProbeOptions:
    axis: str
    endpoints: list[str] = field(default_factory=list)
    command: str | None = None
    cases: str | Path | None = None  # a JSON Lines file
    case_list: list[Case] | None = None  # or the cases themselves
    model: str | None = None
    n: int | None = None
    sample_seed: int | None = None
    compare: str = "output"
    extract: str | None = None
    identity: str | None = None
    decoding: dict[str, Any] = field(default_factory=lambda: {"temperature": 0})
    repeats: int = 2
    repeats_given: bool = False
    concurrency: int = 1
    load: int | None = None
    restart: str | None = None
    ready: str | None = None
    ready_timeout: float = 120.0
    baseline: str | None = None
    order_seed: int = 0
    timeout: float = 120.0
    retries: int = 3
    api_key_env: str | None = None
    want_tokens: bool = False
    resume: bool | str = False
    max_body: int = 8 << 20
    declared_runtime: dict[str, Any] = field(default_factory=dict)  # [runtime] table, for re-observation

    def validate(self) -> None:
        if self.axis not in AXES:
            raise UsageError(f"unknown axis {self.axis!r}: choose one of {', '.join(AXES)}")
        if bool(self.endpoints) == bool(self.command):
            raise UsageError("give the target as --endpoint URL or --command CMD (exactly one kind)")
        if self.cases is None and self.case_list is None:
            raise UsageError("--cases FILE is required (JSON Lines: {\"id\", \"prompt\" | \"messages\"})")
        if self.compare not in ("output", "outcome"):
            raise UsageError("--compare must be output or outcome")
        if self.compare == "outcome" and not self.extract:
            raise UsageError("--compare outcome needs --extract (regex:PATTERN, json:PATH, last-number or command:CMD)")
        if self.repeats < 2:
            raise UsageError("--repeats must be at least 2")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.n is not None and self.n < 1:
            raise UsageError("--n must be at least 1")
        AXES[self.axis].validate(self)


# -- events -------------------------------------------------------------------

@dataclass
class PassStarted:
    pass_index: int
    label: str
    total: int
    done: int
    run_id: str | None = None  # the probe-run this pass appends to (what --resume takes)


@dataclass
class CaseDone:
    pass_index: int
    case_id: str
    done: int
    total: int
    error: str | None = None


@dataclass
class PassFinished:
    pass_index: int
    label: str
    completed: int
    errored: int


@dataclass
class Note:
    message: str


@dataclass
class ProbeFinished:
    record: ProbeRecord


class ProbeInterrupted(Exception):
    """Cancelled (Ctrl-C): progress is in the ledger; ``--resume RUN_ID`` continues."""

    def __init__(self, run_id: str, saved: int, total: int):
        super().__init__(f"interrupted: {saved} of {total} case results saved in run {run_id}")
        self.run_id = run_id
        self.saved = saved
        self.total = total


class ProbeAborted(InputError):
    """The probe cannot go on (a restart failed); what completed is kept under ``run_id``."""

    def __init__(self, message: str, run_id: str):
        super().__init__(message)
        self.run_id = run_id


@dataclass(slots=True)
class _Result:
    digest: str | None
    outcome: str | None
    error: str | None
    fingerprint: str | None = None
    model: str | None = None


# -- the run context axes see -------------------------------------------------

class RunContext:
    """What an axis hook may use: options, targets, recorded steps, notes, abort."""

    def __init__(self, options: ProbeOptions, ledger: Ledger, run_id: str, clients: list[Any],
                 cancel: threading.Event, emit: Callable[[Any], None]):
        self.options = options
        self.ledger = ledger
        self.run_id = run_id
        self.clients = clients
        self.cancel = cancel
        self._emit = emit
        self.steps: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.engine_change: str | None = None
        self.pass_counts: dict[int, int] = {}  # case results recorded per pass (errors included)
        self.pass_errors: dict[int, int] = {}  # of which errored
        self.completed_passes: set[int] = set()

    def step(self, key: str) -> dict[str, Any] | None:
        return self.steps.get(key)

    def record_step(self, key: str, body: dict[str, Any]) -> None:
        self.ledger.append("probe-step", {"step": key, **body}, parent=self.run_id, key=key)
        self.steps[key] = body

    def pass_has_results(self, index: int) -> bool:
        return self.pass_counts.get(index, 0) > 0

    def target_url(self, index: int) -> str:
        client = self.clients[index]
        return getattr(client, "base_url", "")

    def observe(self, index: int) -> dict[str, Any]:
        """The runtime as the target shows it now: model list, server version, and the foundation's
        runtime observation when ``execsys.identity.observe_runtime`` exists."""
        info = self.clients[index].observe()
        try:
            from execsys.identity import observe_runtime
        except ImportError:
            return info
        try:
            observed = observe_runtime(_declared_runtime(self.options, self.target_url(index)), require_endpoint=False)
        except Exception as exc:  # observation is evidence, never a reason to fail the probe
            info["runtime_error"] = f"{type(exc).__name__}: {exc}"
            return info
        info["runtime"] = _engine_facts(observed)
        return info

    def note_event(self, message: str) -> None:
        self._emit(Note(message))

    def note(self, message: str) -> None:
        self.notes.append(message)
        self._emit(Note(message))

    def engine_changed(self, detail: str) -> None:
        self.engine_change = detail
        self.note(detail + ": disagreement is not a restart effect")

    def abort(self, message: str) -> None:
        done = sum(self.pass_counts.values())
        raise ProbeAborted(
            f"{message}; the {done} case results already taken are kept in run {self.run_id}: "
            f"fix it and continue with --resume {self.run_id}",
            self.run_id,
        )


def _declared_runtime(options: ProbeOptions, endpoint: str) -> dict[str, Any]:
    declared = {"endpoint": endpoint, "api_key_env": options.api_key_env, **options.declared_runtime}
    declared["endpoint"] = endpoint
    return {k: v for k, v in declared.items() if v is not None}


def _engine_facts(observed: dict[str, Any]) -> dict[str, Any]:
    """What names the engine build and its configuration; never pids or start times (those move on
    every restart and would make every restart look like an engine change)."""
    endpoint = observed.get("endpoint") or {}
    process = observed.get("process") or {}
    return {
        "engine": observed.get("engine"),
        "server_version": endpoint.get("server_version"),
        "build_info": endpoint.get("build_info"),
        "system_fingerprint": endpoint.get("system_fingerprint"),
        # argv[0] is the program name as typed ("python" vs its full path through a pyenv shim): the
        # same binary either way, which process_exe already names; only the arguments configure it.
        "process_argv": (process.get("argv") or [])[1:] or None,
        "process_exe": process.get("exe"),
        "numerics_env": process.get("numerics_env"),
    }


# -- the engine -----------------------------------------------------------------

def run_probe(options: ProbeOptions, ledger: Ledger, *, on_event: Callable[[Any], None] | None = None,
              cancel: threading.Event | None = None) -> ProbeRecord:
    """Run (or resume) one probe and return its record, already appended to the ledger."""
    options.validate()
    emit = on_event or (lambda event: None)
    cancel = cancel or threading.Event()
    axis = AXES[options.axis]
    extractor = parse_extractor(options.extract)

    all_cases: Sequence[Case] = options.case_list if options.case_list is not None else CaseFile(options.cases or "")
    cases = select(all_cases, options.n, options.sample_seed)
    digest_of_cases = cases_digest(cases)

    clients = _clients(options)
    try:
        models = [client.resolve_model(options.model) for client in clients]
        baseline = _load_baseline(options, ledger, cases) if options.axis == "redeploy" else None
        parameters = _parameters(options, clients, models, digest_of_cases, extractor)
        match = content_id(parameters)
        run_id, started_at = _open_run(ledger, options, parameters, match, emit)
        final = ledger.child(run_id, "final")
        if final is not None:
            record = load_record(ledger, final)
            emit(ProbeFinished(record))
            return record

        ctx = RunContext(options, ledger, run_id, clients, cancel, emit)
        plans = axis.plan(options)
        _load_progress(ledger, run_id, ctx, len(plans))

        count = len(cases)
        sent = [p for p in plans if p.source == "send"]
        total_cases = count * len(sent)
        for plan in sent:
            todo = _todo(ledger, ctx, run_id, plan.index, cases, options.order_seed)
            done_before = count - len(todo)
            emit(PassStarted(plan.index, plan.label, count, done_before, run_id))
            if todo:
                if cancel.is_set():
                    break
                axis.before_pass(ctx, plan)
                params = dict(options.decoding)
                if models[plan.target] is not None:
                    params["model"] = models[plan.target]
                _run_pass(ctx, plan, todo, cases, clients[plan.target], params, extractor, done_before, count)
            if cancel.is_set():
                break
            errored = ctx.pass_errors.get(plan.index, 0)
            emit(PassFinished(plan.index, plan.label, count - errored, errored))

        if cancel.is_set() and any(ctx.pass_counts.get(p.index, 0) < count for p in sent):
            saved = sum(ctx.pass_counts.values())
            raise ProbeInterrupted(run_id, saved, total_cases)

        record = _build_record(options, ctx, axis, plans, cases, clients, models, extractor,
                               baseline, parameters, started_at, digest_of_cases)
        record_id = new_id("probe")
        record.id = record_id
        stored_id = ledger.append("probe", record.ledger_json(), identity=options.identity, parent=run_id,
                                  key="final", record_id=record_id)
        if stored_id != record_id:  # another process finished the same run first: report theirs
            record = load_record(ledger, ledger.get(stored_id))
        emit(ProbeFinished(record))
        return record
    finally:
        for client in clients:
            client.close()
        if isinstance(all_cases, CaseFile):
            all_cases.close()


def _clients(options: ProbeOptions) -> list[Any]:
    if options.command:
        return [CommandClient(options.command, timeout=options.timeout, retries=min(options.retries, 1),
                              max_body=options.max_body)]
    return [
        EndpointClient(url, api_key_env=options.api_key_env, timeout=options.timeout, retries=options.retries,
                       max_body=options.max_body, max_connections=max(8, options.concurrency, options.load or 0) + 4,
                       want_tokens=options.want_tokens)
        for url in options.endpoints
    ]


def _parameters(options: ProbeOptions, clients: list[Any], models: list[str | None], cases_digest_: str,
                extractor: Extractor | None) -> dict[str, Any]:
    """What makes two runs the same probe (and so resumable into each other)."""
    return {
        "axis": options.axis,
        "targets": [client.display for client in clients],
        "target_kind": "command" if options.command else "endpoint",
        "models": models,
        "cases_file": str(options.cases) if options.cases is not None else None,
        "cases_digest": cases_digest_,
        "n": options.n,
        "sample_seed": options.sample_seed,
        "compare": options.compare,
        "extract": extractor.spec if extractor else None,
        "identity": options.identity,
        "decoding": options.decoding,
        "repeats": options.repeats,
        "concurrency": options.concurrency,
        "load": options.load,
        "restart": options.restart,
        "ready": options.ready,
        "baseline": options.baseline,
        "order_seed": options.order_seed,
        "tokens": options.want_tokens,
    }


def _open_run(ledger: Ledger, options: ProbeOptions, parameters: dict[str, Any], match: str,
              emit: Callable[[Any], None]) -> tuple[str, str]:
    if options.resume:
        if isinstance(options.resume, str):
            run = ledger.get(options.resume)
            if run.kind != "probe-run":
                raise InputError(f"--resume {options.resume}: record {run.id} is a {run.kind}, not a probe-run")
            if run.body.get("match") != match:
                moved = sorted(k for k, v in parameters.items() if run.body.get("parameters", {}).get(k) != v)
                raise InputError(
                    f"--resume {run.id}: that run was started with different parameters ({', '.join(moved)}); "
                    "repeat its exact command line, or drop --resume to start a new probe"
                )
            return run.id, run.body.get("started_at") or run.created_at
        for run in ledger.iter(kind="probe-run", newest_first=True):
            if run.body.get("match") == match and ledger.child(run.id, "final") is None:
                emit(Note(f"resuming run {run.id}"))
                return run.id, run.body.get("started_at") or run.created_at
        emit(Note("nothing unfinished to resume with these parameters: starting a new probe"))
    started_at = now_iso()
    run_id = ledger.append("probe-run", {"schema": RUN_SCHEMA, "parameters": parameters, "match": match,
                                         "started_at": started_at})
    return run_id, started_at


def _intern(value: str | None) -> str | None:
    """Served model names and fingerprints repeat on every case: keep one copy of each."""
    return sys.intern(value) if isinstance(value, str) else None


def _load_progress(ledger: Ledger, run_id: str, ctx: RunContext, passes: int) -> None:
    """Recorded steps, and how many case results (and errors) each pass already has: counts only,
    read row by row, so resuming a large probe holds no per-case state."""
    for row in ledger.iter(parent=run_id):
        if row.kind == "probe-step":
            ctx.steps[row.key or ""] = row.body
            continue
        if row.kind != "probe-case":
            continue
        index = row.body.get("pass")
        if not isinstance(index, int) or not 0 <= index < passes:
            continue
        ctx.pass_counts[index] = ctx.pass_counts.get(index, 0) + 1
        if row.body.get("error"):
            ctx.pass_errors[index] = ctx.pass_errors.get(index, 0) + 1


def _todo(ledger: Ledger, ctx: RunContext, run_id: str, index: int, cases: Sequence[Case], seed: int) -> array:
    """Positions of the cases this pass still has to send, in the pass's order (the ledger says which
    are done; a fresh pass asks nothing, a finished one asks nothing)."""
    order = pass_indices(len(cases), seed, index)
    recorded = ctx.pass_counts.get(index, 0)
    if recorded == 0:
        return order
    if recorded >= len(cases):
        return array("q")
    return array("q", (i for i in order if not ledger.has_child(run_id, f"{index}:{cases[i].id}")))


def _run_pass(ctx: RunContext, plan: PassPlan, todo: array, cases: Sequence[Case], client: Any,
              params: dict[str, Any], extractor: Extractor | None, done: int, total: int) -> None:
    """Send ``todo`` at the plan's concurrency; record each result on the calling thread as it arrives."""
    ledger, run_id, cancel, emit = ctx.ledger, ctx.run_id, ctx.cancel, ctx._emit

    def measure(case: Case) -> tuple[Case, Completion, str | None, str | None]:
        try:
            completion = client.complete(case, params)
        except Exception as exc:  # a client bug must not lose the case silently
            completion = Completion(None, error=f"{type(exc).__name__}: {exc}")
        if not completion.ok:
            return case, completion, None, None
        text = completion.text or ""
        return case, completion, digest(text), extractor(text) if extractor else None

    def record(batch: list[tuple[Case, Completion, str | None, str | None]]) -> None:
        """Write the results that are ready (one transaction), then account for them and report."""
        nonlocal done
        entries = []
        for case, completion, output_digest, outcome in batch:
            body: dict[str, Any] = {
                "pass": plan.index, "case": case.id, "text": completion.text, "digest": output_digest,
                "outcome": outcome, "error": completion.error, "attempts": completion.attempts,
                "elapsed_s": round(completion.elapsed_s, 4), "system_fingerprint": completion.system_fingerprint,
                "model": completion.model, "finish_reason": completion.finish_reason,
            }
            if completion.tokens is not None:
                body["tokens"] = completion.tokens
            entries.append((body, run_id, f"{plan.index}:{case.id}"))
        ledger.append_many("probe-case", entries)
        for case, completion, _digest, _outcome in batch:
            ctx.pass_counts[plan.index] = ctx.pass_counts.get(plan.index, 0) + 1
            if completion.error:
                ctx.pass_errors[plan.index] = ctx.pass_errors.get(plan.index, 0) + 1
            done += 1
            emit(CaseDone(plan.index, case.id, done, total, completion.error))

    # Requests go out from worker threads and results are recorded here, so even at concurrency 1 the
    # ledger write of one case overlaps the next request instead of adding to it.
    workers = max(plan.concurrency, plan.load)
    outbox: queue.Queue = queue.Queue(maxsize=max(64, workers * 8))
    source = iter(todo)
    source_lock = threading.Lock()
    all_received = threading.Event()
    fillers = [0]
    finished = object()

    stop = threading.Event()  # set when recording fails: workers must not keep sending

    def worker() -> None:
        try:
            while not cancel.is_set() and not stop.is_set():
                with source_lock:
                    position = next(source, None)
                if position is None:
                    break
                outbox.put(measure(cases[position]))
            # Keep K requests in flight until the last case answered: the tail is under load too.
            i = 0
            while plan.load and not all_received.is_set() and not cancel.is_set() and not stop.is_set():
                client.complete(cases[todo[i % len(todo)]], params)
                fillers[0] += 1
                i += 1
        finally:
            outbox.put(finished)

    threads = [threading.Thread(target=worker, name=f"probe-{plan.index}-{i}", daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    running, received = len(threads), 0
    try:
        while running:
            # Block for one result, then take whatever else is already waiting: one commit for all of them.
            batch = []
            item = outbox.get()
            while True:
                if item is finished:
                    running -= 1
                else:
                    batch.append(item)
                if len(batch) >= 256:
                    break
                try:
                    item = outbox.get_nowait()
                except queue.Empty:
                    break
            if batch:
                record(batch)
                received += len(batch)
                if received == len(todo):
                    all_received.set()
    except BaseException:
        # Recording failed (a full disk, a locked ledger): stop the workers and let them finish, so no
        # thread is left blocked on the queue; what was recorded stays recorded and resumable.
        stop.set()
        deadline = time.monotonic() + 10
        while running and time.monotonic() < deadline:
            try:
                if outbox.get(timeout=0.5) is finished:
                    running -= 1
            except queue.Empty:
                pass
        raise
    all_received.set()
    for thread in threads:
        thread.join(timeout=5)
    if plan.load:
        ctx.steps.setdefault(f"fillers:{plan.index}", {"fillers": 0})["fillers"] += fillers[0]


def _load_baseline(options: ProbeOptions, ledger: Ledger, cases: Sequence[Case]) -> ProbeRecord:
    stored = ledger.get(options.baseline or "")
    if stored.kind != "probe":
        raise InputError(f"--baseline {options.baseline}: record {stored.id} is a {stored.kind}, not a probe record")
    baseline = load_record(ledger, stored)
    baseline.id = stored.id
    if baseline.identity and options.identity and baseline.identity != options.identity:
        raise InputError(
            f"--baseline {stored.id} was taken under identity {baseline.identity[:12]}, this lock is "
            f"{options.identity[:12]}: a redeploy compares the same declared identity (see 'execsys diff')"
        )
    known = {case.id for case in baseline.cases}
    if not any(case.id in known for case in cases):
        raise InputError(f"--baseline {stored.id} has none of these cases: probe the cases it was taken with")
    return baseline


def _baseline_results(baseline: ProbeRecord) -> dict[str, _Result]:
    """The baseline record's first pass per case id (the redeploy axis compares against it)."""
    fingerprints = (baseline.passes[0].get("system_fingerprints") or [None]) if baseline.passes else [None]
    models = (baseline.passes[0].get("models") or [None]) if baseline.passes else [None]
    results: dict[str, _Result] = {}
    for stored in baseline.cases:
        if not stored.passes:
            continue
        first = stored.passes[0] or {}
        results[stored.id] = _Result(first.get("digest"), first.get("outcome"), first.get("error"),
                                     fingerprints[0], models[0])
    return results


def _case_slots(ledger: Ledger, run_id: str, plans: list[PassPlan], case_id: str,
                baseline: dict[str, _Result] | None) -> list[_Result | None]:
    """One case's result on each pass, from its probe-case rows (or the baseline record)."""
    slots: list[_Result | None] = []
    for plan in plans:
        if plan.source == "baseline":
            slots.append((baseline or {}).get(case_id) or _Result(None, None, "not in the baseline record"))
            continue
        row = ledger.child(run_id, f"{plan.index}:{case_id}")
        if row is None:
            slots.append(None)
            continue
        body = row.body
        slots.append(_Result(body.get("digest"), body.get("outcome"), body.get("error"),
                             _intern(body.get("system_fingerprint")), _intern(body.get("model"))))
    return slots


def _texts(ledger: Ledger, run_id: str | None, pass_index: int, case_id: str) -> tuple[str | None, list[str] | None]:
    if not run_id:
        return None, None
    row = ledger.child(run_id, f"{pass_index}:{case_id}")
    if row is None:
        return None, None
    return row.body.get("text"), row.body.get("tokens")


def _build_record(options: ProbeOptions, ctx: RunContext, axis: Any, plans: list[PassPlan], cases: Sequence[Case],
                  clients: list[Any], models: list[str | None], extractor: Extractor | None,
                  baseline: ProbeRecord | None, parameters: dict[str, Any], started_at: str,
                  digest_of_cases: str) -> ProbeRecord:
    """m/n and the per-case results, walking the cases in order against their ledger rows: one case in
    memory at a time. A large probe's case results go to the ledger as probe-result rows as they are
    made (a no-op when a resumed finish writes them again), a small one's stay in the record."""
    ledger = ctx.ledger
    inline = len(cases) <= CASES_INLINE_LIMIT
    baseline_results = _baseline_results(baseline) if baseline is not None else None
    case_results: list[CaseResult] = []
    pending: list[tuple[dict[str, Any], str | None, str | None]] = []

    def keep(result: CaseResult) -> None:
        if inline:
            case_results.append(result)
            return
        pending.append((result.to_json(), ctx.run_id, result_key(result.id)))
        if len(pending) >= 512:
            ledger.append_many(RESULT_KIND, pending)
            pending.clear()

    flipped: list[str] = []
    errored_cases: list[str] = []
    n = m_output = m_outcome = 0
    per_pass_fp: list[set[str]] = [set() for _ in plans]
    per_pass_models: list[set[str]] = [set() for _ in plans]
    per_pass_errors = [0] * len(plans)
    per_pass_completed = [0] * len(plans)
    for case in cases:
        slots = _case_slots(ledger, ctx.run_id, plans, case.id, baseline_results)
        for i, slot in enumerate(slots):
            if slot is not None:
                if not slot.error:
                    per_pass_completed[i] += 1
                if slot.fingerprint:
                    per_pass_fp[i].add(slot.fingerprint)
                if slot.model:
                    per_pass_models[i].add(slot.model)
                if slot.error:
                    per_pass_errors[i] += 1
        passes_json = [
            {"digest": s.digest, "outcome": s.outcome, "error": s.error} if s is not None else None for s in slots
        ]
        if any(s is None or s.error or s.digest is None for s in slots):
            errored_cases.append(case.id)
            keep(CaseResult(case.id, passes_json, None))
            continue
        n += 1
        digests = [s.digest for s in slots]  # type: ignore[union-attr]
        outcomes = [s.outcome for s in slots]  # type: ignore[union-attr]
        agree = len(set(digests)) == 1
        outcome_agree = len(set(outcomes)) == 1 if extractor else None
        m_output += agree
        m_outcome += bool(outcome_agree)
        divergence = None
        if not agree:
            k = next(i for i, d in enumerate(digests) if d != digests[0])
            divergence = _divergence(ledger, ctx.run_id, baseline, plans, case.id, k)
        primary_agree = agree if options.compare == "output" else bool(outcome_agree)
        if not primary_agree:
            flipped.append(case.id)
        keep(CaseResult(case.id, passes_json, primary_agree, outcome_agree, len(set(digests)), divergence))
    if pending:
        ledger.append_many(RESULT_KIND, pending)
        pending.clear()

    def level(m: int) -> dict[str, Any]:
        ci = wilson(m, n)
        return {"m": m, "n": n, "rate": (m / n) if n else None, "ci95": list(ci) if ci else None}

    compare: dict[str, Any] = {"level": options.compare, "output": level(m_output), "outcome": None}
    if extractor:
        compare["outcome"] = {**level(m_outcome), "extract": extractor.spec}
    m = m_output if options.compare == "output" else m_outcome
    ci = wilson(m, n)
    rate = (m / n) if n else None

    passes_info = []
    for i, plan in enumerate(plans):
        info = plan.to_json()
        info["target"] = clients[plan.target].display if plan.source == "send" else f"baseline {baseline.id if baseline else ''}"
        info["model"] = models[plan.target] if plan.source == "send" else None
        info["order_seed"] = options.order_seed if plan.shuffled else None
        info["completed"] = per_pass_completed[i]
        info["errored"] = per_pass_errors[i]
        info["system_fingerprints"] = sorted(per_pass_fp[i])
        info["models"] = sorted(per_pass_models[i])
        if f"fillers:{i}" in ctx.steps:
            info["fillers"] = ctx.steps[f"fillers:{i}"]["fillers"]
        passes_info.append(info)

    # Served model / system_fingerprint moving between passes is reported beside the rate.
    for i in range(1, len(plans)):
        for key, label in (("system_fingerprints", "system_fingerprint"), ("models", "served model")):
            a, b = passes_info[0][key], passes_info[i][key]
            if a and b and a != b:
                message = f"{label} changed between pass {plans[0].label} and pass {plans[i].label}: {', '.join(a)} -> {', '.join(b)}"
                if options.axis == "restart" and ctx.engine_change is None:
                    ctx.engine_changed(message)
                elif message not in ctx.notes:
                    ctx.notes.append(message)
    if options.axis == "redeploy" and baseline is not None:
        a, b = passes_info[0]["system_fingerprints"], passes_info[-1]["system_fingerprints"]
        if not a and not b:
            ctx.notes.append("system_fingerprint: the engine reports none (a change of backend would not show there)")
        elif a == b:
            ctx.notes.append(f"system_fingerprint unchanged: {', '.join(a)}")

    boundary = axis.boundary(options)
    holds = n > 0 and m == n
    if n == 0:
        statement = f"no case completed on every pass: nothing is known {boundary}"
    elif ctx.engine_change:
        statement = f"{ctx.engine_change}: this measures an engine change, not {boundary}"
    elif holds:
        statement = f"stable {boundary} for these {n} cases: {axis.stable_advice}"
    else:
        statement = f"unstable {boundary}: {axis.advice}"
    sentence = _sentence(options.axis, m, n, ci, statement, len(errored_cases), options.compare)
    scope = {"axis": options.axis, "boundary": boundary, "holds": holds if n else None, "level": options.compare,
             "statement": statement, "engine_changed": ctx.engine_change is not None}

    target: dict[str, Any] = {
        "kind": parameters["target_kind"],
        "endpoints": [c.display for c in clients] if not options.command else [],
        "command": clients[0].display if options.command else None,
        "models": models,
        "api_key_env": options.api_key_env,
        "observed": {k: v for k, v in ctx.steps.items() if k.startswith(("observe:", "restart:"))},
    }
    baseline_info = None
    if baseline is not None:
        baseline_info = {"id": baseline.id, "run": baseline.run, "identity": baseline.identity,
                         "started_at": baseline.started_at, "target": baseline.target.get("endpoints")}
    return ProbeRecord(
        axis=options.axis, identity=options.identity, target=target, n=n, m=m, agreement_rate=rate,
        ci95=list(ci) if ci else None, compare=compare, errored=len(errored_cases), flipped=flipped,
        cases=case_results if inline else LedgerCases(ledger.path, ctx.run_id, len(cases)),
        cases_in_ledger=not inline, started_at=started_at, finished_at=now_iso(), scope=scope, sentence=sentence,
        run=ctx.run_id, passes=passes_info, repeats=len(plans), decoding=options.decoding,
        cases_file=parameters["cases_file"], cases_digest=digest_of_cases, errored_cases=errored_cases,
        engine_changed=ctx.engine_change is not None, notes=list(ctx.notes), baseline=baseline_info,
    )


def _divergence(ledger: Ledger, run_id: str, baseline: ProbeRecord | None, plans: list[PassPlan],
                case_id: str, k: int) -> dict[str, Any] | None:
    def texts(i: int) -> tuple[str | None, list[str] | None]:
        if plans[i].source == "baseline":
            return _texts(ledger, baseline.run if baseline else None, 0, case_id)
        return _texts(ledger, run_id, i, case_id)

    (text_a, tokens_a), (text_b, tokens_b) = texts(0), texts(k)
    if text_a is None or text_b is None:
        return {"pass": k, "char": None, "token": None}
    char = first_divergence(text_a, text_b)
    return {
        "pass": k, "char": char, "token": first_token_divergence(tokens_a, tokens_b),
        "a": context(text_a, char or 0), "b": context(text_b, char or 0),
    }


def _sentence(axis: str, m: int, n: int, ci: tuple[float, float] | None, statement: str, errored: int,
              level: str) -> str:
    head = f"{axis} agreement" if level == "output" else f"{axis} outcome agreement"
    if n == 0:
        text = f"{head}: no case completed on every pass"
    else:
        assert ci is not None
        text = f"{head} {m}/{n} = {m / n:.2f} (95% CI {ci[0]:.2f}–{ci[1]:.2f}) — {statement}"
    if errored:
        text += f" ({errored} errored case{'s' if errored != 1 else ''} excluded from n)"
    return text


def merge_records(ledger: Ledger, record_ids: list[str]) -> ProbeRecord:
    """``execsys probe merge``: combine probe records taken on several hosts into one hosts record."""
    from .merge import merge

    return merge(ledger, record_ids)
