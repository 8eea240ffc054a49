"""The TUI driven by Pilot against the real engines: the doctor on this machine, a temporary ledger,
real pins of real files, a real llama.cpp server on loopback for the probe step."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Input, OptionList, ProgressBar, Select, Static  # noqa: E402

from execsys.doctor.registry import IDS  # noqa: E402
from execsys.ledger import Ledger  # noqa: E402
from execsys.tui.app import DARK, LIGHT, ExecsysApp  # noqa: E402
from execsys.tui.screens.dialogs import AddHostDialog, OverrideDialog  # noqa: E402
from tests.tui_helpers import settle, text_of  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def project(tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project directory as the working directory, with the test's own ledger."""
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def failing_doctor(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A declared command that is a 0-byte executable first on PATH: stub-executables fails, for real."""
    bin_dir = project / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "stubby"
    stub.touch()
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (project / "execsys.toml").write_text('[doctor]\ncommands = ["stubby"]\n')
    return project


def header_state(app) -> str:
    return text_of(app.screen.query_one("#state-line", Static))


def records(ledger_path: Path, kind: str) -> list:
    with Ledger.open(ledger_path) as ledger:
        return ledger.find(kind=kind)


# -- the frame ------------------------------------------------------------------------------


async def test_opens_on_doctor_and_reaches_every_step_by_key(project: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.current_mode == "doctor"
        for key, mode in (("2", "identity"), ("3", "probes"), ("4", "scope"), ("1", "doctor")):
            await pilot.press(key)
            await pilot.pause()
            assert app.current_mode == mode
            steps = text_of(app.screen.query_one("#steps-line", Static))
            assert "▸" in steps  # the current step is marked with a symbol, not only a colour
        # function keys work even while a text field has the focus (digits would be typed there)
        await pilot.press("f3")
        await pilot.pause()
        app.screen.query_one("#cases", Input).focus()
        await pilot.press("2")
        assert app.current_mode == "probes" and app.screen.query_one("#cases", Input).value == "2"
        await pilot.press("f4")
        await pilot.pause()
        assert app.current_mode == "scope"
        await settle(pilot, lambda: True)


async def test_theme_toggles_between_dark_and_light(project: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == DARK
        await pilot.press("ctrl+t")
        assert app.theme == LIGHT
        await pilot.press("ctrl+t")
        assert app.theme == DARK
        await settle(pilot, lambda: True)


async def test_command_palette_lists_the_steps(project: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert {"Step 1: Doctor", "Step 2: Identity", "Step 3: Probes", "Step 4: Scope & plan"} <= set(titles)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Identity", "enter")
        await pilot.pause()
        assert app.current_mode == "identity"
        await settle(pilot, lambda: True)


# -- step 1: doctor ---------------------------------------------------------------------------


async def test_doctor_checks_all_nine_hazards_live_and_records_the_report(project: Path, ledger_path: Path) -> None:
    app = ExecsysApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        screen = app.screen
        assert set(app.doctor.results["local"]) == set(IDS)
        table = screen.query_one("#hazards", DataTable)
        for hazard_id in IDS:
            result = app.doctor.results["local"][hazard_id]
            cell = table.get_cell(hazard_id, "local").plain
            assert cell.startswith({"ok": "✓", "warn": "!", "fail": "✗", "skip": "–", "error": "?"}[result.status])
            assert result.summary[:20] in cell
        stored = records(ledger_path, "doctor")
        assert len(stored) == 1
        assert stored[0].body["verdict"] == app.doctor.verdict()
        assert [h["id"] for h in stored[0].body["hazards"]] == list(IDS)
        assert f"doctor {'✓' if app.doctor.verdict() == 'clean' else '✗'} {app.doctor.verdict()}" in header_state(app)

        # select a row: its evidence and fix appear below
        row = IDS.index("binary-aliasing")
        table.move_cursor(row=row, column=1)
        await pilot.pause()
        detail = text_of(screen.query_one("#detail", Static))
        result = app.doctor.results["local"]["binary-aliasing"]
        assert detail.startswith("binary-aliasing") and result.summary in detail
        for line in result.evidence[:3]:
            assert line in detail
        if result.fix:
            assert "Fix" in detail

        # re-run one: only that hazard runs again, and the run is recorded too
        await pilot.press("r")
        await settle(pilot, lambda: not app.doctor.running)
        stored = records(ledger_path, "doctor")
        assert len(stored) == 2
        assert [h["id"] for h in stored[1].body["hazards"]] == ["binary-aliasing"]
        # re-run all
        await pilot.press("R")
        await settle(pilot, lambda: not app.doctor.running)
        assert len(records(ledger_path, "doctor")) == 3


async def test_a_failing_hazard_closes_the_gate_and_the_header_says_so(failing_doctor: Path) -> None:
    app = ExecsysApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        assert app.doctor.results["local"]["stub-executables"].status == "fail"
        assert app.doctor.verdict() == "hazards"
        assert "doctor ✗ hazards" in header_state(app)
        assert "stubby" in app.screen.query_one("#hazards", DataTable).get_cell("stub-executables", "local").plain
        await pilot.press("3")
        await pilot.pause()
        banner = text_of(app.screen.query_one("#gate", Static))
        assert banner.startswith("✗ gate closed") and "stub-executables (fail) on local" in banner
        await settle(pilot, lambda: True)


async def test_doctor_shows_a_remote_host_side_by_side(project: Path, ssh_config_env) -> None:
    app = ExecsysApp()
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AddHostDialog)
        await pilot.press(*ssh_config_env.dest, "enter")
        await pilot.pause()
        await settle(pilot, lambda: not app.doctor.running and ssh_config_env.dest in app.doctor.results, timeout=200)
        table = app.screen.query_one("#hazards", DataTable)
        assert [str(c.label) for c in table.columns.values()] == ["Hazard", "local", ssh_config_env.dest]
        remote = app.doctor.results[ssh_config_env.dest]
        assert set(remote) == set(IDS)
        for hazard_id in IDS:
            cell = table.get_cell(hazard_id, ssh_config_env.dest).plain
            assert cell[0] in "✓!✗–?"
        # an unreachable host reports error beside the others, and the gate stays closed
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*ssh_config_env.unreachable_dest, "enter")
        await settle(pilot, lambda: not app.doctor.running and
                     ssh_config_env.unreachable_dest in app.doctor.results | app.doctor.host_errors, timeout=200)
        assert not app.doctor.gate_open()
        assert ssh_config_env.unreachable_dest in app.doctor.gate_reason()
