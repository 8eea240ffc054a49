"""`execsys pin` without an artifact (target: <= 0.5 s on a 2-core machine), beside `git status`
and `python -c pass` in the same run; and with a 1 GiB artifact beside `b3sum` of it, to show
that pinning with weights is dominated by hashing.

--engine vllm: `execsys pin` of a project served by the real vLLM CPU build (tests/fixtures/vllm.py
makes the tiny random Llama and starts the server from the cached venv of scripts/vllm-env.sh; the
declaration is the one `execsys init` writes beside it: engine, endpoint, the weights as artifact),
engine introspection included (target: <= 1.5 s wall in all, issue 27), beside curl sending the
same HTTP requests pin sends, in the same order, in one process (one connection), and the same pin
with no [runtime] (what the endpoint, the engine and the serving process add).

Run: python benchmarks/bench_pin.py [--runs 7] [--no-artifact-only] [--engine vllm [--baseline-execsys PATH]
     [--endpoint URL]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _util import best_of, compiled_like_an_install, execsys_argv, need, row


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


# What `execsys pin` asks a vLLM endpoint, in its order (execsys/observe/runtime.py observe_endpoint, then
# execsys/observe/engines/vllm.py introspect): (method, path from the server root).
VLLM_PIN_REQUESTS = (
    ("GET", "/v1/models"), ("GET", "/version"), ("GET", "/openapi.json"), ("GET", "/props"),
    ("POST", "/v1/chat/completions"),  # one token, for the system_fingerprint
    ("GET", "/version"), ("GET", "/v1/models"), ("GET", "/metrics"), ("GET", "/server_info?config_format=json"),
)


def curl_argv(root: str, model: str) -> list[str]:
    """One curl process sending VLLM_PIN_REQUESTS over one connection, writing each one's time."""
    fingerprint_body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                   "temperature": 0})
    argv = [need("curl"), "--silent", "--show-error", "--max-time", "60"]
    for index, (method, path) in enumerate(VLLM_PIN_REQUESTS):
        if index:
            argv += ["--next", "--silent", "--show-error", "--max-time", "60"]
        argv += ["--output", os.devnull, "--write-out", f"{method} {path} %{{http_code}} %{{time_total}}\\n"]
        if method == "POST":
            argv += ["--header", "Content-Type: application/json", "--data", fingerprint_body]
        argv.append(root + path)
    return argv


