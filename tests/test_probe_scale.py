"""Large probes: the per-case results live beside the record, and nothing a user sees changes.

Above ``CASES_INLINE_LIMIT`` cases a probe writes each case's result as a ``probe-result`` ledger
row and stores the ``probe`` row without ``cases`` (``cases_in_ledger: true``) so its memory
stays flat in n. These tests lower the limit to 5 (so 20 cases take the large path) and check,
against the real flip endpoint on loopback, that ``--json`` still prints every case exactly as
``print_json`` would, that compare and a redeploy baseline read the cases back, and that an
interrupted or half-finished probe resumes losing and double-counting nothing. The 50,000-case
figures are in benchmarks/bench_probe_scale.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from execsys.ledger import Ledger

from .fixtures.llama import FlipEndpoint
from .test_probe_arithmetic import FLIPPED, write_cases

# The real CLI in its own process, with the inline limit lowered so 20 cases count as "large".
_LARGE_CLI = ("import sys, execsys.probes.runner as engine; engine.CASES_INLINE_LIMIT = 5; "
              "from execsys.cli import main; sys.exit(main(sys.argv[1:]))")


def cli_large(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LARGE_CLI, *args], capture_output=True, text=True, timeout=120)


def test_large_probe_prints_every_case_and_keeps_them_beside_the_record(cli, tmp_path, flip_endpoint, ledger_path):
    from execsys.probes.record import load_case_results

    cases = write_cases(tmp_path / "cases.jsonl", {c: " [flip]" for c in FLIPPED})
    result = cli_large("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--json")
    assert result.returncode == 1, result.stderr
    # byte for byte what print_json prints (indent 2, one trailing newline)
    record = json.loads(result.stdout)
    assert result.stdout == json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    assert (record["m"], record["n"], record["errored"]) == (12, 20, 0)
    assert [c["id"] for c in record["cases"]] == [f"c{i:02d}" for i in range(20)]
    for case in record["cases"]:
        assert case["agree"] == (case["id"] not in FLIPPED)
        assert len(case["passes"]) == 2 and all(p["digest"] for p in case["passes"])
        assert (case["first_divergence"] is not None) == (case["id"] in FLIPPED)
    # the same fields as a small probe's record
    small = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(write_cases(
        tmp_path / "small.jsonl", n=3)), "--json").json()
    assert set(record) == set(small) and "cases_in_ledger" not in record

    with Ledger.open(ledger_path) as ledger:
        stored = ledger.get(record["id"])
        assert "cases" not in stored.body and stored.body["cases_in_ledger"] is True
        assert ledger.count(kind="probe-case", parent=record["run"]) == 40
        assert ledger.count(kind="probe-result", parent=record["run"]) == 20
        assert ledger.child(record["run"], "result:c03").body["agree"] is False
        assert [c.to_json() for c in load_case_results(ledger, stored)] == record["cases"]
        assert len(load_case_results(ledger, stored)) == 20
        small_row = ledger.get(small["id"])  # a small probe keeps its cases in the row, as before
        assert len(small_row.body["cases"]) == 3 and "cases_in_ledger" not in small_row.body
        assert ledger.count(kind="probe-result", parent=small["run"]) == 0


def test_human_output_of_a_large_probe_shows_the_flips(tmp_path, flip_endpoint, ledger_path):
    cases = write_cases(tmp_path / "cases.jsonl", {c: " [flip]" for c in FLIPPED})
    result = cli_large("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases))
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("session agreement 12/20 = 0.60")
    assert "c01" in result.stdout and "char " in result.stdout


def test_compare_and_a_redeploy_baseline_read_a_large_record(tmp_path, flip_endpoint, ledger_path):
    from execsys.compare import load_result

    cases = write_cases(tmp_path / "cases.jsonl", {c: " [flip]" for c in FLIPPED})
    first = cli_large("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--json")
    baseline = json.loads(first.stdout)
    with Ledger.open(ledger_path) as ledger:
        outcomes = load_result(f"{baseline['id']}:1", ledger).outcomes
    assert sorted(outcomes) == [f"c{i:02d}" for i in range(20)]
    assert outcomes["c01"] == baseline["cases"][1]["passes"][1]["digest"]

    # the fresh pass is the endpoint's 3rd call: the flip cases answer differently from the baseline's 1st
    redeploy = cli_large("probe", "redeploy", "--endpoint", flip_endpoint.base_url, "--cases", str(cases),
                         "--baseline", baseline["id"], "--json")
    assert redeploy.returncode == 1, redeploy.stderr
    record = json.loads(redeploy.stdout)
    assert (record["m"], record["n"]) == (12, 20) and set(record["flipped"]) == FLIPPED
    assert [c["passes"][0]["digest"] for c in record["cases"]] == [c["passes"][0]["digest"] for c in baseline["cases"]]


def test_large_probe_interrupted_then_resumed_loses_and_double_counts_nothing(tmp_path, ledger_path, monkeypatch):
    from execsys.probes import runner
    from execsys.probes.runner import CaseDone, ProbeInterrupted, ProbeOptions, run_probe

    monkeypatch.setattr(runner, "CASES_INLINE_LIMIT", 5)
    cases = write_cases(tmp_path / "cases.jsonl", {c: " [flip]" for c in FLIPPED})
    cancel = threading.Event()

    def on_event(event) -> None:
        if isinstance(event, CaseDone) and event.pass_index == 1 and event.done == 6:
            cancel.set()

    def options(resume) -> ProbeOptions:
        return ProbeOptions(axis="session", endpoints=[endpoint.base_url], cases=cases, concurrency=3, resume=resume,
                            ledger=ledger_path)

    with FlipEndpoint(delay=0.02) as endpoint, Ledger.open(ledger_path) as ledger:
        with pytest.raises(ProbeInterrupted) as info:
            run_probe(options(False), on_event=on_event, cancel=cancel)
        run_id = info.value.run_id
        assert 26 <= ledger.count(kind="probe-case", parent=run_id) < 40  # stopped inside pass B

        # finishing fails once after the case results were written but before the final record
        real_append = Ledger.append

        def failing_append(self, kind, body, **kwargs):
            if kind == "probe":
                raise OSError("disk full")
            return real_append(self, kind, body, **kwargs)

        monkeypatch.setattr(Ledger, "append", failing_append)
        with pytest.raises(OSError):
            run_probe(options(run_id))
        monkeypatch.setattr(Ledger, "append", real_append)
        assert ledger.count(kind="probe-result", parent=run_id) == 20
        assert ledger.child(run_id, "final") is None

        record = run_probe(options(run_id))
        assert (record.m, record.n, record.run) == (12, 20, run_id) and set(record.flipped) == FLIPPED
        assert endpoint.total_calls == 40  # every case once per pass, none sent twice
        rows = [(r.key, r.kind) for r in ledger.iter(parent=run_id) if r.kind in ("probe-case", "probe-result")]
        assert len(rows) == len(set(rows)) == 60
        assert [c.id for c in record.cases] == [f"c{i:02d}" for i in range(20)]

        # asking again returns the stored record, its cases read back from the ledger
        again = run_probe(options(run_id))
        assert again.id == record.id and again.cases_in_ledger
        assert [c.to_json() for c in again.cases] == [c.to_json() for c in record.cases]
        assert endpoint.total_calls == 40
