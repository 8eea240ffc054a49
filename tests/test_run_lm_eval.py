"""``execsys run`` around a real lm-evaluation-harness run against the real llama.cpp server."""

from __future__ import annotations

import json
from pathlib import Path

import blake3
import pytest

from tests.fixtures.common import run_cli

pytest_plugins = ["tests.fixtures.harness"]

# Each case starts real harness processes (lm-eval imports torch and datasets: ~45 s a run on 2 cores).
pytestmark = pytest.mark.timeout(900)

PLANTED_ARG_SECRET = "sk-planted-in-argv-7f3a9c"
PLANTED_ENV_SECRET = "planted-env-token-81d2e4"


def _ledger_text(project, ledger: Path) -> str:
    export = run_cli("ledger", "export", cwd=project.root, env=project.env(EXECSYS_LEDGER=str(ledger)))
    assert export.returncode == 0, export.stderr
    return export.stdout


def _hand_count(samples: Path) -> dict[int, float]:
    return {row["doc_id"]: row["exact_match"] for row in map(json.loads, samples.read_text().splitlines())}


def test_lm_eval_run_is_clean_carries_its_identity_and_compares_with_a_second_run(eval_project, ledger_path):
    project = eval_project
    argv = project.lm_eval_argv("out")
    # a credential planted in the command line (lm-eval takes api_key inside --model_args) and one in
    # the environment: neither may reach a sidecar or the ledger
    argv[argv.index("--model_args") + 1] += f",api_key={PLANTED_ARG_SECRET}"
    env = project.env(EXECSYS_LEDGER=str(ledger_path), EVAL_SERVICE_TOKEN=PLANTED_ENV_SECRET)
    result = run_cli("run", "--json", "--watch", "5", "--", *argv, cwd=project.root, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    record = json.loads(result.stdout)  # stdout is the record alone: lm-eval's table went to stderr
    assert "|tiny_qa|" in result.stderr.replace(" ", "")
    assert record["schema"] == "execsys.run/3" and record["verdict"] == "clean", record["verdict_detail"]
    assert record["gate_passed"] and not record["drifted"] and not record["failed"]
    assert record["verify_after"]["verdict"] == "same-system"
    assert record["identity"]["how"] == "pinned" and Path(record["identity"]["lock"]) == project.lock
    identity = json.loads(project.lock.read_text())["id"]
    assert record["identity"]["id"] == identity
    for line in ("✓ gate", "✓ identity", "✓ run", "✓ verify", "✓ results", "✓ record"):
        assert line in result.stderr

    by_name = {Path(r["path"]).name.split("_")[0]: r for r in record["results"]}
    assert set(by_name) == {"results", "samples"}, record["results"]
    assert {r["harness"] for r in record["results"]} == {"lm-eval"}
    results_file = Path(by_name["results"]["path"])
    samples_file = Path(by_name["samples"]["path"])
    assert results_file.parent.parent == project.root / "out"

    # the identity is inside lm-eval's own results JSON, where lm-eval put the --metadata we added
    lm_results = json.loads(results_file.read_text())
    assert lm_results["configs"]["tiny_qa"]["metadata"]["execsys"] == {"identity": identity, "run": record["id"]}

    # a sidecar beside the results and beside the samples, each naming its own file and digest
    for entry in record["results"]:
        path = Path(entry["path"])
        assert entry["blake3"] == blake3.blake3(path.read_bytes()).hexdigest()
        sidecar = json.loads(path.with_name(path.name + ".execsys.json").read_text())
        assert sidecar["id"] == record["id"] and sidecar["verdict"] == "clean"
        assert sidecar["result"] == entry and sidecar["identity"]["id"] == identity

    for path in [*project.root.glob("out/**/*.execsys.json")]:
        assert PLANTED_ARG_SECRET not in path.read_text() and PLANTED_ENV_SECRET not in path.read_text()
    ledger_text = _ledger_text(project, ledger_path)
    assert record["id"] in ledger_text
    assert PLANTED_ARG_SECRET not in ledger_text and PLANTED_ENV_SECRET not in ledger_text
    assert "api_key=<redacted>" in json.dumps(record["command"])

    listed = run_cli("ledger", "list", "--kind", "run", "--json", cwd=project.root, env=env).json()
    assert [(r["id"], r["verdict"]) for r in listed] == [(record["id"], "clean")]

    # a second run of the same system, then compare: the paired counts are the samples' own
    second = run_cli("run", "--json", "--watch", "0", "--", *project.lm_eval_argv("out2"), cwd=project.root,
                     env=env, timeout=600)
    assert second.returncode == 0, second.stderr[-4000:]
    record2 = json.loads(second.stdout)
    assert record2["identity"]["how"] == "verified" and record2["verdict"] == "clean"
    results2 = next(Path(r["path"]) for r in record2["results"] if Path(r["path"]).name.startswith("results_"))
    samples2 = next(results2.parent.glob("samples_tiny_qa_*.jsonl"))

    a, b = _hand_count(samples_file), _hand_count(samples2)
    assert set(a) == set(b) == set(range(6))
    hand_b = sum(1 for d in a if a[d] and not b[d])
    hand_c = sum(1 for d in a if b[d] and not a[d])
    for refs in ((str(results_file), str(results2)), (record["id"], record2["id"])):
        compared = run_cli("compare", *refs, "--json", cwd=project.root, env=env)
        assert compared.returncode in (0, 1), compared.stderr
        body = compared.json()
        assert body["paired"]["kind"] == "paired"
        assert (body["paired"]["n"], body["paired"]["b"], body["paired"]["c"]) == (6, hand_b, hand_c)
        assert body["a"]["rate"] == sum(a.values()) / 6
        assert body["identities"] == [identity]
        assert "no identity recorded" not in json.dumps(body["reasons"])

    # a copy of the first result, as if made without execsys run, attached afterwards: compare says so
    copied = project.root / "copied"
    copied.mkdir()
    for source in (results_file, samples_file):
        (copied / source.name).write_bytes(source.read_bytes())
    attached = run_cli("attach", *[str(p) for p in copied.iterdir()], "--json", cwd=project.root, env=env)
    assert attached.returncode == 0, attached.stderr
    assert attached.json()["attached_after"] is True
    compared = run_cli("compare", str(copied / results_file.name), str(results2), "--json", cwd=project.root,
                       env=env)
    assert compared.returncode == 1 and compared.json()["label"] == "descriptive"
    assert "identity recorded after the run for A (attached): descriptive only" in compared.json()["reasons"]
