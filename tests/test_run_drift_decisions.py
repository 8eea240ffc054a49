"""The watch's drift in words (execsys/run/drift.py), as tables: each look's line (moved, gone, back,
the endpoint answering again, the "+N more" cut), each field folded over the run, and the summary."""

from __future__ import annotations

import pytest

from execsys.run.drift import ERROR_FIELD, NAMES_SHOWN, FieldDrift, LookNarrator, fold, short, summary_lines

PID = "runtime.process.pid"
ARGV = "runtime.process.argv"


def ev(component: str, before, after, at: str = "t1") -> dict:
    return {"at": at, "component": component, "before": before, "after": after}


def test_short_drops_only_the_runtime_prefix() -> None:
    assert short("runtime.process.argv") == "process.argv"
    assert short("endpoint.runtime.x") == "endpoint.runtime.x"
    assert NAMES_SHOWN == 4 and ERROR_FIELD == "runtime.endpoint.error"


@pytest.mark.parametrize(("events", "line"), [
    pytest.param([], "", id="nothing"),
    pytest.param([ev(PID, 1, 2)], f"{PID}: 1 → 2", id="moved"),
    pytest.param([ev(PID, None, 5)], f"{PID}: 5", id="appeared-shown-whole"),
    pytest.param([ev(PID, 1, None)], "no longer observed: process.pid", id="gone"),
    pytest.param([ev(ERROR_FIELD, "refused", None)], "the endpoint answers again", id="error-cleared"),
    pytest.param([ev(ERROR_FIELD, None, "refused")], f"{ERROR_FIELD}: refused", id="error-appears"),
    pytest.param([ev(PID, 1, 2), ev(ARGV, ["a"], None), ev(ERROR_FIELD, "x", None)],
                 f"{PID}: 1 → 2; no longer observed: process.argv; the endpoint answers again", id="order-of-parts"),
    pytest.param([ev(f"runtime.f{i}", 1, None) for i in range(4)],
                 "no longer observed: f0, f1, f2, f3", id="four-names-no-more"),
    pytest.param([ev(f"runtime.f{i}", 1, None) for i in range(6)],
                 "no longer observed: f0, f1, f2, f3, +2 more", id="six-names-two-more"),
    pytest.param([ev(f"runtime.f{i}", 1, None) for i in range(5)],
                 "no longer observed: f0, f1, f2, f3, +1 more", id="five-names-one-more"),
])
def test_one_look(events, line) -> None:
    assert LookNarrator().line(events) == line


def test_a_field_that_went_and_came_back_is_worded_against_what_it_was() -> None:
    narrator = LookNarrator()
    assert narrator.line([ev(PID, 1, None), ev(ARGV, ["a", "--n", "2"], None)]) == \
        "no longer observed: process.pid, process.argv"
    assert narrator.known == {PID: 1, ARGV: ["a", "--n", "2"]}
    # the pid is back as before; the argv back with one flag changed, as a delta
    line = narrator.line([ev(PID, None, 1, "t2"), ev(ARGV, None, ["a", "--n", "1"], "t2")])
    assert line == f"{ARGV}: --n 2 → 1; observed again as before: process.pid"
    assert narrator.known == {PID: 1, ARGV: ["a", "--n", "1"]}
    # a value seen before is kept as the field's first known value; a later "before" does not replace it
    assert narrator.line([ev(PID, 7, 8, "t3")]) == f"{PID}: 1 → 8"
    assert narrator.known[PID] == 8


def test_back_and_moved_lines_cut_and_order() -> None:
    narrator = LookNarrator()
    narrator.line([ev(f"runtime.f{i}", i, None) for i in range(5)])
    line = narrator.line([ev(f"runtime.f{i}", None, i) for i in range(5)] + [ev(PID, 3, 4)])
    assert line == f"{PID}: 3 → 4; observed again as before: f0, f1, f2, f3, +1 more"


def test_fold_each_field_once_from_first_before_to_last_after() -> None:
    events = [ev(ARGV, ["a"], None, "t1"), ev(PID, 1, None, "t1"), ev(ARGV, None, ["b"], "t2"),
              ev(PID, None, 1, "t3"), ev(ARGV, ["b"], ["c"], "t4")]
    assert fold(events) == [FieldDrift(ARGV, ["a"], ["c"], 3, "t1", "t4"), FieldDrift(PID, 1, 1, 2, "t1", "t3")]
    assert fold([]) == []
    [one] = fold([{"component": PID}])
    assert (one.component, one.before, one.after, one.events, one.first_at, one.last_at) == \
        (PID, None, None, 1, "None", "None")


@pytest.mark.parametrize(("drift", "words", "as_before"), [
    pytest.param(FieldDrift(PID, 1, 2, 1, "t1", "t1"), f"{PID}: 1 → 2 (1 event, at t1)", False, id="one-event"),
    pytest.param(FieldDrift(PID, 1, 2, 2, "t1", "t2"), f"{PID}: 1 → 2 (2 events, t1 to t2)", False, id="two"),
    pytest.param(FieldDrift(PID, 1, None, 1, "t1", "t1"), f"{PID}: no longer observed (was 1) (1 event, at t1)",
                 False, id="gone"),
    pytest.param(FieldDrift(PID, None, None, 2, "t1", "t2"), f"{PID}: gone (2 events, t1 to t2)", True,
                 id="never-seen"),
    pytest.param(FieldDrift(PID, None, 3, 1, "t1", "t1"), f"{PID}: (none) → 3 (1 event, at t1)", False,
                 id="appeared"),
    pytest.param(FieldDrift(PID, 3, 3, 2, "t1", "t2"), f"{PID}: 3 → 3 (2 events, t1 to t2)", True, id="as-before"),
])
def test_field_words(drift, words, as_before) -> None:
    assert drift.words() == words
    assert drift.as_before is as_before


@pytest.mark.parametrize(("events", "lines"), [
    pytest.param([], [], id="none"),
    pytest.param([ev(PID, 1, 2)], [f"{PID}: 1 → 2 (1 event, at t1)"], id="one-moved"),
    pytest.param([ev(PID, 1, None), ev(PID, None, 1, "t2")], ["back as before: process.pid (2 events each)"],
                 id="one-back"),
    pytest.param([ev(PID, 1, None), ev(PID, None, 1, "t2"), ev(ARGV, ["a"], None), ev(ARGV, None, ["a"], "t2"),
                  ev(ARGV, ["a"], None, "t3"), ev(ARGV, None, ["a"], "t4"), ev("runtime.x", 1, 2)],
                 ["runtime.x: 1 → 2 (1 event, at t1)", "back as before: process.pid, process.argv (2-4 events each)"],
                 id="moved-then-back-with-a-count-range"),
    # three different counts: the range is the smallest to the largest, not the smallest to the second
    pytest.param([ev(PID, 1, None), ev(PID, None, 1, "t2"),
                  ev(ARGV, 1, None), ev(ARGV, None, 1, "t2"), ev(ARGV, 1, None, "t3"), ev(ARGV, None, 1, "t4"),
                  *[ev("runtime.y", 1, None if i % 2 == 0 else 1, f"t{i}") for i in range(6)]],
                 ["back as before: process.pid, process.argv, y (2-6 events each)"], id="three-counts"),
    pytest.param([ev(PID, 1, None), ev(PID, None, 1, "t2"), ev(ARGV, 1, None), ev(ARGV, None, 1, "t2")],
                 ["back as before: process.pid, process.argv (2 events each)"], id="same-count"),
])
def test_summary_lines(events, lines) -> None:
    assert summary_lines(events) == lines
