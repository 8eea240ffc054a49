"""CPU time of one node check (`execsys doctor --node-check npd`, as a daemon runs it) against
`python3 -c pass` (target: <= 0.3 CPU-seconds: it runs every 30-60 s on every node).

CPU time is user + system of the process and every program it starts (wait4's rusage), so the
doctor's own probes (`python3 --version`, `git --version`, ...) count. The check runs the way
slurmd starts it: an empty environment (the default PATH is inspected) in an empty directory.

Run: python benchmarks/bench_node_check.py [--runs 15] [--execsys VENV/bin/execsys]

Measure the install users run (the README's venv): an interpreter whose site-packages carries many
``.pth`` files (a pyenv or conda base with editable installs) costs 3-4x more just to start; the
reference is then the same interpreter's ``-c pass``, from the execsys script's shebang.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _util import compiled_like_an_install, execsys_argv, row


def cpu_of(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[float, float, int]:
    """(CPU seconds incl. children, wall seconds, exit code) of one run."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=devnull, cwd=cwd, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - start, os.waitstatus_to_exitcode(status)


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--execsys", help="the execsys console script to time (default: beside this interpreter)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        if args.execsys:
            with open(args.execsys, "rb") as fh:
                interpreter = fh.readline().decode().removeprefix("#!").strip()
            check, bare = [args.execsys, "doctor", "--node-check", "npd"], [interpreter, "-c", "pass"]
        else:
            check, bare = [*execsys_argv(), "doctor", "--node-check", "npd"], [sys.executable, "-c", "pass"]
        cpu_of(check, cwd, {})  # warm the page cache
        ours, ref, walls = [], [], []
        for _ in range(args.runs):  # interleaved: both see the same load
            cpu, wall, code = cpu_of(check, cwd, {})
            if code not in (0, 1):
                raise SystemExit(f"the node check could not check (exit {code})")
            ours.append(cpu)
            walls.append(wall)
            ref.append(cpu_of(bare, cwd, {})[0])
    med, ref_med = statistics.median(ours), statistics.median(ref)
    print(row("command", "median CPU s", "max CPU s", "wall s", "ratio", "target"))
    print(row("doctor --node-check npd", f"{med:.3f}", f"{max(ours):.3f}", f"{statistics.median(walls):.3f}",
              f"{med / ref_med:.1f}x", "<= 0.300"))
    print(row("python3 -c pass (reference)", f"{ref_med:.3f}", f"{max(ref):.3f}", "", "1.0x", ""))
    ok = med <= 0.3
    print(f"{'PASS' if ok else 'MISS'}: node check median {med:.3f} CPU-s over {args.runs} runs")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
