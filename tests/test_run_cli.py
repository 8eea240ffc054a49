"""``execsys run`` around small real harness programs: the gate, identity, drift, signals, usage, secrets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
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
if mode == "ignore-hup":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
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
    # what the suite itself exports (scripts/test.sh, tests/fixtures/common.py) is inherited, not set by run
    set_by_run = {"EXECSYS_RUN_ID", "EXECSYS_IDENTITY", "EXECSYS_LOCK"}
    for inherited in {*(k for k in os.environ if k.startswith("EXECSYS_")), "EXECSYS_LEDGER", "EXECSYS_DATA_DIR"}:
        if inherited not in set_by_run:
            env.pop(inherited, None)
    assert env == {"EXECSYS_RUN_ID": record["id"], "EXECSYS_IDENTITY": lock["id"],
                   "EXECSYS_LOCK": str(tmp_path / "execsys.lock.json")}
    assert [(Path(r["path"]).name, r["harness"]) for r in record["results"]] == [("scores.jsonl", "other")]
    sidecar = json.loads((out.parent / "scores.jsonl.execsys.json").read_text())
    assert sidecar["id"] == record["id"] and sidecar["result"]["blake3"] == record["results"][0]["blake3"]
    # a file that was already there and did not change is not this run's result
    again, record2 = _run_json("--result", "scores/*", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert again.returncode == 0 and record2["results"] == []
    assert [r["verdict"] for r in _ledger_runs(tmp_path)] == ["clean", "clean"]


def test_a_run_and_an_attach_record_in_the_ledger_the_flag_names_and_the_harness_sees_it(tmp_path, ledger_path):
    harness = _harness(tmp_path)
    out = tmp_path / "scores.jsonl"
    named = tmp_path / "named.sqlite3"
    result, record = _run_json("--gate", "off", "--watch", "0", "--ledger", str(named), "--",
                               *harness, str(out), "1", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "env.json").read_text())["EXECSYS_LEDGER"] == str(named)
    late = tmp_path / "late.jsonl"
    late.write_text('{"case": 0, "correct": true}\n')
    attached = run_cli("attach", str(late), "--ledger", str(named), cwd=tmp_path)
    assert attached.returncode == 0, attached.stderr
    assert not ledger_path.exists(), "the default ledger was opened although --ledger named another"
    listed = run_cli("ledger", "list", "--json", "--ledger", str(named), cwd=tmp_path)
    kinds = sorted(r["kind"] for r in listed.json())
    assert record["id"] in {r["id"] for r in listed.json()}
    assert kinds == ["attach", "identity", "receipt", "run"]


def test_bad_usage_is_one_line_and_exit_2(tmp_path, ledger_path):
    cases = [
        (["run", "true"], "after '--'"),
        (["run"], "after '--'"),
        (["run", "--lock", str(tmp_path / "missing.json"), "--", "true"], "no such lock file"),
        (["run", "--result", "no-such-dir/*.json", "--", "true"], "does not exist"),
        (["run", "--sidecar-dir", "nowhere", "--", "true"], "no such directory"),
        (["run", "--watch", "-1", "--", "true"], "--watch"),
        # a watch that never looks (inf, NaN, a year) is refused, not silently off
        (["run", "--watch", "inf", "--", "true"], "--watch"),
        (["run", "--watch", "nan", "--", "true"], "--watch"),
        (["run", "--watch", "1e12", "--", "true"], "--watch"),
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
        assert result.returncode == 0 and record["verdict"] == "clean" and record["doctor"]["gate_mode"] == "warn"
        result, record = _run_json("--gate", "off", "--watch", "0", "--", "true", cwd=tmp_path)
        assert record["doctor"] == {"report": None, "verdict": "off", "gate_mode": "off", "failing": [],
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
                                                                               restart_script, tiny_gguf):
    server = restart_script(extra_args=["--n_threads", "2"], restart_extra_args=["--n_threads", "1", "--n_batch", "64"])
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

    # what the user reads: each change once, as a delta, with its count; never the whole argv again
    delta = "runtime.process.argv: --n_threads 2 → 1 +--n_batch 64"
    drift_lines = [line for line in result.stderr.splitlines() if line.startswith("! drift")]
    assert len(drift_lines) < len(record["drift"]), result.stderr  # one line per look, not per event
    assert sum(delta in line for line in drift_lines) == 1, result.stderr
    watch = result.stderr[result.stderr.index("! watch"):result.stderr.index("! verify")]
    assert f"{len(record['drift'])} drift event(s)" in watch
    assert f"{delta} (2 events, " in watch, watch
    assert watch.count("runtime.process.argv") == 1, watch
    assert str(tiny_gguf) not in "\n".join(drift_lines) + watch, result.stderr
    # the verdict names what the restart changed, not the endpoint's error while it was down
    assert "(runtime.process.argv at " in record["verdict_detail"], record["verdict_detail"]
    assert ": --n_threads 2 -> 1 +--n_batch 64; " in record["verdict_detail"], record["verdict_detail"]


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
    [sidecar] = [Path(p) for p in record["sidecars"]]  # --sidecar-dir: not beside the result
    assert sidecar.parent == tmp_path and sidecar.exists() and not (out.parent / "out.txt.execsys.json").exists()
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
    assert sidecar["schema"] == "execsys.run/3"
    assert sidecar["id"] == ids[2] and sidecar["previous"] == [ids[1], ids[0]]  # newest first


# -- data loss: a run is recorded whatever happens around it ------------------------------------------

def _ledger_bodies(ledger_path: Path, kind: str = "run") -> list[dict]:
    from execsys.ledger import Ledger

    if not ledger_path.exists():
        return []
    with Ledger.open(ledger_path) as ledger:
        return [r.body for r in ledger.find(kind=kind)]


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _kill_if_left(pid: int) -> None:
    """A harness execsys failed to stop (the bug under test) must not outlive the test."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def test_a_closing_terminal_sighup_records_the_run_and_takes_the_harness_with_it(tmp_path, ledger_path):
    """The terminal (or ssh session) goes away: the kernel sends SIGHUP to execsys, the session leader
    on it. The harness has a session of its own, so only the forwarded signal reaches it."""
    import fcntl
    import termios

    out = tmp_path / "res" / "partial.jsonl"
    out.parent.mkdir()
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "execsys", "run", "--gate", "off", "--watch", "0", "--result", str(out), "--",
         *_harness(tmp_path), str(out), "1000", "0.05"],
        cwd=tmp_path, env=dict(os.environ, EXECSYS_LEDGER=str(ledger_path)), stdin=slave, stdout=slave,
        stderr=slave, start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    os.set_blocking(master, False)
    try:
        def started() -> bool:
            with contextlib.suppress(OSError):
                os.read(master, 1 << 16)  # keep the terminal drained
            return out.exists() and len(out.read_text().splitlines()) >= 3

        _wait_for(started)
        harness_pid = int((out.parent / "started.marker").read_text())
    finally:
        os.close(master)  # the terminal closes
    hung_up = time.monotonic()
    try:
        assert proc.wait(timeout=60) == 128 + signal.SIGHUP
        assert time.monotonic() - hung_up < 30
        assert _gone(harness_pid)
    finally:
        _kill_if_left(harness_pid)
    [run] = _ledger_bodies(ledger_path)
    assert run["verdict"] == "interrupted" and run["signals"] == ["SIGHUP"] and run["exit_code"] == -signal.SIGHUP
    assert [r["path"] for r in run["results"]] == [str(out)]
    assert (out.parent / "partial.jsonl.execsys.json").exists()


