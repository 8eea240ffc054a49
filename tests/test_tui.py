"""The TUI driven by Pilot against the real engines: the doctor on this machine, a temporary ledger,
real pins of real files, a real llama.cpp server on loopback for the probe step."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from execsys.doctor.registry import IDS
from execsys.tui.app import DARK, LIGHT, ExecsysApp
from execsys.tui.screens.dialogs import AddHostDialog, OverrideDialog
from textual.widgets import DataTable, Input, OptionList, ProgressBar, Select, Static

from execsys.ledger import Ledger
from tests.tui_helpers import header_state, settle, text_of, while_running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


def column_names(table: DataTable) -> list[str]:
    """The doctor table's column headings without the two-cell gutter that carries the cursor's ▸."""
    labels = [str(column.label) for column in table.columns.values()]
    assert all(label[:2] in ("▸ ", "  ") for label in labels), labels
    return [label[2:] for label in labels]


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


async def test_doctor_checks_every_hazard_live_and_records_the_report(project: Path, ledger_path: Path) -> None:
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
    import subprocess

    from execsys.console import SYMBOLS

    # a repository with core.fileMode=false warns (lost-mode-bits) wherever it is checked: the loopback
    # host reads the same filesystem, so the remote column must show that warning as "!"
    repo = project / "evals"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    subprocess.run(["git", "-C", str(repo), "config", "core.fileMode", "false"], check=True, timeout=30)
    (project / "execsys.toml").write_text(f'[doctor]\nrepos = ["{repo}"]\n')
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
        assert column_names(table) == ["Hazard", "local", ssh_config_env.dest]
        remote = app.doctor.results[ssh_config_env.dest]
        assert set(remote) == set(IDS)
        assert remote["lost-mode-bits"].status == "warn", remote["lost-mode-bits"].summary
        for hazard_id in IDS:  # each remote cell shows that host's own status, by symbol
            cell = table.get_cell(hazard_id, ssh_config_env.dest).plain
            assert cell.startswith(f"{SYMBOLS[remote[hazard_id].status]} "), (hazard_id, cell)
            assert remote[hazard_id].summary in cell or cell.endswith("…"), (hazard_id, cell)
        assert table.get_cell("lost-mode-bits", ssh_config_env.dest).plain.startswith("! ")
        # an unreachable host reports error beside the others, and the gate stays closed
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*ssh_config_env.unreachable_dest, "enter")
        await settle(pilot, lambda: not app.doctor.running and
                     ssh_config_env.unreachable_dest in app.doctor.results | app.doctor.host_errors, timeout=200)
        assert not app.doctor.gate_open()
        assert ssh_config_env.unreachable_dest in app.doctor.gate_reason()


# -- step 2: identity --------------------------------------------------------------------------


@pytest.fixture
def declared_project(project: Path) -> Path:
    """A declaration with a real artifact file (hashed when pinned) and a decoding budget."""
    artifact = project / "model.bin"
    artifact.write_bytes(os.urandom(3 << 20))
    (project / "execsys.toml").write_text(
        '[model]\nname = "tiny-test"\n\n[artifact]\npath = "model.bin"\nquantization = "f16"\n\n'
        '[budget]\ntemperature = 0.0\nmax_tokens = 16\n'
    )
    return project


async def test_identity_form_shows_declared_and_observed_apart_and_pins_with_a_diff(
        declared_project: Path, ledger_path: Path) -> None:
    from execsys.digest import digest_path
    from execsys.identity import load_lock

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        screen = app.screen
        await settle(pilot, lambda: "observed:" in text_of(screen.query_one("#identity-status", Static)))
        # declared values fill the form ...
        assert screen.query_one("#f-model-name", Input).value == "tiny-test"
        assert screen.query_one("#f-budget-max_tokens", Input).value == "16"
        # ... and what this machine observes is shown apart, read-only: the artifact's real digest
        observed = text_of(screen.query_one("#obs-artifact", Static))
        assert digest_path(declared_project / "model.bin").digest in observed
        assert "◇ digest:" in observed
        options = screen.query_one("#components", OptionList)
        assert str(options.get_option("model").prompt).startswith("●")  # declared
        assert str(options.get_option("grader").prompt).startswith("○")  # not declared

        # pin: the lock and the ledger record appear, the header shows the identity
        await pilot.press("ctrl+l")
        await settle(pilot, lambda: (declared_project / "execsys.lock.json").exists() and not screen.query_one("#pin").disabled)
        first = load_lock(declared_project / "execsys.lock.json")
        assert app.identity_id == first.id
        assert f"identity {first.id[:12]}" in header_state(app)
        assert [r.identity for r in records(ledger_path, "identity")] == [first.id]
        status = text_of(screen.query_one("#identity-status", Static))
        assert f"pinned {first.id[:12]}" in status and "no earlier lock" in status
        bar = screen.query_one("#pin-progress", ProgressBar)
        assert bar.percentage == 1.0

        # observe now against the lock: still the pinned system; then the artifact's bytes change
        await pilot.press("ctrl+r")
        await settle(pilot, lambda: "now against" in text_of(screen.query_one("#identity-status", Static)))
        assert "= now against execsys.lock.json: same system: no component moved" in text_of(
            screen.query_one("#identity-status", Static))
        (declared_project / "model.bin").write_bytes(os.urandom(3 << 20))
        await pilot.press("ctrl+r")
        await settle(pilot, lambda: "isolates" in text_of(screen.query_one("#identity-status", Static)))
        assert "≠ now against execsys.lock.json: isolates artifact" in text_of(screen.query_one("#identity-status", Static))

        # change one component in the form, pin again: the diff isolates it
        screen.query_one("#f-budget-temperature", Input).value = "0.7"
        await pilot.press("ctrl+l")
        await settle(pilot, lambda: load_lock(declared_project / "execsys.lock.json").id != first.id
                     and not screen.query_one("#pin").disabled)
        status = text_of(screen.query_one("#identity-status", Static))
        assert "≠ against the previous lock: descriptive only: 2 components moved (artifact, budget)" in status
        assert "temperature = 0.7" in (declared_project / "execsys.toml").read_text()

        # two components moved: descriptive only
        screen.query_one("#f-budget-temperature", Input).value = "0.2"
        screen.query_one("#f-model-name", Input).value = "another"
        await pilot.press("ctrl+l")
        await settle(pilot, lambda: "descriptive only" in text_of(screen.query_one("#identity-status", Static)))
        assert "2 components moved (model, budget)" in text_of(screen.query_one("#identity-status", Static))


@pytest.mark.expects_error_notification
async def test_identity_prefills_from_detection_and_saves_a_declaration_that_loads(project: Path) -> None:
    import socket

    from execsys import declaration

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        screen = app.screen
        await settle(pilot, lambda: "observed:" in text_of(screen.query_one("#identity-status", Static)))
        assert "pre-filled from what this machine shows" in text_of(screen.query_one("#identity-status", Static))
        assert screen.query_one("#f-hardware-host", Input).value == socket.gethostname()
        screen.query_one("#f-budget-stop", Input).value = '["\\n", "END"]'
        screen.query_one("#f-model-name", Input).value = "m"
        await pilot.press("ctrl+s")
        await settle(pilot, lambda: (project / "execsys.toml").exists())
        saved = declaration.load(project / "execsys.toml")
        assert saved.get("budget", "stop") == ["\n", "END"]
        assert saved.get("hardware", "host") == socket.gethostname()
        assert saved.get("model", "name") == "m"
        # a value that does not parse is refused, naming the field; nothing is written
        before = (project / "execsys.toml").read_text()
        screen.query_one("#f-budget-max_tokens", Input).value = "many"
        await pilot.press("ctrl+s")
        await settle(pilot, lambda: True)
        assert (project / "execsys.toml").read_text() == before
        assert any("budget.max_tokens" in n.message for n in app._notifications)


# -- step 3: probes ------------------------------------------------------------------------------


def _write_cases(path: Path, prompts: list[str], max_tokens: int = 8) -> Path:
    from tests.tui_helpers import write_cases

    return write_cases(path, [(f"c{i}", p) for i, p in enumerate(prompts)], max_tokens)


async def _fill_probe_form(pilot, **values) -> None:
    screen = pilot.app.screen
    for field_id, value in values.items():
        if field_id == "axis":
            screen.query_one("#axis", Select).value = value
        else:
            screen.query_one(f"#{field_id}", Input).value = str(value)
    await pilot.pause()


async def test_probe_against_real_llama_server_behind_the_gate(failing_doctor: Path, ledger_path: Path,
                                                                llama_server) -> None:
    _write_cases(failing_doctor / "cases.jsonl", ["Hello", "The sky is", "1 2 3", "Once upon"])
    app = ExecsysApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        assert not app.doctor.gate_open()
        await pilot.press("3")
        await pilot.pause()
        await _fill_probe_form(pilot, endpoint=llama_server.base_url, cases="cases.jsonl", n=3)
        # the gate asks; keeping it closed starts nothing
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert isinstance(app.screen, OverrideDialog)
        await pilot.press("escape")
        await settle(pilot, lambda: True)
        assert records(ledger_path, "probe-run") == []
        # an explicit override runs the probe, and the override is recorded with the run
        await pilot.press("ctrl+g")
        await pilot.pause()
        await pilot.press("y")
        screen = app.screen
        await settle(pilot, lambda: not screen.running and records(ledger_path, "probe"), timeout=240)
        [run] = records(ledger_path, "probe-run")
        [probe] = records(ledger_path, "probe")
        assert probe.body["n"] + probe.body["errored"] == 3 and probe.body["axis"] == "session"
        with Ledger.open(ledger_path) as ledger:
            override = ledger.child(run.id, "gate-override")
        assert override is not None and override.kind == "gate-override"
        assert override.body["verdict"] == "hazards" and override.body["run"] == run.id
        assert {"host": "local", "hazard": "stub-executables (fail)"} in override.body["failing"]
        assert "(gate overridden)" in header_state(app)
        # the live view: a bar per pass, full; the rate and the engine's sentence
        bars = list(screen.query(ProgressBar))
        assert len(bars) == 2 and all(bar.percentage == 1.0 for bar in bars)
        agreement = text_of(screen.query_one("#agreement", Static))
        assert f"agreement {probe.body['m']}/{probe.body['n']}" in agreement
        assert probe.body["sentence"] in text_of(screen.query_one("#probe-status", Static))
        flipped = screen.query_one("#flipped", OptionList)
        assert [flipped.get_option_at_index(i).id for i in range(flipped.option_count)] == probe.body["flipped"]


async def test_probe_lists_flipped_cases_and_shows_the_divergence_side_by_side(project: Path, ledger_path: Path,
                                                                               flip_endpoint) -> None:
    # the purpose-built endpoint pins the arithmetic: two of four cases flip on their second call
    _write_cases(project / "cases.jsonl", ["alpha", "beta [flip]", "gamma", "delta [flip]"])
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await _fill_probe_form(pilot, endpoint=flip_endpoint.base_url, cases="cases.jsonl")
        await pilot.press("ctrl+g", "y")
        screen = app.screen
        await settle(pilot, lambda: not screen.running and records(ledger_path, "probe"))
        [probe] = records(ledger_path, "probe")
        assert (probe.body["m"], probe.body["n"]) == (2, 4)
        assert "agreement 2/4 = 0.50" in text_of(screen.query_one("#agreement", Static))
        flipped = screen.query_one("#flipped", OptionList)
        assert [flipped.get_option_at_index(i).id for i in range(flipped.option_count)] == ["c1", "c3"]
        flipped.highlighted = 0
        await pilot.pause()
        shown = text_of(screen.query_one("#outputs"))
        first = flip_endpoint.answer("beta [flip]", 1)
        second = flip_endpoint.answer("beta [flip]", 2)
        offset = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
        assert f"▼ first divergence at character {offset}" in shown
        assert first[:offset] in shown and second[offset:offset + 10] in shown


async def test_escape_stops_a_probe_and_resume_finishes_it_without_double_counting(
        project: Path, ledger_path: Path, flip_endpoint) -> None:
    flip_endpoint.delay = 0.25
    _write_cases(project / "cases.jsonl", [f"case {i}" for i in range(12)])
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3")
        await _fill_probe_form(pilot, endpoint=flip_endpoint.base_url, cases="cases.jsonl")
        await pilot.press("ctrl+g", "y")
        screen = app.screen
        # the agreement rate updates live as pass B's cases complete
        await while_running(pilot, lambda: len(records(ledger_path, "probe-case")) >= 15)
        live = text_of(screen.query_one("#agreement", Static))
        assert re.match(r"agreement so far (\d+)/\1 = 1\.00", live), live
        await pilot.press("escape")  # a keypress is handled while the probe runs in its worker
        await settle(pilot, lambda: not screen.running)
        status = text_of(screen.query_one("#probe-status", Static))
        assert status.startswith("! stopped") and "kept" in status
        assert records(ledger_path, "probe") == []
        kept = len(records(ledger_path, "probe-case"))
        assert 15 <= kept < 24
        assert screen.query_one("#run-mode", Select).value == "resume"
        await pilot.press("ctrl+g")  # the override still holds for this verdict: no second question
        await settle(pilot, lambda: not screen.running and records(ledger_path, "probe"), timeout=120)
        [probe] = records(ledger_path, "probe")
        assert (probe.body["m"], probe.body["n"]) == (12, 12)
        assert len(records(ledger_path, "probe-case")) == 24  # nothing sent twice, nothing counted twice
        assert len(records(ledger_path, "probe-run")) == 1


async def test_a_probe_from_the_tui_speaks_for_the_lock_beside_its_declaration(project: Path, ledger_path: Path,
                                                                             flip_endpoint) -> None:
    # `execsys --config eval/execsys.toml` pins eval/execsys.lock.json: the Probes step ties its record to it
    from tests.test_probe_arithmetic import write_lock

    (project / "eval").mkdir()
    (project / "eval" / "execsys.toml").write_text("")
    identity = write_lock(project / "eval" / "execsys.lock.json", {"temperature": 0})
    _write_cases(project / "cases.jsonl", ["alpha", "beta"])
    app = ExecsysApp(config=project / "eval" / "execsys.toml", autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await _fill_probe_form(pilot, endpoint=flip_endpoint.base_url, cases="cases.jsonl")
        await pilot.press("ctrl+g", "y")
        screen = app.screen
        await settle(pilot, lambda: not screen.running and records(ledger_path, "probe"))
        [probe] = records(ledger_path, "probe")
        assert probe.identity == identity and probe.body["identity"] == identity
        assert probe.body["identity_reason"] is None


async def test_a_resumed_probe_shows_a_flip_whose_first_pass_ran_before_the_stop(project: Path, ledger_path: Path,
                                                                                 flip_endpoint) -> None:
    # c0 and c1 answer pass A before Escape and flip on pass B after the resume: the screen shows them
    # from what the runner said (the record's excerpts), never from the ledger
    flip_endpoint.delay = 0.25
    _write_cases(project / "cases.jsonl", ["alpha [flip]", "beta [flip]"] + [f"case {i}" for i in range(8)])
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await _fill_probe_form(pilot, endpoint=flip_endpoint.base_url, cases="cases.jsonl")
        await pilot.press("ctrl+g", "y")
        screen = app.screen
        await while_running(pilot, lambda: len(records(ledger_path, "probe-case")) >= 3)
        await pilot.press("escape")
        await settle(pilot, lambda: not screen.running)
        assert records(ledger_path, "probe") == []
        await pilot.press("ctrl+g")
        await settle(pilot, lambda: not screen.running and records(ledger_path, "probe"), timeout=120)
        [probe] = records(ledger_path, "probe")
        assert (probe.body["m"], probe.body["n"]) == (8, 10) and probe.body["flipped"] == ["c0", "c1"]
        flipped = screen.query_one("#flipped", OptionList)
        flipped.highlighted = 0
        await pilot.pause()
        shown = text_of(screen.query_one("#outputs"))
        divergence = probe.body["cases"][0]["first_divergence"]
        assert "pass A (excerpt)" in shown and "pass B (excerpt)" in shown
        assert divergence["a"].lstrip("…")[:10] in shown and divergence["b"].lstrip("…")[:10] in shown


# -- step 4: scope & plan ---------------------------------------------------------------------------


def _probe_body(axis: str, m: int, n: int, identity: str) -> dict:
    from execsys.stats import wilson

    return {"schema": "execsys.probe/1", "axis": axis, "identity": identity, "n": n, "m": m,
            "agreement_rate": m / n, "ci95": list(wilson(m, n)), "flipped": [], "cases": []}


async def test_scope_states_the_licence_charts_rates_saves_the_contract_and_registers_a_plan(
        declared_project: Path, ledger_path: Path, cli) -> None:
    assert cli("pin").returncode == 0
    lock = json_load(declared_project / "execsys.lock.json")
    with Ledger.open(ledger_path) as ledger:
        ledger.append("probe", _probe_body("session", 20, 20, lock["id"]), identity=lock["id"])
        ledger.append("probe", _probe_body("restart", 12, 20, lock["id"]), identity=lock["id"])
    expected = SimpleNamespace(**cli("scope", "--json").json())  # the TUI states what `execsys scope` states
    _write_cases(declared_project / "cases.jsonl", [f"q{i}" for i in range(6)])

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        screen = app.screen
        await settle(pilot, lambda: app.identity_id == lock["id"] and "Identity" in text_of(screen.query_one("#statement", Static)))
        assert text_of(screen.query_one("#statement", Static)) == expected.statement
        assert "licence session (20/20); unstable: restart" in header_state(app)
        chart = text_of(screen.query_one("#chart"))
        assert "20/20 = 1.00" in chart and "✓ licensed" in chart
        assert "12/20 = 0.60" in chart and "✗ unstable" in chart
        assert chart.count("– not probed: unlicensed") == 3

        # the contract snippet, saved where asked
        screen.query_one("#contract-path", Input).value = "contract.md"
        await pilot.press("ctrl+s")
        await settle(pilot, lambda: (declared_project / "contract.md").exists())
        contract = (declared_project / "contract.md").read_text()
        assert contract.startswith("## Comparability") and expected.statement in contract

        # a paired plan: the gate asks first (the doctor has not run), the override is recorded with the plan
        screen.query_one("#arm-a", Input).value = "base"
        screen.query_one("#arm-b", Input).value = "tuned"
        screen.query_one("#plan-cases", Input).value = "cases.jsonl"
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert isinstance(app.screen, OverrideDialog)
        await pilot.press("y")
        await settle(pilot, lambda: records(ledger_path, "plan"))
        [plan] = records(ledger_path, "plan")
        assert plan.body["arms"] == ["base", "tuned"] and plan.body["identity"] == lock["id"]
        firsts = [entry["first"] for entry in plan.body["order"]]
        assert firsts.count("base") == firsts.count("tuned") == 3
        assert json_load(declared_project / "plan.json")["digest"] == plan.body["digest"]
        with Ledger.open(ledger_path) as ledger:
            override = ledger.child(plan.id, "gate-override")
        assert override is not None and override.body["for"] == "plan" and override.body["verdict"] == "not run"
        result = text_of(screen.query_one("#plan-result", Static))
        assert f"registered {plan.id}" in result and "base first in 3, tuned first in 3" in result


def json_load(path: Path):
    import json

    return json.loads(path.read_text())


# -- the command ------------------------------------------------------------------------------------


def _painted_in_pty(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 60.0) -> tuple[int, str]:
    """Run ``argv`` with a 120x30 pseudo-terminal as its terminal; its exit code and everything it
    painted, with the terminal's escape sequences stripped."""
    import fcntl
    import pty
    import select
    import struct
    import subprocess
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True)
    os.close(slave)
    painted = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                painted += chunk
            elif proc.poll() is not None:
                # the child can write its last frame and exit between one select and the poll
                # (a loaded host): what it wrote is still in the pty, read it before giving up
                while select.select([master], [], [], 0.2)[0]:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    painted += chunk
                break
        else:
            proc.kill()
            raise AssertionError(f"{argv} did not exit within {timeout}s")
        code = proc.wait(timeout=10)
    finally:
        os.close(master)
    escapes = rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>]"
    return code, re.sub(escapes, b"", painted).decode("utf-8", "replace")


