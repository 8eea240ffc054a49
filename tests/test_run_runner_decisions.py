"""``execsys run``'s operation (``run_eval``) as decisions, in-process: each row runs a real short
harness (``sh -c ...``) against a ledger in tmp_path, with the gate off and no watch
unless the row is about them, and checks what a user reads: the verdict, the harness's own exit
code, the step texts, the result found, the identity step, the signals forwarded.

tests/test_run_cli.py runs the same operation end to end through the CLI; these are the rows a
plausible slip in execsys/run/runner.py gets wrong and the CLI tests cannot see from inside.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from execsys.errors import InputError
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
from execsys.run.watch import Watcher as _RealWatcher
from execsys.sources import load_sources

# -- the system as the identity step sees it: a file the harness can change ------------------------------
#
# pin() and verify() observe the whole machine (a second or more each); run_eval's decisions only need
# what they answer. ``system`` in tmp_path stands for the machine: its text is the identity, a harness
# that rewrites it changes the system, and one that makes it a FIFO leaves it unobservable. Two rows at
# the end run the real pin and verify (tests/test_run_cli.py runs them all end to end).

@dataclass
class FakeIdentity:
    id: str
    runtime: dict = field(default_factory=dict)

    def declared(self, component: str) -> dict:
        return self.runtime if component == "runtime" else {}

    def to_json(self) -> dict:
        return {"schema": "fake", "id": self.id}


@dataclass
class Check:
    status: str


@dataclass
class Report:
    verdict: str
    components: dict
    observed_id: str | None
    sentence: str


class FakeSystem:
    def __init__(self, root: Path) -> None:
        self.file = root / "system"
        self.file.write_text("s1")
        self.pins: list[list] = []
        self.verifies: list[tuple] = []

    def identity_id(self) -> str:
        if not self.file.is_file():
            raise OSError(f"{self.file}: is a FIFO, not a regular file")
        return "id-" + self.file.read_text().strip() + "-0123456789abcdef"

    def pin(self, declaration, exclude):
        self.pins.append(list(exclude))
        return FakeIdentity(self.identity_id(), dict(declaration.component("runtime") or {}))

    def verify(self, identity, declaration=None, exclude=()):
        self.verifies.append((identity.id, list(exclude)))
        observed = self.identity_id()
        if observed == identity.id:
            return Report("same-system", {"runtime": Check("same"), "hardware": Check("same")}, observed,
                          "the same system")
        return Report("new-identity", {"runtime": Check("changed"), "hardware": Check("same"),
                                       "os": Check("missing")}, observed, "runtime changed")


@pytest.fixture
def system(tmp_path, monkeypatch) -> FakeSystem:
    fake = FakeSystem(tmp_path)
    monkeypatch.setattr(runner, "pin", fake.pin)
    monkeypatch.setattr(runner, "verify", fake.verify)
    return fake


def _options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, *args: str, lock: Any = None,
             **overrides: Any) -> RunOptions:
    """Options for ``sh -c SCRIPT ARGS...`` in tmp_path, gate off, no watch (unless overridden)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EXECSYS_LEDGER", str(tmp_path / "ledger.sqlite3"))
    sources = load_sources(None, None, read_lock=False, ledger=tmp_path / "ledger.sqlite3")
    overrides.setdefault("gate", "off")
    overrides.setdefault("watch_s", 0)
    options = RunOptions.from_sources(sources, command=["sh", "-c", script, "sh", *args], **overrides)
    options.lock = lock
    return options


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

ENV_DUMP = "env | grep '^EXECSYS_' > env.txt; printf '{\"acc\": 1}' > scores.json"


