"""Probe arithmetic pinned exactly against the purpose-built flip endpoint (real HTTP on loopback).

The endpoint answers deterministically except where a prompt carries a marker, so the
expected m/n, interval, errored count and flipped ids are known in advance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.canonical import content_id
from execsys.ledger import Ledger

from .fixtures.llama import FlipEndpoint

FLIPPED = {f"c{i:02d}" for i in range(20) if i % 5 in (1, 3)}  # 8 of 20


def write_cases(path: Path, markers: dict[str, str] | None = None, n: int = 20, chat: set[str] | None = None) -> Path:
    markers = markers or {}
    chat = chat or set()
    with path.open("w") as handle:
        for i in range(n):
            case_id = f"c{i:02d}"
            prompt = f"question {i}{markers.get(case_id, '')}"
            if case_id in chat:
                handle.write(json.dumps({"id": case_id, "messages": [{"role": "user", "content": prompt}]}) + "\n")
            else:
                handle.write(json.dumps({"id": case_id, "prompt": prompt, "max_tokens": 16}) + "\n")
    return path


def write_lock(path: Path, budget: dict) -> str:
    from execsys import COMPONENTS

    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["budget"]["declared"] = budget
    identity = content_id(components)
    path.write_text(json.dumps({"schema": "execsys.identity/1", "id": identity, "recorded_at": "2026-11-30T00:00:00Z",
                                "declaration": {}, "components": components, "notes": []}))
    return identity


def test_eight_of_twenty_flipped_is_twelve_of_twenty(cli, tmp_path, flip_endpoint):
    cases = write_cases(tmp_path / "cases.jsonl", {c: " [flip]" for c in FLIPPED})
    result = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--json")
    assert result.returncode == 1, result.stderr
    record = result.json()
    assert record["schema"] == "execsys.probe/2"
    assert (record["m"], record["n"], record["errored"]) == (12, 20, 0)
    assert record["agreement_rate"] == pytest.approx(0.60)
    assert [round(x, 2) for x in record["ci95"]] == [0.39, 0.78]
    assert set(record["flipped"]) == FLIPPED
    for case in record["cases"]:
        assert case["agree"] == (case["id"] not in FLIPPED)
        assert len(case["passes"]) == 2
        if case["id"] in FLIPPED:
            # "... the answer is 54." vs "... the answer is 55.": located at the first differing character
            prompt = f"question {int(case['id'][1:])} [flip]"
            a, b = FlipEndpoint.answer(prompt, 1), FlipEndpoint.answer(prompt, 2)
            expected = next(i for i in range(len(a)) if a[i] != b[i])
            assert expected > len(f"For '{prompt}' the answer is ") - 1
            assert case["first_divergence"]["char"] == expected
            assert case["first_divergence"]["a"].endswith(a[expected - 12:]) or a[expected:] in case["first_divergence"]["a"]
    for key in ("axis", "identity", "target", "n", "m", "agreement_rate", "ci95", "compare", "errored", "flipped",
                "cases", "started_at", "finished_at", "scope"):
        assert key in record
    assert record["scope"]["holds"] is False
    # each pass sent every case exactly once
    assert flip_endpoint.total_calls == 40


def test_human_output_is_one_sentence_then_flips_side_by_side(cli, tmp_path, flip_endpoint):
    cases = write_cases(tmp_path / "cases.jsonl", {c: " [flip]" for c in FLIPPED})
    result = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases))
    assert result.returncode == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith("session agreement 12/20 = 0.60 (95% CI 0.39–0.78) — unstable within one session")
    assert "flipped cases (8)" in result.stdout
    assert "c01" in result.stdout and "c00 " not in result.stdout
    assert "pass A" in result.stderr and "pass B" in result.stderr  # progress goes to stderr


def test_errored_cases_are_excluded_from_n_and_counted(cli, tmp_path, flip_endpoint):
    markers = {c: " [flip]" for c in FLIPPED}
    markers.update({"c00": " [error]", "c01": " [error]"})  # c01 would have flipped: not counted either way
    cases = write_cases(tmp_path / "cases.jsonl", markers)
    result = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases),
                 "--retries", "1", "--json")
    record = result.json()
    assert (record["n"], record["errored"]) == (18, 2)
    assert record["m"] == 11  # 18 completed, 7 of them flipped
    assert sorted(record["errored_cases"]) == ["c00", "c01"]
    assert "c01" not in record["flipped"]
    errored = {c["id"]: c for c in record["cases"]}["c00"]
    assert errored["agree"] is None and "HTTP 500" in errored["passes"][0]["error"]
    assert "errored cases excluded from n" in record["sentence"]


def test_outcome_level_agrees_where_only_the_wording_moved(cli, tmp_path, flip_endpoint):
    markers = {f"c{i:02d}": " [flipnum]" for i in range(6)}  # text changes, last number does not
    markers.update({f"c{i:02d}": " [flip]" for i in range(6, 8)})  # both change
    cases = write_cases(tmp_path / "cases.jsonl", markers, n=10)
    base = ("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--json",
            "--extract", "last-number")
    by_output = cli(*base).json()
    assert by_output["compare"]["level"] == "output"
    assert (by_output["m"], by_output["n"]) == (2, 10)
    assert by_output["compare"]["output"]["m"] == 2
    assert by_output["compare"]["outcome"]["m"] == 8
    assert by_output["compare"]["outcome"]["extract"] == "last-number"
    with FlipEndpoint() as fresh:  # call counts start again: the same flips happen on the second pass
        by_outcome = cli("probe", "session", "--endpoint", fresh.base_url, "--cases", str(cases), "--json",
                         "--extract", "last-number", "--compare", "outcome")
    record = by_outcome.json()
    assert (record["m"], record["n"]) == (8, 10)
    assert sorted(record["flipped"]) == ["c06", "c07"]
    assert record["sentence"].startswith("session outcome agreement 8/10 = 0.80")
    assert by_outcome.returncode == 1


def test_regex_and_json_extractors():
    from execsys.probes.compare import parse_extractor

    assert parse_extractor(r"regex:answer is (\d+)")("the answer is 41, no, the answer is 42") == "42"
    assert parse_extractor("json:$.result.values[1]")('noise {"result": {"values": [3, 7]}} tail') == "7"
    assert parse_extractor("last-number")("between 1,000 and 2,500.0") == "2500"
    assert parse_extractor("command:tr a-z A-Z")("yes") == "YES"
    assert parse_extractor("regex:(x)")("none here") is None


def test_repeats_counts_distinct_outputs(cli, tmp_path, flip_endpoint):
    cases = write_cases(tmp_path / "cases.jsonl", {"c00": " [flip]"}, n=4)
    record = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases),
                 "--repeats", "4", "--json").json()
    assert record["repeats"] == 4 and len(record["passes"]) == 4
    assert (record["m"], record["n"]) == (3, 4)
    by_id = {c["id"]: c for c in record["cases"]}
    assert by_id["c00"]["distinct"] == 2  # first answer, then the same flipped answer on calls 2..4
    assert by_id["c01"]["distinct"] == 1
    assert all(len(c["passes"]) == 4 for c in record["cases"])
    # later passes run in seeded, recorded orders that differ from the pass before
    orders = [p["order"] for p in record["passes"]]
    assert orders == ["file", "shuffled", "shuffled", "shuffled"]


def test_repeats_say_how_many_distinct_outputs_each_case_gave(cli, tmp_path, flip_endpoint):
    # one output per case over three passes: one distinct output per case, not "20 distinct outputs"
    steady = write_cases(tmp_path / "steady.jsonl", n=20)
    human = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(steady), "--repeats", "3")
    assert human.returncode == 0, human.stderr
    assert "3 passes: 1 distinct output per case (20 cases)" in human.stdout, human.stdout
    assert "distinct outputs over" not in human.stdout
    # two cases that flip from their second call on: two distinct outputs each, the rest one
    mixed = write_cases(tmp_path / "mixed.jsonl", {"c00": " [flip]", "c03": " [flip]"}, n=5)
    human = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(mixed), "--repeats", "3")
    assert human.returncode == 1, human.stderr
    assert "3 passes: 1-2 distinct outputs per case (5 cases: 3 with 1, 2 with 2)" in human.stdout, human.stdout


def test_ledger_rows_and_identity_from_lock(cli, tmp_path, flip_endpoint, ledger_path):
    cases = write_cases(tmp_path / "cases.jsonl", {c: " [flip]" for c in FLIPPED}, chat={"c02", "c03"})
    identity = write_lock(tmp_path / "execsys.lock.json", {"temperature": 0.0, "seed": 7, "max_tokens": 9})
    result = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--json",
                 cwd=tmp_path)
    record = result.json()
    assert record["identity"] == identity
    assert record["decoding"] == {"temperature": 0.0, "seed": 7, "max_tokens": 9}
    sent = flip_endpoint.bodies["question 0"]
    assert (sent["temperature"], sent["seed"], sent["max_tokens"], sent["model"]) == (0.0, 7, 16, "fake")
    assert "messages" in flip_endpoint.bodies["question 2"]  # chat cases go to /v1/chat/completions
    with Ledger.open(ledger_path) as ledger:
        runs = ledger.find(kind="probe-run")
        assert len(runs) == 1
        rows = ledger.find(kind="probe-case", parent=runs[0].id)
        assert len(rows) == 40
        assert sorted(r.key for r in rows) == sorted(f"{p}:c{i:02d}" for p in (0, 1) for i in range(20))
        final = ledger.find(kind="probe")
        assert len(final) == 1 and final[0].identity == identity and final[0].id == record["id"]
        assert final[0].body["m"] == 12


def test_seeded_sample_of_n(cli, tmp_path, flip_endpoint):
    cases = write_cases(tmp_path / "cases.jsonl")
    first = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--n", "5",
                "--json").json()
    assert [c["id"] for c in first["cases"]] == ["c00", "c01", "c02", "c03", "c04"]
    a = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--n", "5",
            "--sample", "3", "--json").json()
    b = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--n", "5",
            "--sample", "3", "--json").json()
    assert [c["id"] for c in a["cases"]] == [c["id"] for c in b["cases"]] != [c["id"] for c in first["cases"]]
    assert a["n"] == 5


def test_api_key_is_sent_but_never_recorded(cli, tmp_path, ledger_path):
    secret = "sk-probe-test-0123456789abcdef"
    with FlipEndpoint() as endpoint:
        cases = write_cases(tmp_path / "cases.jsonl", n=3)
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                     "--api-key-env", "PROBE_TEST_KEY", env={"PROBE_TEST_KEY": secret})
        assert result.returncode == 0, result.stderr
        assert endpoint.last_authorization == f"Bearer {secret}"
    assert secret not in result.stdout and secret not in result.stderr
    assert result.json()["target"]["api_key_env"] == "PROBE_TEST_KEY"
    assert secret.encode() not in ledger_path.read_bytes()


RESTARTABLE_HARNESS = r'''
import json, os, sys
case = json.load(sys.stdin)
restarted = os.path.exists(sys.argv[1])
print(case["prompt"].upper() + ("!" if restarted and case["id"] in ("c01", "c04") else ""))
'''


def test_restart_axis_arithmetic_with_a_command_target(cli, tmp_path):
    harness = tmp_path / "harness.py"
    harness.write_text(RESTARTABLE_HARNESS)
    marker = tmp_path / "restarted"
    cases = write_cases(tmp_path / "cases.jsonl", n=5)
    result = cli("probe", "restart", "--command", f"python3 {harness} {marker}", "--cases", str(cases), "--json",
                 "--restart", f"touch {marker}")
    record = result.json()
    assert result.returncode == 1, result.stderr
    assert (record["m"], record["n"]) == (3, 5) and record["flipped"] == ["c01", "c04"]
    assert record["sentence"].startswith("restart agreement 3/5 = 0.60")
    assert "unstable across restarts: scope comparisons to one session" in record["sentence"]
    assert record["cases"][1]["first_divergence"]["char"] == len("QUESTION 1")


def test_the_one_fold_excludes_errored_cases_and_locates_the_first_differing_pass():
    """The fold that the runner, probe merge and the TUI share, against a hand count."""
    from execsys.probes.agreement import AgreementFold, Slot, judge

    same, other = Slot("d1", "7", None), Slot("d2", "7", None)
    assert judge([same, same, other], outcomes=True).first_differing == 2
    assert judge([same, other], level="outcome", outcomes=True).agree is True  # same outcome, other bytes
    assert judge([same, Slot(None, None, "HTTP 500")]).errored
    assert judge([same, None]).errored  # not run on a pass: excluded too
    seen = []
    fold = AgreementFold(divergence=lambda case_id, k: seen.append((case_id, k)) or {"pass": k})
    for case_id, slots in (("a", [same, same]), ("b", [same, other]), ("c", [same, Slot(None, None, "x")]),
                           ("d", [other, other])):
        fold.add(case_id, slots)
    assert (fold.m, fold.n, fold.errored, fold.flipped, fold.errored_cases) == (2, 3, 1, ["b"], ["c"])
    assert seen == [("b", 1)]  # texts are read only for a case that differs
    assert fold.tally().text() == "2/3 = 0.67 (95% CI 0.21–0.94)"


def test_one_rate_formatter_with_one_dash():
    from execsys.stats import RANGE_DASH, rate_with_ci

    assert rate_with_ci(12, 20) == "12/20 = 0.60 (95% CI 0.39–0.78)"
    assert rate_with_ci(20, 20, [0.84, 1.0]) == "20/20 = 1.00 (95% CI 0.84–1.00)"
    assert rate_with_ci(0, 0) == "0/0"
    assert RANGE_DASH == "\u2013"
