"""``execsys shards`` and the shard a run records: the decision logic on real ledgers and real pins.

The identities are real pins of small declarations (a model name each, so two declarations are two
systems); the run records are the records ``execsys run`` writes (:class:`RunRecord`), put in a
real ledger or a real sidecar. The Slurm job array end to end is in tests/test_slurm.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from execsys.canonical import content_id
from execsys.declaration import parse
from execsys.errors import InputError, UsageError
from execsys.identity import Identity, pin, record_identity
from execsys.ledger import Ledger
from execsys.run.record import RunRecord
from execsys.run.shard import Shard, parse_flag, shard_from
from execsys.shards import ShardsOptions
from execsys.shards import run as run_shards
from tests.fixtures.common import run_cli


@pytest.fixture(scope="module")
def systems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Identity]:
    """Two systems (model tiny, model other) and a third: tiny pinned on another node (its hostname,
    machine id and GPU UUIDs differ, nothing else)."""
    base = tmp_path_factory.mktemp("decls")
    pinned = {}
    for name in ("tiny", "other"):  # one directory: the harness (the declaration's own) is one
        path = base / f"{name}.toml"
        path.write_text(f'[model]\nname = "{name}"\n')
        pinned[name] = pin(parse(path.read_text(), path))

    def on_node(identity: Identity, node: str) -> Identity:
        components = copy.deepcopy(identity.components)
        observed = components["hardware"]["observed"]
        observed["hostname"], observed["machine_id"] = f"node-{node}", node * 32
        observed["gpus"] = [{"name": "NVIDIA H200", "uuid": f"GPU-{node * 8}", "pci_bus_id": f"0000:{node}a:00.0"}]
        return Identity(id=content_id(components), recorded_at="", components=components)

    return {"tiny": on_node(pinned["tiny"], "a"), "other": on_node(pinned["other"], "a"),
            "tiny-node-b": on_node(pinned["tiny"], "b")}


def _record(index: int | None, identity: Identity | None, *, count: int | None = 4, job: str | None = "4242",
            verdict: str = "clean", finished: str = "2026-12-03T10:00:00Z") -> dict:
    record = RunRecord(id=f"run-{job}-{index}-{finished[11:19].replace(':', '')}-{identity.id[:6] if identity else 'x'}",
                       command=["python3", "eval.py"], cwd="/work", identity_id=identity.id if identity else None,
                       identity_how="verified", exit_code=0, finished_at=finished,
                       shard=None if index is None else Shard(index, count, "slurm", job).to_json())
    if verdict == "drifted":
        record.drift = [{"at": "2026-12-03T10:00:01Z", "component": "runtime", "before": "a", "after": "b"}]
    if verdict == "failed":
        record.exit_code = 3
    return record.to_json()


def _ledger(path: Path, identities: list[Identity], runs: list[dict]) -> list[str]:
    with Ledger.open(path) as ledger:
        for identity in identities:
            record_identity(identity, ledger)
        return [ledger.append("run", body, identity=body["identity"]["id"], record_id=body["id"]) for body in runs]


def _report(tmp_path: Path, systems: dict, runs: list[dict], *, known=("tiny", "other", "tiny-node-b"), **options):
    ledger = tmp_path / "ledger.sqlite3"
    ids = _ledger(ledger, [systems[k] for k in known], runs)
    return run_shards(ShardsOptions.from_sources(None, None, runs=options.pop("runs", ids), ledger_path=str(ledger),
                                                 **options))


# -- the shard a run records ---------------------------------------------------------------------

def test_a_slurm_array_task_is_its_shard_of_the_array_and_the_array_job_ties_them():
    env = {"SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4",
           "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "1", "SLURM_JOB_ID": "4246"}
    assert shard_from(None, env) == Shard(3, 4, "slurm", "4242", "3")
    # --array=1-4 is shards 0-3; --array=0-12:4 too
    assert shard_from(None, {**env, "SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1"}) == Shard(3, 4, "slurm",
                                                                                                     "4242", "4")
    assert shard_from(None, {**env, "SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_STEP": "4"}) == Shard(2, 4, "slurm",
                                                                                                      "4242", "8")
    assert shard_from("3/4@mine", env) == Shard(3, 4, "slurm", "mine", "3")
    with pytest.raises(UsageError, match="Slurm array task 3"):
        shard_from("1/4", env)


def test_an_indexed_job_takes_its_index_from_kubernetes_and_n_from_the_flag():
    assert shard_from(None, {"JOB_COMPLETION_INDEX": "5"}) == Shard(5, None, "kubernetes", None)
    assert shard_from("5/8@eval-x", {"JOB_COMPLETION_INDEX": "5"}) == Shard(5, 8, "kubernetes", "eval-x")
    with pytest.raises(UsageError, match="JOB_COMPLETION_INDEX"):
        shard_from("4/8", {"JOB_COMPLETION_INDEX": "5"})
    assert shard_from("0/2", {}) == Shard(0, 2, "flag", None)
    assert shard_from(None, {}) is None


@pytest.mark.parametrize("flag", ["4/4", "-1/4", "a/4", "1/b", "3", "1/0", "1/4@", "1.5/4"])
def test_a_bad_shard_flag_is_refused(flag):
    with pytest.raises(UsageError, match="--shard"):
        parse_flag(flag)


def test_run_records_the_shard_and_refuses_a_bad_one_in_one_line(tmp_path, ledger_path):
    (tmp_path / "execsys.toml").write_text('[model]\nname = "tiny"\n')
    no_scheduler = {"SLURM_ARRAY_TASK_ID": "", "JOB_COMPLETION_INDEX": ""}  # should the suite run inside a job
    bad = run_cli("run", "--shard", "4/4", "--gate", "off", "--", "true", cwd=tmp_path, env=no_scheduler)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "K must be 0 to 3" in bad.stderr
    good = run_cli("run", "--json", "--shard", "1/4@ev", "--gate", "off", "--watch", "0", "--", "true", cwd=tmp_path,
                   env=no_scheduler)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["shard"] == {"index": 1, "count": 4, "source": "flag", "job": "ev"}


# -- the answer ----------------------------------------------------------------------------------

def test_every_shard_present_clean_and_of_one_system_is_one_evaluation(tmp_path, systems):
    report = _report(tmp_path, systems, [_record(i, systems["tiny"]) for i in range(4)])
    assert report.exit_code == 0 and report.reasons() == []
    body = report.to_json()
    assert body["shards"] == {"present": 4, "expected": 4, "expected_source": "the shards' own count",
                              "indices": [0, 1, 2, 3], "missing": []}
    assert body["identity_agreement"]["k"] == 4 and body["verdict"] == "one evaluation" and body["job"] == "4242"


def test_a_missing_shard_is_named(tmp_path, systems):
    report = _report(tmp_path, systems, [_record(i, systems["tiny"]) for i in (0, 1, 3)])
    assert report.exit_code == 1 and report.missing == [2]
    assert report.reasons() == ["1 of 4 shards missing: 2"]


def test_an_outlier_is_named_with_the_component_and_field_that_differ(tmp_path, systems):
    runs = [_record(i, systems["other" if i == 1 else "tiny"]) for i in range(4)]
    report = _report(tmp_path, systems, runs)
    assert report.exit_code == 1
    [outlier] = report.outliers()
    assert outlier["index"] == 1 and outlier["identity"] == systems["other"].id
    assert outlier["components"] == ["model"]
    assert outlier["changes"][0]["fields"] == ["declared.name: tiny -> other"]
    assert "shard 1 ran another system: model" in report.reasons()


def test_shards_on_two_nodes_of_one_build_agree_by_the_fleet_rule(tmp_path, systems):
    assert systems["tiny"].id != systems["tiny-node-b"].id  # two execsys identities ...
    runs = [_record(i, systems["tiny-node-b" if i % 2 else "tiny"]) for i in range(4)]
    report = _report(tmp_path, systems, runs)
    assert report.exit_code == 0, report.reasons()  # ... one system once each node's own facts are set aside


def test_a_drifted_or_failed_shard_is_named(tmp_path, systems):
    runs = [_record(i, systems["tiny"], verdict={1: "drifted", 3: "failed"}.get(i, "clean")) for i in range(4)]
    report = _report(tmp_path, systems, runs)
    assert report.exit_code == 1
    assert [(s.index, s.verdict) for s in report.not_clean()] == [(1, "drifted"), (3, "failed")]
    assert report.reasons() == ["shard 1 is drifted", "shard 3 is failed"]


def test_a_shard_run_again_counts_by_its_newest_run(tmp_path, systems):
    runs = [_record(0, systems["other"], verdict="failed", finished="2026-12-03T09:00:00Z"),
            *(_record(i, systems["tiny"]) for i in range(4))]
    report = _report(tmp_path, systems, runs)
    assert report.exit_code == 0, report.reasons()
    assert [s.run_id for s in report.superseded] == [runs[0]["id"]]


def test_n_comes_from_expect_when_no_shard_says_it_and_must_agree_when_one_does(tmp_path, systems):
    unknown = _report(tmp_path / "a", systems, [_record(i, systems["tiny"], count=None) for i in range(2)])
    assert unknown.exit_code == 1 and "give --expect N" in unknown.reasons()[0]
    told = _report(tmp_path / "b", systems, [_record(i, systems["tiny"], count=None) for i in range(2)], expect=2)
    assert told.exit_code == 0 and told.expected_source == "--expect"
    disagree = _report(tmp_path / "c", systems, [_record(i, systems["tiny"], count=3) for i in range(3)], expect=4)
    assert disagree.missing == [3]
    assert "shards 0, 1, 2 say there are 3 shards, not 4 (--expect)" in disagree.reasons()


def test_runs_of_two_jobs_are_refused_unless_one_is_picked(tmp_path, systems):
    runs = [_record(i, systems["tiny"], job="4242") for i in range(4)] + [_record(0, systems["tiny"], job="9")]
    ledger = tmp_path / "ledger.sqlite3"
    ids = _ledger(ledger, [systems["tiny"]], runs)
    with pytest.raises(UsageError, match="shards of 2 jobs: 4242 \\(4 runs\\), 9 \\(1 run\\)"):
        run_shards(ShardsOptions.from_sources(runs=ids, ledger_path=str(ledger)))
    picked = run_shards(ShardsOptions.from_sources(runs=ids, ledger_path=str(ledger), job="4242"))
    assert picked.exit_code == 0 and len(picked.shards) == 4
    since = run_shards(ShardsOptions.from_sources(ledger_since="2000-01-01", ledger_path=str(ledger), job="9"))
    assert since.present == [0] and since.missing == [1, 2, 3]


def test_a_run_that_is_no_shard_is_bad_input(tmp_path, systems):
    with pytest.raises(InputError, match="records no shard"):
        _report(tmp_path, systems, [_record(None, systems["tiny"])])


def test_an_identity_the_ledger_does_not_hold_is_compared_by_its_id(tmp_path, systems):
    runs = [_record(i, systems["other" if i == 2 else "tiny"]) for i in range(4)]
    report = _report(tmp_path, systems, runs, known=("tiny",))
    [outlier] = report.outliers()
    assert outlier["index"] == 2 and outlier["components"] == []
    assert "known by its id alone" in outlier["note"]


@pytest.mark.parametrize(("options", "message"), [
    ({}, "no shards"), ({"runs": ["x"], "ledger_since": "1h"}, "not both"),
    ({"runs": ["x"], "expect": "four"}, "an integer"), ({"runs": ["x"], "expect": 0}, "1 or more"),
    ({"runs": ["x"], "job": " "}, "--job needs"), ({"ledger_since": "yesterday"}, "--ledger-since"),
])
def test_options_refuse_what_cannot_work(options, message):
    with pytest.raises(UsageError, match=message):
        ShardsOptions.from_sources(None, None, **options)


def test_the_command_reads_sidecars_and_says_bad_input_in_one_line(tmp_path, systems, ledger_path):
    _ledger(ledger_path, [systems["tiny"], systems["other"]], [])
    sidecars = []
    for i in range(4):
        sidecar = tmp_path / f"shard{i}.json.execsys.json"
        sidecar.write_text(json.dumps(_record(i, systems["other" if i == 3 else "tiny"])))
        sidecars.append(str(sidecar))
    result = run_cli("shards", *sidecars, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "outlier  shard 3" in result.stdout and "model (name=tiny -> name=other" in result.stdout
    clean = run_cli("shards", "--json", *sidecars[:3], cwd=tmp_path)
    assert clean.returncode == 1 and json.loads(clean.stdout)["shards"]["missing"] == [3]
    (tmp_path / "not-a-run.json").write_text("{}")
    bad = run_cli("shards", str(tmp_path / "not-a-run.json"), cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    missing = run_cli("shards", "run-no-such", cwd=tmp_path)
    assert missing.returncode == 2 and "no ledger record" in missing.stderr


SHARD_HARNESS = "import sys; open(sys.argv[1], 'w').write('{\"score\": %s}' % sys.argv[2])"
NO_SCHEDULER = {"SLURM_ARRAY_TASK_ID": "", "JOB_COMPLETION_INDEX": ""}


def _sharded_runs(tmp_path: Path, n: int = 2) -> list[Path]:
    """``n`` real runs of one job, each a shard (--shard K/N@J), each leaving a result and its receipt."""
    import sys

    (tmp_path / "execsys.toml").write_text('[model]\nname = "tiny"\n')
    results = []
    for i in range(n):
        result = tmp_path / f"scores-{i}.json"
        ran = run_cli("run", "--json", "--shard", f"{i}/{n}@J", "--gate", "off", "--watch", "0", "--result",
                      result.name, "--", sys.executable, "-c", SHARD_HARNESS, str(result), str(i), cwd=tmp_path,
                      env=NO_SCHEDULER)
        assert ran.returncode == 0, ran.stderr
        results.append(result)
    return results


def _receipt(result: Path) -> Path:
    return result.with_name(result.name + ".execsys.intoto.json")


def test_receipts_are_read_as_shards_and_a_result_that_no_longer_matches_its_receipt_is_never_clean(
        tmp_path, ledger_path):
    results = _sharded_runs(tmp_path)
    receipts = [str(_receipt(r)) for r in results]
    clean = run_cli("shards", "--json", *receipts, cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    body = json.loads(clean.stdout)
    assert body["verdict"] == "one evaluation" and body["verdicts"] == {"clean": 2}
    assert [r["receipts"][0]["verified"] for r in body["runs"]] == [True, True]
    assert [r["source"] for r in body["runs"]] == receipts
    human = run_cli("shards", *receipts, cwd=tmp_path)
    assert human.returncode == 0 and "receipts   2/2 match the result files on disk" in human.stdout

    results[1].write_text('{"score": 99}')  # shard 1's score edited after its run
    edited = run_cli("shards", "--json", *receipts, cwd=tmp_path)
    assert edited.returncode == 1, edited.stderr
    body = json.loads(edited.stdout)
    assert body["verdicts"] == {"clean": 1, "receipt-mismatch": 1}
    assert [(e["index"], e["verdict"]) for e in body["not_clean"]] == [(1, "receipt-mismatch")]
    [reason] = body["reasons"]
    assert reason.startswith(f"shard 1's results are not the files its receipt names: {results[1]}: sha256 differs")
    assert body["runs"][1]["verdict"] == "clean"  # the run's own verdict is kept; it is not counted clean
    human = run_cli("shards", *receipts, cwd=tmp_path)
    assert human.returncode == 1 and "receipts   1/2 match the result files on disk" in human.stdout
    assert "receipt-mismatch shard 1" in human.stdout

    # a sidecar given beside the receipt of the same run is one shard, and the receipt still counts
    sidecar = str(results[1].with_name(results[1].name + ".execsys.json"))
    mixed = run_cli("shards", "--json", str(_receipt(results[0])), sidecar, receipts[1], cwd=tmp_path)
    assert mixed.returncode == 1 and json.loads(mixed.stdout)["shards"]["indices"] == [0, 1]
    assert json.loads(mixed.stdout)["verdicts"] == {"clean": 1, "receipt-mismatch": 1}
    # the sidecars alone do not check the files (nothing to check them by): as before
    sidecars = [str(r.with_name(r.name + ".execsys.json")) for r in results]
    assert run_cli("shards", *sidecars, cwd=tmp_path).returncode == 0


def test_a_receipt_that_is_not_a_runs_is_bad_input_in_one_line(tmp_path, ledger_path):
    assert run_cli("pin", cwd=tmp_path).returncode == 0
    later = tmp_path / "later.json"
    later.write_text("{}")
    assert run_cli("attach", str(later), "--shard", "0/1", cwd=tmp_path, env=NO_SCHEDULER).returncode == 0
    (tmp_path / "forged.json").write_text(json.dumps({"payloadType": "application/vnd.in-toto+json",
                                                      "payload": "bm90IGpzb24=", "signatures": []}))
    for given, words in ((_receipt(later), "not of an execsys run"), (tmp_path / "forged.json", "not an in-toto")):
        bad = run_cli("shards", str(given), cwd=tmp_path)
        assert bad.returncode == 2, bad.stderr
        [line] = bad.stderr.strip().splitlines()
        assert words in line and "Traceback" not in bad.stderr
