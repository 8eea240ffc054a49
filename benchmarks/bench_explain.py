"""`execsys explain A B` against a reference measured in the same run (issue 32's performance bounds).

(a) Without --rerun: two lm-eval results (results_*.json and samples_*.jsonl, the shape of the
    suite's real lm-eval run, tests/data/grader) of 1,000 and of 10,000 samples each. The reference
    is the least any explanation must do: a fresh Python process that loads both results files and
    both samples files with ``json``. Both are processes (interpreter start-up counts on both
    sides); wall time and peak RSS of each, best of --runs; memory is flat when 10x the samples
    costs explain little more than it costs the reference. The issue's bound: <= 2 s at 10,000.
(b) With --rerun: a paired run of two real llama.cpp servers (two tiny generated models) whose
    arms flip on most cases; ``explain --rerun A=URL --rerun B=URL`` sends the flips and a sample
    of the agreeing cases to both again in one AB/BA window. The reference is a bare httpx loop
    sending the same cases to the same servers in the same registered AB/BA order (read back from
    the plan the re-run registered), nothing checked, nothing recorded. Runs alternate; the best
    of --runs and the paired ratios are printed. Target: <= 1.1x the bare requests.

Timing lives here, never in the tests (a loaded machine makes a timed assertion flaky).

The re-run's cost over the requests is mostly fixed (interpreter and imports, the plan's registration,
each arm's system observed before and after the window, the executed log, the ledger), so its ratio
falls as the requests take longer: the tiny model answers in tens of milliseconds, a real one in
seconds. Both the ratio and the fixed cost in seconds are printed.

Run: python benchmarks/bench_explain.py [--runs 3] [--rerun-cases 60] [--sample 20] [--max-tokens 32]
     [--skip-rerun | --skip-plain]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _util import compiled_like_an_install, execsys_argv, row  # noqa: E402

# the bare requests in a plan's registered AB/BA order, as the plan-run benchmark sends them
from bench_plan_run import BARE_LOOP  # noqa: E402

LOAD_BOTH = r'''
import json, sys
for results in sys.argv[1:]:
    json.load(open(results))
    samples = next(p for p in __import__("pathlib").Path(results).parent.glob("samples_*.jsonl"))
    with open(samples) as handle:
        rows = [json.loads(line) for line in handle]
'''




CPU: dict[int, float] = {}  # pid -> user+sys seconds of that child, from the same wait4


def measured(argv: list[str], env: dict[str, str] | None = None, codes: tuple[int, ...] = (0,),
             timeout: float = 1800) -> tuple[float, int, bytes]:
    """(wall seconds, peak RSS bytes, stdout) of one child process, from wait4's rusage for that child;
    its CPU seconds go to ``CPU`` under its pid (``last_cpu()``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"{argv[:4]} ran past {timeout:.0f} s")
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
        CPU.clear()
        CPU[proc.pid] = usage.ru_utime + usage.ru_stime
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode not in codes:
            raise SystemExit(f"{' '.join(argv[:6])} failed ({proc.returncode}): {err.read().decode(errors='replace')[-800:]}")
        return elapsed, usage.ru_maxrss * 1024, out.read()


# ------------------------------------------------------------------ (a) two lm-eval results, no --rerun
def last_cpu() -> float:
    """The CPU seconds (user+sys) of the child ``measured`` ran last."""
    return next(iter(CPU.values()))


def lm_eval_pair(where: Path, samples: int, seed: int = 7) -> tuple[Path, Path, int]:
    """Two lm-eval outputs of ``samples`` samples each (B flips 2% of A's outcomes); the flips expected."""
    from tests.fixtures.compare_records import lm_eval_output

    rng = random.Random(seed)
    first = lm_eval_output(where / "shape")
    line = json.loads(next(iter(first.parent.glob("samples_*.jsonl"))).read_text().splitlines()[0])
    right_a = [rng.random() < 0.7 for _ in range(samples)]
    right_b = [r if rng.random() < 0.98 else not r for r in right_a]

    def text(rights: list[bool]) -> str:
        return "".join(json.dumps({**line, "doc_id": i, "exact_match": float(r)}) + "\n" for i, r in enumerate(rights))

    a = lm_eval_output(where / f"a{samples}", samples=text(right_a))
    b = lm_eval_output(where / f"b{samples}", samples=text(right_b))
    return a, b, sum(x != y for x, y in zip(right_a, right_b, strict=True))


