"""`execsys pin` without an artifact (target: <= 0.5 s on a 2-core machine), beside `git status`
and `python -c pass` in the same run; and with a 1 GiB artifact beside `b3sum` of it, to show
that pinning with weights is dominated by hashing.

Run: python benchmarks/bench_pin.py [--runs 7] [--no-artifact-only]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _util import best_of, execsys_argv, need, row


def make_project(root: Path) -> Path:
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@b")
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    for i in range(50):
        (root / f"harness_{i}.py").write_text(f"print({i})\n" * 20)
    subprocess.run(["git", "add", "."], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", "harness"], cwd=root, check=True, env=env)
    (root / "execsys.toml").write_text('[model]\nname = "bench"\n[budget]\ntemperature = 0.0\nseed = 1\n'
                                       '[environment]\nvariables = { OMP_NUM_THREADS = "2" }\n')
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-artifact-only", action="store_true", help="skip the 1 GiB artifact part")
    args = parser.parse_args()
    need("git")
    with tempfile.TemporaryDirectory(prefix="execsys-bench-pin-") as tmp:
        project = make_project(Path(tmp) / "project")
        os.environ["EXECSYS_LEDGER"] = str(Path(tmp) / "ledger.sqlite3")
        pin = best_of(args.runs, [*execsys_argv(), "pin"], cwd=project)
        git = best_of(args.runs, ["git", "status", "--porcelain"], cwd=project)
        bare = best_of(args.runs, [sys.executable, "-c", "pass"])
        print(row("command", "median s", "min s", "vs python", "target"))
        print(row("execsys pin (no artifact)", f"{pin['median']:.3f}", f"{pin['min']:.3f}",
                  f"{pin['median'] / bare['median']:.1f}x", "<= 0.500 s"))
        print(row("git status (reference)", f"{git['median']:.3f}", f"{git['min']:.3f}",
                  f"{git['median'] / bare['median']:.1f}x", ""))
        print(row("python -c pass (reference)", f"{bare['median']:.3f}", f"{bare['min']:.3f}", "1.0x", ""))
        ok = pin["median"] <= 0.5
        print(f"{'PASS' if ok else 'MISS'}: execsys pin median {pin['median']:.3f} s")
        if not args.no_artifact_only:
            need("b3sum")
            weights = project / "weights.bin"
            with open(weights, "wb") as fh:
                block = os.urandom(1 << 20)
                for _ in range(1024):
                    fh.write(block)
            (project / "execsys.toml").write_text('[artifact]\npath = "weights.bin"\n')
            subprocess.run(["cat", str(weights)], stdout=subprocess.DEVNULL, check=True)  # into the page cache
            with_artifact = best_of(3, [*execsys_argv(), "pin"], cwd=project)
            b3 = best_of(3, ["b3sum", "--no-names", str(weights)])
            print(row("execsys pin (1 GiB artifact)", f"{with_artifact['median']:.3f}", f"{with_artifact['min']:.3f}"))
            print(row("b3sum of the artifact", f"{b3['median']:.3f}", f"{b3['min']:.3f}"))
            print(f"pin with artifact = b3sum time + {with_artifact['median'] - b3['median']:.3f} s")
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
