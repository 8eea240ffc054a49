"""Five hazards' decisions as tables, in process, on planted evidence: clock-skew, unread-env-config,
stub-executables, interop-mangling and baked-paths (tests/test_hazard_decisions_b.py has the others).

Each hazard's ``check`` is called with a real ``Context`` over ``DoctorOptions``; the evidence it reads
is planted where the hazard reads it: a temp directory standing in for sysfs's clocksource, a stand-in
libc whose ``adjtimex`` fills the struct with chosen bits, env files and real child processes with a
chosen environment and argv, executables written into a temp PATH (0-byte, dead shebang, foreign ELF,
a script that prints a stub's words and exits non-zero), layers that are real commands (``env``, a
relay script that re-splits), and venv trees with moved interpreters, dangling links and ``.pth``
lines. What is asserted is what an operator reads: the status, the finding ids, the summary line and
the evidence lines word for word.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import subprocess
import sys
import time
import types

import pytest
from execsys.doctor import sysinfo
from execsys.doctor.context import Context, DoctorOptions
from execsys.doctor.hazards import clock_skew

# -- clock-skew: the kernel's reading -----------------------------------------------------------------


class _Libc:
    """A C library whose ``adjtimex`` fills the struct with planted values (the kernel's answer)."""

    def __init__(self, state: int, status: int = 0, offset: int = 0, maxerror: int = 0, esterror: int = 0,
                 errno: int = 0) -> None:
        self.values = (state, status, offset, maxerror, esterror, errno)
        self.modes: list[int] = []

    def adjtimex(self, ref) -> int:
        state, status, offset, maxerror, esterror, errno = self.values
        tx = ref._obj
        self.modes.append(tx.modes)
        tx.status, tx.offset, tx.maxerror, tx.esterror = status, offset, maxerror, esterror
        if errno:
            ctypes.set_errno(errno)
        return state


@pytest.mark.parametrize(("libc", "reading"), [
    pytest.param(_Libc(0, offset=1500, maxerror=2000, esterror=30), {
        "state": 0, "unsynchronised": False, "maxerror_us": 2000, "esterror_us": 30, "offset_us": 1500.0},
        id="synchronised-offset-in-microseconds"),
    pytest.param(_Libc(0, status=clock_skew.STA_NANO, offset=1500), {
        "state": 0, "unsynchronised": False, "maxerror_us": 0, "esterror_us": 0, "offset_us": 1.5},
        id="sta-nano-offset-in-nanoseconds"),
    pytest.param(_Libc(0, status=clock_skew.STA_UNSYNC), {
        "state": 0, "unsynchronised": True, "maxerror_us": 0, "esterror_us": 0, "offset_us": 0.0},
        id="sta-unsync-bit"),
    pytest.param(_Libc(0, status=clock_skew.STA_UNSYNC ^ 0xFFFF), {
        "state": 0, "unsynchronised": False, "maxerror_us": 0, "esterror_us": 0, "offset_us": 0.0},
        id="every-other-status-bit-is-not-unsync"),
    pytest.param(_Libc(clock_skew.TIME_ERROR), {
        "state": 5, "unsynchronised": True, "maxerror_us": 0, "esterror_us": 0, "offset_us": 0.0},
        id="time-error-state-is-unsynchronised"),
    pytest.param(_Libc(4), {
        "state": 4, "unsynchronised": False, "maxerror_us": 0, "esterror_us": 0, "offset_us": 0.0},
        id="time-wait-state-is-not"),
    pytest.param(_Libc(1, status=clock_skew.STA_NANO | clock_skew.STA_UNSYNC, offset=-2000), {
        "state": 1, "unsynchronised": True, "maxerror_us": 0, "esterror_us": 0, "offset_us": -2.0},
        id="state-1-and-negative-nanoseconds"),
    pytest.param(_Libc(-1, errno=1), {"error": os.strerror(1)}, id="a-failed-call-says-why"),
])
def test_kernel_sync_reads_adjtimex(monkeypatch, libc, reading) -> None:
    assert (clock_skew.STA_UNSYNC, clock_skew.STA_NANO, clock_skew.TIME_ERROR) == (0x40, 0x2000, 5)
    libc.modes.clear()  # the same stand-in serves every run of this case
    monkeypatch.setattr(clock_skew, "_libc", lambda: libc)
    assert clock_skew.kernel_sync() == reading
    assert libc.modes == [0]  # read only: modes=0 changes nothing


def test_kernel_sync_on_this_kernel_reads_without_error() -> None:
    """The real call: glibc's adjtimex with modes=0 is allowed to anyone and never fails."""
    reading = clock_skew.kernel_sync()
    assert reading is not None and "error" not in reading
    assert 0 <= reading["state"] <= 5
    assert isinstance(reading["unsynchronised"], bool)
    assert isinstance(reading["offset_us"], float)


def test_kernel_sync_is_linux_only(monkeypatch) -> None:
    monkeypatch.setattr(clock_skew.sys, "platform", "darwin")
    monkeypatch.setattr(clock_skew, "_libc", lambda: pytest.fail("no libc call off Linux"))
    assert clock_skew.kernel_sync() is None


def test_libc_by_soname_and_by_find_library_otherwise(monkeypatch) -> None:
    real = ctypes.CDLL
    asked: list[str] = []

    def cdll(name, use_errno=False):
        asked.append(name)
        assert use_errno is True  # the errno a failed adjtimex leaves is read back
        if name == "libc.so.6" and len(asked) == 1 and refuse:
            raise OSError("not glibc")
        return real("libc.so.6" if name == "libc-by-find-library" else name, use_errno=use_errno)

    monkeypatch.setattr(clock_skew.ctypes, "CDLL", cdll)
    refuse = False
    assert hasattr(clock_skew._libc(), "adjtimex")
    assert asked == ["libc.so.6"]
    asked.clear()
    refuse = True
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libc-by-find-library" if name == "c" else None)
    assert hasattr(clock_skew._libc(), "adjtimex")
    assert asked == ["libc.so.6", "libc-by-find-library"]
    asked.clear()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    clock_skew._libc()
    assert asked == ["libc.so.6", "libc.so.6"]  # nothing found: the soname once more


# -- clock-skew: the whole check's words -----------------------------------------------------------------

SYNCED = {"state": 0, "unsynchronised": False, "maxerror_us": 123456, "esterror_us": 98765, "offset_us": 123456.0}
ADJTIMEX = "adjtimex: state 0, maxerror 123.5 ms, esterror 98.8 ms, offset 123.456 ms"
UNSYNC = "kernel clock is not synchronised (no NTP/PTP discipline: STA_UNSYNC)"


def _clock(tmp_path, monkeypatch, sync, current, available, virt=()):
    source = tmp_path / "clocksource0"
    source.mkdir()
    if current is not None:
        (source / "current_clocksource").write_text(current + "\n")
    if available is not None:
        (source / "available_clocksource").write_text(available + "\n")
    monkeypatch.setattr(clock_skew, "CLOCKSOURCE", str(source))
    monkeypatch.setattr(clock_skew, "kernel_sync", lambda: sync)
    monkeypatch.setattr(clock_skew.sysinfo, "virtualization", lambda: list(virt))
    return clock_skew.check(Context(DoctorOptions()))


@pytest.mark.parametrize(("sync", "current", "available", "virt", "status", "summary", "evidence"), [
    pytest.param(SYNCED, "tsc", "tsc hpet", (), "ok", "kernel clock synchronised, clocksource tsc",
                 [ADJTIMEX, "clocksource: tsc (available: tsc hpet)"], id="synced-tsc"),
    pytest.param(None, None, None, (), "ok", "kernel clock synchronised, clocksource unknown",
                 ["kernel synchronisation state: not readable on this OS (adjtimex is Linux-only)"],
                 id="nothing-readable"),
    pytest.param({"error": "Operation not permitted"}, "kvm-clock", None, (), "ok",
                 "kernel clock synchronised, clocksource kvm-clock",
                 ["adjtimex failed: Operation not permitted", "clocksource: kvm-clock (available: ?)"],
                 id="adjtimex-failed-and-no-available-list"),
    pytest.param(dict(SYNCED, unsynchronised=True), "tsc", "tsc", (), "warn", UNSYNC,
                 [UNSYNC, ADJTIMEX, "clocksource: tsc (available: tsc)"], id="unsynchronised"),
    pytest.param(SYNCED, "hpet", "hpet acpi_pm", (), "warn",
                 "clocksource is hpet: tsc was probably marked unstable by the kernel",
                 ["clocksource is hpet: tsc was probably marked unstable by the kernel", ADJTIMEX,
                  "clocksource: hpet (available: hpet acpi_pm)"], id="hpet-no-tsc"),
    pytest.param(SYNCED, "acpi_pm", "tsc acpi_pm", (), "warn", "clocksource is acpi_pm although tsc is available",
                 ["clocksource is acpi_pm although tsc is available", ADJTIMEX,
                  "clocksource: acpi_pm (available: tsc acpi_pm)"], id="acpi-pm-although-tsc"),
    pytest.param(SYNCED, "jiffies", "jiffies tsc", (), "warn", "clocksource is jiffies although tsc is available",
                 None, id="jiffies-although-tsc"),
    pytest.param(SYNCED, "hpet", "", (), "warn",
                 "clocksource is hpet: tsc was probably marked unstable by the kernel", None, id="hpet-empty-list"),
    pytest.param(SYNCED, "acpi_pm", "acpi_pm", (), "warn",
                 "clocksource is acpi_pm: tsc was probably marked unstable by the kernel", None, id="acpi-pm-alone"),
    pytest.param(SYNCED, "jiffies", None, (), "warn",
                 "clocksource is jiffies: tsc was probably marked unstable by the kernel", None, id="jiffies-alone"),
    pytest.param(SYNCED, "xen", "xen hpet", (), "ok", "kernel clock synchronised, clocksource xen", None,
                 id="xen-is-a-hypervisor-clock"),
    pytest.param(SYNCED, "hyperv_clocksource_tsc_page", "hyperv_clocksource_tsc_page", (), "ok",
                 "kernel clock synchronised, clocksource hyperv_clocksource_tsc_page", None, id="hyperv"),
    pytest.param(SYNCED, "tsc", "tsc", ("hypervisor", "docker container"), "ok",
                 "kernel clock synchronised, clocksource tsc",
                 [ADJTIMEX, "clocksource: tsc (available: tsc)", "virtualisation: hypervisor, docker container",
                  "tsc inside a VM: fine when the host exposes an invariant TSC; kvm-clock/hyperv otherwise"],
                 id="tsc-in-a-vm-is-noted"),
    pytest.param(SYNCED, "kvm-clock", "kvm-clock", ("hypervisor",), "ok",
                 "kernel clock synchronised, clocksource kvm-clock",
                 [ADJTIMEX, "clocksource: kvm-clock (available: kvm-clock)", "virtualisation: hypervisor"],
                 id="kvm-clock-in-a-vm-needs-no-note"),
    pytest.param(SYNCED, "tsc", "tsc", ("docker container",), "ok", "kernel clock synchronised, clocksource tsc",
                 [ADJTIMEX, "clocksource: tsc (available: tsc)", "virtualisation: docker container"],
                 id="tsc-in-a-container-needs-no-note"),
    pytest.param(dict(SYNCED, unsynchronised=True), "hpet", "hpet tsc", (), "warn", UNSYNC,
                 [UNSYNC, "clocksource is hpet although tsc is available", ADJTIMEX,
                  "clocksource: hpet (available: hpet tsc)"], id="both-findings-first-is-the-summary"),
])
def test_clock_check_words(tmp_path, monkeypatch, sync, current, available, virt, status, summary, evidence) -> None:
    result = _clock(tmp_path, monkeypatch, sync, current, available, virt)
    assert (result.id, result.status, result.summary) == ("clock-skew", status, summary)
    if evidence is not None:
        assert result.evidence == evidence
    assert result.fix == (clock_skew.FIX if status == "warn" else "")
    assert "chrony" in clock_skew.FIX


def test_an_accepted_local_clock_finding_does_not_warn(tmp_path, monkeypatch) -> None:
    source = tmp_path / "clocksource0"
    source.mkdir()
    monkeypatch.setattr(clock_skew, "CLOCKSOURCE", str(source))
    monkeypatch.setattr(clock_skew, "kernel_sync", lambda: dict(SYNCED, unsynchronised=True))
    monkeypatch.setattr(clock_skew.sysinfo, "virtualization", lambda: [])
    result = clock_skew.check(Context(DoctorOptions(accept=["clock-skew/kernel-clock-unsynchronised"])))
    assert result.status == "ok"
    assert result.findings[0].accepted


def test_clocksource_reads_sysfs_files(tmp_path, monkeypatch) -> None:
    (tmp_path / "current_clocksource").write_text("  tsc \n")
    (tmp_path / "available_clocksource").write_text("tsc  hpet\tacpi_pm\n")
    monkeypatch.setattr(clock_skew, "CLOCKSOURCE", str(tmp_path))
    assert clock_skew.clocksource() == ("tsc", ["tsc", "hpet", "acpi_pm"])
    monkeypatch.setattr(clock_skew, "CLOCKSOURCE", str(tmp_path / "absent"))
    assert clock_skew.clocksource() == (None, [])


# -- unread-env-config -------------------------------------------------------------------------------------

from execsys.doctor.hazards import unread_env_config as uec  # noqa: E402

MODEL = "/srv/models/served-model.gguf"
SERVED_CODE = ("import socket, sys, time\n"
               "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
               "print(s.getsockname()[1], flush=True)\n"
               "time.sleep(120)  # execsys-decisions-a-served\n")


@pytest.fixture(scope="module")
def served():
    """A real serving process: its argv names a model, its environment is A=1 and a secret."""
    proc = subprocess.Popen(["execsys-decisions-a-served", "-c", SERVED_CODE, "--model", MODEL],
                            executable=sys.executable, stdout=subprocess.PIPE, text=True,
                            env={"A": "1", "HF_TOKEN": "hf-live-value-1", "PATH": "/bin"})
    try:
        port = int(proc.stdout.readline())
        yield types.SimpleNamespace(pid=proc.pid, port=port)
    finally:
        proc.kill()
        proc.wait()


def _env_check(**options) -> object:
    return uec.check(Context(DoctorOptions(**options)))


def _env_file(tmp_path, text: str, name: str = "serving.env") -> str:
    path = tmp_path / name
    path.write_text(text)
    os.utime(path, (time.time() - 3600, time.time() - 3600))  # older than any process here
    return str(path)


def test_nothing_declared_is_a_skip() -> None:
    result = _env_check()
    assert (result.status, result.summary, result.evidence, result.fix) == (
        "skip", "no declared environment (--env-file, [environment] variables) or artifact", [], "")


def test_a_missing_env_file_fails(tmp_path) -> None:
    path = str(tmp_path / "absent.env")
    result = _env_check(env_file=path)
    assert (result.status, result.summary) == ("fail", f"env file {path} does not exist")
    assert [f.id for f in result.findings] == ["unread-env-config/env-file-missing"]
    assert result.fix == "Point --env-file / [runtime] env_file at the file the service reads."
    accepted = _env_check(env_file=path, accept=["unread-env-config/env-file-missing"])
    assert accepted.status == "ok" and accepted.findings[0].accepted


@pytest.mark.parametrize(("content", "why"), [
    pytest.param(None, "is a directory", id="a-directory"),
    pytest.param(b"A=\xff\n", "codec can't decode", id="not-utf-8"),
])
def test_an_unreadable_env_file_is_an_error(tmp_path, content, why) -> None:
    path = tmp_path / "bad.env"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    result = _env_check(env_file=str(path))
    assert result.status == "error"
    assert result.summary.startswith(f"cannot read env file {path}: ") and why in result.summary
    assert [f.id for f in result.findings] == ["unread-env-config/env-file-unreadable"]
    assert result.fix == ""
    # an error is never accepted: "not read" must not become "clean"
    assert _env_check(env_file=str(path), accept=["unread-env-config/env-file-unreadable"]).status == "error"


def test_a_user_relative_env_file_is_expanded(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _env_file(tmp_path, "A=1\n")
    result = _env_check(env_file="~/serving.env")
    assert result.status == "skip"  # read (no error, no missing file): only the process is missing
    assert result.summary == "no serving process given (--pid, --process, [runtime] process or endpoint)"


@pytest.mark.parametrize(("options", "summary"), [
    pytest.param({"pid": 2 ** 22 + 12345}, f"pid {2 ** 22 + 12345}: no such process", id="no-such-pid"),
    pytest.param({"process": "execsys-no-such-process-x"}, "no process named 'execsys-no-such-process-x'",
                 id="no-such-name"),
    pytest.param({"endpoint_port": 1}, "nothing (visible) listens on the declared endpoint port 1",
                 id="nothing-on-the-port"),
])
def test_no_serving_process_found_is_a_skip_saying_why(tmp_path, options, summary) -> None:
    result = _env_check(env_file=_env_file(tmp_path, "A=1\n"), **options)
    assert (result.status, result.summary) == ("skip", summary)
    assert result.evidence == [summary]


def _declared(served, **options):
    return _env_check(pid=served.pid, **options)


def test_the_live_environment_matches(served, tmp_path) -> None:
    path = _env_file(tmp_path, "A=1\nHF_TOKEN=hf-live-value-1\n")
    result = _declared(served, env_file=path)
    assert (result.status, result.summary) == ("ok", f"pid {served.pid} runs with the declared environment")
    assert result.evidence[0] == f"process: pid {served.pid} (--pid)"
    assert result.evidence[1].startswith(f"pid {served.pid} argv: execsys-decisions-a-served -c ")
    assert result.evidence[1].endswith(f"--model {MODEL}")
    assert result.evidence[2:] == [f"2 declared variable(s) from {path}; 2 match"]
    assert result.fix == ""


def test_declared_variables_missing_and_different(served, tmp_path) -> None:
    path = _env_file(tmp_path, "A=2\nB=1\nHF_TOKEN=hf-other-value\n")
    result = _declared(served, env_file=path, declared_env={"C": "x"})
    pid = served.pid
    texts = [f"A: declared '2', pid {pid} has '1'", f"B: declared, missing in pid {pid}",
             f"C: declared, missing in pid {pid}", f"HF_TOKEN: declared <redacted>, pid {pid} has <redacted>"]
    assert result.status == "fail"
    assert [f.text for f in result.findings] == texts
    assert [f.id.split("/")[1] for f in result.findings] == [
        "variable-differs", "variable-missing", "variable-missing", "variable-differs"]
    assert result.summary == "; ".join(texts[:3]) + " ..."
    assert f"4 declared variable(s) from {path}, [environment] variables; 0 match" in result.evidence
    assert result.fix == uec.FIX
    assert "hf-live-value-1" not in str(result.to_json()) and "hf-other-value" not in str(result.to_json())


def test_three_failures_have_no_ellipsis(served) -> None:
    result = _declared(served, declared_env={"A": "2", "B": "1", "C": "1"})
    assert result.summary == (f"A: declared '2', pid {served.pid} has '1'; B: declared, missing in pid {served.pid}; "
                              f"C: declared, missing in pid {served.pid}")
    assert "3 declared variable(s) from [environment] variables; 0 match" in result.evidence


def test_one_of_two_matches(served) -> None:
    result = _declared(served, declared_env={"A": "1", "B": "1"})
    assert result.summary == f"B: declared, missing in pid {served.pid}"
    assert "2 declared variable(s) from [environment] variables; 1 match" in result.evidence


@pytest.mark.parametrize(("after_start_s", "warned"), [
    pytest.param(uec.START_TIME_SLACK_S - 0.25, False, id="within-the-slack"),
    pytest.param(uec.START_TIME_SLACK_S, False, id="at-the-slack"),
    pytest.param(uec.START_TIME_SLACK_S + 0.25, True, id="beyond-the-slack"),
])
def test_an_env_file_changed_after_the_process_started(served, tmp_path, after_start_s, warned) -> None:
    path = _env_file(tmp_path, "A=1\n")
    started = sysinfo.process(served.pid).create_time
    os.utime(path, (started + after_start_s, started + after_start_s))
    result = _declared(served, env_file=path)
    assert result.status == ("warn" if warned else "ok")
    if warned:
        text = result.findings[0].text
        assert result.summary == text  # a warning is shown alone
        assert text.startswith(f"{path} changed ") and f", after pid {served.pid} started " in text
        assert text.endswith(" ago -- it may serve the old config")
        assert result.findings[0].id == "unread-env-config/env-file-newer-than-process"


def test_a_warning_beside_a_failure_summarises_the_failure(served, tmp_path) -> None:
    path = _env_file(tmp_path, "A=2\n")
    started = sysinfo.process(served.pid).create_time
    os.utime(path, (started + 30, started + 30))
    result = _declared(served, env_file=path)
    assert (result.status, result.summary) == ("fail", f"A: declared '2', pid {served.pid} has '1'")


@pytest.mark.parametrize(("artifact", "status", "line"), [
    pytest.param(MODEL, "ok", f"artifact {MODEL} is on pid {{pid}}'s command line", id="the-declared-model"),
    pytest.param("/srv/models/other.gguf", "fail", f"artifact: declared /srv/models/other.gguf, pid {{pid}} serves "
                 f"{MODEL}", id="another-model"),
])
def test_the_served_artifact(served, artifact, status, line) -> None:
    result = _declared(served, artifact_path=artifact)
    line = line.format(pid=served.pid)
    assert result.status == status
    if status == "ok":
        assert line in result.evidence
        assert result.summary == f"pid {served.pid} runs with the declared environment"
    else:
        assert result.summary == line
        assert [f.id for f in result.findings] == ["unread-env-config/artifact-differs"]


def test_an_artifact_with_no_model_on_the_command_line(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={"PATH": "/bin"})
    try:
        result = _env_check(pid=proc.pid, artifact_path="/m.gguf")
    finally:
        proc.kill()
        proc.wait()
    assert result.status == "ok"
    assert f"artifact /m.gguf: no model path on pid {proc.pid}'s command line to compare" in result.evidence


def test_the_process_by_name_and_by_port(served, tmp_path) -> None:
    by_name = _env_check(process="execsys-decisions-a-served", declared_env={"A": "1"})
    assert by_name.status == "ok"
    assert by_name.evidence[0] == f"process: pid {served.pid} ('execsys-decisions-a-served')"
    by_port = _env_check(endpoint_port=served.port, declared_env={"A": "1"})
    assert by_port.status == "ok"
    assert by_port.evidence[0] == f"process: pid {served.pid}, the listener on port {served.port}"


def test_two_processes_by_one_name_check_the_oldest(served) -> None:
    second = subprocess.Popen(["execsys-decisions-a-served", "-c", "import time; time.sleep(60)"],
                              executable=sys.executable, env={"A": "2"})
    try:
        deadline = time.time() + 10
        while time.time() < deadline and not sysinfo.process(second.pid).cmdline:
            time.sleep(0.01)
        result = _env_check(process="execsys-decisions-a-served", declared_env={"A": "1"})
    finally:
        second.kill()
        second.wait()
    assert result.status == "ok"  # the oldest is the first one, with A=1
    assert result.evidence[0] == (f"2 processes match 'execsys-decisions-a-served' (pids {served.pid}, "
                                  f"{second.pid}); checking the oldest")
    assert result.evidence[1] == f"process: pid {served.pid} ('execsys-decisions-a-served')"


@pytest.mark.parametrize(("own", "declared", "status", "texts"), [
    pytest.param({"EXECSYS_A_X": "1"}, {"EXECSYS_A_X": "1"}, "ok", [], id="holds"),
    pytest.param({}, {"EXECSYS_A_X": "1"}, "warn", [f"EXECSYS_A_X: declared, missing ({uec.OWN_ENVIRONMENT})"],
                 id="missing"),
    pytest.param({"EXECSYS_A_X": "2"}, {"EXECSYS_A_X": "1"}, "warn",
                 [f"EXECSYS_A_X: declared '1', has '2' ({uec.OWN_ENVIRONMENT})"], id="differs"),
    pytest.param({"EXECSYS_A_TOKEN": "zzzzzz2"}, {"EXECSYS_A_TOKEN": "zzzzzz1"}, "warn",
                 [f"EXECSYS_A_TOKEN: declared <redacted>, has <redacted> ({uec.OWN_ENVIRONMENT})"],
                 id="a-secret-is-never-shown"),
    pytest.param({}, {"EXECSYS_A_1": "1", "EXECSYS_A_2": "1", "EXECSYS_A_3": "1", "EXECSYS_A_4": "1"}, "warn",
                 [f"EXECSYS_A_{i}: declared, missing ({uec.OWN_ENVIRONMENT})" for i in range(1, 5)], id="four"),
])
def test_declared_variables_without_a_process_are_checked_here(monkeypatch, own, declared, status, texts) -> None:
    for name in ("EXECSYS_A_X", "EXECSYS_A_TOKEN", *declared):
        monkeypatch.delenv(name, raising=False)
    for name, value in own.items():
        monkeypatch.setenv(name, value)
    result = _env_check(declared_env=declared)
    assert result.status == status
    assert [f.text for f in result.findings] == texts
    matched = len(declared) - len(texts)
    assert result.evidence[-1] == (f"{len(declared)} declared variable(s) from [environment] variables; "
                                   f"{matched} match ({uec.OWN_ENVIRONMENT})")
    if texts:
        assert result.summary == "; ".join(texts[:3]) + (" ..." if len(texts) > 3 else "")
        assert result.fix == uec.FIX
    else:
        assert result.summary == f"the declared [environment] variables hold ({uec.OWN_ENVIRONMENT})"


@pytest.mark.parametrize(("argv", "found"), [
    pytest.param(["vllm", "serve", "--model", "/m/a"], ["/m/a"], id="model-flag"),
    pytest.param(["x", "--model=/m/a"], ["/m/a"], id="model-equals"),
    pytest.param(["x", "--model-path=/m/a=b"], ["/m/a=b"], id="equals-in-the-path"),
    pytest.param(["x", "-m", "/m/a", "--served-model-path", "/m/b"], ["/m/a", "/m/b"], id="two-flags"),
    pytest.param(["x", "/m/a.GGUF"], ["/m/a.GGUF"], id="a-model-file-by-suffix"),
    pytest.param(["x", "--lora=/m/a.bin"], [], id="a-flag-with-a-suffix-is-not-the-model"),
    pytest.param(["/m/a.gguf", "x"], [], id="argv0-is-the-program"),
    pytest.param(["x", "--model", "/m/a", "/m/a"], ["/m/a"], id="once-each"),
    pytest.param(["x", "--port", "8000"], [], id="nothing"),
    pytest.param(["x", "--tokenizer=/m/t"], [], id="another-flag-equals"),
])
def test_artifact_arguments(argv, found) -> None:
    assert uec._artifact_args(argv) == found


def test_same_path(tmp_path) -> None:
    real = tmp_path / "m.gguf"
    real.write_text("x")
    (tmp_path / "link.gguf").symlink_to(real)
    assert uec._same_path(str(real), str(tmp_path / "link.gguf"))
    assert uec._same_path("/absent/a", "/absent/a")
    assert not uec._same_path(str(real), str(tmp_path / "absent"))
    assert not uec._same_path(str(tmp_path / "absent"), str(real))
    other = tmp_path / "n.gguf"
    other.write_text("x")
    assert not uec._same_path(str(real), str(other))


def test_a_symlinked_artifact_is_the_served_one(tmp_path) -> None:
    real = tmp_path / "m.gguf"
    real.write_text("x")
    (tmp_path / "link.gguf").symlink_to(real)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--model", str(real)],
                            env={"PATH": "/bin"})
    try:
        result = _env_check(pid=proc.pid, artifact_path=str(tmp_path / "link.gguf"))
    finally:
        proc.kill()
        proc.wait()
    assert result.status == "ok"


def test_not_a_systemd_service_adds_no_env_file(served) -> None:
    assert uec._systemd_env_files(served.pid, 3.0) == []
    assert uec._systemd_env_files(2 ** 22 + 12345, 3.0) == []


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("A", None, "(unset)"), ("A", "x y", "'x y'"), ("DB_PASSWORD", "p", "<redacted>"), ("A", "", "''")])
def test_show(name, value, shown) -> None:
    assert uec._show(name, value) == shown