def test_a_clean_run_pins_records_and_hands_the_harness_its_identity(tmp_path, monkeypatch, system) -> None:
    options = _options(tmp_path, monkeypatch, ENV_DUMP, results=["scores.json"])
    record, events = _run(options)
    lock_path = tmp_path / "execsys.lock.json"
    assert (record.verdict, record.exit_code, record.exit_status) == ("clean", 0, 0)
    assert record.identity_how == "pinned" and record.identity_id == system.identity_id()
    assert record.refused is None and record.identity_from is None
    assert record.started_at is not None and record.finished_at is not None
    assert record.lock_path == str(lock_path) and record.harness == "other" and record.shard is None
    assert system.pins == [[lock_path]]
    assert json.loads(lock_path.read_text()) == {"schema": "fake", "id": record.identity_id}
    [identity_row] = _runs(tmp_path, "identity")
    assert identity_row["id"] == record.identity_id
    env = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines())
    env = {k: v for k, v in env.items() if k in ("EXECSYS_RUN_ID", "EXECSYS_IDENTITY", "EXECSYS_LOCK",
                                                 "EXECSYS_LEDGER", "EXECSYS_HOOK_DIR")}
    assert env == {"EXECSYS_RUN_ID": record.id, "EXECSYS_IDENTITY": record.identity_id,
                   "EXECSYS_LOCK": str(lock_path), "EXECSYS_LEDGER": str(tmp_path / "ledger.sqlite3")}
    assert [r["path"] for r in record.results] == [str(tmp_path / "scores.json")]
    assert record.results[0]["harness"] == "other" and len(record.results[0]["blake3"]) == 64
    assert record.watch == {"interval_s": 0.0, "observations": 0, "errors": []} and record.drift == []
    assert record.verify_after == {"verdict": "same-system", "changed": [], "observed_id": record.identity_id,
                                   "sentence": "the same system"}
    assert record.hook is None
    # verify after leaves out the lock (and the harness's own output directories: none for "other")
    assert system.verifies == [(record.identity_id, [lock_path])]
    # the steps, as a face shows them
    assert _started(events, "gate") == ["doctor skipped (--gate off)"]
    assert _finished(events, "gate") == [("skip", "doctor skipped (--gate off), recorded")]
    assert _started(events, "identity") == [f"no lock at {lock_path}: pinning the system now"]
    assert _finished(events, "identity") == [("ok", f"identity {record.identity_id[:12]} pinned")]
    assert _started(events, "watch") == ["watch off"]
    assert _finished(events, "watch") == []
    assert _started(events, "run") == [shlex.join(options.command)]
    assert _finished(events, "run") == [("ok", "harness exited 0")]
    assert _started(events, "verify") == [f"re-observing identity {record.identity_id[:12]}"]
    assert _finished(events, "verify") == [("ok", "same-system: the same system")]
    assert _started(events, "results") == ["looking for result files written during the run"]
    assert _finished(events, "results") == [("ok", "1 result file(s)")]
    [found] = [e for e in events if isinstance(e, ResultFound)]
    assert (found.path, found.blake3, found.harness) == (str(tmp_path / "scores.json"), record.results[0]["blake3"],
                                                         "other")
    assert _started(events, "record") == ["writing the run record"]
    assert _finished(events, "record") == [("ok", f"{record.id}: {record.verdict_detail()}; 1 receipt, "
                                                  "unsigned (no signing key)")]
    [recorded] = [e for e in events if isinstance(e, RunRecorded)]
    assert (recorded.run_id, recorded.verdict) == (record.id, "clean")
    assert recorded.sidecars == tuple(record.sidecars) == (str(tmp_path / "scores.json.execsys.json"),)
    assert json.loads((tmp_path / "scores.json.execsys.json").read_text())["id"] == record.id
    [started] = [e for e in events if isinstance(e, ChildStarted)]
    assert started.argv == tuple(options.command) and started.pid > 0
    assert [type(e).__name__ for e in events if not isinstance(e, (StepStarted, StepFinished))] == \
        ["ChildStarted", "ResultFound", "RunRecorded"]
    [row] = _runs(tmp_path)
    assert row["id"] == record.id and row["verdict"] == "clean" and row["sidecars"] == record.sidecars
    assert row["receipts"] == record.receipts and len(record.receipts) == 1
    assert [r["run"] for r in _runs(tmp_path, "receipt")] == [record.id]
    assert _runs(tmp_path, "run-sidecars") == [] and _runs(tmp_path, "run-receipts") == []


def test_without_a_ledger_option_the_harness_gets_none(tmp_path, monkeypatch, system) -> None:
    options = _options(tmp_path, monkeypatch, ENV_DUMP)
    options.ledger = None
    record, _ = _run(options)
    env = (tmp_path / "env.txt").read_text()
    assert "EXECSYS_LEDGER=" in env  # inherited from this process's environment, not set by the run
    monkeypatch.delenv("EXECSYS_LEDGER")
    options = _options(tmp_path, monkeypatch, ENV_DUMP)
    monkeypatch.delenv("EXECSYS_LEDGER")
    options.ledger = tmp_path / "other.sqlite3"
    record, _ = _run(options)
    assert f"EXECSYS_LEDGER={tmp_path / 'other.sqlite3'}" in (tmp_path / "env.txt").read_text()
    with Ledger.open(tmp_path / "other.sqlite3") as ledger:
        assert [r.id for r in ledger.iter(kind="run")] == [record.id]


@pytest.mark.parametrize("code", [3, 1, 255])
def test_a_failed_harness_keeps_its_own_exit_code(tmp_path, monkeypatch, system, code) -> None:
    record, events = _run(_options(tmp_path, monkeypatch, f"exit {code}"))
    assert (record.verdict, record.exit_code, record.exit_status) == ("failed", code, code)
    assert _finished(events, "run") == [("fail", f"harness exited {code}")]
    assert _finished(events, "results") == [("warn", "0 result file(s)")]
    assert [r["verdict"] for r in _runs(tmp_path)] == ["failed"]
    assert _finished(events, "record") == [("ok", f"{record.id}: failed: the harness exited {code}")]


