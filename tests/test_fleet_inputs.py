"""`execsys fleet` never hangs on a report path that is not a regular file (found by trying /dev/zero)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(120)
def test_special_files_among_the_reports_are_problems_not_hangs(tmp_path: Path, ledger_path: Path) -> None:
    fifo = tmp_path / "gpu-01.json"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "execsys", "fleet", "--json", "/dev/zero", str(fifo)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    import json

    report = json.loads(done.stdout)
    problems = json.dumps(report["problems"])
    assert "not a regular file" in problems and "FIFO" in problems and "character device" in problems
    assert report["hosts"] == 2
