"""Probes and plan runs under hostile inputs: bounded in time, refused before anything runs.

A ``command:`` extractor that never ends used to hold every output for 60 s whatever
``--timeout`` said (two passes of one case: two minutes); it now ends within the probe's
own ``--timeout``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("probe", ["session", "grader"])
def test_a_command_extractor_that_never_ends_honours_timeout(cli, tmp_path: Path, ledger_path: Path,
                                                            probe: str) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "c1", "prompt": "hi", "output": "x"}\n')
    if probe == "session":
        args = ["probe", "session", "--command", "echo 42", "--compare", "outcome"]
    else:
        (tmp_path / "execsys.toml").write_text('[grader]\ncommand = "echo correct"\n')
        args = ["probe", "grader", "--trust"]
    started = time.monotonic()
    result = cli(*args, "--cases", str(cases), "--extract", "command:sleep 1000", "--timeout", "1",
                 cwd=tmp_path, timeout=100)
    took = time.monotonic() - started
    assert took < 30, f"{took:.0f} s: the extractor waited past --timeout 1"
    assert result.returncode in (0, 1, 2) and "Traceback" not in result.stderr, result.stderr
    if probe == "grader":  # nothing graded: said in one line, as for any grader that gives no verdict
        assert result.returncode == 2 and "found no verdict" in result.stderr
