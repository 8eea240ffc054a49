"""The plan's causal checks and paired counts as tables: each check at its time boundaries (a case at
the very moment of registration, at the window's first and last instant, a millisecond outside),
each way a log can differ from a clean one, and the discordant-pair counts in both directions.

Logs are built here from a plan made by the real scheduler (tests/test_plan_checks.py pins each
check's wording; tests/test_plan.py runs plans against a real server).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from execsys.errors import InputError
from execsys.plan import Execution, new_plan, run_checks
from execsys.plan.checks import (
    complete,
    endpoint_identity_unchanged,
    in_registered_order,
    inside_one_window,
    no_restart,
    pinned_identity,
    placement_as_registered,
    registered_first,
    validate_log,
)
from execsys.plan.paired import is_correct, paired_stats

REGISTERED = "2026-11-30T10:00:00.000Z"


def at(seconds: float) -> str:
    moment = datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc) + timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture(scope="module")
def plan():
    return new_plan(["A", "B"], ["c0", "c1"], "abba", 1)


def cases(plan, start: float = 4.0, step: float = 1.0) -> list[dict]:
    return [{"event": "case", "case": c, "arm": a, "error": None, "at": at(start + i * step)}
            for i, (c, a) in enumerate(plan.expected_sequence())]


def window(lo: float = 3.0, hi: float = 100.0) -> list[dict]:
    return [{"event": "window-start", "at": at(lo)}, {"event": "window-end", "at": at(hi)}]


def run(plan, events, **kwargs) -> Execution:
    return Execution(plan, REGISTERED, events, **kwargs)


# -- registered first: a case at the registration instant is not early --------------------------------

@pytest.mark.parametrize(("first_case_at", "passed"), [
    pytest.param(0.0, True, id="at-registration-passes"),
    pytest.param(-0.001, False, id="a-millisecond-before-fails"),
    pytest.param(0.001, True, id="a-millisecond-after-passes"),
])
def test_registered_first(plan, first_case_at, passed) -> None:
    check = registered_first(run(plan, cases(plan, start=first_case_at)))
    assert check.passed is passed
    if not passed:
        assert check.detail.startswith("1 case(s) ran before")


# -- the window: inclusive at both ends ---------------------------------------------------------------

@pytest.mark.parametrize(("lo", "hi", "passed"), [
    pytest.param(4.0, 7.0, True, id="first-case-at-start-last-at-end-inside"),
    pytest.param(4.001, 7.0, False, id="start-a-millisecond-late"),
    pytest.param(4.0, 6.999, False, id="end-a-millisecond-early"),
    pytest.param(3.999, 7.001, True, id="a-millisecond-wider"),
])
def test_window_bounds(plan, lo, hi, passed) -> None:
    check = inside_one_window(run(plan, cases(plan) + window(lo, hi)))
    assert check.passed is passed


@pytest.mark.parametrize(("events", "detail"), [
    pytest.param(lambda p: cases(p), "expected one window-start and one window-end, found 0 and 0", id="no-window"),
    pytest.param(lambda p: cases(p) + window() + window(), "expected one window-start and one window-end, found 2 and 2",
                 id="two-windows"),
    pytest.param(lambda p: cases(p) + window()[:1], "expected one window-start and one window-end, found 1 and 0",
                 id="no-end"),
    pytest.param(lambda p: [dict(cases(p)[0], error="timeout")] + cases(p)[1:] + window(),
                 "1 case run(s) failed inside the window", id="an-errored-case"),
    pytest.param(lambda p: cases(p, start=101) + window(), "4 case run(s) of arm(s) A, B outside the window "
                 f"{at(3)} .. {at(100)}", id="all-outside-names-both-arms"),
])
def test_window_failures(plan, events, detail) -> None:
    check = inside_one_window(run(plan, events(plan)))
    assert (check.passed, check.detail) == (False, detail)


# -- the order ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mutate", "passed", "detail"), [
    pytest.param(lambda e: e, True, "every case ran in the registered order", id="as-registered"),
    pytest.param(lambda e: [e[1], e[0], *e[2:]], False, None, id="the-first-two-swapped"),
    pytest.param(lambda e: e[:-1], False, "1 registered step(s) never ran", id="one-step-missing"),
    pytest.param(lambda e: [], False, "4 registered step(s) never ran", id="nothing-ran"),
    pytest.param(lambda e: [*e, e[0]], False, "1 step(s) ran that the plan does not contain", id="one-step-extra"),
])
def test_order(plan, mutate, passed, detail) -> None:
    check = in_registered_order(run(plan, mutate(cases(plan))))
    assert check.passed is passed
    if detail is not None:
        assert check.detail == detail
    elif not passed:
        first = plan.expected_sequence()
        assert check.detail == (f"step 1: ran case {first[1][0]} arm {first[1][1]}, registered case {first[0][0]} "
                                f"arm {first[0][1]}")


# -- restarts: any restart fails; between a case's two arms is named ----------------------------------

@pytest.mark.parametrize(("restart_at", "where"), [
    pytest.param(4.0, "between the arms of case", id="at-the-first-arm"),
    pytest.param(4.5, "between the arms of case", id="between-the-arms"),
    pytest.param(5.0, "between the arms of case", id="at-the-second-arm"),
    pytest.param(3.5, "inside the window", id="before-any-case"),
])
def test_no_restart(plan, restart_at, where) -> None:
    events = cases(plan) + window() + [{"event": "restart", "arm": "B", "at": at(restart_at)}]
    check = no_restart(run(plan, events))
    assert check.passed is False
    assert where in check.detail and "arm B" in check.detail


def test_no_restart_passes_without_one(plan) -> None:
    assert no_restart(run(plan, cases(plan) + window())).passed


# -- placement, identity, completeness, the pinned identity ------------------------------------------

@pytest.mark.parametrize(("placement", "events", "passed"), [
    pytest.param({}, [], True, id="nothing-registered-nothing-recorded"),
    pytest.param({}, [{"event": "placement", "arm": "A", "host": "local", "checks": []}], True, id="local-as-local"),
    pytest.param({"A": "localhost"}, [{"event": "placement", "arm": "A", "host": None, "checks": []}], True,
                 id="loopback-name-and-none-are-both-local"),
    pytest.param({"A": "gpu-1"}, [], False, id="registered-elsewhere-none-recorded"),
    pytest.param({"A": "gpu-1"}, [{"event": "placement", "arm": "A", "host": "gpu-2", "checks": []}], False,
                 id="ran-elsewhere"),
    pytest.param({"A": "gpu-1"}, [{"event": "placement", "arm": "A", "host": "gpu-1",
                                   "checks": [{"name": "same-bytes", "passed": False}]}], False,
                 id="a-placement-check-failed"),
    pytest.param({"A": "gpu-1"}, [{"event": "placement", "arm": "A", "host": "gpu-1",
                                   "checks": [{"name": "same-bytes", "passed": True}]}], True, id="as-registered"),
])
def test_placement(plan, placement, events, passed) -> None:
    assert placement_as_registered(run(replace(plan, placement=placement), events)).passed is passed


@pytest.mark.parametrize(("observed", "passed"), [
    pytest.param([("A", 1)], True, id="one-look"),
    pytest.param([("A", 1), ("A", 1), ("B", 2)], True, id="each-arm-the-same"),
    pytest.param([("A", 1), ("A", 2)], False, id="arm-changed"),
    pytest.param([("A", 1), ("A", 1), ("A", 2)], False, id="changed-on-the-third-look"),
])
def test_endpoint_identity(plan, observed, passed) -> None:
    events = [{"event": "endpoint", "arm": arm, "observed": {"models": [value]}} for arm, value in observed]
    assert endpoint_identity_unchanged(run(plan, events)).passed is passed


@pytest.mark.parametrize(("plan_identity", "lock_identity", "passed"), [
    pytest.param(None, "b" * 64, None, id="no-plan-identity-not-applicable"),
    pytest.param("a" * 64, None, None, id="no-lock-not-applicable"),
    pytest.param("a" * 64, "a" * 64, True, id="same-passes"),
    pytest.param("a" * 64, "b" * 64, False, id="other-fails"),
])
def test_pinned_identity(plan, plan_identity, lock_identity, passed) -> None:
    check = pinned_identity(run(replace(plan, identity=plan_identity), [], lock_identity=lock_identity))
    assert (None if check is None else check.passed) is passed


@pytest.mark.parametrize(("cancelled", "names"), [
    pytest.param(False, [], id="not-cancelled-nothing-to-say"),
    pytest.param(True, ["complete"], id="cancelled-incomplete"),
])
def test_without_a_log_only_the_unlogged_checks(plan, cancelled, names) -> None:
    checks = run_checks(run(plan, [], cancelled=cancelled), logged=False)
    assert [c.name for c in checks] == names
    assert all(not c.passed for c in checks)
    assert (complete(run(plan, [], cancelled=cancelled)) is None) is not cancelled


@pytest.mark.parametrize(("header", "events", "needle"), [
    pytest.param({"plan": "other"}, [], "the executed log is for plan", id="another-plan"),
    pytest.param(None, [{"event": "case", "arm": "C", "case": "c0"}], "unknown arm 'C'", id="unknown-arm"),
])
def test_validate_log(plan, header, events, needle) -> None:
    with pytest.raises(InputError, match=needle):
        validate_log(plan, header or {"plan": plan.digest}, events)


# -- paired counts: b is A right and B wrong, c the other way --------------------------------------------

TT, TF, FT, FF = (True, True), (True, False), (False, True), (False, False)


@pytest.mark.parametrize(("pairs", "counts", "rates", "difference"), [
    pytest.param([], (0, 0, 0, 0, 0), (None, None), None, id="no-pairs"),
    pytest.param([TF], (1, 1, 0, 0, 0), (1.0, 0.0), 1.0, id="a-right-b-wrong-is-b"),
    pytest.param([FT], (1, 0, 1, 0, 0), (0.0, 1.0), -1.0, id="a-wrong-b-right-is-c"),
    pytest.param([TT, FF], (2, 0, 0, 1, 1), (0.5, 0.5), 0.0, id="concordant-only"),
    pytest.param([TF, TF, FT, TT], (4, 2, 1, 1, 0), (0.75, 0.5), 0.25, id="mixed"),
])
def test_paired_counts(pairs, counts, rates, difference) -> None:
    stats = paired_stats(pairs)
    assert (stats.n, stats.b, stats.c, stats.both_right, stats.both_wrong) == counts
    assert (stats.rate_a, stats.rate_b, stats.difference) == (*rates, difference)
    assert stats.to_json()["n"] == counts[0]


def test_mcnemar_without_discordant_pairs_is_1() -> None:
    assert paired_stats([TT, FF]).mcnemar_p == 1.0
    assert paired_stats([TF] * 6).mcnemar_p == paired_stats([FT] * 6).mcnemar_p < 0.05


@pytest.mark.parametrize(("outcome", "expected", "correct"), [
    pytest.param("Paris", "Paris", True, id="equal"),
    pytest.param(" Paris\n", "Paris ", True, id="whitespace-aside"),
    pytest.param("paris", "Paris", False, id="case-matters"),
    pytest.param("5", 5, True, id="a-number-compared-as-text"),
    pytest.param("b", ["a", "b"], True, id="any-of-a-list"),
    pytest.param("c", ["a", "b"], False, id="none-of-a-list"),
    pytest.param(None, "a", False, id="no-outcome"),
    pytest.param("a", None, False, id="no-expected"),
    pytest.param("", [], False, id="empty-list"),
])
def test_is_correct(outcome, expected, correct) -> None:
    assert is_correct(outcome, expected) is correct


def test_paired_stats_as_json() -> None:
    from execsys.stats import mcnemar_exact, paired_difference_ci

    pairs = [(True, False), (False, True), (True, True), (False, False), (True, False)]
    assert paired_stats(pairs).to_json() == {
        "n": 5, "b": 2, "c": 1, "both_right": 1, "both_wrong": 1, "rate_a": 0.6, "rate_b": 0.4,
        "difference": 0.2, "ci95": list(paired_difference_ci(2, 1, 5)), "mcnemar_p": mcnemar_exact(2, 1)}
    assert paired_stats(pairs).ci95 == paired_difference_ci(2, 1, 5) is not None
    assert paired_stats([]).to_json() == {"n": 0, "b": 0, "c": 0, "both_right": 0, "both_wrong": 0, "rate_a": None,
                                          "rate_b": None, "difference": None, "ci95": None, "mcnemar_p": 1.0}


# -- each check's name and exact sentence (rows written against mutation survivors) -------------------

def test_passing_checks_say_so_in_registry_order(plan) -> None:
    from execsys.plan.checks import Check

    events = cases(plan) + window()
    checks = run_checks(run(replace(plan, identity="a" * 64), events, lock_identity="a" * 64))
    assert [(c.name, c.passed, c.detail) for c in checks] == [
        ("registered-first", True, "the plan was registered before any case ran"),
        ("order", True, "every case ran in the registered order"),
        ("window", True, "both arms ran every case inside one window"),
        ("no-restart", True, "no restart between arms"),
        ("placement", True, "placement as registered"),
        ("identity", True, "each endpoint answered as the same server throughout"),
        ("pinned-identity", True, f"the lock pins identity {'a' * 12}, as registered"),
    ]
    assert Check("x", False, "why").to_json() == {"name": "x", "passed": False, "detail": "why"}


def test_failing_details_name_what_and_where(plan) -> None:
    early = registered_first(run(plan, cases(plan, start=-2.0)))
    assert early.detail == f"2 case(s) ran before the plan was registered at {REGISTERED}"
    first_case = plan.order[0]["case"]
    restart = no_restart(run(plan, cases(plan) + window() + [{"event": "restart", "arm": "B", "at": at(4.5)},
                                                             {"event": "restart", "at": at(3.5)}]))
    assert restart.detail == (f"restart of arm B at {at(4.5)} between the arms of case {first_case}; "
                              f"restart of arm ? at {at(3.5)} inside the window")
    other = pinned_identity(run(replace(plan, identity="a" * 64), [], lock_identity="b" * 64))
    assert other.detail == f"the plan was registered for identity {'a' * 12}, the lock given pins {'b' * 12}"
    assert complete(run(plan, [], cancelled=True)).detail == "cancelled before every case ran"
    changed = endpoint_identity_unchanged(run(plan, [{"event": "endpoint", "arm": "A", "observed": 1},
                                                     {"event": "endpoint", "arm": "A", "observed": 2}]))
    assert (changed.name, changed.detail) == ("identity", "arm A: the endpoint's identity changed inside the window")


@pytest.mark.parametrize(("placement", "events", "detail"), [
    pytest.param({"A": "gpu-1"}, [], "arm A: registered on gpu-1, no placement recorded", id="none-recorded"),
    pytest.param({"A": "gpu-1"}, [{"event": "placement", "arm": "A", "host": "gpu-2", "checks": []}],
                 "arm A: ran on gpu-2, registered gpu-1", id="ran-elsewhere"),
    pytest.param({}, [{"event": "placement", "arm": "B", "host": "gpu-2", "checks": []}],
                 "arm B: ran on gpu-2, registered local", id="registered-local-ran-on-gpu-2"),
    pytest.param({"A": "gpu-1"}, [{"event": "placement", "arm": "A", "host": None, "checks": []}],
                 "arm A: ran on local, registered gpu-1", id="registered-gpu-1-ran-local"),
    pytest.param({"A": "gpu-1"}, [{"event": "placement", "arm": "A", "host": "gpu-1", "checks": [
        {"name": "same-bytes", "passed": False}, {"name": "ok-one", "passed": True}, {"name": "clock"}]}],
                 "arm A: placement check(s) failed: same-bytes, clock", id="failed-checks-named"),
])
def test_placement_details(plan, placement, events, detail) -> None:
    check = placement_as_registered(run(replace(plan, placement=placement), events))
    assert (check.name, check.passed, check.detail) == ("placement", False, detail)


def test_a_serving_process_that_changed_is_a_restart(plan) -> None:
    from execsys.probes.system import process_words

    first, second = {"pid": 10, "started_at": "t0"}, {"pid": 11, "started_at": "t1"}
    events = cases(plan) + window() + [
        {"event": "system", "arm": "A", "process": first}, {"event": "system", "arm": "A", "process": first},
        {"event": "system", "arm": "A", "process": second},
        {"event": "system", "arm": "B", "process": first}, {"event": "system", "arm": "B", "process": first},
        {"event": "system", "arm": "B", "process": "not a table"}, {"event": "system", "arm": "C"}]
    check = no_restart(run(plan, events))
    assert (check.passed, check.detail) == (False, f"arm A's serving process changed inside the window "
                                                   f"({process_words(first)}, then {process_words(second)}): it restarted")
    steady = no_restart(run(plan, cases(plan) + window() + events[-5:]))
    assert (steady.passed, steady.detail) == (True, "no restart between arms")


def test_validate_log_messages(plan) -> None:
    with pytest.raises(InputError) as err:
        validate_log(plan, {"plan": "f" * 40}, [])
    assert str(err.value) == f"the executed log is for plan {'f' * 16}, not this plan ({plan.digest[:16]})"
    with pytest.raises(InputError) as err:
        validate_log(plan, {"plan": plan.digest}, [{"event": "window-start", "arm": "Z"},
                                                   {"event": "case", "arm": "C", "case": "c0"}])
    assert str(err.value) == "executed log names unknown arm 'C' (arms: A, B)"


def test_check_executed_validates_then_checks(plan) -> None:
    from execsys.plan.checks import check_executed

    checks = check_executed(plan, REGISTERED, {"plan": plan.digest}, cases(plan) + window(), cancelled=True,
                            lock_identity=None)
    assert [c.name for c in checks] == ["registered-first", "order", "window", "no-restart", "placement",
                                        "identity", "complete"]
    with pytest.raises(InputError):
        check_executed(plan, REGISTERED, {"plan": "x"}, [])


def test_a_serving_process_seen_changed_mid_window_is_a_restart_even_if_the_last_look_matches(plan) -> None:
    first, other = {"pid": 10, "started_at": "t0"}, {"pid": 11, "started_at": "t1"}
    events = cases(plan) + window() + [{"event": "system", "arm": "A", "process": p} for p in (first, other, first)]
    assert no_restart(run(plan, events)).passed is False


def test_several_problems_of_one_check_are_joined_by_semicolons(plan) -> None:
    events = cases(plan)
    order = in_registered_order(run(plan, [events[1], events[0]]))
    assert order.detail.count("; ") == 1 and order.detail.endswith("; 2 registered step(s) never ran")
    window_check = inside_one_window(run(plan, [dict(e, error="x") for e in cases(plan, start=101)] + window()))
    assert window_check.detail == (f"4 case run(s) of arm(s) A, B outside the window {at(3)} .. {at(100)}; "
                                   "4 case run(s) failed inside the window")
    placed = placement_as_registered(run(replace(plan, placement={"A": "gpu-1", "B": "gpu-2"}), []))
    assert placed.detail == "arm A: registered on gpu-1, no placement recorded; arm B: registered on gpu-2, no placement recorded"
    endpoint = endpoint_identity_unchanged(run(plan, [{"event": "endpoint", "arm": arm, "observed": value}
                                                      for arm in ("A", "B") for value in (1, 2)]))
    assert endpoint.detail == ("arm A: the endpoint's identity changed inside the window; "
                               "arm B: the endpoint's identity changed inside the window")


def test_a_restart_while_a_registered_case_never_ran(plan) -> None:
    events = cases(plan)[:2] + window() + [{"event": "restart", "arm": "A", "at": at(50)}]
    check = no_restart(run(plan, events))
    assert check.detail == f"restart of arm A at {at(50)} inside the window"


@pytest.mark.parametrize(("looks", "changed"), [
    pytest.param([1, 2], True, id="two-looks-changed"),
    pytest.param([1, 2, 2], True, id="changed-then-steady"),
    pytest.param([1, 1], False, id="steady"),
    pytest.param([1], False, id="one-look"),
])
def test_the_serving_process_looks(plan, looks, changed) -> None:
    events = cases(plan) + window() + [{"event": "system", "arm": "A", "process": {"pid": p, "started_at": f"t{p}"}} for p in looks]
    assert no_restart(run(plan, events)).passed is not changed


def test_a_changed_process_is_named_first_and_last_look(plan) -> None:
    from execsys.probes.system import process_words

    looks = [{"pid": p, "started_at": f"t{p}"} for p in (1, 2, 3)]
    events = cases(plan) + window() + [{"event": "system", "arm": "A", "process": p} for p in looks]
    assert f"({process_words(looks[0])}, then {process_words(looks[2])})" in no_restart(run(plan, events)).detail


def test_a_cancelled_run_fails_complete_as_false_in_json(plan) -> None:
    assert complete(run(plan, [], cancelled=True)).to_json() == {
        "name": "complete", "passed": False, "detail": "cancelled before every case ran"}


def test_check_executed_judges_the_lock_given(plan) -> None:
    from execsys.plan.checks import check_executed

    pinned = replace(plan, identity="a" * 64)
    checks = check_executed(pinned, REGISTERED, {"plan": pinned.digest}, cases(pinned) + window(),
                            lock_identity="b" * 64)
    assert [(c.name, c.passed) for c in checks][-1] == ("pinned-identity", False)
