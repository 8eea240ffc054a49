"""An untrusted declaration is code: its declared commands do not run until the user trusts it.

A declaration planted as a cloned repository would ship it names commands that create a file
(``touch X``); every test looks for that file, the one proof that the command ran. The trust
store is the test's own (``$EXECSYS_DATA_DIR``, tests/fixtures/common.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from execsys import declaration, trust
from execsys.errors import InputError
from execsys.sources import Sources
from tests.tui_helpers import settle, text_of

NOT_TRUSTED = "declaration not trusted: execsys trust"


def _plant(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "execsys.toml"
    path.write_text(text)
    return path


def _layer_declaration(root: Path) -> Path:
    # the layer is a command prefix: `touch X python3 - <canary...>` creates X (and a few more files)
    return _plant(root, '[environment]\nlayers = ["touch X"]\n')


def _interop(result) -> dict:
    return _hazard(result, "interop-mangling")


def _hazard(result, hazard_id: str) -> dict:
    return next(h for h in result.json()["hazards"] if h["id"] == hazard_id)


def _store() -> dict:
    path = trust.store_path()
    return json.loads(path.read_text()) if path.exists() else {}


# -- the doctor ---------------------------------------------------------------------------------


def test_the_doctor_skips_an_untrusted_layer_then_runs_it_once_trusted_and_not_after_an_edit(
        cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    config = _layer_declaration(project)

    untrusted = cli("doctor", "--only", "interop-mangling", "--json", cwd=project)
    assert not (project / "X").exists(), "the doctor ran a command from an untrusted declaration"
    assert untrusted.returncode == 0, untrusted.stderr  # a skip, not a finding
    check = _interop(untrusted)
    assert (check["status"], check["summary"]) == ("skip", NOT_TRUSTED)
    assert check["evidence"] == ["layer 'touch X': not run (the declaration is not trusted)"]

    shown = cli("doctor", "--only", "interop-mangling", "-v", cwd=project)
    assert shown.returncode == 0 and NOT_TRUSTED in shown.stdout
    assert not (project / "X").exists()

    trusted = cli("trust", cwd=project)
    assert trusted.returncode == 0, trusted.stderr
    assert "environment.layers: touch X" in trusted.stdout  # what the user just allowed is listed
    assert _store()["declarations"][os.path.realpath(config)]["blake3"] == trust.digest(config.read_bytes())

    ran = cli("doctor", "--only", "interop-mangling", "--json", cwd=project)
    assert (project / "X").exists(), ran.stdout + ran.stderr
    assert _interop(ran)["summary"] != NOT_TRUSTED

    (project / "X").unlink()
    config.write_text(config.read_text() + "# edited after it was trusted\n")
    edited = cli("doctor", "--only", "interop-mangling", "--json", cwd=project)
    assert not (project / "X").exists(), "a declaration changed since it was trusted ran its command"
    assert _interop(edited)["summary"] == NOT_TRUSTED


def test_trust_for_one_invocation_runs_the_layer_and_records_nothing(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    _layer_declaration(project)
    once = cli("doctor", "--only", "interop-mangling", "--json", "--trust", cwd=project)
    assert (project / "X").exists(), once.stdout + once.stderr
    assert not trust.store_path().exists()
    (project / "X").unlink()
    again = cli("doctor", "--only", "interop-mangling", "--json", cwd=project)
    assert not (project / "X").exists()
    assert _interop(again)["status"] == "skip"


def test_a_layer_given_on_the_command_line_is_the_users_own(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    _layer_declaration(project)
    result = cli("doctor", "--only", "interop-mangling", "--json", "--layer", "touch MINE", cwd=project)
    assert (project / "MINE").exists(), result.stdout + result.stderr
    assert not (project / "X").exists()  # the flag replaced the declared layer; that one never ran


def test_a_node_check_skips_an_untrusted_layer_too(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    config = _layer_declaration(project)
    result = cli("doctor", "--node-check", "npd", "--only", "interop-mangling", "--config", str(config), cwd=project)
    assert not (project / "X").exists(), result.stdout + result.stderr


# -- init, the store ------------------------------------------------------------------------------


def test_a_declaration_execsys_init_writes_is_trusted(cli, tmp_path: Path) -> None:
    result = cli("init", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    config = tmp_path / "execsys.toml"
    assert trust.is_trusted(config)
    listed = cli("trust", "--list", "--json", cwd=tmp_path)
    assert [(e["path"], e["status"]) for e in listed.json()["declarations"]] == [(os.path.realpath(config), "trusted")]
    config.write_text(config.read_text() + '\n[runtime]\nrestart = "true"\n')
    assert not trust.is_trusted(config)
    assert [e["status"] for e in cli("trust", "--list", "--json").json()["declarations"]] == ["changed"]


def test_revoke_untrusts_and_a_missing_declaration_is_one_line(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    config = _layer_declaration(project)
    assert cli("trust", "--config", str(config)).returncode == 0
    assert declaration.load(config).trusted
    revoked = cli("trust", "--revoke", "--config", str(config))
    assert revoked.returncode == 0, revoked.stderr
    assert not declaration.load(config).trusted
    again = cli("trust", "--revoke", "--config", str(config))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "not trusted" in again.stderr
    missing = cli("trust", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such declaration" in missing.stderr
    assert not trust.store_path().exists() or _store()["declarations"] == {}


def test_a_declaration_that_does_not_parse_is_not_trusted(cli, tmp_path: Path) -> None:
    config = _plant(tmp_path, "[environment\nlayers = 1\n")
    result = cli("trust", "--config", str(config))
    assert result.returncode == 2 and "malformed TOML" in result.stderr
    assert not trust.store_path().exists()


def test_a_symlinked_declaration_is_trusted_by_the_file_it_names(tmp_path: Path) -> None:
    real = _layer_declaration(tmp_path / "real")
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    trust.trust(link)
    assert declaration.load(real).trusted and declaration.load(link).trusted
    assert list(_store()["declarations"]) == [os.path.realpath(real)]


def test_an_unreadable_store_trusts_nothing_and_is_never_overwritten(cli, tmp_path: Path) -> None:
    config = _layer_declaration(tmp_path)
    trust.trust(config)
    assert declaration.load(config).trusted
    trust.store_path().write_text("{ not json")
    assert not declaration.load(config).trusted  # fail closed
    result = cli("trust", "--config", str(config))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "trust store" in result.stderr
    assert trust.store_path().read_text() == "{ not json"


def test_a_fifo_at_the_store_is_refused_without_blocking(cli, tmp_path: Path) -> None:
    config = _layer_declaration(tmp_path)
    trust.store_path().parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(trust.store_path())
    assert not declaration.load(config).trusted
    result = cli("trust", "--config", str(config), timeout=20)
    assert result.returncode == 2 and "FIFO" in result.stderr


def test_two_trusts_at_once_both_land(tmp_path: Path) -> None:
    import concurrent.futures as cf

    configs = [_plant(tmp_path / f"p{i}", f'[runtime]\nrestart = "echo {i}"\n') for i in range(8)]
    with cf.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(trust.trust, configs))
    assert sorted(_store()["declarations"]) == sorted(os.path.realpath(c) for c in configs)


# -- probes and pin refuse ------------------------------------------------------------------------


def _one_refusal(result, command: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"execsys {command}: error: {NOT_TRUSTED}"), result.stderr


def _cases(path: Path, outputs: dict[str, str] | None = None) -> Path:
    rows = [{"id": cid, "prompt": "2+2?", "output": out, "expected": "4"} for cid, out in (outputs or {"a": "4"}).items()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# A harness in the command-target shape: one case as JSON on stdin, the answer on stdout. Given with
# --command it is the user's own; the declared restart/extract commands around it are not.
HARNESS = f"{sys.executable} -c 'import sys; sys.stdin.read(); print(4)'"


def test_a_restart_probe_refuses_a_declared_restart_from_an_untrusted_declaration(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    _plant(project, '[runtime]\nrestart = "touch R"\nready = "touch READY"\n')
    cases = _cases(project / "cases.jsonl")
    result = cli("probe", "restart", "--command", HARNESS, "--cases", str(cases), cwd=project)
    _one_refusal(result, "probe")
    assert "runtime.restart" in result.stderr
    assert not (project / "R").exists() and not (project / "READY").exists()
    once = cli("probe", "restart", "--command", HARNESS, "--cases", str(cases), "--trust", cwd=project)
    assert (project / "R").exists(), once.stdout + once.stderr  # trusted for this run: it restarts


def test_a_restart_given_on_the_command_line_still_refuses_a_declared_ready_command(tmp_path: Path) -> None:
    from execsys.probes.runner import ProbeOptions

    config = _plant(tmp_path, '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\nrestart = "touch R"\n'
                              'ready = "touch READY"\n')
    cases = _cases(tmp_path / "cases.jsonl")
    decl = declaration.load(config)
    with pytest.raises(trust.UntrustedDeclaration, match="runtime.ready"):
        ProbeOptions.from_sources(Sources.of(decl), axis="restart", cases=str(cases), restart="true")
    options = ProbeOptions.from_sources(Sources.of(decl), axis="restart", cases=str(cases), restart="true",
                                        ready="http://127.0.0.1:9/v1/models")
    assert options.restart == "true"  # the flags are the user's own: not gated
    # a session probe never restarts: the declared restart is not refused there
    assert ProbeOptions.from_sources(Sources.of(decl), axis="session", cases=str(cases)).axis == "session"


def test_a_declared_command_extractor_is_refused_until_trusted(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    _plant(project, '[probe]\ncompare = "outcome"\nextract = "command:touch E"\n')
    cases = _cases(project / "cases.jsonl")
    result = cli("probe", "session", "--command", HARNESS, "--cases", str(cases), cwd=project)
    _one_refusal(result, "probe")
    assert "probe.extract" in result.stderr and not (project / "E").exists()
    mine = cli("probe", "session", "--command", HARNESS, "--cases", str(cases), "--extract", "last-number",
               cwd=project)
    assert mine.returncode in (0, 1), mine.stderr  # the flag replaces the declared extractor: not gated
    assert not (project / "E").exists()


def test_a_grader_probe_refuses_a_declared_grader_command_then_runs_it_with_trust(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    _plant(project, f'[grader]\ncommand = "{sys.executable} -c \\"open(\'G\', \'a\'); print(1)\\""\n')
    cases = _cases(project / "graded.jsonl")
    refused = cli("probe", "grader", "--cases", str(cases), cwd=project)
    _one_refusal(refused, "probe")
    assert "grader.command" in refused.stderr and not (project / "G").exists()
    once = cli("probe", "grader", "--cases", str(cases), "--json", "--trust", cwd=project)
    assert once.returncode == 0, once.stderr
    assert (project / "G").exists()


def test_pin_refuses_to_start_a_declared_mcp_server_from_an_untrusted_declaration(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    _plant(project, '[tools]\nmcp = [{name = "evil", command = ["touch", "M"]}]\n')
    result = cli("pin", cwd=project)
    _one_refusal(result, "pin")
    assert "tools.mcp" in result.stderr
    assert not (project / "M").exists() and not (project / "execsys.lock.json").exists()


def test_the_refusal_names_a_declaration_that_is_not_the_default(tmp_path: Path) -> None:
    config = _plant(tmp_path / "eval", '[runtime]\nrestart = "true"\n')
    decl = declaration.load(config)
    with pytest.raises(InputError) as caught:
        trust.require(decl, "runtime.restart")
    assert str(caught.value).startswith(f"{NOT_TRUSTED} --config {config} ")


def test_a_declaration_without_commands_needs_no_trust(tmp_path: Path) -> None:
    config = _plant(tmp_path, '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\nready = "http://127.0.0.1:9/v1/models"\n')
    assert declaration.load(config).trusted
    assert not trust.store_path().exists()  # nothing looked the store up, nothing was written


# -- the TUI --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_tui_opened_on_an_untrusted_declaration_runs_no_layer_and_offers_to_trust(project: Path) -> None:
    from execsys.tui.app import ExecsysApp

    _layer_declaration(project)
    app = ExecsysApp()  # autostart: the doctor runs as soon as the app opens
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, lambda: app.doctor.finished_once)
        assert not (project / "X").exists(), "opening the TUI ran a command from an untrusted declaration"
        screen = app.screen
        line = text_of(screen.query_one("#trust-line"))
        assert NOT_TRUSTED in line and "environment.layers" in line
        assert app.doctor.results["local"]["interop-mangling"].summary == NOT_TRUSTED
        await pilot.press("t")
        await pilot.pause()
        assert "touch X" in text_of(app.screen.query_one("#trust-commands"))
        await pilot.press("y")
        await settle(pilot, lambda: (project / "X").exists() and not app.doctor.running)
        assert trust.is_trusted(project / "execsys.toml")
        assert not screen.query_one("#trust-line").display


def _planted_program(path: Path, marker: str) -> Path:
    """An executable shipped beside the declaration that leaves ``marker`` when it is started."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)
    return path


