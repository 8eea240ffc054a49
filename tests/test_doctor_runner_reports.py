"""The doctor runner (doctor/runner.py) in-process: every row, event, verdict and sentence it makes.

In-process, so that scripts/mutation.sh's runs see them: the CLI tests run `execsys doctor` in a
subprocess, which imports the unmutated checkout, and the SSH tests are left out of mutation runs (the
remote side would need the staged tree). Two kinds of check stand in where the runner's own behaviour is
the subject: a hazard check installed through ``registry.load`` (how test_doctor_runner.py injects a
crashing or hanging check), and an ``ssh`` on PATH that speaks the doctor's wire protocol (``T``/``GO``
in, ``T``/``H``/``R``/``END`` out, see doctor/remote.py) with scripted answers, so the runner's handling
of destinations that answer, stall, garble or never read can be driven in well under a second each. The
real agent over a real sshd is covered by test_doctor_runner.py and test_doctor_remote.py. Test names
avoid the words mutation.sh's ``-k`` filter drops.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from execsys.doctor import registry
from execsys.doctor.context import Context
from execsys.doctor.model import Finding, HazardResult
from execsys.doctor.runner import (
    DoctorOptions,
    DoctorStarted,
    HazardChecked,
    HostFinished,
    HostUnreachable,
    error_result,
    hazard_deadline,
    run_doctor,
    run_hazard,
    run_local,
    selected_ids,
)

CUT_OFF_FIX = "Something it runs hangs beyond its own timeout; run with --only clock-skew -v to see which."
CRASH_FIX = "This is a bug in the check or an unusual host; run with --debug and report it."
# interop-mangling with no layer declared is a real check that answers at once: skip
REAL = "interop-mangling"


def install(monkeypatch: pytest.MonkeyPatch, **checks: Callable[[Context], object]) -> None:
    """Route these hazard ids (underscores for dashes) to the given check functions."""
    by_id = {name.replace("_", "-"): check for name, check in checks.items()}
    real_load = registry.load
    monkeypatch.setattr(registry, "load", lambda hid: types.SimpleNamespace(check=by_id[hid])
                        if hid in by_id else real_load(hid))


def result(hazard_id: str, status: str) -> Callable[[Context], HazardResult]:
    def check(ctx: Context) -> HazardResult:
        return HazardResult(hazard_id, status, f"{status} by design", [f"{hazard_id} evidence"], "a fix")
    return check


def non_daemon_threads() -> set[threading.Thread]:
    """The threads that would keep the interpreter from exiting."""
    return {t for t in threading.enumerate() if t.is_alive() and not t.daemon and t is not threading.main_thread()}


# --- the small pure parts -------------------------------------------------------------------------------


def test_hazard_deadline_is_three_timeouts_and_five_seconds():
    assert hazard_deadline(DoctorOptions(timeout=2)) == 11.0
    assert hazard_deadline(DoctorOptions(timeout=10)) == 35.0


def test_selected_ids_keep_registry_order_and_name_an_unknown_id():
    assert selected_ids(DoctorOptions()) == list(registry.IDS)
    wanted = [registry.IDS[7], registry.IDS[2]]
    assert selected_ids(DoctorOptions(only=wanted)) == [registry.IDS[2], registry.IDS[7]]
    with pytest.raises(KeyError, match="unknown hazard 'nope'"):
        selected_ids(DoctorOptions(only=[registry.IDS[0], "nope"]))


def test_error_result_is_an_error_row_whose_finding_cannot_be_accepted():
    row = error_result("port-collisions", "host-not-inspected", "it could not look", ["why"], "do this")
    assert row.to_json() == {
        "id": "port-collisions", "status": "error", "summary": "it could not look", "evidence": ["why"],
        "fix": "do this",
        "findings": [{"id": "port-collisions/host-not-inspected", "level": "error", "text": "it could not look",
                      "accepted": False}]}


# --- one check: run_hazard ------------------------------------------------------------------------------


def test_run_hazard_crash_is_an_error_row_with_the_exception(monkeypatch):
    def boom(ctx):
        raise RuntimeError("disk on fire")

    install(monkeypatch, clock_skew=boom)
    row = run_hazard("clock-skew", DoctorOptions())
    assert row.to_json() == {
        "id": "clock-skew", "status": "error", "summary": "the check itself failed: RuntimeError: disk on fire",
        "evidence": ["RuntimeError: disk on fire"], "fix": CRASH_FIX,
        "findings": [{"id": "clock-skew/check-failed", "level": "error",
                      "text": "the check itself failed: RuntimeError: disk on fire", "accepted": False}]}
    assert 0 <= row.duration_s < 5


def test_run_hazard_refuses_a_check_that_returns_no_result(monkeypatch):
    install(monkeypatch, clock_skew=lambda ctx: {"status": "ok"})
    row = run_hazard("clock-skew", DoctorOptions())
    assert row.status == "error"
    assert row.summary == "the check itself failed: TypeError: check returned dict, not HazardResult"


def test_run_hazard_returns_the_checks_own_result_timed(monkeypatch):
    seen: list[Context] = []

    def slow(ctx):
        seen.append(ctx)
        time.sleep(0.2)
        return HazardResult("clock-skew", "warn", "skewed", ["+3 s"], "run chrony")

    install(monkeypatch, clock_skew=slow)
    options = DoctorOptions(timeout=3)
    row = run_hazard("clock-skew", options)
    assert (row.status, row.summary, row.evidence, row.fix) == ("warn", "skewed", ["+3 s"], "run chrony")
    assert 0.2 <= row.duration_s < 5
    assert seen[0].options is options
    shared = Context(options)  # the TUI's re-run passes the context the row was first checked with
    run_hazard("clock-skew", options, shared)
    assert seen[1] is shared


def test_run_hazard_names_an_unknown_id():
    with pytest.raises(KeyError, match="unknown hazard 'nope'"):
        run_hazard("nope", DoctorOptions())


# --- this machine: run_local / run_doctor ---------------------------------------------------------------


def test_each_result_is_streamed_and_reported_in_registry_order(monkeypatch):
    install(monkeypatch, clock_skew=result("clock-skew", "warn"))
    events: list = []
    ids = ["clock-skew", REAL]  # asked out of order
    report = run_doctor(DoctorOptions(only=ids), on_event=events.append)
    in_order = [h for h in registry.IDS if h in ids]
    assert events[0] == DoctorStarted(("local",), tuple(in_order))
    assert [r.id for r in report.local.hazards] == in_order
    checked = events[1:-1]
    assert sorted(e.result.id for e in checked) == sorted(ids)
    assert all(isinstance(e, HazardChecked) and e.host == "local" for e in checked)
    assert {e.result.id: e.result for e in checked} == {r.id: r for r in report.local.hazards}
    assert events[-1] == HostFinished("local", report.local)
    assert report.local.result("clock-skew").summary == "warn by design"
    assert report.local.result(REAL).status == "skip"
    assert report.local.name == "local" and report.local.error is None
    assert report.local.host["hostname"] == socket.gethostname()
    assert report.verdict == "clean" and report.exit_code == 0  # a warning alone is not a finding
    body = report.to_json()
    assert "hosts" not in body and body["host"]["name"] == "local"


def test_run_local_takes_the_name_given_and_emits_only_rows(monkeypatch):
    install(monkeypatch, clock_skew=result("clock-skew", "ok"))
    events: list = []
    report = run_local(DoctorOptions(only=["clock-skew"]), events.append, host_name="node-7")
    assert report.name == "node-7"
    assert events == [HazardChecked("node-7", report.hazards[0])]


def test_strict_makes_a_warning_a_finding(monkeypatch):
    install(monkeypatch, clock_skew=result("clock-skew", "warn"))
    report = run_doctor(DoctorOptions(only=["clock-skew"], strict=True))
    assert report.local.verdict == "hazards"
    assert report.verdict == "hazards" and report.exit_code == 1
    assert report.to_json()["verdict"] == "hazards"
    assert run_local(DoctorOptions(only=["clock-skew"], strict=True)).verdict == "hazards"


def test_durations_cover_the_slowest_check(monkeypatch):
    def slow(ctx):
        time.sleep(0.3)
        return HazardResult("clock-skew", "ok", "fine")

    install(monkeypatch, clock_skew=slow)
    start = time.monotonic()
    report = run_doctor(DoctorOptions(only=["clock-skew", REAL]))
    took = time.monotonic() - start
    assert 0.3 <= report.local.duration_s <= report.duration_s <= took
    assert report.to_json()["duration_s"] == round(report.duration_s, 3)


def test_a_crashing_check_does_not_hide_the_others(monkeypatch):
    def boom(ctx):
        raise OSError("no such device")

    install(monkeypatch, clock_skew=boom)
    report = run_doctor(DoctorOptions(only=["clock-skew", REAL]))
    assert report.local.result("clock-skew").summary == "the check itself failed: OSError: no such device"
    assert report.local.result(REAL).status == "skip"
    assert report.exit_code == 1


def test_cancel_reaches_the_checks_and_cuts_the_wait(monkeypatch):
    """Esc in the TUI: the hanging check is reported as cancelled (never ok), the finished one keeps its
    result, the check itself sees the cancel through its context, and no thread is left that would keep
    the process alive."""
    saw_cancel = threading.Event()

    def hang(ctx):
        if ctx.cancel.wait(8):
            saw_cancel.set()
        time.sleep(0.5)  # still busy after the cancel: the runner must not wait for it
        return HazardResult("clock-skew", "ok", "late")

    install(monkeypatch, clock_skew=hang)
    before = non_daemon_threads()
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    events: list = []
    start = time.monotonic()
    report = run_doctor(DoctorOptions(only=["clock-skew", REAL], timeout=10), events.append, cancel)
    took = time.monotonic() - start
    assert took < 5, f"kept waiting {took:.1f}s after the cancel"
    assert non_daemon_threads() <= before
    row = report.local.result("clock-skew")
    assert row.to_json() == {
        "id": "clock-skew", "status": "error", "summary": "the check cancelled; abandoned",
        "evidence": ["clock-skew: cancelled"], "fix": CUT_OFF_FIX,
        "findings": [{"id": "clock-skew/check-did-not-finish", "level": "error",
                      "text": "the check cancelled; abandoned", "accepted": False}]}
    assert report.local.result(REAL).status == "skip"
    assert HazardChecked("local", row) in events
    assert events[-1] == HostFinished("local", report.local)
    assert report.exit_code == 1
    assert saw_cancel.wait(2)


def test_a_check_past_its_deadline_is_cut_off(monkeypatch):
    """The deadline is three timeouts plus 5 s; at timeout 0.01 that is 5 s."""
    release = threading.Event()

    def hang(ctx):
        release.wait(15)
        return HazardResult("clock-skew", "ok", "late")

    install(monkeypatch, clock_skew=hang)
    events: list = []
    start = time.monotonic()
    try:
        report = run_doctor(DoctorOptions(only=["clock-skew", REAL], timeout=0.01), events.append)
    finally:
        release.set()
    took = time.monotonic() - start
    assert 4.9 <= took < 9
    row = report.local.result("clock-skew")
    assert row.summary == "the check did not finish within 5s; abandoned"
    assert row.evidence == ["clock-skew: did not finish within 5s"] and row.fix == CUT_OFF_FIX
    assert row.findings == [Finding("error", row.summary, "clock-skew/check-did-not-finish")]
    assert HazardChecked("local", row) in events
    assert report.local.result(REAL).status == "skip"


def test_the_report_comes_when_the_last_check_does_not_at_the_deadline(monkeypatch):
    install(monkeypatch, clock_skew=result("clock-skew", "ok"))
    options = DoctorOptions(only=["clock-skew", REAL], timeout=10)
    assert hazard_deadline(options) == 35
    start = time.monotonic()
    report = run_doctor(options)
    assert time.monotonic() - start < 5
    assert [r.status for r in report.local.hazards] == ["skip", "ok"]


def test_include_local_false_needs_a_destination():
    with pytest.raises(ValueError, match="^include_local=False needs at least one remote host in options.hosts$"):
        run_doctor(DoctorOptions(), include_local=False)


# --- other machines, through an ssh that speaks the doctor's protocol ----------------------------------

SHIM = r'''
import ast, base64, json, os, re, sys, time, zlib
target = sys.argv[-2]
def note(what):
    with open(os.environ["DOCTOR_SHIM_LOG"], "a") as fh:
        fh.write(f"{target} {what} {time.monotonic()} {os.getpid()}\n")
note("start")
if target.startswith("silent"):  # never reads: the runner's write of the program blocks
    time.sleep(20)
    sys.exit(0)
program = sys.stdin.readline()
code = zlib.decompress(base64.b64decode(re.search(r"b64decode\('([^']*)'\)", program).group(1))).decode()
options = json.loads(ast.literal_eval(re.search(r"agent\.main\(json\.loads\((.*)\)\)", code).group(1)))
if target.startswith("stalls"):  # reads the program, then answers nothing
    time.sleep(20)
    sys.exit(0)
while True:
    line = sys.stdin.readline().strip()
    if line == "T":
        print(f"T {time.time_ns()}", flush=True)
    elif line == "GO" or not line:
        break
time.sleep(0.5 if "slow" in target else 0.15)
if target.startswith("garbled"):
    print("R {not json", flush=True)
    sys.exit(0)
print("H " + json.dumps({"hostname": target}), flush=True)
status = "warn" if target.startswith("warns") else "ok"
for hazard in options["only"]:
    print("R " + json.dumps({"id": hazard, "status": status, "summary": f"{status} on {target}"}), flush=True)
note("end")
print("END", flush=True)
'''


@pytest.fixture
def shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An ``ssh`` first on PATH; returns its log of (destination, start|end, time, pid) lines."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ssh"
    script.write_text(f"#!{sys.executable}\n{SHIM}")
    script.chmod(0o755)
    log = tmp_path / "shim.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOCTOR_SHIM_LOG", str(log))
    monkeypatch.delenv("EXECSYS_SSH_CONFIG", raising=False)
    yield log
    for line in log.read_text().splitlines():  # nothing outlives the test (only our own shims: pids get reused)
        pid = int(line.split()[3])
        with contextlib.suppress(OSError):
            if str(script) in Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace"):
                os.kill(pid, signal.SIGKILL)


def spans(log: Path) -> dict[str, tuple[float, float]]:
    marks: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        dest, what, at, _ = line.split()
        marks.setdefault(dest, {})[what] = float(at)
    return {dest: (m["start"], m["end"]) for dest, m in marks.items() if "end" in m}


def events_for(events: list, dest: str) -> list:
    return [e for e in events if getattr(e, "host", None) == dest]


def test_every_destination_is_reported_in_the_order_given(shim):
    events: list = []
    options = DoctorOptions(hosts=["fine-slow", "warns-quick"], only=[REAL])
    report = run_doctor(options, events.append)
    assert events[0] == DoctorStarted(("local", "fine-slow", "warns-quick"), (REAL,))
    assert [h.name for h in report.hosts] == ["local", "fine-slow", "warns-quick"]
    slow, quick = report.hosts[1], report.hosts[2]
    assert slow.result(REAL).summary == "ok on fine-slow" and slow.error is None
    assert quick.result(REAL).status == "warn" and quick.host["hostname"] == "warns-quick"
    for host in (slow, quick):
        seen = events_for(events, host.name)
        assert seen == [HazardChecked(host.name, host.hazards[0]), HostFinished(host.name, host)]
    assert report.local.result(REAL).status == "skip"
    assert report.verdict == "clean" and report.exit_code == 0
    body = report.to_json()
    assert [h["host"]["name"] for h in body["hosts"]] == ["local", "fine-slow", "warns-quick"]


def test_strict_counts_a_warning_from_another_machine(shim):
    report = run_doctor(DoctorOptions(hosts=["warns-1"], only=[REAL], strict=True))
    assert report.hosts[1].verdict == "hazards"
    assert report.to_json()["verdict"] == "hazards" and report.exit_code == 1


def test_include_local_false_checks_only_the_destination(shim):
    events: list = []
    report = run_doctor(DoctorOptions(hosts=["fine-1"], only=[REAL]), events.append, include_local=False)
    assert [h.name for h in report.hosts] == ["fine-1"]
    assert events[0] == DoctorStarted(("fine-1",), (REAL,))
    assert events[1:] == [HazardChecked("fine-1", report.hosts[0].hazards[0]),
                          HostFinished("fine-1", report.hosts[0])]
    assert report.to_json()["host"]["name"] == "fine-1"


def test_max_parallel_one_checks_destinations_one_after_another(shim):
    report = run_doctor(DoctorOptions(hosts=["fine-a", "fine-b"], only=[REAL], max_parallel_hosts=1),
                        include_local=False)
    assert [h.error for h in report.hosts] == [None, None]
    (a_start, a_end), (b_start, b_end) = sorted(spans(shim).values())
    assert a_end <= b_start, "two destinations were checked at once with max_parallel_hosts=1"


def test_destinations_are_checked_at_the_same_time_by_default(shim):
    report = run_doctor(DoctorOptions(hosts=["fine-slow-a", "fine-slow-b"], only=[REAL]), include_local=False)
    assert [h.error for h in report.hosts] == [None, None]
    (a_start, a_end), (b_start, b_end) = sorted(spans(shim).values())
    assert b_start < a_end


def test_a_garbled_answer_becomes_that_destinations_error_rows(shim):
    events: list = []
    report = run_doctor(DoctorOptions(hosts=["garbled-1", "fine-1"], only=[REAL, "clock-skew"]),
                        events.append, include_local=False)
    bad, good = report.hosts
    assert bad.name == "garbled-1"
    assert bad.error.startswith("the doctor failed for this host: JSONDecodeError: ")
    assert [r.status for r in bad.hazards] == ["error", "error"]
    assert bad.hazards[0].summary == f"host not inspected: {bad.error}"
    assert events_for(events, "garbled-1") == [HazardChecked("garbled-1", r) for r in bad.hazards] + [
        HostUnreachable("garbled-1", bad.error, bad)]
    assert good.error is None and good.result(REAL).summary == "ok on fine-1"
    assert report.exit_code == 1


def test_cancel_reaches_a_destination_in_flight(shim):
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    report = run_doctor(DoctorOptions(hosts=["stalls-1"], only=[REAL], host_timeout=8), cancel=cancel,
                        include_local=False)
    assert time.monotonic() - start < 5
    assert report.hosts[0].error == "cancelled"


def test_a_destination_that_never_reads_is_given_up_after_its_timeout_and_ten_seconds(shim):
    """The runner's own bound: a connection whose program write blocks never returns by itself; the
    report is made at host timeout + 10 s anyway, with every row an error, and the stuck threads cannot
    keep the process alive."""
    before = non_daemon_threads()
    events: list = []
    dests = ["silent-1", "silent-2", "silent-3"]
    start = time.monotonic()
    report = run_doctor(DoctorOptions(hosts=dests, only=[REAL], host_timeout=1), events.append,
                        include_local=False)
    took = time.monotonic() - start
    seen = list(events)
    assert non_daemon_threads() <= before
    # the bound is host timeout + 10 s = 11 s; a join that waits 1 s more per host would be 13 s (the
    # margin is for a loaded CI machine: this only bounds a wait, it times nothing)
    assert 10.9 <= took < 12.5, took
    assert [h.name for h in report.hosts] == dests
    for host in report.hosts:
        assert host.error == "no answer within the host timeout"
        assert [r.summary for r in host.hazards] == ["host not inspected: no answer within the host timeout"]
        assert events_for(seen, host.name) == [HazardChecked(host.name, host.hazards[0]),
                                               HostUnreachable(host.name, host.error, host)]
    assert report.exit_code == 1
