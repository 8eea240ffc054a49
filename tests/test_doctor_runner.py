"""The runner's promises: concurrent, fenced checks; a broken or hanging check never breaks the report."""

from __future__ import annotations

import threading
import time
import types

import pytest
from execsys.doctor import registry
from execsys.doctor.model import DoctorReport, HazardResult
from execsys.doctor.runner import (
    DoctorOptions,
    DoctorStarted,
    HazardChecked,
    HostFinished,
    hazard_deadline,
    run_doctor,
    run_hazard,
)


def hazards_seen(seen: list):
    """A callback collecting (host, hazard id) from the HazardChecked events."""
    def on_event(event) -> None:
        if isinstance(event, HazardChecked):
            seen.append((event.host, event.result.id))
    return on_event


def test_run_doctor_streams_every_result_and_keeps_registry_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    events: list = []
    report = run_doctor(DoctorOptions(), on_event=events.append)
    assert isinstance(report, DoctorReport)
    assert events[0] == DoctorStarted(("local",), tuple(registry.IDS))
    checked = [e for e in events if isinstance(e, HazardChecked)]
    assert sorted(f"{e.host}:{e.result.id}" for e in checked) == sorted(f"local:{h.id}" for h in registry.HAZARDS)
    assert events[-1] == HostFinished("local", report.local)  # after every hazard of the host
    assert len(events) == len(registry.HAZARDS) + 2
    assert [r.id for r in report.local.hazards] == list(registry.IDS)
    assert report.verdict in ("clean", "hazards")
    assert report.to_json()["schema"] == "execsys.doctor/1"


def test_an_exception_in_a_check_becomes_status_error(monkeypatch):
    def boom(ctx):
        raise RuntimeError("disk on fire")

    real_load = registry.load
    monkeypatch.setattr(registry, "load", lambda hid: types.SimpleNamespace(check=boom)
                        if hid == "clock-skew" else real_load(hid))
    report = run_doctor(DoctorOptions(only=["clock-skew", "interop-mangling"]))
    broken = report.local.result("clock-skew")
    assert broken.status == "error" and "RuntimeError: disk on fire" in broken.summary
    assert report.local.result("interop-mangling").status == "skip"
    assert report.exit_code == 1  # a check that could not look is not a clean bill


def test_a_check_that_hangs_is_abandoned_at_its_deadline(monkeypatch):
    release = threading.Event()

    def hang(ctx):
        release.wait(60)
        return HazardResult("clock-skew", "ok", "late")

    real_load = registry.load
    monkeypatch.setattr(registry, "load", lambda hid: types.SimpleNamespace(check=hang)
                        if hid == "clock-skew" else real_load(hid))
    start = time.monotonic()
    report = run_doctor(DoctorOptions(only=["clock-skew"], timeout=0.5))
    release.set()
    assert report.local.result("clock-skew").status == "error"
    assert "did not finish" in report.local.result("clock-skew").summary
    assert time.monotonic() - start < 30


def test_cancel_stops_waiting_for_a_hanging_check(monkeypatch):
    """A check that hangs is abandoned as soon as the caller cancels (Esc in the TUI), long before its
    deadline, and reported as a cancelled error -- never as ok."""
    release = threading.Event()

    def hang(ctx):
        release.wait(60)
        return HazardResult("clock-skew", "ok", "late")

    real_load = registry.load
    monkeypatch.setattr(registry, "load", lambda hid: types.SimpleNamespace(check=hang)
                        if hid == "clock-skew" else real_load(hid))
    options = DoctorOptions(only=["clock-skew", "interop-mangling"], layers=["env"], timeout=10)
    assert hazard_deadline(options) >= 20  # so finishing within the bound below is the cancel, not the deadline
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    try:
        report = run_doctor(options, cancel=cancel)
    finally:
        release.set()
    took = time.monotonic() - start
    assert took < 10, f"the doctor kept waiting {took:.1f}s after cancel"
    hung = report.local.result("clock-skew")
    assert hung.status == "error" and "cancelled" in hung.summary
    assert report.verdict == "hazards" and report.exit_code == 1


def test_unknown_only_id_and_run_hazard():
    with pytest.raises(KeyError):
        run_doctor(DoctorOptions(only=["nope"]))
    result = run_hazard("interop-mangling", DoctorOptions(layers=["env"]))
    assert result.status == "ok" and result.duration_s > 0