def test_a_harness_that_ignores_the_forwarded_sighup_is_killed_after_the_grace_and_recorded(
        tmp_path, ledger_path):
    out = tmp_path / "res" / "partial.jsonl"
    out.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "execsys", "run", "--json", "--gate", "off", "--watch", "0",
                             "--result", str(out), "--", *_harness(tmp_path), str(out), "100000", "0.05",
                             "ignore-hup"],
                            cwd=tmp_path, env=dict(os.environ, EXECSYS_LEDGER=str(ledger_path)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= 3)
    harness_pid = int((out.parent / "started.marker").read_text())
    sent = time.monotonic()
    proc.send_signal(signal.SIGHUP)
    try:
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGKILL, stderr
        assert 9 < time.monotonic() - sent < 40  # the 10 s grace, then SIGKILL: bounded
        assert _gone(harness_pid)
    finally:
        _kill_if_left(harness_pid)
    record = json.loads(stdout)
    assert record["verdict"] == "interrupted" and record["signals"] == ["SIGHUP", "SIGKILL"]
    assert [r["verdict"] for r in _ledger_bodies(ledger_path)] == ["interrupted"]


def test_a_sighup_before_the_harness_starts_records_it_never_started(tmp_path, ledger_path, monkeypatch):
    """A hangup during the gate or the identity (the doctor can take seconds): the harness is not
    started, and the run is recorded as interrupted. In-process, so the signal lands mid-step."""
    from execsys.run.events import StepStarted
    from execsys.run.options import RunOptions
    from execsys.run.runner import run_eval
    from execsys.sources import load_sources

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    sources = load_sources(None, None)
    options = RunOptions.from_sources(sources, command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                                      gate="off", watch_s=0)

    def hang_up_during_identity(event) -> None:
        if isinstance(event, StepStarted) and event.step == "identity":
            os.kill(os.getpid(), signal.SIGHUP)

    reached_outside: list[int] = []  # where the signal lands when run_eval does not hold it (pytest lives on)

    def outside(signum, _frame) -> None:
        reached_outside.append(signum)

    previous = signal.signal(signal.SIGHUP, outside)
    try:
        record = run_eval(options, on_event=hang_up_during_identity)
        assert signal.getsignal(signal.SIGHUP) is outside  # handed back as it was
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert reached_outside == []
    assert not marker.exists()
    assert not (tmp_path / "execsys.lock.json").exists()  # the identity step stopped where it was: no pin
    assert record.verdict == "interrupted" and record.signals == ["SIGHUP"] and record.exit_code is None
    assert record.exit_status == 128 + signal.SIGHUP
    assert [r["verdict"] for r in _ledger_bodies(ledger_path)] == ["interrupted"]