def bench_without_rerun(work: Path, runs: int) -> dict[int, dict[str, float]]:
    env = dict(os.environ, EXECSYS_LEDGER=str(work / "ledger-a.sqlite3"))
    figures: dict[int, dict[str, float]] = {}
    for samples in (1_000, 10_000):
        a, b, flips = lm_eval_pair(work, samples)
        ours = [measured([*execsys_argv(), "explain", str(a), str(b), "--json"], env, codes=(0, 1))
                for _ in range(runs)]
        report = json.loads(ours[0][2])
        assert report["flips"]["n"] == samples and report["flips"]["flips"] == flips, report["flips"]
        reference = [measured([sys.executable, "-c", LOAD_BOTH, str(a), str(b)]) for _ in range(runs)]
        figures[samples] = {"explain_s": min(t for t, _, _ in ours), "explain_rss": min(r for _, r, _ in ours),
                            "json_s": min(t for t, _, _ in reference), "json_rss": min(r for _, r, _ in reference)}
    widths = (34, 12, 12, 14, 14)
    print("(a) explain of two lm-eval results, without --rerun; best of", runs)
    print(row("", "wall s", "x json", "peak RSS MiB", "x json", widths=widths))
    for samples, f in figures.items():
        print(row(f"json.load both ({samples:,} samples)", f"{f['json_s']:.3f}", "1.00",
                  f"{f['json_rss'] / 2**20:.1f}", "1.00", widths=widths))
        print(row(f"execsys explain ({samples:,} samples)", f"{f['explain_s']:.3f}",
                  f"{f['explain_s'] / f['json_s']:.2f}", f"{f['explain_rss'] / 2**20:.1f}",
                  f"{f['explain_rss'] / f['json_rss']:.2f}", widths=widths))
    small, big = figures[1_000], figures[10_000]
    print(f"10,000 samples: {big['explain_s']:.2f} s (issue's bound <= 2 s): "
          f"{'met' if big['explain_s'] <= 2.0 else 'NOT met'}")
    print(f"memory 1,000 -> 10,000 samples: explain {small['explain_rss'] / 2**20:.1f} -> "
          f"{big['explain_rss'] / 2**20:.1f} MiB (x{big['explain_rss'] / small['explain_rss']:.2f}), "
          f"json reference {small['json_rss'] / 2**20:.1f} -> {big['json_rss'] / 2**20:.1f} MiB "
          f"(x{big['json_rss'] / small['json_rss']:.2f})")
    return figures


