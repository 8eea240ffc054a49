"""The checks a paired run must pass before its difference may be called causal.

Each check is one small function of the :class:`Execution` (the plan, its registration and the
executed log's events) returning a :class:`Check`, or None when it does not apply; :data:`CHECKS`
lists them, one line each, in the order they are reported. ``plan run`` folds them into its label
(causal only when every one passed) and ``plan check --executed`` into a :class:`PlanCheck`
(violations, exit 1). Adding a check is one function and one line here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from execsys.errors import InputError
from execsys.ledger import Ledger
from execsys.plan.log import parse_time, read_log
from execsys.plan.schedule import Plan, is_local, load_plan, load_registered_cases, verify_registration


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class Execution:
    """What the checks read: the registered plan and what the executed log says happened.

    ``cancelled`` and ``lock_identity`` are known to a run (or to ``plan check --lock``), not to
    the log; the checks that need them do not apply without them."""

    plan: Plan
    registered_at: str
    events: list[dict[str, Any]]
    cancelled: bool = False
    lock_identity: str | None = None
    case_events: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.case_events = [e for e in self.events if e["event"] == "case"]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]


def registered_first(run: Execution) -> Check:
    """(a) The plan was in the ledger before any case ran: the order was not chosen afterwards."""
    registered = parse_time(run.registered_at)
    early = [e for e in run.case_events if parse_time(e["at"]) < registered]
    return Check("registered-first", not early,
                 "the plan was registered before any case ran" if not early else
                 f"{len(early)} case(s) ran before the plan was registered at {run.registered_at}")


def in_registered_order(run: Execution) -> Check:
    """Every (case, arm) ran in the registered, counterbalanced order, and nothing else ran."""
    expected = run.plan.expected_sequence()
    actual = [(e["case"], e["arm"]) for e in run.case_events]
    problems: list[str] = []
    for index, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if want != got:
            problems.append(f"step {index + 1}: ran case {got[0]} arm {got[1]}, registered case {want[0]} arm {want[1]}")
            break
    if len(actual) < len(expected):
        problems.append(f"{len(expected) - len(actual)} registered step(s) never ran")
    elif len(actual) > len(expected):
        problems.append(f"{len(actual) - len(expected)} step(s) ran that the plan does not contain")
    return Check("order", not problems, "; ".join(problems) or "every case ran in the registered order")


def inside_one_window(run: Execution) -> Check:
    """Both arms ran every case inside one window, and no case run failed in it."""
    starts, ends = run.named("window-start"), run.named("window-end")
    problems: list[str] = []
    if len(starts) != 1 or len(ends) != 1:
        problems.append(f"expected one window-start and one window-end, found {len(starts)} and {len(ends)}")
    else:
        lo, hi = parse_time(starts[0]["at"]), parse_time(ends[0]["at"])
        outside = [e for e in run.case_events if not lo <= parse_time(e["at"]) <= hi]
        if outside:
            arms = sorted({e["arm"] for e in outside})
            problems.append(f"{len(outside)} case run(s) of arm(s) {', '.join(arms)} outside the window "
                            f"{starts[0]['at']} .. {ends[0]['at']}")
    errored = [e for e in run.case_events if e.get("error")]
    if errored:
        problems.append(f"{len(errored)} case run(s) failed inside the window")
    return Check("window", not problems, "; ".join(problems) or "both arms ran every case inside one window")


def no_restart(run: Execution) -> Check:
    """No engine restart between the two arms of a case (or anywhere inside the window): neither one the
    run saw (a failed request, a fingerprint that moved) nor a serving process at the end of the window
    other than the one at its start (the arm's ``system`` observations: pid and start time)."""
    runs_of: dict[str, list[dict[str, Any]]] = {}
    for event in run.case_events:
        runs_of.setdefault(event["case"], []).append(event)
    problems = []
    for restart in run.named("restart"):
        at = parse_time(restart["at"])
        crossing = None
        for entry in run.plan.order:
            runs = runs_of.get(entry["case"], [])
            if len(runs) == 2 and parse_time(runs[0]["at"]) <= at <= parse_time(runs[1]["at"]):
                crossing = entry["case"]
                break
        where = f"between the arms of case {crossing}" if crossing else "inside the window"
        problems.append(f"restart of arm {restart.get('arm', '?')} at {restart['at']} {where}")
    problems.extend(_processes_changed(run))
    return Check("no-restart", not problems, "; ".join(problems) or "no restart between arms")


def _processes_changed(run: Execution) -> list[str]:
    """Arms whose serving process at the end of the window is not the one at its start."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for event in run.named("system"):
        if isinstance(event.get("process"), dict):
            seen.setdefault(str(event.get("arm")), []).append(event["process"])
    problems = []
    for arm, processes in seen.items():
        if any(p != processes[0] for p in processes[1:]):
            from execsys.probes.system import process_words

            problems.append(f"arm {arm}'s serving process changed inside the window ({process_words(processes[0])}, "
                            f"then {process_words(processes[-1])}): it restarted")
    return problems


def placement_as_registered(run: Execution) -> Check:
    """Each arm ran where it was registered, and its remote-placement conditions (a)-(d) held."""
    placed = {e.get("arm"): e for e in run.named("placement")}
    problems = []
    for arm in run.plan.arms:
        registered_host = run.plan.placement.get(arm)
        event = placed.get(arm)
        actual_host = event.get("host") if event else None
        if registered_host and not event:
            problems.append(f"arm {arm}: registered on {registered_host}, no placement recorded")
        elif event and (actual_host or "") != (registered_host or "") and not (
            is_local(actual_host) and is_local(registered_host)
        ):
            problems.append(f"arm {arm}: ran on {actual_host or 'local'}, registered {registered_host or 'local'}")
        elif event and event.get("checks"):
            failed = [c["name"] for c in event["checks"] if not c.get("passed")]
            if failed:
                problems.append(f"arm {arm}: placement check(s) failed: {', '.join(failed)}")
    return Check("placement", not problems, "; ".join(problems) or "placement as registered")


def endpoint_identity_unchanged(run: Execution) -> Check:
    """Each endpoint answered as the same server (models, version) at both ends of the window."""
    observed: dict[Any, list[Any]] = {}
    for event in run.named("endpoint"):
        observed.setdefault(event.get("arm"), []).append(event.get("observed"))
    problems = [f"arm {arm}: the endpoint's identity changed inside the window"
                for arm, seen in observed.items() if any(s != seen[0] for s in seen[1:])]
    return Check("identity", not problems,
                 "; ".join(problems) or "each endpoint answered as the same server throughout")


def complete(run: Execution) -> Check | None:
    """A cancelled run's window is incomplete (shown only when it was cancelled)."""
    return Check("complete", False, "cancelled before every case ran") if run.cancelled else None


def pinned_identity(run: Execution) -> Check | None:
    """The lock given now pins the identity the plan was registered for (when both are known)."""
    plan_identity, lock_identity = run.plan.identity, run.lock_identity
    if not plan_identity or not lock_identity:
        return None
    if lock_identity == plan_identity:
        return Check("pinned-identity", True, f"the lock pins identity {plan_identity[:12]}, as registered")
    return Check("pinned-identity", False, f"the plan was registered for identity {plan_identity[:12]}, "
                 f"the lock given pins {lock_identity[:12]}")


class PlanCheckSpec(NamedTuple):
    name: str
    check: Callable[[Execution], Check | None]
    needs_log: bool  # judged from the executed log (False: from the plan and what the run or caller knows)


CHECKS: tuple[PlanCheckSpec, ...] = (
    PlanCheckSpec("registered-first", registered_first, True),
    PlanCheckSpec("order", in_registered_order, True),
    PlanCheckSpec("window", inside_one_window, True),
    PlanCheckSpec("no-restart", no_restart, True),
    PlanCheckSpec("placement", placement_as_registered, True),
    PlanCheckSpec("identity", endpoint_identity_unchanged, True),
    PlanCheckSpec("complete", complete, False),
    PlanCheckSpec("pinned-identity", pinned_identity, False),
)


def run_checks(run: Execution, *, logged: bool = True) -> list[Check]:
    """Every applicable check, in registry order; with ``logged=False`` (there is no executed log
    to judge) only the checks that need none."""
    return [result for spec in CHECKS if logged or not spec.needs_log if (result := spec.check(run)) is not None]


def validate_log(plan: Plan, header: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """An executed log for another plan, or naming an arm the plan lacks, is an input error."""
    if header.get("plan") != plan.digest:
        raise InputError(f"the executed log is for plan {str(header.get('plan'))[:16]}, not this plan ({plan.digest[:16]})")
    for event in events:
        if event["event"] == "case" and event["arm"] not in plan.arms:
            raise InputError(f"executed log names unknown arm '{event['arm']}' (arms: {', '.join(plan.arms)})")


def check_executed(plan: Plan, registered_at: str, header: dict[str, Any], events: list[dict[str, Any]], *,
                   cancelled: bool = False, lock_identity: str | None = None) -> list[Check]:
    """The registry's checks of an executed log against the plan."""
    validate_log(plan, header, events)
    return run_checks(Execution(plan, registered_at, events, cancelled, lock_identity))


@dataclass
class PlanCheck:
    plan: Plan
    record: str
    registered_at: str
    violations: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    executed: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "execsys.plan-check/1", "plan": self.plan.digest, "record": self.record,
            "registered_at": self.registered_at, "digest_ok": True, "registered": True,
            "executed": self.executed, "checks": [c.to_json() for c in self.checks],
            "violations": self.violations, "ok": self.ok,
        }


def check_plan(plan_path: str | os.PathLike[str], ledger: Ledger, executed: str | os.PathLike[str] | None = None,
               *, lock_identity: str | None = None) -> PlanCheck:
    """Digest and registration (InputError when edited or unregistered); with an executed log, the
    registry's checks as violations; with a lock, whether it pins the identity registered."""
    plan = load_plan(plan_path)
    record, registered_at = verify_registration(plan, ledger, str(plan_path))
    cases_file = plan.cases_file(Path(plan_path).parent)
    if cases_file is not None and plan.cases.get("digest") and cases_file.is_file():
        # 'plan run' refuses an edited cases file, so 'plan check' says so first; one absent here is not checked
        load_registered_cases(plan, cases_file)
    result = PlanCheck(plan, record, registered_at)
    if executed is not None:
        header, events = read_log(executed)
        result.checks = check_executed(plan, registered_at, header, events, lock_identity=lock_identity)
        result.executed = str(executed)
    else:
        result.checks = run_checks(Execution(plan, registered_at, [], lock_identity=lock_identity), logged=False)
    result.violations = [f"{c.name}: {c.detail}" for c in result.checks if not c.passed]
    return result
