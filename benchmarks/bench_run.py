"""`execsys run` beside the bare harness, in the same run: the wrapper's own cost and the watch loop's CPU.

Three measurements, each side by side with its reference:

1. `execsys run --watch 0 -- true` vs `true`, with a declaration naming a real llama.cpp server (tiny
   generated model) and a lock already pinned, so every run gates (doctor), verifies the identity
   before and after, and records; the artifact is the tiny model (hashing excluded from the target
   by its size). Target: wrapper cost (run minus bare) <= 1.5 s.
2. `execsys run --watch 1 -- sleep S` vs `--watch 0 -- sleep S`: the extra CPU seconds of execsys's
   own process (rusage, harness excluded: `sleep` uses none) divided by S. Target <= 1% of wall time
   at the default --watch 30; measured at 1 s (30x the rate) and also scaled to 30 s.
3. A short real lm-eval run (the harness venv from scripts/harness-env.sh, local-completions
   against the same server, 6 documents) bare vs under `execsys run --watch 30`.

Run: python benchmarks/bench_run.py [--runs 5] [--sleep 10] [--no-lm-eval]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _util import compiled_like_an_install, execsys_argv, run_measured  # noqa: E402

from tests.fixtures.harness import write_project  # noqa: E402
from tests.fixtures.llama import LlamaServer, make_tiny_gguf  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def cpu_of(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s of that process and the children it waited for) for one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=10.0)
    parser.add_argument("--no-lm-eval", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        root = Path(tmp)
        model = make_tiny_gguf(root / "tiny.gguf")
        server = LlamaServer(model).start()
        try:
            venv = Path("/nonexistent")
            if not args.no_lm_eval:
                built = subprocess.run(["bash", str(REPO / "scripts" / "harness-env.sh")], capture_output=True,
                                       text=True, check=True)
                venv = Path(built.stdout.strip().splitlines()[-1])
            project = write_project(root / "project", server, venv, model)
            env = dict(os.environ, **project.env(EXECSYS_LEDGER=str(root / "ledger.sqlite3")))
            execsys = execsys_argv()
            run_measured([*execsys, "pin"], cwd=project.root, env=env)

            bare = [run_measured(["true"], cwd=project.root, env=env)[0] for _ in range(args.runs)]
            wrapped = [run_measured([*execsys, "run", "--watch", "0", "--", "true"], cwd=project.root, env=env)[0]
                       for _ in range(args.runs)]
            cost = statistics.median(wrapped) - statistics.median(bare)
            # the same checks run by hand, in the same run: what the wrapper saves an operator from typing
            doctor = [run_measured([*execsys, "doctor", "--json"], cwd=project.root, env=env)[0]
                      for _ in range(args.runs)]
            verify = [run_measured([*execsys, "verify", "--json"], cwd=project.root, env=env)[0]
                      for _ in range(args.runs)]
            by_hand = statistics.median(doctor) + 2 * statistics.median(verify)
            cpu = [cpu_of([*execsys, "run", "--watch", "0", "--", "true"], project.root, env)[1]
                   for _ in range(args.runs)]
            print(f"run -- true: execsys run {statistics.median(wrapped):.3f} s median (CPU "
                  f"{statistics.median(cpu):.3f} s), bare true {statistics.median(bare):.4f} s; wrapper cost "
                  f"{cost:.3f} s (target <= 1.5 s: {'met' if cost <= 1.5 else 'NOT met'}); by hand, same run: "
                  f"doctor {statistics.median(doctor):.3f} s + 2 x verify {statistics.median(verify):.3f} s = "
                  f"{by_hand:.3f} s, so run = {statistics.median(wrapped) / by_hand:.2f}x the checks by hand; "
                  f"load average {os.getloadavg()[0]:.1f}")

            off_wall, off_cpu = cpu_of([*execsys, "run", "--watch", "0", "--", "sleep", str(args.sleep)],
                                       project.root, env)
            on_wall, on_cpu = cpu_of([*execsys, "run", "--watch", "1", "--", "sleep", str(args.sleep)],
                                     project.root, env)
            extra = max(0.0, on_cpu - off_cpu)
            at_1s = extra / args.sleep
            at_30s = at_1s / 30
            print(f"watch loop: {extra:.3f} CPU s over {args.sleep:g} s at --watch 1 ({at_1s:.2%} of wall time; "
                  f"{at_30s:.3%} at the default --watch 30; target <= 1%: {'met' if at_30s <= 0.01 else 'NOT met'}); "
                  f"walls {off_wall:.2f} s / {on_wall:.2f} s")

            if not args.no_lm_eval:
                argv = project.lm_eval_argv("bench-bare")
                bare_s = run_measured(argv, cwd=project.root, env=env)[0]
                run_s, out = run_measured([*execsys, "run", "--json", "--", *project.lm_eval_argv("bench-run")],
                                          cwd=project.root, env=env)
                verdict = json.loads(out)["verdict"]
                print(f"lm-eval, 6 documents: bare {bare_s:.2f} s, under execsys run {run_s:.2f} s "
                      f"({run_s / bare_s:.2f}x, +{run_s - bare_s:.2f} s; verdict {verdict})")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
