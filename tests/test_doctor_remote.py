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
from execsys.doctor.runner import DoctorOptions, run_doctor

HAZARD_IDS = ["binary-aliasing", "interop-mangling", "stub-executables", "unread-env-config", "baked-paths",
              "package-prefixes", "lost-mode-bits", "port-collisions", "clock-skew"]


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
    assert [h["status"] for h in dead["hazards"]] == ["error"] * 9
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

    def on_result(host, result):
        with lock:
            live.append((host, result.id, result.status))

    options = DoctorOptions(hosts=[ssh_config_env.dest], commands=[str(zero)], only=["stub-executables",
                                                                                    "clock-skew"])
    report = run_doctor(options, on_result=on_result)
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
    report = run_doctor(DoctorOptions(hosts=[ssh_config_env.unreachable_dest, ssh_config_env.dest],
                                      only=["clock-skew"]))
    assert report.hosts[1].error and not report.hosts[2].error
    assert time.monotonic() - start < 30
