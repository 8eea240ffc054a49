"""The suite tests the code of the checkout it lives in.

An editable install of another worktree (or a stale ``pip install .``) makes every test here pass or
fail on someone else's code while looking green; the package must be imported from this tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import execsys.doctor
import execsys.probes
import execsys.tui

import execsys

REPO = Path(__file__).resolve().parents[1]


def test_execsys_is_imported_from_this_checkout() -> None:
    for package, folder in ((execsys, "execsys"), (execsys.doctor, "doctor"), (execsys.probes, "probes"),
                            (execsys.tui, "tui")):
        where = Path(package.__file__ or "").resolve()
        assert where == REPO / folder / "__init__.py", f"{package.__name__} comes from {where}, not {REPO}"


def test_the_cli_subprocess_runs_this_checkout_too(tmp_path: Path) -> None:
    # the CLI tests start `python -m execsys` from other directories: it must resolve to this tree as well
    done = subprocess.run([sys.executable, "-c", "import execsys, execsys.doctor; "
                           "print(execsys.__file__); print(execsys.doctor.__file__)"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True)
    assert [Path(line).resolve() for line in done.stdout.split()] == [REPO / "execsys" / "__init__.py",
                                                                      REPO / "doctor" / "__init__.py"]


def test_ci_refuses_a_base_interpreter_that_holds_the_suite_s_dependencies(tmp_path: Path) -> None:
    """.ci/run's first step: the test venv's python (which can import textual, llama_cpp, execsys...) stands in
    for a polluted base interpreter and is named in one line; a bare venv, as a new machine's python3, passes."""
    import os

    check = REPO / "scripts" / "check-base-python.sh"
    polluted = subprocess.run(["bash", str(check)], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHON=sys.executable))
    assert polluted.returncode == 1
    line, = polluted.stderr.splitlines()
    assert line.startswith(f"the base interpreter {sys.executable} can import execsys ")
    assert " textual " in line and " llama_cpp " in line and line.endswith("so the suite is tested as on a new machine")
    assert "pytest " not in line.replace("pytest_timeout", "").replace("pytest_textual_snapshot", "")

    bare = tmp_path / "bare"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    clean = subprocess.run(["bash", str(check)], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PYTHON=str(bare / "bin" / "python")))
    assert (clean.returncode, clean.stderr) == (0, "")
    assert "check-base-python.sh" in (REPO / ".ci" / "run").read_text().split("scripts/test.sh")[0]