def test_the_command_is_recorded_and_said_redacted(tmp_path, monkeypatch, system) -> None:
    secret = "sk-" + "a1b2c3d4" * 5
    options = _options(tmp_path, monkeypatch, "exit 0", "--api-key", secret)
    record, events = _run(options)
    assert secret not in json.dumps(record.to_json()) and secret not in repr(events)
    assert record.command[:4] == options.command[:4] and record.command[4] == "--api-key"
    assert secret not in json.dumps(_runs(tmp_path))


def test_the_harness_stdout_goes_to_stderr_under_json(tmp_path, monkeypatch, system, capfd) -> None:
    _run(_options(tmp_path, monkeypatch, "echo from-the-harness", child_stdout_to_stderr=True))
    out, err = capfd.readouterr()
    assert "from-the-harness" in err and "from-the-harness" not in out
    _run(_options(tmp_path, monkeypatch, "echo plain-harness"))
    out, err = capfd.readouterr()
    assert "plain-harness" in out and "plain-harness" not in err


def test_the_harness_runs_in_the_options_working_directory(tmp_path, monkeypatch, system) -> None:
    (tmp_path / "w").mkdir()
    options = _options(tmp_path, monkeypatch, "pwd > where.txt", cwd=str(tmp_path / "w"))
    _run(options)
    assert (tmp_path / "w" / "where.txt").read_text().strip() == str(tmp_path / "w")


# -- results -------------------------------------------------------------------------------------------

def test_a_result_file_rewritten_in_place_is_found_and_an_untouched_one_is_not(tmp_path, monkeypatch,
                                                                              system) -> None:
    (tmp_path / "scores.json").write_text('{"acc": 0.1}')
    (tmp_path / "old.json").write_text('{"acc": 0.2}')
    past = time.time() - 100
    os.utime(tmp_path / "scores.json", (past, past))
    os.utime(tmp_path / "old.json", (past, past))
    record, events = _run(_options(tmp_path, monkeypatch, "printf '{\"acc\": 0.9}' > scores.json",
                                   results=["*.json"]))
    assert [r["path"] for r in record.results] == [str(tmp_path / "scores.json")]
    assert record.verdict == "clean"
    assert _finished(events, "results") == [("ok", "1 result file(s)")]


def test_a_result_that_cannot_be_digested_is_listed_and_said(tmp_path, monkeypatch, system) -> None:
    options = _options(tmp_path, monkeypatch, "echo 1 > a.json; echo 2 > b.json", results=["a.json", "b.json"])
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
    assert _finished(events, "record") == [("fail", f"{record.id}: recorded in the ledger, but "
                                                    f"{record.file_problems()}")]
    assert not [e for e in events if isinstance(e, ResultFound)]


def test_one_result_digested_and_one_not_is_a_warning(tmp_path, monkeypatch, system) -> None:
    options = _options(tmp_path, monkeypatch, "echo 1 > a.json; echo 2 > b.json", results=["a.json", "b.json"])
    b = tmp_path / "b.json"
    real = runner.results_step.settled_digests
    monkeypatch.setattr(runner.results_step, "settled_digests", lambda paths: {**real(paths), b: OSError("gone")})
    record, events = _run(options)
    assert [r["path"] for r in record.results] == [str(tmp_path / "a.json")]
    assert _finished(events, "results") == [("warn", f"1 result file(s); not digested: {b}: gone")]


# -- verify after ----------------------------------------------------------------------------------------

def test_a_new_identity_after_the_run_is_drifted_not_clean(tmp_path, monkeypatch, system) -> None:
    record, events = _run(_options(tmp_path, monkeypatch, "echo s2 > system"))
    assert record.exit_code == 0
    assert record.verify_after == {"verdict": "new-identity", "changed": ["runtime", "os"],
                                   "observed_id": "id-s2-0123456789abcdef", "sentence": "runtime changed"}
    assert (record.verdict, record.exit_status) == ("drifted", 1)
    assert _finished(events, "verify") == [("warn", "new-identity: runtime changed")]
    assert [r["verdict"] for r in _runs(tmp_path)] == ["drifted"]


def test_a_system_that_cannot_be_re_observed_is_unverified_and_drifted(tmp_path, monkeypatch, system) -> None:
    record, events = _run(_options(tmp_path, monkeypatch, "rm system; mkfifo system"))
    sentence = f"the system could not be re-observed after the run ({tmp_path / 'system'}: is a FIFO, not a regular file)"
    assert record.verify_after == {"verdict": "unverified", "changed": [], "observed_id": None, "sentence": sentence}
    assert _finished(events, "verify") == [("warn", f"unverified: {sentence}")]
    assert (record.verdict, record.exit_status) == ("drifted", 1)


def test_an_input_error_re_observing_is_unverified_too(tmp_path, monkeypatch, system) -> None:
    def verify(identity, declaration=None, exclude=()):
        raise InputError("[runtime] env_file env: Permission denied")

    options = _options(tmp_path, monkeypatch, "exit 0")
    monkeypatch.setattr(runner, "verify", verify)
    record, _ = _run(options)
    assert record.verify_after["verdict"] == "unverified" and record.verdict == "drifted"
    assert record.verify_after["sentence"] == ("the system could not be re-observed after the run ([runtime] "
                                               "env_file env: Permission denied)")


