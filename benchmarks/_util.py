"""Shared helpers for the benchmark scripts: run a command, time it, read its peak memory."""

from __future__ import annotations

import compileall
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def compiled_like_an_install() -> None:
    """Time execsys as a user's install runs it: with its bytecode compiled.

    pip compiles every module when it installs, so a user's ``execsys`` never compiles its own
    source. A checkout installed editable and run with ``PYTHONDONTWRITEBYTECODE=1`` (set on these
    machines) compiles all of it from source at every start -- 0.1-0.2 CPU-s a command here,
    charged to execsys and to no reference tool (whose packages pip compiled). So the benchmarks
    compile the checkout's packages once and let the commands they start use that bytecode."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for package in ("execsys", "doctor", "probes", "tui"):
        compileall.compile_dir(REPO / package, quiet=1)


def execsys_argv() -> list[str]:
    """The installed console script next to this interpreter (not a pyenv shim), else python -m execsys."""
    script = Path(sys.executable).parent / "execsys"
    return [str(script)] if script.exists() else [sys.executable, "-m", "execsys"]


def run_measured(argv: list[str], cwd: str | os.PathLike | None = None,
                 env: dict | None = None) -> tuple[float, bytes]:
    """(wall seconds, stdout) of one run; fails loudly on a non-zero exit."""
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, cwd=cwd, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-500:]}")
    return elapsed, proc.stdout


def run_peak_rss(argv: list[str], cwd: str | os.PathLike | None = None, *, with_cpu: bool = False):
    """(wall seconds, peak RSS bytes[, CPU seconds]) of one run, from wait4's rusage for exactly that child."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=subprocess.PIPE, cwd=cwd)
        _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({os.waitstatus_to_exitcode(status)})")
    rss = usage.ru_maxrss * 1024  # Linux reports KiB
    if with_cpu:
        return elapsed, rss, usage.ru_utime + usage.ru_stime
    return elapsed, rss


def best_of(n: int, argv: list[str], cwd: str | os.PathLike | None = None, warmup: int = 1) -> dict:
    for _ in range(warmup):
        run_measured(argv, cwd=cwd)
    times = [run_measured(argv, cwd=cwd)[0] for _ in range(n)]
    return {"min": min(times), "median": statistics.median(times), "runs": n}


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise SystemExit(f"benchmark needs {tool} on PATH")
    return path


def row(*cells: object, widths: tuple[int, ...] = (30, 12, 12, 12, 12, 10)) -> str:
    return "".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False))
