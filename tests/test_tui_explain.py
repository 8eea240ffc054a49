"""`execsys explain A B` on the TUI's Scope step (issue 32): two runs marked in the run list, the report drawn.

Space on the Scope step's run list marks the highlighted run A, then another B; with two marked the
step draws the explain report -- the one-sentence verdict, what moved, the flips, the noise floor of
each axis that separates the runs -- from the same engine call ``execsys explain`` makes. The pilot
tests record real runs (``execsys run`` of a harness that writes a result file) under a real pinned
lock, and measure the noise floor with a real restart probe of the real llama.cpp server; what is
asserted is what the operator reads, word for word the engine's. The snapshots (80x24, 120x40) use the
screenshots' project with two run records written with fixed ids (a real run's id and times change
every time), so the pictures compare.

Update the pictures after an intended change: ``pytest tests/test_tui_explain.py --snapshot-update``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from execsys.tui import screenshots
from execsys.tui.app import ExecsysApp
from textual.widgets import Input, OptionList, Static

from execsys.explain import ExplainOptions, report_lines, run_explain
from execsys.ledger import Ledger
from tests.tui_helpers import settle, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

CASES = [f"q{i:02d}" for i in range(12)]

# A harness that writes an execsys.result/1 file: every case right except those named in argv[2].
HARNESS = """\
import json, sys
wrong = set(sys.argv[2].split(",")) if sys.argv[2] else set()
outcomes = {f"q{i:02d}": f"q{i:02d}" not in wrong for i in range(12)}
json.dump({"schema": "execsys.result/1", "identity": "execsys.lock.json", "outcomes": outcomes},
          open(sys.argv[1], "w"))
