"""A misbehaving endpoint (5xx, timeouts, resets, invalid JSON, truncated and huge bodies), interrupted
probes (SIGKILL, SIGINT) and bad input: the probe retries, records, resumes and refuses as documented."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from execsys.probes.cases import Case
from execsys.probes.client import EndpointClient

from execsys.ledger import Ledger

from .fixtures.llama import FlipEndpoint
from .test_probe_arithmetic import FLIPPED, write_cases


@pytest.mark.parametrize("marker, fragment", [
    ("[err500x2]", None),
    ("[slow1]", None),
    ("[badjson1]", None),
    ("[reset1]", None),
    ("[trunc1]", None),
    ("[huge1]", None),
])
def test_transient_failures_are_retried_then_succeed(marker, fragment):
    with FlipEndpoint(slow_s=2.0) as endpoint:
        client = EndpointClient(endpoint.base_url, timeout=1.0, retries=3, backoff=0.01)
        prompt = f"question {marker}"
        completion = client.complete(Case("x", prompt=prompt), {"temperature": 0, "model": "fake"})
        client.close()
        assert completion.error is None, completion.error
        assert completion.text == FlipEndpoint.answer(prompt, 1) or completion.text == FlipEndpoint.answer(prompt, 2)
        assert completion.attempts == (3 if marker == "[err500x2]" else 2)
        assert endpoint.calls[prompt] == completion.attempts


def test_failures_past_the_retry_limit_become_errors():
    with FlipEndpoint() as endpoint:
        client = EndpointClient(endpoint.base_url, timeout=2.0, retries=2, backoff=0.01)
        completion = client.complete(Case("x", prompt="q [error]"), {"model": "fake"})
        assert completion.text is None and completion.attempts == 3
        assert completion.error.startswith("HTTP 500")
        assert endpoint.calls["q [error]"] == 3
        # a huge body is cut off at the cap instead of being read into memory
        small = EndpointClient(endpoint.base_url, timeout=5.0, retries=0, max_body=1 << 20)
        huge = small.complete(Case("y", prompt="q [huge1]"), {"model": "fake"})
        assert huge.error == f"response body over {1 << 20} bytes (cut off)"
        small.close()
        client.close()


def test_an_endless_body_is_cut_off_by_the_deadline():
    """A server that trickles bytes forever: per-read timeouts never fire, the overall deadline does."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        while not stop.is_set():
            try:
                conn.sendall(b"1\r\n \r\n")
            except OSError:
                break
            time.sleep(0.05)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = EndpointClient(f"http://127.0.0.1:{port}/v1", timeout=1.0, retries=0)
    started = time.monotonic()
    completion = client.complete(Case("x", prompt="p"), {})
    stop.set()
    client.close()
    listener.close()
    assert completion.error == "response still arriving after 1s (cut off)"
    assert time.monotonic() - started < 5


def test_retries_show_in_the_ledger_and_the_rate_is_exact(cli, tmp_path, ledger_path):
    markers = {"c00": " [err500x1]", "c01": " [badjson1]", "c02": " [reset1]", "c03": " [trunc1]"}
    cases = write_cases(tmp_path / "cases.jsonl", markers, n=6)
    with FlipEndpoint() as endpoint:
        record = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json").json()
    assert (record["m"], record["n"], record["errored"]) == (6, 6, 0)
    with Ledger.open(ledger_path) as ledger:
        attempts = {r.key: r.body["attempts"] for r in ledger.find(kind="probe-case")}
    assert attempts["0:c00"] == attempts["0:c01"] == attempts["0:c02"] == attempts["0:c03"] == 2
    assert attempts["1:c00"] == 1 and attempts["0:c05"] == 1


