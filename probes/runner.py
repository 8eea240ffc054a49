"""The probe runner: run the passes of one axis, record every case as it completes, compute m/n.

One runner for every face: the CLI (``execsys probe``) and the TUI build options with
:meth:`ProbeOptions.from_sources` and call :func:`run_probe`, rendering what it returns and what
it reports through ``on_event``. Public API::

    from execsys.probes.runner import ProbeOptions, run_probe, ProbeInterrupted
    options = ProbeOptions.from_sources(load_sources(), axis="session",  # execsys.sources.load_sources
                                        endpoints=["http://127.0.0.1:8000/v1"], cases="cases.jsonl")
    record = run_probe(options, on_event=print, cancel=threading.Event())
    record.to_json()        # execsys.probe/1

The ledger is ``options.ledger`` (a path; None = ``$EXECSYS_LEDGER`` or the user data dir), opened
and closed inside :func:`run_probe`. Events (:mod:`execsys.probes.events`, frozen dataclasses):
:class:`RunOpened` (run id, resumed), :class:`PassStarted`, :class:`CaseDone` (the case's digest,
text, whether it agrees with the earlier passes, the running tally), :class:`PassFinished` (the
pass's running agreement), :class:`Note` (warnings, restart progress; :class:`ServedModelDiffers`, once per
pass, when a response names another model than the one requested), :class:`ProbeFinished`.
Setting ``cancel`` stops sending new requests (in-flight ones are recorded); ``run_probe`` then
raises :class:`ProbeInterrupted` naming the run id to resume. An endpoint that stops accepting
connections ends the probe after :data:`UNREACHABLE_STREAK` consecutive connection failures
(:class:`ProbeAborted`, resumable); those cases are not recorded, so ``--resume`` sends them again.

Ledger: kind ``probe-run`` at the start (the parameters), ``probe-case`` per case per pass
as it completes (parent = run id, key = ``"<pass>:<case id>"``, body with the output text,
digest and outcome), ``probe-step`` for axis steps such as a restart (key ``restart:<pass>``),
``probe-window`` for when each pass sent its requests (key ``window:<pass>``), ``probe-system`` for
the serving runtime observed at the start and end of each pass (key ``system:<pass>:start|end``, see
:mod:`execsys.probes.system`), and kind ``probe``
for the final record (parent = run id, key ``final``, identity column set). ``--resume
--retry-errored`` sends the errored cases again under ``<pass>:<case id>#retry<r>`` (the errored row
stays; the newest row counts) and writes the new final record under ``final#retry<r>``.
A resumed run reads what is there and sends only what is missing: nothing is lost or
counted twice, because a second append of the same parent+key is a no-op.
The keys and the rows are read and written through :class:`~execsys.probes.store.ProbeRunStore`.

Memory stays flat in the number of cases: the cases file is held as byte offsets
(:class:`~execsys.probes.cases.CaseFile`), what each pass still has to send is asked of the
ledger, m/n is folded at the end (:mod:`execsys.probes.agreement`) by walking the cases against
their ``probe-case`` rows, and a probe of more than ``CASES_INLINE_LIMIT`` cases writes its
per-case results as ``probe-result`` rows instead of one huge ``probe`` row (see
:mod:`execsys.probes.record`).
"""

from __future__ import annotations

import copy
import queue
import sys
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from execsys.canonical import content_id
from execsys.errors import InputError
from execsys.ledger import Ledger, new_id, now_iso
from execsys.operation import OnEvent, new_cancel
from execsys.redact import redact_text
from execsys.stats import cases_for_width

from .agreement import AgreementFold, Slot, judge, sentence
from .axes import AXES, Axis, PassSchedule
from .cases import Case, CaseFile, cases_digest, pass_indices, select
from .client import CommandClient, Completion, EndpointClient
from .compare import Extractor, digest, divergence_between, parse_extractor
from .events import (
    CaseDone,
    Note,
    PassFinished,
    PassStarted,
    ProbeFinished,
    RunOpened,
    ServedModelDiffers,
    SystemDiffers,
)
from .margin import (
    DEFAULT_TIE_MARGIN,
    margin_at,
    pack_logprobs,
    split_sentence,
    split_summary,
    unpack_logprobs,
)
from .options import ProbeOptions, decoding_from_budget
from .record import (
    CASES_INLINE_LIMIT,
    RESULT_KIND,
    CaseResult,
    LedgerCases,
    ProbeRecord,
    load_record,
    result_key,
)
from .store import (
    FINAL_KEY,
    ProbeRunStore,
    case_key,
    case_row,
    fillers_key,
    final_key,
    window_key,
)
from .system import (
    DIFFERS,
    SystemObserver,
    answered_differences,
    combine,
    step_key,
    summarise,
    with_differences,
)

__all__ = [
    "CaseDone", "Note", "PassFinished", "PassStarted", "ProbeAborted", "ProbeFinished", "ProbeInterrupted",
    "ProbeOptions", "RunOpened", "decoding_from_budget", "run_probe",
]

RUN_SCHEMA = "execsys.probe-run/1"
UNREACHABLE_STREAK = 5  # consecutive connection failures after which the endpoint counts as gone


class ProbeInterrupted(Exception):
    """Cancelled (Ctrl-C): progress is in the ledger; ``--resume RUN_ID`` continues."""

    def __init__(self, run_id: str, saved: int, total: int):
        super().__init__(f"interrupted: {saved} of {total} case results saved in run {run_id}")
        self.run_id = run_id
        self.saved = saved
        self.total = total