# ------------------------------------------------------------------ (b) --rerun against bare requests
def bench_rerun(work: Path, runs: int, cases: int, max_tokens: int, sample: int) -> float:
    from execsys.probes.cases import load_cases
    from execsys.probes.client import EndpointClient

    from execsys.ledger import Ledger
    from tests.fixtures.llama import make_tiny_gguf, start_llama_server

    env = dict(os.environ, EXECSYS_LEDGER=str(work / "ledger-b.sqlite3"))
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"c{i:03d}", "prompt": f"Item {i} says", "max_tokens": max_tokens})
                               + "\n" for i in range(cases)))
    with start_llama_server(make_tiny_gguf(work / "a.gguf", seed=0)) as first, \
            start_llama_server(make_tiny_gguf(work / "b.gguf", seed=1)) as second:
        urls = {"A": first.base_url, "B": second.base_url}
        texts = []
        for server in (first, second):
            with EndpointClient(server.base_url, timeout=120) as client:
                model = client.resolve_model(None)
                texts.append({c.id: (client.complete(c, {"temperature": 0, "model": model}).text or "").strip()
                              for c in load_cases(prompts)})
        # the expected answer: A's on a third of the cases, B's on another third (the arms flip there), one
        # neither gives on the last third (both wrong: the agreeing cases --rerun samples from)
        cases_path = work / "cases.jsonl"
        cases_path.write_text("".join(json.dumps({"id": f"c{i:03d}", "prompt": f"Item {i} says", "max_tokens": max_tokens,
                                                  "expected": texts[i % 3][f"c{i:03d}"] if i % 3 < 2 else "(none)"})
                                      + "\n" for i in range(cases)))
        measured([*execsys_argv(), "plan", "new", "--arms", "A", "B", "--cases", str(cases_path), "--out",
                  str(work / "plan.json")], env)
        _, _, out = measured([*execsys_argv(), "plan", "run", str(work / "plan.json"), "--arm", f"A={urls['A']}",
                              "--arm", f"B={urls['B']}", "--json"], env, codes=(0, 1))
        record = json.loads(out)["record"]
        explain = [*execsys_argv(), "explain", f"{record}:A", f"{record}:B", "--rerun", f"A={urls['A']}",
                   "--rerun", f"B={urls['B']}", "--sample", str(sample), "--json"]
        _, _, out = measured(explain, env, codes=(0, 1))  # warms both servers; its plan is the bare loop's
        rerun = json.loads(out)["rerun"]
        with Ledger.open(work / "ledger-b.sqlite3") as ledger:
            plan = ledger.get(str(ledger.get(rerun["record"]).parent)).body
        (work / "rerun-plan.json").write_text(json.dumps(plan))
        bare = [sys.executable, "-c", BARE_LOOP, str(work / "rerun-plan.json"), json.dumps(urls), rerun["cases"]]
        sent = 2 * len(plan["order"])
        bare_times, ours, bare_cpu, our_cpu = [], [], [], []
        for _ in range(runs):
            bare_times.append(measured(bare)[0])
            bare_cpu.append(last_cpu())
            elapsed, _, out = measured(explain, env, codes=(0, 1))
            our_cpu.append(last_cpu())
            again = json.loads(out)["rerun"]
            assert (again["flipped"], again["agreeing"]) == (rerun["flipped"], rerun["agreeing"]), again
            ours.append(elapsed)
    best_bare, best_ours = min(bare_times), min(ours)
    widths = (40, 10, 12, 12)
    print(f"\n(b) explain --rerun: {rerun['flipped']} flips + {rerun['agreeing']} agreeing cases = {sent} requests "
          f"(AB/BA, max_tokens {max_tokens}) on two llama.cpp servers; best of {runs}")
    print(row("", "wall s", "requests", "x bare", widths=widths))
    print(row("bare httpx loop, same schedule (ref.)", f"{best_bare:.3f}", sent, "1.00", widths=widths))
    print(row("execsys explain --rerun", f"{best_ours:.3f}", sent, f"{best_ours / best_bare:.2f}", widths=widths))
    ratio = best_ours / best_bare
    paired = sorted(o / b for o, b in zip(ours, bare_times, strict=True))
    print(f"ratio explain --rerun / bare = {ratio:.3f}x (target <= 1.1x): {'met' if ratio <= 1.1 else 'NOT met'}; "
          f"paired ratios median {statistics.median(paired):.3f}x, range {paired[0]:.3f}-{paired[-1]:.3f}x")
    print(f"fixed cost over the bare requests: {best_ours - best_bare:.2f} s (interpreter, explain's analysis, the "
          f"plan's registration, endpoint checks, the executed log and the ledger); bare: "
          f"{1000 * best_bare / sent:.0f} ms per request")
    # on a shared machine the wall times swing with the load; the client's own CPU does not: what explain
    # spends beyond the bare loop's client, added to the bare wall time, is the ratio an idle machine shows
    extra_cpu = min(our_cpu) - min(bare_cpu)
    print(f"client CPU (user+sys of the client process alone): explain --rerun {min(our_cpu):.2f} s, bare "
          f"{min(bare_cpu):.2f} s: {extra_cpu:.2f} s more; (bare wall + that) / bare wall = "
          f"{(best_bare + extra_cpu) / best_bare:.3f}x")
    print(f"all runs: bare {[round(t, 2) for t in bare_times]}, explain --rerun {[round(t, 2) for t in ours]}")
    return ratio


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rerun-cases", type=int, default=60, help="cases of the paired run explained")
    parser.add_argument("--sample", type=int, default=20, help="agreeing cases --rerun sends again")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--skip-rerun", action="store_true", help="only (a): no llama.cpp server")
    parser.add_argument("--skip-plain", action="store_true", help="only (b): the --rerun overhead")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-explain-") as tmp:
        work = Path(tmp)
        if not args.skip_plain:
            bench_without_rerun(work, args.runs)
        if not args.skip_rerun:
            bench_rerun(work, args.runs, args.rerun_cases, args.max_tokens, args.sample)
    print("load average (1, 5, 15 min) before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
        *load_before, *os.getloadavg()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