@pytest.mark.parametrize(("text", "parsed"), [
    pytest.param("export   A=1", {"A": "1"}, id="export-then-spaces"),
    pytest.param("exportA=1", {"exportA": "1"}, id="export-needs-a-space"),
    pytest.param("  # c\n\nA=1\n  B = 'x' ", {"A": "1", "B": "x"}, id="indented-comment-blank-lines"),
    pytest.param("A='x\nA=y", {"A": "y"}, id="the-last-wins"),
    pytest.param("A=\"'", {"A": "\"'"}, id="mixed-quotes"),
    pytest.param("A='", {"A": "'"}, id="one-quote"),
    pytest.param("A=x'", {"A": "x'"}, id="quote-at-the-end-only"),
])
def test_parse_env_text(text, parsed) -> None:
    assert uec.parse_env_text(text) == parsed


# -- stub-executables ---------------------------------------------------------------------------------------

from execsys.doctor import files  # noqa: E402
from execsys.doctor.hazards import stub_executables as stubs  # noqa: E402


def _program(directory, name: str, body: str | bytes, mode: int = 0o755) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(body.encode() if isinstance(body, str) else body)
    path.chmod(mode)
    return str(path)


def _elf(machine: int) -> bytes:
    return b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + (2).to_bytes(2, "little") + machine.to_bytes(2, "little") \
        + bytes(44)


