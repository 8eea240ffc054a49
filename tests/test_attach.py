"""``execsys attach``: results made without ``execsys run`` get an honest, after-the-fact sidecar."""

from __future__ import annotations

import json
import subprocess
import sys

import blake3

from tests.fixtures.common import run_cli

SENTENCE = "identity recorded after the run: the system may have moved in between; descriptive only"


def test_attach_writes_an_after_the_fact_sidecar_and_records_it(tmp_path, ledger_path):
    assert run_cli("pin", cwd=tmp_path).returncode == 0
    lock_id = json.loads((tmp_path / "execsys.lock.json").read_text())["id"]
    # two results made by a harness run without execsys (execsys.result/1 needs an identity of its
    # own, so these are plain outcome files an adapter cannot read: attach digests them regardless)
    results = []
    for name, outcomes in (("a.jsonl", [1, 0, 1]), ("b.jsonl", [1, 1, 1])):
        path = tmp_path / name
        subprocess.run([sys.executable, "-c", f"open({str(path)!r}, 'w').write({json.dumps(outcomes)!r})"],
                       check=True)
        results.append(path)
    attached = run_cli("attach", *map(str, results), "--json", cwd=tmp_path)
    assert attached.returncode == 0, attached.stderr
    body = attached.json()
    assert body["attached_after"] is True and body["statement"] == SENTENCE
    assert body["identity"]["id"] == lock_id and body["verify_now"]["verdict"] == "same-system"
    for path in results:
        sidecar = json.loads(path.with_name(path.name + ".execsys.json").read_text())
        assert sidecar["attached_after"] is True and sidecar["statement"] == SENTENCE
        assert sidecar["result"]["blake3"] == blake3.blake3(path.read_bytes()).hexdigest()
        assert sidecar["identity"]["id"] == lock_id
    listed = run_cli("ledger", "list", "--kind", "attach", "--json", cwd=tmp_path).json()
    assert [(r["id"], r["verdict"]) for r in listed] == [(body["id"], "attached")]
    human = run_cli("attach", str(results[0]), cwd=tmp_path)
    assert human.returncode == 0 and SENTENCE in human.stderr


def test_attach_refuses_what_it_cannot_attach(tmp_path, ledger_path):
    (tmp_path / "r.json").write_text("{}")
    no_lock = run_cli("attach", str(tmp_path / "r.json"), cwd=tmp_path)
    assert no_lock.returncode == 2 and "execsys pin" in no_lock.stderr
    assert run_cli("pin", cwd=tmp_path).returncode == 0
    missing = run_cli("attach", str(tmp_path / "nope.json"), cwd=tmp_path)
    assert missing.returncode == 2 and "no such result file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.execsys.json"))


RUN_HARNESS = "import sys; open(sys.argv[1], 'w').write('[1, 0, 1]')"


def test_attach_over_a_result_execsys_run_recorded_refuses_and_writes_nothing(tmp_path, ledger_path):
    """A run pinned the identity before the harness started; attach would replace that with one taken now."""
    result = tmp_path / "scores.jsonl"
    ran = run_cli("run", "--json", "--watch", "0", "--result", result.name, "--", sys.executable, "-c",
                  RUN_HARNESS, str(result), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    run_id = ran.json()["id"]
    sidecar = result.with_name(result.name + ".execsys.json")
    before = sidecar.read_bytes()
    ledger_before = run_cli("ledger", "export", "--json", cwd=tmp_path).stdout
    for extra in ([], ["--sidecar-dir", str(tmp_path)], ["--json"]):
        refused = run_cli("attach", str(result), *extra, cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert run_id in line and "verdict clean" in line and "Traceback" not in refused.stderr
        assert refused.stdout == ""
    assert sidecar.read_bytes() == before
    assert run_cli("ledger", "export", "--json", cwd=tmp_path).stdout == ledger_before
    # a result no run recorded, beside it, is still attached
    other = tmp_path / "other.jsonl"
    other.write_text("[1]")
    assert run_cli("attach", str(other), cwd=tmp_path).returncode == 0


NO_SCHEDULER = {"SLURM_ARRAY_TASK_ID": "", "SLURM_ARRAY_TASK_MIN": "", "SLURM_ARRAY_TASK_COUNT": "",
                "SLURM_ARRAY_TASK_STEP": "", "SLURM_ARRAY_JOB_ID": "", "JOB_COMPLETION_INDEX": ""}


def test_attach_records_the_shard_as_run_does_from_slurm_kubernetes_or_the_flag(tmp_path, ledger_path):
    """A results-only step of a Slurm array (or an Indexed Job) is its shard, in the record, the sidecar and
    the receipt's predicate, read from the same variables execsys run reads."""
    from execsys.receipt import read_receipt

    assert run_cli("pin", cwd=tmp_path).returncode == 0
    cases = [  # (environment, flags, the shard recorded)
        (dict(NO_SCHEDULER, SLURM_ARRAY_TASK_ID="5", SLURM_ARRAY_TASK_MIN="4", SLURM_ARRAY_TASK_COUNT="4",
              SLURM_ARRAY_JOB_ID="777"), [],
         {"index": 1, "count": 4, "source": "slurm", "job": "777", "task_id": "5"}),
        (dict(NO_SCHEDULER, JOB_COMPLETION_INDEX="2"), ["--shard", "2/3@indexed"],
         {"index": 2, "count": 3, "source": "kubernetes", "job": "indexed"}),
        (NO_SCHEDULER, ["--shard", "0/2@ev"], {"index": 0, "count": 2, "source": "flag", "job": "ev"}),
        (NO_SCHEDULER, [], None),
    ]
    for n, (env, flags, shard) in enumerate(cases):
        result = tmp_path / f"scores-{n}.json"
        result.write_text(json.dumps({"score": n}))
        attached = run_cli("attach", str(result), *flags, "--json", cwd=tmp_path, env=env)
        assert attached.returncode == 0, attached.stderr
        assert attached.json()["shard"] == shard
        assert json.loads(result.with_name(result.name + ".execsys.json").read_text())["shard"] == shard
        _envelope, statement = read_receipt(result.with_name(result.name + ".execsys.intoto.json"))
        assert statement["predicate"]["shard"] == shard
    listed = run_cli("ledger", "export", "--json", cwd=tmp_path).stdout
    assert '"task_id": "5"' in listed or '"task_id":"5"' in listed


def test_attach_refuses_a_shard_that_contradicts_the_scheduler_and_writes_nothing(tmp_path, ledger_path):
    assert run_cli("pin", cwd=tmp_path).returncode == 0
    result = tmp_path / "scores.json"
    result.write_text("{}")
    env = dict(NO_SCHEDULER, SLURM_ARRAY_TASK_ID="3", SLURM_ARRAY_TASK_COUNT="4")
    for flags, words in ((["--shard", "1/4"], "this is Slurm array task 3"), (["--shard", "4/4"], "K must be 0 to 3")):
        refused = run_cli("attach", str(result), *flags, cwd=tmp_path, env=env)
        assert refused.returncode == 2, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert words in line and "Traceback" not in refused.stderr
    assert not list(tmp_path.glob("scores.json.*"))
