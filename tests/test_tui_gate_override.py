"""ctrl+o ("Override" in the footer of Probes and Scope) on both gated steps, with the real doctor.

It used to crash the app: the action handed ``with_gate`` a callable taking no argument, and the
gate calls ``proceed(override)``. With a clean doctor one keypress must leave the app running and
ask nothing; with a failing one ctrl+o asks, ``y`` overrides, and the override is kept for the
step's next run (which records it in the ledger, as the probe and plan tests show).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from execsys.tui.app import ExecsysApp
from execsys.tui.screens.dialogs import OverrideDialog

from tests.tui_helpers import header_state, settle

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

GATED_STEPS = [("3", "probes"), ("4", "scope")]


def blocking_rows(app) -> str:
    """The gate's reason and what each blocking row said, for the failure message."""
    rows = [f"{host}/{row.id}: {row.status}: {row.summary}" for host, results in app.doctor.results.items()
            for row in results.values() if row.status in ("fail", "error")]
    return "; ".join([app.doctor.gate_reason(), *rows])


@pytest.mark.parametrize(("key", "step"), GATED_STEPS)
async def test_ctrl_o_with_a_clean_doctor_asks_nothing_and_keeps_running(clean_doctor: Path, key: str,
                                                                         step: str) -> None:
    app = ExecsysApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        assert app.doctor.gate_open(), blocking_rows(app)
        await pilot.press(key)
        await pilot.pause()
        assert app.current_mode == step
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert app.is_running and app.current_mode == step
        assert not isinstance(app.screen, OverrideDialog)  # an open gate has nothing to override
        assert app.gate_override is None and "(gate overridden)" not in header_state(app)
        assert any("nothing to override" in str(n.message) for n in app._notifications)
        await settle(pilot, lambda: True)


@pytest.mark.parametrize(("key", "step"), GATED_STEPS)
async def test_ctrl_o_then_y_with_a_failing_doctor_records_the_override(failing_doctor: Path, key: str,
                                                                        step: str) -> None:
    app = ExecsysApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        assert not app.doctor.gate_open()
        await pilot.press(key)
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert app.is_running and isinstance(app.screen, OverrideDialog)
        await pilot.press("y")
        await pilot.pause()
        assert app.is_running and app.current_mode == step
        override = app.gate_override
        assert override is not None and override["verdict"] == "hazards"
        assert {"host": "local", "hazard": "stub-executables (fail)"} in override["failing"]
        assert "(gate overridden)" in header_state(app)
        # the override holds for this verdict: a second ctrl+o asks nothing and keeps it
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert not isinstance(app.screen, OverrideDialog) and app.gate_override is override
        await settle(pilot, lambda: True)
