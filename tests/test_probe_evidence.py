"""A probe counts only for the system it observed, and an axis only with evidence of its event.

Against the real llama.cpp server: an engine restarted into other flags between pin and probe makes
the probe's ``system_check`` "differs" (one line on stderr as it happens, ``identity: null``, listed
by scope under ``ignored``); a redeploy probe against the very process of its baseline is "no
redeploy observed"; a restart command that restarts nothing is "no restart observed". Both exit 1 and
license nothing. A serving process that cannot be observed from here leaves the event unverified.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .fixtures.llama import wait_ready

pytest.importorskip("llama_cpp")

CHANGED_FLAGS = ["--n_batch", "7"]
SYSTEM_DIFFERS = "the engine answering this probe is not the pinned system: runtime argv +--n_batch 7"


def write_cases(path: Path, n: int = 4) -> Path:
    with path.open("w") as handle:
        for i in range(n):
            handle.write(json.dumps({"id": f"c{i:02d}", "prompt": f"Case {i}: what is {i}+{i}?",
                                     "max_tokens": 6}) + "\n")
    return path


def pinned_project(cli, directory: Path, endpoint: str) -> str:
    """A declaration serving ``endpoint`` with llama-cpp-python, pinned: the lock's identity id."""
    directory.mkdir(exist_ok=True)
    (directory / "execsys.toml").write_text(
        f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{endpoint}"\n')
    pinned = cli("pin", "--json", cwd=directory, timeout=180)
    assert pinned.returncode == 0, pinned.stderr
    write_cases(directory / "cases.jsonl")
    return json.loads((directory / "execsys.lock.json").read_text())["id"]


def test_a_probe_of_an_engine_restarted_into_other_flags_since_the_pin_counts_toward_no_identity(
        cli, tmp_path, restart_script, ledger_path):
    server = restart_script(restart_extra_args=CHANGED_FLAGS)
    project = tmp_path / "project"
    identity = pinned_project(cli, project, server.base_url)

    # the pinned system answers: the probe observes it, it matches the lock, and it counts
    same = cli("probe", "session", "--cases", "cases.jsonl", "--json", cwd=project, timeout=300)
    assert same.returncode == 0, same.stderr
    record = same.json()
    assert record["schema"] == "execsys.probe/2"
    check = record["system_check"]
    assert check["verdict"] == "matches-lock", check
    assert check["lock"] == identity and record["identity"] == identity
    assert check["at_start"]["runtime.process.pid"] == server.pid
    assert [(o["pass"], o["at"]) for o in check["observations"]] == [("A", "start"), ("A", "end"),
                                                                     ("B", "start"), ("B", "end")]
    assert "not the pinned system" not in same.stderr

    # the operator restarts the engine into other flags; the lock still says the old ones
    subprocess.run(server.command, shell=True, check=True, timeout=60)
    assert wait_ready(server.base_url, 60)
    moved = cli("probe", "session", "--cases", "cases.jsonl", "--json", cwd=project, timeout=300)
    assert moved.returncode == 1, moved.stderr
    record = moved.json()
    check = record["system_check"]
    assert check["verdict"] == "differs" and check["lock"] == identity
    argv = [d for d in check["differences"] if d["component"] == "runtime.process.argv"]
    assert argv and "--n_batch" in argv[0]["observed"] and "--n_batch" not in argv[0]["pinned"]
    assert check["sentence"] == SYSTEM_DIFFERS
    # counted toward no identity, and saying why, in the record and in the ledger row scope reads
    assert record["identity"] is None and SYSTEM_DIFFERS in record["identity_reason"]
    assert identity[:12] in record["identity_reason"]
    # said once, on one line of stderr, as it was seen (before the record)
    lines = [line for line in moved.stderr.splitlines() if "not the pinned system" in line]
    assert lines == [SYSTEM_DIFFERS], moved.stderr

    scope = cli("scope", "--json", cwd=project)
    data = scope.json()
    assert data["measured"]["session"]["n"] == 4 and data["measured"]["session"]["records"] == [
        same.json()["id"]]  # only the probe of the pinned system counts
    [ignored] = data["ignored"]["another_system"]
    assert ignored == {"record": record["id"], "axis": "session", "reason": SYSTEM_DIFFERS}
    assert "measured another system" in data["statement"]
    text = cli("scope", cwd=project)
    assert f"ignored      session {record['id']}: {SYSTEM_DIFFERS}" in text.stdout


def test_a_redeploy_probe_against_its_baselines_own_process_is_no_redeploy_observed(
        cli, tmp_path, llama_server, ledger_path):
    project = tmp_path / "project"
    pinned_project(cli, project, llama_server.base_url)
    baseline = cli("probe", "session", "--cases", "cases.jsonl", "--json", cwd=project, timeout=300).json()
    assert baseline["system_check"]["verdict"] == "matches-lock"
    result = cli("probe", "redeploy", "--cases", "cases.jsonl", "--json", "--baseline", baseline["id"],
                 cwd=project, timeout=300)
    assert result.returncode == 1, result.stderr
    record = result.json()
    assert (record["m"], record["n"]) == (4, 4)  # agreement is perfect: the same process answered
    evidence = record["evidence"]
    assert evidence["event"] == "redeploy" and evidence["verdict"] == "not-observed"
    assert evidence["before"] == evidence["after"] == {
        "pid": llama_server.proc.pid, "started_at": evidence["before"]["started_at"]}
    assert "no redeploy observed" in record["sentence"]
    assert "reproduces the baseline" not in record["sentence"]
    assert record["scope"]["evidence"] == "not-observed"

    data = cli("scope", "--json", cwd=project).json()
    assert "redeploy" not in data["licensed"] and "redeploy" in data["unmeasured"]
    assert data["licence"] == "session" and "comparable across redeploys" not in data["statement"]
    [excluded] = data["excluded"]
    assert excluded["record"] == record["id"] and "no redeploy observed" in excluded["reason"]


def test_a_restart_command_that_restarts_nothing_is_no_restart_observed(cli, tmp_path, llama_server,
                                                                        ledger_path):
    project = tmp_path / "project"
    pinned_project(cli, project, llama_server.base_url)
    result = cli("probe", "restart", "--cases", "cases.jsonl", "--json", "--restart", "true", cwd=project,
                 timeout=300)
    assert result.returncode == 1, result.stderr
    record = result.json()
    assert (record["m"], record["n"]) == (4, 4)
    evidence = record["evidence"]
    assert evidence["event"] == "restart" and evidence["verdict"] == "not-observed"
    step = record["target"]["observed"]["restart:1"]
    assert step["process_before"] == step["process_after"] and step["process_before"]["pid"] == llama_server.proc.pid
    assert "no restart observed" in record["sentence"] and "stable across restarts" not in record["sentence"]
    assert "no restart observed" in result.stderr  # said when it happened, before pass B
    data = cli("scope", "--json", cwd=project).json()
    assert "restart" not in data["licensed"] and "restart" in data["unmeasured"]
    assert any(e["record"] == record["id"] and "no restart observed" in e["reason"] for e in data["excluded"])


HARNESS = "import json, sys; case = json.load(sys.stdin); print('answer to ' + case['id'])"


def test_a_restart_whose_serving_process_cannot_be_observed_is_licensed_unverified(cli, tmp_path, ledger_path):
    # a harness command with no serving process declared: nothing here can see whether it restarted
    (tmp_path / "execsys.toml").write_text("[budget]\ntemperature = 0\n")
    assert cli("pin", cwd=tmp_path, timeout=180).returncode == 0
    write_cases(tmp_path / "cases.jsonl")
    command = f"{sys.executable} -c {json.dumps(HARNESS)}"
    result = cli("probe", "restart", "--command", command, "--cases", "cases.jsonl", "--json",
                 "--restart", "true", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    record = result.json()
    assert record["evidence"]["verdict"] == "unverified"
    assert record["evidence"]["sentence"].startswith("restart unverified: the serving process could not be observed")
    assert record["system_check"]["verdict"] == "unverified" and record["identity"] is not None
    data = cli("scope", "--json", cwd=tmp_path).json()
    assert data["licensed"] == ["restart"] and data["unverified"] == ["restart"]
    assert "comparable across server restarts" in data["statement"]
    assert "unverified (a restart could not be confirmed from here)" in data["statement"]
    text = cli("scope", cwd=tmp_path).stdout
    assert "restart      licensed, unverified" in text


def test_a_probe_record_of_the_previous_schema_is_still_read_and_its_restart_is_unverified(tmp_path):
    from execsys.probes.record import ProbeRecord, load_record

    from execsys.ledger import Ledger
    from execsys.scope import compute_scope

    ident = "1" * 64
    body = {"schema": "execsys.probe/1", "axis": "restart", "identity": ident, "n": 5, "m": 5,
            "agreement_rate": 1.0, "ci95": [0.57, 1.0], "scope": {}, "cases": [], "target": {}}
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        rid = ledger.append("probe", body, identity=ident)
        record = load_record(ledger, ledger.get(rid))
        report = compute_scope(ledger, ident)
    assert record.schema == "execsys.probe/1" and record.system_check is None and record.evidence is None
    assert record.to_json()["schema"] == "execsys.probe/1"  # read back, it does not claim to be /2
    assert record.exit_code == 0
    assert report.licensed == ["restart"] and report.unverified == ["restart"]
    assert "execsys.probe/1" in report.unverified_why["restart"]
    assert ProbeRecord.from_json(dict(body, schema="execsys.probe/2")).schema == "execsys.probe/2"