def test_options_from_sources(tmp_path):
    from execsys import declaration

    decl = declaration.parse(
        '[runtime]\nengine = "vllm"\nendpoint = "http://127.0.0.1:8011/v1"\nenv_file = "engine.env"\n'
        '[environment]\nvariables = { CUDA_VISIBLE_DEVICES = "0" }\nlayers = ["ssh gpu1"]\n'
        '[artifact]\npath = "models/m.gguf"\n[doctor]\ntimeout = 7\nclock_skew_threshold_ms = 100\n',
        tmp_path / "execsys.toml")
    opts = DoctorOptions.from_sources(decl, None, layers=["env"])
    assert opts.ports == [8011] and opts.endpoint_port == 8011 and opts.engine == "vllm"
    assert opts.env_file == str(tmp_path / "engine.env")
    assert opts.artifact_path == str(tmp_path / "models" / "m.gguf")
    assert opts.declared_env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert opts.layers == ["env"]  # the override wins
    assert opts.timeout == 7 and opts.clock_skew_threshold_ms == 100
    assert DoctorOptions.from_payload(opts.to_payload()) == opts


def test_partial_sight_as_an_unprivileged_user_is_a_warning_not_ok(tmp_path):
    """Run the real checks as 'nobody' (the in-memory bundle needs no files): root's listener and
    root's process environment are invisible, and the doctor must say so rather than claim ok."""
    import json
    import os
    import shutil
    import socket
    import subprocess
    import sys

    from execsys.doctor import remote

    if os.geteuid() != 0 or shutil.which("runuser") is None or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, runuser and /usr/bin/python3 to drop privileges")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={"A": "1"})
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        options = DoctorOptions(ports=[port], pid=holder.pid, declared_env={"A": "1"},
                                only=["port-collisions", "unread-env-config"])
        try:
            proc = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-u", "-c", remote.BOOTSTRAP],
                                  input=remote.program_line(options) + b"T\n" * 5 + b"GO\n",
                                  capture_output=True, timeout=60, cwd="/")
        finally:
            holder.kill()
            holder.wait()
    assert proc.returncode == 0, proc.stderr.decode()
    results = {r["id"]: r for r in (json.loads(line[2:]) for line in proc.stdout.decode().splitlines()
                                    if line.startswith("R "))}
    ports = results["port-collisions"]
    assert ports["status"] == "warn"
    assert "whose process is not visible" in ports["summary"]
    env = results["unread-env-config"]
    assert env["status"] == "warn" and "cannot read the environment" in env["summary"]


def test_a_venv_on_top_of_conda_warns(monkeypatch):
    from execsys.doctor.runner import run_hazard

    monkeypatch.setenv("CONDA_PREFIX", "/opt/conda")
    monkeypatch.setenv("VIRTUAL_ENV", "/srv/venv")
    result = run_hazard("package-prefixes", DoctorOptions(timeout=10))
    assert result.status in ("warn", "fail")
    assert "a venv (/srv/venv) is active on top of conda (/opt/conda): two package worlds" in result.evidence


def test_include_local_false_checks_only_the_remote_host(ssh_config_env):
    """The TUI's "re-run this hazard on that remote column": the remote host is checked, this machine is not."""
    dest = ssh_config_env.dest
    seen: list[tuple[str, str]] = []
    options = DoctorOptions(hosts=[dest], only=["port-collisions"])
    events: list = []
    report = run_doctor(options, lambda e: (events.append(e), hazards_seen(seen)(e)), include_local=False)
    assert seen == [(dest, "port-collisions")]
    assert [h.name for h in report.hosts] == [dest]
    assert events[0] == DoctorStarted((dest,), ("port-collisions",))
    assert events[-1] == HostFinished(dest, report.hosts[0])
    assert [r.id for r in report.hosts[0].hazards] == ["port-collisions"]
    assert report.to_json()["host"]["name"] == dest  # the stored report says which host it speaks for
    # the default (the CLI's behaviour) still checks this machine first
    seen.clear()
    report = run_doctor(options, hazards_seen(seen))
    assert sorted(seen) == sorted([("local", "port-collisions"), (dest, "port-collisions")])
    assert [h.name for h in report.hosts] == ["local", dest]


def test_include_local_false_without_a_remote_host_is_refused():
    with pytest.raises(ValueError, match="remote host"):
        run_doctor(DoctorOptions(), include_local=False)