def timed(argv: list[str], cwd: Path | None = None) -> tuple[float, str, float]:
    """(wall s, stdout, CPU s of the command and the children it waited for) of one run; fails loudly."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=300)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... failed ({done.returncode}): {done.stderr[-800:]}")
    return elapsed, done.stdout, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@contextlib.contextmanager
def vllm_served(work: Path, endpoint: str | None) -> Iterator[tuple[str, str, str]]:
    """(API base URL, server root, the weights' directory) of the real vLLM the test fixtures start, or of
    ``endpoint``, one already running (its weights: what its /v1/models says it loaded, ``root``)."""
    if endpoint:
        import httpx

        api = endpoint.rstrip("/")
        [served] = httpx.get(api + "/models", timeout=30).json()["data"]
        yield api, api.removesuffix("/v1"), served["root"]
        return
    from tests.fixtures.vllm import VllmServer, make_tiny_llama, vllm_venv

    python = vllm_venv() / "bin" / "python"
    model = make_tiny_llama(python, work / "tiny-llama")
    server = VllmServer(python, model)
    with server:
        server.start()
        yield server.base_url, server.root, str(model)


def bench_vllm(runs: int, baseline: str | None = None, endpoint: str | None = None) -> int:
    """`execsys pin` against the real vLLM, beside curl of the same requests, alternating, in one run."""
    from tests.fixtures.vllm import SERVED_NAME

    with tempfile.TemporaryDirectory(prefix="execsys-bench-pin-vllm-") as tmp:
        project = make_project(Path(tmp) / "project")
        bare_project = make_project(Path(tmp) / "bare")
        os.environ["EXECSYS_LEDGER"] = str(Path(tmp) / "ledger.sqlite3")
        with vllm_served(Path(tmp), endpoint) as (api, root, model):
            (project / "execsys.toml").write_text(
                f'[artifact]\npath = "{model}"\n[runtime]\nengine = "vllm"\nendpoint = "{api}"\n')
            (bare_project / "execsys.toml").write_text(f'[artifact]\npath = "{model}"\n')
            pin_argv = [*execsys_argv(), "pin", "--json"]
            baseline_argv = [baseline, "pin", "--json"] if baseline else None
            curl = curl_argv(root, SERVED_NAME)
            # warm-up: vLLM computes its first /openapi.json and /server_info (collect_env) slowly, then caches
            timed(pin_argv, project)
            timed(curl)
            if baseline_argv:
                timed(baseline_argv, project)
            load_before = os.getloadavg()
            pins, curls, bares, per_request, pin_cpu, curl_cpu, base_pins, base_cpu = [], [], [], [], [], [], [], []
            for _ in range(runs):
                curl_s, written, curl_c = timed(curl)
                curls.append(curl_s)
                curl_cpu.append(curl_c)
                per_request.append(written.splitlines())
                pin_s, _out, pin_c = timed(pin_argv, project)
                pins.append(pin_s)
                pin_cpu.append(pin_c)
                if baseline_argv:
                    base_s, _out, base_c = timed(baseline_argv, project)
                    base_pins.append(base_s)
                    base_cpu.append(base_c)
                bares.append(timed(pin_argv, bare_project)[0])
            load_after = os.getloadavg()
            if baseline_argv:  # the last pin was the baseline's: the lock read below is this execsys's
                timed(pin_argv, project)
            lock = json.loads((project / "execsys.lock.json").read_text())
        runtime = lock["components"]["runtime"]["observed"]
        engine = runtime.get("engine") or {}
        native = runtime.get("engine_native") or {}
    python_pass = best_of(runs, [sys.executable, "-c", "pass"])
    pin, ref, bare = statistics.median(pins), statistics.median(curls), statistics.median(bares)
    print(f"vLLM: {engine.get('name')} {engine.get('version')} ({engine.get('source')}); the lock records "
          f"vLLM's own account from {sorted(native.get('read') or [])}, absent {native.get('absent') or {}}; "
          f"{runs} alternating runs after one warm-up each")
    widths = (52, 10, 10, 12, 14)
    print(row("command", "median s", "min s", "CPU s", "target", widths=widths))
    print(row("execsys pin (vLLM, introspection, tiny artifact)", f"{pin:.3f}", f"{min(pins):.3f}",
              f"{statistics.median(pin_cpu):.3f}", "<= 1.500 s", widths=widths))
    if base_pins:
        print(row("baseline execsys pin (same project)", f"{statistics.median(base_pins):.3f}", f"{min(base_pins):.3f}",
                  f"{statistics.median(base_cpu):.3f}", "", widths=widths))
    print(row(f"curl, the same {len(VLLM_PIN_REQUESTS)} requests (reference)", f"{ref:.3f}", f"{min(curls):.3f}",
              f"{statistics.median(curl_cpu):.3f}", "", widths=widths))
    print(row("execsys pin, same project without [runtime]", f"{bare:.3f}", f"{min(bares):.3f}", "", widths=widths))
    print(row("python -c pass (reference)", f"{python_pass['median']:.3f}", f"{python_pass['min']:.3f}", "",
              widths=widths))
    paired = sorted(p - c for p, c in zip(pins, curls, strict=True))
    print(f"pin - curl (paired, each pin vs the curl just before it): median {statistics.median(paired):.3f} s, "
          f"range {paired[0]:.3f}-{paired[-1]:.3f} s; pin/curl median {pin / ref:.1f}x; "
          f"[runtime] adds {pin - bare:.3f} s to pin")
    if base_pins:
        against = sorted(p / b for p, b in zip(pins, base_pins, strict=True))
        cpu_against = sorted(p / b for p, b in zip(pin_cpu, base_cpu, strict=True))
        print(f"this execsys vs the baseline pin just after it: wall median {statistics.median(against):.2f}x "
              f"(range {against[0]:.2f}-{against[-1]:.2f}), CPU median {statistics.median(cpu_against):.2f}x "
              f"(range {cpu_against[0]:.2f}-{cpu_against[-1]:.2f})")
    fastest = per_request[curls.index(min(curls))]
    print("curl per request in its fastest run: " + "; ".join(
        f"{line.rsplit(' ', 1)[0]} {float(line.rsplit(' ', 1)[1]) * 1000:.0f} ms" for line in fastest))
    print("load average (1, 5, 15 min) before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
        *load_before, *load_after))
    print(f"all runs: pin {[round(t, 3) for t in pins]}, curl {[round(t, 3) for t in curls]}"
          + (f", baseline pin {[round(t, 3) for t in base_pins]}" if base_pins else ""))
    ok = pin <= 1.5
    print(f"{'PASS' if ok else 'MISS'}: execsys pin against vLLM median {pin:.3f} s")
    return 0 if ok else 1


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-artifact-only", action="store_true", help="skip the 1 GiB artifact part")
    parser.add_argument("--engine", choices=("vllm",), help="pin a project served by this real engine instead")
    parser.add_argument("--baseline-execsys", help="with --engine: another execsys (a checkout before a change) "
                                                   "pinning the same project in the same alternation")
    parser.add_argument("--endpoint", help="with --engine: a vLLM already running (.../v1, serving 'tiny') instead "
                                           "of starting one")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs takes a positive number")
    need("git")
    if args.engine == "vllm":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fixtures
        return bench_vllm(args.runs, args.baseline_execsys, args.endpoint)
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
