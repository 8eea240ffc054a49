"""`execsys fleet` over 10,000 host reports (target: <= 2 s) against the floor of reading them:
a bare Python loop that opens and json-parses the same 10,000 files, in the same run.

The reports are execsys_facts results as `ansible ... --tree DIR` writes them (about 2 KiB each):
ten runtime outliers, four integrity defects, twenty failing hazards. Also prints the peak RSS
for 10,000 reports with and without 4 KiB of extra evidence each (flat: the engine keeps no report).

Run: python benchmarks/bench_fleet.py [--hosts 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from _util import compiled_like_an_install, execsys_argv, row

COMPONENTS = ("model", "artifact", "runtime", "hardware", "harness", "context_policy", "retrieval", "tools",
              "workflow", "budget", "grader", "environment")
HAZARDS = ("binary-aliasing", "interop-mangling", "stub-executables", "unread-env-config", "baked-paths",
           "package-prefixes", "lost-mode-bits", "port-collisions", "clock-skew")


def facts(i: int, padding: str) -> dict:
    version = "0.11.1" if i % 1000 == 7 else "0.11.0"
    digests = {n: f"sha256:{n}" for n in COMPONENTS}
    digests["runtime"] = f"sha256:runtime-{version}"
    hazards = dict.fromkeys(HAZARDS, "ok")
    if i % 500 == 3:
        hazards["clock-skew"] = "fail"
    return {"ansible_facts": {"execsys": {
        "doctor": {"verdict": "clean", "hazards": hazards, "evidence": padding},
        "identity": {"id": f"node-{i}", "components": digests, "labels": {"runtime": f"vllm {version}"}},
        "artifact": {"path": "/srv/m", "blake3": "b" * 64 if i % 2500 == 11 else "a" * 64}}}, "changed": False}


FLOOR = "import json, os, sys\nfor e in os.scandir(sys.argv[1]):\n    json.loads(open(e.path, 'rb').read())\n"


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        small.mkdir()
        large.mkdir()
        for i in range(args.hosts):
            (small / f"gpu-{i:05d}").write_text(json.dumps(facts(i, "")))
            (large / f"gpu-{i:05d}").write_text(json.dumps(facts(i, "x" * 4096)))
        prom = Path(tmp) / "execsys.prom"
        fleet = [*execsys_argv(), "fleet", "--from-ansible", str(small), "--prom", str(prom)]
        fleet_json = [*execsys_argv(), "fleet", "--from-ansible", str(small), "--json"]
        floor = [sys.executable, "-c", FLOOR, str(small)]

        results: dict[str, list[tuple[float, int, float]]] = {"fleet": [], "json": [], "floor": []}
        for _ in range(args.runs):  # interleaved under the same load
            for name, argv in (("fleet", fleet), ("json", fleet_json), ("floor", floor)):
                results[name].append(_run(argv))
        large_run = _run([*execsys_argv(), "fleet", "--from-ansible", str(large)])
    wall = {k: statistics.median(r[0] for r in v) for k, v in results.items()}
    cpu = {k: statistics.median(r[2] for r in v) for k, v in results.items()}
    rss = {k: max(r[1] for r in v) for k, v in results.items()}
    print(row("command", "median s", "CPU s", "peak RSS", "ratio", "target"))
    print(row(f"fleet, {args.hosts} reports, --prom", f"{wall['fleet']:.2f}", f"{cpu['fleet']:.2f}",
              f"{rss['fleet'] / 2**20:.0f} MiB", f"{wall['fleet'] / wall['floor']:.2f}x", "<= 2 s"))
    print(row("fleet --json", f"{wall['json']:.2f}", f"{cpu['json']:.2f}", f"{rss['json'] / 2**20:.0f} MiB",
              f"{wall['json'] / wall['floor']:.2f}x", ""))
    print(row("json.loads of each (floor)", f"{wall['floor']:.2f}", f"{cpu['floor']:.2f}",
              f"{rss['floor'] / 2**20:.0f} MiB", "1.00x", ""))
    print(row("fleet, reports +4 KiB each", f"{large_run[0]:.2f}", f"{large_run[2]:.2f}",
              f"{large_run[1] / 2**20:.0f} MiB", f"{large_run[1] / rss['fleet']:.2f}x mem", "flat"))
    ok = wall["fleet"] <= 2.0
    print(f"{'PASS' if ok else 'MISS'}: execsys fleet over {args.hosts} reports, median {wall['fleet']:.2f} s "
          f"({cpu['fleet']:.2f} CPU-s)")
    return 0 if ok else 1


def _run(argv: list[str]) -> tuple[float, int, float]:
    """(wall, peak RSS, CPU) of one run; exit 1 (the fleet disagrees) is the expected answer here."""
    import os
    import subprocess
    import time

    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=subprocess.PIPE)
        _pid, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(argv[:4])} ... failed ({code})")
    return time.perf_counter() - start, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    raise SystemExit(main())
