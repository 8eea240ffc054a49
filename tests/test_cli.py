"""Every bad input through the real CLI: one line on stderr naming the problem, exit 2, nothing half-written."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest

from execsys import __version__


def one_line_error(result, command: str) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"execsys {command}: error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


def test_version_and_help(cli) -> None:
    assert cli("--version").stdout.strip() == f"execsys {__version__}"
    top = cli("--help")
    assert top.returncode == 0 and "pin" in top.stdout and "exit codes" in top.stdout
    for command in ("init", "pin", "verify", "diff", "digest", "ledger", "doctor", "scope", "compare", "plan", "quant",
                    "ledger list", "ledger show", "ledger export", "plan new", "plan run", "plan check", "quant check"):
        helped = cli(*command.split(), "--help")
        assert helped.returncode == 0
        assert "example" in helped.stdout and f"execsys {command} " in helped.stdout, command


def test_piped_output_is_plain(cli, tmp_path: Path) -> None:
    result = cli("pin", cwd=tmp_path)
    assert result.returncode == 0
    assert "\x1b[" not in result.stdout and "identity " in result.stdout


def test_pin_says_unset_and_undeclared_in_words(cli, tmp_path: Path) -> None:
    """No declared shell, and (on hosts without /etc/default/locale) no system LANG: the environment
    row reads as words, not Python's None, and fits its line."""
    result = cli("pin", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("environment"))
    assert "None" not in row and row.rstrip().endswith("no shell declared"), row
    assert re.search(r"  locale \S+  tz \S+  ", row), row


def test_missing_artifact(cli, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "execsys.toml").write_text('[artifact]\npath = "weights/missing.gguf"\n')
    line = one_line_error(cli("pin", cwd=project), "pin")
    assert "weights/missing.gguf: no such file or directory" in line
    assert list(project.iterdir()) == [project / "execsys.toml"]  # no lock, no temp file left behind
    assert cli("ledger", "list", "--json").json() == []  # and nothing in the ledger


def test_malformed_toml(cli, tmp_path: Path) -> None:
    (tmp_path / "execsys.toml").write_text('[runtime]\nengine = "vllm\n')
    line = one_line_error(cli("pin", cwd=tmp_path), "pin")
    assert "execsys.toml: malformed TOML" in line
    assert not (tmp_path / "execsys.lock.json").exists()


def test_unknown_key_warns_with_its_line(cli, tmp_path: Path) -> None:
    (tmp_path / "execsys.toml").write_text('[budget]\ntemperature = 0.0\ntemprature = 0.7\n')
    result = cli("pin", cwd=tmp_path)
    assert result.returncode == 0
    assert "execsys.toml:3: unknown key 'budget.temprature' (ignored)" in result.stderr


def test_wrong_type_names_the_key(cli, tmp_path: Path) -> None:
    (tmp_path / "execsys.toml").write_text('[budget]\nseed = "seven"\n')
    line = one_line_error(cli("pin", cwd=tmp_path), "pin")
    assert "'budget.seed' must be an integer" in line and "execsys.toml:2" in line


def test_missing_config_flag(cli, tmp_path: Path) -> None:
    line = one_line_error(cli("pin", "--config", "nope.toml", cwd=tmp_path), "pin")
    assert "nope.toml: no such declaration" in line and "execsys init" in line


def test_unknown_lock_schema(cli, tmp_path: Path) -> None:
    assert cli("pin", cwd=tmp_path).returncode == 0
    lock = json.loads((tmp_path / "execsys.lock.json").read_text())
    lock["schema"] = "execsys.identity/9"
    (tmp_path / "future.lock.json").write_text(json.dumps(lock))
    line = one_line_error(cli("verify", "--lock", "future.lock.json", cwd=tmp_path), "verify")
    assert "identity schema 'execsys.identity/9' is not understood" in line
    line = one_line_error(cli("diff", "execsys.lock.json", "future.lock.json", cwd=tmp_path), "diff")
    assert "execsys.identity/9" in line


def test_edited_lock_is_refused(cli, tmp_path: Path) -> None:
    assert cli("pin", cwd=tmp_path).returncode == 0
    lock = json.loads((tmp_path / "execsys.lock.json").read_text())
    lock["components"]["budget"]["declared"]["temperature"] = 1.0
    (tmp_path / "execsys.lock.json").write_text(json.dumps(lock))
    line = one_line_error(cli("verify", cwd=tmp_path), "verify")
    assert "id does not match" in line


def test_missing_and_broken_locks(cli, tmp_path: Path) -> None:
    assert "no such lock file" in one_line_error(cli("verify", cwd=tmp_path), "verify")
    (tmp_path / "execsys.lock.json").write_text("{not json")
    assert "not valid JSON" in one_line_error(cli("verify", cwd=tmp_path), "verify")
    assert "neither a lock file nor an identity" in one_line_error(cli("diff", "zzz", "yyy", cwd=tmp_path), "diff")


