"""Probes and plan runs under hostile inputs: bounded in time, refused before anything runs.

A ``command:`` extractor that never ends used to hold every output for 60 s whatever
``--timeout`` said (two passes of one case: two minutes); it now ends within the probe's
own ``--timeout``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("probe", ["session", "grader"])
def test_a_command_extractor_that_never_ends_honours_timeout(cli, tmp_path: Path, ledger_path: Path,
                                                            probe: str) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "c1", "prompt": "hi", "output": "x"}\n')
    if probe == "session":
        args = ["probe", "session", "--command", "echo 42", "--compare", "outcome"]
    else:
        (tmp_path / "execsys.toml").write_text('[grader]\ncommand = "echo correct"\n')
        args = ["probe", "grader", "--trust"]
    started = time.monotonic()
    result = cli(*args, "--cases", str(cases), "--extract", "command:sleep 1000", "--timeout", "1",
                 cwd=tmp_path, timeout=100)
    took = time.monotonic() - started
    assert took < 30, f"{took:.0f} s: the extractor waited past --timeout 1"
    assert result.returncode in (0, 1, 2) and "Traceback" not in result.stderr, result.stderr
    if probe == "grader":  # nothing graded: said in one line, as for any grader that gives no verdict
        assert result.returncode == 2 and "found no verdict" in result.stderr


@pytest.mark.parametrize(("flag", "value", "named"), [
    ("--arm-params", 'B={"temperature": NaN}', "--arm-params B: temperature"),
    ("--arm-params", 'A={"logit_bias": {"5": -Infinity}}', "--arm-params A: logit_bias.5"),
    ("--params", '{"stop": ["x", Infinity]}', "--params: stop[1]"),
])
def test_plan_run_refuses_nan_parameters_before_any_case_runs(cli, tmp_path: Path, ledger_path: Path,
                                                              flag: str, value: str, named: str) -> None:
    """Python's JSON reads NaN; no request body or executed log can hold it. It used to crash the run
    (exit 3) at its first case, the executed log already created; now: exit 2, one line, nothing sent
    to the endpoint, no log written."""
    from tests.fixtures.fake_http import JsonHandler, LoopbackServer

    requests: list[object] = []

    class Endpoint(JsonHandler):
        def do_GET(self) -> None:
            self.send_json({"object": "list", "data": [{"id": "m", "object": "model"}]})

        def do_POST(self) -> None:
            requests.append(self.read_json())
            self.send_json({"choices": [{"index": 0, "text": "nothing", "finish_reason": "stop"}]})

    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(f'{{"id": "c{i}", "prompt": "p{i}", "expected": "nothing"}}\n' for i in range(3)))
    assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(tmp_path / "plan.json"),
               cwd=tmp_path, timeout=60).returncode == 0
    with LoopbackServer(Endpoint) as server:
        result = cli("plan", "run", str(tmp_path / "plan.json"), "--arm", f"A={server.url()}",
                     "--arm", f"B={server.url()}", flag, value, cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert named in line and "NaN or infinite" in line
    assert requests == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.jsonl", "ledger.sqlite3", "plan.json"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("args", [
    ["probe", "grader", "--trust", "--timeout", "nan"],
    ["probe", "grader", "--trust", "--timeout", "1e309"],
    ["probe", "grader", "--trust", "--timeout", "1e12"],
    ["probe", "grader", "--trust", "--timeout", "0"],
    ["probe", "grader", "--trust", "--timeout", "-1"],
    ["probe", "grader", "--trust", "--repeats", "1000000000000"],
    ["probe", "session", "--command", "echo 1", "--repeats", "1000000000000"],
    ["probe", "session", "--endpoint", "http://127.0.0.1:9/v1", "--timeout", "1e12"],
    ["plan", "run", "plan.json", "--arm", "A=http://127.0.0.1:9/v1", "--arm", "B=http://127.0.0.1:9/v1",
     "--timeout", "1e12"],
    ["plan", "run", "plan.json", "--arm", "A=http://127.0.0.1:9/v1", "--arm", "B=http://127.0.0.1:9/v1",
     "--timeout", "inf"],
], ids=["grader-timeout-nan", "grader-timeout-inf", "grader-timeout-1e12", "grader-timeout-0", "grader-timeout-neg",
        "grader-repeats-1e12", "session-repeats-1e12", "session-timeout-1e12", "plan-timeout-1e12", "plan-timeout-inf"])
def test_numbers_no_clock_or_memory_can_hold_are_refused_up_front(cli, tmp_path: Path, ledger_path: Path,
                                                                  args: list[str]) -> None:
    """Each was exit 3 (ValueError/OverflowError from select() or httpx, MemoryError), 1.2 GB in 10 s
    (a trillion passes planned), or silently another value (``--timeout 0`` became 120 s, ``-1``
    graded nothing): now exit 2, one line, before any case is sent or recorded."""
    (tmp_path / "execsys.toml").write_text('[grader]\ncommand = "echo correct"\n')
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "c1", "prompt": "p", "output": "o", "expected": "nothing"}\n')
    if args[0] == "plan":
        assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", "plan.json",
                   cwd=tmp_path, timeout=60).returncode == 0
    else:
        args = [*args, "--cases", str(cases)]
    started = time.monotonic()
    result = cli(*args, cwd=tmp_path, timeout=100)
    assert time.monotonic() - started < 60
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])
    [line] = result.stderr.strip().splitlines()
    assert "--timeout" in line or "--repeats" in line, line


def test_an_age_older_than_any_date_is_since_the_beginning(cli, tmp_path: Path, ledger_path: Path) -> None:
    assert cli("pin", cwd=tmp_path, timeout=60).returncode == 0
    result = cli("fleet", "--ledger-since", "100000000000d", "--json", cwd=tmp_path, timeout=60)
    assert result.returncode in (0, 1), result.stderr  # was OverflowError, exit 3
    assert "internal error" not in result.stderr
