"""The TUI's own small rules, without a terminal: the gate, and form values to and from TOML."""

from __future__ import annotations

import pytest
from execsys.doctor.model import HazardResult
from execsys.doctor.registry import IDS
from execsys.tui.state import DoctorState
from execsys.tui.widgets.values import declaration_text, from_field, to_field

from execsys import declaration


def _checked(state: DoctorState, host: str, statuses: dict[str, str] | None = None) -> None:
    statuses = statuses or {}
    state.results[host] = {h: HazardResult(h, statuses.get(h, "ok"), "s") for h in IDS}


def test_the_gate_opens_only_after_every_host_was_fully_checked_and_nothing_blocks() -> None:
    state = DoctorState(hazard_ids=list(IDS))
    assert not state.gate_open() and state.verdict() == "not run"
    state.running = True
    assert not state.gate_open() and state.gate_reason() == "the doctor is still checking"
    state.running, state.finished_once = False, True
    _checked(state, "local")
    assert state.gate_open() and state.verdict() == "clean"
    # a warning does not close it; a fail or an error (a check that could not look) does
    _checked(state, "local", {"clock-skew": "warn"})
    assert state.gate_open()
    _checked(state, "local", {"port-collisions": "error"})
    assert not state.gate_open() and "port-collisions (error) on local" in state.gate_reason()
    _checked(state, "local", {"stub-executables": "fail"})
    assert not state.gate_open() and state.verdict() == "hazards"
    # a second host that was never checked, or only partly, keeps it closed
    _checked(state, "local")
    state.hosts.append("gpu1")
    assert not state.gate_open() and "gpu1" in state.gate_reason()
    state.results["gpu1"] = {"clock-skew": HazardResult("clock-skew", "ok", "s")}
    assert not state.gate_open() and state.verdict() == "incomplete"
    _checked(state, "gpu1")
    assert state.gate_open()
    state.host_errors["gpu1"] = "ssh: connection refused"
    assert not state.gate_open() and "unreachable on gpu1" in state.gate_reason()


@pytest.mark.parametrize("value, expected_type", [
    ("text with \"quotes\"", str), (7, int), (0.25, (int, float)), (True, bool),
    (["a", "b c", 1], list), ({"CUDA_VISIBLE_DEVICES": "0", "weird key": 2}, dict), ("auto", (int, str)),
])
def test_form_fields_round_trip_every_declared_type(value, expected_type) -> None:
    assert from_field(to_field(value), expected_type) == value


def test_a_field_that_does_not_parse_says_what_was_expected() -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        from_field("many", int)
    with pytest.raises(ValueError, match="must be a list"):
        from_field('"x"', list)
    assert from_field("   ", int) is None  # empty means not declared


def test_the_saved_declaration_loads_back_to_the_same_tables() -> None:
    tables = {
        "model": {"name": "m", "revision": "abc"},
        "budget": {"temperature": 0.0, "seed": 3, "stop": ["\n", "END"]},
        "environment": {"variables": {"OMP_NUM_THREADS": "1"}},
        "doctor": {"commands": ["python3"], "timeout": 5.0},
    }
    loaded = declaration.parse(declaration_text(tables))
    assert not loaded.warnings
    for name, table in tables.items():
        assert loaded.tables[name] == table


def test_background_work_and_the_processes_it_starts_run_below_the_ui() -> None:
    """A pin's hash runs in a child process: it must inherit the lower priority, the UI's thread keep its own."""
    import os
    import subprocess
    import threading

    from execsys.tui.adapter import BACKGROUND_NICE, at_background_priority

    ui = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    child = at_background_priority(lambda: subprocess.run(["nice"], capture_output=True, text=True, timeout=10))
    assert int(child.stdout) == min(19, ui + BACKGROUND_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ui
    assert int(subprocess.run(["nice"], capture_output=True, text=True, timeout=10).stdout) == ui

    def fails() -> None:
        raise ValueError("the pin's own error")

    with pytest.raises(ValueError, match="the pin's own error"):
        at_background_priority(fails)