def _start_probe(cases: Path, endpoint: FlipEndpoint, *extra: str) -> subprocess.Popen:
    env = dict(os.environ)
    return subprocess.Popen(
        [sys.executable, "-m", "execsys", "probe", "session", "--endpoint", endpoint.base_url,
         "--cases", str(cases), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def _wait_rows(ledger_path: Path, at_least: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ledger_path.exists():
            with Ledger.open(ledger_path) as ledger:
                count = ledger.count(kind="probe-case")
            if count >= at_least:
                return count
        time.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} case rows after {timeout}s")


def test_sigkill_mid_probe_then_resume_loses_and_double_counts_nothing(cli, tmp_path, ledger_path):
    cases = write_cases(tmp_path / "cases.jsonl", n=40)
    with FlipEndpoint(delay=0.05) as endpoint:
        proc = _start_probe(cases, endpoint)
        _wait_rows(ledger_path, 25)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        with Ledger.open(ledger_path) as ledger:
            saved = ledger.count(kind="probe-case")
            assert ledger.count(kind="probe") == 0
        assert 25 <= saved < 80
        sent_before = endpoint.total_calls
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json", "--resume")
        assert result.returncode == 0, result.stderr
        assert "resuming run probe-run-" in result.stderr
        # only what was missing was sent again: at most the request in flight and one answer not yet
        # written when it was killed were lost with the process
        resent = endpoint.total_calls - sent_before
        assert 80 - saved <= resent <= 80 - saved + 2
        record = result.json()
        assert (record["m"], record["n"], record["errored"]) == (40, 40, 0)
        with Ledger.open(ledger_path) as ledger:
            runs = ledger.find(kind="probe-run")
            assert len(runs) == 1 and record["run"] == runs[0].id
            rows = ledger.find(kind="probe-case", parent=runs[0].id)
            assert len(rows) == 80 and len({r.key for r in rows}) == 80
            assert ledger.count(kind="probe") == 1
        # resuming a finished run returns its record without sending anything
        calls = endpoint.total_calls
        again = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                    "--resume", record["run"])
        assert again.returncode == 0 and again.json()["id"] == record["id"]
        assert endpoint.total_calls == calls
        # a run resumed with other parameters is refused, naming what moved
        other = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                    "--resume", record["run"], "--repeats", "3")
        assert other.returncode == 2 and "different parameters (repeats)" in other.stderr


def test_ctrl_c_saves_progress_and_prints_how_to_resume(cli, tmp_path, ledger_path):
    cases = write_cases(tmp_path / "cases.jsonl", {c: " [flip]" for c in FLIPPED})
    with FlipEndpoint(delay=0.1) as endpoint:
        proc = _start_probe(cases, endpoint)
        _wait_rows(ledger_path, 8)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "interrupted:" in err and "case results saved in run probe-run-" in err
        resume_line = next(line for line in err.splitlines() if line.startswith("resume with: "))
        argv = resume_line[len("resume with: "):].split()
        assert argv[0] == "execsys" and argv[-2] == "--resume" and argv[-1].startswith("probe-run-")
        with Ledger.open(ledger_path) as ledger:
            saved = ledger.count(kind="probe-case")
        assert 8 <= saved < 40
        sent_before = endpoint.total_calls
        assert sent_before == saved  # SIGINT waits for the request in flight and records it
        result = cli(*argv[1:], "--json")
        assert result.returncode == 1, result.stderr
        assert endpoint.total_calls - sent_before == 40 - saved
    record = result.json()
    assert (record["m"], record["n"]) == (12, 20)  # the same arithmetic as an uninterrupted probe
    assert set(record["flipped"]) == FLIPPED


def test_cancel_event_raises_probe_interrupted(tmp_path, ledger_path):
    from execsys.probes.runner import (
        CaseDone,
        PassStarted,
        ProbeInterrupted,
        ProbeOptions,
        RunOpened,
        run_probe,
    )

    cases = write_cases(tmp_path / "cases.jsonl", n=10)
    cancel = threading.Event()
    events: list = []

    def on_event(event) -> None:
        events.append(event)
        if isinstance(event, CaseDone) and event.done == 4:
            cancel.set()

    # Slow enough answers (4 rounds of 0.3 s at concurrency 3) that the 4th result is recorded while
    # later cases are still unsent, even when a loaded machine delays the recording thread.
    with FlipEndpoint(delay=0.3) as endpoint, Ledger.open(ledger_path) as ledger:
        options = ProbeOptions(axis="session", endpoints=[endpoint.base_url], cases=cases, concurrency=3,
                               ledger=ledger_path)
        with pytest.raises(ProbeInterrupted) as info:
            run_probe(options, on_event=on_event, cancel=cancel)
        saved = ledger.count(kind="probe-case", parent=info.value.run_id)
        assert info.value.saved == saved and 4 <= saved < 10 and info.value.total == 20  # stopped inside pass A
        record = run_probe(ProbeOptions(axis="session", endpoints=[endpoint.base_url], cases=cases, concurrency=3,
                                        resume=info.value.run_id, ledger=ledger_path))
        assert (record.m, record.n) == (10, 10) and record.run == info.value.run_id
    assert events[0] == RunOpened(info.value.run_id, resumed=False)  # the run id comes before any pass
    assert isinstance(events[1], PassStarted) and events[1].total == 10
    assert events[1].run_id == info.value.run_id


# -- command target -------------------------------------------------------------

HARNESS = r'''
import json, sys
case = json.load(sys.stdin)
text = case.get("prompt") or case["messages"][-1]["content"]
if "boom" in text:
    sys.exit("harness failed")
flips = "flip" in text and open(sys.argv[1], "a+").tell() > 0
open(sys.argv[1], "a").write(case["id"] + "\n") if "flip" in text else None
print(json.dumps({"id": case["id"], "temperature": case["params"]["temperature"], "answer": 7 + flips}))
'''


