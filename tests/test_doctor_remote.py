"""``execsys doctor --host`` against a real sshd on 127.0.0.1: two hosts, an unreachable one, clock skew.

The remote side gets the doctor over stdin (no execsys installed there is needed) and must leave
nothing behind; a host whose clock libfaketime sets 5 s ahead must fail clock-skew while the
loopback host (skew ~0, bounded by RTT/2) passes it.
"""

from __future__ import annotations

import os
import threading
import time

from execsys.doctor import remote
from execsys.doctor.runner import DoctorOptions, HazardChecked, HostFinished, HostUnreachable, run_doctor

HAZARD_IDS = ["binary-aliasing", "interop-mangling", "stub-executables", "unread-env-config", "baked-paths",
              "package-prefixes", "lost-mode-bits", "port-collisions", "clock-skew", "model-name-honesty"]


def test_remote_doctor_end_to_end_with_an_unreachable_host(cli, ssh_config_env, tmp_path):
    result = cli("doctor", "--json", "--host", ssh_config_env.dest, "--host", ssh_config_env.unreachable_dest,
                 cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    report = result.json()
    hosts = report["hosts"]
    assert [h["host"]["name"] for h in hosts] == ["local", ssh_config_env.dest, ssh_config_env.unreachable_dest]
    assert report["hazards"] == hosts[0]["hazards"]  # top level is the local host
    reachable, dead = hosts[1], hosts[2]
    assert [h["id"] for h in reachable["hazards"]] == HAZARD_IDS
    assert reachable["host"]["hostname"] and reachable["host"]["kernel"]
    assert not [h for h in reachable["hazards"] if h["status"] == "error"], reachable["hazards"]
    skew = next(h for h in reachable["hazards"] if h["id"] == "clock-skew")
    assert skew["status"] in ("ok", "warn") and "vs local" in skew["summary"]
    assert abs(reachable["host"]["clock_offset_ms"]) <= 250
    assert [h["status"] for h in dead["hazards"]] == ["error"] * len(HAZARD_IDS)
    assert "Connection refused" in dead["host"]["error"] and dead["verdict"] == "hazards"
    assert report["verdict"] == "hazards"


def test_remote_hazard_found_over_ssh_and_nothing_left_behind(ssh_config_env, tmp_path):
    zero = tmp_path / "zero-byte-engine"
    zero.write_bytes(b"")
    zero.chmod(0o755)
    home = os.path.expanduser("~")  # the remote user's home: the loopback host is this machine
    before, home_before = set(os.listdir("/tmp")), set(os.listdir(home))
    live: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def on_event(event):
        if isinstance(event, HazardChecked):
            with lock:
                live.append((event.host, event.result.id, event.result.status))

    options = DoctorOptions(hosts=[ssh_config_env.dest], commands=[str(zero)], only=["stub-executables",
                                                                                    "clock-skew"])
    report = run_doctor(options, on_event)
    far = report.hosts[1]
    assert far.error is None
    assert far.result("stub-executables").status == "fail"
    assert "0-byte file" in "\n".join(far.result("stub-executables").evidence)
    assert sorted((h, i) for h, i, _ in live) == sorted([("local", "stub-executables"), ("local", "clock-skew"),
                                                         (ssh_config_env.dest, "stub-executables"),
                                                         (ssh_config_env.dest, "clock-skew")])
    assert report.exit_code == 1
    # Other test sessions may share /tmp: only names the doctor could have written count there.
    leftovers = {n for n in set(os.listdir("/tmp")) - before if "doctor" in n or n.endswith((".py", ".pyc"))}
    assert not leftovers
    assert set(os.listdir(home)) - home_before == set()


def test_remote_clock_set_ahead_fails_clock_skew(ssh_config_env):
    import pytest

    if ssh_config_env.skewed_dest is None:
        pytest.skip("libfaketime not installed")
    options = DoctorOptions(hosts=[ssh_config_env.skewed_dest, ssh_config_env.dest], only=["clock-skew"])
    report = run_doctor(options)
    skewed, fine = report.hosts[1], report.hosts[2]
    result = skewed.result("clock-skew")
    assert result.status == "fail"
    assert "ms off the local clock" in result.summary and "over 250 ms" in result.summary
    assert 4500 < skewed.host["clock_offset_ms"] < 5500
    assert skewed.host["clock_bound_ms"] < 500
    assert fine.result("clock-skew").status in ("ok", "warn")
    # a threshold above the skew passes it
    relaxed = run_doctor(DoctorOptions(hosts=[ssh_config_env.skewed_dest], only=["clock-skew"],
                                       clock_skew_threshold_ms=10_000))
    assert relaxed.hosts[1].result("clock-skew").status in ("ok", "warn")


def test_remote_program_crosses_the_shell_only_as_a_fixed_bootstrap():
    line = remote.program_line(DoctorOptions(commands=["a b; rm -rf /"]))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b"rm -rf" not in line  # the payload travels compressed inside the stdin line
    assert remote.BOOTSTRAP == "import sys;exec(sys.stdin.readline())"


def test_unreachable_host_does_not_delay_the_others(ssh_config_env):
    start = time.monotonic()
    events: list = []
    report = run_doctor(DoctorOptions(hosts=[ssh_config_env.unreachable_dest, ssh_config_env.dest],
                                      only=["clock-skew"]), events.append)
    assert report.hosts[1].error and not report.hosts[2].error
    assert time.monotonic() - start < 30
    # each host ends with exactly one event saying how it went; the dead one's error rows came first
    ends = {e.host: e for e in events if isinstance(e, (HostFinished, HostUnreachable))}
    assert len(ends) == len([e for e in events if isinstance(e, (HostFinished, HostUnreachable))]) == 3
    dead = ends[ssh_config_env.unreachable_dest]
    assert isinstance(dead, HostUnreachable) and dead.reason == report.hosts[1].error
    assert isinstance(ends[ssh_config_env.dest], HostFinished) and isinstance(ends["local"], HostFinished)
    rows = [e for e in events if isinstance(e, HazardChecked) and e.host == ssh_config_env.unreachable_dest]
    assert [(r.result.id, r.result.status) for r in rows] == [("clock-skew", "error")]
    assert rows[0].result.findings[0].id == "clock-skew/host-not-inspected"
    assert events.index(rows[0]) < events.index(dead)


def _old_python(version: str) -> str | None:
    import shutil

    path = os.path.expanduser(f"~/.pyenv/versions/{version}/bin/python3")
    return path if os.path.exists(path) else shutil.which(f"python{version.rsplit('.', 1)[0]}")


def _run_agent(python: str, options: DoctorOptions):
    import subprocess

    stdin = remote.program_line(options) + b"T\n" * remote.CLOCK_SAMPLES + b"GO\n"
    return subprocess.run([python, "-u", "-c", remote.BOOTSTRAP], input=stdin, capture_output=True, timeout=120)


def test_the_remote_program_runs_on_python_3_9():
    import json

    import pytest

    python = _old_python("3.9.18")
    if python is None:
        pytest.skip("no python 3.9 here to stand in for an old remote")
    proc = _run_agent(python, DoctorOptions(layers=None))
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines[:5]] == ["T"] * 5 and lines[-1] == "END"
    results = [json.loads(line[2:]) for line in lines if line.startswith("R ")]
    assert sorted(r["id"] for r in results) == sorted(HAZARD_IDS)
    assert not [r for r in results if r["status"] == "error"], results
    assert json.loads(next(line[2:] for line in lines if line.startswith("H ")))["python"].startswith("3.9")


