"""`execsys --version` start-up time against a bare `python -c pass` (target: <= 0.15 s).

Run: python benchmarks/bench_version.py [--runs 20]
"""

from __future__ import annotations

import argparse
import sys

from _util import best_of, compiled_like_an_install, execsys_argv, row


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    ours = best_of(args.runs, [*execsys_argv(), "--version"])
    bare = best_of(args.runs, [sys.executable, "-c", "pass"])
    print(row("command", "median s", "min s", "ratio", "target"))
    print(row("execsys --version", f"{ours['median']:.3f}", f"{ours['min']:.3f}",
              f"{ours['median'] / bare['median']:.2f}x", "<= 0.150 s"))
    print(row("python -c pass (reference)", f"{bare['median']:.3f}", f"{bare['min']:.3f}", "1.00x", ""))
    ok = ours["median"] <= 0.15
    print(f"{'PASS' if ok else 'MISS'}: execsys --version median {ours['median']:.3f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
