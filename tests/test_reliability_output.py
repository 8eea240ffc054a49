"""Output that cannot crash: a terminal that is not UTF-8, a full disk under stdout.

A stdout that cannot encode a character (``PYTHONIOENCODING=ascii``, latin-1, a
real C locale with UTF-8 mode off) gets ASCII look-alikes in human output and
``\\u`` escapes in JSON (still valid JSON, the same data); ENOSPC on stdout is one
line, exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENCODINGS = [
    {"PYTHONIOENCODING": "ascii"},
    {"PYTHONIOENCODING": "latin-1"},
    {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""},
]
HARNESS = ("import sys, json; json.load(sys.stdin); "
           "sys.stdout.buffer.write('caf\\u00e9 \\u2713 \\u65e5\\u672c \\U0001f600'.encode())")


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    full = dict(os.environ, COLUMNS="120", **env)
    full.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "execsys", *args], capture_output=True, env=full, cwd=cwd,
                          timeout=120)


@pytest.fixture
def workspace(tmp_path: Path, ledger_path: Path) -> Path:
    (tmp_path / "harness.py").write_text(HARNESS)
    (tmp_path / "cases.jsonl").write_text('{"id": "caf\\u00e9-1", "prompt": "\\u65e5\\u672c?"}\n'
                                          '{"id": "two", "prompt": "x"}\n')
    (tmp_path / "execsys.toml").write_text('[model]\nname = "caf\u00e9 \u2713 \u65e5\u672c"\n', encoding="utf-8")
    return tmp_path


COMMANDS = [
    ["doctor"], ["doctor", "-v"], ["doctor", "--json"], ["pin"], ["pin", "--json"], ["verify"], ["verify", "--json"],
    ["scope"], ["scope", "--json"], ["ledger", "list"], ["ledger", "list", "--json"], ["ledger", "export"],
    ["probe", "session", "--command", f"{sys.executable} harness.py", "--cases", "cases.jsonl"],
    ["probe", "session", "--command", f"{sys.executable} harness.py", "--cases", "cases.jsonl", "--json"],
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("encoding", ENCODINGS, ids=["ascii", "latin-1", "C-locale"])
def test_no_command_crashes_on_a_stdout_that_is_not_utf8(workspace: Path, encoding: dict[str, str]) -> None:
    for args in COMMANDS:
        result = _run(args, encoding, workspace)
        stderr = result.stderr.decode("ascii", "replace")
        assert result.returncode in (0, 1), (args, stderr)
        assert "Traceback" not in stderr and "UnicodeEncodeError" not in stderr, (args, stderr)
        if "--json" in args:
            data = json.loads(result.stdout.decode("ascii"))  # pure ASCII JSON, the rest as \u escapes
            if args[0] == "pin":
                assert data["components"]["model"]["declared"]["name"] == "caf\u00e9 \u2713 \u65e5\u672c"
            if args[0] == "probe":
                assert "caf\u00e9-1" in json.dumps(data, ensure_ascii=False)
        if encoding.get("PYTHONIOENCODING") == "ascii" or "LC_ALL" in encoding:
            result.stdout.decode("ascii")  # what the stream could not encode was replaced, not written raw


def test_human_output_falls_back_to_ascii_symbols(workspace: Path) -> None:
    result = _run(["doctor"], {"PYTHONIOENCODING": "ascii"}, workspace)
    assert result.returncode in (0, 1), result.stderr
    text = result.stdout.decode("ascii")
    assert "\\u2713" not in text and "\\u2717" not in text  # symbols become look-alikes, not escapes
    assert any(line.lstrip("[").startswith(("+", "!", "-", "x", "?")) for line in text.splitlines()), text


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [["digest", "cases.jsonl"], ["digest", "cases.jsonl", "--json"], ["doctor"],
                                  ["ledger", "export"], ["pin", "--json"]])
def test_a_full_disk_under_stdout_is_one_line_exit_2(workspace: Path, args: list[str]) -> None:
    _run(["doctor"], {}, workspace)  # a record for `ledger export` to write
    with open("/dev/full", "w") as full:
        env = dict(os.environ)
        proc = subprocess.run([sys.executable, "-m", "execsys", *args], stdout=full, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=workspace, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().endswith("no space left on device"), proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if "error" in line] == [proc.stderr.strip().splitlines()[-1]]