def test_the_doctor_does_not_start_a_program_an_untrusted_declaration_names_by_path(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    _planted_program(project / "tool", str(project / "RAN"))
    _plant(project, '[doctor]\ncommands = ["./tool"]\n')
    result = cli("doctor", "--only", "binary-aliasing", "--only", "stub-executables", "--json", cwd=project)
    assert not (project / "RAN").exists(), "the doctor started a program from an untrusted declaration"
    aliasing = _hazard(result, "binary-aliasing")
    assert (aliasing["status"], aliasing["summary"]) == ("skip", NOT_TRUSTED)
    assert f"./tool: not run ({NOT_TRUSTED})" in aliasing["evidence"]
    trusted = cli("doctor", "--only", "binary-aliasing", "--json", "--trust", cwd=project)
    assert (project / "RAN").exists(), trusted.stdout + trusted.stderr


def test_pin_does_not_start_an_interpreter_an_untrusted_harness_command_ships(cli, tmp_path: Path) -> None:
    project = tmp_path / "clone"
    _planted_program(project / "venv" / "bin" / "python3", str(project / "RAN"))
    _plant(project, '[harness]\ncommands = ["venv/bin/python3 -m lm_eval"]\n')
    result = cli("pin", cwd=project)
    _one_refusal(result, "pin")
    assert "harness.commands" in result.stderr
    assert not (project / "RAN").exists() and not (project / "execsys.lock.json").exists()
    # a program on PATH is the user's own: described (and, for python, asked its version) untrusted too
    _plant(project, f'[harness]\ncommands = ["{Path(sys.executable).name} -m lm_eval"]\n')
    assert cli("pin", cwd=project).returncode == 0
