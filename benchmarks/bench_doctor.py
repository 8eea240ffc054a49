"""Benchmark: ``execsys doctor`` (defaults) vs ``python -m torch.utils.collect_env``, side by side.

Both are environment reports a user runs before trusting a box; both run here as
subprocesses, alternately, N times each, and the medians are compared. Target: the
doctor's median <= 1 s on a 2-core machine and >= 3x faster than collect_env.

    python benchmarks/bench_doctor.py [-n 7] [--torch-python PATH]

torch is large and only needed here: install it where you like (``pip install
torch==2.13.0``, or into a separate venv and pass its python with --torch-python /
$EXECSYS_BENCH_TORCH_PYTHON). Without torch the doctor figures are printed alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _util import compiled_like_an_install


def _time(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd, timeout=300)
    return time.perf_counter() - start, proc.returncode


def _has_torch(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True, timeout=120)
    return probe.returncode == 0


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=7, help="runs of each (default 7)")
    parser.add_argument("--torch-python", default=os.environ.get("EXECSYS_BENCH_TORCH_PYTHON"),
                        help="interpreter with torch installed (default: this one)")
    args = parser.parse_args()
    torch_python = args.torch_python or sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as tmp:
        env = dict(os.environ, EXECSYS_LEDGER=os.path.join(tmp, "ledger.sqlite3"))
        doctor = [sys.executable, "-m", "execsys", "doctor", "--json"]
        collect = [torch_python, "-m", "torch.utils.collect_env"]
        with_torch = _has_torch(torch_python)
        if not with_torch:
            print(f"torch not importable by {torch_python}: printing the doctor alone", file=sys.stderr)
        # one warm-up each so both read from the page cache
        _time(doctor, env, os.getcwd())
        if with_torch:
            _time(collect, env, os.getcwd())
        doctor_times: list[float] = []
        collect_times: list[float] = []
        codes = set()
        for _ in range(args.n):
            elapsed, code = _time(doctor, env, os.getcwd())
            doctor_times.append(elapsed)
            codes.add(code)
            if with_torch:
                collect_times.append(_time(collect, env, os.getcwd())[0])
        # In-process: what the TUI pays (no interpreter start-up, no CLI import).
        sys.path.insert(0, os.getcwd())
        from execsys.doctor.runner import DoctorOptions, run_doctor

        inproc: list[float] = []
        for _ in range(args.n):
            start = time.perf_counter()
            run_doctor(DoctorOptions())
            inproc.append(time.perf_counter() - start)
    d_med = statistics.median(doctor_times)
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, n={args.n}")
    print(f"{'tool':44} {'median s':>9} {'min s':>7} {'max s':>7}")
    print(f"{'execsys doctor --json (CLI, subprocess)':44} {d_med:9.3f} {min(doctor_times):7.3f} {max(doctor_times):7.3f}"
          f"   exit codes {sorted(codes)}")
    print(f"{'run_doctor(DoctorOptions()) (in-process)':44} {statistics.median(inproc):9.3f} {min(inproc):7.3f} "
          f"{max(inproc):7.3f}")
    if with_torch:
        c_med = statistics.median(collect_times)
        print(f"{'python -m torch.utils.collect_env':44} {c_med:9.3f} {min(collect_times):7.3f} "
              f"{max(collect_times):7.3f}")
        ratio = c_med / d_med
        print(f"ratio collect_env / doctor (medians): {ratio:.2f}x  (target >= 3x; doctor median target <= 1 s: "
              f"{'met' if d_med <= 1.0 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
