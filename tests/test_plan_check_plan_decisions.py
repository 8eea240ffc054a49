"""``execsys plan check`` as a table, in process (:func:`execsys.plan.checks.check_plan`): a registered
plan alone, with a lock, with an executed log (clean, and each kind of violation as the line a user
reads), a cases file edited since registration, and the record's JSON.

tests/test_plan_decisions.py judges each check on hand-built logs; tests/test_plan.py runs the command.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from execsys.errors import InputError
from execsys.ledger import Ledger
from execsys.plan.checks import Check, PlanCheck, check_plan
from execsys.plan.log import LOG_SCHEMA, parse_time
from execsys.plan.schedule import new_plan, register_plan


def write_cases(path, n=3, expected="yes"):
    path.write_text("".join(json.dumps({"id": f"c{i}", "prompt": "p", "expected": expected}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return path


@pytest.fixture
def setup(tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl")
    plan = new_plan(["A", "B"], cases, "abba", 2, identity="f" * 64)
    ledger = Ledger.open(tmp_path / "ledger.sqlite3")
    register_plan(plan, ledger)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan.to_json()))
    yield type("Setup", (), {"plan": plan, "cases": cases, "ledger": ledger, "path": plan_path, "dir": tmp_path})
    ledger.close()


def later(registered_at: str, seconds: float) -> str:
    moment = parse_time(registered_at) + timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clean_events(plan, registered_at):
    events = [{"event": "window-start", "at": later(registered_at, 1)}]
    for i, (case, arm) in enumerate(plan.expected_sequence()):
        events.append({"event": "case", "case": case, "arm": arm, "error": None, "at": later(registered_at, 2 + i)})
    events.append({"event": "window-end", "at": later(registered_at, 100)})
    return events


def write_log(path, plan, events, *, digest=None):
    header = {"schema": LOG_SCHEMA, "plan": digest or plan.digest}
    path.write_text("".join(json.dumps(row) + "\n" for row in [header, *events]))
    return path


def test_a_registered_plan_alone_passes_with_only_the_checks_needing_no_log(setup) -> None:
    result = check_plan(setup.path, setup.ledger)
    assert (result.record, result.registered_at) == (setup.plan.record_id, setup.plan.registered_at)
    assert result.checks == [] and result.violations == [] and result.ok is True and result.executed is None
    assert result.to_json() == {
        "schema": "execsys.plan-check/1", "plan": setup.plan.digest, "record": setup.plan.record_id,
        "registered_at": setup.plan.registered_at, "digest_ok": True, "registered": True, "executed": None,
        "checks": [], "violations": [], "ok": True}


def test_a_lock_pinning_the_registered_identity(setup) -> None:
    result = check_plan(setup.path, setup.ledger, lock_identity="f" * 64)
    assert result.checks == [Check("pinned-identity", True, "the lock pins identity ffffffffffff, as registered")]
    assert result.ok is True


def test_a_lock_pinning_another_identity_is_a_violation(setup) -> None:
    result = check_plan(setup.path, setup.ledger, lock_identity="e" * 64)
    assert result.violations == ["pinned-identity: the plan was registered for identity ffffffffffff, "
                                 "the lock given pins eeeeeeeeeeee"]
    assert result.ok is False and result.to_json()["ok"] is False


def test_a_clean_executed_log_passes_every_check(setup) -> None:
    log = write_log(setup.dir / "log.jsonl", setup.plan, clean_events(setup.plan, setup.plan.registered_at))
    result = check_plan(setup.path, setup.ledger, log, lock_identity="f" * 64)
    assert [c.name for c in result.checks] == ["registered-first", "order", "window", "no-restart", "placement",
                                               "identity", "pinned-identity"]
    assert all(c.passed for c in result.checks) and result.violations == []
    assert result.executed == str(log)
    assert result.to_json()["executed"] == str(log)
    assert result.to_json()["checks"] == [c.to_json() for c in result.checks]


def test_each_failed_check_is_one_violation_line(setup) -> None:
    events = clean_events(setup.plan, setup.plan.registered_at)
    cases = [e for e in events if e["event"] == "case"]
    cases[0]["at"] = later(setup.plan.registered_at, -5)  # before registration and outside the window
    log = write_log(setup.dir / "log.jsonl", setup.plan, events)
    result = check_plan(setup.path, setup.ledger, str(log))
    assert result.violations == [
        f"registered-first: 1 case(s) ran before the plan was registered at {setup.plan.registered_at}",
        f"window: 1 case run(s) of arm(s) {cases[0]['arm']} outside the window {events[0]['at']} .. "
        f"{events[-1]['at']}",
    ]
    assert result.ok is False


def test_a_log_of_another_plan_is_refused(setup) -> None:
    log = write_log(setup.dir / "log.jsonl", setup.plan, [], digest="0" * 64)
    with pytest.raises(InputError) as err:
        check_plan(setup.path, setup.ledger, log)
    assert str(err.value) == (f"the executed log is for plan {'0' * 16}, not this plan "
                              f"({setup.plan.digest[:16]})")


def test_cases_edited_since_registration_are_refused_first(setup) -> None:
    write_cases(setup.cases, expected="no")
    with pytest.raises(InputError) as err:
        check_plan(setup.path, setup.ledger)
    assert str(err.value) == f"cases file {setup.cases} changed since the plan was registered (digest mismatch)"


def test_cases_absent_here_are_not_checked(setup) -> None:
    setup.cases.unlink()
    assert check_plan(setup.path, setup.ledger).ok is True


def test_relative_cases_are_found_beside_the_plan(setup, monkeypatch) -> None:
    data = json.loads(setup.path.read_text())
    plan = new_plan(["A", "B"], setup.cases, "abba", 2)
    plan.cases = {**plan.cases, "file": "cases.jsonl"}
    plan.digest = plan.compute_digest()
    register_plan(plan, setup.ledger)
    setup.path.write_text(json.dumps(plan.to_json()))
    elsewhere = setup.dir / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    write_cases(setup.cases, expected="changed")
    with pytest.raises(InputError, match="changed since the plan was registered"):
        check_plan(setup.path, setup.ledger)
    assert data["digest"] != plan.digest


def test_a_plan_made_from_ids_has_no_cases_to_check(setup) -> None:
    plan = new_plan(["A", "B"], ["x", "y"])
    register_plan(plan, setup.ledger)
    path = setup.dir / "ids.json"
    path.write_text(json.dumps(plan.to_json()))
    assert check_plan(path, setup.ledger).ok is True


def test_a_plan_without_a_cases_digest_is_not_held_to_one(setup) -> None:
    plan = new_plan(["A", "B"], setup.cases, "abba", 5)
    plan.cases = {**plan.cases, "digest": None}
    plan.digest = plan.compute_digest()
    register_plan(plan, setup.ledger)
    path = setup.dir / "nodigest.json"
    path.write_text(json.dumps(plan.to_json()))
    write_cases(setup.cases, n=1)  # would lack planned cases if it were read
    assert check_plan(path, setup.ledger).ok is True


def test_an_edited_or_unregistered_plan_is_refused(setup) -> None:
    data = json.loads(setup.path.read_text())
    data["seed"] = 99
    setup.path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        check_plan(setup.path, setup.ledger)
    assert str(err.value).startswith(f"{setup.path} was edited after registration")


def test_plan_check_ok_follows_the_violations(setup) -> None:
    check = PlanCheck(setup.plan, "r", "t")
    assert check.ok is True
    check.violations.append("x")
    assert check.ok is False


def test_the_time_helper_is_monotonic() -> None:
    assert parse_time(later("2026-01-01T00:00:00.000Z", 1)) - datetime.fromisoformat(
        "2026-01-01T00:00:00+00:00") == timedelta(seconds=1)
