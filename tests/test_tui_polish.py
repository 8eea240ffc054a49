"""The TUI read and typed as a new operator would (issue 13): forms, identity marks, 80x24, status, next steps.

Every test drives the real app with Pilot against the real engines (the doctor on this machine,
real pins of real files, a temporary ledger) and asserts what is on the screen, as plain text:
what an operator reads under NO_COLOR or on a monochrome terminal.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from execsys.tui import screenshots
from execsys.tui.app import ExecsysApp
from execsys.tui.screens.dialogs import AddHostDialog, OverrideDialog
from execsys.tui.widgets.fields import FieldLabel
from textual.widgets import DataTable, Input, OptionList, Static

from tests.tui_helpers import settle, text_of, while_running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

REPORT = Path(__file__).parent / "fixtures" / "tui_doctor_report.json"


def screen_text(app: ExecsysApp) -> str:
    """Every cell of the terminal as plain text, one line per row: exactly what fits on screen."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def footer_keys(app: ExecsysApp) -> list[str]:
    return [str(key.description) for key in app.screen.query("FooterKey") if key.region.width]


async def painted_footer_keys(pilot) -> list[str]:
    """The footer's keys once it is laid out again: a binding change repaints it on a later refresh,
    which a loaded machine can leave until after the work it follows has finished."""
    await settle(pilot, lambda: bool(footer_keys(pilot.app)), timeout=30)
    return footer_keys(pilot.app)


async def identity_ready(pilot) -> None:
    app = pilot.app
    await pilot.press("f2")
    await settle(pilot, lambda: "observed:" in text_of(app.screen.query_one("#identity-status", Static)))


def observed_text(app: ExecsysApp, component: str) -> str:
    return text_of(app.screen.query_one(f"#obs-{component}", Static))


# -- forms people can read and type into ----------------------------------------------------


async def test_placeholders_say_e_g_and_read_apart_from_values(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await identity_ready(pilot)
        screen = app.screen
        # model.name is declared (a value), model.revision is not (an example, in words)
        assert screen.query_one("#f-model-name", Input).value == "tiny-llama-eval"
        revision = screen.query_one("#f-model-revision", Input)
        assert revision.value == "" and revision.placeholder.startswith("e.g. ")
        shown = screen_text(app)
        assert "tiny-llama-eval" in shown and "e.g. " in shown
        assert all(field.placeholder.startswith("e.g. ") for field in screen.query(Input).results(Input))

        await pilot.press("f4")
        await pilot.pause()
        for field_id in ("arm-a", "arm-b", "plan-cases"):
            assert app.screen.query_one(f"#{field_id}", Input).placeholder.startswith("e.g. "), field_id

        await pilot.press("f1")
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AddHostDialog)
        assert app.screen.query_one("#host-input", Input).placeholder.startswith("e.g. ")
        assert "e.g. user@gpu1" in screen_text(app)
        await pilot.press("escape")


