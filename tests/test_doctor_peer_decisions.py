"""``execsys doctor --host DEST`` as tables, in-process: what each way a peer machine fails to answer turns
into (the reason a user reads in every row), the clock measured over the connection folded into the
clock-skew row, and the program line that is sent.

The connection is an ``ssh`` first on PATH (a real process, started by doctor/remote.py exactly as the
system ssh would be) that plays the far side of the doctor's wire protocol from a script chosen by the
destination's name: ``T`` answered with a clock a set offset away, ``H``/``R``/``END`` lines, a stderr
line and an exit code. The real agent over a real sshd is covered by tests/test_doctor_remote.py; the
names here avoid the words the mutation script's ``-k`` filter leaves out.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest
from execsys.doctor import remote
from execsys.doctor.context import DoctorOptions
from execsys.doctor.model import Finding, HazardResult
from execsys.doctor.remote import (
    BOOTSTRAP,
    BUNDLED,
    CLOCK_SAMPLES,
    MIN_PYTHON,
    ClockSample,
    apply_skew,
    bundle_sources,
    program_line,
    run_remote_doctor,
    unreachable_report,
)
from execsys.doctor.runner import HazardChecked

# -- the far side, scripted by the destination's name ------------------------------------------------------

PEER = r'''
import json, os, sys, time
target = sys.argv[-2]
with open(os.environ["PEER_LOG"], "a") as fh:
    fh.write(f"{os.getpid()} {' '.join(sys.argv[1:])}\n")
script = json.loads(open(os.environ["PEER_SCRIPTS"]).read())[target]
if script.get("stderr"):
    sys.stderr.write(script["stderr"] + "\n")
    sys.stderr.flush()
if script.get("exit_before_reading") is not None:
    sys.exit(script["exit_before_reading"])
program = sys.stdin.readline()
asked = 0
while True:
    line = sys.stdin.readline().strip()
    if line == "T":
        asked += 1
        if asked > script.get("clock_answers", 99):
            print("nonsense", flush=True)
            continue
        print(f"T {time.time_ns() + int(script.get('offset_s', 0) * 1e9)}", flush=True)
    else:
        break
with open(os.environ["PEER_LOG"], "a") as fh:
    fh.write(f"asked {asked} then {line!r}\n")
if script.get("stall"):
    time.sleep(30)
for out in script.get("lines", []):
    print(out, flush=True)
sys.exit(script.get("exit", 0))
'''


@pytest.fixture
def peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Register scripts by destination name; returns (scripts dict to fill, log path)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    program = bindir / "ssh"
    program.write_text(f"#!{sys.executable}\n{PEER}")
    program.chmod(0o755)
    log = tmp_path / "peer.log"
    log.touch()
    scripts: dict[str, dict] = {}
    path = tmp_path / "scripts.json"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("PEER_LOG", str(log))
    monkeypatch.setenv("PEER_SCRIPTS", str(path))
    monkeypatch.delenv("EXECSYS_SSH_CONFIG", raising=False)

    def play(dest: str, **script) -> str:
        scripts[dest] = script
        path.write_text(json.dumps(scripts))
        return dest

    yield play, log
    for line in log.read_text().splitlines():
        pid = line.split()[0]
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if str(program) in Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace"):
                    os.kill(int(pid), signal.SIGKILL)


def row(hazard: str, status: str = "ok", summary: str | None = None) -> str:
    return "R " + json.dumps({"id": hazard, "status": status, "summary": summary or f"{hazard} {status}"})


TWO = ["stub-executables", "clock-skew"]


def opts(**kwargs) -> DoctorOptions:
    kwargs.setdefault("only", TWO)
    return DoctorOptions(**kwargs)


# -- a full answer --------------------------------------------------------------------------------------------

def test_peer_report_of_a_full_answer(peer) -> None:
    play, log = peer
    dest = play("gpu-a", lines=["H " + json.dumps({"hostname": "gpu-a.internal", "python": "3.11"}),
                                row("stub-executables", "warn", "a stub"), row("clock-skew", "ok", "synchronised"),
                                "END"])
    events: list = []
    # a threshold far over any round trip here: the row stays as the far side sent it, plus the measurement
    report = run_remote_doctor(dest, opts(clock_skew_threshold_ms=60_000), on_event=events.append)
    assert report.error is None and report.name == "gpu-a"
    assert (report.host["name"], report.host["destination"], report.host["hostname"], report.host["python"]) == \
        ("gpu-a", "gpu-a", "gpu-a.internal", "3.11")
    assert [(r.id, r.status) for r in report.hazards] == [("stub-executables", "warn"), ("clock-skew", "ok")]
    assert report.strict is False
    # each row once: the clock-skew row last, after the measured skew is folded into it
    assert [(e.host, e.result.id) for e in events] == [("gpu-a", "stub-executables"), ("gpu-a", "clock-skew")]
    assert all(isinstance(e, HazardChecked) for e in events)
    assert events[1].result is report.result("clock-skew")
    skew = report.result("clock-skew")
    assert skew.summary.startswith("skew +") or skew.summary.startswith("skew -")
    assert skew.summary.endswith(" ms vs local; synchronised")
    assert re.fullmatch(r"clock vs local: [+-]\d+\.\d ms ± \d+\.\d ms \(RTT \d+\.\d ms, best of 5\); "
                        r"threshold 60000 ms", skew.evidence[0])
    assert abs(report.host["clock_offset_ms"]) <= report.host["clock_bound_ms"] + 1
    assert report.host["clock_bound_ms"] >= 0
    assert report.duration_s > 0
    assert "asked 5 then 'GO'" in log.read_text()


def test_peer_clock_ahead_fails_the_clock_row(peer) -> None:
    play, _ = peer
    dest = play("ahead", offset_s=30, lines=[row("clock-skew", "ok", "synchronised"), "END"])
    report = run_remote_doctor(dest, opts(only=["clock-skew"], strict=True))
    skew = report.result("clock-skew")
    assert skew.status == "fail" and [f.id for f in skew.findings] == ["clock-skew/inter-host-skew"]
    shown = re.fullmatch(r"clock is \+(\d+) ms off the local clock \(± (\d+) ms\), over 250 ms", skew.summary)
    assert shown is not None, skew.summary
    assert abs(int(shown.group(1)) - 30_000) <= int(shown.group(2)) + 1  # the true offset lies within the bound
    assert skew.fix.startswith("Synchronise both clocks to the same time source")
    # the estimate is within its own bound of the planted 30 s (the bound is half the round trip, which
    # a loaded machine stretches past any fixed tolerance)
    assert abs(report.host["clock_offset_ms"] - 30_000) <= report.host["clock_bound_ms"] + 1
    assert report.strict is True


def test_peer_clock_under_a_raised_threshold_is_ok(peer) -> None:
    play, _ = peer
    dest = play("ahead-ok", offset_s=30, lines=[row("clock-skew", "ok", "synchronised"), "END"])
    report = run_remote_doctor(dest, opts(only=["clock-skew"], clock_skew_threshold_ms=60_000))
    assert report.result("clock-skew").status == "ok"
    assert report.result("clock-skew").evidence[0].endswith("; threshold 60000 ms")


def test_peer_clock_skew_is_not_folded_into_an_errored_row(peer) -> None:
    play, _ = peer
    dest = play("skew-error", offset_s=30, lines=[row("clock-skew", "error", "no adjtimex"), "END"])
    skew = run_remote_doctor(dest, opts(only=["clock-skew"])).result("clock-skew")
    assert (skew.status, skew.summary, skew.evidence, skew.findings) == ("error", "no adjtimex", [], [])


def test_peer_report_names_a_missing_row(peer) -> None:
    play, _ = peer
    dest = play("partial-end", lines=[row("clock-skew"), "END"])
    events: list = []
    report = run_remote_doctor(dest, opts(), on_event=events.append)
    missing = report.result("stub-executables")
    assert (missing.status, missing.summary) == ("error", "no result from the remote")
    assert [f.id for f in missing.findings] == ["stub-executables/no-remote-result"]
    assert report.error is None
    assert [e.result.id for e in events] == ["stub-executables", "clock-skew"]


def test_peer_lines_after_end_are_not_read(peer) -> None:
    play, _ = peer
    dest = play("after-end", lines=[row("stub-executables"), "END", row("clock-skew", "fail")])
    report = run_remote_doctor(dest, opts())
    assert report.result("clock-skew").summary == "no result from the remote"


# -- each way the answer fails ----------------------------------------------------------------------------

@pytest.mark.parametrize(("script", "reason"), [
    pytest.param({"exit_before_reading": 255, "stderr": "banner\nssh: connect to x port 22: Connection refused"},
                 "ssh failed: ssh: connect to x port 22: Connection refused", id="255-names-the-last-line"),
    pytest.param({"exit_before_reading": 255}, "ssh failed: connection error", id="255-silent"),
    pytest.param({"exit_before_reading": 127, "stderr": "bash: python3: command not found"},
                 "remote has no usable python3 (bash: python3: command not found)", id="127"),
    pytest.param({"exit_before_reading": 127}, "remote has no usable python3 (exit 127)", id="127-silent"),
    pytest.param({"exit_before_reading": 1, "stderr": "env: python3: No such file or directory\nlast"},
                 "remote has no usable python3 (env: python3: No such file or directory)", id="no-such-python3"),
    pytest.param({"exit_before_reading": 3,
                  "stderr": "execsys doctor needs python3 >= 3.9 on the remote, found 3.6.8"},
                 "execsys doctor needs python3 >= 3.9 on the remote, found 3.6.8", id="old-python"),
    pytest.param({"exit_before_reading": 3, "stderr": "something else"}, "remote doctor exited 3: something else",
                 id="3-for-another-reason"),
    pytest.param({"exit_before_reading": 1}, "remote doctor exited 1: no output", id="1-silent"),
    pytest.param({"exit_before_reading": 0, "stderr": "python3 is fine\n  \n"}, "remote doctor exited 0: python3 is fine",
                 id="blank-lines-skipped"),
    # a line that is not a clock answer ends the conversation there: the far side is killed, never sent GO
    pytest.param({"clock_answers": 3, "exit": 4}, "remote doctor exited -9: no output", id="too-few-clock-answers"),
    pytest.param({"lines": [row("stub-executables")], "exit": 5},
                 "connection ended early: remote doctor exited 5: no output", id="ended-early"),
])
def test_peer_report_of_a_failed_answer(peer, script, reason) -> None:
    play, _ = peer
    dest = play("failing", **script)
    events: list = []
    report = run_remote_doctor(dest, opts(), on_event=events.append)
    assert report.error == reason
    clock_row = report.result("clock-skew")
    assert clock_row.status == "error" and clock_row.summary == f"host not inspected: {reason}"
    assert clock_row.evidence == [f"failing: {reason}"]
    assert clock_row.fix.startswith("Check that `ssh DEST python3 -V` works non-interactively")
    assert [e.result.id for e in events] == ["stub-executables", "clock-skew"]
    if "ended early" in reason:
        assert report.result("stub-executables").status == "ok"  # what did arrive is kept
    else:
        assert report.result("stub-executables").summary == f"host not inspected: {reason}"


def test_peer_report_without_clock_answers_has_no_offset(peer) -> None:
    play, _ = peer
    dest = play("no-clock", clock_answers=0, exit=1)
    report = run_remote_doctor(dest, opts())
    assert "clock_offset_ms" not in report.host and "clock_bound_ms" not in report.host


def test_peer_report_with_some_clock_answers_keeps_the_offset(peer) -> None:
    play, log = peer
    dest = play("some-clock", clock_answers=2, offset_s=5, exit=1)
    report = run_remote_doctor(dest, opts())
    assert abs(report.host["clock_offset_ms"] - 5_000) <= report.host["clock_bound_ms"] + 1
    assert report.error == "remote doctor exited -9: no output"
    assert "asked" not in log.read_text()  # never sent GO


def test_peer_that_stalls_is_cut_at_its_deadline(peer) -> None:
    play, log = peer
    dest = play("stalls", stall=True)
    report = run_remote_doctor(dest, opts(host_timeout=1.0))
    assert report.error == "no answer within 1s"
    pid = int(log.read_text().split()[0])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower() or \
        Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_peer_check_cancelled(peer) -> None:
    play, _ = peer
    dest = play("cancelled", stall=True)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    report = run_remote_doctor(dest, opts(host_timeout=20.0), cancel=cancel)
    assert report.error == "cancelled"


@pytest.mark.parametrize(("dest", "reason"), [
    pytest.param("-oProxyCommand=x", "not an ssh destination: '-oProxyCommand=x'", id="option-like"),
    pytest.param("a b", "not an ssh destination: 'a b'", id="space"),
])
def test_peer_report_of_a_refused_destination(dest, reason) -> None:
    report = unreachable_report(dest, opts(), reason)
    assert run_remote_doctor(dest, opts()).to_json() | {"duration_s": None} == report.to_json() | {"duration_s": None}
    assert report.error == reason


def test_peer_report_when_the_client_cannot_start(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    report = run_remote_doctor("gpu-z", opts())
    assert report.error == "ssh could not start (No such file or directory)"


def test_the_connection_command_line(peer) -> None:
    play, log = peer
    play("ops@gpu-p", lines=["END"])
    report = run_remote_doctor("ssh://ops@gpu-p:2222", opts(host_timeout=9.0))
    assert report.error is None
    argv = log.read_text().splitlines()[0].split(" ", 1)[1]
    assert argv == ("-o BatchMode=yes -o ConnectTimeout=3 -o ServerAliveInterval=5 -o ServerAliveCountMax=2 -T "
                    f"-p 2222 ops@gpu-p python3 -u -c '{BOOTSTRAP}'")


@pytest.mark.parametrize(("host_timeout", "connect"), [(3.0, 2), (6.0, 2), (9.0, 3), (30.0, 10), (60.0, 10)])
def test_the_connect_timeout_is_a_third_of_the_deadline_within_2_and_10(peer, host_timeout, connect) -> None:
    play, log = peer
    play("ct", lines=["END"])
    run_remote_doctor("ct", opts(host_timeout=host_timeout))
    assert f"ConnectTimeout={connect} " in log.read_text().splitlines()[0]


# -- the unreachable report and _describe ------------------------------------------------------------------

def test_the_unreachable_report_keeps_what_arrived() -> None:
    arrived = HazardResult("clock-skew", "warn", "late")
    report = unreachable_report("gpu-q", opts(strict=True), "gone", {"clock-skew": arrived}, {"hostname": "q"})
    assert report.result("clock-skew") is arrived
    assert [f.id for f in report.result("stub-executables").findings] == ["stub-executables/host-not-inspected"]
    assert report.host == {"name": "gpu-q", "destination": "gpu-q", "hostname": "q"}
    assert (report.error, report.strict, report.duration_s) == ("gone", True, 0.0)
    assert unreachable_report("d", opts(), "r").host == {"name": "d", "destination": "d"}


@pytest.mark.parametrize(("returncode", "stderr", "timed_out", "elapsed", "text"), [
    pytest.param(None, "x", True, 4.6, "no answer within 5s", id="reason-1"),
    pytest.param(255, "a\nb\n", True, 2.0, "no answer within 2s", id="reason-2"),
    pytest.param(255, "", False, 0, "ssh failed: connection error", id="reason-3"),
    pytest.param(127, "python3: not found", False, 0, "remote has no usable python3 (python3: not found)", id="reason-4"),
    pytest.param(2, "a python3 line\nzsh: python3: not found\n", False, 0, "remote has no usable python3 (zsh: python3: not found)", id="reason-5"),
    pytest.param(2, "python2: not found", False, 0, "remote doctor exited 2: python2: not found", id="reason-6"),
    pytest.param(3, "needs python3 >= 3.9", False, 0, "needs python3 >= 3.9", id="reason-7"),
    pytest.param(3, "needs python3 >= 3.9\nlater", False, 0, "remote doctor exited 3: later", id="reason-8"),
    pytest.param(4, "needs python3 >= 3.9", False, 0, "remote doctor exited 4: needs python3 >= 3.9", id="reason-9"),
    pytest.param(None, "", False, 0, "remote doctor exited None: no output", id="reason-10"),
])
def test_the_reason_given(returncode, stderr, timed_out, elapsed, text) -> None:
    assert remote._describe(returncode, stderr, timed_out, elapsed) == text


# -- the skew folded into the row ----------------------------------------------------------------------------

def test_a_skew_under_the_threshold_keeps_the_status_and_says_it() -> None:
    result = HazardResult("clock-skew", "warn", "kernel clock not synchronised",
                          findings=[Finding("warn", "kernel clock not synchronised", "clock-skew/x")])
    apply_skew(result, ClockSample(0.0125, 0.0025, 0.005, 5), 250.0)
    assert result.status == "warn"
    assert result.summary == "skew +12.5 ms ± 2.5 ms vs local; kernel clock not synchronised"
    assert result.evidence == ["clock vs local: +12.5 ms ± 2.5 ms (RTT 5.0 ms, best of 5); threshold 250 ms"]
    assert result.fix == ""


def test_an_uncertain_skew_warns_without_the_fix() -> None:
    result = HazardResult("clock-skew", "ok", "fine", fix="")
    apply_skew(result, ClockSample(-0.25, 0.0625, 0.125, 3), 250.0)
    assert (result.status, result.fix) == ("warn", "")
    assert result.summary == ("clock is -250 ms off the local clock, but ± 62 ms RTT bound straddles the 250 ms "
                              "threshold")
    assert result.evidence[0] == "clock vs local: -250.0 ms ± 62.5 ms (RTT 125.0 ms, best of 3); threshold 250 ms"


def test_an_accepted_skew_is_shown_and_does_not_decide() -> None:
    result = HazardResult("clock-skew", "ok", "fine")
    apply_skew(result, ClockSample(1.0, 0.0, 0.0, 5), 250.0, ["clock-skew/inter-host-skew"])
    assert result.status == "ok"
    assert result.summary == "skew +1000.0 ms ± 0.0 ms vs local; fine"
    assert result.evidence[1] == result.findings[0].shown()
    assert "accepted" in result.evidence[1]
    assert len(result.evidence) == 2


# -- the program sent -----------------------------------------------------------------------------------------

def unpacked(line: bytes) -> str:
    packed = re.search(rb"b64decode\('([^']*)'\)", line).group(1)
    return zlib.decompress(base64.b64decode(packed)).decode()


def test_the_program_is_one_line_carrying_the_options_and_every_bundled_module() -> None:
    line = program_line(opts(hosts=["elsewhere"], timeout=2.5, layers=["x"], config_path="/c/execsys.toml"))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line.startswith(b"import base64,zlib;exec(compile(zlib.decompress(base64.b64decode('")
    assert line.endswith(b"')),'<execsys-doctor>','exec'))\n")
    code = unpacked(line)
    assert "if sys.version_info < (3, 9):" in code and "needs python3 >= 3.9 on the remote" in code
    payload = json.loads(ast.literal_eval(re.search(r"agent\.main\(json\.loads\((.*)\)\)", code).group(1)))
    assert (payload["timeout"], payload["hosts"], payload["layers"], payload["config_path"]) == \
        (2.5, [], None, None)
    sources = json.loads(ast.literal_eval(re.search(r"SOURCES = json\.loads\((.*)\)\n", code).group(1)))
    assert set(sources) == {"execsys", *BUNDLED}
    assert sources["execsys.doctor"][0] is True and sources["execsys.doctor.model"][0] is False
    from execsys import __version__

    assert sources["execsys"] == [True, f"__version__ = {__version__!r}\n"]
    assert sources == json.loads(json.dumps(bundle_sources()))


def test_the_program_runs_under_this_python_and_answers_the_clock(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-u", "-c", BOOTSTRAP], input=program_line(opts()) + b"T\n",
                          capture_output=True, timeout=30, cwd=tmp_path)
    first = proc.stdout.decode().splitlines()[0]
    assert re.fullmatch(r"T \d+", first), (proc.stdout, proc.stderr)
    assert MIN_PYTHON == (3, 9) and CLOCK_SAMPLES == 5


def test_a_module_without_source_is_named() -> None:
    with pytest.raises(RuntimeError, match="^cannot find the source of execsys.no_such_module$"):
        remote._source("execsys.no_such_module")


def test_the_bundled_source_is_the_module_s_file() -> None:
    from execsys.doctor import model

    assert remote._source("execsys.doctor.model") == Path(model.__file__).read_text(encoding="utf-8")


def test_the_unreachable_rows_say_how_to_fix_it() -> None:
    report = unreachable_report("gpu-r", opts(), "gone")
    assert report.name == "gpu-r"
    assert {r.fix for r in report.hazards} == {
        "Check that `ssh DEST python3 -V` works non-interactively (keys/agent, BatchMode) and that python3 >= 3.9 "
        "is installed."}


def test_the_skew_line_comes_first_and_an_accepted_one_second() -> None:
    result = HazardResult("clock-skew", "ok", "fine", evidence=["local: synchronised", "clocksource tsc"])
    apply_skew(result, ClockSample(1.0, 0.0, 0.0, 5), 250.0, ["clock-skew/inter-host-skew"])
    assert result.evidence[0].startswith("clock vs local: +1000.0 ms")
    assert result.evidence[1] == result.findings[0].shown()
    assert result.evidence[2:] == ["local: synchronised", "clocksource tsc"]


def test_a_failing_skew_says_how_to_fix_it() -> None:
    result = HazardResult("clock-skew", "ok", "fine")
    apply_skew(result, ClockSample(1.0, 0.0, 0.0, 5), 250.0)
    assert result.fix == ("Synchronise both clocks to the same time source (chrony/NTP/PTP); until then, do not "
                          "order events across these hosts by timestamp.")