class ProbeAborted(InputError):
    """The probe cannot go on (a restart failed, the endpoint is gone); what completed is kept under ``run_id``."""

    def __init__(self, message: str, run_id: str):
        super().__init__(message)
        self.run_id = run_id


_Measured = tuple[Case, Completion, "str | None", "str | None", "dict[str, Any]"]
"""a case, its answer, digest, outcome, and how it was sent (in flight with how many others, after its twin)"""


def _request_key(case: Case) -> str:
    """What makes two cases twins: the same prompt or messages (an engine may reuse the cached prefix)."""
    return str(case.prompt) if case.messages is None else repr(case.messages)


@dataclass(slots=True)
class _Result:
    digest: str | None
    outcome: str | None
    error: str | None
    fingerprint: str | None = None
    model: str | None = None
    logprobs: str | None = None  # "ok" (top-K came back), "unsupported" (asked, none came), None (not asked)

    @property
    def slot(self) -> Slot:
        return Slot(self.digest, self.outcome, self.error)


# -- the run context axes see -------------------------------------------------

class RunContext:
    """What an axis hook may use: options, targets, recorded steps, notes, abort."""

    def __init__(self, options: ProbeOptions, store: ProbeRunStore, clients: list[Any],
                 cancel: threading.Event, emit: Callable[[Any], None], axis: Axis | None = None):
        self.options = options
        self.store = store  # the run's rows in the ledger (a pass sent on its own thread has its own)
        self.clients = clients
        self.cancel = cancel
        self._emit = emit
        self.steps: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.engine_change: str | None = None
        self.pass_counts: dict[int, int] = {}  # case results recorded per pass (errors included)
        self.pass_errors: dict[int, int] = {}  # of which errored
        self.completed_passes: set[int] = set()
        self.windows: dict[int, dict[str, Any]] = {}  # pass index -> when it sent (recorded after the pass)
        self.retry = False  # --retry-errored: errored cases are sent again
        self.retry_keys: dict[tuple[int, str], str] = {}  # (pass, case id) -> the key its retry goes to
        self.axis = axis or AXES[options.axis]
        self.system = SystemObserver(pinned_runtime=options.pinned_runtime,
                                     pinned_declared=options.pinned_declared_runtime, lock_id=options.identity)

    @property
    def ledger(self) -> Ledger:
        return self.store.ledger

    @property
    def run_id(self) -> str:
        return self.store.run_id

    def step(self, key: str) -> dict[str, Any] | None:
        return self.steps.get(key)

    def record_step(self, key: str, body: dict[str, Any]) -> None:
        self.store.append_step(key, body)
        self.steps[key] = body

    def pass_has_results(self, index: int) -> bool:
        return self.pass_counts.get(index, 0) > 0

    def target_url(self, index: int) -> str:
        client = self.clients[index]
        return getattr(client, "base_url", "")

    def observe(self, index: int) -> dict[str, Any]:
        """The runtime as the target shows it now: model list, server version, and the foundation's
        runtime observation (engine, build, process flags, numerics environment)."""
        from execsys.identity import observe_runtime

        info = self.clients[index].observe()
        try:
            observed = observe_runtime(_declared_runtime(self.options, self.target_url(index)), require_endpoint=False)
        except Exception as exc:  # observation is evidence, never a reason to fail the probe
            info["runtime_error"] = f"{type(exc).__name__}: {exc}"
            return info
        info["runtime"] = _engine_facts(observed)
        return info

    def system_runtime(self, index: int) -> dict[str, Any]:
        """The runtime as a pass observes it: the target's endpoint, the engine and process as the lock
        pinned them (else as declared), so the observation is comparable with the lock."""
        declared = _declared_runtime(self.options, self.target_url(index))
        for key in ("engine", "process"):
            pinned = (self.options.pinned_declared_runtime or {}).get(key)
            if pinned:
                declared[key] = pinned
        return declared

    def serving_process(self, index: int) -> tuple[dict[str, Any] | None, str | None]:
        """The process serving target ``index`` now (``{"pid", "started_at"}``), or None and why not."""
        from execsys.observe.listener import listener, local_port

        endpoint = self.system_runtime(index).get("endpoint")
        if not endpoint:
            return None, "no endpoint to find its serving process by"
        if local_port(endpoint) is None:
            return None, f"{redact_text(str(endpoint))} is not served from this machine: its process is not observable here"
        facts = listener(endpoint)
        if not facts:
            return None, f"no process visible here listens on {redact_text(str(endpoint))}'s port"
        return facts, None

    def observe_system(self, schedule: PassSchedule, at: str) -> None:
        """Observe the runtime at the start or end of a pass and judge it against the lock; a differing
        system is said at once (once per distinct difference). A resumed pass keeps its first look."""
        key = step_key(schedule.index, at)
        if key in self.steps:
            return
        entry = self.system.observe(schedule.target, self.system_runtime(schedule.target), schedule.label, at)
        entry["target"] = schedule.target
        self.store.append_system(key, entry)
        self.steps[key] = entry
        if entry["verdict"] == DIFFERS:
            from .system import sentence as system_sentence

            message = redact_text(system_sentence(entry["differences"]))
            if len(self.clients) > 1:
                message = f"{self.clients[schedule.target].display}: {message}"
            if message not in self.notes:
                self.notes.append(message)
                self._emit(SystemDiffers(message, schedule.index, at))

    def note_event(self, message: str) -> None:
        """Say ``message`` now (redacted), without keeping it in the record."""
        self._emit(Note(redact_text(message)))

    def note(self, message: str) -> None:
        """Say ``message`` now and keep it in the record's notes."""
        message = redact_text(message)
        self.notes.append(message)
        self._emit(Note(message))

    def note_once(self, message: str) -> None:
        if redact_text(message) not in self.notes:
            self.note(message)

    def engine_changed(self, detail: str) -> None:
        self.engine_change = detail
        self.note(f"{detail}: disagreement is not a{'n' if self.axis.name[:1] in 'aeiou' else ''} "
                  f"{self.axis.name} effect")

    def abort(self, message: str) -> None:
        done = sum(self.pass_counts.values())
        raise ProbeAborted(
            f"{message}; the {done} case results already taken are kept in run {self.run_id}: "
            f"fix it and continue with --resume {self.run_id}",
            self.run_id,
        )


