"""The TUI gate's rules as a decision table (issue 26): verdicts, their precedence, and the reason shown.

Every test here runs in process, in milliseconds, so mutation testing of ``execsys.tui.state`` can
reach it: the gate is what lets a run start, and a wrong verdict there is silent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from execsys.doctor.model import HazardResult
from execsys.tui.state import LOCAL, STEPS, DoctorState, Paths

HAZARDS = ["clock-skew", "port-collisions", "stub-executables"]


def _state(hosts: list[str] | None = None, **statuses_by_host: dict[str, str]) -> DoctorState:
    """A finished doctor run: each named host checked for every hazard, ``ok`` unless given."""
    state = DoctorState(hazard_ids=list(HAZARDS), finished_once=True)
    if hosts is not None:
        state.hosts = list(hosts)
    for host, statuses in statuses_by_host.items():
        state.results[host] = {h: HazardResult(h, statuses.get(h, "ok"), "s") for h in HAZARDS}
    return state


def test_a_fresh_state_checks_this_machine_and_has_not_run() -> None:
    state = DoctorState()
    assert state.hosts == [LOCAL] == ["local"]
    assert state.results == {} and state.host_errors == {} and state.removed == set()
    assert state.running is False and state.finished_once is False and state.last_run_cancelled is False
    assert state.verdict() == "not run" and not state.gate_open()
    assert state.gate_reason() == "the doctor has not finished a check of this environment"
    assert [mode for mode, _ in STEPS] == ["doctor", "identity", "probes", "scope"]


@pytest.mark.parametrize("status, blocks", [
    ("ok", False), ("warn", False), ("skip", False), ("fail", True), ("error", True),
])
def test_only_fail_and_error_block_the_gate(status: str, blocks: bool) -> None:
    state = _state(local={"port-collisions": status})
    assert state.gate_open() is (not blocks)
    assert state.verdict() == ("hazards" if blocks else "clean")
    assert state.failing() == ([("local", f"port-collisions ({status})")] if blocks else [])


def test_a_result_without_a_status_does_not_block() -> None:
    state = _state(local={})
    state.results["local"]["clock-skew"] = object()
    assert state.failing() == [] and state.gate_open()


def test_running_wins_over_every_other_verdict() -> None:
    state = _state(local={"clock-skew": "fail"})
    state.running = True
    assert state.verdict() == "checking" and not state.gate_open()
    assert state.gate_reason() == "the doctor is still checking"
    clean = _state(local={})
    clean.running = True
    assert clean.verdict() == "checking" and not clean.gate_open()


def test_not_finished_once_keeps_it_closed_even_with_clean_results() -> None:
    state = _state(local={})
    state.finished_once = False
    assert state.verdict() == "not run" and not state.gate_open()
    assert state.gate_reason() == "the doctor has not finished a check of this environment"


def test_hazards_win_over_a_missing_hazard_and_over_cancelled() -> None:
    state = _state(local={"clock-skew": "fail"})
    del state.results["local"]["stub-executables"]
    state.last_run_cancelled = True
    assert state.verdict() == "hazards"
    assert state.gate_reason() == "1 blocking finding: clock-skew (fail) on local"


def test_a_partial_run_is_incomplete_or_cancelled_by_how_it_ended() -> None:
    state = _state(local={})
    del state.results["local"]["stub-executables"]
    assert state.unchecked() == ["local"]
    assert state.verdict() == "incomplete" and not state.gate_open()
    assert state.gate_reason() == "not every hazard was checked on local"
    state.last_run_cancelled = True
    assert state.verdict() == "cancelled" and not state.gate_open()
    assert state.gate_reason() == "not every hazard was checked on local (the last run was cancelled)"


def test_a_machine_never_checked_is_unchecked_even_with_no_hazards_declared() -> None:
    state = DoctorState(hazard_ids=[], finished_once=True, hosts=["local", "gpu1"])
    state.results["local"] = {}
    assert state.unchecked() == ["gpu1"]
    assert state.verdict() == "incomplete" and not state.gate_open()
    state.results["gpu1"] = {}
    assert state.unchecked() == [] and state.verdict() == "clean" and state.gate_open()
    assert state.gate_reason() == "the doctor found no failing hazard"


def test_only_current_machines_count() -> None:
    state = _state(hosts=["local"], local={}, gpu9={"clock-skew": "fail"})
    state.host_errors["gpu9"] = "ssh: refused"
    assert state.failing() == [] and state.unchecked() == [] and state.gate_open()
    assert state.verdict() == "clean"


def test_an_unreachable_machine_blocks_as_a_whole_and_its_results_still_count() -> None:
    state = _state(hosts=["local", "gpu1"], local={}, gpu1={"clock-skew": "error"})
    state.host_errors["gpu1"] = "ssh: connection refused"
    assert state.failing() == [("gpu1", "unreachable"), ("gpu1", "clock-skew (error)")]
    assert state.verdict() == "hazards" and not state.gate_open()
    assert state.gate_reason() == "2 blocking findings: unreachable on gpu1, clock-skew (error) on gpu1"


def test_failing_lists_machines_in_order_and_hazards_in_result_order() -> None:
    state = _state(hosts=["b", "a"], a={"clock-skew": "fail"}, b={"stub-executables": "error", "clock-skew": "fail"})
    assert state.failing() == [("b", "clock-skew (fail)"), ("b", "stub-executables (error)"), ("a", "clock-skew (fail)")]


@pytest.mark.parametrize("count, more", [(3, ""), (4, ""), (5, " and 1 more"), (6, " and 2 more")])
def test_the_reason_names_four_findings_then_counts_the_rest(count: int, more: str) -> None:
    hosts = [f"h{i}" for i in range(count)]
    state = _state(hosts=hosts, **{h: {"clock-skew": "fail"} for h in hosts})
    listed = ", ".join(f"clock-skew (fail) on h{i}" for i in range(min(count, 4)))
    assert state.gate_reason() == f"{count} blocking findings: {listed}{more}"


def test_missing_machines_are_listed_comma_separated() -> None:
    state = _state(hosts=["local", "gpu1", "gpu2"], local={})
    assert state.gate_reason() == "not every hazard was checked on gpu1, gpu2"


def test_paths_follow_the_commands_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXECSYS_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    paths = Paths.resolve(None, None)
    assert paths.config == Path("execsys.toml") and paths.lock == Path("execsys.lock.json")
    assert paths.ledger is None
    paths = Paths.resolve(tmp_path / "d" / "x.toml", "~/runs.ledger")
    assert paths.config == tmp_path / "d" / "x.toml"
    assert paths.lock == tmp_path / "d" / "execsys.lock.json"
    assert paths.ledger == tmp_path / "runs.ledger"
    paths = Paths.resolve("x.toml", "", lock="~/l.json")
    assert paths.lock == tmp_path / "l.json" and paths.ledger is None