def test_command_target_reads_a_case_on_stdin(cli, tmp_path):
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    state = tmp_path / "state"
    cases = write_cases(tmp_path / "cases.jsonl", {"c01": " flip", "c02": " boom"}, n=4)
    command = f"{sys.executable} {harness} {state}"
    result = cli("probe", "session", "--command", command, "--cases", str(cases), "--json",
                 "--extract", "json:answer")
    assert result.returncode == 1, result.stderr
    record = result.json()
    assert record["target"]["kind"] == "command"
    assert (record["m"], record["n"], record["errored"]) == (2, 3, 1)
    assert record["flipped"] == ["c01"]
    assert record["compare"]["outcome"]["m"] == 2
    errored = {c["id"]: c for c in record["cases"]}["c02"]
    assert "harness failed" in errored["passes"][0]["error"]


# -- bad input --------------------------------------------------------------------

def _one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""
    return lines[0]


def test_missing_cases_file(cli, tmp_path, flip_endpoint):
    line = _one_line_error(cli("probe", "session", "--endpoint", flip_endpoint.base_url,
                               "--cases", str(tmp_path / "nope.jsonl")))
    assert "nope.jsonl: not found" in line


def test_malformed_jsonl_line_is_named(cli, tmp_path, flip_endpoint):
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": \n')
    line = _one_line_error(cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases)))
    assert "line 2: not valid JSON" in line
    cases.write_text('{"id": "a", "prompt": "x", "messages": []}\n')
    line = _one_line_error(cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases)))
    assert "line 1" in line and "exactly one of" in line


def test_unreachable_endpoint(cli, tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl", n=2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    line = _one_line_error(cli("probe", "session", "--endpoint", f"http://127.0.0.1:{port}/v1", "--cases", str(cases)))
    assert f"127.0.0.1:{port}" in line and "cannot list models" in line


def test_several_models_need_a_choice(cli, tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl", n=2)
    with FlipEndpoint(models=("alpha", "beta")) as endpoint:
        line = _one_line_error(cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases)))
        assert "alpha, beta" in line and "--model" in line
        ok = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--model", "beta", "--json")
        assert ok.returncode == 0 and ok.json()["target"]["models"] == ["beta"]


@pytest.mark.parametrize("args, fragment", [
    (("probe", "sideways", "--endpoint", "http://127.0.0.1:9/v1", "--cases", "x"), "unknown axis"),
    (("probe", "session", "--cases", "x"), "--endpoint URL or --command CMD"),
    (("probe", "restart", "--endpoint", "http://127.0.0.1:9/v1", "--cases", "x"), "--restart CMD"),
    (("probe", "concurrency", "--endpoint", "http://127.0.0.1:9/v1", "--cases", "x"), "--load K"),
    (("probe", "redeploy", "--endpoint", "http://127.0.0.1:9/v1", "--cases", "x"), "--baseline"),
    (("probe", "hosts", "--endpoint", "http://127.0.0.1:9/v1", "--cases", "x"), "two or more --endpoint"),
    (("probe", "session", "--endpoint", "http://127.0.0.1:9/v1", "--cases", "x", "--compare", "outcome"), "--extract"),
    (("probe", "session", "--endpoint", "http://127.0.0.1:9/v1", "--cases", "x", "--repeats", "1"), "at least 2"),
    (("probe", "session", "--endpoint", "http://127.0.0.1:9/v1", "--cases", "x", "--extract", "sql:x"), "--extract"),
    (("probe", "merge", "probe-x"), "two or more"),
])
def test_usage_errors_are_one_line(cli, tmp_path, args, fragment):
    assert fragment in _one_line_error(cli(*args, cwd=tmp_path))


def test_no_case_completed_exits_2(cli, tmp_path, flip_endpoint):
    cases = write_cases(tmp_path / "cases.jsonl", {"c00": " [error]", "c01": " [error]"}, n=2)
    result = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--json",
                 "--retries", "0")
    assert result.returncode == 2
    record = result.json()
    assert (record["n"], record["errored"], record["agreement_rate"], record["ci95"]) == (0, 2, None, None)
    # still the documented record, saying that nothing was compared rather than a rate of 0
    assert record["m"] == 0 and record["flipped"] == []
    assert record["compare"]["output"] == {"m": 0, "n": 0, "rate": None, "ci95": None}
    assert record["scope"]["holds"] is None
    assert record["sentence"].startswith(
        "session agreement: no case completed on every pass (2 errored cases excluded from n)")
    assert [case["agree"] for case in record["cases"]] == [None, None]
    assert all(p["error"] for case in record["cases"] for p in case["passes"] if p is not None)