def test_unreachable_endpoint_refused(cli, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the with-block ends: connection refused
    (tmp_path / "execsys.toml").write_text(f'[runtime]\nendpoint = "http://127.0.0.1:{port}/v1"\n')
    line = one_line_error(cli("pin", cwd=tmp_path), "pin")
    assert f"127.0.0.1:{port}" in line and "unreachable" in line
    assert not (tmp_path / "execsys.lock.json").exists()


def test_silent_endpoint_times_out(cli, tmp_path: Path) -> None:
    """A port that accepts connections and never answers (a wedged server) ends in the declared timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        (tmp_path / "execsys.toml").write_text(f'[runtime]\nendpoint = "http://127.0.0.1:{port}/v1"\nready_timeout = 1\n')
        started = time.monotonic()
        line = one_line_error(cli("pin", cwd=tmp_path), "pin")
        assert time.monotonic() - started < 30
        assert "no answer within 1s" in line
        assert not (tmp_path / "execsys.lock.json").exists()
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def test_unwritable_lock_destination(cli, tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where a directory should be")
    line = one_line_error(cli("pin", "--out", "blocker/execsys.lock.json", cwd=tmp_path), "pin")
    assert "cannot write the lock" in line


@pytest.mark.parametrize("args", [("digest",), ("diff", "only-one"), ("pin", "--no-such-flag"), (), ("nope",)])
def test_usage_errors(cli, args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    ("args", "command"),
    [(("pin", "--no-such-flag"), "pin"), (("plan", "check", "plan.json", "--bogus"), "plan check"),
     (("ledger", "list", "--bogus"), "ledger list")],
)
def test_unknown_flag_names_the_command(cli, args: tuple[str, ...], command: str) -> None:
    line = one_line_error(cli(*args), command)
    assert "unrecognized arguments" in line and f"execsys {command} --help" in line


@pytest.mark.parametrize(
    "args",
    [("plan", "new", "--arms", "A", "B", "--cases", "cases.jsonl", "--out", "plan.json"),
     ("ledger", "list", "--json"), ("quant", "check", "gguf", "--engine", "llamacpp", "--target", "sm_80")],
)
def test_common_options_after_an_action(cli, tmp_path: Path, ledger_path: Path, args: tuple[str, ...]) -> None:
    """`execsys plan new ... --ledger X` works like `execsys plan --ledger X new ...`: X is the ledger
    read and written, and the default ledger (EXECSYS_LEDGER here) is never touched."""
    from execsys.ledger import Ledger

    (tmp_path / "cases.jsonl").write_text('{"id": "c1", "prompt": "1+1?", "expected": "2"}\n')
    ledger = tmp_path / "other.sqlite3"
    with Ledger.open(ledger) as seeded:
        seeded_id = seeded.append("comparison", {"seeded": "in X, before the command"})
    result = cli(*args, "--ledger", str(ledger), "--debug", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with Ledger.open(ledger) as written:
        kinds = [r.kind for r in written.find()]
    if args[0] == "plan":
        plan = json.loads((tmp_path / "plan.json").read_text())
        with Ledger.open(ledger) as written:
            [stored] = written.find(kind="plan")
        assert kinds == ["comparison", "plan"] and stored.body["digest"] == plan["digest"]
    elif args[0] == "ledger":
        assert [r["id"] for r in result.json()] == [seeded_id]  # it listed X, not the default ledger
        assert kinds == ["comparison"]
    else:
        assert kinds == ["comparison"]  # quant check reads and writes no ledger
    assert not ledger_path.exists(), "the default ledger was written although --ledger named another"


@pytest.mark.parametrize(("args", "code"), [
    (("pin",), 0), (("doctor", "--only", "clock-skew", "--json"), 0), (("scope", "--audit", "--json"), 0),
    (("diff", "deadbeef", "cafe"), 2), (("compare", "a.json", "b.json"), 2),
    (("probe", "merge", "probe-1", "probe-2"), 2), (("plan", "check", "plan.json"), 2), (("explain", "a", "b"), 2),
], ids=["pin", "doctor", "scope", "diff", "compare", "probe-merge", "plan-check", "explain"])
def test_every_command_opens_the_ledger_its_flag_names(cli, tmp_path: Path, ledger_path: Path,
                                                       args: tuple[str, ...], code: int) -> None:
    """--ledger X reaches each operation through its options: X is the ledger opened (and written, where
    the command records), and the default ledger (EXECSYS_LEDGER here) is never created."""
    from execsys.ledger import Ledger

    named = tmp_path / "named.sqlite3"
    result = cli(*args, "--ledger", str(named), cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    assert named.exists(), "the ledger --ledger named was not opened"
    assert not ledger_path.exists(), "the default ledger was opened although --ledger named another"
    with Ledger.open(named) as written:
        kinds = [r.kind for r in written.find()]
    assert kinds == {"pin": ["identity"], "doctor": ["doctor"]}.get(args[0], [])


def test_the_ledger_flag_is_passed_along_not_written_into_the_environment(
        tmp_path: Path, ledger_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In one process (the TUI, a test, a script calling main twice) a --ledger must not outlive its command."""
    import os

    from execsys.cli import main
    from execsys.ledger import Ledger

    named = tmp_path / "named.sqlite3"
    with Ledger.open(named) as seeded:
        seeded_id = seeded.append("comparison", {"seeded": "in the named ledger"})
    assert main(["ledger", "list", "--json", "--ledger", str(named)]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [seeded_id]
    assert os.environ["EXECSYS_LEDGER"] == str(ledger_path)
    assert main(["ledger", "list", "--json"]) == 0  # the next command, unflagged, reads the default ledger
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize(
    ("args", "command"),
    [(("ledger", "list", "--limit", "-5"), "ledger list"),
     (("digest", "x", "--timeout", "-5"), "digest"),
     (("quant", "check", "fp8", "--target", "sm_80", "--timeout", "0"), "quant check"),
     (("plan", "run", "plan.json", "--arm", "A=http://127.0.0.1:9/v1", "--timeout", "nan"), "plan run")],
)
def test_negative_counts_and_timeouts_are_refused(cli, args: tuple[str, ...], command: str) -> None:
    line = one_line_error(cli(*args), command)
    assert "--limit" in line or "--timeout" in line


@pytest.mark.parametrize(
    ("args", "command", "needle"),
    [(("plan", "new", "--arms", "A", "B", "--cases", "cases.jsonl", "--out", "adir"), "plan", "cannot write the plan"),
     (("init", "--config", "adir"), "init", "is a directory"),
     (("pin", "--out", "adir"), "pin", "cannot write the lock")],
)
def test_a_directory_where_an_output_file_belongs(cli, tmp_path: Path, args, command: str, needle: str) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "cases.jsonl").write_text('{"id": "c1", "prompt": "1+1?", "expected": "2"}\n')
    line = one_line_error(cli(*args, cwd=tmp_path), command)
    assert needle in line
    assert list((tmp_path / "adir").iterdir()) == [] and not list(tmp_path.glob(".adir.*"))


@pytest.mark.parametrize("args", [("doctor", "-v", "--only", "clock-skew"), ("quant", "check", "fp8", "--target", "sm_90")])
def test_a_reader_that_stops_early_is_not_a_finding(ledger_path: Path, args: tuple[str, ...]) -> None:
    # `execsys doctor | head -1`: rich alone would exit 1, which a script reads as "hazard found"
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "execsys", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "EXECSYS_LEDGER": str(ledger_path)})
    proc.stdout.close()  # the reader is gone before the first line is written
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, stderr
    assert "Traceback" not in stderr and "error" not in stderr


