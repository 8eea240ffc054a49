"""The plan's execution checks as a registry: each small function judged on an executed log built
here (no server needed), one failure at a time, and the registry's order as ``plan run`` reports it.

The llama-backed tests in test_plan.py run the same checks on real runs; these pin each check's
verdict and wording on a log that differs from a clean one in exactly one way."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from execsys.errors import InputError
from execsys.plan import CHECKS, Execution, check_executed, new_plan, run_checks
from execsys.plan.checks import pinned_identity

REGISTERED = "2026-11-30T10:00:00.000Z"


def _at(seconds: float) -> str:
    moment = datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc) + timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clean_log(plan) -> list[dict]:
    """What a run that kept to the plan writes: placement, endpoints, a window, each step in order."""
    events: list[dict] = [{"event": "placement", "arm": arm, "host": "local", "checks": [], "at": _at(1)}
                          for arm in plan.arms]
    events += [{"event": "endpoint", "arm": arm, "observed": {"models": ["m"], "server": None}, "at": _at(2)}
               for arm in plan.arms]
    events.append({"event": "window-start", "at": _at(3)})
    for step, (case, arm) in enumerate(plan.expected_sequence()):
        events.append({"event": "case", "case": case, "arm": arm, "error": None, "at": _at(4 + step)})
    events += [{"event": "endpoint", "arm": arm, "observed": {"models": ["m"], "server": None}, "at": _at(100)}
               for arm in plan.arms]
    events.append({"event": "window-end", "at": _at(101)})
    return events


@pytest.fixture
def plan():
    return new_plan(["A", "B"], [f"c{i}" for i in range(4)], "abba", 1)


def header(plan) -> dict:
    return {"schema": "execsys.plan-log/1", "plan": plan.digest}


def test_a_clean_log_passes_every_logged_check_in_registry_order(plan) -> None:
    checks = check_executed(plan, REGISTERED, header(plan), clean_log(plan))
    assert [c.name for c in checks] == ["registered-first", "order", "window", "no-restart", "placement", "identity"]
    assert all(c.passed for c in checks)
    assert [spec.name for spec in CHECKS] == ["registered-first", "order", "window", "no-restart", "placement",
                                             "identity", "complete", "pinned-identity"]


def test_each_registry_line_names_the_check_its_function_returns(plan) -> None:
    run = Execution(replace(plan, identity="a" * 64), REGISTERED, clean_log(plan),
                    cancelled=True, lock_identity="b" * 64)
    for spec in CHECKS:
        result = spec.check(run)
        assert result is not None and result.name == spec.name


def _one_failure(plan, events: list[dict]) -> dict[str, str]:
    checks = check_executed(plan, REGISTERED, header(plan), events)
    return {c.name: c.detail for c in checks if not c.passed}


def test_each_deviation_fails_exactly_its_check(plan) -> None:
    log = clean_log(plan)
    cases = [i for i, e in enumerate(log) if e["event"] == "case"]

    swapped = [dict(e) for e in log]
    swapped[cases[0]]["arm"], swapped[cases[1]]["arm"] = swapped[cases[1]]["arm"], swapped[cases[0]]["arm"]
    assert set(_one_failure(plan, swapped)) == {"order"}

    early = [dict(e) for e in log]
    early[cases[0]]["at"] = "2026-11-30T09:59:59.000Z"  # before registration, and so outside the window
    assert set(_one_failure(plan, early)) == {"registered-first", "window"}

    restart = [dict(e) for e in log]
    restart.insert(cases[0] + 1, {"event": "restart", "arm": "A", "at": log[cases[0]]["at"]})
    failed = _one_failure(plan, restart)
    assert set(failed) == {"no-restart"} and f"between the arms of case {plan.order[0]['case']}" in failed["no-restart"]

    moved = [dict(e) for e in log]
    moved[0]["host"] = "rented-box"
    assert _one_failure(plan, moved) == {"placement": "arm A: ran on rented-box, registered local"}

    upgraded = [dict(e) for e in log]
    upgraded[-2] = {**upgraded[-2], "observed": {"models": ["m"], "server": {"version": "2"}}}
    assert _one_failure(plan, upgraded) == {"identity": "arm B: the endpoint's identity changed inside the window"}

    failing = [dict(e) for e in log]
    failing[cases[2]]["error"] = "no answer within 2s"
    assert _one_failure(plan, failing) == {"window": "1 case run(s) failed inside the window"}

    short = log[: cases[-1]] + log[cases[-1] + 1:]
    assert _one_failure(plan, short) == {"order": "1 registered step(s) never ran"}


def test_run_only_checks_apply_only_when_known(plan) -> None:
    log = clean_log(plan)
    names = [c.name for c in check_executed(plan, REGISTERED, header(plan), log, cancelled=True)]
    assert names[-1] == "complete"
    with_identity = replace(plan, identity="a" * 64)
    assert pinned_identity(Execution(with_identity, REGISTERED, log)) is None  # no lock given
    assert pinned_identity(Execution(plan, REGISTERED, log, lock_identity="a" * 64)) is None  # plan has none
    held = pinned_identity(Execution(with_identity, REGISTERED, log, lock_identity="a" * 64))
    assert held is not None and held.passed
    moved = pinned_identity(Execution(with_identity, REGISTERED, log, lock_identity="b" * 64))
    assert moved is not None and not moved.passed and "aaaaaaaaaaaa" in moved.detail and "bbbbbbbbbbbb" in moved.detail
    # without a log, only the checks that need none run
    unlogged = run_checks(Execution(with_identity, REGISTERED, [], lock_identity="b" * 64), logged=False)
    assert [c.name for c in unlogged] == ["pinned-identity"]


def test_a_log_for_another_plan_or_arm_is_an_input_error(plan) -> None:
    other = new_plan(["A", "B"], [f"c{i}" for i in range(4)], "abba", 2)
    with pytest.raises(InputError, match="not this plan"):
        check_executed(plan, REGISTERED, header(other), clean_log(plan))
    stray = clean_log(plan) + [{"event": "case", "case": "c0", "arm": "C", "at": _at(50)}]
    with pytest.raises(InputError, match="unknown arm 'C'"):
        check_executed(plan, REGISTERED, header(plan), stray)
