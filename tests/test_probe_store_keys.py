"""The probe run's ledger key scheme and resume rules, as a decision table (issue 26).

A wrong key or a wrong "which row counts" rule is silent: a resumed probe would re-send cases it
has, skip ones it has not, or count a fixed error as still failing. Everything here is in process
against a real SQLite ledger in a temporary directory, so mutation testing of
``execsys.probes.store`` reaches it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from execsys.probes import store
from execsys.probes.store import ProbeRunStore, case_key, fillers_key, final_key, window_key

from execsys.ledger import Ledger

RUN = "probe-run-1"


@pytest.fixture
def ledger(tmp_path: Path):
    with Ledger.open(tmp_path / "ledger.sqlite") as opened:
        yield opened


def test_the_kinds_and_marks_are_the_documented_ones() -> None:
    assert (store.CASE_KIND, store.STEP_KIND, store.WINDOW_KIND, store.SYSTEM_KIND) == (
        "probe-case", "probe-step", "probe-window", "probe-system")
    assert (store.RETRY_MARK, store.FINAL_KEY) == ("#retry", "final")


@pytest.mark.parametrize("pass_index, case_id, retry, key", [
    (0, "c1", 0, "0:c1"), (3, "a:b", 0, "3:a:b"), (0, "c1", 1, "0:c1#retry1"), (2, "x", 12, "2:x#retry12"),
])
def test_case_keys(pass_index: int, case_id: str, retry: int, key: str) -> None:
    assert case_key(pass_index, case_id, retry) == key
    if not retry:
        assert case_key(pass_index, case_id) == key


def test_window_fillers_and_final_keys() -> None:
    assert window_key(4) == "window:4" and fillers_key(4) == "fillers:4"
    assert final_key(None, 0) == "final" and final_key(None, 7) == "final"
    assert final_key({"x": 1}, 0) == "final#retry1" and final_key(object(), 2) == "final#retry3"


def _case(ledger: Ledger, pass_index: int, case_id: str, retry: int = 0, error: str | None = None) -> None:
    body = {"pass": pass_index, "id": case_id, "answer": f"r{retry}"}
    if error:
        body["error"] = error
    ledger.append("probe-case", body, parent=RUN, key=case_key(pass_index, case_id, retry))


def test_the_row_that_counts_is_the_newest_retry_of_an_error(ledger: Ledger) -> None:
    runs = ProbeRunStore(ledger, RUN)
    assert runs.case_row(0, "c") == (None, 0) and not runs.has_case(0, "c")
    _case(ledger, 0, "c", error="timeout")
    row, retry = runs.case_row(0, "c")
    assert (row.body["answer"], retry) == ("r0", 0) and runs.has_case(0, "c")
    _case(ledger, 0, "c", 1, error="timeout")
    _case(ledger, 0, "c", 2)
    row, retry = runs.case_row(0, "c")
    assert (row.body["answer"], retry) == ("r2", 2)
    # a successful retry ends the chain: a later row under retry 3 is not read
    _case(ledger, 0, "c", 3, error="late")
    assert runs.case_row(0, "c")[1] == 2
    # another pass and another run are apart
    assert runs.case_row(1, "c") == (None, 0) and ProbeRunStore(ledger, "other").case_row(0, "c") == (None, 0)


def test_a_clean_first_row_is_not_replaced_by_a_retry_row(ledger: Ledger) -> None:
    _case(ledger, 0, "c")
    _case(ledger, 0, "c", 1)
    row, retry = ProbeRunStore(ledger, RUN).case_row(0, "c")
    assert (row.body["answer"], retry) == ("r0", 0)


def test_an_error_whose_retries_all_errored_counts_the_last_one(ledger: Ledger) -> None:
    _case(ledger, 1, "c", error="e0")
    _case(ledger, 1, "c", 1, error="e1")
    row, retry = ProbeRunStore(ledger, RUN).case_row(1, "c")
    assert (row.body["error"], retry) == ("e1", 1)


def test_the_final_record_chain_and_the_next_key(ledger: Ledger) -> None:
    runs = ProbeRunStore(ledger, RUN)
    assert runs.final_row() == (None, 0)
    first = runs.append_final({"n": 0}, identity="idA", key="final", record_id="rec-0")
    assert first == "rec-0"
    row, retry = runs.final_row()
    assert (row.body, retry, row.identity, row.kind, row.parent) == ({"n": 0}, 0, "idA", "probe", RUN)
    assert final_key(row, retry) == "final#retry1"
    runs.append_final({"n": 1}, identity=None, key="final#retry1", record_id="rec-1")
    runs.append_final({"n": 2}, identity=None, key="final#retry2", record_id="rec-2")
    row, retry = runs.final_row()
    assert (row.body, retry) == ({"n": 2}, 2) and final_key(row, retry) == "final#retry3"
    # another process finished first under that key: its id comes back, nothing is written twice
    assert runs.append_final({"n": 9}, identity=None, key="final#retry2", record_id="rec-x") == "rec-2"
    assert ledger.count(parent=RUN) == 3


def test_rows_are_written_under_their_kind_parent_and_key_once(ledger: Ledger) -> None:
    runs = ProbeRunStore(ledger, RUN)
    runs.append_cases([({"pass": 0, "id": "a"}, "0:a"), ({"pass": 0, "id": "b"}, "0:b")])
    runs.append_cases([({"pass": 0, "id": "a", "again": True}, "0:a")])
    runs.append_step("restart:0", {"ok": True})
    runs.append_step("restart:0", {"ok": False})
    runs.append_system("system:0:start", {"pid": 1})
    runs.append_window(0, {"start": 1.0})
    rows = {row.key: row for row in ledger.iter(parent=RUN)}
    assert set(rows) == {"0:a", "0:b", "restart:0", "system:0:start", "window:0"}
    assert rows["0:a"].kind == "probe-case" and rows["0:a"].body == {"pass": 0, "id": "a"}
    assert rows["restart:0"].kind == "probe-step" and rows["restart:0"].body == {"step": "restart:0", "ok": True}
    assert rows["system:0:start"].kind == "probe-system"
    assert rows["system:0:start"].body == {"step": "system:0:start", "pid": 1}
    assert rows["window:0"].kind == "probe-window" and rows["window:0"].body == {"pass": 0, "start": 1.0}
    assert all(row.parent == RUN and row.identity is None for row in rows.values())


def test_resume_counts_cases_and_errors_per_pass_and_collects_steps(ledger: Ledger) -> None:
    runs = ProbeRunStore(ledger, RUN)
    _case(ledger, 0, "a")
    _case(ledger, 0, "b", error="e")
    _case(ledger, 0, "c", error="e")
    _case(ledger, 0, "b", 1, error="still")       # an errored retry fixes nothing
    _case(ledger, 0, "b", 2)                       # this one fixes b
    _case(ledger, 0, "b", 3)                       # b is already fixed: not counted twice
    _case(ledger, 1, "a", error="e")
    _case(ledger, 2, "a")                          # pass 2 is outside a 2-pass run
    ledger.append("probe-case", {"pass": -1, "id": "z"}, parent=RUN, key="-1:z")
    ledger.append("probe-case", {"pass": "0", "id": "z"}, parent=RUN, key="0:zs")
    ledger.append("probe-case", {"id": "z"}, parent=RUN, key="none:z")
    ledger.append("probe-note", {"pass": 0}, parent=RUN, key="note")   # another kind: not a case
    ledger.append("probe-case", {"pass": 0, "id": "q"}, parent="other-run", key="0:q")
    runs.append_step("restart:0", {"ok": True})
    runs.append_window(1, {"start": 2.0})
    runs.append_system("system:1:end", {"pid": 2})
    steps: dict = {"earlier": {"kept": True}}
    counts: dict[int, int] = {}
    errors: dict[int, int] = {}
    runs.load_progress(steps, counts, errors, passes=2)
    assert counts == {0: 3, 1: 1}
    assert errors == {0: 1, 1: 1}
    assert steps == {"earlier": {"kept": True}, "restart:0": {"step": "restart:0", "ok": True},
                     "window:1": {"pass": 1, "start": 2.0}, "system:1:end": {"step": "system:1:end", "pid": 2}}


def test_resume_adds_to_the_counts_it_is_given_and_fixes_per_pass(ledger: Ledger) -> None:
    _case(ledger, 0, "a", error="e")
    _case(ledger, 1, "a", error="e")
    _case(ledger, 1, "a", 1)                        # the same case id on another pass is its own fix
    _case(ledger, 0, "a", 1)
    counts, errors = {0: 5}, {0: 2}
    ProbeRunStore(ledger, RUN).load_progress({}, counts, errors, passes=3)
    assert counts == {0: 6, 1: 1} and errors == {0: 2, 1: 0}


def test_resume_at_the_last_pass_boundary(ledger: Ledger) -> None:
    _case(ledger, 0, "a")
    _case(ledger, 1, "a")
    counts: dict[int, int] = {}
    ProbeRunStore(ledger, RUN).load_progress({}, counts, {}, passes=1)
    assert counts == {0: 1}
    counts = {}
    ProbeRunStore(ledger, RUN).load_progress({}, counts, {}, passes=2)
    assert counts == {0: 1, 1: 1}


def test_a_step_row_without_a_key_is_kept_under_the_empty_key(ledger: Ledger) -> None:
    ledger.append("probe-step", {"step": "x"}, parent=RUN)
    steps: dict = {}
    ProbeRunStore(ledger, RUN).load_progress(steps, {}, {}, passes=1)
    assert steps == {"": {"step": "x"}}


def test_a_retry_that_errored_again_leaves_the_error_counted(ledger: Ledger) -> None:
    _case(ledger, 0, "a", error="e")
    _case(ledger, 0, "a", 1, error="again")
    counts: dict[int, int] = {}
    errors: dict[int, int] = {}
    ProbeRunStore(ledger, RUN).load_progress({}, counts, errors, passes=1)
    assert counts == {0: 1} and errors == {0: 1}