@pytest.mark.parametrize(("args", "command"), [(("pin", "--config", ""), "pin"), (("verify", "--lock", ""), "verify"),
                                               (("doctor", "--config", ""), "doctor"),
                                               (("verify", "--config", ""), "verify")])
def test_an_empty_path_does_not_fall_back_to_the_default(cli, tmp_path: Path, args, command: str) -> None:
    # `--config "$CONFIG"` with CONFIG unset must not quietly use ./execsys.toml
    line = one_line_error(cli(*args, cwd=tmp_path), command)
    assert "path is empty" in line
    assert not (tmp_path / "execsys.lock.json").exists()


@pytest.mark.parametrize(("toml", "says"), [
    ('[artifact]\npath = "model\\u0000.bin"\n', "execsys.toml:2: 'artifact.path' contains a NUL character"),
    ('[runtime]\nendpoint = "http://[::1"\n', "execsys.toml:2: 'runtime.endpoint' is not a URL (Invalid IPv6 URL)"),
    ('[runtime]\nendpoint = "http://127.0.0.1:9/v\\u0000"\n', "'runtime.endpoint' contains a NUL character"),
    ('[runtime]\nendpoint = "http://127.0.0.1:port/v1"\n', "'runtime.endpoint' is not a URL"),
    ('[runtime]\nendpoint = "127.0.0.1:8000"\n', "'runtime.endpoint' must be an http:// or https:// URL with a host"),
    ('[grader.judge]\nendpoint = "ftp://judge/v1"\n', "'grader.judge.endpoint' must be an http:// or https:// URL"),
], ids=["nul-path", "open-ipv6", "nul-endpoint", "port-not-a-number", "no-scheme", "judge-ftp"])
def test_a_declared_value_no_system_can_use_is_refused_at_loading(cli, tmp_path: Path, toml: str, says: str) -> None:
    (tmp_path / "execsys.toml").write_text(toml)
    line = one_line_error(cli("pin", cwd=tmp_path), "pin")
    assert says in line
    assert not (tmp_path / "execsys.lock.json").exists()


def test_a_task_prolog_lock_path_that_cannot_be_exported_writes_nothing(cli, tmp_path: Path, ledger_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"w")
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model.bin"\n')
    lock = tmp_path / "x\ny.lock.json"
    line = one_line_error(cli("pin", "--task-prolog", "--lock", str(lock), cwd=tmp_path), "pin")
    assert line.startswith("execsys pin: error: --task-prolog: EXECSYS_LOCK: cannot export")
    assert not lock.exists() and not ledger_path.exists()