FOREIGN = 183 if files.host_elf_machine() != 183 else 62


def _inspect(path: str, timeout: float = 3.0):
    return stubs.inspect(path, Context(DoctorOptions(timeout=timeout)))


@pytest.mark.parametrize(("body", "status", "kind", "line"), [
    pytest.param("#!/bin/sh\necho 'tool 1.2'\n", "ok", "", "tool: {path} --version: exit 0: tool 1.2", id="works"),
    pytest.param("", "fail", "zero-byte", "{path}: 0-byte file ({path})", id="zero-byte"),
    pytest.param("#!/nonexistent/python3\n", "fail", "dead-shebang",
                 "{path}: #!/nonexistent/python3: interpreter /nonexistent/python3 does not exist", id="dead-shebang"),
    pytest.param(_elf(FOREIGN), "fail", "foreign-architecture",
                 f"{{path}}: ELF for {files.ELF_MACHINES[FOREIGN]}, this host is "
                 f"{files.ELF_MACHINES.get(files.host_elf_machine())}", id="foreign-elf"),
    pytest.param("not a program at all\n", "fail", "cannot-start", None, id="no-format-cannot-start"),
    pytest.param("#!/bin/sh\nexit 126\n", "fail", "exec-format-error", "{path}: {path} --version: exit 126",
                 id="exit-126"),
    pytest.param("#!/bin/sh\necho 'cannot execute: Exec format error'; exit 1\n", "fail", "exec-format-error",
                 "{path}: {path} --version: exit 1: cannot execute: Exec format error", id="says-exec-format-error"),
    pytest.param("#!/bin/sh\necho \"pyenv: version \\`3.9.1' is not installed\"; exit 1\n", "fail",
                 "shim-uninstalled", "{path}: shim for an uninstalled version (pyenv: the selected version is not "
                 "installed) -- {path} --version: exit 1: pyenv: version `3.9.1' is not installed",
                 id="a-pyenv-stub-anywhere"),
    pytest.param("#!/bin/sh\necho \"pyenv: version \\`3.9.1' is not installed\"; exit 0\n", "ok", "", None,
                 id="stub-words-with-exit-0"),
    pytest.param("#!/bin/sh\necho 'usage: tool' >&2; exit 2\n", "warn", "version-failed",
                 "{path}: {path} --version: exit 2: usage: tool (runs, but --version failed)", id="version-failed"),
    pytest.param("#!/bin/sh\necho 'tool: not installed'; exit 1\n", "warn", "version-failed", None,
                 id="not-installed-words-off-a-shim-dir"),
])
def test_inspect_one_program(tmp_path, body, status, kind, line) -> None:
    path = _program(tmp_path / "bin", "tool", body)
    got_status, evidence, got_kind = _inspect(path)
    assert (got_status, got_kind) == (status, kind)
    if line is not None:
        assert evidence == [line.format(path=path)]
    if kind == "cannot-start":
        assert evidence[0].startswith(f"{path}: {path} --version: could not run (")


