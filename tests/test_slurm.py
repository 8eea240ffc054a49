"""The node checks under a real Slurm (Debian's slurmctld + slurmd + munge, one node, private ports).

slurmd itself runs execsys as ``HealthCheckProgram``, ``Prolog`` and ``TaskProlog`` -- with the
environment it gives them (``SLURMD_NODENAME``, ``SLURM_*``, no PATH) -- and the test reads Slurm's
reaction back with ``scontrol``/``squeue``: the node drained with execsys's Reason, a job held,
a job let through, a variable in ``srun env``. And a sharded evaluation: ``sbatch --array=0-3``, each
task an ``execsys run``, checked as one by ``execsys shards``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.slurm import HEALTH_CHECK_INTERVAL_S, SlurmCluster, wait_for

CLEAN_PATH = "/usr/bin:/bin"
EXECSYS = str(Path(sys.executable).with_name("execsys"))


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    bad = tmp_path / "plant"
    bad.mkdir()
    (bad / "python3").write_bytes(b"")
    (bad / "python3").chmod(0o755)
    return bad


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster):
    """The module's cluster, with every program disarmed and the node idle before and after a test."""
    for program in ("health_check", "prolog", "task_prolog"):
        slurm_cluster.arm(program, None)
    slurm_cluster.resume()
    yield slurm_cluster
    for program in ("health_check", "prolog", "task_prolog"):
        slurm_cluster.arm(program, None)
    slurm_cluster.run("scancel", "--user=root", check=False)
    slurm_cluster.resume()


def node_check(cluster: SlurmCluster, mode: str, *args: str, marker: Path | None = None) -> str:
    """The command line an armed program runs: execsys by absolute path (slurmd gives no PATH)."""
    count = f"echo run >> {shlex.quote(str(marker))}; " if marker else ""
    argv = " ".join(shlex.quote(a) for a in (EXECSYS, "doctor", "--node-check", mode, *args))
    # SLURM_CONF only so that scontrol finds this private cluster; a site's scontrol reads /etc/slurm
    return f"{count}SLURM_CONF={shlex.quote(str(cluster.conf))} exec {argv}"