def _run_plain(cwd: Path, *args: str, timeout: float = 120):
    return run_cli("run", "--json", "--gate", "off", "--watch", "0", *args, cwd=cwd, timeout=timeout)


def test_a_fifo_planted_at_the_sidecar_name_costs_the_sidecar_not_the_run(tmp_path, ledger_path):
    out = tmp_path / "res" / "out.txt"
    out.parent.mkdir()
    fifo = out.parent / "out.txt.execsys.json"
    code = f"import os; open({str(out)!r}, 'w').write('done'); os.mkfifo({str(fifo)!r})"
    started = time.monotonic()
    result = _run_plain(tmp_path, "--result", str(out), "--", sys.executable, "-c", code, timeout=60)
    assert time.monotonic() - started < 60  # never opened for writing, so never blocked on
    assert result.returncode == 1, result.stderr
    record = json.loads(result.stdout)
    assert record["sidecar_errors"] == [{"sidecar": str(fifo), "error": f"{fifo}: is a FIFO (named pipe), not a "
                                         "regular file: refusing to replace it"}]
    assert record["sidecars"] == [] and [r["path"] for r in record["results"]] == [str(out)]
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("✗ record")]
    assert f"sidecar {fifo} not written: is a FIFO" in line and "recorded in the ledger" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    [run] = _ledger_bodies(ledger_path)
    assert run["id"] == record["id"] and run["sidecar_errors"] == record["sidecar_errors"]
    assert run["results"] == record["results"]
    # no temp file left; the receipt beside the sidecar's name is written (issue 31)
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(["out.txt", fifo.name, "out.txt.execsys.intoto.json"])


