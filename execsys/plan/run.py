"""Running a registered plan: both arms, in the registered order, inside one window.

``execsys plan run`` is this module::

    options = PlanRunOptions.from_sources(declaration, lock, plan=plan, endpoints={"A": url, "B": url})
    run = run_plan(options, on_event=print, cancel=threading.Event())   # -> PlanRun (execsys.plan-run/2)

Remote placement (a)-(d) is checked for every arm before the first case; each case is sent to
its first arm, then to the other, with that arm's declared parameters; every step is written to
the executed log as it happens and told to the face as a typed event. Afterwards the registry of
:mod:`execsys.plan.checks` judges the log, and the paired difference is labelled causal only when
every check held. Setting ``cancel`` stops after the case in hand; the run is then descriptive.

Each arm's serving runtime is observed at the start and end of the window and judged against the
arm's own lock (``--arm-lock``, else the run's; :mod:`execsys.plan.system`): the record carries
``arms.<ARM>.system_check`` and ``arms.<ARM>.identity`` (null, with ``identity_reason``, unless the
arm matched its lock), so ``compare`` derives what moved from the arms' own identities. Schema
``execsys.plan-run/2``; a ``/1`` record (one identity for both arms) is still read.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.errors import InputError, UsageError
from execsys.ledger import Ledger
from execsys.operation import Event, OnEvent, emit, first_given, new_cancel
from execsys.plan.checks import Check, check_executed
from execsys.plan.log import LOG_SCHEMA, ExecutedLog
from execsys.plan.paired import PairedStats, is_correct, paired_stats
from execsys.plan.placement import PlacementReport, check_placement
from execsys.plan.schedule import (
    NO_PLAN_IDENTITY,
    Plan,
    check_arms,
    load_registered_cases,
    unpinned_reason,
    verify_registration,
)
from execsys.plan.system import ArmObserver, ArmSystem, arm_lock, arm_systems

if TYPE_CHECKING:
    import threading

    from execsys.declaration import Declaration
    from execsys.identity import Identity
    from execsys.probes.client import EndpointClient

RUN_SCHEMA = "execsys.plan-run/2"  # /2: arms.<ARM>.system_check and identity (each arm's own system)
RUN_SCHEMAS = ("execsys.plan-run/1", RUN_SCHEMA)  # what readers accept
DEFAULT_PARAMS: dict[str, Any] = {"temperature": 0, "max_tokens": 32}
DEFAULT_TIMEOUT = 120.0


# ------------------------------------------------------------------ events
@dataclass(frozen=True)
class PlacementChecked(Event):
    """Where an arm runs, and -- on a remote host -- conditions (a)-(d), before its first case."""

    arm: str
    host: str  # "local" for this machine
    checks: tuple[Check, ...]  # empty for a local arm
    hardware: dict[str, Any] | None = None
    digest: dict[str, Any] | None = None


@dataclass(frozen=True)
class NoPinnedIdentity(Event):
    """The run is tied to no identity: why (the lock looked for). Told once every input has been
    accepted, just before the window opens, so that bad input stays a single line."""

    reason: str


@dataclass(frozen=True)
class ArmSystemDiffers(Event):
    """An arm's serving runtime is not its pinned system (``message``: "arm B: the engine answering this
    plan is not the pinned system: runtime argv +--n_batch 7"): that arm counts toward no identity.
    Told as it is seen (at the start or end of the window), once per distinct difference."""

    arm: str
    at: str  # "start" or "end"
    message: str


@dataclass(frozen=True)
class WindowOpened(Event):
    at: str
    cases: int  # cases in the plan; each runs on both arms


@dataclass(frozen=True)
class CaseSent(Event):
    """A request is about to go to ``arm`` with exactly these parameters (model included)."""

    step: int  # 1-based position in the registered sequence (2 per case)
    total: int
    case_id: str
    arm: str
    position: str  # "first" or "second"
    params: dict[str, Any]


@dataclass(frozen=True)
class ArmAnswered(Event):
    step: int
    total: int
    case_id: str
    arm: str
    position: str
    outcome: str | None
    correct: bool
    error: str | None


@dataclass(frozen=True)
class PairScored(Event):
    """Both arms answered one case: its pair, and the discordant counts so far."""

    case_id: str
    first: str
    correct: dict[str, bool]
    errored: bool  # an arm failed: the pair is excluded from n
    n: int  # pairs counted so far
    b: int  # so far: first arm of the plan right, second wrong
    c: int  # so far: first arm wrong, second right


@dataclass(frozen=True)
class RestartSeen(Event):
    arm: str
    reason: str


@dataclass(frozen=True)
class WindowClosed(Event):
    at: str
    cancelled: bool


@dataclass(frozen=True)
class CheckResult(Event):
    """One check of the registry, judged after the window closed."""

    check: Check


# ------------------------------------------------------------------ options
def lock_artifact(lock: Identity) -> tuple[str | None, str | None]:
    """Path and digest of the pinned artifact (top level, then observed, then declared)."""
    artifact = lock.components.get("artifact") or {}
    found: dict[str, str] = {}
    for source in (artifact, artifact.get("observed") or {}, artifact.get("declared") or {}):
        if isinstance(source, dict):
            for key in ("path", "digest"):
                if key not in found and isinstance(source.get(key), str):
                    found[key] = source[key]
    return found.get("path"), found.get("digest")


@dataclass(frozen=True)
class PlanRunOptions:
    """Everything ``plan run`` needs, layered and validated (see :meth:`from_sources`)."""

    plan: Plan
    endpoints: dict[str, str]
    cases_path: Path
    params: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_PARAMS))
    arm_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    extract: str | None = None
    artifact_path: str | None = None
    expected_digest: str | None = None
    placement_table: dict[str, Any] = field(default_factory=dict)
    log_path: Path | None = None
    timeout: float = DEFAULT_TIMEOUT
    api_key_env: str | None = None
    lock_identity: str | None = None
    identity_reason: str | None = None  # why the run counts toward no scope, when it does not
    ledger: Path | None = None
    # what each arm's serving runtime is judged against: its --arm-lock, else the run's lock
    arm_systems: dict[str, ArmSystem] = field(default_factory=dict)

    @classmethod
    def from_sources(cls, declaration: Declaration | None, lock: Identity | None, *, plan: Plan,
                     endpoints: Mapping[str, str], params: Mapping[str, Any] | None = None,
                     arm_params: Mapping[str, Mapping[str, Any]] | None = None, extract: str | None = None,
                     cases: str | os.PathLike[str] | None = None, artifact: str | None = None,
                     log: str | os.PathLike[str] | None = None, plan_path: str | os.PathLike[str] | None = None,
                     timeout: float | None = None, api_key_env: str | None = None,
                     lock_path: str | os.PathLike[str] | None = None,
                     ledger: str | os.PathLike[str] | None = None,
                     arm_locks: Mapping[str, Identity | str | os.PathLike[str]] | None = None) -> PlanRunOptions:
        """Flags over the declaration over the lock; None = not given.

        - ``endpoints``/``arm_params``: every arm needs an endpoint; naming an arm the plan lacks
          is an error (as ``--arm``/``--arm-params`` would be spelled);
        - ``params`` over the declared budget (the lock's ``budget``, else the declaration's ``[budget]``:
          what probes under the same lock send, :func:`execsys.probes.options.declared_budget`) over
          temperature 0 and max_tokens 32, then each arm's ``arm_params``;
        - ``cases``, else the registered cases file (a relative one found from the plan's directory);
        - ``log``, else ``<plan_path>.executed.jsonl`` when the plan came from a file, else none; an
          earlier run's log is never overwritten: a ``log`` that exists is refused (so is the plan or
          cases file itself), and the default becomes ``<plan_path>.executed-2.jsonl``, ``-3`` ...;
        - the lock: the identity the plan must have been registered for, and the artifact path
          and digest remote placement (b) verifies (``artifact`` overrides the path);
        - the declaration: ``[placement]`` (hosts and the residency policy for (d)), and ``[runtime]``
          engine/process (how each arm's serving runtime is observed);
        - ``arm_locks``: an arm's own lock (an identity, or a lock file read as ``--lock`` is), which that
          arm's system is checked against instead of the run's lock -- two arms that are two pinned
          systems (two artifacts, two engine builds).
        """
        from execsys.probes.compare import parse_extractor
        from execsys.probes.options import declared_budget, decoding_from_budget
        from execsys.proc import MAX_WAIT_S

        arms = plan.arms
        check_arms(endpoints, arms, lambda arm, url: f"--arm {f'{arm}={url}'!r}: ", listed="the plan's arms")
        missing = [arm for arm in arms if arm not in endpoints]
        if missing:
            raise UsageError(f"no endpoint for arm(s) {', '.join(missing)}: give --arm {missing[0]}=URL")
        check_arms(arm_params or {}, arms, lambda arm, value: "--arm-params: ", error=UsageError)
        check_arms(arm_locks or {}, arms, lambda arm, value: "--arm-lock: ", error=UsageError)
        own_locks = {arm: arm_lock(arm, value) for arm, value in (arm_locks or {}).items()}
        for arm, values in (arm_params or {}).items():
            if not isinstance(values, Mapping):
                raise UsageError(f"--arm-params {arm}: expected a JSON object")
        if params is not None and not isinstance(params, Mapping):
            raise UsageError("--params: expected a JSON object")
        check_sendable(params, arm_params)
        wait = first_given(timeout, DEFAULT_TIMEOUT)
        if wait is None or not 0 < wait <= MAX_WAIT_S:  # httpx overflows past it (1e12 crashed mid-run)
            raise UsageError(f"--timeout {timeout}: expected a number of seconds above 0, at most {MAX_WAIT_S:.0f}")
        parse_extractor(extract)  # a malformed --extract is a usage error before anything runs

        base_dir = Path(plan_path).parent if plan_path is not None else None
        if cases is not None:
            cases_path = Path(cases)
        else:
            registered = plan.cases_file(base_dir)
            if registered is None:
                raise UsageError("the plan was made from case ids, not a cases file: give --cases FILE")
            cases_path = registered
        log_path = _new_log(Path(log), plan_path, cases_path) if log else (
            next_free_log(Path(f"{plan_path}.executed.jsonl")) if plan_path is not None else None)

        lock_identity, pinned_path, pinned_digest = None, None, None
        if lock is not None:
            lock_identity = lock.id
            pinned_path, pinned_digest = lock_artifact(lock)
        placement_table = dict(declaration.tables.get("placement") or {}) if declaration is not None else {}

        reason = None
        if plan.identity is None:  # a lock found now does not pin a plan registered without one
            reason = unpinned_reason(lock_path) if lock is None else NO_PLAN_IDENTITY
        return cls(plan=plan, endpoints=dict(endpoints), cases_path=cases_path,
                   params={**DEFAULT_PARAMS, **decoding_from_budget(declared_budget(declaration, lock)),
                           **(params or {})},
                   arm_params={arm: dict(values) for arm, values in (arm_params or {}).items()},
                   extract=extract, artifact_path=first_given(artifact, pinned_path), expected_digest=pinned_digest,
                   placement_table=placement_table, log_path=log_path, timeout=float(wait),
                   api_key_env=api_key_env, lock_identity=lock_identity, identity_reason=reason,
                   ledger=Path(ledger).expanduser() if ledger else None,
                   arm_systems=arm_systems(declaration, lock, arms, own_locks))

    def arm_request_params(self, arm: str) -> dict[str, Any]:
        """The parameters ``arm`` is run with: the one value both sent and recorded."""
        return {**self.params, **self.arm_params.get(arm, {})}


def check_sendable(params: Mapping[str, Any] | None, arm_params: Mapping[str, Mapping[str, Any]] | None) -> None:
    """UsageError for a parameter no request can carry: NaN or an infinity (Python's JSON reads
    ``NaN``; the request body and the executed log cannot hold it), so a run is refused before
    its first case rather than crashing after some have run."""
    given = [("--params", params or {})] + [(f"--arm-params {arm}", values) for arm, values in (arm_params or {}).items()]
    for flag, values in given:
        where = _non_finite_at(values)
        if where is not None:
            raise UsageError(f"{flag}: {where} is NaN or infinite, which a request cannot carry (JSON has no such number)")


def _non_finite_at(value: Any, path: str = "") -> str | None:
    """The key path (``a.b[2]``) to the first NaN or infinity in a JSON-like value, or None."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return path or "the value"
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite_at(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _new_log(log: Path, plan_path: str | os.PathLike[str] | None, cases_path: Path) -> Path:
    """``--log``, refused when something is already there: the plan or its cases (``--log plan.json``
    would truncate the plan), an earlier run's log, a symlink, FIFO, device or directory."""
    from execsys.fsutil import file_kind

    def refuse(reason: str) -> UsageError:
        return UsageError(f"--log {log}: cannot write the executed log ({reason})")

    try:
        st = os.lstat(log)
    except FileNotFoundError:
        return log
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from None
    for what, other in (("the plan file", plan_path), ("the cases file", cases_path)):
        with contextlib.suppress(OSError):
            if other is not None and os.path.samefile(log, other):
                raise refuse(f"that is {what} itself; give the log a name of its own")
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else file_kind(st.st_mode)
        raise refuse(f"is {kind}, not a new file")
    raise refuse("it already exists, an earlier run's log?; execsys never overwrites one: give a new file")


def next_free_log(default: Path) -> Path:
    """``default`` when nothing is there, else ``<stem>-2<suffix>``, ``-3`` ...: the first free name, so a
    second run of a plan keeps the first run's log."""
    if not os.path.lexists(default):
        return default
    stem, suffix = default.name.removesuffix(".jsonl"), ".jsonl"
    number = 2
    while os.path.lexists(candidate := default.with_name(f"{stem}-{number}{suffix}")):
        number += 1
    return candidate


# ------------------------------------------------------------------ the report
@dataclass
class PlanRun:
    plan: Plan
    plan_record: str
    arms: dict[str, dict[str, Any]]
    outcomes: dict[str, dict[str, dict[str, Any]]]
    stats: PairedStats
    checks: list[Check]
    placement: list[PlacementReport]
    label: str
    statement: str
    started_at: str
    finished_at: str
    log: str | None
    cancelled: bool = False
    record: str | None = None
    identity_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RUN_SCHEMA, "plan": self.plan.digest, "plan_record": self.plan_record, "record": self.record,
            "arms": self.arms, "design": self.plan.design, "identity": self.plan.identity,
            "identity_reason": self.identity_reason,
            "paired": self.stats.to_json(), "checks": [c.to_json() for c in self.checks],
            "placement": [p.to_json() for p in self.placement], "label": self.label, "statement": self.statement,
            "started_at": self.started_at, "finished_at": self.finished_at, "log": self.log,
            "cancelled": self.cancelled, "outcomes": self.outcomes,
        }


# ------------------------------------------------------------------ the run
def run_plan(options: PlanRunOptions, on_event: OnEvent | None = None,
             cancel: threading.Event | None = None) -> PlanRun:
    """Execute the registered order inside one window and report the paired difference.

    Refused (InputError) before any request when the plan was edited or not registered in the
    ledger, or when its cases changed or lack an expected answer. The run is recorded in the
    ledger (kind ``plan-run``, under the plan's record) whether causal, descriptive or cancelled."""
    with Ledger.open(options.ledger) as ledger:
        return _Run(options, ledger, on_event, new_cancel(cancel)).run()


class _Run:
    def __init__(self, options: PlanRunOptions, ledger: Ledger, on_event: OnEvent | None,
                 cancel: threading.Event) -> None:
        self.options, self.plan, self.ledger = options, options.plan, ledger
        self.on_event, self.cancel = on_event, cancel
        self.pairs: list[tuple[bool, bool]] = []  # (first arm of the plan right, second right), errored excluded
        self.discordant = {"b": 0, "c": 0}

    def run(self) -> PlanRun:
        from execsys.probes.client import EndpointClient
        from execsys.probes.compare import parse_extractor

        options, plan = self.options, self.plan
        plan_record, registered_at = verify_registration(plan, self.ledger)
        cases = load_registered_cases(plan, options.cases_path)
        no_expected = [e["case"] for e in plan.order if cases[e["case"]].expected is None]
        if no_expected:
            raise InputError(f"case {no_expected[0]} has no \"expected\" answer: a paired comparison needs one per case")
        extractor = parse_extractor(options.extract, options.timeout)

        clients = {arm: EndpointClient(url, timeout=options.timeout, api_key_env=options.api_key_env)
                   for arm, url in options.endpoints.items()}
        log = ExecutedLog(options.log_path, {"schema": LOG_SCHEMA, "plan": plan.digest, "plan_record": plan_record,
                                             "arms": {a: clients[a].display for a in plan.arms}})
        outcomes: dict[str, dict[str, dict[str, Any]]] = {}
        placements: list[PlacementReport] = []
        models: dict[str, str] = {}
        started = finished = ""
        cancelled = False
        systems = ArmObserver(options.arm_systems or arm_systems(None, None, plan.arms))
        fingerprints: dict[str, set[str]] = {arm: set() for arm in plan.arms}
        answered: dict[str, set[str]] = {arm: set() for arm in plan.arms}  # the models named in responses
        try:
            placements = self._check_placement(log, registered_at)
            models = {arm: clients[arm].resolve_model(None) for arm in plan.arms}
            for arm in plan.arms:
                log.event("endpoint", arm=arm, observed=_observe(clients[arm]))
            if options.identity_reason:
                emit(self.on_event, NoPinnedIdentity(options.identity_reason))
            self._observe_systems(systems, log, "start")
            started = log.event("window-start")["at"]
            emit(self.on_event, WindowOpened(started, len(plan.order)))
            total = 2 * len(plan.order)
            step = 0
            for entry in plan.order:
                if self.cancel.is_set():
                    cancelled = True
                    break
                case = cases[entry["case"]]
                for arm in (entry["first"], plan.other(entry["first"])):
                    step += 1
                    position = "first" if arm == entry["first"] else "second"
                    request = {**options.arm_request_params(arm), "model": models[arm]}
                    emit(self.on_event, CaseSent(step, total, case.id, arm, position, request))
                    completion = clients[arm].complete(case, request)
                    text = completion.text if completion.ok else None
                    outcome = (extractor(text) if extractor else text.strip()) if text is not None else None
                    correct = is_correct(outcome, case.expected)
                    if completion.system_fingerprint:
                        fingerprints[arm].add(completion.system_fingerprint)
                    if completion.ok and completion.model:
                        answered[arm].add(completion.model)
                    outcomes.setdefault(case.id, {})[arm] = {
                        "text": text, "outcome": outcome, "correct": correct, "error": completion.error,
                        "first": arm == entry["first"],
                    }
                    log.event("case", case=case.id, arm=arm, position=position, outcome=outcome, correct=correct,
                              error=completion.error)
                    emit(self.on_event, ArmAnswered(step, total, case.id, arm, position, outcome, correct,
                                                    completion.error))
                    if completion.error:
                        self._restart(log, arm, f"the endpoint failed mid-window ({completion.error})")
                self._score(case.id, entry["first"], outcomes[case.id])
            for arm in plan.arms:
                log.event("endpoint", arm=arm, observed=_observe(clients[arm]))
            self._observe_systems(systems, log, "end")
            for arm, seen in fingerprints.items():
                if len(seen) > 1:
                    self._restart(log, arm, f"system_fingerprint changed inside the window: {sorted(seen)}")
            finished = log.event("window-end")["at"]
            emit(self.on_event, WindowClosed(finished, cancelled))
        finally:
            log.close()
            for client in clients.values():
                client.close()

        checks = check_executed(plan, registered_at, log.header, log.events, cancelled=cancelled,
                                lock_identity=options.lock_identity)
        for check in checks:
            emit(self.on_event, CheckResult(check))
        stats = paired_stats(self.pairs)
        causal = all(c.passed for c in checks)
        a = plan.arms[0]
        arms_json = {arm: {"endpoint": clients[arm].display, "model": models.get(arm),
                           "host": plan.placement.get(arm) or "local",
                           "params": options.arm_request_params(arm),
                           "correct": sum(1 for o in outcomes.values() if o.get(arm, {}).get("correct")),
                           "rate": stats.rate_a if arm == a else stats.rate_b,
                           **systems.judge(arm, models=sorted(answered[arm]), fingerprints=sorted(fingerprints[arm]))}
                     for arm in plan.arms}
        run = PlanRun(plan, plan_record, arms_json, outcomes, stats, checks, placements,
                      "causal" if causal else "descriptive", plan_statement(plan, stats, checks, causal),
                      started, finished, str(options.log_path) if options.log_path else None, cancelled,
                      identity_reason=options.identity_reason)
        run.record = self.ledger.append("plan-run", run.to_json(), identity=plan.identity, parent=plan_record)
        return run

    def _check_placement(self, log: ExecutedLog, registered_at: str) -> list[PlacementReport]:
        """Every arm's placement, before the first case of any arm: remote ones checked (a)-(d)."""
        reports: list[PlacementReport] = []
        for arm in self.plan.arms:
            host = self.plan.remote_host(arm)
            if host is None:
                log.event("placement", arm=arm, host=self.plan.placement.get(arm) or "local", checks=[])
                emit(self.on_event, PlacementChecked(arm, self.plan.placement.get(arm) or "local", ()))
                continue
            report = check_placement(arm, host, registered_at=registered_at,
                                     artifact_path=self.options.artifact_path,
                                     expected_digest=self.options.expected_digest,
                                     placement_table=self.options.placement_table,
                                     timeout=max(self.options.timeout, 60.0))
            reports.append(report)
            log.event("placement", arm=arm, host=host, checks=[c.to_json() for c in report.checks],
                      hardware=report.hardware, digest=report.digest)
            emit(self.on_event, PlacementChecked(arm, host, tuple(report.checks), report.hardware, report.digest))
        return reports

    def _observe_systems(self, systems: ArmObserver, log: ExecutedLog, at: str) -> None:
        """Every arm's serving runtime against its lock, at the start or end of the window; a differing
        arm is told at once (one line)."""
        from execsys.probes.system import process_of

        for arm, entry, line in systems.observe_all(self.options.endpoints, self.options.api_key_env, at):
            log.event("system", arm=arm, when=at, verdict=entry["verdict"], differences=entry["differences"],
                      process=process_of(entry.get("observed")), reason=entry.get("reason"))
            if line is not None:
                emit(self.on_event, ArmSystemDiffers(arm, at, line))

    def _restart(self, log: ExecutedLog, arm: str, reason: str) -> None:
        log.event("restart", arm=arm, reason=reason)
        emit(self.on_event, RestartSeen(arm, reason))

    def _score(self, case_id: str, first: str, arms: dict[str, dict[str, Any]]) -> None:
        a, b = self.plan.arms
        errored = not (a in arms and b in arms) or bool(arms[a]["error"]) or bool(arms[b]["error"])
        if not errored:
            pair = (bool(arms[a]["correct"]), bool(arms[b]["correct"]))
            self.pairs.append(pair)
            if pair[0] != pair[1]:
                self.discordant["b" if pair[0] else "c"] += 1
        emit(self.on_event, PairScored(case_id, first, {arm: bool(o["correct"]) for arm, o in arms.items()},
                                       errored, len(self.pairs), self.discordant["b"], self.discordant["c"]))


def _observe(client: EndpointClient) -> dict[str, Any]:
    info = client.observe()
    return {"models": info.get("models"), "server": info.get("server")}


def plan_statement(plan: Plan, stats: PairedStats, checks: list[Check], causal: bool) -> str:
    """The one sentence a paired run ends with: the figures, and whether they are causal."""
    a, b = plan.arms
    if stats.n == 0 or stats.rate_a is None or stats.rate_b is None or stats.difference is None:
        return "No case produced an answer from both arms: nothing to compare."
    ci = f"95% CI {stats.ci95[0]:+.3f} to {stats.ci95[1]:+.3f}" if stats.ci95 else "no interval"
    figures = (f"{a} {stats.rate_a:.3f} vs {b} {stats.rate_b:.3f} over {stats.n} paired cases; "
               f"difference {a}-{b} {stats.difference:+.3f} ({ci}); discordant pairs {stats.b} ({a} only) "
               f"and {stats.c} ({b} only), exact McNemar p = {stats.mcnemar_p:.4g}")
    if causal:
        return (f"Contemporaneous paired control held (order, placement, window and identity checks all passed): "
                f"the paired difference is a causal estimate of {a} against {b}. {figures}.")
    failed = ", ".join(c.name for c in checks if not c.passed)
    return f"Descriptive only: the {failed} check(s) failed, so no causal claim is made. {figures}."