# -- the identity step: verified, refused, re-pinned, the job's -----------------------------------------

def test_a_matching_lock_is_verified(tmp_path, monkeypatch, system) -> None:
    lock = FakeIdentity(system.identity_id())
    lock_path = tmp_path / "execsys.lock.json"
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0", lock=lock))
    assert (record.identity_how, record.identity_id, record.verdict) == ("verified", lock.id, "clean")
    assert system.pins == [] and not lock_path.exists()  # nothing pinned, the lock left alone
    assert system.verifies[0] == (lock.id, [lock_path])
    assert _started(events, "identity") == [f"verifying {lock_path}"]
    assert _finished(events, "identity") == [("ok", f"identity {lock.id[:12]} verified")]
    assert _runs(tmp_path, "identity") == []


def test_a_lock_that_no_longer_matches_is_refused_and_left_alone(tmp_path, monkeypatch, system) -> None:
    lock = FakeIdentity("id-s0-0123456789abcdef")
    marker = tmp_path / "ran"
    refused, events = _run(_options(tmp_path, monkeypatch, f": > {marker}", lock=lock))
    assert refused.verdict == "refused" and refused.exit_status == 1 and not marker.exists()
    assert refused.identity_id == lock.id and refused.identity_how is None
    assert refused.refused == ("the lock no longer matches this system (runtime changed); give --repin to pin the "
                               "system as it is now")
    assert _finished(events, "identity") == [("fail", refused.refused)]
    assert _started(events, "run") == [] and refused.started_at is None and _started(events, "verify") == []
    assert system.pins == [] and not (tmp_path / "execsys.lock.json").exists()
    assert [r["verdict"] for r in _runs(tmp_path)] == ["refused"]
    [(status, text)] = _finished(events, "record")
    assert (status, text) == ("ok", f"{refused.id}: refused: {refused.refused}")


def test_a_changed_lock_with_repin_is_repinned_and_says_what_it_leaves_behind(tmp_path, monkeypatch,
                                                                             system) -> None:
    lock = FakeIdentity("id-s0-0123456789abcdef")
    lock_path = tmp_path / "execsys.lock.json"
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0", lock=lock, repin=True))
    assert record.identity_how == "repinned" and record.identity_id == system.identity_id()
    assert record.verdict == "clean" and system.pins == [[lock_path]]
    assert json.loads(lock_path.read_text())["id"] == record.identity_id
    assert _finished(events, "identity") == [
        ("warn", f"identity {record.identity_id[:12]} repinned; this is a new identity (the lock held "
                 f"{lock.id[:12]}…); it is unlicensed until probed")]


def test_a_matching_lock_with_repin_is_only_verified(tmp_path, monkeypatch, system) -> None:
    lock = FakeIdentity(system.identity_id())
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0", lock=lock, repin=True))
    assert record.identity_how == "verified" and system.pins == []
    assert _finished(events, "identity") == [("ok", f"identity {lock.id[:12]} verified")]


def test_a_job_whose_lock_was_repinned_since_it_started_is_refused(tmp_path, monkeypatch, system) -> None:
    lock = FakeIdentity(system.identity_id())
    lock_path = tmp_path / "execsys.lock.json"
    marker = tmp_path / "ran"
    job = JobIdentity(lock_path, "0123456789abcdef0123")
    record, events = _run(_options(tmp_path, monkeypatch, f": > {marker}", lock=lock, job=job))
    assert record.verdict == "refused" and not marker.exists() and system.pins == []
    assert record.identity_from == JOB_LOCK_ENV and record.identity_id == lock.id
    assert record.refused == (f"this job started under identity 0123456789ab (EXECSYS_IDENTITY), but {lock_path} "
                              f"now holds {lock.id[:12]}: the node was re-pinned since; give --repin to "
                              "run under the system as it is now")
    assert _started(events, "identity") == [f"verifying {lock_path} (the job's, from EXECSYS_LOCK)"]
    assert _finished(events, "identity") == [("fail", record.refused)]


def test_a_job_with_repin_runs_under_the_lock_as_it_is(tmp_path, monkeypatch, system) -> None:
    lock = FakeIdentity(system.identity_id())
    job = JobIdentity(tmp_path / "execsys.lock.json", "0123456789abcdef0123")
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0", lock=lock, job=job, repin=True))
    assert (record.verdict, record.identity_how, record.identity_from) == ("clean", "verified", JOB_LOCK_ENV)
    assert _finished(events, "identity") == [
        ("ok", f"identity {lock.id[:12]} verified (the job's, from EXECSYS_LOCK)")]


@pytest.mark.parametrize("job_id", ["same", None], ids=["the-lock-s-own-identity", "only-the-lock-exported"])
def test_a_job_under_its_lock_runs(tmp_path, monkeypatch, system, job_id) -> None:
    lock = FakeIdentity(system.identity_id())
    job = JobIdentity(tmp_path / "execsys.lock.json", lock.id if job_id == "same" else None)
    record, _ = _run(_options(tmp_path, monkeypatch, "exit 0", lock=lock, job=job))
    assert (record.verdict, record.identity_how, record.identity_from) == ("clean", "verified", JOB_LOCK_ENV)


