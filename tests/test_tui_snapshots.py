"""Snapshots of every step and every dialog at 80x24 and 120x40 (pytest-textual-snapshot).

The scenes are the ones ``python -m execsys.tui.screenshots`` uses, driven through the real app:
a project with a fixed declaration and lock, a probe run through the UI against a small harness
command (its outputs are fixed, two cases flip on the second call), a ledger with fixed probe
records for the Scope step. The Doctor step replays a recorded real report (paths and pids
normalised, tests/fixtures/tui_doctor_report.json) through the same messages the live checks
send, because a live doctor's findings depend on the machine; every dialog opens over that
replayed doctor, so no picture holds a clock, a ledger id or a host name of the machine taking it.
Cursor blink is off; no scene triggers a notification (a toast's timing is not the picture's).

Update after an intended change: ``pytest tests/test_tui_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from execsys.tui import screenshots
from execsys.tui.app import ExecsysApp
from textual.widgets import Input, OptionList

REPORT = Path(__file__).parent / "fixtures" / "tui_doctor_report.json"
SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
pytestmark = pytest.mark.timeout(300)
Scene = Callable[..., Awaitable[None]]


@pytest.fixture
def demo(tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(Input, "cursor_blink", False)
    project = tmp_path / "project"
    screenshots.prepare_project(project, ledger_path)
    monkeypatch.chdir(project)
    return project


async def replayed_doctor(pilot) -> None:
    await screenshots.doctor_scene(pilot, screenshots.recorded_results(REPORT))


# -- the steps ------------------------------------------------------------------------------------------


@SIZES
def test_doctor_step(demo: Path, size: tuple[int, int], snap_compare) -> None:
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=replayed_doctor)


@SIZES
def test_identity_step(demo: Path, size: tuple[int, int], snap_compare) -> None:
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=screenshots.identity_scene)


@SIZES
def test_probes_step(demo: Path, size: tuple[int, int], snap_compare) -> None:
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=screenshots.probes_scene)


@SIZES
def test_scope_step(demo: Path, size: tuple[int, int], snap_compare) -> None:
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=screenshots.scope_scene)


# -- the dialogs, each over the step that opens it ------------------------------------------------------------


async def add_host_dialog(pilot) -> None:
    await replayed_doctor(pilot)
    await pilot.press("a")
    await pilot.pause()
    await pilot.press(*"user@gpu1")
    await pilot.pause()


async def override_dialog(pilot) -> None:
    await replayed_doctor(pilot)  # the recorded report has a failing hazard: the gate is closed
    await pilot.press("f3")
    await pilot.pause()
    await pilot.press("ctrl+o")
    await pilot.pause()


async def trust_dialog(pilot) -> None:
    await replayed_doctor(pilot)  # the declaration was read meanwhile: its commands are not trusted
    await pilot.press("t")
    await pilot.pause()


async def quit_dialog(pilot) -> None:
    await screenshots.identity_scene(pilot)
    screen = pilot.app.screen
    screen.query_one("#components", OptionList).highlighted = 0
    await pilot.pause()
    screen.query_one("#f-model-name", Input).focus()
    await pilot.press(*"-v2")
    await pilot.press("ctrl+q")
    await pilot.pause()


DIALOGS: dict[str, Scene] = {
    "add-host": add_host_dialog, "override": override_dialog, "trust": trust_dialog, "quit": quit_dialog,
}


@SIZES
@pytest.mark.parametrize("dialog", list(DIALOGS))
def test_dialog(demo: Path, dialog: str, size: tuple[int, int], snap_compare) -> None:
    if dialog == "trust":  # a declaration that declares a command execsys would run
        with (demo / "execsys.toml").open("a", encoding="utf-8") as fh:
            fh.write('\n[grader]\ncommand = "python3 grade.py"\n')
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=DIALOGS[dialog])


async def _probes_form(pilot) -> None:
    await pilot.press("f3")
    await pilot.pause()


HELP_OVER: dict[str, Scene] = {
    "doctor": replayed_doctor, "identity": screenshots.identity_scene, "probes": _probes_form,
    "scope": screenshots.scope_scene,
}


@SIZES
@pytest.mark.parametrize("step", list(HELP_OVER))
def test_help(demo: Path, step: str, size: tuple[int, int], snap_compare) -> None:
    async def run_before(pilot) -> None:
        await HELP_OVER[step](pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=run_before)