def test_inspect_a_file_that_cannot_be_read(tmp_path) -> None:
    link = tmp_path / "tool"
    link.symlink_to(tmp_path / "gone")
    assert _inspect(str(link)) == ("fail", [f"{link}: No such file or directory ({tmp_path / 'gone'})"], "unreadable")


def test_a_windows_app_alias_by_its_directory(tmp_path) -> None:
    path = _program(tmp_path / "Microsoft" / "WindowsApps", "python3.exe", "#!/bin/sh\necho ok\n")
    status, evidence, kind = _inspect(path)
    assert (status, kind) == ("fail", "windows-app-alias")
    assert evidence == [f"{path}: a Windows App Execution Alias stub (WindowsApps) -- it opens the Store instead "
                        "of running anything"]


def test_a_windows_app_alias_by_what_it_says(tmp_path) -> None:
    path = _program(tmp_path / "bin", "python", "#!/bin/sh\necho 'Python was not found; run without arguments to "
                    "install from the Microsoft Store, or disable this shortcut'; exit 49\n")
    status, evidence, kind = _inspect(path)
    assert (status, kind) == ("fail", "windows-app-alias")
    assert evidence[0].startswith(f"{path}: a Windows App Execution Alias stub -- it offers the Microsoft Store")


def test_a_program_that_hangs(tmp_path) -> None:
    path = _program(tmp_path / "bin", "tool", "#!/bin/sh\nexec sleep 30\n")
    status, evidence, kind = _inspect(path, timeout=0.25)
    assert (status, kind) == ("fail", "hangs")
    assert evidence == [f"{path}: hangs -- {path} --version: no answer within 0.2s (killed)"]


