"""Snapshots of each step at 80x24 and 120x40 (pytest-textual-snapshot).

The scenes are the ones ``python -m execsys.tui.screenshots`` uses, driven through the real app:
a project with a fixed declaration and lock, a probe run through the UI against a small harness
command (its outputs are fixed, two cases flip on the second call), a ledger with fixed probe
records for the Scope step. The Doctor step replays a recorded real report (paths and pids
normalised, tests/fixtures/tui_doctor_report.json) through the same messages the live checks
send, because a live doctor's findings depend on the machine. Cursor blink is off.

Update after an intended change: ``pytest tests/test_tui_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from execsys.tui import screenshots
from execsys.tui.app import ExecsysApp
from textual.widgets import Input

REPORT = Path(__file__).parent / "fixtures" / "tui_doctor_report.json"
SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def demo(tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(Input, "cursor_blink", False)
    project = tmp_path / "project"
    screenshots.prepare_project(project, ledger_path)
    monkeypatch.chdir(project)
    return project


@SIZES
def test_doctor_step(demo: Path, size: tuple[int, int], snap_compare) -> None:
    async def run_before(pilot) -> None:
        await screenshots.doctor_scene(pilot, screenshots.recorded_results(REPORT))

    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=run_before)


@SIZES
def test_identity_step(demo: Path, size: tuple[int, int], snap_compare) -> None:
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=screenshots.identity_scene)


@SIZES
def test_probes_step(demo: Path, size: tuple[int, int], snap_compare) -> None:
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=screenshots.probes_scene)


@SIZES
def test_scope_step(demo: Path, size: tuple[int, int], snap_compare) -> None:
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=screenshots.scope_scene)
