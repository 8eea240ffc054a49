"""The hazards' thresholds and small decisions as tables: the inter-host clock skew against its
threshold with the RTT bound (fail only when even the best case is over, warn when the bound
straddles it, nothing at the threshold itself), the clocksource rules, the threshold's default and
validation, the stub signatures (only with a failing exit), the interop argument diff, env-file
parsing, and the env file newer than the serving process by more than the one-second slack.

Times are binary fractions of a second (0.125 s = 125 ms exactly), so the "at the threshold" row is
exact. The clocksource is read from a temp directory standing in for sysfs; the adjtimex reading is
given as the dict ``kernel_sync`` returns.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types

import pytest
from execsys.doctor.context import DEFAULT_CLOCK_SKEW_THRESHOLD_MS, DoctorOptions
from execsys.doctor.hazards import clock_skew, interop_mangling, stub_executables, unread_env_config
from execsys.doctor.hazards.unread_env_config import START_TIME_SLACK_S, parse_env_file
from execsys.doctor.model import HazardResult
from execsys.doctor.remote import ClockSample, apply_skew
from execsys.doctor.runner import run_hazard

from execsys.errors import InputError

# -- inter-host skew ------------------------------------------------------------------------------------

BOUND = 0.0078125  # 7.8125 ms


@pytest.mark.parametrize(("offset_s", "bound_s", "threshold_ms", "status", "finding"), [
    pytest.param(0.125, 0.0, 125.0, "ok", None, id="at-the-threshold-no-bound-is-not-over"),
    pytest.param(0.125, 0.0, 124.9, "fail", "inter-host-skew", id="just-over-fails"),
    pytest.param(0.125, 0.0, 125.1, "ok", None, id="just-under-ok"),
    pytest.param(-0.125, 0.0, 124.9, "fail", "inter-host-skew", id="behind-counts-as-much-as-ahead"),
    pytest.param(0.125, BOUND, 117.1875, "warn", "inter-host-skew-uncertain", id="best-case-at-threshold-warns"),
    pytest.param(0.125, BOUND, 117.1, "fail", "inter-host-skew", id="best-case-over-fails"),
    pytest.param(0.125, BOUND, 132.8125, "ok", None, id="worst-case-at-threshold-ok"),
    pytest.param(0.125, BOUND, 132.7, "warn", "inter-host-skew-uncertain", id="worst-case-just-over-warns"),
    pytest.param(0.125, BOUND, 132.9, "ok", None, id="worst-case-under-ok"),
    pytest.param(-0.125, BOUND, 125.0, "warn", "inter-host-skew-uncertain", id="behind-with-bound-straddling"),
    pytest.param(0.0, 0.0, 0.001, "ok", None, id="no-skew"),
])
def test_skew_between_machines(offset_s, bound_s, threshold_ms, status, finding) -> None:
    result = HazardResult("clock-skew", "ok", "kernel clock synchronised")
    apply_skew(result, ClockSample(offset_s, bound_s, bound_s * 2, 5), threshold_ms)
    assert result.status == status
    assert [f.id for f in result.findings] == ([f"clock-skew/{finding}"] if finding else [])
    assert result.evidence[0].startswith(f"clock vs local: {offset_s * 1000:+.1f} ms")
    if finding is None:
        assert result.summary.startswith("skew ")


@pytest.mark.parametrize(("local_status", "skew_s", "status"), [
    pytest.param("warn", 0.5, "fail", id="a-skew-fail-over-a-local-warning"),
    pytest.param("warn", 0.0, "warn", id="no-skew-keeps-the-local-warning"),
])
def test_skew_refolds_with_the_local_findings(local_status, skew_s, status) -> None:
    from execsys.doctor.model import Finding

    local = Finding("warn", "kernel clock is not synchronised", "clock-skew/kernel-clock-unsynchronised")
    result = HazardResult("clock-skew", local_status, local.text, findings=[local])
    apply_skew(result, ClockSample(skew_s, 0.0, 0.0, 1), 250.0)
    assert result.status == status


@pytest.mark.parametrize(("accept", "status"), [
    pytest.param((), "fail", id="not-accepted"),
    pytest.param(("clock-skew/inter-host-skew",), "ok", id="accepted-does-not-decide"),
    pytest.param(("clock-skew/inter-host-skew-uncertain",), "fail", id="another-id-accepted"),
])
def test_an_accepted_skew(accept, status) -> None:
    result = HazardResult("clock-skew", "ok", "kernel clock synchronised")
    apply_skew(result, ClockSample(1.0, 0.0, 0.0, 1), 250.0, accept)
    assert result.status == status
    assert result.findings[0].accepted is bool(accept and accept[0] == "clock-skew/inter-host-skew")


@pytest.mark.parametrize(("value", "ok"), [
    pytest.param(None, True, id="default"), pytest.param(0.001, True, id="just-above-0"),
    pytest.param(0.0, False, id="0-refused"), pytest.param(-5.0, False, id="negative-refused"),
])
def test_skew_threshold_validation(value, ok) -> None:
    assert DEFAULT_CLOCK_SKEW_THRESHOLD_MS == 250.0
    if ok:
        opts = DoctorOptions.from_sources(None, None, clock_skew_threshold_ms=value)
        assert opts.clock_skew_threshold_ms == (value if value is not None else 250.0)
    else:
        with pytest.raises(InputError, match="clock skew threshold"):
            DoctorOptions.from_sources(None, None, clock_skew_threshold_ms=value)


# -- the local clock ------------------------------------------------------------------------------------

SYNCED = {"state": 0, "unsynchronised": False, "maxerror_us": 1000, "esterror_us": 100, "offset_us": 5.0}


@pytest.mark.parametrize(("sync", "current", "available", "status", "findings"), [
    pytest.param(SYNCED, "tsc", "tsc hpet acpi_pm", "ok", [], id="synced-on-tsc"),
    pytest.param(SYNCED, "kvm-clock", "kvm-clock tsc hpet", "ok", [], id="kvm-clock-is-fine"),
    pytest.param(dict(SYNCED, unsynchronised=True), "tsc", "tsc", "warn", ["kernel-clock-unsynchronised"],
                 id="unsynchronised"),
    pytest.param(SYNCED, "hpet", "hpet acpi_pm", "warn", ["tsc-unstable"], id="hpet-without-tsc-is-unstable-tsc"),
    pytest.param(SYNCED, "acpi_pm", "acpi_pm tsc", "warn", ["slow-clocksource"], id="acpi-pm-although-tsc"),
    pytest.param(SYNCED, "jiffies", "jiffies", "warn", ["tsc-unstable"], id="jiffies"),
    pytest.param(SYNCED, "xen", "xen", "ok", [], id="xen-is-not-a-slow-source"),
    pytest.param(dict(SYNCED, unsynchronised=True), "hpet", "hpet tsc", "warn",
                 ["kernel-clock-unsynchronised", "slow-clocksource"], id="both"),
    pytest.param(None, None, None, "ok", [], id="nothing-readable"),
    pytest.param({"error": "Operation not permitted"}, "tsc", "tsc", "ok", [], id="adjtimex-failed-is-evidence"),
])
def test_local_clock(tmp_path, monkeypatch, sync, current, available, status, findings) -> None:
    source = tmp_path / "clocksource0"
    source.mkdir()
    if current is not None:
        (source / "current_clocksource").write_text(current + "\n")
        (source / "available_clocksource").write_text(available + "\n")
    monkeypatch.setattr(clock_skew, "CLOCKSOURCE", str(source))
    monkeypatch.setattr(clock_skew, "kernel_sync", lambda: sync)
    monkeypatch.setattr(clock_skew.sysinfo, "virtualization", lambda: [])
    result = clock_skew.check(types.SimpleNamespace(accept=()))
    assert result.status == status
    assert [f.id.split("/", 1)[1] for f in result.findings] == findings


# -- stubs, interop, env files ------------------------------------------------------------------------

WINDOWS = "Python was not found; run without arguments to install from the Microsoft Store"


@pytest.mark.parametrize(("output", "returncode", "kind"), [
    pytest.param(WINDOWS, 9009, "windows-app-alias", id="windows-alias"),
    pytest.param(WINDOWS, 0, None, id="a-signature-with-exit-0-is-a-working-program"),
    pytest.param(WINDOWS, None, None, id="no-exit-code-no-stub"),
    pytest.param("pyenv: python3.12: command not found", 127, "shim-uninstalled", id="pyenv-not-selected"),
    pytest.param("pyenv: version `3.9.1' is not installed", 1, "shim-uninstalled", id="pyenv-not-installed"),
    pytest.param("No preset version installed for command python", 126, "shim-uninstalled", id="asdf-no-preset"),
    pytest.param("No version is set for command python", 126, "shim-uninstalled", id="asdf-no-version"),
    pytest.param("Traceback: ImportError", 1, None, id="an-ordinary-failure-is-no-stub"),
])
def test_stub_signature(output, returncode, kind) -> None:
    found = stub_executables.stub_signature(output, returncode)
    assert (found.kind if found else None) == kind


@pytest.mark.parametrize(("sent", "received", "diffs"), [
    pytest.param(["a", "b"], ["a", "b"], [], id="same"),
    pytest.param(["a b"], ["a", "b"], ['sent 1 arguments, received 2', 'arg 0: sent "a b" received "a"'],
                 id="re-split"),
    pytest.param(["a", "$HOME"], ["a"], ['sent 2 arguments, received 1', 'arg 1: sent "$HOME" received (missing)'],
                 id="dropped"),
    pytest.param(["*"], ["x.txt"], ['arg 0: sent "*" received "x.txt"'], id="globbed"),
])
def test_interop_compare(sent, received, diffs) -> None:
    assert interop_mangling.compare(sent, received) == diffs


@pytest.mark.parametrize(("line", "parsed"), [
    pytest.param("A=1", {"A": "1"}, id="plain"),
    pytest.param("export A=1", {"A": "1"}, id="export"),
    pytest.param('A="x y"', {"A": "x y"}, id="double-quoted"),
    pytest.param("A='x'", {"A": "x"}, id="single-quoted"),
    pytest.param('A="x\'', {"A": '"x\''}, id="mismatched-quotes-kept"),
    pytest.param('A="', {"A": '"'}, id="a-lone-quote-kept"),
    pytest.param('A=""', {"A": ""}, id="empty-quotes"),
    pytest.param("A = 1 ", {"A": "1"}, id="spaces-stripped"),
    pytest.param("A=b=c", {"A": "b=c"}, id="first-equals-splits"),
    pytest.param("# A=1", {}, id="hash-comment"),
    pytest.param("; A=1", {}, id="semicolon-comment"),
    pytest.param("no equals sign", {}, id="not-an-assignment"),
])
def test_parse_env_file(tmp_path, line, parsed) -> None:
    path = tmp_path / "env"
    path.write_text(line + "\n")
    assert parse_env_file(str(path)) == parsed


@pytest.mark.parametrize(("seconds_ago", "text"), [
    (5, "5s ago"), (119, "119s ago"), (121, "2min ago"), (7100, "118min ago"), (7300, "2.0h ago")])
def test_ago(seconds_ago, text) -> None:
    assert unread_env_config._ago(time.time() - seconds_ago) == text


@pytest.fixture(scope="module")
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={"A": "1", "PATH": "/bin"})
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(("after_start_s", "warned"), [
    pytest.param(START_TIME_SLACK_S - 0.25, False, id="within-the-slack"),
    pytest.param(START_TIME_SLACK_S + 0.25, True, id="beyond-the-slack"),
    pytest.param(-60.0, False, id="older-than-the-process"),
])
def test_env_file_newer_than_the_process(tmp_path, sleeper, after_start_s, warned) -> None:
    import psutil

    assert START_TIME_SLACK_S == 1.0
    env_file = tmp_path / "serving.env"
    env_file.write_text("A=1\n")
    started = psutil.Process(sleeper.pid).create_time()
    os.utime(env_file, (started + after_start_s, started + after_start_s))
    result = run_hazard("unread-env-config", DoctorOptions.from_sources(None, None, pid=sleeper.pid,
                                                                        env_file=str(env_file)))
    ids = [f.id for f in result.findings]
    assert ("unread-env-config/env-file-newer-than-process" in ids) is warned
    assert result.status == ("warn" if warned else "ok")