def test_a_symlink_planted_at_the_sidecar_name_is_replaced_and_its_target_left_alone(tmp_path, ledger_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("not execsys's to write\n")
    out = tmp_path / "res" / "out.txt"
    out.parent.mkdir()
    link = out.parent / "out.txt.execsys.json"
    code = f"import os; open({str(out)!r}, 'w').write('done'); os.symlink({str(victim)!r}, {str(link)!r})"
    result = _run_plain(tmp_path, "--result", str(out), "--", sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "not execsys's to write\n"
    assert not link.is_symlink() and json.loads(link.read_text())["id"] == json.loads(result.stdout)["id"]


def test_with_sidecar_dir_two_results_of_one_name_keep_two_sidecars(tmp_path, ledger_path):
    for task in ("a", "b"):
        (tmp_path / task).mkdir()
    (tmp_path / "sidecars").mkdir()
    code = "open('a/results.json', 'w').write('1'); open('b/results.json', 'w').write('2')"
    result = _run_plain(tmp_path, "--result", "a/*.json", "--result", "b/*.json", "--sidecar-dir", "sidecars",
                        "--", sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    import blake3

    described = {}
    for sidecar in sorted((tmp_path / "sidecars").glob("*.execsys.json")):  # the receipts are there too
        body = json.loads(sidecar.read_text())
        tag = blake3.blake3(os.fsencode(body["result"]["path"])).hexdigest()[:12]
        assert sidecar.name == f"results.json.{tag}.execsys.json"  # the documented name
        described[body["result"]["path"]] = body["result"]["blake3"]
    assert described == {r["path"]: r["blake3"] for r in record["results"]}
    assert len(described) == 2 and sorted(record["sidecars"]) == sorted(
        str(p) for p in (tmp_path / "sidecars").glob("*.execsys.json"))


def test_a_result_still_growing_after_the_harness_exits_is_listed_and_the_run_recorded(tmp_path, ledger_path):
    out = tmp_path / "res" / "growing.log"
    out.parent.mkdir()
    pid_file = tmp_path / "writer.pid"
    writer = (f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
              f"fh = open({str(out)!r}, 'wb')\nend = time.monotonic() + 60\n"
              "while time.monotonic() < end:\n"
              "    fh.write(b'x' * 4096); fh.flush(); time.sleep(0.02)\n"
              "    if fh.tell() > 1 << 20: fh.seek(0); fh.truncate()\n")
    # the harness leaves a writer behind (its own session: nothing of the run's stops it) and exits
    code = (f"import subprocess, sys, time, os\nsubprocess.Popen([sys.executable, '-c', {writer!r}], "
            "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            f"while not os.path.exists({str(out)!r}): time.sleep(0.01)\n")
    try:
        started = time.monotonic()
        result = _run_plain(tmp_path, "--result", str(out), "--", sys.executable, "-c", code, timeout=60)
        assert time.monotonic() - started < 50
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert result.returncode == 1, result.stderr
    record = json.loads(result.stdout)
    assert record["exit_code"] == 0 and record["results"] == [] and record["sidecars"] == []
    [error] = record["result_errors"]
    assert error["path"] == str(out) and "still being written after the harness exited" in error["error"]
    assert f"result {out} not digested: still being written" in result.stderr
    [run] = _ledger_bodies(ledger_path)
    assert run["id"] == record["id"] and run["result_errors"] == record["result_errors"]


def test_a_harness_that_deletes_its_working_directory_is_still_recorded(tmp_path, ledger_path):
    work = tmp_path / "work"
    work.mkdir()
    result = _run_plain(work, "--", sys.executable, "-c", f"import os, shutil; os.chdir('/'); shutil.rmtree({str(work)!r})")
    assert result.returncode == 0, result.stderr
    assert not work.exists()
    record = json.loads(result.stdout)
    assert "the working directory was deleted during the run" in result.stderr
    assert [r["id"] for r in _ledger_bodies(ledger_path)] == [record["id"]]


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A 1 MiB tmpfs of this test's own (root may mount one): a directory that can really be made
    read-only or full, which chmod cannot do to root."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root in a mount namespace that allows it): "
                    f"{made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


FILL = r"""
import errno, os, subprocess, sys
out, how = sys.argv[1], sys.argv[2]
open(out, "w").write('{"score": 1}\n')
if how == "read-only":
    subprocess.run(["mount", "-o", "remount,ro", os.path.dirname(out)], check=True)
else:
    fd = os.open(os.path.join(os.path.dirname(out), "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    os.close(fd)
"""


@pytest.mark.parametrize("how, reason", [("read-only", "read-only file system"),
                                         ("full", "no space left on device")])
def test_a_read_only_or_full_result_directory_costs_the_sidecar_not_the_run(tmp_path, ledger_path, small_tmpfs,
                                                                            how, reason):
    out = small_tmpfs / "scores.json"
    script = tmp_path / "fill.py"
    script.write_text(FILL)
    result = _run_plain(tmp_path, "--result", str(out), "--", sys.executable, str(script), str(out), how)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    record = json.loads(result.stdout)
    sidecar = small_tmpfs / "scores.json.execsys.json"
    assert [r["path"] for r in record["results"]] == [str(out)]
    assert record["sidecar_errors"] == [{"sidecar": str(sidecar), "error": reason}]
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("✗ record")]
    assert f"sidecar {sidecar} not written: {reason}" in line
    assert not sidecar.exists() and not [p for p in small_tmpfs.iterdir() if p.name.endswith(".tmp")]
    [run] = _ledger_bodies(ledger_path)
    assert run["id"] == record["id"] and run["sidecar_errors"] == record["sidecar_errors"]


def test_a_system_that_cannot_be_re_observed_after_the_run_is_recorded_as_drifted(tmp_path, ledger_path):
    """The harness turns a declared file into a FIFO: verify-after cannot read it. The run is still
    recorded, and cannot claim the same system after it."""
    (tmp_path / "env").write_text("A=1\n")
    (tmp_path / "execsys.toml").write_text('[runtime]\nenv_file = "env"\n')
    code = "import os; os.unlink('env'); os.mkfifo('env')"
    result = _run_plain(tmp_path, "--", sys.executable, "-c", code, timeout=60)
    assert result.returncode == 1, result.stderr
    record = json.loads(result.stdout)
    assert record["verdict"] == "drifted" and record["verify_after"]["verdict"] == "unverified"
    assert "could not be re-observed" in record["verdict_detail"] and "FIFO" in record["verify_after"]["sentence"]
    assert [r["id"] for r in _ledger_bodies(ledger_path)] == [record["id"]]
