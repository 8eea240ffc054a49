"""Every probe axis against llama.cpp's real OpenAI-compatible server on loopback.

The models are generated random-weight GGUFs (``tests/fixtures/llama.py``). What these tests
assert about llama.cpp was measured here first (2026-11-30, llama-cpp-python 0.3.36, CPU):

* at temperature 0 text is byte-identical within a session (shuffled second pass), across a
  restart with the same flags, across repeats and under --load 4 (the server serialises);
* with the "tie" model, a prompt sent right after itself reuses the cached prefix and its text
  flips (14 of 20 agreed with adjacent duplicates), and a server started with
  ``--n_batch 8 --n_ubatch 8`` disagrees with a default one (16 of 20 agreed).

Exact counts depend on the CPU's instruction set, so the tests assert the direction (m == n,
or m < n) and the mechanism, not the count.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from execsys.probes.cases import load_cases, pass_order

from execsys.ledger import Ledger
from tests.fixtures.fake_http import JsonHandler, LoopbackServer

from .fixtures.llama import start_llama_server

pytest.importorskip("llama_cpp")

SMALL_BATCH = ["--n_batch", "8", "--n_ubatch", "8"]


def write_prompts(path: Path, n: int = 20, *, duplicate_adjacent: bool = False) -> Path:
    with path.open("w") as handle:
        if duplicate_adjacent:
            for i in range(n // 2):
                for twin in "ab":
                    handle.write(json.dumps({"id": f"c{i:02d}{twin}", "prompt": f"Case {i}: what is {i}+{i}?",
                                             "max_tokens": 32}) + "\n")
        else:
            for i in range(n):
                handle.write(json.dumps({"id": f"c{i:02d}", "prompt": f"Case {i}: what is {i}+{i}?",
                                         "max_tokens": 32}) + "\n")
    return path


@pytest.fixture(scope="module")
def tie_servers(tie_gguf):
    """Two tie-model servers: default flags, and a small physical batch."""
    with start_llama_server(tie_gguf) as default, start_llama_server(tie_gguf, extra_args=SMALL_BATCH) as small:
        yield default, small


def test_session_is_stable_on_llama_cpp(cli, tmp_path, llama_server):
    cases = write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", str(cases), "--json")
    assert result.returncode == 0, result.stderr
    record = result.json()
    assert (record["m"], record["n"], record["errored"]) == (20, 20, 0)
    assert record["target"]["models"] == ["tiny"]  # the one model the server lists
    assert [p["order"] for p in record["passes"]] == ["file", "shuffled"]
    assert record["passes"][1]["order_seed"] == 0
    assert record["passes"][0]["system_fingerprints"] == []  # llama.cpp sends none
    assert record["scope"]["holds"] is True
    assert record["sentence"].startswith("session agreement 20/20 = 1.00 (95% CI 0.84–1.00)")


def test_repeats_on_llama_cpp_give_one_distinct_output_per_case(cli, tmp_path, llama_server):
    cases = write_prompts(tmp_path / "cases.jsonl", n=8)
    record = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", str(cases), "--json",
                 "--repeats", "3").json()
    assert (record["m"], record["n"], record["repeats"]) == (8, 8, 3)
    assert all(c["distinct"] == 1 and len(c["passes"]) == 3 for c in record["cases"])


def test_prompt_sent_right_after_itself_flips_on_the_tie_model(cli, tmp_path, tie_gguf):
    """The probe's own order is part of what it measures: llama.cpp reuses the cached prefix of a prompt
    sent twice in a row, and with near-tied logits that moves greedy choices."""
    cases = write_prompts(tmp_path / "cases.jsonl", duplicate_adjacent=True)
    with start_llama_server(tie_gguf) as server:  # fresh: its cache state is part of the measurement
        result = cli("probe", "session", "--endpoint", server.base_url, "--cases", str(cases), "--json")
    record = result.json()
    assert result.returncode == 1, result.stderr
    assert record["n"] == 20 and 0 < record["m"] < 20
    loaded = load_cases(cases)
    followed_its_twin = set()
    for index in (0, 1):
        order = [c.id for c in pass_order(loaded, 0, index)]
        for before, after in zip(order, order[1:], strict=False):
            if before[:3] == after[:3]:
                followed_its_twin.add((index, after))
    for case_id in record["flipped"]:
        assert any(cid == case_id for _, cid in followed_its_twin), f"{case_id} flipped without prefix reuse"


def test_restart_with_a_real_restart_command(cli, tmp_path, tie_gguf, restart_script, ledger_path):
    server = restart_script(tie_gguf)
    pid_before = server.pid
    cases = write_prompts(tmp_path / "cases.jsonl")
    started = time.monotonic()
    result = cli("probe", "restart", "--endpoint", server.base_url, "--cases", str(cases), "--json",
                 "--restart", server.command, "--ready-timeout", "60")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    record = result.json()
    assert server.pid != pid_before  # it really restarted
    assert (record["m"], record["n"]) == (20, 20)  # measured: byte-identical across a restart
    assert record["engine_changed"] is False
    assert record["sentence"].startswith("restart agreement 20/20 = 1.00")
    step = record["target"]["observed"]["restart:1"]
    assert step["changed"] == []
    # the restart command's time, then the time until the new server answered, both inside the probe's
    assert 0 < step["restart_s"] <= step["ready_s"] < elapsed
    assert step["after"]["runtime"]["process_argv"] == step["before"]["runtime"]["process_argv"]
    with Ledger.open(ledger_path) as ledger:
        assert ledger.count(kind="probe-step") == 2  # observe:0 and restart:1


def test_restart_that_changes_the_engine_is_not_called_a_restart_effect(cli, tmp_path, tie_gguf, restart_script):
    server = restart_script(tie_gguf, restart_extra_args=SMALL_BATCH)
    cases = write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "restart", "--endpoint", server.base_url, "--cases", str(cases), "--json",
                 "--restart", server.command)
    record = result.json()
    assert record["engine_changed"] is True
    assert "the engine changed across the restart" in record["sentence"]
    assert "not a restart effect" in " ".join(record["notes"])
    assert "+--n_batch" in record["target"]["observed"]["restart:1"]["changed"][0]
    assert record["scope"]["engine_changed"] is True


def test_same_binary_restarted_under_another_name_is_not_an_engine_change(cli, tmp_path, tiny_gguf,
                                                                          restart_script):
    # Started as /full/path/python, restarted as `python` found on PATH: argv[0] differs, the binary
    # and every flag are the same. That is a restart, not an engine change.
    server = restart_script(tiny_gguf, restart_by_name=True)
    cases = write_prompts(tmp_path / "cases.jsonl", n=6)
    result = cli("probe", "restart", "--endpoint", server.base_url, "--cases", str(cases), "--json",
                 "--restart", server.command, "--ready-timeout", "60")
    assert result.returncode == 0, result.stderr
    record = result.json()
    step = record["target"]["observed"]["restart:1"]
    assert step["changed"] == [], step["changed"]
    assert record["engine_changed"] is False
    assert record["sentence"].startswith("restart agreement 6/6 = 1.00")


def test_restart_command_failing_keeps_pass_a(cli, tmp_path, llama_server, ledger_path):
    cases = write_prompts(tmp_path / "cases.jsonl", n=6)
    result = cli("probe", "restart", "--endpoint", llama_server.base_url, "--cases", str(cases),
                 "--restart", "echo no permission >&2; exit 3")
    assert result.returncode == 2
    assert "restart command failed (exit 3: no permission)" in result.stderr
    last = result.stderr.strip().splitlines()[-1]  # progress lines above it, then the one error line
    assert last.startswith("execsys probe: error: restart command failed") and "--resume probe-run-" in last
    with Ledger.open(ledger_path) as ledger:
        assert ledger.count(kind="probe-case") == 6  # pass A is kept
        assert ledger.count(kind="probe") == 0


def test_restart_never_ready_ends_with_a_clear_message(cli, tmp_path, llama_server):
    cases = write_prompts(tmp_path / "cases.jsonl", n=3)
    result = cli("probe", "restart", "--endpoint", llama_server.base_url, "--cases", str(cases),
                 "--restart", "true", "--ready", "exit 1", "--ready-timeout", "1")
    assert result.returncode == 2
    assert "did not become ready within 1s after the restart" in result.stderr


class CountingProxy(LoopbackServer):
    """A loopback HTTP proxy (stdlib) in front of a real server that counts the completion requests in
    flight: llama-cpp-python answers one request at a time, so only here can K concurrent requests be
    seen. ``arrivals`` is the number in flight as each completion request arrived, in arrival order.

    With ``hold_after=N, hold_until=K`` the requests after the first N are held before they go upstream
    until K are in flight at once (at most ``hold_s``), once: the tiny model answers so fast that a
    loaded machine could finish one request before the K-th is sent, and K in flight would then be
    luck. A client that never sends K at once is still caught: the hold times out with fewer."""

    def __init__(self, upstream_port: int, *, hold_after: int | None = None, hold_until: int = 0,
                 hold_s: float = 20.0):
        import http.client
        import threading

        self.arrivals: list[int] = []
        self.in_flight = 0
        lock = threading.Condition()
        held = {"open": hold_after is None}
        proxy = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                counted = self.command == "POST" and self.path.endswith("completions")
                if counted:
                    with lock:
                        proxy.in_flight += 1
                        proxy.arrivals.append(proxy.in_flight)
                        lock.notify_all()
                        if not held["open"] and hold_after is not None and len(proxy.arrivals) > hold_after:
                            lock.wait_for(lambda: held["open"] or proxy.in_flight >= hold_until, timeout=hold_s)
                            held["open"] = True
                            lock.notify_all()
                try:
                    upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=120)
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    upstream.close()
                finally:
                    if counted:
                        with lock:
                            proxy.in_flight -= 1
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

        super().__init__(Handler)
        self.base_url = self.url()


def test_concurrency_axis_keeps_k_requests_in_flight_during_pass_b(cli, tmp_path, llama_server):
    load, n = 4, 8
    cases = write_prompts(tmp_path / "cases.jsonl", n=n)
    with CountingProxy(llama_server.port, hold_after=n, hold_until=load) as proxy:
        result = cli("probe", "concurrency", "--endpoint", proxy.base_url, "--cases", str(cases), "--json",
                     "--load", str(load))
    record = result.json()
    assert result.returncode == 0, result.stderr
    assert (record["m"], record["n"]) == (n, n)  # measured: the server serialises concurrent requests
    a, b = record["passes"]
    assert (a["concurrency"], a["load"], b["concurrency"], b["load"]) == (1, 0, load, load)
    assert b["completed"] == n
    # pass A (the first n completion requests) goes out one at a time; pass B keeps K in flight
    pass_a, pass_b = proxy.arrivals[:n], proxy.arrivals[n:]
    assert max(pass_a) == 1, proxy.arrivals
    assert max(pass_b) >= load, proxy.arrivals
    assert len(pass_b) == n + b["fillers"]  # every request of pass B is a case or a counted filler
    assert record["sentence"].startswith(f"concurrency agreement {n}/{n}")


def test_a_server_killed_mid_probe_stops_it_after_a_few_failures_and_resume_finishes(
        tmp_path, tiny_gguf, ledger_path):
    import os
    import subprocess
    import sys
    import time

    from .fixtures.llama import LlamaServer

    n = 30
    cases = write_prompts(tmp_path / "cases.jsonl", n=n)
    server = start_llama_server(tiny_gguf)
    argv = [sys.executable, "-m", "execsys", "probe", "session", "--endpoint", server.base_url,
            "--cases", str(cases), "--retries", "1"]
    env = {**os.environ, "EXECSYS_LEDGER": str(ledger_path)}
    try:
        probe = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and probe.poll() is None:
            if ledger_path.exists():
                with Ledger.open(ledger_path) as ledger:
                    if ledger.count(kind="probe-case") >= 5:
                        break
            time.sleep(0.05)
        server.stop()  # the endpoint dies mid-run
        killed_at = time.monotonic()
        _, stderr = probe.communicate(timeout=120)
        stopped_after = time.monotonic() - killed_at
    finally:
        server.stop()
    assert probe.returncode == 2, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("execsys probe: error: endpoint unreachable since case c"), stderr
    assert last.endswith(": stopped; --resume continues")
    assert stopped_after < 60  # not every remaining case retried for its full timeout
    with Ledger.open(ledger_path) as ledger:
        [run] = list(ledger.iter(kind="probe-run"))
        assert ledger.child(run.id, "final") is None
        kept = ledger.count(kind="probe-case", parent=run.id)
        errors = [r for r in ledger.iter(kind="probe-case", parent=run.id) if r.body.get("error")]
    assert 5 <= kept < 2 * n
    # the failures that stopped it are not recorded as results: a resumed run sends those cases again
    assert not any("cannot connect" in (r.body.get("error") or "") for r in errors)

    with LlamaServer(tiny_gguf, port=server.port) as again:
        again.start()
        result = subprocess.run([*argv, "--resume", run.id, "--json"], capture_output=True, text=True, env=env,
                                timeout=300)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["run"] == run.id and (record["n"] + record["errored"]) == n
    with Ledger.open(ledger_path) as ledger:
        assert ledger.count(kind="probe-case", parent=run.id) == 2 * n  # every case once per pass


def test_hosts_same_engine_agree(cli, tmp_path, llama_server, tiny_gguf):
    cases = write_prompts(tmp_path / "cases.jsonl", n=10)
    with start_llama_server(tiny_gguf) as other:
        result = cli("probe", "hosts", "--endpoint", llama_server.base_url, "--endpoint", other.base_url,
                     "--cases", str(cases), "--json")
    record = result.json()
    assert result.returncode == 0 and (record["m"], record["n"]) == (10, 10)
    assert [p["label"] for p in record["passes"]] == ["host 1", "host 2"]
    assert record["target"]["endpoints"] == [llama_server.base_url, other.base_url]


def test_hosts_with_a_different_batch_size_disagree(cli, tmp_path, tie_servers):
    default, small = tie_servers
    cases = write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "hosts", "--endpoint", default.base_url, "--endpoint", small.base_url,
                 "--cases", str(cases), "--json", "--tokens")
    record = result.json()
    assert result.returncode == 1
    assert record["n"] == 20 and record["m"] < 20  # measured 16-17 of 20 here
    for case in record["cases"]:
        div = case["first_divergence"]
        if case["id"] in record["flipped"]:
            assert div["char"] is not None and div["token"] is not None
            assert div["token"] <= div["char"]  # every token is at least one character here
        else:
            assert div is None


def test_redeploy_against_a_stored_baseline(cli, tmp_path, tie_servers):
    default, small = tie_servers
    cases = write_prompts(tmp_path / "cases.jsonl")
    baseline = cli("probe", "session", "--endpoint", default.base_url, "--cases", str(cases), "--json").json()
    same = cli("probe", "redeploy", "--endpoint", default.base_url, "--cases", str(cases), "--json",
               "--baseline", baseline["id"])
    record = same.json()
    assert record["baseline"]["id"] == baseline["id"]
    assert [p["source"] for p in record["passes"]] == ["baseline", "send"]
    assert record["n"] == 20 and record["m"] == 20, record["flipped"]
    assert any("system_fingerprint" in note for note in record["notes"])
    moved = cli("probe", "redeploy", "--endpoint", small.base_url, "--cases", str(cases), "--json",
                "--baseline", baseline["id"]).json()
    assert moved["n"] == 20 and moved["m"] < 20
    flipped = {c["id"]: c for c in moved["cases"]}[moved["flipped"][0]]
    assert flipped["first_divergence"]["char"] is not None  # texts of the baseline run come from the ledger


# -- why a case flipped: the logprob margin at the first divergent token --------------

def assert_near_ties(record: dict) -> list[dict]:
    """Every flip of the tie model is at a near-tie (its output rows are copies up to ~1e-7)."""
    assert record["logprobs"]["status"] == "ok"
    margins = []
    for case in record["cases"]:
        if case["id"] not in record["flipped"]:
            continue
        margin = case["first_divergence"]["logprobs"]
        assert margin["verdict"] == "near-tie", (case["id"], margin)
        assert margin["margin"] < 1e-3 and margin["bound"] == "exact"
        assert margin["token_a"] != margin["token_b"]
        assert {t for t, _ in margin["top_a"][:2]} == {margin["token_a"], margin["token_b"]}
        assert len(margin["top_a"]) == 5 and len(margin["top_b"]) == 5  # the default --logprobs 5
        margins.append(margin)
    flips = len(record["flipped"])
    assert record["logprobs"]["near_ties"] == flips and record["logprobs"]["not_near_ties"] == 0
    assert f"{flips} flip{'s' if flips != 1 else ''}: {flips} at near-tie" in record["sentence"]
    return margins


def test_twin_flips_on_the_tie_model_are_near_ties_sent_after_their_twin(cli, tmp_path, tie_gguf):
    cases = write_prompts(tmp_path / "cases.jsonl", duplicate_adjacent=True)
    with start_llama_server(tie_gguf) as server:
        result = cli("probe", "session", "--endpoint", server.base_url, "--cases", str(cases), "--json")
    record = result.json()
    assert result.returncode == 1 and 0 < record["m"] < record["n"], result.stderr
    assert_near_ties(record)
    for case in record["cases"]:
        if case["id"] in record["flipped"]:
            sent = case["first_divergence"]["sent"]
            assert any(side["after_twin"] for side in sent), (case["id"], sent)  # the cached-prefix cause


def test_n_batch_flips_on_the_tie_model_are_near_ties_and_hosts_run_at_one_instant(cli, tmp_path, tie_servers):
    default, small = tie_servers
    cases = write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "hosts", "--endpoint", default.base_url, "--endpoint", small.base_url,
                 "--cases", str(cases), "--json")
    record = result.json()
    assert result.returncode == 1 and record["m"] < record["n"] == 20, result.stderr
    assert_near_ties(record)
    a, b = (p["window"] for p in record["passes"])
    assert a["start_unix"] < b["end_unix"] and b["start_unix"] < a["end_unix"]
