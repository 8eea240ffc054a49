"""``execsys run``'s operation (``run_eval``) as decisions, in-process: each row runs a real short
harness (``sys.executable -c ...``) against a ledger in tmp_path, with the gate off and no watch
unless the row is about them, and checks what a user reads: the verdict, the harness's own exit
code, the step texts, the result found, the identity step, the signals forwarded.

tests/test_run_cli.py runs the same operation end to end through the CLI; these are the rows a
plausible slip in execsys/run/runner.py gets wrong and the CLI tests cannot see from inside.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from execsys.ledger import Ledger
from execsys.operation import new_cancel
from execsys.run import runner
from execsys.run.events import (
    ChildStarted,
    DriftDetected,
    ResultFound,
    RunRecorded,
    SignalForwarded,
    StepFinished,
    StepStarted,
)
from execsys.run.gate import GateOutcome
from execsys.run.options import JOB_LOCK_ENV, JobIdentity, RunOptions
from execsys.sources import load_sources


def _options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, *args: str, **overrides: Any) -> RunOptions:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EXECSYS_LEDGER", str(tmp_path / "ledger.sqlite3"))
    sources = load_sources(None, None, ledger=tmp_path / "ledger.sqlite3")
    overrides.setdefault("gate", "off")
    overrides.setdefault("watch_s", 0)
    return RunOptions.from_sources(sources, command=[sys.executable, "-c", code, *args], **overrides)


def _run(options: RunOptions, **kwargs: Any) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    extra = kwargs.pop("on_event", None)

    def hear(event: Any) -> None:
        events.append(event)
        if extra is not None:
            extra(event)

    return runner.run_eval(options, on_event=hear, **kwargs), events


def _finished(events: list[Any], step: str) -> list[tuple[str, str]]:
    return [(e.status, e.text) for e in events if isinstance(e, StepFinished) and e.step == step]


def _started(events: list[Any], step: str) -> list[str]:
    return [e.text for e in events if isinstance(e, StepStarted) and e.step == step]


def _runs(tmp_path: Path, kind: str = "run") -> list[dict]:
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        return [r.body for r in ledger.iter(kind=kind)]


# -- a plain run: verdict, exit code, environment, the steps said ---------------------------------------

ENV_DUMP = ("import json, os; json.dump({k: v for k, v in os.environ.items() if k.startswith('EXECSYS_')}, "
            "open('env.json', 'w')); open('scores.json', 'w').write('{\"acc\": 1}')")


def test_a_clean_run_pins_records_and_hands_the_harness_its_identity(tmp_path, monkeypatch) -> None:
    options = _options(tmp_path, monkeypatch, ENV_DUMP, results=["scores.json"])
    record, events = _run(options)
    assert (record.verdict, record.exit_code, record.exit_status) == ("clean", 0, 0)
    assert record.identity_how == "pinned" and record.identity_id and record.refused is None
    assert record.started_at is not None and record.finished_at is not None
    lock = json.loads((tmp_path / "execsys.lock.json").read_text())
    assert lock["id"] == record.identity_id
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["EXECSYS_RUN_ID"] == record.id
    assert env["EXECSYS_IDENTITY"] == record.identity_id
    assert env["EXECSYS_LOCK"] == str(tmp_path / "execsys.lock.json")
    assert env["EXECSYS_LEDGER"] == str(tmp_path / "ledger.sqlite3")
    assert "EXECSYS_HOOK_DIR" not in env  # only Inspect gets the hook's directory
    assert [r["path"] for r in record.results] == [str(tmp_path / "scores.json")]
    assert record.results[0]["harness"] == "other" and len(record.results[0]["blake3"]) == 64
    assert record.watch == {"interval_s": 0.0, "observations": 0, "errors": []} and record.drift == []
    assert record.verify_after is not None and record.verify_after["verdict"] == "same-system"
    assert record.verify_after["changed"] == [] and record.verify_after["observed_id"] == record.identity_id
    # the steps, as a face shows them
    assert _started(events, "gate") == ["doctor skipped (--gate off)"]
    assert _finished(events, "gate") == [("skip", "doctor skipped (--gate off), recorded")]
    assert _started(events, "identity") == [f"no lock at {tmp_path / 'execsys.lock.json'}: pinning the system now"]
    assert _finished(events, "identity") == [("ok", f"identity {record.identity_id[:12]} pinned")]
    assert _started(events, "watch") == ["watch off"]
    assert _finished(events, "watch") == []
    assert _finished(events, "run") == [("ok", "harness exited 0")]
    assert _started(events, "verify") == [f"re-observing identity {record.identity_id[:12]}"]
    [(status, text)] = _finished(events, "verify")
    assert status == "ok" and text.startswith("same-system: ")
    assert _started(events, "results") == ["looking for result files written during the run"]
    assert _finished(events, "results") == [("ok", "1 result file(s)")]
    assert [(e.path, e.harness) for e in events if isinstance(e, ResultFound)] == [(str(tmp_path / "scores.json"),
                                                                                    "other")]
    [(status, text)] = _finished(events, "record")
    assert status == "ok" and text.startswith(f"{record.id}: clean: ")
    assert "receipt" in text and "unsigned" in text
    [recorded] = [e for e in events if isinstance(e, RunRecorded)]
    assert (recorded.run_id, recorded.verdict) == (record.id, "clean")
    assert recorded.sidecars == tuple(record.sidecars) and len(record.sidecars) == 1
    [started] = [e for e in events if isinstance(e, ChildStarted)]
    assert started.argv == tuple(options.command) and started.pid > 0
    [row] = _runs(tmp_path)
    assert row["id"] == record.id and row["verdict"] == "clean" and row["sidecars"] == record.sidecars
    assert row["receipts"] == record.receipts and len(record.receipts) == 1


@pytest.mark.parametrize("code", [3, 1, 255])
def test_a_failed_harness_keeps_its_own_exit_code(tmp_path, monkeypatch, code) -> None:
    record, events = _run(_options(tmp_path, monkeypatch, f"import sys; sys.exit({code})"))
    assert (record.verdict, record.exit_code, record.exit_status) == ("failed", code, code)
    assert _finished(events, "run") == [("fail", f"harness exited {code}")]
    assert _finished(events, "results") == [("warn", "0 result file(s)")]
    assert [r["verdict"] for r in _runs(tmp_path)] == ["failed"]


def test_the_command_is_recorded_and_said_redacted(tmp_path, monkeypatch) -> None:
    secret = "sk-" + "a1b2c3d4" * 5
    options = _options(tmp_path, monkeypatch, "pass", "--api-key", secret)
    record, events = _run(options)
    assert secret not in json.dumps(record.to_json()) and secret not in repr(events)
    assert record.command[:3] == options.command[:3] and record.command[3] == "--api-key"
    assert secret not in json.dumps(_runs(tmp_path))


def test_the_harness_stdout_goes_to_stderr_under_json(tmp_path, monkeypatch, capfd) -> None:
    options = _options(tmp_path, monkeypatch, "print('from-the-harness')", child_stdout_to_stderr=True)
    _run(options)
    out, err = capfd.readouterr()
    assert "from-the-harness" in err and "from-the-harness" not in out
    options = _options(tmp_path, monkeypatch, "print('plain-harness')")
    _run(options)
    out, err = capfd.readouterr()
    assert "plain-harness" in out and "plain-harness" not in err


# -- results -------------------------------------------------------------------------------------------

def test_a_result_file_rewritten_in_place_is_found_and_an_untouched_one_is_not(tmp_path, monkeypatch) -> None:
    (tmp_path / "scores.json").write_text('{"acc": 0.1}')
    (tmp_path / "old.json").write_text('{"acc": 0.2}')
    past = time.time() - 100
    os.utime(tmp_path / "scores.json", (past, past))
    os.utime(tmp_path / "old.json", (past, past))
    code = "open('scores.json', 'w').write('{\"acc\": 0.9}')"
    record, events = _run(_options(tmp_path, monkeypatch, code, results=["*.json"]))
    assert [r["path"] for r in record.results] == [str(tmp_path / "scores.json")]
    assert record.verdict == "clean"
    assert _finished(events, "results") == [("ok", "1 result file(s)")]


def test_a_result_that_cannot_be_digested_is_listed_and_said(tmp_path, monkeypatch) -> None:
    code = "open('a.json', 'w').write('1'); open('b.json', 'w').write('2')"
    options = _options(tmp_path, monkeypatch, code, results=["a.json", "b.json"])
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    real = runner.results_step.settled_digests

    def digests(paths):
        out = real(paths)
        out[a] = OSError(f"{a} is still growing")
        out[b] = OSError("gone")
        return out

    monkeypatch.setattr(runner.results_step, "settled_digests", digests)
    record, events = _run(options)
    assert record.results == []
    assert record.result_errors == [{"path": str(a), "error": f"{a} is still growing"},
                                    {"path": str(b), "error": "gone"}]
    assert _finished(events, "results") == [
        ("warn", f"0 result file(s); not digested: {a} is still growing; {b}: gone")]
    assert record.exit_status == 1 and record.verdict == "clean"
    [(status, text)] = _finished(events, "record")
    assert status == "fail" and text.startswith(f"{record.id}: recorded in the ledger, but result {a}")
    assert not [e for e in events if isinstance(e, ResultFound)]


def test_one_result_digested_and_one_not_is_a_warning(tmp_path, monkeypatch) -> None:
    code = "open('a.json', 'w').write('1'); open('b.json', 'w').write('2')"
    options = _options(tmp_path, monkeypatch, code, results=["a.json", "b.json"])
    b = tmp_path / "b.json"
    real = runner.results_step.settled_digests
    monkeypatch.setattr(runner.results_step, "settled_digests", lambda paths: {**real(paths), b: OSError("gone")})
    record, events = _run(options)
    assert [r["path"] for r in record.results] == [str(tmp_path / "a.json")]
    assert _finished(events, "results") == [("warn", f"1 result file(s); not digested: {b}: gone")]


# -- verify after ----------------------------------------------------------------------------------------

def _declared_env(tmp_path: Path) -> None:
    (tmp_path / "env").write_text("OMP_NUM_THREADS=1\n")
    (tmp_path / "execsys.toml").write_text('[runtime]\nenv_file = "env"\n')


def test_a_new_identity_after_the_run_is_drifted_not_clean(tmp_path, monkeypatch) -> None:
    _declared_env(tmp_path)
    record, events = _run(_options(tmp_path, monkeypatch, "open('env', 'w').write('OMP_NUM_THREADS=2\\n')"))
    assert record.exit_code == 0
    assert record.verify_after["verdict"] == "new-identity"
    assert record.verify_after["changed"] == ["runtime"]
    assert record.verify_after["observed_id"] not in (None, record.identity_id)
    assert (record.verdict, record.exit_status) == ("drifted", 1)
    [(status, text)] = _finished(events, "verify")
    assert status == "warn" and text.startswith("new-identity: ")
    assert [r["verdict"] for r in _runs(tmp_path)] == ["drifted"]


def test_a_system_that_cannot_be_re_observed_is_unverified_and_drifted(tmp_path, monkeypatch) -> None:
    _declared_env(tmp_path)
    record, events = _run(_options(tmp_path, monkeypatch, "import os; os.unlink('env'); os.mkfifo('env')"))
    after = record.verify_after
    assert after["verdict"] == "unverified" and after["changed"] == [] and after["observed_id"] is None
    assert after["sentence"].startswith("the system could not be re-observed after the run (")
    assert after["sentence"].endswith(")") and "FIFO" in after["sentence"]
    assert _finished(events, "verify") == [("warn", f"unverified: {after['sentence']}")]
    assert (record.verdict, record.exit_status) == ("drifted", 1)


# -- the identity step: verified, refused, re-pinned, the job's -----------------------------------------

def test_a_matching_lock_is_verified_and_a_changed_one_refused_unless_repinned(tmp_path, monkeypatch) -> None:
    _declared_env(tmp_path)
    lock_path = tmp_path / "execsys.lock.json"
    first, _ = _run(_options(tmp_path, monkeypatch, "pass"))
    second, events = _run(_options(tmp_path, monkeypatch, "pass"))
    assert (second.identity_how, second.identity_id, second.verdict) == ("verified", first.identity_id, "clean")
    assert _started(events, "identity") == [f"verifying {lock_path}"]
    assert _finished(events, "identity") == [("ok", f"identity {first.identity_id[:12]} verified")]

    (tmp_path / "env").write_text("OMP_NUM_THREADS=3\n")
    marker = tmp_path / "ran"
    refused, events = _run(_options(tmp_path, monkeypatch, f"open({str(marker)!r}, 'w')"))
    assert refused.verdict == "refused" and refused.exit_status == 1 and not marker.exists()
    assert refused.identity_id == first.identity_id and refused.identity_how is None
    assert refused.refused.startswith("the lock no longer matches this system (")
    assert refused.refused.endswith("); give --repin to pin the system as it is now")
    assert _finished(events, "identity") == [("fail", refused.refused)]
    assert _started(events, "run") == [] and refused.started_at is None
    assert json.loads(lock_path.read_text())["id"] == first.identity_id  # the lock is left as it was

    repinned, events = _run(_options(tmp_path, monkeypatch, f"open({str(marker)!r}, 'w')", repin=True))
    assert repinned.identity_how == "repinned" and repinned.identity_id != first.identity_id
    assert marker.exists() and repinned.verdict == "clean"
    assert json.loads(lock_path.read_text())["id"] == repinned.identity_id
    [(status, text)] = _finished(events, "identity")
    assert status == "warn"
    assert text == (f"identity {repinned.identity_id[:12]} repinned; this is a new identity (the lock held "
                    f"{first.identity_id[:12]}…); it is unlicensed until probed")
    assert [r["verdict"] for r in _runs(tmp_path)] == ["clean", "clean", "refused", "clean"]


def test_a_job_whose_lock_was_repinned_since_it_started_is_refused(tmp_path, monkeypatch) -> None:
    first, _ = _run(_options(tmp_path, monkeypatch, "pass"))
    lock_path = tmp_path / "execsys.lock.json"
    marker = tmp_path / "ran"
    options = _options(tmp_path, monkeypatch, f"open({str(marker)!r}, 'w')",
                       job=JobIdentity(lock_path, "0123456789abcdef0123"))
    record, events = _run(options)
    assert record.verdict == "refused" and not marker.exists()
    assert record.identity_from == JOB_LOCK_ENV and record.identity_id == first.identity_id
    assert record.refused == (f"this job started under identity 0123456789ab (EXECSYS_IDENTITY), but {lock_path} "
                              f"now holds {first.identity_id[:12]}: the node was re-pinned since; give --repin to "
                              "run under the system as it is now")
    assert _started(events, "identity") == [f"verifying {lock_path} (the job's, from EXECSYS_LOCK)"]

    # the same job with --repin runs under the lock as it is (it still matches: verified)
    record, events = _run(_options(tmp_path, monkeypatch, "pass", repin=True,
                                   job=JobIdentity(lock_path, "0123456789abcdef0123")))
    assert (record.verdict, record.identity_how, record.identity_from) == ("clean", "verified", JOB_LOCK_ENV)
    assert _finished(events, "identity") == [
        ("ok", f"identity {first.identity_id[:12]} verified (the job's, from EXECSYS_LOCK)")]
    # a job under the lock's own identity, or one that exported only the lock, runs
    for job_id in (first.identity_id, None):
        record, _ = _run(_options(tmp_path, monkeypatch, "pass", job=JobIdentity(lock_path, job_id)))
        assert (record.verdict, record.identity_how) == ("clean", "verified")


# -- the gate ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "failing", "override", "started", "finished", "verdict"), [
    pytest.param("fail", ["h: x", "k: y"], None, "checking the ten hazards",
                 ("fail", "the gate failed (h: x; k: y): fix it, or run with --override REASON (recorded) or "
                          "--gate warn"), "refused", id="failing-gate-refuses"),
    pytest.param("fail", ["h: x"], "known stray", "checking the ten hazards",
                 ("warn", "1 failing (overridden: known stray): h: x"), "overridden", id="overridden-runs"),
    pytest.param("warn", ["h: x", "k: y"], None, "checking the ten hazards",
                 ("warn", "2 failing (--gate warn): h: x; k: y"), "clean", id="warn-runs"),
    pytest.param("fail", [], None, "checking the ten hazards", ("ok", "doctor clean (doctor_7)"), "clean",
                 id="passing-gate"),
])
def test_the_gate_step(tmp_path, monkeypatch, mode, failing, override, started, finished, verdict) -> None:
    outcome = GateOutcome(mode, "hazards" if failing else "clean", "doctor_7", list(failing), override)
    seen: list[tuple] = []

    def gate(declaration, gate_mode, given_override, ledger, lock):
        seen.append((gate_mode, given_override, lock))
        return outcome

    monkeypatch.setattr(runner, "run_gate", gate)
    marker = tmp_path / "ran"
    record, events = _run(_options(tmp_path, monkeypatch, f"open({str(marker)!r}, 'w')", gate=mode,
                                   override=override))
    assert seen == [(mode, override, None)]
    assert _started(events, "gate") == [started]
    assert _finished(events, "gate") == [finished]
    assert record.verdict == verdict and record.doctor == outcome.to_json()
    assert marker.exists() == (verdict != "refused")
    if verdict == "refused":
        assert record.refused == finished[1] and _started(events, "identity") == []
        assert not (tmp_path / "execsys.lock.json").exists()


# -- signals and cancel ------------------------------------------------------------------------------------

IGNORING = ("import os, signal, time; signal.signal(signal.SIG{sig}, signal.SIG_IGN); "
            "open('ready', 'w').close(); time.sleep(60)")
STOPS = ("import os, signal, sys, time; signal.signal(signal.SIG{sig}, lambda *a: sys.exit(9)); "
         "open('ready', 'w').close(); time.sleep(60)")


def _wait_ready(tmp_path: Path) -> None:
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_cancel_sends_sigint_then_sigkill_after_the_grace(tmp_path, monkeypatch) -> None:
    cancel = new_cancel(None)

    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            _wait_ready(tmp_path)
            cancel.set()

    options = _options(tmp_path, monkeypatch, IGNORING.format(sig="INT"), grace_s=0.2)
    record, events = _run(options, on_event=on_event, cancel=cancel)
    assert record.signals == ["SIGINT", "SIGKILL"] and record.exit_code == -signal.SIGKILL
    assert (record.verdict, record.exit_status) == ("interrupted", 137)
    assert [e.signal for e in events if isinstance(e, SignalForwarded)] == ["SIGINT", "SIGKILL"]
    assert _finished(events, "run") == [("fail", "harness exited -9 after SIGINT, SIGKILL")]


def test_a_harness_that_stops_on_the_cancel_is_not_killed(tmp_path, monkeypatch) -> None:
    cancel = new_cancel(None)

    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            _wait_ready(tmp_path)
            cancel.set()

    record, events = _run(_options(tmp_path, monkeypatch, STOPS.format(sig="INT"), grace_s=30),
                          on_event=on_event, cancel=cancel)
    assert record.signals == ["SIGINT"] and record.exit_code == 9
    assert (record.verdict, record.exit_status) == ("interrupted", 9)
    assert _finished(events, "run") == [("fail", "harness exited 9 after SIGINT")]


@pytest.mark.parametrize("sig", ["TERM", "HUP"])
def test_a_sigterm_or_hangup_is_forwarded_and_the_harness_killed_after_the_grace(tmp_path, monkeypatch, sig) -> None:
    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            _wait_ready(tmp_path)
            os.kill(os.getpid(), getattr(signal, f"SIG{sig}"))

    record, _ = _run(_options(tmp_path, monkeypatch, IGNORING.format(sig=sig), grace_s=0.2), on_event=on_event)
    assert record.signals == [f"SIG{sig}", "SIGKILL"] and record.exit_code == -signal.SIGKILL
    assert record.verdict == "interrupted"


def test_a_sigterm_the_harness_obeys_is_forwarded_once(tmp_path, monkeypatch) -> None:
    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            _wait_ready(tmp_path)
            os.kill(os.getpid(), signal.SIGTERM)

    record, _ = _run(_options(tmp_path, monkeypatch, STOPS.format(sig="TERM"), grace_s=30), on_event=on_event)
    assert record.signals == ["SIGTERM"] and record.exit_code == 9 and record.exit_status == 9


def test_a_second_ctrl_c_kills_the_group(tmp_path, monkeypatch) -> None:
    forwarded: list[str] = []

    def press_twice(pid: int) -> None:
        _wait_ready(tmp_path)
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 30
        while not forwarded and time.monotonic() < deadline:
            time.sleep(0.01)
        # the second press only while the harness (which ignores SIGINT) still runs: a first press
        # wrongly taken for a second one has killed it, and the run is over
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if alive:
            os.kill(os.getpid(), signal.SIGINT)

    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            threading.Thread(target=press_twice, args=(event.pid,), daemon=True).start()
        if isinstance(event, SignalForwarded):
            forwarded.append(event.signal)

    before = signal.getsignal(signal.SIGINT)
    record, _ = _run(_options(tmp_path, monkeypatch, IGNORING.format(sig="INT"), grace_s=30), on_event=on_event)
    assert signal.getsignal(signal.SIGINT) is before  # handed back as it was
    assert record.signals == ["SIGINT", "SIGKILL"] and record.exit_code == -signal.SIGKILL


def test_a_sigterm_after_the_identity_but_before_the_start_never_starts_the_harness(tmp_path, monkeypatch) -> None:
    def on_event(event) -> None:
        if isinstance(event, StepStarted) and event.step == "watch":
            os.kill(os.getpid(), signal.SIGTERM)

    marker = tmp_path / "ran"
    before = signal.getsignal(signal.SIGTERM)
    record, events = _run(_options(tmp_path, monkeypatch, f"open({str(marker)!r}, 'w')"), on_event=on_event)
    assert signal.getsignal(signal.SIGTERM) is before
    assert not marker.exists() and record.started_at is None and record.exit_code is None
    assert record.signals == ["SIGTERM"] and record.identity_how == "pinned"
    assert (record.verdict, record.exit_status) == ("interrupted", 143)
    assert _finished(events, "run") == [("fail", "not started: SIGTERM received")]
    assert _started(events, "run") == []
    assert _started(events, "verify") != []  # still verified and recorded
    assert [r["verdict"] for r in _runs(tmp_path)] == ["interrupted"]


def test_a_sigterm_during_the_gate_stops_before_the_identity(tmp_path, monkeypatch) -> None:
    def on_event(event) -> None:
        if isinstance(event, StepStarted) and event.step == "gate":
            os.kill(os.getpid(), signal.SIGTERM)

    record, events = _run(_options(tmp_path, monkeypatch, "pass"), on_event=on_event)
    assert record.signals == ["SIGTERM"] and record.started_at is None and record.identity_id is None
    assert _finished(events, "run") == [("fail", "not started: SIGTERM received")]
    assert _started(events, "identity") == [] and not (tmp_path / "execsys.lock.json").exists()
    assert [r["verdict"] for r in _runs(tmp_path)] == ["interrupted"]


# -- the watch ---------------------------------------------------------------------------------------------

class _FakeWatcher:
    made: list[_FakeWatcher] = []

    def __init__(self, declared_runtime, interval_s, on_look=None) -> None:
        self.declared_runtime, self.interval_s, self.on_look = declared_runtime, interval_s, on_look
        self.active = True
        self.observations = 3
        self.errors = [f"e{i}" for i in range(7)]
        self.drift: list[dict] = []
        self.calls: list[str] = []
        _FakeWatcher.made.append(self)

    def start(self) -> None:
        self.calls.append("start")
        event = {"at": "t", "component": "runtime.process.pid", "before": 1, "after": 2}
        self.drift.append(event)
        self.on_look([event])

    def stop(self) -> None:
        self.calls.append("stop")


def test_an_active_watch_is_said_started_stopped_and_its_drift_recorded(tmp_path, monkeypatch) -> None:
    _FakeWatcher.made = []
    monkeypatch.setattr(runner, "Watcher", _FakeWatcher)
    _declared_env(tmp_path)
    record, events = _run(_options(tmp_path, monkeypatch, "pass", watch_s=0.5))
    [watcher] = _FakeWatcher.made
    assert watcher.calls == ["start", "stop"] and watcher.interval_s == 0.5
    assert str(watcher.declared_runtime.get("env_file")).endswith("env")
    assert _started(events, "watch") == ["watching the runtime every 0.5 s"]
    assert _finished(events, "watch") == [("warn", "1 drift event(s) in 3 observations")]
    [drift] = [e for e in events if isinstance(e, DriftDetected)]
    assert drift.event["component"] == "runtime.process.pid" and len(drift.events) == 1
    assert record.watch == {"interval_s": 0.5, "observations": 3, "errors": ["e0", "e1", "e2", "e3", "e4"]}
    assert record.drift == watcher.drift and (record.verdict, record.exit_status) == ("drifted", 1)


def test_a_watch_without_drift_is_ok_and_one_without_a_runtime_is_said_off(tmp_path, monkeypatch) -> None:
    class Quiet(_FakeWatcher):
        def start(self) -> None:
            self.calls.append("start")

    monkeypatch.setattr(runner, "Watcher", Quiet)
    record, events = _run(_options(tmp_path, monkeypatch, "pass", watch_s=2))
    assert _started(events, "watch") == ["watching the runtime every 2 s"]
    assert _finished(events, "watch") == [("ok", "0 drift event(s) in 3 observations")]
    assert record.verdict == "clean"
    monkeypatch.undo()
    record, events = _run(_options(tmp_path, monkeypatch, "pass", watch_s=2))
    assert _started(events, "watch") == ["watch off: no [runtime] endpoint or process declared"]
    assert _finished(events, "watch") == []


# -- the working directory deleted -------------------------------------------------------------------------

def test_a_harness_that_deletes_its_working_directory_is_still_verified_and_recorded(tmp_path, monkeypatch) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.setenv("EXECSYS_LEDGER", str(tmp_path / "ledger.sqlite3"))
    monkeypatch.chdir(work)
    sources = load_sources(None, None, ledger=tmp_path / "ledger.sqlite3")
    options = RunOptions.from_sources(sources, command=[sys.executable, "-c", "import os; os.rmdir(os.getcwd())"],
                                      gate="off", watch_s=0)
    options.lock_path = tmp_path / "execsys.lock.json"
    record, events = _run(options)
    assert not work.exists() and record.verdict == "clean"
    assert ("warn", f"the working directory was deleted during the run; carrying on from {tmp_path / 'a'}") in \
        _finished(events, "run")
    assert Path.cwd() == tmp_path / "a"


def test_leave_vanished_cwd(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert runner._leave_vanished_cwd(tmp_path) is None and Path.cwd() == tmp_path
    deep = tmp_path / "x" / "y" / "z"
    deep.mkdir(parents=True)
    os.chdir(deep)
    for path in (deep, deep.parent, deep.parent.parent):
        path.rmdir()
    assert runner._leave_vanished_cwd(deep) == str(tmp_path)
    assert Path.cwd() == tmp_path


# -- the pieces ---------------------------------------------------------------------------------------------

def test_hook_reports_are_read_summed_and_the_directory_removed(tmp_path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "b.json").write_text(json.dumps({"task": "b", "model_calls": 3, "mismatches": 1}))
    (hook / "a.json").write_text(json.dumps({"task": "a", "model_calls": 4, "mismatches": None}))
    (hook / "c.json").write_text("{not json")
    (hook / "d.txt").write_text(json.dumps({"model_calls": 100}))
    out = runner._hook_reports(hook)
    assert [r["task"] for r in out["reports"]] == ["a", "b"]
    assert (out["model_calls"], out["mismatches"]) == (7, 1)
    assert not hook.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert runner._hook_reports(empty) == {"reports": [], "model_calls": 0, "mismatches": 0}


def test_background_returns_or_reraises() -> None:
    assert runner._Background(lambda: 42).result() == 42

    def boom():
        raise KeyError("k")

    with pytest.raises(KeyError):
        runner._Background(boom).result()


@pytest.mark.parametrize(("receipts", "said"), [
    pytest.param([], "", id="none-nothing-said"),
    pytest.param(["a"], "; 1 receipt, unsigned (no signing key)", id="one"),
    pytest.param(["a", "b"], "; 2 receipts, unsigned (no signing key)", id="two-plural"),
])
def test_receipts_said(receipts, said) -> None:
    rec = runner.RunRecord(id="r", command=["x"], cwd="/", receipts=receipts)
    assert runner._receipts_said(rec, RunOptions(command=["x"], declaration=None, lock=None,  # type: ignore[arg-type]
                                                 lock_path=Path("/l"))) == said


class _Prepared:
    def __init__(self, paths, late, key) -> None:
        self.paths, self.errors, self._late, self._key = list(paths), [], late, key
        self.discarded = False

    def commit(self):
        return self._late

    def discard(self) -> None:
        self.discarded = True


def test_a_sidecar_or_receipt_renamed_away_after_the_row_is_recorded_in_its_own_row(tmp_path, monkeypatch) -> None:
    sidecars = _Prepared(["/r/a.execsys.json", "/r/b.execsys.json"],
                         [{"sidecar": "/r/a.execsys.json", "error": "renamed away"}], "sidecar")
    receipts = _Prepared(["/r/a.intoto.json", "/r/b.intoto.json"],
                         [{"receipt": "/r/b.intoto.json", "error": "gone"}], "receipt")
    monkeypatch.setattr(runner, "prepare_sidecars", lambda *a: sidecars)
    monkeypatch.setattr(runner, "prepare_receipts", lambda *a: receipts)
    monkeypatch.setattr(runner, "keep_receipts", lambda *a: None)
    record, events = _run(_options(tmp_path, monkeypatch, "pass"))
    assert record.sidecars == ["/r/b.execsys.json"] and record.receipts == ["/r/a.intoto.json"]
    assert record.sidecar_errors == [{"sidecar": "/r/a.execsys.json", "error": "renamed away"}]
    assert record.receipt_errors == [{"receipt": "/r/b.intoto.json", "error": "gone"}]
    [run] = _runs(tmp_path)
    assert run["sidecars"] == ["/r/a.execsys.json", "/r/b.execsys.json"]
    [late] = _runs(tmp_path, "run-sidecars")
    assert late == {"run": record.id, "sidecar_errors": record.sidecar_errors, "sidecars": ["/r/b.execsys.json"]}
    [late_receipts] = _runs(tmp_path, "run-receipts")
    assert late_receipts == {"run": record.id, "receipt_errors": record.receipt_errors,
                             "receipts": ["/r/a.intoto.json"]}
    [(status, text)] = _finished(events, "record")
    assert status == "fail" and "sidecar /r/a.execsys.json not written" in text
    assert record.exit_status == 1
    assert not sidecars.discarded and not receipts.discarded


def test_a_ledger_that_cannot_take_the_row_discards_what_was_prepared(tmp_path, monkeypatch) -> None:
    sidecars, receipts = _Prepared([], [], "sidecar"), _Prepared([], [], "receipt")
    monkeypatch.setattr(runner, "prepare_sidecars", lambda *a: sidecars)
    monkeypatch.setattr(runner, "prepare_receipts", lambda *a: receipts)
    options = _options(tmp_path, monkeypatch, "pass")
    real = Ledger.append

    def append(self, kind, *a, **k):
        if kind == "run":
            raise OSError("disk full")
        return real(self, kind, *a, **k)

    monkeypatch.setattr(Ledger, "append", append)
    with pytest.raises(OSError, match="disk full"):
        _run(options)
    assert sidecars.discarded and receipts.discarded
