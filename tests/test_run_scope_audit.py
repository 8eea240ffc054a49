"""``execsys scope --audit`` includes comparisons between evaluation runs (``compare run-A run-B``)."""

from __future__ import annotations

import json
import sys

from tests.fixtures.common import run_cli

HARNESS = r'''
import json, sys
outcomes = {f"case-{i}": c == "1" for i, c in enumerate(sys.argv[2])}
open(sys.argv[1], "w").write(json.dumps({"schema": "execsys.result/1", "identity": "execsys.lock.json",
                                         "outcomes": outcomes}))
'''


def test_a_comparison_between_two_runs_is_recorded_and_audited(tmp_path, ledger_path):
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    runs = []
    for name, outcomes in (("a.json", "1101"), ("b.json", "1001")):
        result = run_cli("run", "--json", "--watch", "0", "--result", name, "--", sys.executable, str(script),
                         name, outcomes, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        runs.append(json.loads(result.stdout)["id"])
    compared = run_cli("compare", runs[0], runs[1], "--json", cwd=tmp_path)
    assert compared.returncode == 1, compared.stderr  # two runs, no intervention declared: descriptive
    body = compared.json()
    assert (body["a"]["run"], body["b"]["run"]) == tuple(runs)
    assert (body["paired"]["n"], body["paired"]["b"], body["paired"]["c"]) == (4, 1, 0)
    assert "restart" in body["crossed"]  # two runs are two sessions

    audited = run_cli("scope", "--audit", "--json", cwd=tmp_path)
    assert audited.returncode in (0, 1), audited.stderr
    [finding] = audited.json()["comparisons"]
    assert finding["comparison"] == body["record"] and finding["runs"] == runs
    assert f"between runs {runs[0]} and {runs[1]}" in finding["statement"]


def test_recent_runs_lists_the_newest_first_with_verdicts(tmp_path, ledger_path):
    from execsys.ledger import Ledger
    from execsys.run.history import recent_runs

    first = run_cli("run", "--json", "--watch", "0", "--", "true", cwd=tmp_path)
    second = run_cli("run", "--json", "--watch", "0", "--", "false", cwd=tmp_path)
    assert (first.returncode, second.returncode) == (0, 1)
    with Ledger.open(ledger_path) as ledger:
        runs = recent_runs(ledger)
    assert [(r.id, r.verdict) for r in runs] == [(second.json()["id"], "failed"), (first.json()["id"], "clean")]
    assert runs[0].verdict_detail == "failed: the harness exited 1"


def test_a_result_edited_after_its_run_is_named_and_not_causal(tmp_path, ledger_path):
    """The sidecar and the run record keep the result's BLAKE3; compare re-checks it on every read."""
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    runs = []
    for name, outcomes in (("a.json", "1101"), ("b.json", "1001")):
        result = run_cli("run", "--json", "--watch", "0", "--result", name, "--", sys.executable, str(script),
                         name, outcomes, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        runs.append(result.json()["id"])
    edited = tmp_path / "b.json"
    data = json.loads(edited.read_text())
    data["outcomes"]["case-1"] = True  # a better number, after the fact
    edited.write_text(json.dumps(data))
    for refs in ((str(tmp_path / "a.json"), str(edited)), (runs[0], runs[1])):
        compared = run_cli("compare", *refs, "--intervention", "runtime", "--json", "--no-record", cwd=tmp_path)
        assert compared.returncode == 1, compared.stderr
        body = compared.json()
        assert body["label"] == "descriptive"
        [changed] = [r for r in body["reasons"] if "changed after" in r]
        assert changed.startswith(f"B's result {edited} changed after {runs[1]} recorded it (BLAKE3 ")
        assert "A's result" not in " ".join(body["reasons"])
    human = run_cli("compare", str(tmp_path / "a.json"), str(edited), "--no-record", cwd=tmp_path)
    assert human.returncode == 1 and "changed after" in human.stdout


def test_the_audit_derives_what_moved_from_the_identities_of_a_recorded_causal_comparison(tmp_path, ledger_path):
    """Comparisons recorded causal by an earlier execsys, whose identities do not back the intervention."""
    from execsys.ledger import Ledger
    from tests.fixtures.compare_records import OUT_A, OUT_B, write_lock

    base = write_lock(tmp_path / "base.lock.json", runtime={"engine": "vllm", "version": "0.10.0"})
    other = write_lock(tmp_path / "other.lock.json", runtime={"engine": "vllm", "version": "0.11.0"})
    with Ledger.open(ledger_path) as ledger:
        for lock in ("base", "other"):
            data = json.loads((tmp_path / f"{lock}.lock.json").read_text())
            ledger.append("identity", data, identity=data["id"])
        outcomes = {case: {"A": {"correct": OUT_A[case]}, "B": {"correct": OUT_B[case]}} for case in OUT_A}
        plan_run = ledger.append("plan-run", {"arms": {"A": {}, "B": {}}, "outcomes": outcomes, "checks": []},
                                 identity=base)

        def recorded(a: str, b: str, intervention: list[str], paired: bool, refs=("a.json", "b.json")) -> str:
            sides = [{"ref": ref, "identity": ident, "session": "s1", "run": None}
                     for ref, ident in zip(refs, (a, b), strict=True)]
            return ledger.append("comparison", {"schema": "execsys.comparison/1", "a": sides[0], "b": sides[1],
                                                "identities": sorted({a, b}), "moved": intervention,
                                                "intervention": intervention, "crossed": [], "label": "causal",
                                                "reasons": [], "paired_control": paired}, identity=a)

        wrong = recorded(base, other, ["budget"], False)
        right = recorded(base, other, ["runtime"], False)
        one_identity = recorded(base, base, ["budget"], True, refs=(f"{plan_run}:A", f"{plan_run}:B"))
    audited = run_cli("scope", "--audit", "--json", cwd=tmp_path)
    assert audited.returncode == 1, audited.stderr
    found = {c["comparison"]: c for c in audited.json()["comparisons"]}
    assert found[right]["verdict"] == "ok"
    assert found[wrong]["verdict"] == "not causal"
    assert "you named budget; what moved: runtime" in found[wrong]["statement"]
    assert found[one_identity]["verdict"] == "not causal"
    assert "identities were not observed" in found[one_identity]["statement"]
    human = run_cli("scope", "--audit", cwd=tmp_path)
    assert "you named budget; what moved: runtime" in human.stdout