def runs(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def test_a_clean_node_stays_idle_under_the_health_check(cluster, tmp_path):
    marker = tmp_path / "runs"
    cluster.arm("health_check", node_check(cluster, "slurm", "--drain", "--path", CLEAN_PATH, marker=marker))
    # two starts: the first run has finished (slurmd runs one at a time) and acted, if it was going to
    wait_for(lambda: runs(marker) >= 2, HEALTH_CHECK_INTERVAL_S * 4 + 10, lambda: cluster.log()[-1500:])
    info = cluster.node_info()
    assert info["State"] == "IDLE", info
    assert "Reason" not in info, info


def test_a_failing_hazard_drains_the_node_with_execsys_reason(cluster, tmp_path, planted):
    cluster.arm("health_check", node_check(cluster, "slurm", "--drain", "--path", f"{planted}:{CLEAN_PATH}"))
    # the program drains before it exits; slurmd logs its exit after: wait for both
    wait_for(lambda: "DRAIN" in cluster.state() and "health_check failed: rc:1" in cluster.log(),
             HEALTH_CHECK_INTERVAL_S * 4 + 20, lambda: f"{cluster.node_info()} {cluster.log()[-1500:]}")
    reason = cluster.node_info()["Reason"]
    assert reason.startswith("execsys: fail stub-executables: "), reason
    assert "health_check failed: rc:1 output:fail stub-executables" in cluster.log()


def test_could_not_check_never_drains_it_only_logs(cluster, tmp_path):
    empty = tmp_path / "empty.env"
    empty.write_text("PATH=\n")
    marker = tmp_path / "runs"
    cluster.arm("health_check", node_check(cluster, "slurm", "--drain", "--env-from", str(empty), marker=marker))
    wait_for(lambda: runs(marker) >= 2, HEALTH_CHECK_INTERVAL_S * 4 + 10, lambda: cluster.log()[-1500:])
    assert cluster.node_info()["State"] == "IDLE"
    assert "health_check failed: rc:2 output:unknown: PATH is empty" in cluster.log()


def _job_state(cluster: SlurmCluster, job: str) -> tuple[str, str]:
    out = cluster.run("squeue", "-h", "-j", job, "-o", "%T|%r", check=False).stdout.strip()
    if out:
        state, reason = out.split("|", 1)
        return state, reason
    text = cluster.run("scontrol", "show", "job", job, check=False).stdout
    state = next((w.split("=", 1)[1] for w in text.split() if w.startswith("JobState=")), "")
    return state, ""


def test_a_prolog_gate_holds_the_job_on_a_failing_hazard(cluster, tmp_path, planted):
    cluster.arm("prolog", node_check(cluster, "slurm-prolog", "--path", f"{planted}:{CLEAN_PATH}"))
    job = cluster.run("sbatch", "--parsable", "-o", str(tmp_path / "held.out"), "--wrap", "echo ran").stdout.strip()
    wait_for(lambda: "held" in _job_state(cluster, job)[1].lower(), 60,
             lambda: f"{_job_state(cluster, job)} {cluster.log()[-1500:]}")
    state, reason = _job_state(cluster, job)
    assert state == "PENDING" and "launch failed requeued held" in reason.lower(), (state, reason)
    assert not (tmp_path / "held.out").exists() or "ran" not in (tmp_path / "held.out").read_text()
    assert "DRAIN" in cluster.state()


def test_a_prolog_lets_the_job_through_when_execsys_cannot_check(cluster, tmp_path):
    cluster.arm("prolog", node_check(cluster, "slurm-prolog", "--env-from", str(tmp_path / "no-such.env")))
    out = tmp_path / "ran.out"
    job = cluster.run("sbatch", "--parsable", "-o", str(out), "--wrap", "echo ran").stdout.strip()
    wait_for(lambda: _job_state(cluster, job)[0] == "COMPLETED", 60,
             lambda: f"{_job_state(cluster, job)} {cluster.log()[-1500:]}")
    assert out.read_text().strip() == "ran"
    info = cluster.node_info()
    assert "DRAIN" not in info["State"] and "Reason" not in info, info


def test_a_task_prolog_puts_the_identity_into_every_step(cluster, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "execsys.toml").write_text('[model]\nname = "tiny"\n')
    ledger = tmp_path / "ledger.sqlite3"
    cluster.arm("task_prolog", f"EXECSYS_LEDGER={shlex.quote(str(ledger))} exec {shlex.quote(EXECSYS)} pin "
                               f"--task-prolog --config {shlex.quote(str(project / 'execsys.toml'))}")
    proc = cluster.run("srun", "-t", "1", "env", timeout=60)
    lock = json.loads((project / "execsys.lock.json").read_text())
    env = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert env.get("EXECSYS_IDENTITY") == lock["id"], proc.stdout[-2000:]
    assert env.get("EXECSYS_LOCK") == str(project / "execsys.lock.json")


def test_execsys_run_inside_a_job_step_reuses_the_identity_the_task_prolog_exported(cluster, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "execsys.toml").write_text('[model]\nname = "tiny"\n')
    job_dir = tmp_path / "job"  # the job's working directory: no declaration, no lock of its own
    job_dir.mkdir()
    ledger = tmp_path / "ledger.sqlite3"
    cluster.arm("task_prolog", f"EXECSYS_LEDGER={shlex.quote(str(ledger))} exec {shlex.quote(EXECSYS)} pin "
                               f"--task-prolog --config {shlex.quote(str(project / 'execsys.toml'))}")
    step = (f"cd {shlex.quote(str(job_dir))} && EXECSYS_LEDGER={shlex.quote(str(ledger))} "
            f"{shlex.quote(EXECSYS)} run --json --gate off --watch 0 -- true")
    proc = cluster.run("srun", "-t", "1", "bash", "-c", step, timeout=120)
    record = json.loads(proc.stdout)
    lock = json.loads((project / "execsys.lock.json").read_text())
    assert record["verdict"] == "clean", proc.stderr[-2000:]
    assert record["identity"] == {"id": lock["id"], "lock": str(project / "execsys.lock.json"),
                                  "how": "verified", "from": "EXECSYS_LOCK"}
    assert not (job_dir / "execsys.lock.json").exists()


# -- a sharded evaluation: a real job array, each task an execsys run -----------------------------

SHARD_HARNESS = ("import json, os; i = int(os.environ['SLURM_ARRAY_TASK_ID']); "
                 "json.dump({'shard': i, 'correct': [i % 2 == 0]}, open('scores.json', 'w'))")


def _shard_array(cluster: SlurmCluster, tmp_path: Path, planted_task: int | None = None) -> list[Path]:
    """``sbatch --array=0-3``: each task an ``execsys run`` of a small harness in a directory of its own,
    under the project's declaration, or (task ``planted_task``) under a planted one that names another
    model. Returns the four tasks' sidecars, by task."""
    project, planted = tmp_path / "project", tmp_path / "planted"
    for where, model in ((project, "tiny"), (planted, "other")):
        where.mkdir()
        (where / "execsys.toml").write_text(f'[model]\nname = "{model}"\n')
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    script = tmp_path / "shard.sh"
    pick = (f'[ "$SLURM_ARRAY_TASK_ID" = {planted_task} ] && decl={shlex.quote(str(planted))}\n'
            if planted_task is not None else "")
    script.write_text(f"""#!/bin/bash
set -eu
decl={shlex.quote(str(project))}
{pick}mkdir -p {shlex.quote(str(tasks))}/$SLURM_ARRAY_TASK_ID && cd {shlex.quote(str(tasks))}/$SLURM_ARRAY_TASK_ID
exec {shlex.quote(EXECSYS)} run --config "$decl/execsys.toml" --gate off --watch 0 --result scores.json -- \\
  {shlex.quote(sys.executable)} -c {shlex.quote(SHARD_HARNESS)}
""")
    ledger = tmp_path / "ledger.sqlite3"
    # --wait: sbatch returns once every task has ended (one CPU: they run one after another)
    cluster.run("sbatch", "--wait", "--array=0-3", "-t", "5", f"--export=ALL,EXECSYS_LEDGER={ledger}",
                "-o", str(tmp_path / "task-%a.out"), str(script), timeout=240)
    sidecars = [tasks / str(i) / "scores.json.execsys.json" for i in range(4)]
    logs = {i: (tmp_path / f"task-{i}.out").read_text(errors="replace")[-800:] for i in range(4)
            if (tmp_path / f"task-{i}.out").exists()}
    assert all(s.exists() for s in sidecars), logs
    return sidecars


def _shards(*args: str, ledger: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXECSYS, "shards", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "EXECSYS_LEDGER": str(ledger)})