def test_a_too_old_remote_python_is_named():
    import pytest

    python = _old_python("3.6.15")
    if python is None:
        pytest.skip("no python 3.6 here to stand in for a too-old remote")
    proc = _run_agent(python, DoctorOptions())
    assert proc.returncode == 3
    assert "execsys doctor needs python3 >= 3.9 on the remote, found 3.6" in proc.stderr.decode()


def test_refused_key_and_missing_python3_are_reported_per_host(ssh_config_env):
    report = run_doctor(DoctorOptions(hosts=[ssh_config_env.badkey_dest, ssh_config_env.nopython_dest,
                                             ssh_config_env.dest], only=["clock-skew"]))
    refused, nopython, fine = report.hosts[1:]
    assert "Permission denied" in refused.error and refused.result("clock-skew").status == "error"
    assert "remote has no usable python3" in nopython.error
    assert fine.error is None and fine.result("clock-skew").status in ("ok", "warn")
    assert report.exit_code == 1


def test_human_output_has_one_section_per_host(cli, ssh_config_env, tmp_path):
    result = cli("doctor", "--only", "clock-skew", "--host", ssh_config_env.dest, "--host",
                 ssh_config_env.unreachable_dest, cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    headings = [line for line in lines if not line.startswith(("[", " ")) and line.strip()]
    assert headings[0].startswith("local: ")
    assert headings[1].startswith(f"{ssh_config_env.dest}: ")
    assert headings[2].startswith(f"{ssh_config_env.unreachable_dest}: ") and "not inspected" in headings[2]
    assert lines[-1].startswith("Doctor summary: ") and "1 error" in lines[-1]