def test_a_job_without_a_lock_pins(tmp_path, monkeypatch, system) -> None:
    job = JobIdentity(tmp_path / "execsys.lock.json", "0123456789abcdef0123")
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0", job=job))
    assert (record.verdict, record.identity_how) == ("clean", "pinned")
    assert _started(events, "identity") == [f"no lock at {tmp_path / 'execsys.lock.json'}: pinning the system now"]


# -- the gate ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "failing", "override", "finished", "verdict"), [
    pytest.param("fail", ["h: x", "k: y"], None,
                 ("fail", "the gate failed (h: x; k: y): fix it, or run with --override REASON (recorded) or "
                          "--gate warn"), "refused", id="failing-gate-refuses"),
    pytest.param("fail", ["h: x"], "known stray", ("warn", "1 failing (overridden: known stray): h: x"),
                 "overridden", id="overridden-runs"),
    pytest.param("warn", ["h: x", "k: y"], None, ("warn", "2 failing (--gate warn): h: x; k: y"), "clean",
                 id="warn-runs"),
    pytest.param("fail", [], None, ("ok", "doctor clean (doctor_7)"), "clean", id="passing-gate"),
])
def test_the_gate_step(tmp_path, monkeypatch, system, mode, failing, override, finished, verdict) -> None:
    outcome = GateOutcome(mode, "hazards" if failing else "clean", "doctor_7", list(failing), override)
    seen: list[tuple] = []

    def gate(declaration, gate_mode, given_override, ledger, lock):
        seen.append((gate_mode, given_override, lock, ledger.path))
        return outcome

    monkeypatch.setattr(runner, "run_gate", gate)
    marker = tmp_path / "ran"
    lock = FakeIdentity(system.identity_id())
    record, events = _run(_options(tmp_path, monkeypatch, f": > {marker}", gate=mode, override=override, lock=lock))
    assert seen == [(mode, override, lock, tmp_path / "ledger.sqlite3")]
    assert _started(events, "gate") == ["checking the ten hazards"]
    assert _finished(events, "gate") == [finished]
    assert record.verdict == verdict and record.doctor == outcome.to_json()
    assert marker.exists() == (verdict != "refused")
    if verdict == "refused":
        assert record.refused == finished[1] and _started(events, "identity") == []
        assert record.identity_id is None


# -- signals and cancel ------------------------------------------------------------------------------------

IGNORING = "trap '' {sig}; : > ready; sleep 8"
# Python, not sh: a shell cannot trap a signal ignored when it started (SIGINT, for a run started in the
# background), and the harness must stop on it whatever this process was started under
STOPS = (f"exec {shlex.quote(sys.executable)} -c 'import signal, sys, time; "
         "signal.signal(signal.SIG{sig}, lambda *a: sys.exit(9)); open(\"ready\", \"w\").close(); time.sleep(8)'")


def _wait_ready(tmp_path: Path) -> None:
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_cancel_sends_sigint_then_sigkill_after_the_grace(tmp_path, monkeypatch, system) -> None:
    cancel = new_cancel(None)

    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            _wait_ready(tmp_path)
            cancel.set()

    options = _options(tmp_path, monkeypatch, IGNORING.format(sig="INT"), grace_s=0.2)
    record, events = _run(options, on_event=on_event, cancel=cancel)
    assert record.signals == ["SIGINT", "SIGKILL"] and record.exit_code == -signal.SIGKILL
    assert (record.verdict, record.exit_status) == ("interrupted", 137)
    [started] = [e for e in events if isinstance(e, ChildStarted)]
    assert [(e.signal, e.pid) for e in events if isinstance(e, SignalForwarded)] == [("SIGINT", started.pid),
                                                                                   ("SIGKILL", started.pid)]
    assert _finished(events, "run") == [("fail", "harness exited -9 after SIGINT, SIGKILL")]


def test_a_harness_that_stops_on_the_cancel_is_not_killed(tmp_path, monkeypatch, system) -> None:
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
def test_a_sigterm_or_hangup_is_forwarded_and_the_harness_killed_after_the_grace(tmp_path, monkeypatch, system,
                                                                                 sig) -> None:
    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            _wait_ready(tmp_path)
            os.kill(os.getpid(), getattr(signal, f"SIG{sig}"))

    record, _ = _run(_options(tmp_path, monkeypatch, IGNORING.format(sig=sig), grace_s=0.2), on_event=on_event)
    assert record.signals == [f"SIG{sig}", "SIGKILL"] and record.exit_code == -signal.SIGKILL
    assert record.verdict == "interrupted"