def test_a_program_that_floods(tmp_path) -> None:
    path = _program(tmp_path / "bin", "tool", "#!/bin/sh\nexec yes flood\n")
    status, evidence, kind = _inspect(path, timeout=20)
    assert (status, kind) == ("fail", "floods-output")
    assert evidence[0].startswith(f"{path}: {path} --version: flooded its output (killed after ")


@pytest.mark.parametrize(("shims", "body", "status", "kind", "evidence"), [
    pytest.param(".pyenv/shims", "#!/bin/sh\necho 'tool: command not found'; exit 127\n", "fail", "shim-uninstalled",
                 ["{path}: shim for an uninstalled version -- {path} --version: exit 127: tool: command not found"],
                 id="pyenv-shim-command-not-found"),
    pytest.param(".asdf/shims", "#!/bin/sh\necho 'tool 3.1 not installed'; exit 1\n", "fail", "shim-uninstalled",
                 None, id="asdf-shim-not-installed"),
    pytest.param("pyenv/shims", "#!/bin/sh\necho 'no preset version here'; exit 1\n", "fail", "shim-uninstalled",
                 None, id="no-preset-version"),
    pytest.param("asdf/shims", "#!/bin/sh\necho 'tool: not found'; exit 1\n", "fail", "shim-uninstalled", None,
                 id="not-found"),
    pytest.param(".pyenv/shims", "#!/bin/sh\necho 'tool 1.0'\n", "ok", "",
                 ["tool: {path} --version: exit 0: tool 1.0", "{path}: a version-manager shim"],
                 id="a-working-shim-is-noted"),
    pytest.param(".pyenv/shims", "#!/bin/sh\necho 'tool: command not found'; exit 0\n", "ok", "", None,
                 id="shim-words-with-exit-0"),
    pytest.param(".pyenv/shims", "#!/bin/sh\necho 'bad flag'; exit 3\n", "warn", "version-failed",
                 ["{path}: {path} --version: exit 3: bad flag (runs, but --version failed)",
                  "{path}: a version-manager shim"], id="shim-failing-otherwise"),
    pytest.param(".pyenv/shims", "#!/bin/sh\nexit 126\n", "fail", "exec-format-error",
                 ["{path}: {path} --version: exit 126", "{path}: a version-manager shim"], id="shim-exit-126"),
    pytest.param("pyenv/bin", "#!/bin/sh\necho 'tool: command not found'; exit 1\n", "warn", "version-failed", None,
                 id="not-a-shim-directory"),
])
def test_version_manager_shims(tmp_path, shims, body, status, kind, evidence) -> None:
    path = _program(tmp_path / shims, "tool", body)
    got_status, got_evidence, got_kind = _inspect(path)
    assert (got_status, got_kind) == (status, kind)
    if evidence is not None:
        assert got_evidence == [line.format(path=path) for line in evidence]


