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
