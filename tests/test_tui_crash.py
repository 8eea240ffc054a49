"""A crash of the TUI is never exit 0: one line on stderr, the traceback only with --debug."""

from __future__ import annotations

import io
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from execsys.tui import app as app_module
from execsys.tui.app import ExecsysApp

from execsys.commands.tui import exit_code_of
from execsys.errors import ExitCode


class BrokenApp(ExecsysApp):
    """The real app, with one key whose action raises, as a bug in a screen would."""

    BINDINGS = [("f12", "explode", "Explode")]
    CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))

    def action_explode(self) -> None:
        raise RuntimeError("a screen bug with token=ghp_abcdefghijklmnopqrstuvwxyz0123456789")


@pytest.mark.timeout(120)
def test_a_crash_exits_non_zero_with_one_line(tmp_path: Path, ledger_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    async def press(pilot) -> None:
        await pilot.pause()
        await pilot.press("f12")

    app = BrokenApp(autostart=False)
    stderr = io.StringIO()
    with redirect_stderr(stderr):
        result = app.run(headless=True, size=(80, 24), auto_pilot=press)
        code = exit_code_of(app, result)
    assert code == ExitCode.INTERNAL
    lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
    assert len(lines) == 1, stderr.getvalue()
    assert lines[0].startswith("execsys tui: internal error: RuntimeError: a screen bug")
    assert "--debug" in lines[0]
    assert "Traceback" not in stderr.getvalue()


@pytest.mark.timeout(120)
def test_a_clean_quit_is_exit_0(tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    async def quit_(pilot) -> None:
        await pilot.pause()
        await pilot.press("ctrl+q")

    app = ExecsysApp(autostart=False)
    result = app.run(headless=True, size=(80, 24), auto_pilot=quit_)
    assert exit_code_of(app, result) == ExitCode.OK
