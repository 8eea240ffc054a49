"""`execsys plan run` overhead beside a bare request loop, in the same run.

Two real llama.cpp servers on loopback (tiny generated models, different seeds) serve the two arms.
The reference is the least a user could write: a plain httpx loop sending the same completions in
the same registered order, nothing checked and nothing recorded. `execsys plan run` does the same
requests plus registration and digest checks, endpoint identity before and after, the executed log
and the ledger record. Both run as
processes, so interpreter start-up counts on both sides. Target: at most 1.5x the bare loop's wall time.

Run: python benchmarks/bench_plan_run.py [--cases 40] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _util import compiled_like_an_install, execsys_argv, row, run_measured  # noqa: E402

from tests.fixtures.llama import LlamaServer, make_tiny_gguf  # noqa: E402

BARE_LOOP = """
import json, sys, httpx
plan, cases, urls = json.load(open(sys.argv[1])), {}, json.loads(sys.argv[2])
for line in open(sys.argv[3]):
    row = json.loads(line)
    cases[row["id"]] = row
with httpx.Client(timeout=60) as client:
    for entry in plan["order"]:
        first = entry["first"]
        for arm in (first, "B" if first == "A" else "A"):
            case = cases[entry["case"]]
            body = {"model": "tiny", "prompt": case["prompt"], "max_tokens": case["max_tokens"],
                    "temperature": 0, "stream": False}
            client.post(urls[arm] + "/completions", json=body).raise_for_status()
"""


def bare_loop(root: Path, urls: dict[str, str]) -> float:
    """The reference, as its own process (interpreter start-up and httpx import included, like ours)."""
    argv = [sys.executable, "-c", BARE_LOOP, str(root / "plan.json"), json.dumps(urls), str(root / "cases.jsonl")]
    return run_measured(argv, cwd=root)[0]


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "EXECSYS_LEDGER": str(root / "ledger.sqlite3")}
        servers = [LlamaServer(make_tiny_gguf(root / f"s{seed}.gguf", seed=seed)).start() for seed in (1, 2)]
        try:
            urls = {"A": servers[0].base_url, "B": servers[1].base_url}
            rows = [{"id": f"c{i}", "prompt": f"Item {i} says", "max_tokens": 16, "expected": "x"}
                    for i in range(args.cases)]
            (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            run_measured([*execsys_argv(), "plan", "new", "--arms", "A", "B", "--cases", "cases.jsonl",
                          "--seed", "1", "--out", "plan.json"], cwd=root, env=env)
            bare_loop(root, urls)  # warm both servers
            bare, ours = [], []
            for _ in range(args.runs):
                bare.append(bare_loop(root, urls))
                ours.append(run_measured([*execsys_argv(), "plan", "run", "plan.json", "--arm", f"A={urls['A']}",
                                          "--arm", f"B={urls['B']}", "--json"], cwd=root, env=env)[0])
        finally:
            for server in servers:
                server.stop()
    b, o = statistics.median(bare), statistics.median(ours)
    print(row("", "median s", "min s", "requests", widths=(34, 12, 12, 12)))
    print(row("bare httpx loop (reference)", f"{b:.3f}", f"{min(bare):.3f}", 2 * args.cases, widths=(34, 12, 12, 12)))
    print(row("execsys plan run", f"{o:.3f}", f"{min(ours):.3f}", 2 * args.cases, widths=(34, 12, 12, 12)))
    ratio = o / b
    print(f"ratio execsys/bare: {ratio:.2f}x (target <= 1.5x) -> {'ok' if ratio <= 1.5 else 'MISSED'}")
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