@pytest.mark.parametrize("argv", [["tui"], []], ids=["execsys tui", "bare execsys"])
def test_execsys_tui_opens_in_a_terminal_and_paints(project: Path, argv: list[str]) -> None:
    """In a real pseudo-terminal, `execsys tui` (and bare `execsys`) paints the doctor step -- the step
    bar, the header, every hazard's row -- and exits cleanly."""
    import sys

    env = dict(os.environ, EXECSYS_TUI_EXIT_AFTER_PAINT="1", TERM="xterm-256color")
    code, painted = _painted_in_pty([sys.executable, "-m", "execsys", *argv], env, project)
    assert code == 0, painted[-2000:]
    assert "Traceback" not in painted
    assert re.search(r"execsys +▸1 Doctor +2 Identity +3 Probes +4 Scope & plan", painted), painted[:500]
    assert "identity not pinned" in painted and "licence" in painted
    for hazard_id in IDS:
        assert re.search(rf"{re.escape(hazard_id)} +(… checking|[✓!✗–?] )", painted), hazard_id


def test_execsys_tui_refuses_without_a_terminal(cli, project: Path) -> None:
    result = cli("tui", cwd=project)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("execsys tui: error: the TUI needs an interactive terminal")
    assert "Traceback" not in result.stderr


@pytest.mark.expects_error_notification
async def test_an_unreachable_endpoint_is_one_line_in_a_notification_not_a_crash(project: Path,
                                                                                  ledger_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _write_cases(project / "cases.jsonl", ["x"])
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3")
        await _fill_probe_form(pilot, endpoint=f"http://127.0.0.1:{port}/v1", cases="cases.jsonl")
        await pilot.press("ctrl+g", "y")
        screen = app.screen
        await settle(pilot, lambda: not screen.running)
        assert app.is_running and app.current_mode == "probes"
        [note] = [n for n in app._notifications if n.severity == "error"]
        assert note.title == "probe failed" and "\n" not in note.message and f"127.0.0.1:{port}" in note.message
        assert "Traceback" not in note.message
        assert text_of(screen.query_one("#probe-status", Static)).startswith("✗ the probe stopped with an error")
        assert not screen.query_one("#start").disabled  # ready to try again


async def test_hosts_from_the_command_line_and_the_declaration_get_their_own_columns(project: Path) -> None:
    (project / "execsys.toml").write_text('[doctor]\nhosts = ["declared-gpu"]\n')
    app = ExecsysApp(autostart=False, hosts=["flag-gpu"])
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.screen.query_one("#hazards", DataTable)
        # the declaration is read after the first paint: its host's column follows a moment later
        await settle(pilot, lambda: len(table.columns) == 4)
        assert column_names(table) == ["Hazard", "local", "flag-gpu", "declared-gpu"]
        assert all(table.get_cell(h, "flag-gpu").plain.startswith("– not checked") for h in IDS)
        assert not app.doctor.gate_open()


# -- selection and layout without colour ----------------------------------------------------------

REPORT = Path(__file__).parent / "fixtures" / "tui_doctor_report.json"


@pytest.fixture
def demo_project(tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The screenshots' project: a declaration, a lock, a harness command whose two near-tie cases flip."""
    from execsys.tui import screenshots

    root = tmp_path / "demo"
    screenshots.prepare_project(root, ledger_path)
    monkeypatch.chdir(root)
    return root


def option_lines(options) -> list[str]:
    """What each option row shows on screen, as plain text (no colour: what NO_COLOR or a mono terminal shows)."""
    return [options.render_line(y).text for y in range(options.option_count)]


async def test_the_selected_component_and_flipped_case_are_marked_without_colour(demo_project: Path) -> None:
    from execsys.tui import screenshots

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await screenshots.identity_scene(pilot)  # the component list, "hardware" highlighted
        options = app.screen.query_one("#components", OptionList)
        lines = option_lines(options)
        assert [i for i, line in enumerate(lines) if line.lstrip().startswith("▸")] == [3]
        assert "hardware" in lines[3] and "▸" not in "".join(lines[:3] + lines[4:])
        options.focus()
        await pilot.press("down")
        lines = option_lines(options)
        assert "▸" in lines[4] and "harness" in lines[4] and "▸" not in lines[3]
        await screenshots.probes_scene(pilot)  # a probe through the UI: tie-1 and tie-2 flip
        flipped = app.screen.query_one("#flipped", OptionList)
        lines = option_lines(flipped)
        assert "▸" in lines[0] and "tie-1" in lines[0] and "▸" not in lines[1]
        await pilot.press("down")
        lines = option_lines(flipped)
        assert "▸" in lines[1] and "tie-2" in lines[1] and "▸" not in lines[0]
        await settle(pilot, lambda: True)


async def test_doctor_marks_the_selected_row_and_titles_the_detail_readably(demo_project: Path) -> None:
    from execsys.tui import screenshots

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await screenshots.doctor_scene(pilot, screenshots.recorded_results(REPORT))
        screen = app.screen
        table = screen.query_one("#hazards", DataTable)
        table.move_cursor(row=0, column=1)
        await pilot.pause()

        def marked() -> list[str]:
            return [hazard_id for hazard_id in IDS if table.get_cell(hazard_id, "hazard").plain.startswith("▸")]

        assert marked() == [IDS[0]]
        await pilot.press("down")
        assert marked() == [IDS[1]]
        detail = text_of(screen.query_one("#detail", Static))
        title = dict(screen._hazards)[IDS[1]]
        assert detail.splitlines()[0] == f"{IDS[1]} — {title} · on local"


async def test_every_step_fits_80x24_with_its_footer_keys_visible(demo_project: Path) -> None:
    """Nothing essential is cut off at 80x24: every step's footer shows all its keys, in full."""
    from textual.widgets import Footer

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("1", "2", "3", "4"):
            await pilot.press(key)
            await pilot.pause()
            footer = app.screen.query_one(Footer)
            keys = list(footer.query("FooterKey"))
            # the palette key is docked at the right edge, over whatever runs beyond it
            limit = min([k.region.x for k in keys if k.has_class("-command-palette")] or [app.size.width])
            visible = {k.description for k in keys if k.region.width and k.region.right <= limit}
            for binding in (b for _, b, enabled, _ in app.active_bindings.values() if b.show and enabled):
                assert binding.description in visible, f"step {key}: the footer cuts off {binding.description!r}"
        await settle(pilot, lambda: True)


async def test_probe_defaults_come_from_the_config_the_app_was_opened_with(project: Path) -> None:
    elsewhere = project / "conf"
    elsewhere.mkdir()
    (project / "execsys.toml").write_text('[probe]\ncases = "here.jsonl"\ntimeout = 99\ncompare = "output"\n')
    (elsewhere / "execsys.toml").write_text(
        '[probe]\ncases = "there.jsonl"\ntimeout = 7\ncompare = "outcome"\nextract = "last-number"\n\n'
        '[runtime]\nready_timeout = 11\n')
    app = ExecsysApp(config=elsewhere / "execsys.toml", autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#command", Input).value = "python3 harness.py"
        form = screen.form()
        assert form["cases"] == "there.jsonl"
        from execsys.tui import adapter

        options = adapter.probe_options(app.paths, form)
        assert (options.timeout, options.compare, options.extract, options.ready_timeout) == \
            (7.0, "outcome", "last-number", 11.0)
        await settle(pilot, lambda: True)


async def test_rerunning_one_hazard_on_a_remote_column_leaves_this_machine_alone(project: Path, ledger_path: Path,
                                                                                  ssh_config_env) -> None:
    dest = ssh_config_env.dest
    app = ExecsysApp(hosts=[dest])
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running, timeout=200)
        screen = app.screen
        before_local = dict(app.doctor.results["local"])
        before_remote = dict(app.doctor.results[dest])
        doctor_records = len(records(ledger_path, "doctor"))
        table = screen.query_one("#hazards", DataTable)
        row = IDS.index("port-collisions")
        table.move_cursor(row=row, column=2)  # the remote host's column
        await pilot.pause()
        local_cell = table.get_cell("port-collisions", "local").plain
        await pilot.press("r")
        assert table.get_cell("port-collisions", "local").plain == local_cell  # not "… checking"
        # Pilot.press waits for the app to go idle, and on a loaded machine the remote check can finish
        # inside that wait: then the cell already holds the new result instead of "… checking"
        assert (table.get_cell("port-collisions", dest).plain.startswith("… checking")
                or app.doctor.results[dest]["port-collisions"] is not before_remote["port-collisions"])
        await settle(pilot, lambda: not app.doctor.running, timeout=200)
        assert app.doctor.results["local"] == before_local  # the very same result objects: not re-run
        assert all(app.doctor.results["local"][h] is before_local[h] for h in IDS)
        assert app.doctor.results[dest]["port-collisions"] is not before_remote["port-collisions"]
        assert all(app.doctor.results[dest][h] is before_remote[h] for h in IDS if h != "port-collisions")
        newest = records(ledger_path, "doctor")
        assert len(newest) == doctor_records + 1
        assert [h["host"]["name"] for h in newest[-1].body["hosts"]] == [dest]
        # re-running on this machine's column still checks this machine
        table.move_cursor(row=row, column=1)
        await pilot.pause()
        await pilot.press("r")
        await settle(pilot, lambda: not app.doctor.running, timeout=200)
        assert app.doctor.results["local"]["port-collisions"] is not before_local["port-collisions"]