"""


def footer_keys(app: ExecsysApp) -> list[str]:
    return [str(key.description) for key in app.screen.query("FooterKey") if key.region.width]


def screen_text(app: ExecsysApp) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def record_runs(cli, project: Path, wrong: dict[str, str]) -> dict[str, str]:
    """Pin the project, then one real ``execsys run`` per name (its result: every case right but ``wrong``)."""
    pinned = cli("pin", "--json", cwd=project, timeout=180)
    assert pinned.returncode == 0, pinned.stderr
    (project / "harness.py").write_text(HARNESS)
    runs = {}
    for name, cases in wrong.items():
        ran = cli("run", "--result", f"{name}.json", "--", sys.executable, "harness.py", f"{name}.json", cases,
                  cwd=project, timeout=180)
        assert ran.returncode == 0, ran.stderr
        with Ledger.open(None) as ledger:  # $EXECSYS_LEDGER: the test's own
            runs[name] = ledger.find(kind="run", newest_first=True, limit=1)[0].id
    return runs


async def open_runs(pilot, count: int) -> OptionList:
    app = pilot.app
    await pilot.press("f4")
    runs = app.screen.query_one("#runs", OptionList)
    await settle(pilot, lambda: runs.option_count == count and runs.get_option_at_index(0).id is not None)
    runs.focus()
    await pilot.pause()
    return runs


async def mark(pilot, runs: OptionList, run_id: str) -> None:
    runs.highlighted = next(i for i in range(runs.option_count) if runs.get_option_at_index(i).id == run_id)
    await pilot.pause()
    await pilot.press("space")
    await pilot.pause()


def prompt(runs: OptionList, run_id: str) -> str:
    return str(next(runs.get_option_at_index(i).prompt for i in range(runs.option_count)
                    if runs.get_option_at_index(i).id == run_id))


def engine_report(ledger_path: Path, a: str, b: str):
    return run_explain(ExplainOptions.from_sources(None, None, a=a, b=b, ledger=ledger_path))


async def test_two_marked_runs_show_the_engines_explanation_with_the_measured_restart_floor(
        project: Path, ledger_path: Path, cli, restart_script) -> None:
    runs_by_name = record_runs(cli, project, {"base": "", "one": "q01", "five": "q01,q02,q03,q04,q05"})
    # the noise floor between two runs (two sessions) is the restart agreement: measured for real on llama.cpp
    server = restart_script()
    (project / "cases.jsonl").write_text("".join(json.dumps({"id": c, "prompt": f"Question {c}?", "max_tokens": 8})
                                                 + "\n" for c in CASES))
    probe = cli("probe", "restart", "--endpoint", server.base_url, "--cases", "cases.jsonl", "--lock",
                "execsys.lock.json", "--restart", server.command, "--ready-timeout", "60", "--json", cwd=project,
                timeout=300)
    record = probe.json()
    assert record["evidence"]["verdict"] == "observed" and record["m"] == record["n"] == 12, probe.stderr
    base, one, five = runs_by_name["base"], runs_by_name["one"], runs_by_name["five"]

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        runs = await open_runs(pilot, 3)
        screen = app.screen
        explain = screen.query_one("#explain", Static)
        assert "Mark A/B" in footer_keys(app)  # the key is offered while the run list has the focus
        assert "space marks a run A, then another B" in text_of(explain)

        await mark(pilot, runs, base)
        assert prompt(runs, base).startswith("A: ✓ clean") and not prompt(runs, one).startswith(("A:", "B:"))
        assert f"A: {base}" in text_of(explain) and "marks it B" in text_of(explain)

        await mark(pilot, runs, one)
        assert prompt(runs, one).startswith("B: ✓ clean")
        await settle(pilot, lambda: "within-measured-noise" in text_of(explain))
        report = engine_report(ledger_path, base, one)
        assert report.verdict == "within-measured-noise"
        shown = text_of(explain)
        lines = shown.splitlines()
        assert lines[0] == f"explain A {base} · B {one}"
        assert lines[1] == f"✓ {report.verdict}: {report.sentence}"  # the one sentence first, the engine's own
        assert [line.strip() for line in lines[2:]] == [text for kind, text in report_lines(report)
                                                        if kind != "verdict"]
        assert "  moved: nothing" in lines and "  flips: 1 of 12 paired cases (1 right→wrong, 0 wrong→right)" in lines
        assert "  noise, restart: agreement 1.00 (12/12) predicts 0.0 flips (0–3)" in lines

        # a third mark: the last B becomes A, the new run B; four one-way flips are beyond 0-3
        await mark(pilot, runs, five)
        assert prompt(runs, one).startswith("A: ") and prompt(runs, five).startswith("B: ")
        assert not prompt(runs, base).startswith(("A:", "B:"))
        await settle(pilot, lambda: "not-attributable" in text_of(explain))
        report = engine_report(ledger_path, one, five)
        shown = text_of(explain)
        assert shown.splitlines()[1] == f"! not-attributable: {report.sentence}"
        assert "flips: 4 of 12 paired cases (4 right→wrong, 0 wrong→right)" in shown
        assert "beyond measured noise, yet no component the identities record moved" in shown
        assert "varies (nothing the identities record): execsys plan new --arms A B" in shown

        # space on a marked run unmarks it: one run marked, the report gives way to the hint
        await mark(pilot, runs, five)
        assert not prompt(runs, five).startswith(("A:", "B:"))
        assert f"A: {one}" in text_of(explain) and "explain A" not in text_of(explain)


async def test_an_unprobed_floor_is_unmeasured_and_a_run_without_a_result_is_one_line(
        project: Path, ledger_path: Path, cli) -> None:
    runs_by_name = record_runs(cli, project, {"base": "", "five": "q01,q02,q03,q04,q05"})
    write = "import pathlib; pathlib.Path('scores.txt').write_text('0.5')"
    assert cli("run", "--", sys.executable, "-c", write, cwd=project).returncode == 0
    with Ledger.open(ledger_path) as ledger:
        bare = ledger.find(kind="run", newest_first=True, limit=1)[0].id
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        runs = await open_runs(pilot, 3)
        # ? with the run list focused: the step says how to explain two runs, and the key is listed
        await pilot.press("question_mark")
        await pilot.pause()
        helped = " ".join(text_of(app.screen.query_one("#help-text", Static)).split())
        assert "space marks a run A, then another B" in helped and "space Mark A/B" in helped, helped
        await pilot.press("escape")
        await pilot.pause()
        explain = app.screen.query_one("#explain", Static)
        await mark(pilot, runs, runs_by_name["base"])
        await mark(pilot, runs, runs_by_name["five"])
        await settle(pilot, lambda: "unmeasured" in text_of(explain))
        report = engine_report(ledger_path, runs_by_name["base"], runs_by_name["five"])
        shown = text_of(explain)
        assert shown.splitlines()[1] == f"? unmeasured: {report.sentence}"
        assert "restart was never probed under identity" in shown and "'execsys probe restart --endpoint URL" in shown
        assert "noise, restart: unmeasured" in shown
        # the verdict is scrolled into view at 80x24
        assert "? unmeasured:" in screen_text(app)

        # a run with no result file explain can read: said in one line on the step, not a crash
        await mark(pilot, runs, bare)
        await settle(pilot, lambda: text_of(explain).startswith("✗ explain"))
        shown = text_of(explain)
        assert shown == f"✗ explain A {runs_by_name['five']} B {bare}: {bare}: name one result of the run as " \
                        f"{bare}:PATH (its results: none)", shown


# -- snapshots -----------------------------------------------------------------------------------------

SNAPSHOT_RUNS = {  # id: (verdict, the cases the harness got wrong)
    "run-20261130T091500-5e1f0a2b": ("clean", ""),
    "run-20261130T101500-9c3d7e41": ("clean", "q01,q02,q03,q04,q05"),
}
SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])


def seed_runs(project: Path, ledger_path: Path, identity: str) -> None:
    """Two ``execsys.run/3`` records of the demo identity, each with its result file in the project."""
    from execsys.digest import hash_file

    with Ledger.open(ledger_path) as ledger:
        for run_id, (verdict, wrong) in SNAPSHOT_RUNS.items():
            name = f"results-{run_id[-8:]}.json"
            outcomes = {case: case not in wrong.split(",") for case in CASES}
            (project / name).write_text(json.dumps({"schema": "execsys.result/1", "identity": "execsys.lock.json",
                                                    "outcomes": outcomes}))
            body = {"schema": "execsys.run/3", "id": run_id, "verdict": verdict,
                    "verdict_detail": f"{verdict}: gate passed, no drift, same system after, exit 0",
                    "summary": f"{verdict}: python harness.py {name} (1 result)", "drift": [], "drifted": False,
                    "identity": {"id": identity, "how": "verified", "lock": "execsys.lock.json", "from": None},
                    "results": [{"path": name, "harness": "other", "blake3": hash_file(project / name)}]}
            ledger.append("run", body, identity=identity, record_id=run_id)


@pytest.fixture
def demo_runs(tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(Input, "cursor_blink", False)
    project = tmp_path / "project"
    identity = screenshots.prepare_project(project, ledger_path)
    seed_runs(project, ledger_path, identity)
    monkeypatch.chdir(project)
    return project


async def explain_scene(pilot) -> None:
    """The Scope step with the two runs marked A and B and their explanation in view."""
    app = pilot.app
    await pilot.press("4")
    screen = app.screen
    runs = screen.query_one("#runs", OptionList)
    await settle(pilot, lambda: app.identity_id is not None and runs.option_count == 2
                 and str(screen.query_one("#statement", Static).content).startswith("Identity"))
    runs.focus()
    older, newer = list(SNAPSHOT_RUNS)
    for run_id in (older, newer):
        runs.highlighted = [runs.get_option_at_index(i).id for i in range(2)].index(run_id)
        await pilot.pause()
        await pilot.press("space")
    explain = screen.query_one("#explain", Static)
    await settle(pilot, lambda: "within-measured-noise" in text_of(explain))
    await pilot.pause()


def test_the_explain_scene_is_the_engines_report(demo_runs: Path, ledger_path: Path) -> None:
    """What the pictures show, checked in words: 5 one-way flips against restart 17/20 over 12 cases."""
    older, newer = list(SNAPSHOT_RUNS)
    report = engine_report(ledger_path, older, newer)
    assert report.verdict == "within-measured-noise" and report.axes == ["restart"]
    assert (report.flips["right_to_wrong"], report.flips["wrong_to_right"]) == (5, 0)
    assert report.noise["restart"]["m"] == 17 and report.noise["restart"]["n"] == 20
    assert report.caveats == []


@SIZES
def test_scope_step_explaining_two_runs(demo_runs: Path, size: tuple[int, int], snap_compare) -> None:
    assert snap_compare(ExecsysApp(autostart=False), terminal_size=size, run_before=explain_scene)