def test_a_sigterm_the_harness_obeys_is_forwarded_once(tmp_path, monkeypatch, system) -> None:
    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            _wait_ready(tmp_path)
            os.kill(os.getpid(), signal.SIGTERM)

    record, _ = _run(_options(tmp_path, monkeypatch, STOPS.format(sig="TERM"), grace_s=30), on_event=on_event)
    assert record.signals == ["SIGTERM"] and record.exit_code == 9 and record.exit_status == 9


def test_a_second_ctrl_c_kills_the_group(tmp_path, monkeypatch, system) -> None:
    forwarded: list[str] = []

    main = threading.main_thread().ident
    assert main is not None

    def press_twice(pid: int) -> None:
        _wait_ready(tmp_path)
        deadline = time.monotonic() + 30
        # ChildStarted is said just before run_eval takes SIGINT over: press once it has
        while signal.getsignal(signal.SIGINT) is outside and time.monotonic() < deadline:
            time.sleep(0.005)
        signal.pthread_kill(main, signal.SIGINT)
        deadline = time.monotonic() + 30
        while not forwarded and time.monotonic() < deadline:
            time.sleep(0.005)
        # the second press only while the harness (which ignores SIGINT) still runs: a first press
        # wrongly taken for a second one has killed it, and the run is over
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if alive:
            signal.pthread_kill(main, signal.SIGINT)

    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            threading.Thread(target=press_twice, args=(event.pid,), daemon=True).start()
        if isinstance(event, SignalForwarded):
            forwarded.append(event.signal)

    reached_outside: list[int] = []  # a press after the run handed SIGINT back lands here, not in pytest

    def outside(signum, _frame) -> None:
        reached_outside.append(signum)

    previous = signal.signal(signal.SIGINT, outside)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    try:
        record, _ = _run(_options(tmp_path, monkeypatch, IGNORING.format(sig="INT"), grace_s=30), on_event=on_event)
        assert signal.getsignal(signal.SIGINT) is outside  # handed back as it was
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    assert record.signals == ["SIGINT", "SIGKILL"] and record.exit_code == -signal.SIGKILL
    assert reached_outside == []


def test_a_sigterm_after_the_identity_but_before_the_start_never_starts_the_harness(tmp_path, monkeypatch,
                                                                                   system) -> None:
    def on_event(event) -> None:
        if isinstance(event, StepStarted) and event.step == "watch":
            os.kill(os.getpid(), signal.SIGTERM)

    marker = tmp_path / "ran"
    before = signal.getsignal(signal.SIGTERM)
    record, events = _run(_options(tmp_path, monkeypatch, f": > {marker}"), on_event=on_event)
    assert signal.getsignal(signal.SIGTERM) is before
    assert not marker.exists() and record.started_at is None and record.exit_code is None
    assert record.signals == ["SIGTERM"] and record.identity_how == "pinned"
    assert (record.verdict, record.exit_status) == ("interrupted", 143)
    assert _finished(events, "run") == [("fail", "not started: SIGTERM received")]
    assert _started(events, "run") == []
    assert _started(events, "verify") != []  # still verified and recorded
    assert [r["verdict"] for r in _runs(tmp_path)] == ["interrupted"]


def test_a_sigterm_during_the_gate_stops_before_the_identity(tmp_path, monkeypatch, system) -> None:
    def on_event(event) -> None:
        if isinstance(event, StepStarted) and event.step == "gate":
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0"), on_event=on_event)
    assert signal.getsignal(signal.SIGTERM) is before
    assert record.signals == ["SIGTERM"] and record.started_at is None and record.identity_id is None
    assert _finished(events, "run") == [("fail", "not started: SIGTERM received")]
    assert _started(events, "identity") == [] and system.pins == []
    assert [r["verdict"] for r in _runs(tmp_path)] == ["interrupted"]


def test_a_hangup_during_the_identity_stops_it(tmp_path, monkeypatch, system) -> None:
    def on_event(event) -> None:
        if isinstance(event, StepStarted) and event.step == "identity":
            os.kill(os.getpid(), signal.SIGHUP)

    record, events = _run(_options(tmp_path, monkeypatch, "exit 0"), on_event=on_event)
    assert record.signals == ["SIGHUP"] and system.pins == [] and record.exit_status == 128 + signal.SIGHUP
    assert _finished(events, "run") == [("fail", "not started: SIGHUP received")]


def test_off_the_main_thread_no_handler_is_installed(tmp_path, monkeypatch, system) -> None:
    options = _options(tmp_path, monkeypatch, "exit 4")
    out: list = []
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    seen: list = []

    def on_event(event) -> None:
        if isinstance(event, ChildStarted):
            seen.append((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))

    thread = threading.Thread(target=lambda: out.append(_run(options, on_event=on_event)))
    thread.start()
    thread.join(60)
    [(record, _)] = out
    assert record.exit_code == 4 and seen == [before]


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
        events = [{"at": "t", "component": "runtime.process.pid", "before": 1, "after": 2},
                  {"at": "t", "component": "runtime.process.argv", "before": ["a"], "after": ["b"]}]
        self.drift.extend(events)
        self.on_look(events)

    def stop(self) -> None:
        self.calls.append("stop")