def test_a_slurm_array_with_one_task_under_another_declaration_is_not_one_evaluation(cluster, tmp_path):
    sidecars = _shard_array(cluster, tmp_path, planted_task=2)
    records = [json.loads(s.read_text()) for s in sidecars]
    jobs = {r["shard"]["job"] for r in records}
    assert [r["shard"]["index"] for r in records] == [0, 1, 2, 3] and len(jobs) == 1
    assert all(r["shard"]["count"] == 4 and r["shard"]["source"] == "slurm" for r in records)
    result = _shards("--json", *map(str, sidecars), ledger=tmp_path / "ledger.sqlite3")
    assert result.returncode == 1, result.stderr
    body = json.loads(result.stdout)
    assert body["shards"]["missing"] == [] and body["identity_agreement"]["k"] == 3
    [outlier] = body["outliers"]
    assert outlier["index"] == 2 and "model" in outlier["components"], outlier
    assert "shard 2 ran another system: " in "; ".join(body["reasons"])
    text = _shards(*map(str, sidecars), ledger=tmp_path / "ledger.sqlite3")
    assert text.returncode == 1 and "outlier  shard 2" in text.stdout and "name=tiny -> name=other" in text.stdout


def test_a_clean_slurm_array_is_one_evaluation_and_a_missing_shard_is_named(cluster, tmp_path):
    sidecars = _shard_array(cluster, tmp_path)
    ledger = tmp_path / "ledger.sqlite3"
    whole = _shards(*map(str, sidecars), ledger=ledger)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert "4/4 present" in whole.stdout and "4/4 shards share one system" in whole.stdout
    job = json.loads(sidecars[0].read_text())["shard"]["job"]
    from_ledger = _shards("--ledger-since", "1h", "--job", job, ledger=ledger)
    assert from_ledger.returncode == 0, from_ledger.stdout + from_ledger.stderr
    lost = _shards(*map(str, sidecars[:1] + sidecars[2:]), ledger=ledger)
    assert lost.returncode == 1 and "missing  1" in lost.stdout and "1 of 4 shards missing: 1" in lost.stdout
    # each task's receipt stands for its shard, and its result is checked against it as it is read
    receipts = [sidecar.with_name("scores.json.execsys.intoto.json") for sidecar in sidecars]
    by_receipt = _shards(*map(str, receipts), ledger=ledger)
    assert by_receipt.returncode == 0, by_receipt.stdout + by_receipt.stderr
    assert "receipts   4/4 match the result files on disk" in by_receipt.stdout
    (sidecars[3].parent / "scores.json").write_text('{"shard": 3, "correct": [true, true]}')
    edited = _shards(*map(str, receipts), ledger=ledger)
    assert edited.returncode == 1 and "receipt-mismatch shard 3" in edited.stdout, edited.stdout + edited.stderr
    assert "shard 3's results are not the files its receipt names" in edited.stdout