def _declared_runtime(options: ProbeOptions, endpoint: str) -> dict[str, Any]:
    declared = {"endpoint": endpoint, "api_key_env": options.api_key_env, **options.declared_runtime}
    # a command target has no URL of its own: the declared [runtime] endpoint is what serves it
    declared["endpoint"] = endpoint or options.declared_runtime.get("endpoint")
    return {k: v for k, v in declared.items() if v not in (None, "")}


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


# -- the runner ----------------------------------------------------------------

def run_probe(options: ProbeOptions, on_event: OnEvent | None = None,
              cancel: threading.Event | None = None) -> ProbeRecord:
    """Run (or resume) one probe and return its record, already appended to ``options.ledger``."""
    options.validate()
    emit: Callable[[Any], None] = on_event or (lambda event: None)
    cancel = new_cancel(cancel)
    with Ledger.open(options.ledger) as ledger:
        return _run(options, ledger, emit, cancel)


def _run(options: ProbeOptions, ledger: Ledger, emit: Callable[[Any], None], cancel: threading.Event) -> ProbeRecord:
    axis = AXES[options.axis]
    extractor = parse_extractor(options.extract, options.timeout)

    all_cases: Sequence[Case] = options.case_list if options.case_list is not None else CaseFile(options.cases or "")
    clients: list[Any] = []
    try:
        cases = select(all_cases, options.n, options.sample_seed)
        digest_of_cases = cases_digest(cases)
        clients = _clients(options)
        models = [client.resolve_model(options.model) for client in clients]
        baseline = _load_baseline(options, ledger, cases) if axis.uses_baseline else None
        parameters = _parameters(options, clients, models, digest_of_cases, extractor)
        match = content_id(parameters)
        # said once the inputs are known to be usable: a bad input stays the one line that names it
        for line in ([options.identity_reason] if options.identity_reason else []) + list(options.warnings):
            emit(Note(redact_text(line)))
        run_id, started_at = _open_run(ledger, options, parameters, match, emit)
        store = ProbeRunStore(ledger, run_id)
        final, final_retry = store.final_row()
        ctx = RunContext(options, store, clients, cancel, emit, axis)
        schedules = axis.schedule(options)
        store.load_progress(ctx.steps, ctx.pass_counts, ctx.pass_errors, len(schedules))
        if final is not None and not (options.retry_errored and any(ctx.pass_errors.values())):
            record = load_record(ledger, final)
            emit(ProbeFinished(record))
            return record
        if options.retry_errored:
            ctx.retry = True

        stopped: dict[str, Any] | None = None
        sent = [p for p in schedules if p.source == "send"]
        if options.until_width is None:
            rounds = [len(cases)]
        else:
            # Cases in the seeded order, taken in rounds: the interval is checked after each round and
            # the record counts the cases up to the first at which it was narrow enough.
            order = pass_indices(len(cases), options.order_seed, 1)
            cases = [cases[i] for i in order[: options.max_n or len(order)]]
            # No interval over fewer cases than the narrowest one (every case agreeing) can be narrow
            # enough, so the first round takes that many; later rounds check every UNTIL_WIDTH_ROUND.
            first_round = cases_for_width(1.0, options.until_width)
            rounds = list(range(first_round, len(cases), UNTIL_WIDTH_ROUND)) + [len(cases)]
        for end in rounds:
            prefix = cases[:end]
            _send_passes(ctx, sent, prefix, clients, models, extractor, baseline, judge_level=extractor is not None)
            count = len(prefix)
            if cancel.is_set() and any(ctx.pass_counts.get(p.index, 0) < count for p in sent):
                raise ProbeInterrupted(run_id, sum(ctx.pass_counts.values()), count * len(sent))
            if options.until_width is not None:
                first = _first_narrow(store, schedules, prefix, baseline, options, extractor is not None)
                if first is not None:
                    stopped = {"reason": "width", "until_width": options.until_width, "max_n": options.max_n,
                               "early": first < len(cases)}
                    cases = prefix[:first]
                    break
        else:
            if options.until_width is not None:
                reason = "max-n" if options.max_n is not None and len(cases) >= options.max_n else "cases"
                stopped = {"reason": reason, "until_width": options.until_width, "max_n": options.max_n,
                           "early": False}

        if options.until_width is not None:
            for schedule in sent:
                ctx.observe_system(schedule, "end")
        record = _build_record(options, ctx, axis, schedules, cases, clients, models, extractor,
                               baseline, parameters, started_at, digest_of_cases, stopped)
        record_id = new_id("probe")
        record.id = record_id
        stored_id = store.append_final(record.ledger_json(), identity=record.identity,
                                       key=final_key(final, final_retry), record_id=record_id)
        if stored_id != record_id:  # another process finished the same run first: report theirs
            record = load_record(ledger, ledger.get(stored_id))
        emit(ProbeFinished(record))
        return record
    finally:
        for client in clients:
            client.close()
        if isinstance(all_cases, CaseFile):
            all_cases.close()