def test_an_active_watch_is_said_started_stopped_and_its_drift_recorded(tmp_path, monkeypatch, system) -> None:
    _FakeWatcher.made = []
    monkeypatch.setattr(runner, "Watcher", _FakeWatcher)
    (tmp_path / "execsys.toml").write_text('[runtime]\nenv_file = "env"\n')
    (tmp_path / "env").write_text("")
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0", watch_s=0.5))
    [watcher] = _FakeWatcher.made
    assert watcher.calls == ["start", "stop"] and watcher.interval_s == 0.5
    assert str(watcher.declared_runtime.get("env_file")).endswith("env")
    assert _started(events, "watch") == ["watching the runtime every 0.5 s"]
    assert _finished(events, "watch") == [("warn", "2 drift event(s) in 3 observations")]
    [drift] = [e for e in events if isinstance(e, DriftDetected)]
    assert drift.event["component"] == "runtime.process.pid" and drift.events == tuple(watcher.drift)
    assert record.watch == {"interval_s": 0.5, "observations": 3, "errors": ["e0", "e1", "e2", "e3", "e4"]}
    assert record.drift == watcher.drift and (record.verdict, record.exit_status) == ("drifted", 1)


def test_the_watch_falls_back_to_the_identity_s_declared_runtime(tmp_path, monkeypatch, system) -> None:
    _FakeWatcher.made = []
    monkeypatch.setattr(runner, "Watcher", _FakeWatcher)
    lock = FakeIdentity(system.identity_id(), {"endpoint": "http://127.0.0.1:9/v1"})
    _run(_options(tmp_path, monkeypatch, "exit 0", watch_s=1, lock=lock))
    [watcher] = _FakeWatcher.made
    assert watcher.declared_runtime == {"endpoint": "http://127.0.0.1:9/v1"}


def test_a_watch_without_drift_is_ok_and_one_without_a_runtime_is_said_off(tmp_path, monkeypatch, system) -> None:
    class Quiet(_FakeWatcher):
        def start(self) -> None:
            self.calls.append("start")

    monkeypatch.setattr(runner, "Watcher", Quiet)
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0", watch_s=2))
    assert _started(events, "watch") == ["watching the runtime every 2 s"]
    assert _finished(events, "watch") == [("ok", "0 drift event(s) in 3 observations")]
    assert record.verdict == "clean"
    monkeypatch.setattr(runner, "Watcher", _RealWatcher)
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0", watch_s=2))
    assert _started(events, "watch") == ["watch off: no [runtime] endpoint or process declared"]
    assert _finished(events, "watch") == []


# -- the Inspect hook's directory -------------------------------------------------------------------------