async def test_the_focused_field_is_marked_tab_keeps_its_value_and_a_label_click_focuses(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        screen = app.screen
        screen.query_one("#components", OptionList).focus()
        await pilot.press("tab")  # from the component list to the first field, model.name
        await pilot.pause()
        field = screen.query_one("#f-model-name", Input)
        assert app.focused is field
        label = next(lbl for lbl in screen.query(FieldLabel).results(FieldLabel) if lbl.field_id == field.id)
        assert text_of(label).startswith("▸ name")  # a mark in text, not a colour
        await pilot.press("2")  # typed after Tab lands: appended, the declared value is kept
        await pilot.pause()
        assert field.value == "tiny-llama-eval2"
        assert app.current_mode == "identity"

        family = next(lbl for lbl in screen.query(FieldLabel).results(FieldLabel) if lbl.field_id == "f-model-family")
        await pilot.click(family)
        await pilot.pause()
        assert app.focused is screen.query_one("#f-model-family", Input)
        assert text_of(family).startswith("▸ family") and not text_of(label).startswith("▸")


# -- identity marks compare like with like and follow every save or pin ---------------------------


async def test_runtime_and_hardware_compare_mapped_keys_and_nothing_prints_none(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        # declared gpu = "NVIDIA H200"; the lock observed gpus[0].name = "NVIDIA H200"
        assert "= gpus[0].name: NVIDIA H200" in observed_text(app, "hardware")
        # declared engine = "llama.cpp"; observed engine.name is another engine: it differs, and says so
        runtime = observed_text(app, "runtime")
        assert "≠ engine.name: llama-cpp-python" in runtime
        environment = observed_text(app, "environment")
        assert "container: – (none observed)" in environment
        for component in ("hardware", "runtime", "environment"):
            assert "None" not in observed_text(app, component)


async def test_save_and_pin_update_the_marks_and_a_relative_path_equals_its_absolute_self(
        project: Path, ledger_path: Path) -> None:
    (project / "model.gguf").write_bytes(b"GGUF" + bytes(4096))
    (project / "execsys.toml").write_text('# my model\n[model]\nname = "m"\n')
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        screen = app.screen
        options = screen.query_one("#components", OptionList)

        def marks() -> dict[str, str]:
            return {str(options.get_option_at_index(i).id): str(options.get_option_at_index(i).prompt)[0]
                    for i in range(options.option_count)}

        assert marks()["artifact"] == "○" and marks()["model"] == "●"
        screen.query_one("#f-artifact-path", Input).value = "model.gguf"  # relative to the declaration
        await pilot.press("ctrl+s")
        await settle(pilot, lambda: "saved" in text_of(screen.query_one("#identity-status", Static)))
        assert marks()["artifact"] == "●"  # no ctrl+r needed
        assert "# my model" in (project / "execsys.toml").read_text()

        await pilot.press("ctrl+l")
        await settle(pilot, lambda: "pinned" in text_of(screen.query_one("#identity-status", Static)))
        artifact = observed_text(app, "artifact")
        assert f"= path: {project / 'model.gguf'}" in artifact, artifact  # relative vs absolute: the same file

        # a second pin after a change names the changed field
        screen.query_one("#f-model-name", Input).value = "m2"
        await pilot.press("ctrl+l")
        await settle(pilot, lambda: "changed:" in text_of(screen.query_one("#identity-status", Static)))
        status = text_of(screen.query_one("#identity-status", Static))
        assert "isolates model" in status and "name" in status and "m2" in status, status


@pytest.mark.expects_error_notification  # the failure is notified and must also stay in the pane
async def test_a_failed_pin_keeps_its_error_in_the_pane(project: Path) -> None:
    (project / "execsys.toml").write_text('[artifact]\npath = "missing.gguf"\n')
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f2")
        status = app.screen.query_one("#identity-status", Static)
        await settle(pilot, lambda: "observation failed" in text_of(status))  # no lock: observed live, and it fails
        assert "missing.gguf" in text_of(status) and "see the notification" not in text_of(status)
        await pilot.press("ctrl+l")
        await settle(pilot, lambda: "not pinned" in text_of(status))
        line = text_of(status)
        assert "missing.gguf" in line and "see the notification" not in line, line


# -- nothing important cut at 80x24 -------------------------------------------------------------------


async def test_at_80x24_the_doctor_fix_shows_without_scrolling_and_header_cells_end_in_ellipsis(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await screenshots.doctor_scene(pilot, screenshots.recorded_results(REPORT))
        screen = app.screen
        table = screen.query_one("#hazards", DataTable)
        row = [hazard_id for hazard_id, _ in screen._hazards].index("stub-executables")
        table.move_cursor(row=row, column=1)
        await pilot.pause()
        result = app.doctor.results["local"]["stub-executables"]
        shown = screen_text(app)
        assert "Fix" in shown and result.fix.split()[0] in shown and " ".join(result.fix.split()[:3]) in shown

        app.licence = "restart (20/20); unstable: session, concurrency, hosts, redeploy"
        app.gate_override = {"reason": "r", "verdict": "hazards"}
        await pilot.pause()
        header = screen_text(app).splitlines()[1]
        assert "doctor ✗ hazards" in header and "licence " in header and header.rstrip().endswith("…"), header


@pytest.mark.parametrize("size", [(60, 20), (80, 24)], ids=["60x20", "80x24"])
async def test_quit_stays_in_the_footer_on_every_step(demo: Path, size: tuple[int, int]) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=size) as pilot:
        for key in ("f1", "f2", "f3", "f4"):
            await pilot.press(key)
            await pilot.pause()
            assert "^q Quit" in screen_text(app).splitlines()[-1], key


# -- status that tells the truth ----------------------------------------------------------------------


@pytest.fixture
def slow_check(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A declared command that answers --version at once, or hangs once ``slow`` exists: a check Esc can stop."""
    bin_dir = project / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "sleepy"
    tool.write_text(f'#!/bin/sh\nif [ -e "{project / "slow"}" ]; then sleep 60; fi\necho "sleepy 1.0"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (project / "execsys.toml").write_text('[doctor]\ncommands = ["sleepy"]\ntimeout = 50\n')
    return project


async def test_esc_during_a_rerun_says_cancelled_and_leaves_the_gate_as_it_was(slow_check: Path) -> None:
    app = ExecsysApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        failing_before, gate_before = app.doctor.failing(), app.doctor.gate_open()
        verdict_before = app.doctor_verdict
        (slow_check / "slow").touch()
        screen = app.screen
        await pilot.press("R")
        await while_running(pilot, lambda: app.doctor.running and len(app.doctor.results["local"]) > 0
                            and ("local", "stub-executables") in screen._pending
                            and len(screen._pending) < len(app.doctor.hazard_ids))
        assert "Stop" in footer_keys(app)  # offered while something runs
        await pilot.press("escape")
        await settle(pilot, lambda: not app.doctor.running)
        status = text_of(screen.query_one("#doctor-status", Static))
        assert "cancelled" in status, status
        cell = screen.query_one("#hazards", DataTable).get_cell("stub-executables", "local").plain
        assert cell.startswith("– cancelled"), cell
        assert app.doctor.failing() == failing_before  # a stopped check is not a failing one
        assert app.doctor.gate_open() == gate_before and app.doctor_verdict == verdict_before
        assert "Stop" not in footer_keys(app)


async def test_removing_a_host_updates_the_summary(project: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert "Remove host" not in await painted_footer_keys(pilot)  # nothing to remove: only this machine
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*"ssh://nobody@127.0.0.1:1")
        await pilot.press("enter")
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        status = screen.query_one("#doctor-status", Static)
        with_remote = text_of(status)
        assert "Remove host" in await painted_footer_keys(pilot)
        screen.query_one("#hazards", DataTable).move_cursor(row=0, column=2)
        await pilot.press("x")
        await pilot.pause()
        assert app.doctor.hosts == ["local"]
        from execsys.tui.screens.doctor import _count

        after = text_of(status)
        assert after != with_remote and after.endswith(_count(app.doctor.results, ["local"])), after
        assert "Remove host" not in await painted_footer_keys(pilot)



async def test_a_host_removed_while_it_is_checked_stays_removed(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Removed mid-run (this machine's check still running), the host's report is not taken for this
    machine's when the run ends, a re-run does not bring it back, nor does the declaration read again."""
    bin_dir = project / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "sleepy"
    tool.write_text('#!/bin/sh\nsleep 3\necho "sleepy 1.0"\n')  # this machine's check outlasts the removal
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (project / "execsys.toml").write_text('[doctor]\ncommands = ["sleepy"]\ntimeout = 20\n')
    remote = "ssh://nobody@127.0.0.1:1"  # refuses at once: its report is an unreachable host's
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*remote)
        await pilot.press("enter")
        await while_running(pilot, lambda: app.doctor.running and app.doctor.hosts == ["local", remote])
        screen.query_one("#hazards", DataTable).move_cursor(row=0, column=2)
        await pilot.press("x")
        await pilot.pause()
        assert app.doctor.running and app.doctor.hosts == ["local"]
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        assert app.doctor.hosts == ["local"] and set(app.doctor.results) == {"local"}
        assert app.doctor.host_errors == {}  # the unreachable host's error is not this machine's
        assert all(host == "local" for host, _ in app.doctor.failing())
        await pilot.press("R")
        await settle(pilot, lambda: not app.doctor.running)
        screen.post_message(screen.DeclaredHosts([remote]))  # the declaration read again, naming it
        await pilot.pause()
        assert app.doctor.hosts == ["local"]
        assert remote not in text_of(screen.query_one("#doctor-status", Static))

async def test_override_leaves_the_footer_once_given(project: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        assert "Override" in footer_keys(app)  # the doctor has not run: the gate is closed
        assert "Save contract" not in footer_keys(app)  # no identity, no contract to save
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, OverrideDialog)
        await pilot.press("y")
        await pilot.pause()
        assert app.gate_override is not None
        assert "Override" not in footer_keys(app)


# -- the next step -------------------------------------------------------------------------------------


async def test_a_registered_plan_shows_the_command_that_runs_it(demo: Path, ledger_path: Path) -> None:
    app = ExecsysApp(autostart=False, ledger=ledger_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#arm-a", Input).value = "base"
        screen.query_one("#arm-b", Input).value = "tuned"
        await pilot.press("ctrl+o", "y")
        await pilot.pause()
        await pilot.press("ctrl+g")
        result = screen.query_one("#plan-result", Static)
        await settle(pilot, lambda: "registered" in text_of(result))
        command = f"execsys plan run plan.json --arm base=URL --arm tuned=URL --ledger {ledger_path}"
        assert command in " ".join(text_of(result).split()), text_of(result)


# -- runs ----------------------------------------------------------------------------------------------


async def test_scope_lists_recent_runs_with_their_verdicts_and_a_run_shows_its_result_files(
        project: Path, ledger_path: Path, cli) -> None:
    import sys

    write = "import pathlib, sys; pathlib.Path('scores.txt').write_text('0.5'); sys.exit(int(sys.argv[1]))"
    clean = cli("run", "--result", "scores.txt", "--", sys.executable, "-c", write, "0", cwd=project)
    assert clean.returncode == 0, clean.stderr
    failed = cli("run", "--", sys.executable, "-c", write, "3", cwd=project)
    assert failed.returncode == 3, failed.stderr
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f4")
        screen = app.screen
        runs = screen.query_one("#runs", OptionList)
        await settle(pilot, lambda: runs.option_count == 2)
        lines = [str(runs.get_option_at_index(i).prompt) for i in range(2)]
        assert lines[0].startswith("✗ failed") and lines[1].startswith("✓ clean"), lines  # newest first
        detail = screen.query_one("#run-detail", Static)
        await settle(pilot, lambda: "failed" in text_of(detail))
        runs.highlighted = 1
        await settle(pilot, lambda: "scores.txt" in text_of(detail))
        shown = text_of(detail)
        assert "Drift during the run: none" in shown and "blake3" in shown, shown


# -- probes ---------------------------------------------------------------------------------------------


async def _probe(pilot, axis: str | None = None, restart: str | None = None) -> None:
    from textual.widgets import Select

    app = pilot.app
    await pilot.press("f3")
    screen = app.screen
    screen.query_one("#command", Input).value = "python3 harness.py"
    if axis:
        screen.query_one("#axis", Select).value = axis
    if restart:
        screen.query_one("#restart", Input).value = restart
    await pilot.pause()
    await pilot.press("ctrl+g")
    await pilot.pause()
    if app.screen is not screen:  # the gate asks (the doctor has not run): override
        await pilot.press("y")
    await settle(pilot, lambda: not screen.running and screen.query_one("#flipped", OptionList).option_count > 0)


async def test_at_80x24_the_probe_verdict_shows_in_full_and_its_fields_say_e_g(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await _probe(pilot)
        screen = app.screen
        for field_id in ("endpoint", "command", "cases", "n", "restart", "ready", "load", "baseline"):
            assert screen.query_one(f"#{field_id}", Input).placeholder.startswith("e.g. "), field_id
        verdict = text_of(screen.query_one("#probe-status", Static))
        tail = " ".join(verdict.split()[-3:])  # the advice the sentence ends with
        shown = " ".join(screen_text(app).split())
        assert tail in shown, (tail, screen_text(app))


async def test_the_restart_probe_says_pass_b_runs_once_the_restart_is_over(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        statuses: list[str] = []
        screen = app.screen
        original = screen._set_status
        screen._set_status = lambda line: (statuses.append(str(line)), original(line))[1]  # type: ignore[method-assign]
        await _probe(pilot, axis="restart", restart="true")
        restarting = next(i for i, line in enumerate(statuses) if line.startswith("restarting the server"))
        after = statuses[restarting + 1:]
        assert after and after[0].startswith("pass B running"), statuses
