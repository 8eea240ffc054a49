"""Probe scale: 10,000 and 50,000 cases against a fast fixture endpoint at concurrency 32.

Checks that no result is lost or duplicated (every case recorded once per pass in the ledger,
n equal to the number of cases, every case listed once in the printed record) and that memory
stays flat in n (RSS while sending and peak RSS, 10k vs 50k). The endpoint is the tests' flip
endpoint in its own process (stdlib HTTP server, loopback).

Peak RSS is the probe's own: a child's ``ru_maxrss`` starts at the peak of the process it was
forked from (Linux records the old image's high-water mark at exec), so the probe is started by a
small launcher process rather than by this one, and the printed record (tens of MB at 50k) is
checked in a throwaway subprocess, never parsed here.

Run: python benchmarks/bench_probe_scale.py [--sizes 10000 50000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import compiled_like_an_install, execsys_argv, row

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, timeout: float = 20) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/models", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"fixture endpoint {url} never answered")


# Starts the probe and reports its pid, then its exit code and peak RSS (see the docstring).
LAUNCH = r'''
import json, os, subprocess, sys
with open(sys.argv[1], "wb") as stdout:
    proc = subprocess.Popen(sys.argv[2:], stdout=stdout, stderr=subprocess.DEVNULL)
print(proc.pid, flush=True)
_pid, status, usage = os.wait4(proc.pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss}), flush=True)
'''

# Run in a subprocess of its own, so the big record never enters this process (see the docstring).
CHECK_RECORD = r'''
import json, sys
record = json.load(open(sys.argv[1]))
ids = [case["id"] for case in record["cases"]]
print(json.dumps({"n": record["n"], "m": record["m"], "run": record["run"], "cases": len(ids),
                  "distinct_cases": len(set(ids))}))
'''


def probe(n: int, url: str, work: Path, concurrency: int) -> dict:
    cases = work / f"cases-{n}.jsonl"
    with cases.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"c{i:06d}", "prompt": f"question {i}", "max_tokens": 8}) + "\n")
    ledger = work / f"ledger-{n}.sqlite3"
    out = work / f"record-{n}.json"
    env = dict(os.environ, EXECSYS_LEDGER=str(ledger))
    argv = [*execsys_argv(), "probe", "session", "--endpoint", url, "--cases", str(cases), "--json",
            "--concurrency", str(concurrency)]
    import threading

    import psutil

    sending_rss = [0]
    done = threading.Event()

    def sample(pid: int) -> None:
        """Peak RSS while requests are still going out (fewer than 2n case rows in the ledger)."""
        process = psutil.Process(pid)
        while not done.is_set():
            try:
                rss = process.memory_info().rss
                rows = 0
                if ledger.exists():
                    with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=1) as db:
                        rows = db.execute("SELECT COUNT(*) FROM records WHERE kind = 'probe-case'").fetchone()[0]
                if rows < 2 * n:
                    sending_rss[0] = max(sending_rss[0], rss)
            except (psutil.Error, sqlite3.Error):
                pass
            done.wait(0.5)

    start = time.perf_counter()
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCH, str(out), *argv], stdout=subprocess.PIPE, text=True,
                                env=env)
    assert launcher.stdout is not None
    sampler = threading.Thread(target=sample, args=(int(launcher.stdout.readline()),), daemon=True)
    sampler.start()
    report = json.loads(launcher.stdout.readline())
    launcher.wait()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if report["code"] not in (0, 1):
        raise SystemExit(f"probe of {n} cases failed ({report['code']})")
    record = json.loads(subprocess.run([sys.executable, "-c", CHECK_RECORD, str(out)], capture_output=True,
                                       text=True, check=True).stdout)
    with sqlite3.connect(ledger) as db:
        rows, keys = db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT key) FROM records WHERE kind = 'probe-case' AND parent = ?",
            (record["run"],),
        ).fetchone()
    return {"n": n, "wall": wall, "rss": report["maxrss_kib"] * 1024, "record": record, "rows": rows, "keys": keys,
            "sending_rss": sending_rss[0]}


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-probe-scale-"))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.fixtures.llama", "fake", str(port)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(url)
        results = [probe(n, url, work, args.concurrency) for n in args.sizes]
    finally:
        server.terminate()
        server.wait(timeout=10)
    widths = (10, 10, 10, 14, 12, 14, 12, 10)
    print(f"session probe, concurrency {args.concurrency}, 2 passes, fixture endpoint in its own process")
    print(row("cases", "wall s", "req/s", "RSS sending", "peak RSS", "ledger rows", "distinct", "lost/dup",
              widths=widths))
    ok = True
    for r in results:
        expected = 2 * r["n"]
        record = r["record"]
        bad = (record["n"] != r["n"] or record["m"] != r["n"] or record["cases"] != r["n"]
               or record["distinct_cases"] != r["n"] or r["rows"] != expected or r["keys"] != expected)
        ok = ok and not bad
        print(row(r["n"], f"{r['wall']:.1f}", f"{expected / r['wall']:.0f}", f"{r['sending_rss'] / 2**20:.0f} MiB",
                  f"{r['rss'] / 2**20:.0f} MiB",
                  r["rows"], r["keys"], "NONE" if not bad else "MISMATCH", widths=widths))
    if len(results) >= 2:
        small, large = results[0], results[-1]
        print(f"RSS while sending {large['n']} vs {small['n']} cases: {large['sending_rss'] / small['sending_rss']:.2f}x "
              f"(+{(large['sending_rss'] - small['sending_rss']) / 2**20:.0f} MiB)")
        print(f"peak RSS {large['n']} vs {small['n']} cases: {large['rss'] / small['rss']:.2f}x "
              f"(+{(large['rss'] - small['rss']) / 2**20:.0f} MiB for {large['n'] - small['n']} more cases; "
              f"n grew {large['n'] / small['n']:.0f}x)")
    print("no lost or duplicated results" if ok else "LOST OR DUPLICATED RESULTS")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