def test_an_inspect_run_gets_a_hook_directory_and_its_reports_are_recorded(tmp_path, monkeypatch, system) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "inspect"
    # a stand-in for `inspect eval`: it writes what the hook would into $EXECSYS_HOOK_DIR
    fake.write_text("#!/bin/sh\necho \"$EXECSYS_HOOK_DIR\" > hookdir.txt\n"
                    "printf '{\"recorded\": true, \"model_calls\": 5, \"mismatches\": 2}' > \"$EXECSYS_HOOK_DIR/e.json\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    options = _options(tmp_path, monkeypatch, "exit 0")
    options.command = ["inspect", "eval", "task.py", "--log-dir", str(tmp_path / "logs")]
    record, _ = _run(options)
    hook_dir = Path((tmp_path / "hookdir.txt").read_text().strip())
    assert hook_dir.name.startswith("execsys-run-hook-") and not hook_dir.exists()
    assert record.harness == "inspect"
    assert record.hook == {"reports": [{"recorded": True, "model_calls": 5, "mismatches": 2}], "model_calls": 5,
                           "mismatches": 2}
    assert record.verdict == "drifted"
    # verify after leaves out the harness's own log directory too
    assert system.verifies[-1][1] == [tmp_path / "execsys.lock.json", tmp_path / "logs"]


# -- the real pin and verify, end to end in-process ----------------------------------------------------------

def test_real_identity_a_declared_file_changed_by_the_harness_is_a_new_identity(tmp_path, monkeypatch) -> None:
    (tmp_path / "env").write_text("OMP_NUM_THREADS=1\n")
    (tmp_path / "execsys.toml").write_text('[runtime]\nenv_file = "env"\n')
    record, events = _run(_options(tmp_path, monkeypatch, "echo OMP_NUM_THREADS=2 > env"))
    assert record.identity_how == "pinned" and record.exit_code == 0
    assert record.verify_after["verdict"] == "new-identity" and record.verify_after["changed"] == ["runtime"]
    assert record.verify_after["observed_id"] not in (None, record.identity_id)
    assert (record.verdict, record.exit_status) == ("drifted", 1)
    assert json.loads((tmp_path / "execsys.lock.json").read_text())["id"] == record.identity_id


def test_real_identity_a_lock_verified_then_refused(tmp_path, monkeypatch) -> None:
    (tmp_path / "env").write_text("OMP_NUM_THREADS=1\n")
    (tmp_path / "execsys.toml").write_text('[runtime]\nenv_file = "env"\n')
    first, _ = _run(_options(tmp_path, monkeypatch, "exit 0"))
    sources = load_sources(None, None, ledger=tmp_path / "ledger.sqlite3")
    second, _ = _run(_options(tmp_path, monkeypatch, "exit 0", lock=sources.lock))
    assert (second.identity_how, second.identity_id, second.verdict) == ("verified", first.identity_id, "clean")
    (tmp_path / "env").write_text("OMP_NUM_THREADS=3\n")
    third, _ = _run(_options(tmp_path, monkeypatch, "exit 0", lock=sources.lock))
    assert third.verdict == "refused" and third.refused.startswith("the lock no longer matches this system (")


# -- the working directory deleted -------------------------------------------------------------------------

def test_a_harness_that_deletes_its_working_directory_is_still_verified_and_recorded(tmp_path, monkeypatch,
                                                                                    system) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.setenv("EXECSYS_LEDGER", str(tmp_path / "ledger.sqlite3"))
    monkeypatch.chdir(work)
    sources = load_sources(None, None, ledger=tmp_path / "ledger.sqlite3")
    options = RunOptions.from_sources(sources, command=["sh", "-c", 'rmdir "$PWD"'], gate="off", watch_s=0)
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
    (hook / "e.json").write_text(json.dumps({"task": "é"}), encoding="utf-8")  # counts nothing, read as UTF-8
    (hook / "f.json").mkdir()  # unreadable: skipped
    out = runner._hook_reports(hook)
    assert [r["task"] for r in out["reports"]] == ["a", "b", "é"]
    assert (out["model_calls"], out["mismatches"]) == (7, 1)
    assert not hook.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert runner._hook_reports(empty) == {"reports": [], "model_calls": 0, "mismatches": 0}
    # a hook directory the harness removed itself: nothing reported, nothing raised
    assert runner._hook_reports(tmp_path / "gone") == {"reports": [], "model_calls": 0, "mismatches": 0}


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


def test_receipts_said_names_the_signing_key() -> None:
    class Signer:
        public_key = type("Key", (), {"keyid": "ab12"})()

    rec = runner.RunRecord(id="r", command=["x"], cwd="/", receipts=["a"])
    options = RunOptions(command=["x"], declaration=None, lock=None, lock_path=Path("/l"))  # type: ignore[arg-type]
    options.signer = Signer()
    assert runner._receipts_said(rec, options) == "; 1 receipt, signed by ab12"


def test_signalling_a_harness_already_gone_is_recorded_not_raised() -> None:
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    rec = runner.RunRecord(id="r", command=["x"], cwd="/")
    events: list = []
    runner._signal_group(proc, signal.SIGTERM, rec, events.append)
    assert rec.signals == ["SIGTERM"]
    assert events == [SignalForwarded("SIGTERM", proc.pid)]


class _Prepared:
    def __init__(self, paths, late, key) -> None:
        self.paths, self.errors, self._late, self._key = list(paths), [], late, key
        self.discarded = False

    def commit(self):
        return self._late

    def discard(self) -> None:
        self.discarded = True


def test_a_sidecar_or_receipt_renamed_away_after_the_row_is_recorded_in_its_own_row(tmp_path, monkeypatch,
                                                                                   system) -> None:
    sidecars = _Prepared(["/r/a.execsys.json", "/r/b.execsys.json"],
                         [{"sidecar": "/r/a.execsys.json", "error": "renamed away"}], "sidecar")
    receipts = _Prepared(["/r/a.intoto.json", "/r/b.intoto.json"],
                         [{"receipt": "/r/b.intoto.json", "error": "gone"}], "receipt")
    monkeypatch.setattr(runner, "prepare_sidecars", lambda *a: sidecars)
    monkeypatch.setattr(runner, "prepare_receipts", lambda *a: receipts)
    monkeypatch.setattr(runner, "keep_receipts", lambda *a: None)
    record, events = _run(_options(tmp_path, monkeypatch, "exit 0"))
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


def test_a_ledger_that_cannot_take_the_row_discards_what_was_prepared(tmp_path, monkeypatch, system) -> None:
    sidecars, receipts = _Prepared([], [], "sidecar"), _Prepared([], [], "receipt")
    monkeypatch.setattr(runner, "prepare_sidecars", lambda *a: sidecars)
    monkeypatch.setattr(runner, "prepare_receipts", lambda *a: receipts)
    options = _options(tmp_path, monkeypatch, "exit 0")
    real = Ledger.append

    def append(self, kind, *a, **k):
        if kind == "run":
            raise OSError("disk full")
        return real(self, kind, *a, **k)

    monkeypatch.setattr(Ledger, "append", append)
    with pytest.raises(OSError, match="disk full"):
        _run(options)
    assert sidecars.discarded and receipts.discarded
