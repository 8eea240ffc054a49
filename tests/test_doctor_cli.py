"""``execsys doctor`` as a user runs it: JSON contract, human output, exit codes, ledger, bad usage."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from execsys.doctor.registry import IDS

HAZARD_IDS = ["binary-aliasing", "interop-mangling", "stub-executables", "unread-env-config", "baked-paths",
              "package-prefixes", "lost-mode-bits", "port-collisions", "clock-skew", "model-name-honesty"]


def _assert_host_object(obj: dict) -> None:
    assert obj["schema"] == "execsys.doctor/1"
    assert {"hostname", "os", "kernel"} <= set(obj["host"])
    assert [h["id"] for h in obj["hazards"]] == HAZARD_IDS
    for hazard in obj["hazards"]:
        assert set(hazard) == {"id", "status", "summary", "evidence", "fix", "findings"}
        for finding in hazard["findings"]:
            assert set(finding) == {"id", "level", "text", "accepted"}
            assert finding["id"].startswith(hazard["id"] + "/") and finding["level"] in ("fail", "error", "warn")
        assert hazard["status"] in ("ok", "warn", "fail", "skip", "error")
        assert isinstance(hazard["summary"], str) and hazard["summary"]
        assert all(isinstance(e, str) for e in hazard["evidence"])
        assert isinstance(hazard["fix"], str)
    assert obj["verdict"] in ("clean", "hazards")
    assert isinstance(obj["duration_s"], float)


def test_registry_ids_are_the_contract():
    assert list(IDS) == HAZARD_IDS


def test_json_schema_with_defaults(cli, ledger_path, tmp_path):
    result = cli("doctor", "--json", cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    report = result.json()
    _assert_host_object(report)
    assert "hosts" not in report
    assert result.returncode == (0 if report["verdict"] == "clean" else 1)
    with sqlite3.connect(ledger_path) as db:
        rows = db.execute("SELECT kind, body FROM records").fetchall()
    assert [kind for kind, _ in rows] == ["doctor"]
    assert json.loads(rows[0][1])["schema"] == "execsys.doctor/1"


def test_human_output_one_line_per_hazard_and_a_count(cli, tmp_path):
    result = cli("doctor", cwd=tmp_path)
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line[:3] in ("[✓]", "[!]", "[✗]", "[–]", "[?]")]
    assert [row.split("]", 1)[1].split(":", 1)[0].strip() for row in rows] == HAZARD_IDS
    # the summary's counts are the rows' symbols tallied, and they cover the nine hazards
    tally = {symbol: sum(row.startswith(f"[{symbol}]") for row in rows) for symbol in "✓!✗–?"}
    summary = re.fullmatch(r"Doctor summary: (.*) in \d+\.\ds -- (no blocking hazards|hazards found)\.", lines[-1])
    assert summary, lines[-1]
    said = {label: int(n) for n, label in (part.split(" ", 1) for part in summary.group(1).split(", "))}
    labels = {"✓": "ok", "!": "warning", "✗": "failed", "–": "skipped", "?": "error"}
    expected = {labels[sym] + ("s" if n != 1 and sym in "!?" else ""): n for sym, n in tally.items() if n}
    assert said == expected and sum(said.values()) == len(HAZARD_IDS)
    blocking = tally["✗"] + tally["?"]
    assert summary.group(2) == ("hazards found" if blocking else "no blocking hazards")
    assert result.returncode == (1 if blocking else 0)
    verbose = cli("doctor", "-v", "--only", "clock-skew", cwd=tmp_path)
    assert "    • adjtimex" in verbose.stdout or "    • kernel synchronisation state" in verbose.stdout


def test_a_failing_hazard_exits_1_and_strict_makes_warnings_fail(cli, tmp_path):
    zero = tmp_path / "bin" / "engine"
    zero.parent.mkdir()
    zero.write_bytes(b"")
    zero.chmod(0o755)
    env = {"PATH": f"{zero.parent}:/usr/bin:/bin"}
    failing = cli("doctor", "--json", "--only", "stub-executables", "--cmd", "engine", env=env, cwd=tmp_path)
    assert failing.returncode == 1
    report = failing.json()
    assert [h["id"] for h in report["hazards"]] == ["stub-executables"]
    assert report["hazards"][0]["status"] == "fail" and report["verdict"] == "hazards"
    # two programs called "tool": a warning; exit 0 unless --strict
    for d in ("x", "y"):
        tool = tmp_path / d / "tool"
        tool.parent.mkdir()
        tool.write_text(f"#!/bin/sh\necho {d}\n")
        tool.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'x'}:{tmp_path / 'y'}:/usr/bin:/bin"}
    lax = cli("doctor", "--only", "binary-aliasing", "--cmd", "tool", env=env, cwd=tmp_path)
    assert lax.returncode == 0, lax.stdout
    assert "[!] binary-aliasing: tool: 2 different programs on PATH" in lax.stdout
    strict = cli("doctor", "--strict", "--only", "binary-aliasing", "--cmd", "tool", env=env, cwd=tmp_path)
    assert strict.returncode == 1


def test_config_pins_and_ports_from_execsys_toml(cli, tmp_path):
    tool = tmp_path / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho one\n")
    tool.chmod(0o755)
    (tmp_path / "execsys.toml").write_text('[doctor]\ncommands = ["tool"]\npins = { tool = "/opt/pinned/tool" }\n')
    result = cli("doctor", "--json", "--only", "binary-aliasing", env={"PATH": f"{tool.parent}:/usr/bin:/bin"},
                 cwd=tmp_path)
    assert result.returncode == 1
    hazard = result.json()["hazards"][0]
    assert hazard["status"] == "fail"
    assert hazard["summary"] == f"tool: PATH runs {tool}, execsys.toml pins /opt/pinned/tool"


@pytest.mark.parametrize("args,needle", [
    (["--only", "no-such-hazard"], "unknown hazard 'no-such-hazard'"),
    (["--port", "0"], "port out of range"),
    (["--port", "http"], "not a port number"),
    (["--timeout", "-1"], "must be greater than 0"),
    (["--pid", "1", "--process", "x"], "not allowed with argument"),
    (["--host", "-oProxyCommand=touch /tmp/x"], "not an ssh destination"),
    (["--layer", "ssh 'gpu1"], "not a command prefix"),
    (["--config", "does-not-exist.toml"], "no such declaration"),
])
def test_bad_usage_is_one_line_and_exit_2(cli, tmp_path, args, needle):
    result = cli("doctor", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("toml,needle", [
    ('[doctor]\nports = ["http"]\n', "[doctor] ports must be a list of port numbers"),
    ("[doctor]\nports = [70000]\n", "out of range 1-65535"),
    ("[doctor]\ntimeout = -3\n", "must be greater than 0"),
    ("[doctor]\nclock_skew_threshold_ms = 0\n", "must be greater than 0"),
    ('[doctor]\nhosts = ["-oProxyCommand=touch {marker}"]\n', "not an ssh destination"),
    ('[environment]\nlayers = [""]\n', "not a command prefix"),
])
def test_a_bad_declared_doctor_setting_is_one_line_and_exit_2(cli, ledger_path, tmp_path, toml, needle):
    # what execsys.toml declares gets the checks the flags get: no traceback, no ssh -oProxyCommand
    marker = tmp_path / "ran"
    (tmp_path / "execsys.toml").write_text(toml.format(marker=marker))
    result = cli("doctor", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and "internal error" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
    assert not marker.exists() and not ledger_path.exists()


def test_no_secret_in_output_or_ledger(cli, ledger_path, tmp_path):
    import subprocess
    import sys

    secret = "sk-test-0123456789abcdef"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--api-key", secret],
                            env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": secret})
    try:
        env_file = tmp_path / "e.env"
        env_file.write_text("OPENAI_API_KEY=another-secret-value\n")
        result = cli("doctor", "--json", "-v", "--only", "unread-env-config", "--pid", str(proc.pid),
                     "--env-file", str(env_file), cwd=tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert result.json()["hazards"][0]["status"] == "fail"
    blob = result.stdout + result.stderr + Path(ledger_path).read_bytes().decode("utf-8", "replace")
    assert secret not in blob and "another-secret-value" not in blob
    assert "OPENAI_API_KEY: declared <redacted>" in result.stdout


def test_a_password_in_a_host_url_is_not_printed(cli, ledger_path, tmp_path):
    # ssh:// destinations may carry user:password; the human report names the host, never the password
    host = "ssh://alice:hunter2-not-printed@127.0.0.1:1"
    for args in (("-v",), ("--json",)):
        result = cli("doctor", *args, "--only", "clock-skew", "--host", host, "--timeout", "2", cwd=tmp_path)
        assert result.returncode == 1, result.stderr  # the unreachable host is an error
        assert "hunter2-not-printed" not in result.stdout + result.stderr
        assert "127.0.0.1" in result.stdout
    assert b"hunter2-not-printed" not in Path(ledger_path).read_bytes()


def test_the_doctor_changes_nothing_it_inspects(cli, tmp_path):
    """A default run plus every path flag over a real repo and venv-like tree: nothing written there."""
    import os
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)

    def snapshot() -> dict[str, tuple[int, int, int]]:
        out = {}
        for root, _dirs, names in os.walk(tmp_path):
            for name in names:
                st = os.lstat(os.path.join(root, name))
                out[os.path.join(root, name)] = (st.st_mode, st.st_size, st.st_mtime_ns)
        return out

    # git status may refresh .git/index itself: ask it before taking the snapshot
    status_before = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                                   text=True).stdout
    before = snapshot()
    result = cli("doctor", "--json", "--repo", str(repo), "--path", str(repo), "--layer", "env", cwd=repo,
                 env={"EXECSYS_LEDGER": str(tmp_path.parent / f"{tmp_path.name}-ledger.sqlite3")})
    assert result.returncode in (0, 1), result.stderr
    after = snapshot()
    assert after == before
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                          text=True).stdout == status_before