def test_the_check_over_path(tmp_path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    good = _program(bin_dir, "good", "#!/bin/sh\necho 'good 1'\n")
    empty = _program(bin_dir, "empty", "")
    dead = _program(bin_dir, "dead", "#!/nonexistent/sh\n")
    odd = _program(bin_dir, "odd", "#!/bin/sh\nexit 2\n")
    later = _program(tmp_path / "later", "good", "")  # only the first match on PATH is inspected
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{tmp_path / 'later'}")
    result = stubs.check(Context(DoctorOptions(commands=["good", "empty", "absent", "dead", "odd"])))
    assert result.status == "fail"
    assert result.summary == "cannot run: empty, dead"
    assert [f.id for f in result.findings] == ["stub-executables/zero-byte", "stub-executables/dead-shebang",
                                               "stub-executables/version-failed"]
    assert [f.level for f in result.findings] == ["fail", "fail", "warn"]
    assert result.evidence == [f"good: {good} --version: exit 0: good 1", f"{empty}: 0-byte file ({empty})",
                               f"{dead}: #!/nonexistent/sh: interpreter /nonexistent/sh does not exist",
                               f"{odd}: {odd} --version: exit 2 (runs, but --version failed)"]
    assert result.fix == stubs.FIX
    assert later not in " ".join(result.evidence)

    warned = stubs.check(Context(DoctorOptions(commands=["good", "odd"])))
    assert (warned.status, warned.summary) == ("warn", "--version failed: odd")
    accepted = stubs.check(Context(DoctorOptions(commands=["good", "odd"], accept=["stub-executables/version-failed"])))
    assert accepted.status == "ok"
    assert f"accepted (stub-executables/version-failed): {odd}: {odd} --version: exit 2 (runs, but --version failed)" \
        in accepted.evidence


@pytest.mark.parametrize(("commands", "summary"), [
    pytest.param(["good"], "1 command start and answer", id="one"),
    pytest.param(["good", "also"], "2 commands start and answer", id="two"),
])
def test_the_check_all_good(tmp_path, monkeypatch, commands, summary) -> None:
    for name in commands:
        _program(tmp_path, name, f"#!/bin/sh\necho '{name} 1'\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    result = stubs.check(Context(DoctorOptions(commands=commands)))
    assert (result.status, result.summary, result.fix) == ("ok", summary, "")


def test_no_command_on_path_is_a_skip(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = stubs.check(Context(DoctorOptions(commands=["absent"])))
    assert (result.status, result.summary, result.evidence) == ("skip", "none of the commands is on PATH", [])


def test_inspecting_many_keeps_their_order_and_raises_what_one_raised(tmp_path) -> None:
    paths = [_program(tmp_path, f"t{i}", f"#!/bin/sh\necho 't{i} 1'\n") for i in range(10)]
    ctx = Context(DoctorOptions())
    outcomes = stubs._inspect_all(paths, ctx)
    assert [o[1][0].split(":")[0] for o in outcomes] == [f"t{i}" for i in range(10)]
    with pytest.raises(TypeError):
        stubs._inspect_all([paths[0], None], ctx)  # type: ignore[list-item]


@pytest.mark.parametrize(("output", "returncode", "what"), [
    pytest.param("pyenv: black: command not found\n\nThe `black' command exists in these Python versions:", 127,
                 "shim for an uninstalled version (pyenv: the command exists only in a Python version that is not "
                 "selected)", id="pyenv-which"),
    pytest.param("No preset version installed for command python\nPlease install", 126,
                 "shim for an uninstalled version (asdf)", id="asdf-preset"),
    pytest.param("No version is set for command python", 1,
                 "shim for an uninstalled version (asdf: no version selected for it)", id="asdf-unset"),
    pytest.param("pyenv: : command not found", 127, None, id="an-empty-command-name-is-not-pyenv-s"),
    pytest.param("no preset version installed for command python", 126, None, id="case-matters"),
])
def test_stub_signature_words(output, returncode, what) -> None:
    found = stubs.stub_signature(output, returncode)
    assert (found.what if found else None) == what


# -- interop-mangling ------------------------------------------------------------------------------------------

import json  # noqa: E402

from execsys.doctor.hazards import interop_mangling as interop  # noqa: E402

# What `exec $*` with globbing off hands on: every argument split again at blanks, the empty one gone.
RESPLIT = ["two", "words", "'single", "quoted'", "say", '"hi"', "$HOME", "%PATH%", "`id`", "back\\slash", "*.py",
           "?", "[ab]", "naïve", "—", "日本語", "tab", "here"]


@pytest.fixture
def relay(tmp_path):
    """A relay script that re-splits its arguments, as ``ssh host cmd args`` does."""
    return _program(tmp_path, "relay", "#!/bin/sh\nset -f\nexec $*\n")


def test_the_canary_carries_every_character_a_layer_mangles() -> None:
    joined = "".join(interop.CANARY)
    for char in (" ", "'", '"', "$", "%", "`", "\\", "*", "?", "[", "]", "\t", "ï", "日"):
        assert char in joined, char
    assert "" in interop.CANARY
    assert not set(";&|") & set(joined)  # a re-evaluating layer runs nothing but the reporter and `id`


def test_an_intact_layer(tmp_path) -> None:
    status, evidence = interop.probe_layer("env", 10.0)
    assert (status, evidence) == ("ok", ["layer 'env': all 13 canary arguments arrived intact"])


def test_a_layer_that_re_splits(relay) -> None:
    status, evidence = interop.probe_layer(relay, 10.0)
    assert status == "fail"
    assert evidence[:3] == [f"layer {relay!r}: arguments altered",
                            f"sent:     {json.dumps(interop.CANARY, ensure_ascii=False)}",
                            f"received: {json.dumps(RESPLIT, ensure_ascii=False)}"]
    assert evidence[3:] == interop.compare(interop.CANARY, RESPLIT)
    assert evidence[3] == "sent 13 arguments, received 18"
    assert evidence[4] == 'arg 0: sent "two words" received "two"'


@pytest.mark.parametrize(("layer", "line"), [
    pytest.param("false", "layer 'false': the reporter did not run: false python3 - ", id="fails"),
    pytest.param("true", "layer 'true': the reporter did not run: true python3 - ", id="exits-0-silently"),
])
def test_a_layer_that_never_runs_the_reporter(layer, line) -> None:
    status, evidence = interop.probe_layer(layer, 10.0)
    assert status == "error"
    assert evidence[0].startswith(line)
    assert evidence[0].endswith(" -- the layer did not pass stdin through (docker exec needs -i)") is (layer == "true")
    assert evidence[1] == f"sent: {json.dumps(interop.CANARY, ensure_ascii=False)}"


def test_a_layer_that_prints_output_but_no_report(tmp_path) -> None:
    layer = _program(tmp_path, "chatty", "#!/bin/sh\necho 'Password:'\n")
    status, evidence = interop.probe_layer(layer, 10.0)
    assert status == "error"
    assert evidence[0] == f"layer {layer!r}: the reporter did not run: {layer} python3 - " + " ".join(
        interop.CANARY) + ": exit 0: Password:"


@pytest.mark.parametrize(("layer", "evidence"), [
    pytest.param("sh -c 'x", ["layer \"sh -c 'x\": cannot split (No closing quotation)"], id="unbalanced-quote"),
    pytest.param("  ", ["empty layer"], id="blank"),
])
def test_a_layer_that_cannot_be_split(layer, evidence) -> None:
    assert interop.probe_layer(layer, 10.0) == ("error", evidence)


@pytest.mark.parametrize(("output", "received"), [
    pytest.param('EXECSYS-CANARY ["a", "b"]\n', ["a", "b"], id="report"),
    pytest.param('banner\nEXECSYS-CANARY ["a"]\nEXECSYS-CANARY ["b"]', ["a"], id="the-first-report-after-a-banner"),
    pytest.param("EXECSYS-CANARY [1, null]", ["1", "None"], id="as-strings"),
    pytest.param("EXECSYS-CANARY {\"a\": 1}", None, id="not-a-list"),
    pytest.param("EXECSYS-CANARY [", None, id="not-json"),
    pytest.param(' EXECSYS-CANARY ["a"]', None, id="not-at-the-line-start"),
    pytest.param('EXECSYS-CANARY["a"]', None, id="no-space"),
    pytest.param("", None, id="nothing"),
])
def test_received(output, received) -> None:
    assert interop._received(output) == received


def test_the_reporter_prints_what_arrived() -> None:
    done = subprocess.run([sys.executable, "-", "a b", ""], input=interop.REPORTER, capture_output=True, text=True,
                          check=True)
    assert done.stdout == 'EXECSYS-CANARY ["a b", ""]\n'


def _interop(monkeypatch, wsl=False, **options):
    monkeypatch.setattr(interop.sysinfo, "is_wsl", lambda: wsl)
    return interop.check(Context(DoctorOptions(**options)))


@pytest.mark.parametrize(("layers", "status", "summary"), [
    pytest.param(["env"], "ok", "1 layer pass arguments intact", id="one-intact"),
    pytest.param(["env", "env -u EXECSYS_X"], "ok", "2 layers pass arguments intact", id="two-intact"),
    pytest.param(["env", "RELAY"], "fail", "arguments altered crossing 'RELAY'", id="one-altered"),
    pytest.param(["false", "env"], "error", "could not send the canary through 'false'", id="one-did-not-run"),
    pytest.param(["false", "RELAY"], "fail", "arguments altered crossing 'RELAY'", id="altered-outranks-not-run"),
])
def test_the_check_over_layers(monkeypatch, relay, layers, status, summary) -> None:
    layers = [relay if layer == "RELAY" else layer for layer in layers]
    result = _interop(monkeypatch, layers=layers)
    assert result.status == status
    assert result.summary == summary.replace("RELAY", relay)
    kinds = {"fail": "interop-mangling/arguments-altered", "error": "interop-mangling/layer-did-not-run"}
    assert [f.id for f in result.findings] == [kinds[f.level] for f in result.findings]
    assert result.fix == {"ok": "", "fail": interop.FIX,
                          "error": "Check that the layer runs and that python3 exists on its far side."}[status]
    assert result.evidence[0].startswith(f"layer {layers[0]!r}: ")


def test_an_accepted_mangling_is_shown_and_does_not_fail(monkeypatch, relay) -> None:
    result = _interop(monkeypatch, layers=[relay], accept=["interop-mangling/arguments-altered"])
    assert result.status == "ok"
    assert result.evidence[0] == f"accepted (interop-mangling/arguments-altered): layer {relay!r}: arguments altered"


def test_untrusted_layers_are_not_run(monkeypatch, tmp_path) -> None:
    marker = tmp_path / "ran"
    layer = f"touch {marker}"
    result = _interop(monkeypatch, withheld_layers=[layer], untrusted="execsys.toml is not trusted")
    assert (result.status, result.summary) == ("skip", "execsys.toml is not trusted")
    assert result.evidence == [f"layer {layer!r}: not run (the declaration is not trusted)"]
    assert result.fix == "Review the declaration, then `execsys trust` it (or pass --trust for one run)."
    assert not marker.exists()
    result = _interop(monkeypatch, withheld_layers=[layer])
    assert result.summary == "declaration not trusted"


@pytest.mark.parametrize(("wsl", "status", "summary"), [
    pytest.param(False, "skip", "no layers declared (--layer \"ssh gpu1\", [environment] layers)", id="no-layers"),
    pytest.param(True, "warn", "WSL interop present and no layer declared to test", id="wsl-no-layers"),
])
def test_no_layers(monkeypatch, wsl, status, summary) -> None:
    result = _interop(monkeypatch, wsl=wsl)
    assert (result.status, result.summary) == (status, summary)
    if wsl:
        assert [f.id for f in result.findings] == ["interop-mangling/wsl-interop-untested"]
        assert result.evidence == ["WSL interop detected: Windows programs re-parse their command line "
                                   "(CommandLineToArgvW); pass arguments to them through a script file"]
        assert result.fix == interop.FIX
    else:
        assert (result.evidence, result.fix) == ([], "")


def test_wsl_is_noted_beside_the_layers(monkeypatch) -> None:
    result = _interop(monkeypatch, wsl=True, layers=["env"])
    assert result.status == "ok"
    assert result.evidence == ["layer 'env': all 13 canary arguments arrived intact",
                               "WSL interop detected: Windows programs re-parse their command line "
                               "(CommandLineToArgvW); pass arguments to them through a script file"]


# -- baked-paths ---------------------------------------------------------------------------------------------------

import shutil  # noqa: E402

from execsys.doctor.hazards import baked_paths as baked  # noqa: E402


def _venv(root, home: str | None = "/usr/bin", command: str | None = None, bindir: str = "bin"):
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"home = {home}"] if home is not None else []
    lines += ["include-system-site-packages = false", "version = 3.11.4"]
    if command is not None:
        lines.append(f"command = {command}")
    (root / "pyvenv.cfg").write_text("\n".join(lines) + "\n")
    (root / bindir).mkdir(exist_ok=True)
    return root


def test_a_healthy_venv(tmp_path) -> None:
    venv = _venv(tmp_path / "v", command="/usr/bin/python3 -m venv /x/v")
    _program(venv / "bin", "tool", f"#!{venv}/bin/python\nimport tool\n")
    _program(venv / "bin", "envtool", "#!/usr/bin/env python3\n")
    _program(venv / "bin", "shtool", "#!/bin/sh\n")
    _program(venv / "bin", "reltool", "#!python\n")
    _program(venv / "bin", "activate", f"VIRTUAL_ENV='{venv}'\nexport VIRTUAL_ENV\n", 0o644)
    _program(venv / "bin", "activate.csh", f"setenv VIRTUAL_ENV \"{venv}/\"\n", 0o644)
    _program(venv / "bin", "README", "VIRTUAL_ENV=/elsewhere\n", 0o644)  # not an activate script
    (venv / "bin" / "python").symlink_to("/usr/bin/env")
    problems, evidence = baked.check_venv(str(venv))
    assert problems == []
    assert evidence == [f"{venv}: created by `/usr/bin/python3 -m venv /x/v`",
                        f"{venv}: home = /usr/bin, 4 script(s) with shebangs checked"]


def test_a_venv_reached_through_a_symlink_is_itself(tmp_path) -> None:
    venv = _venv(tmp_path / "real")
    (tmp_path / "link").symlink_to(venv)
    _program(venv / "bin", "tool", f"#!{venv}/bin/python\n")
    _program(venv / "bin", "activate", f"VIRTUAL_ENV=\"{venv}\"\n", 0o644)
    problems, evidence = baked.check_venv(str(tmp_path / "link"))
    assert problems == []
    assert evidence == [f"{tmp_path / 'link'}: home = /usr/bin, 1 script(s) with shebangs checked"]


def test_a_moved_venv(tmp_path) -> None:
    venv = _venv(tmp_path / "new", home="/nonexistent/python/bin")
    for i in range(6):
        _program(venv / "bin", f"tool{i}", "#!/old/venv/bin/python3.11\n")
    _program(venv / "bin", "here", f"#!{sys.executable}\n")  # outside the venv, present
    _program(venv / "bin", "activate", "VIRTUAL_ENV=/old/venv\nexport VIRTUAL_ENV\nVIRTUAL_ENV=/old/other\n", 0o644)
    (venv / "bin" / "python3").symlink_to("/old/venv/bin/python3.11")
    problems, evidence = baked.check_venv(str(venv))
    assert [p.id for p in problems] == ["baked-paths/venv-home-missing", "baked-paths/activate-names-other-venv",
                                        "baked-paths/script-interpreter-outside-venv",
                                        "baked-paths/dangling-python-link"]
    assert {p.level for p in problems} == {"fail"}
    texts = [p.text for p in problems]
    assert texts[0] == f"{venv / 'pyvenv.cfg'}: home = /nonexistent/python/bin does not exist"
    assert texts[1] == f"{venv / 'bin' / 'activate'}: activates /old/venv, not this venv"  # the first only
    assert texts[2] == (f"{venv}: 7 script(s) run an interpreter outside the venv (moved?): "
                        f"here -> #!{sys.executable}, " + ", ".join(
                            f"tool{i} -> #!/old/venv/bin/python3.11 (missing)" for i in range(4)) + " ...")
    assert texts[3] == f"{venv / 'bin' / 'python3'} -> /old/venv/bin/python3.11 (dangling)"
    assert evidence == [f"{venv}: home = /nonexistent/python/bin, 7 script(s) with shebangs checked"]


def test_five_stale_scripts_have_no_ellipsis(tmp_path) -> None:
    venv = _venv(tmp_path / "v")
    for i in range(5):
        _program(venv / "bin", f"t{i}", "#!/old/bin/python\n")
    problems, _ = baked.check_venv(str(venv))
    assert problems[0].text.endswith("t4 -> #!/old/bin/python (missing)")
    assert problems[0].text.startswith(f"{venv}: 5 script(s) run an interpreter outside the venv (moved?): t0 -> ")


def test_a_prefix_of_the_venv_is_not_inside_it(tmp_path) -> None:
    venv = _venv(tmp_path / "v")
    _program(venv / "bin", "tool", f"#!{tmp_path / 'v2'}/bin/python\n")
    _program(venv / "bin", "activate", f"VIRTUAL_ENV='{tmp_path / 'v2'}'\n", 0o644)
    problems, _ = baked.check_venv(str(venv))
    assert [p.id.split("/")[1] for p in problems] == ["activate-names-other-venv", "script-interpreter-outside-venv"]


@pytest.mark.parametrize(("path", "root", "inside"), [
    ("/a/b", "/a/b", True), ("/a/b/c", "/a/b", True), ("/a/b/c", "/a/b/", True), ("/a/bc", "/a/b", False),
    ("/a", "/a/b", False), ("/a/b/../c", "/a/b", False), ("/a/./b/c", "/a/b", True), ("/x", "/", True),
])
def test_inside(path, root, inside) -> None:
    assert baked._inside(path, root) is inside


def test_not_a_venv_and_a_windows_layout(tmp_path) -> None:
    (tmp_path / "plain").mkdir()
    problems, evidence = baked.check_venv(str(tmp_path / "plain"))
    assert [(p.id, p.text) for p in problems] == [
        ("baked-paths/not-a-venv", f"{tmp_path / 'plain'}: not a virtual environment (no pyvenv.cfg)")]
    assert evidence == []
    win = _venv(tmp_path / "win", home=None, bindir="Scripts")
    shutil.rmtree(win / "bin", ignore_errors=True)
    _program(win / "Scripts", "tool", "#!/old/python.exe\n")
    problems, evidence = baked.check_venv(str(win))
    assert [p.id.split("/")[1] for p in problems] == ["script-interpreter-outside-venv"]
    assert evidence == [f"{win}: home = None, 1 script(s) with shebangs checked"]
    empty = _venv(tmp_path / "nobin")
    (empty / "bin").rmdir()
    assert baked.check_venv(str(empty)) == ([], [f"{empty}: home = /usr/bin, 0 script(s) with shebangs checked"])


def test_pyvenv_cfg_keys_are_read_case_blind_and_split_at_the_first_equals(tmp_path) -> None:
    venv = tmp_path / "v"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("HOME = /nonexistent/a=b\nno equals here\nCommand=python -m venv x\n")
    problems, evidence = baked.check_venv(str(venv))
    assert [p.text for p in problems] == [f"{venv / 'pyvenv.cfg'}: home = /nonexistent/a=b does not exist"]
    assert evidence[0] == f"{venv}: created by `python -m venv x`"


def test_pth_lines(tmp_path) -> None:
    pth = tmp_path / "extra.pth"
    pth.write_text(f"# comment\n\nimport site\nimport\tx\nrelative/dir\n{tmp_path}\n  /nonexistent/a  \n"
                   "importlib-is-a-path-word\n/nonexistent/b\n")
    assert [(p.id, p.text) for p in baked.check_pth_file(str(pth))] == [
        ("baked-paths/pth-path-missing", f"{pth}:7: /nonexistent/a does not exist"),
        ("baked-paths/pth-path-missing", f"{pth}:9: /nonexistent/b does not exist")]
    assert baked.check_pth_file(str(tmp_path / "absent.pth")) == []
    (tmp_path / "b.pth").write_text("/nonexistent/c\n")
    (tmp_path / "c.txt").write_text("/nonexistent/d\n")
    assert [p.text.split(": ", 1)[1] for p in baked.check_pth(str(tmp_path))] == [
        "/nonexistent/c does not exist", "/nonexistent/a does not exist", "/nonexistent/b does not exist"]


def test_site_packages_of_a_venv(tmp_path) -> None:
    for d in ("lib/python3.11/site-packages", "lib/python3.9/site-packages", "Lib/site-packages", "lib/other"):
        (tmp_path / d).mkdir(parents=True)
    assert baked._site_packages(str(tmp_path)) == sorted(
        str(tmp_path / d) for d in ("lib/python3.11/site-packages", "lib/python3.9/site-packages", "Lib/site-packages"))


@pytest.fixture(scope="module")
def elves(tmp_path_factory):
    """Binaries linked with an RPATH, a RUNPATH and an ELF interpreter that do not exist."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to link test binaries with")
    out = tmp_path_factory.mktemp("elves")
    (out / "main.c").write_text("int main(void) { return 0; }\n")
    builds = {
        "rpath": ["-Wl,--disable-new-dtags", "-Wl,-rpath,/nonexistent/rp:$ORIGIN"],
        "runpath": ["-Wl,--enable-new-dtags", "-Wl,-rpath,/nonexistent/run"],
        "interp": ["-Wl,--dynamic-linker=/nonexistent/ld.so"],
        "fine": ["-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN"],
    }
    for name, flags in builds.items():
        subprocess.run([cc, "-o", str(out / name), str(out / "main.c"), *flags], check=True, capture_output=True)
    (out / "main.c").unlink()
    return out


def test_a_tree_of_binaries(elves) -> None:
    problems, evidence = baked.check_tree(str(elves))
    assert [(p.id, p.text) for p in problems] == [
        ("baked-paths/elf-interpreter-missing", f"{elves / 'interp'}: ELF interpreter /nonexistent/ld.so does not exist"),
        ("baked-paths/rpath-missing", f"{elves / 'rpath'}: RPATH /nonexistent/rp does not exist"),
        ("baked-paths/runpath-missing", f"{elves / 'runpath'}: RUNPATH /nonexistent/run does not exist")]
    assert evidence == [f"{elves}: 4 executable/shared files read"]


def test_a_tree_of_scripts_and_pth_files(tmp_path) -> None:
    _program(tmp_path / "bin", "dead", "#!/nonexistent/perl\n")
    _program(tmp_path / "bin", "fine", "#!/bin/sh\n")
    _program(tmp_path / "bin", "data", "#!/nonexistent/perl\n", 0o644)  # not executable: not read
    _program(tmp_path / "lib", "libx.so.1", "#!/nonexistent/so\n", 0o644)  # a shared object by name
    _program(tmp_path / "lib", "junk", b"\x7fELF garbage", 0o755)
    _program(tmp_path / "lib", "text", "plain\n", 0o755)
    _program(tmp_path / "lib", "paths.pth", "/nonexistent/pth\n", 0o644)
    (tmp_path / "lib" / "link").symlink_to("/nonexistent/target")
    problems, evidence = baked.check_tree(str(tmp_path))
    assert sorted((p.id, p.text) for p in problems) == [
        ("baked-paths/dead-shebang", f"{tmp_path / 'bin' / 'dead'}: #!/nonexistent/perl: interpreter "
                                     "/nonexistent/perl does not exist"),
        ("baked-paths/dead-shebang", f"{tmp_path / 'lib' / 'libx.so.1'}: #!/nonexistent/so: interpreter "
                                     "/nonexistent/so does not exist"),
        ("baked-paths/pth-path-missing", f"{tmp_path / 'lib' / 'paths.pth'}:1: /nonexistent/pth does not exist")]
    assert evidence == [f"{tmp_path}: 5 executable/shared files read"]


def test_an_unparsable_elf_is_counted(tmp_path) -> None:
    # section headers a gigabyte past the end of a 264-byte file
    header = struct.pack("<HHIQQQIHHHHHH", 2, files.host_elf_machine() or 62, 1, 0, 0, 10 ** 9, 0, 64, 56, 0, 64, 5, 0)
    _program(tmp_path, "broken", b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + header + bytes(200))
    problems, evidence = baked.check_tree(str(tmp_path))
    assert problems == []
    assert evidence == [f"{tmp_path}: 1 executable/shared files read", f"{tmp_path}: 1 ELF file(s) could not be parsed"]


def test_a_single_file_is_a_tree_of_one(tmp_path) -> None:
    path = _program(tmp_path, "dead", "#!/nonexistent/sh\n")
    problems, evidence = baked.check_tree(path)
    assert [p.id for p in problems] == ["baked-paths/dead-shebang"]
    assert evidence == [f"{path}: 1 executable/shared files read"]


@pytest.mark.parametrize(("limit", "truncated"), [(2, True), (3, False)])
def test_the_scan_stops_at_the_file_limit(tmp_path, monkeypatch, limit, truncated) -> None:
    assert baked.MAX_FILES == 4000
    for i in range(3):
        _program(tmp_path, f"t{i}", "#!/bin/sh\n")
    monkeypatch.setattr(baked, "MAX_FILES", limit)
    problems, evidence = baked.check_tree(str(tmp_path))
    assert [(p.id, p.text) for p in problems] == (
        [("baked-paths/scan-truncated", f"{tmp_path}: stopped after 2 files")] if truncated else [])
    assert evidence == [f"{tmp_path}: {2 if truncated else 3} executable/shared files read"]


def test_the_check_over_venvs_and_paths(tmp_path) -> None:
    venv = _venv(tmp_path / "v", home="/nonexistent/home")
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "x.pth").write_text("/nonexistent/pth\n")
    tree = tmp_path / "tree"
    _program(tree, "dead", "#!/nonexistent/sh\n")
    result = baked.check(Context(DoctorOptions(venvs=[str(venv), str(tmp_path / "gone")],
                                               paths=[str(tree), str(tmp_path / "nowhere")])))
    assert result.status == "fail"
    assert [f.id.split("/")[1] for f in result.findings] == [
        "venv-home-missing", "pth-path-missing", "venv-missing", "dead-shebang", "path-missing"]
    texts = [f.text for f in result.findings]
    assert texts[2] == f"{tmp_path / 'gone'}: virtual environment does not exist"
    assert texts[4] == f"{tmp_path / 'nowhere'}: does not exist"
    assert result.summary == f"{texts[0]} (+4 more)"
    assert result.evidence[5:] == [f"{venv}: home = /nonexistent/home, 0 script(s) with shebangs checked",
                                   f"{tree}: 1 executable/shared files read"]
    assert result.fix == baked.FIX


@pytest.mark.parametrize(("venvs", "paths", "summary"), [
    pytest.param(1, 0, "1 venv: every baked path exists", id="one-venv"),
    pytest.param(2, 0, "2 venvs: every baked path exists", id="two-venvs"),
    pytest.param(0, 1, "1 path: every baked path exists", id="one-path"),
    pytest.param(1, 2, "1 venv and 2 paths: every baked path exists", id="both"),
])
def test_the_check_all_clean(tmp_path, venvs, paths, summary) -> None:
    v = [str(_venv(tmp_path / f"v{i}")) for i in range(venvs)]
    p = []
    for i in range(paths):
        (tmp_path / f"p{i}").mkdir()
        p.append(str(tmp_path / f"p{i}"))
    result = baked.check(Context(DoctorOptions(venvs=v, paths=p)))
    assert (result.status, result.summary, result.fix) == ("ok", summary, "")


def test_with_nothing_declared_the_doctor_s_own_pth_files(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "absent-site-packages"), str(tmp_path)])
    result = baked.check(Context(DoctorOptions()))
    assert (result.status, result.summary) == ("skip", "no virtual environment active and no --venv/--path given")
    assert result.evidence == [f".pth files checked in {site}"]
    (site / "x.pth").write_text("/nonexistent/own\n")
    result = baked.check(Context(DoctorOptions()))
    assert (result.status, result.summary) == ("fail", f"{site / 'x.pth'}:1: /nonexistent/own does not exist")
    assert result.fix == baked.FIX
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    result = baked.check(Context(DoctorOptions()))
    assert (result.status, result.evidence) == ("skip", [])


def test_given_layers_run_while_the_declaration_s_stay_withheld(monkeypatch, tmp_path) -> None:
    marker = tmp_path / "ran"
    result = _interop(monkeypatch, layers=["env"], withheld_layers=[f"touch {marker}"], untrusted="not trusted")
    assert (result.status, result.summary) == ("ok", "1 layer pass arguments intact")
    assert not marker.exists()