def test_attach_in_each_task_of_a_slurm_array_records_its_shard(cluster, tmp_path):
    """Results made inside an array's tasks by a harness run without execsys, attached there: each record
    is the task's shard of the array's job, as execsys run's would be."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "execsys.toml").write_text('[model]\nname = "tiny"\n')
    ledger = tmp_path / "ledger.sqlite3"
    pinned = subprocess.run([EXECSYS, "pin", "--config", str(project / "execsys.toml")], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "EXECSYS_LEDGER": str(ledger)})
    assert pinned.returncode == 0, pinned.stderr
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    script = tmp_path / "attach.sh"
    script.write_text(f"""#!/bin/bash
set -eu
mkdir -p {shlex.quote(str(tasks))}/$SLURM_ARRAY_TASK_ID && cd {shlex.quote(str(tasks))}/$SLURM_ARRAY_TASK_ID
{shlex.quote(sys.executable)} -c {shlex.quote(SHARD_HARNESS)}
exec {shlex.quote(EXECSYS)} attach --config {shlex.quote(str(project / "execsys.toml"))} scores.json
""")
    cluster.run("sbatch", "--wait", "--array=1-4", "-t", "5", f"--export=ALL,EXECSYS_LEDGER={ledger}",
                "-o", str(tmp_path / "task-%a.out"), str(script), timeout=240)
    sidecars = [tasks / str(task) / "scores.json.execsys.json" for task in range(1, 5)]
    logs = {t: (tmp_path / f"task-{t}.out").read_text(errors="replace")[-800:] for t in range(1, 5)
            if (tmp_path / f"task-{t}.out").exists()}
    assert all(s.exists() for s in sidecars), logs
    records = [json.loads(s.read_text()) for s in sidecars]
    assert all(r["schema"] == "execsys.attach/1" and r["attached_after"] is True for r in records)
    shards = [r["shard"] for r in records]
    # --array=1-4 counts from SLURM_ARRAY_TASK_MIN: tasks 1-4 are shards 0-3 of one job
    assert [(s["index"], s["count"], s["source"], s["task_id"]) for s in shards] == \
        [(i, 4, "slurm", str(i + 1)) for i in range(4)]
    assert len({s["job"] for s in shards}) == 1 and shards[0]["job"]
