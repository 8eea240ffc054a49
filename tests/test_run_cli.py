"""``execsys run`` around small real harness programs: the gate, identity, drift, signals, usage, secrets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.fixtures.common import run_cli
from tests.fixtures.llama import free_port

HARNESS = r'''
"""A tiny harness: writes one result line per case, with a pause, and a marker when it starts."""
import json, os, signal, sys, time
out, cases, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else "normal"
open(os.path.join(os.path.dirname(out), "started.marker"), "w").write(str(os.getpid()))
open(os.path.join(os.path.dirname(out), "env.json"), "w").write(json.dumps(
    {k: v for k, v in os.environ.items() if k.startswith("EXECSYS_")}))
if mode == "ignore-int":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    with open(out, "w") as fh:
        for i in range(cases):
            fh.write(json.dumps({"case": i, "correct": i % 2 == 0}) + "\n")
            fh.flush()
            time.sleep(pause)
except KeyboardInterrupt:
    sys.exit(130)
'''


def _harness(tmp_path: Path) -> list[str]:
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    return [sys.executable, str(script)]


def _run_json(*args: str, cwd: Path, env: dict | None = None, timeout: float = 180) -> tuple[Any, dict[str, Any]]:
    result = run_cli("run", "--json", *args, cwd=cwd, env=env, timeout=timeout)
    assert result.stdout.strip(), f"no run record on stdout: {result.stderr[-3000:]}"
    return result, json.loads(result.stdout)


def _ledger_runs(cwd: Path) -> list[dict]:
    listed = run_cli("ledger", "export", "--kind", "run", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return [r["body"] for r in listed.json()]


def test_clean_run_of_a_plain_harness_passes_the_identity_in_its_environment(tmp_path, ledger_path):
    harness = _harness(tmp_path)
    out = tmp_path / "scores" / "scores.jsonl"
    out.parent.mkdir()
    result, record = _run_json("--result", "scores/*.jsonl", "--", *harness, str(out), "3", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert record["verdict"] == "clean" and record["exit_code"] == 0
    lock = json.loads((tmp_path / "execsys.lock.json").read_text())
    env = json.loads((tmp_path / "scores" / "env.json").read_text())
    env.pop("EXECSYS_LEDGER", None)  # the test's own
    assert env == {"EXECSYS_RUN_ID": record["id"], "EXECSYS_IDENTITY": lock["id"],
                   "EXECSYS_LOCK": str(tmp_path / "execsys.lock.json")}
    assert [(Path(r["path"]).name, r["harness"]) for r in record["results"]] == [("scores.jsonl", "other")]
    sidecar = json.loads((out.parent / "scores.jsonl.execsys.json").read_text())
    assert sidecar["id"] == record["id"] and sidecar["result"]["blake3"] == record["results"][0]["blake3"]
    # a file that was already there and did not change is not this run's result
    again, record2 = _run_json("--result", "scores/*", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert again.returncode == 0 and record2["results"] == []
    assert [r["verdict"] for r in _ledger_runs(tmp_path)] == ["clean", "clean"]


def test_bad_usage_is_one_line_and_exit_2(tmp_path, ledger_path):
    cases = [
        (["run", "true"], "after '--'"),
        (["run"], "after '--'"),
        (["run", "--lock", str(tmp_path / "missing.json"), "--", "true"], "no such lock file"),
        (["run", "--result", "no-such-dir/*.json", "--", "true"], "does not exist"),
        (["run", "--sidecar-dir", "nowhere", "--", "true"], "no such directory"),
        (["run", "--watch", "-1", "--", "true"], "--watch"),
        (["run", "--override", " ", "--", "true"], "--override needs a reason"),
        (["run", "--", "no-such-harness-program"], "not found"),
    ]
    (tmp_path / "bad.lock.json").write_text("{not json")
    cases.append((["run", "--lock", str(tmp_path / "bad.lock.json"), "--", "true"], "not valid JSON"))
    for argv, words in cases:
        result = run_cli(*argv, cwd=tmp_path)
        assert result.returncode == 2, (argv, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.stderr, (argv, result.stderr)
    assert not (tmp_path / "execsys.lock.json").exists()


def _foreign_listener(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in psutil.net_connections("inet")):
            return proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the foreign listener never listened")


def test_a_failing_gate_keeps_the_harness_from_starting_unless_overridden(tmp_path, ledger_path):
    port = free_port()
    (tmp_path / "execsys.toml").write_text(
        f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "http://127.0.0.1:{port}/v1"\n')
    harness = _harness(tmp_path)
    out = tmp_path / "res" / "scores.jsonl"
    out.parent.mkdir()
    listener = _foreign_listener(port)  # not the declared engine, on the declared engine's port
    try:
        result, record = _run_json("--", *harness, str(out), "1", "0", cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert not (out.parent / "started.marker").exists()  # the harness never started
        assert record["verdict"] == "refused" and not record["gate_passed"]
        assert any(f.startswith("port-collisions") for f in record["doctor"]["failing"])
        assert record["doctor"]["report"].startswith("doctor-")
        assert "✗ gate" in result.stderr and "--override" in result.stderr
        assert not (tmp_path / "execsys.lock.json").exists()  # nothing was pinned either

        result, record = _run_json("--override", "stray test server, known", "--watch", "0", "--",
                                   *harness, str(out), "1", "0", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert (out.parent / "started.marker").exists()
        assert record["verdict"] == "overridden" and record["overridden"] and not record["gate_passed"]
        assert record["doctor"]["override"] == "stray test server, known"

        result, record = _run_json("--gate", "warn", "--watch", "0", "--", *harness, str(out), "1", "0",
                                   cwd=tmp_path)
        assert result.returncode == 0 and record["verdict"] == "clean" and record["doctor"]["gate"] == "warn"
        result, record = _run_json("--gate", "off", "--watch", "0", "--", "true", cwd=tmp_path)
        assert record["doctor"] == {"report": None, "verdict": "off", "gate": "off", "failing": [],
                                    "override": None}
    finally:
        os.killpg(listener.pid, signal.SIGTERM)
        listener.wait(10)
    assert [r["verdict"] for r in _ledger_runs(tmp_path)] == ["refused", "overridden", "clean", "clean"]


def test_a_lock_that_no_longer_matches_refuses_unless_repinned(tmp_path, ledger_path):
    (tmp_path / "execsys.toml").write_text("[budget]\ntemperature = 0.0\n")
    assert run_cli("pin", cwd=tmp_path).returncode == 0
    pinned = json.loads((tmp_path / "execsys.lock.json").read_text())["id"]
    (tmp_path / "execsys.toml").write_text("[budget]\ntemperature = 0.7\n")
    marker = tmp_path / "ran"
    result, record = _run_json("--", sys.executable, "-c", f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert result.returncode == 1 and not marker.exists()
    assert record["verdict"] == "refused" and "--repin" in record["refused"] and "budget" in record["refused"]
    result, record = _run_json("--repin", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert result.returncode == 0 and marker.exists()
    assert record["identity"]["how"] == "repinned" and record["identity"]["id"] != pinned
    assert json.loads((tmp_path / "execsys.lock.json").read_text())["id"] == record["identity"]["id"]


DRIFT_HARNESS = r'''
"""A harness during which the operator restarts the engine with other flags."""
import subprocess, sys, time, urllib.request
restart, base = sys.argv[1], sys.argv[2]
time.sleep(2.0)
subprocess.run(restart, shell=True, check=True, timeout=60)
for _ in range(300):
    try:
        urllib.request.urlopen(base + "/models", timeout=2)
        break
    except OSError:
        time.sleep(0.1)
time.sleep(float(sys.argv[3]))
'''


def test_an_engine_restarted_into_other_flags_mid_run_is_drifted_with_the_time(tmp_path, ledger_path,
                                                                               restart_script):
    server = restart_script(restart_extra_args=["--n_batch", "64"])
    (tmp_path / "execsys.toml").write_text(
        f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{server.base_url}"\n')
    script = tmp_path / "drift_harness.py"
    script.write_text(DRIFT_HARNESS)
    result, record = _run_json("--watch", "0.5", "--", sys.executable, str(script), server.command,
                               server.base_url, "5", cwd=tmp_path, timeout=240)
    assert result.returncode == 1, result.stderr
    assert record["verdict"] == "drifted" and record["drifted"] and record["exit_code"] == 0
    argv_changes = [e for e in record["drift"] if e["component"] == "runtime.process.argv"]
    assert argv_changes, record["drift"]
    # the engine went away (before: its argv, after: none) and came back with other flags
    assert any(e["before"] and "--n_batch" not in e["before"] for e in argv_changes), argv_changes
    assert any(e["after"] and "--n_batch" in e["after"] for e in argv_changes), (record["drift"], record["watch"])
    assert any(e["component"] == "runtime.process.pid" for e in record["drift"])
    for event in record["drift"]:
        assert record["started_at"] <= event["at"] <= record["finished_at"]
    assert "! drift" in result.stderr and "runtime.process.argv" in result.stderr


def _wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


@pytest.mark.parametrize("mode, signals, code", [("normal", ["SIGINT"], 130),
                                                 ("ignore-int", ["SIGINT", "SIGKILL"], 137)])
def test_ctrl_c_mid_run_is_interrupted_with_partial_results_recorded_and_the_harness_gone(
        tmp_path, ledger_path, mode, signals, code):
    out = tmp_path / "res" / "partial.jsonl"
    out.parent.mkdir()
    env = dict(os.environ, EXECSYS_LEDGER=str(ledger_path))
    proc = subprocess.Popen([sys.executable, "-m", "execsys", "run", "--json", "--watch", "0", "--result",
                             str(out), "--", *_harness(tmp_path), str(out), "1000", "0.05", mode],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= 3)
    harness_pid = int((out.parent / "started.marker").read_text())
    for _ in signals:
        proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C delivers to execsys
        time.sleep(0.5)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    record = json.loads(stdout)
    assert record["verdict"] == "interrupted" and record["interrupted"] and record["signals"] == signals
    assert not psutil.pid_exists(harness_pid) or psutil.Process(harness_pid).status() == psutil.STATUS_ZOMBIE
    [partial] = record["results"]
    assert partial["path"] == str(out)
    import blake3

    assert partial["blake3"] == blake3.blake3(out.read_bytes()).hexdigest()
    assert 3 <= len(out.read_text().splitlines()) < 1000
    assert (out.parent / "partial.jsonl.execsys.json").exists()
    assert _ledger_runs(tmp_path)[0]["verdict"] == "interrupted"


def test_secrets_in_the_command_line_and_environment_never_reach_sidecar_or_ledger(tmp_path, ledger_path):
    secret_flag, secret_kv, secret_env = "sk-flag-secret-5e6f7a8b", "kv-secret-9c0d1e2f", "env-secret-3a4b5c6d"
    out = tmp_path / "res" / "out.txt"
    out.parent.mkdir()
    code = f"open({str(out)!r}, 'w').write('done')"
    result, record = _run_json(
        "--result", str(out), "--sidecar-dir", str(tmp_path),
        "--", sys.executable, "-c", code, "--api-key", secret_flag, f"model=x,api_key={secret_kv}",
        cwd=tmp_path, env={"HARNESS_API_TOKEN": secret_env})
    assert result.returncode == 0, result.stderr
    sidecar = tmp_path / "out.txt.execsys.json"  # --sidecar-dir: not beside the result
    assert sidecar.exists() and not (out.parent / "out.txt.execsys.json").exists()
    ledger_dump = run_cli("ledger", "export", cwd=tmp_path).stdout
    for text in (sidecar.read_text(), ledger_dump, result.stdout, result.stderr):
        for secret in (secret_flag, secret_kv, secret_env):
            assert secret not in text
    assert "<redacted>" in json.dumps(record["command"]["argv"])


def test_a_run_inside_a_job_reuses_the_identity_its_task_prolog_exported(tmp_path, ledger_path):
    node = tmp_path / "node"
    node.mkdir()
    (node / "execsys.toml").write_text("[budget]\ntemperature = 0.0\n")
    prolog = run_cli("pin", "--task-prolog", "--config", str(node / "execsys.toml"), cwd=tmp_path)
    assert prolog.returncode == 0, prolog.stderr
    exports = dict(line.removeprefix("export ").split("=", 1) for line in prolog.stdout.splitlines()
                   if line.startswith("export "))
    pinned = json.loads((node / "execsys.lock.json").read_text())["id"]
    assert exports["EXECSYS_IDENTITY"] == pinned
    # the job's working directory has no declaration and no lock of its own
    job = tmp_path / "job"
    job.mkdir()
    env = dict(os.environ, **exports)
    result, record = _run_json("--", sys.executable, "-c", "pass", cwd=job, env=env)
    assert result.returncode == 0, result.stderr
    assert record["verdict"] == "clean"
    assert record["identity"] == {"id": pinned, "lock": str(node / "execsys.lock.json"), "how": "verified",
                                  "from": "EXECSYS_LOCK"}
    assert not (job / "execsys.lock.json").exists()  # nothing pinned beside the job
    assert "from EXECSYS_LOCK" in result.stderr

    # the node is re-pinned onto another system while the job still carries the old identity
    (node / "execsys.toml").write_text("[budget]\ntemperature = 0.7\n")
    assert run_cli("pin", "--config", str(node / "execsys.toml"), cwd=tmp_path).returncode == 0
    marker = job / "ran"
    result, record = _run_json("--", sys.executable, "-c", f"open({str(marker)!r}, 'w')", cwd=job, env=env)
    assert result.returncode == 1 and not marker.exists()
    assert record["verdict"] == "refused" and pinned[:12] in record["refused"] and "--repin" in record["refused"]

    # a lock the job names that is gone is one line, exit 2
    gone = run_cli("run", "--", sys.executable, "-c", "pass", cwd=job,
                   env=dict(env, EXECSYS_LOCK=str(tmp_path / "missing.lock.json")))
    assert gone.returncode == 2 and "EXECSYS_LOCK" in gone.stderr and len(gone.stderr.strip().splitlines()) == 1


def test_two_runs_writing_one_result_keep_both_records_and_the_sidecar_links_the_earlier(tmp_path, ledger_path):
    out = tmp_path / "res" / "scores.jsonl"
    out.parent.mkdir()
    harness = _harness(tmp_path)
    ids = []
    for _ in range(3):
        result, record = _run_json("--watch", "0", "--result", "res/*.jsonl", "--", *harness, str(out), "2", "0",
                                   cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert [Path(r["path"]) for r in record["results"]] == [out]
        ids.append(record["id"])
    runs = {body["id"]: body for body in _ledger_runs(tmp_path)}
    assert set(ids) <= set(runs)  # the ledger has every run's row
    assert all(runs[i]["results"][0]["path"] == str(out) for i in ids)
    sidecar = json.loads((out.parent / "scores.jsonl.execsys.json").read_text())
    assert sidecar["schema"] == "execsys.run/2"
    assert sidecar["id"] == ids[2] and sidecar["previous"] == [ids[1], ids[0]]  # newest first