UNTIL_WIDTH_ROUND = 10  # cases per round of an --until-width probe


def _first_narrow(store: ProbeRunStore, schedules: list[PassSchedule], cases: Sequence[Case],
                  baseline: ProbeRecord | None, options: ProbeOptions, outcomes: bool) -> int | None:
    """How many of ``cases`` (in order) it takes until the Wilson 95% interval of the agreement over
    the compared ones is at most ``options.until_width`` wide; None when they never get there."""
    from execsys.stats import wilson

    results = _baseline_results(baseline) if baseline is not None else None
    m = n = 0
    for position, case in enumerate(cases):
        slots = _case_slots(store, schedules, case.id, results)
        verdict = judge([r.slot if r is not None else None for r in slots], level=options.compare, outcomes=outcomes)
        if verdict.errored:
            continue
        n += 1
        m += bool(verdict.agree)
        low, high = wilson(m, n) or (0.0, 1.0)
        if high - low <= (options.until_width or 0) + 1e-12:
            return position + 1
    return None


def _send_passes(ctx: RunContext, sent: list[PassSchedule], cases: Sequence[Case], clients: list[Any],
                 models: list[str | None], extractor: Extractor | None, baseline: ProbeRecord | None, *,
                 judge_level: bool) -> None:
    """Send every pass that still has cases to send: one after another, or (an axis that compares
    targets at one instant, the hosts axis) all at once, one thread and ledger connection per pass."""
    options, emit, cancel, axis = ctx.options, ctx._emit, ctx.cancel, ctx.axis
    count = len(cases)
    schedules = axis.schedule(options)

    def one(pass_ctx: RunContext, schedule: PassSchedule, todo: array) -> None:
        judge_pass = _PassJudge(options, pass_ctx.store, schedules, baseline, judge_level)
        tally = AgreementFold(level=options.compare, outcomes=judge_level, keep_ids=False)
        done_before = count - len(todo)
        emit(PassStarted(schedule.index, schedule.label, count, done_before, ctx.run_id))
        if todo and not cancel.is_set():
            params = dict(options.decoding)
            if models[schedule.target] is not None:
                params["model"] = models[schedule.target]
            pass_ctx.observe_system(schedule, "start")
            start = time.time()
            _run_pass(pass_ctx, schedule, todo, cases, clients[schedule.target], params, extractor, done_before,
                      count, judge_pass, tally)
            pass_ctx.windows[schedule.index] = {"start": _iso(start), "end": _iso(time.time()),
                                                "start_unix": round(start, 6), "end_unix": round(time.time(), 6)}
            if not cancel.is_set() and options.until_width is None:
                # an --until-width probe's passes end with its last round: looked at once all rounds are sent
                pass_ctx.observe_system(schedule, "end")
        if cancel.is_set():
            return
        errored = ctx.pass_errors.get(schedule.index, 0)
        emit(PassFinished(schedule.index, schedule.label, count - errored, errored, tally.tally()))

    if not axis.simultaneous:
        for schedule in sent:
            todo = _todo(ctx, schedule.index, cases, options.order_seed)
            if todo and not cancel.is_set():
                axis.before_pass(ctx, schedule)
            one(ctx, schedule, todo)
            _record_window(ctx, schedule.index)
            if cancel.is_set():
                return
        return
    todos = [_todo(ctx, schedule.index, cases, options.order_seed) for schedule in sent]
    failures: list[BaseException] = []
    ledgers: list[Ledger] = []

    def host(schedule: PassSchedule, todo: array) -> None:
        try:
            pass_ctx = copy.copy(ctx)  # shares the counts, steps and notes; its own ledger connection
            pass_ctx.store = ProbeRunStore(Ledger.open(ctx.ledger.path), ctx.run_id)
            ledgers.append(pass_ctx.ledger)
            one(pass_ctx, schedule, todo)
        except BaseException as exc:
            failures.append(exc)
            cancel.set()

    threads = [threading.Thread(target=host, args=(schedule, todo), name=f"probe-host-{schedule.index}", daemon=True)
               for schedule, todo in zip(sent, todos, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for opened in ledgers:
        opened.close()
    for schedule in sent:
        _record_window(ctx, schedule.index)
    if failures:
        raise failures[0]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _record_window(ctx: RunContext, index: int) -> None:
    """Keep when a pass sent its requests (the first session that sent any: a resumed pass keeps it)."""
    window = ctx.windows.pop(index, None)
    if window is not None and window_key(index) not in ctx.steps:
        ctx.store.append_window(index, window)
        ctx.steps[window_key(index)] = window


class _PassJudge:
    """Whether a case just recorded on a pass agrees with its earlier passes: the agreement fold's
    rule applied to the passes so far, reading the earlier results from the ledger (memory stays flat)."""

    def __init__(self, options: ProbeOptions, store: ProbeRunStore, schedules: list[PassSchedule],
                 baseline: ProbeRecord | None, outcomes: bool):
        self.level = options.compare
        self.store = store
        self.schedules = schedules
        self.outcomes = outcomes
        self.baseline = _baseline_results(baseline) if baseline is not None else None

    def verdict(self, pass_index: int, case_id: str, current: _Result):
        if pass_index == 0:
            return None
        earlier = _case_slots(self.store, self.schedules[:pass_index], case_id, self.baseline)
        slots = [r.slot if r is not None else None for r in earlier] + [current.slot]
        return judge(slots, level=self.level, outcomes=self.outcomes)


def _clients(options: ProbeOptions) -> list[Any]:
    if options.command:
        return [CommandClient(options.command, timeout=options.timeout, retries=min(options.retries, 1),
                              max_body=options.max_body)]
    return [
        EndpointClient(url, api_key_env=options.api_key_env, timeout=options.timeout, retries=options.retries,
                       max_body=options.max_body, max_connections=max(8, options.concurrency, options.load or 0) + 4,
                       want_tokens=options.want_tokens, logprobs=options.logprobs)
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
        "logprobs": options.logprobs,
        "until_width": options.until_width,
        "max_n": options.max_n,
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
            emit(RunOpened(run.id, True))
            return run.id, run.body.get("started_at") or run.created_at
        for run in ledger.iter(kind="probe-run", newest_first=True):
            if run.body.get("match") == match and (options.retry_errored or ledger.child(run.id, FINAL_KEY) is None):
                emit(Note(f"resuming run {run.id}"))
                emit(RunOpened(run.id, True))
                return run.id, run.body.get("started_at") or run.created_at
        emit(Note("nothing unfinished to resume with these parameters: starting a new probe"))
    started_at = now_iso()
    run_id = ledger.append("probe-run", {"schema": RUN_SCHEMA, "parameters": parameters, "match": match,
                                         "started_at": started_at})
    emit(RunOpened(run_id, False))
    return run_id, started_at


def _intern(value: str | None) -> str | None:
    """Served model names and fingerprints repeat on every case: keep one copy of each."""
    return sys.intern(value) if isinstance(value, str) else None


def _todo(ctx: RunContext, index: int, cases: Sequence[Case], seed: int) -> array:
    """Positions of the cases this pass still has to send, in the pass's order (the ledger says which
    are done; a fresh pass asks nothing, a finished one asks nothing)."""
    order = pass_indices(len(cases), seed, index)
    recorded = ctx.pass_counts.get(index, 0)
    if ctx.retry and ctx.pass_errors.get(index, 0) > 0:
        todo = array("q")
        for i in order:
            row, retry = ctx.store.case_row(index, cases[i].id)
            if row is None:
                todo.append(i)
            elif row.body.get("error"):
                ctx.retry_keys[(index, cases[i].id)] = case_key(index, cases[i].id, retry + 1)
                todo.append(i)
        return todo
    if recorded == 0:
        return order
    if recorded >= len(cases):
        return array("q")
    store = ctx.store
    return array("q", (i for i in order if not store.has_case(index, cases[i].id)))


def _run_pass(ctx: RunContext, schedule: PassSchedule, todo: array, cases: Sequence[Case], client: Any,
              params: dict[str, Any], extractor: Extractor | None, done: int, total: int,
              judge_pass: _PassJudge, tally: AgreementFold) -> None:
    """Send ``todo`` at the schedule's concurrency; record each result on the calling thread as it arrives."""
    store, run_id, cancel, emit = ctx.store, ctx.run_id, ctx.cancel, ctx._emit
    # How each request went out: the two causes found on llama.cpp (a prompt sent right after its
    # twin reuses the cached prefix; requests in flight together share a batch) are recorded per case.
    sending = threading.Lock()
    in_flight = 0
    last_sent: list[str | None] = [None]

    def sent(case: Case | None) -> dict[str, Any]:
        nonlocal in_flight
        with sending:
            conditions = {"in_flight_with": in_flight}
            in_flight += 1
            if case is not None:
                key = _request_key(case)
                conditions["after_twin"] = last_sent[0] == key
                last_sent[0] = key
            return conditions

    def answered() -> None:
        nonlocal in_flight
        with sending:
            in_flight -= 1

    def measure(case: Case) -> _Measured:
        conditions = sent(case)
        try:
            completion = client.complete(case, params)
        except Exception as exc:  # a client bug must not lose the case silently
            completion = Completion(None, error=f"{type(exc).__name__}: {exc}")
        finally:
            answered()
        if not completion.ok:
            return case, completion, None, None, conditions
        text = completion.text or ""
        return case, completion, digest(text), extractor(text) if extractor else None, conditions

    # A response naming another model than the one requested is said once per pass, as it happens;
    # every case's answered name is in its row, and the record's pass counts them.
    requested_model = params.get("model")
    other_model_said = False

    # Connection failures in a row are held back, not recorded: if the endpoint is gone they stop
    # the probe and a resumed run sends those cases again; if it answers again they are recorded
    # as the errors they were.
    unreachable: list[_Measured] = []

    def record(batch: list[_Measured]) -> None:
        """Hold back connection failures, record the rest, stop when the endpoint is gone."""
        ready: list[_Measured] = []
        for item in batch:
            if item[1].unreachable:
                unreachable.append(item)
                if len(unreachable) >= UNREACHABLE_STREAK:
                    break
                continue
            ready.extend(unreachable)
            unreachable.clear()
            ready.append(item)
        if ready:
            _record(ready)
        if len(unreachable) >= UNREACHABLE_STREAK:
            raise ProbeAborted(f"endpoint unreachable since case {unreachable[0][0].id}: stopped; --resume continues",
                               run_id)

    def _record(batch: list[_Measured]) -> None:
        """Write the results that are ready (one transaction), then account for them and report."""
        nonlocal done, other_model_said
        entries = []
        for case, completion, output_digest, outcome, conditions in batch:
            body: dict[str, Any] = {
                "pass": schedule.index, "case": case.id, "text": completion.text, "digest": output_digest,
                "outcome": outcome, "error": completion.error, "attempts": completion.attempts,
                "elapsed_s": round(completion.elapsed_s, 4), "system_fingerprint": completion.system_fingerprint,
                "model": completion.model, "finish_reason": completion.finish_reason,
            }
            if completion.top_logprobs is not None:
                body["logprobs"] = pack_logprobs(completion.tokens, completion.chosen_logprobs,
                                                 completion.top_logprobs)
                if ctx.options.want_tokens:
                    body["tokens"] = completion.tokens
            elif completion.tokens is not None:
                body["tokens"] = completion.tokens
            if completion.logprobs_unsupported:
                body["logprobs_unsupported"] = True
            body.update(conditions)
            key = ctx.retry_keys.get((schedule.index, case.id)) or case_key(schedule.index, case.id)
            entries.append((body, key))
        store.append_cases(entries)
        for case, completion, output_digest, outcome, _ in batch:
            if ctx.retry_keys.pop((schedule.index, case.id), None) is not None:
                # a retry replaces an errored result: counted once already, as an error
                if not completion.error:
                    ctx.pass_errors[schedule.index] = ctx.pass_errors.get(schedule.index, 0) - 1
            else:
                ctx.pass_counts[schedule.index] = ctx.pass_counts.get(schedule.index, 0) + 1
                if completion.error:
                    ctx.pass_errors[schedule.index] = ctx.pass_errors.get(schedule.index, 0) + 1
            done += 1
            verdict = judge_pass.verdict(schedule.index, case.id, _Result(output_digest, outcome, completion.error))
            if verdict is not None:
                tally.add_verdict(case.id, verdict)
            emit(CaseDone(schedule.index, case.id, done, total, completion.error, output_digest, completion.text,
                          outcome, agrees=verdict.agree if verdict is not None else None,
                          excluded=verdict is not None and verdict.errored, agreement=tally.tally()))
            if not other_model_said and _answered_as_other(requested_model, completion.model):
                other_model_said = True
                emit(ServedModelDiffers(
                    f"pass {schedule.label}: case {case.id} was answered as model {completion.model!r}, not the "
                    f"{requested_model!r} requested", schedule.index, case.id, str(requested_model),
                    str(completion.model)))

    # Requests go out from worker threads and results are recorded here, so even at concurrency 1 the
    # ledger write of one case overlaps the next request instead of adding to it.
    workers = max(schedule.concurrency, schedule.load)
    outbox: queue.Queue = queue.Queue(maxsize=max(64, workers * 8))
    source = iter(todo)
    source_lock = threading.Lock()
    all_received = threading.Event()
    fillers = 0
    fillers_lock = threading.Lock()  # K worker threads count filler requests
    finished = object()

    stop = threading.Event()  # set when recording fails: workers must not keep sending

    def worker() -> None:
        nonlocal fillers
        try:
            while not cancel.is_set() and not stop.is_set():
                with source_lock:
                    position = next(source, None)
                if position is None:
                    break
                outbox.put(measure(cases[position]))
            # Keep K requests in flight until the last case answered: the tail is under load too.
            i = 0
            while schedule.load and not all_received.is_set() and not cancel.is_set() and not stop.is_set():
                sent(None)
                try:
                    client.complete(cases[todo[i % len(todo)]], params)
                finally:
                    answered()
                with fillers_lock:
                    fillers += 1
                i += 1
        finally:
            outbox.put(finished)

    threads = [threading.Thread(target=worker, name=f"probe-{schedule.index}-{i}", daemon=True)
               for i in range(workers)]
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
        if unreachable:  # the pass ended on fewer failures than the streak: they are this pass's errors
            _record(list(unreachable))
            unreachable.clear()
    except BaseException:
        # Recording failed (a full disk, a locked ledger) or the endpoint is gone: stop the workers and
        # let them finish, so no thread is left blocked on the queue; what was recorded stays recorded
        # and resumable.
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
    if schedule.load:
        with fillers_lock:
            sent_fillers = fillers
        ctx.steps.setdefault(fillers_key(schedule.index), {"fillers": 0})["fillers"] += sent_fillers


def _answered_as_other(requested: str | None, answered: str | None) -> bool:
    """A response's ``model`` that is not the name requested: an alias resolved elsewhere, or a server
    answering with whatever is resident (sglang#10065). No name on either side says nothing."""
    return bool(requested) and bool(answered) and answered != requested


def _other_model_note(label: str, requested: str, answered: dict[str, int], completed: int) -> str:
    names = ", ".join(f"{name!r} ({count})" for name, count in sorted(answered.items()))
    count = sum(answered.values())
    return (f"pass {label}: {count} of {completed} responses named another model than the {requested!r} "
            f"requested: {names}")


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


def _case_slots(store: ProbeRunStore, schedules: list[PassSchedule], case_id: str,
                baseline: dict[str, _Result] | None) -> list[_Result | None]:
    """One case's result on each pass, from its probe-case rows (or the baseline record)."""
    slots: list[_Result | None] = []
    for schedule in schedules:
        if schedule.source == "baseline":
            slots.append((baseline or {}).get(case_id) or _Result(None, None, "not in the baseline record"))
            continue
        row, _ = store.case_row(schedule.index, case_id)
        if row is None:
            slots.append(None)
            continue
        body = row.body
        logprobs = "unsupported" if body.get("logprobs_unsupported") else ("ok" if "logprobs" in body else None)
        slots.append(_Result(body.get("digest"), body.get("outcome"), body.get("error"),
                             _intern(body.get("system_fingerprint")), _intern(body.get("model")), logprobs))
    return slots


def _listed(tokens: Sequence[str] | None) -> list[str] | None:
    return list(tokens) if tokens is not None else None


def _case_body(ledger: Ledger, run_id: str | None, pass_index: int, case_id: str) -> dict[str, Any]:
    if not run_id:
        return {}
    row, _ = case_row(ledger, run_id, pass_index, case_id)
    return row.body if row is not None else {}


def _build_record(options: ProbeOptions, ctx: RunContext, axis: Axis, schedules: list[PassSchedule],
                  cases: Sequence[Case], clients: list[Any], models: list[str | None], extractor: Extractor | None,
                  baseline: ProbeRecord | None, parameters: dict[str, Any], started_at: str,
                  digest_of_cases: str, stopped: dict[str, Any] | None = None) -> ProbeRecord:
    """m/n and the per-case results, walking the cases in order against their ledger rows: one case in
    memory at a time. A large probe's case results go to the ledger as probe-result rows as they are
    made (a no-op when a resumed finish writes them again), a small one's stay in the record."""
    ledger = ctx.ledger
    inline = len(cases) <= CASES_INLINE_LIMIT
    baseline_results = _baseline_results(baseline) if baseline is not None else None
    case_results: list[CaseResult] = []
    pending: list[tuple[dict[str, Any], str | None, str | None]] = []
    flip_margins: list[tuple[str, dict[str, Any] | None]] = []
    logprob_sides = {"ok": 0, "unsupported": 0}

    def keep(result: CaseResult) -> None:
        margin = (result.first_divergence or {}).get("logprobs")
        if result.agree is False:
            flip_margins.append((result.id, margin if isinstance(margin, dict) else None))
        if inline:
            case_results.append(result)
            return
        pending.append((result.to_json(), ctx.run_id, result_key(result.id)))
        if len(pending) >= 512:
            ledger.append_many(RESULT_KIND, pending)
            pending.clear()

    fold = AgreementFold(level=options.compare, outcomes=extractor is not None,
                         divergence=lambda case_id, k: _divergence(ctx.store, baseline, schedules,
                                                                   case_id, k, options.tie_margin))
    per_pass_fp: list[set[str]] = [set() for _ in schedules]
    per_pass_models: list[set[str]] = [set() for _ in schedules]
    requested = [models[s.target] if s.source == "send" else None for s in schedules]
    per_pass_other: list[dict[str, int]] = [{} for _ in schedules]  # answered name -> cases, when not requested
    per_pass_errors = [0] * len(schedules)
    per_pass_completed = [0] * len(schedules)
    for case in cases:
        slots = _case_slots(ctx.store, schedules, case.id, baseline_results)
        for i, slot in enumerate(slots):
            if slot is not None:
                if not slot.error:
                    per_pass_completed[i] += 1
                if slot.fingerprint:
                    per_pass_fp[i].add(slot.fingerprint)
                if slot.model:
                    per_pass_models[i].add(slot.model)
                    if _answered_as_other(requested[i], slot.model):
                        per_pass_other[i][slot.model] = per_pass_other[i].get(slot.model, 0) + 1
                if slot.error:
                    per_pass_errors[i] += 1
                if slot.logprobs:
                    logprob_sides[slot.logprobs] += 1
        keep(fold.add(case.id, [s.slot if s is not None else None for s in slots]))
    if pending:
        ledger.append_many(RESULT_KIND, pending)
        pending.clear()

    passes_info = []
    for i, schedule in enumerate(schedules):
        info = schedule.to_json()
        info["target"] = (clients[schedule.target].display if schedule.source == "send"
                          else f"baseline {baseline.id if baseline else ''}")
        info["model"] = models[schedule.target] if schedule.source == "send" else None
        info["order_seed"] = options.order_seed if schedule.shuffled else None
        info["completed"] = per_pass_completed[i]
        info["errored"] = per_pass_errors[i]
        info["system_fingerprints"] = sorted(per_pass_fp[i])
        info["models"] = sorted(per_pass_models[i])
        if per_pass_other[i]:
            info["model_mismatch"] = {"requested": requested[i], "answered": dict(sorted(per_pass_other[i].items())),
                                      "cases": sum(per_pass_other[i].values())}
            note = _other_model_note(schedule.label, str(requested[i]), per_pass_other[i], per_pass_completed[i])
            if note not in ctx.notes:
                ctx.notes.append(note)
        if fillers_key(i) in ctx.steps:
            info["fillers"] = ctx.steps[fillers_key(i)]["fillers"]
        if window_key(i) in ctx.steps:
            info["window"] = {k: v for k, v in ctx.steps[window_key(i)].items()
                              if k in ("start", "end", "start_unix", "end_unix")}
        passes_info.append(info)

    # Served model / system_fingerprint moving between passes is reported beside the rate; what it
    # means depends on the axis (on the restart axis it is an engine change).
    for i in range(1, len(schedules)):
        for key, label in (("system_fingerprints", "system_fingerprint"), ("models", "served model")):
            a, b = passes_info[0][key], passes_info[i][key]
            if a and b and a != b:
                axis.served_changed(ctx, f"{label} changed between pass {schedules[0].label} and pass "
                                         f"{schedules[i].label}: {', '.join(a)} -> {', '.join(b)}")
    for note in axis.fingerprint_notes(passes_info, baseline):
        if note not in ctx.notes:
            ctx.notes.append(note)

    boundary = axis.boundary(options)
    n, m = fold.n, fold.m
    holds = fold.holds
    system_check = _system_check(ctx, schedules, passes_info)
    evidence = axis.evidence(ctx, schedules, baseline)
    statement = axis.statement(boundary, n, holds, ctx.engine_change)
    if evidence is not None and evidence.get("verdict") == "not-observed" and n:
        statement = f"{evidence['sentence']}: this measures nothing {boundary}"
    record_sentence = sentence(options.axis, options.compare, fold, statement, nothing="no case completed on every pass")
    split = split_summary(flip_margins)
    split_text = split_sentence(split)
    if split_text:
        record_sentence += f". {split_text}"
    if options.logprobs == 0 or options.command:
        logprobs_status = "off" if options.logprobs == 0 else "unsupported"
    elif logprob_sides["ok"]:
        logprobs_status = "ok"
    else:
        logprobs_status = "unsupported"
    logprobs_info: dict[str, Any] = {"status": logprobs_status, "k": options.logprobs,
                                     "tie_margin": options.tie_margin}
    if logprobs_status == "ok":
        logprobs_info.update(split)
    if stopped is not None:
        ci = fold.ci95()
        stopped = {**stopped, "width": (ci[1] - ci[0]) if ci else None}
    scope = {"axis": options.axis, "boundary": boundary, "holds": holds if n else None, "level": options.compare,
             "statement": statement, "engine_changed": ctx.engine_change is not None,
             "system": system_check["verdict"], "evidence": evidence.get("verdict") if evidence else None}
    identity, identity_reason = options.identity, options.identity_reason
    if system_check["verdict"] == DIFFERS and options.identity:
        # a measurement of another system than the pinned one counts toward no identity
        identity = None
        identity_reason = (f"{system_check['sentence']} (identity {options.identity[:12]} was pinned): this probe "
                           "counts toward no identity")

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
        axis=options.axis, identity=identity, target=target, n=n, m=m, agreement_rate=fold.rate(),
        ci95=fold.ci95(), compare=fold.compare_json(extractor.spec if extractor else None),
        errored=fold.errored, flipped=fold.flipped,
        cases=case_results if inline else LedgerCases(ledger.path, ctx.run_id, len(cases)),
        cases_in_ledger=not inline, started_at=started_at, finished_at=now_iso(), scope=scope,
        sentence=record_sentence, run=ctx.run_id, passes=passes_info, repeats=len(schedules),
        decoding=options.decoding, cases_file=parameters["cases_file"], cases_digest=digest_of_cases,
        errored_cases=fold.errored_cases, engine_changed=ctx.engine_change is not None, notes=list(ctx.notes),
        baseline=baseline_info, identity_reason=identity_reason, system_check=system_check, evidence=evidence,
        logprobs=logprobs_info, tar_n=len(schedules), tarr=fold.level_json(fold.m_output)["rate"],
        tara=fold.level_json(fold.m_outcome)["rate"] if fold.outcomes else None, stopped=stopped,
    )


def _system_check(ctx: RunContext, schedules: list[PassSchedule], passes: list[dict[str, Any]]) -> dict[str, Any]:
    """``system_check`` from the passes' observations (and the models their responses named): one
    target's, or one per host."""
    answered: dict[int, list[dict[str, Any]]] = {}
    if ctx.system.comparable:
        for schedule, info in zip(schedules, passes, strict=True):
            answered.setdefault(schedule.target, []).extend(
                answered_differences([info], ctx.options.pinned_runtime))
    by_target: dict[int, list[dict[str, Any]]] = {}
    for schedule in schedules:
        if schedule.source != "send":
            continue
        for at in ("start", "end"):
            entry = ctx.steps.get(step_key(schedule.index, at))
            if entry is not None:
                by_target.setdefault(schedule.target, []).append(entry)
    lock_id = ctx.options.identity
    if len(ctx.clients) > 1:
        return combine([with_differences(summarise(by_target.get(i, []), lock_id=lock_id, target=client.display),
                                         answered.get(i, []))
                        for i, client in enumerate(ctx.clients)], lock_id=lock_id)
    return with_differences(summarise(by_target.get(0, []), lock_id=lock_id), answered.get(0, []))


def _divergence(store: ProbeRunStore, baseline: ProbeRecord | None, schedules: list[PassSchedule],
                case_id: str, k: int, tie_margin: float = DEFAULT_TIE_MARGIN) -> dict[str, Any] | None:
    def body(i: int) -> dict[str, Any]:
        if schedules[i].source == "baseline":
            return _case_body(store.ledger, baseline.run if baseline else None, 0, case_id)
        return _case_body(store.ledger, store.run_id, i, case_id)

    a, b = body(0), body(k)
    tokens_a, tokens_b = unpack_logprobs(a), unpack_logprobs(b)
    divergence = divergence_between((a.get("text"), _listed(tokens_a.tokens)), (b.get("text"), _listed(tokens_b.tokens)),
                                    k)
    margin = margin_at(tokens_a, tokens_b, divergence.get("token"), tie_margin=tie_margin)
    if margin is not None:
        divergence["logprobs"] = margin
    elif a.get("logprobs_unsupported") or b.get("logprobs_unsupported"):
        divergence["logprobs"] = "unsupported"
    sent = []
    for i, side in ((0, a), (k, b)):
        if "in_flight_with" in side or "after_twin" in side:
            sent.append({"pass": i, "after_twin": bool(side.get("after_twin")),
                         "in_flight_with": int(side.get("in_flight_with") or 0)})
    if sent:
        divergence["sent"] = sent
    return divergence


def merge_records(ledger: Ledger, record_ids: list[str]) -> ProbeRecord:
    """``execsys probe merge``: combine probe records taken on several hosts into one hosts record."""
    from .merge import merge

    return merge(ledger, record_ids)
