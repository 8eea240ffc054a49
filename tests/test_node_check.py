"""`execsys doctor --node-check MODE`: the engines' contracts, run as the daemons run them.

Each check is started the way slurmd, NPD or NHC start a program: a near-empty environment (no PATH,
no HOME), the exit code and one stdout line as the whole interface. A failing hazard is planted for
real: a 0-byte ``python3`` first on the inspected PATH (stub-executables fails on it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from execsys.doctor.node_checks import registry
from execsys.doctor.node_checks.check import DEFAULT_PATH, LINE_LIMIT, fit_line
from execsys.doctor.registry import IDS as HAZARD_IDS

CLEAN_PATH = "/usr/bin:/bin"


def daemon_run(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 90
               ) -> subprocess.CompletedProcess[str]:
    """``execsys ARGS`` with the environment a daemon gives its programs: nothing but what is passed."""
    return subprocess.run([sys.executable, "-m", "execsys", *args], capture_output=True, text=True,
                          env=dict(env or {}), cwd=cwd, timeout=timeout)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A directory holding a 0-byte executable ``python3``: an install that died half-way."""
    bad = tmp_path / "plant"
    bad.mkdir()
    stub = bad / "python3"
    stub.write_bytes(b"")
    stub.chmod(0o755)
    return bad


def one_line(stdout: str) -> str:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    assert len(lines[0].strip().encode()) <= LINE_LIMIT, lines[0]
    return lines[0]


def test_the_modes_are_the_contract():
    assert registry.IDS == ("npd", "slurm", "slurm-prolog", "nhc")


@pytest.mark.parametrize("mode", ["npd", "slurm", "nhc", "slurm-prolog"])
def test_a_clean_node_exits_0_with_one_ok_line(mode, tmp_path):
    proc = daemon_run("doctor", "--node-check", mode, "--path", CLEAN_PATH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert one_line(proc.stdout).startswith(f"ok: {len(HAZARD_IDS)} hazards clear on ")


@pytest.mark.parametrize("mode", ["npd", "slurm", "nhc", "slurm-prolog"])
def test_a_failing_hazard_exits_1_naming_it(mode, tmp_path, planted):
    proc = daemon_run("doctor", "--node-check", mode, "--path", f"{planted}:{CLEAN_PATH}", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert one_line(proc.stdout).startswith("fail stub-executables: ")


def test_no_path_from_the_daemon_inspects_the_default_path_and_says_so(tmp_path):
    proc = daemon_run("doctor", "--node-check", "npd", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["environment"]["path"] == DEFAULT_PATH
    assert "default PATH" in body["environment"]["path_source"]
    assert "default PATH" in body["doctor"]["host"]["environment"]
    python3 = [e for r in body["doctor"]["hazards"] if r["id"] == "stub-executables" for e in r["evidence"]]
    assert any("python3" in e for e in python3), python3  # it really looked at python3 on that PATH


def test_the_declared_environment_path_is_inspected(tmp_path, planted):
    (tmp_path / "execsys.toml").write_text(f'[environment]\nvariables = {{ PATH = "{planted}:{CLEAN_PATH}" }}\n')
    proc = daemon_run("doctor", "--node-check", "npd", "--json", cwd=tmp_path)
    body = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert body["environment"]["path_source"] == "the declaration's [environment] variables"
    assert body["line"].startswith("fail stub-executables")


def test_env_from_a_process_inspects_that_process(tmp_path, planted):
    serving = subprocess.Popen(["/bin/sleep", "60"], env={"PATH": f"{planted}:{CLEAN_PATH}"})
    try:
        proc = daemon_run("doctor", "--node-check", "npd", "--env-from", f"pid:{serving.pid}", "--json",
                          cwd=tmp_path)
    finally:
        serving.kill()
        serving.wait(timeout=5)
    body = json.loads(proc.stdout)
    assert proc.returncode == 1, body["line"]
    assert body["environment"]["source"] == f"--env-from pid:{serving.pid}"
    assert body["environment"]["path"] == f"{planted}:{CLEAN_PATH}"


def test_env_from_a_file_and_proc_environ_copies(tmp_path, planted):
    envfile = tmp_path / "engine.env"
    envfile.write_text(f"# the engine's unit\nexport PATH='{planted}:{CLEAN_PATH}'\nLANG=C.UTF-8\n")
    proc = daemon_run("doctor", "--node-check", "npd", "--env-from", str(envfile), cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout.startswith("fail stub-executables")
    environ = tmp_path / "environ"
    environ.write_bytes(f"PATH={CLEAN_PATH}\0LANG=C.UTF-8\0".encode())
    proc = daemon_run("doctor", "--node-check", "npd", "--env-from", str(environ), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("ok: ")


def test_a_node_check_never_starts_an_interactive_shell(tmp_path):
    """A daemon runs no interactive shell, so an alias shadows nothing it starts; and `bash -i` would
    source the rc files (here one that leaves a trace) on every check. The doctor itself still asks."""
    tool = tmp_path / "tools" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho 'mytool 1.0'\n")
    tool.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    sourced = tmp_path / "bashrc-was-sourced"
    (home / ".bashrc").write_text(f"alias mytool='echo not the binary'\ntouch {sourced}\n")
    env = {"HOME": str(home), "SHELL": "/bin/bash", "PATH": f"{tool.parent}:{CLEAN_PATH}"}
    proc = daemon_run("doctor", "--node-check", "npd", "--cmd", "mytool", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    aliasing = next(h for h in json.loads(proc.stdout)["doctor"]["hazards"] if h["id"] == "binary-aliasing")
    assert aliasing["status"] == "ok", aliasing
    assert "shell aliases not checked: a node check runs under a daemon" in "\n".join(aliasing["evidence"])
    assert not sourced.exists()
    # the doctor, from an operator's bash, does ask that shell (and finds the alias)
    doctor = subprocess.run(["bash", "-c", f"{sys.executable} -m execsys doctor --json --only binary-aliasing "
                                           f"--cmd mytool; exit $?"],
                            env={**env, "EXECSYS_LEDGER": str(tmp_path / "ledger.sqlite3")},
                            capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert json.loads(doctor.stdout)["hazards"][0]["summary"] == \
        "mytool: a shell alias shadows the binary in interactive shells"
    assert sourced.exists()

def test_an_empty_path_is_never_ok(tmp_path):
    envfile = tmp_path / "empty.env"
    envfile.write_text("PATH=\nHOME=/root\n")
    for mode, code in (("npd", 2), ("slurm", 2), ("nhc", 2), ("slurm-prolog", 0)):
        proc = daemon_run("doctor", "--node-check", mode, "--env-from", str(envfile), cwd=tmp_path)
        assert proc.returncode == code, (mode, proc.stdout, proc.stderr)
        line = one_line(proc.stdout)
        assert line.startswith("unknown: PATH is empty"), line
    proc = daemon_run("doctor", "--node-check", "npd", "--path", "", cwd=tmp_path)
    assert proc.returncode == 2 and "empty PATH" in proc.stderr
    assert not proc.stdout.startswith("ok")


def test_could_not_check_is_exit_2_but_a_prolog_fails_open_with_a_log_line(tmp_path):
    gone = subprocess.Popen(["/bin/true"])
    gone.wait(timeout=5)
    proc = daemon_run("doctor", "--node-check", "npd", "--env-from", f"pid:{gone.pid}", cwd=tmp_path)
    assert proc.returncode == 2
    assert one_line(proc.stdout).startswith("unknown: cannot read --env-from")
    proc = daemon_run("doctor", "--node-check", "slurm-prolog", "--env-from", f"pid:{gone.pid}", cwd=tmp_path)
    assert proc.returncode == 0
    assert "could not check, letting the job run" in proc.stderr
    # a bad declaration would drain every node through a Prolog: it fails open too
    (tmp_path / "execsys.toml").write_text("[doctor]\nports = ['x']\n")
    proc = daemon_run("doctor", "--node-check", "slurm-prolog", "--path", CLEAN_PATH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ports must be a list" in proc.stderr
    proc = daemon_run("doctor", "--node-check", "npd", "--path", CLEAN_PATH, cwd=tmp_path)
    assert proc.returncode == 2 and "ports must be a list" in proc.stderr


def test_slurm_never_drains_when_it_could_not_check(tmp_path):
    envfile = tmp_path / "empty.env"
    envfile.write_text("PATH=\n")
    proc = daemon_run("doctor", "--node-check", "slurm", "--drain", "--env-from", str(envfile), "--json",
                      cwd=tmp_path, env={"SLURMD_NODENAME": "node-under-test"})
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["drain"] is None


def test_drain_without_slurmd_nodename_says_it_cannot_name_the_node(tmp_path, planted):
    proc = daemon_run("doctor", "--node-check", "slurm", "--drain", "--path", f"{planted}:{CLEAN_PATH}",
                      cwd=tmp_path)
    assert proc.returncode == 1
    assert "SLURMD_NODENAME is not set" in proc.stderr


@pytest.mark.parametrize("args, needle", [
    (["--node-check", "npd", "--drain"], "--drain applies only to --node-check slurm"),
    (["--node-check", "pbs"], "invalid choice"),
    (["--node-check", "slurm", "--timeout", "30"], "must end within"),
    (["--node-check", "npd", "--env-from", "pid:x"], "pid:N needs a process id"),
])
def test_bad_flags_are_one_line_exit_2(args, needle, tmp_path):
    proc = daemon_run("doctor", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_hanging_program_on_path_still_ends_well_inside_60_s(tmp_path):
    hang = tmp_path / "hang"
    hang.mkdir()
    for name in ("python3", "git"):
        script = hang / name
        script.write_text("#!/bin/sh\nexec /bin/sleep 600\n")
        script.chmod(0o755)
    start = time.monotonic()
    proc = daemon_run("doctor", "--node-check", "slurm", "--path", f"{hang}:{CLEAN_PATH}", cwd=tmp_path, timeout=70)
    elapsed = time.monotonic() - start
    assert elapsed < 30, elapsed
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert one_line(proc.stdout).startswith("fail stub-executables")


def test_the_line_fits_the_limit_in_bytes_not_characters():
    line = fit_line("fail clock-skew: " + "é" * 100)
    assert len(line.encode()) <= LINE_LIMIT and line.endswith("...")
    assert fit_line("  ok:\n 9  hazards ") == "ok: 9 hazards"


def test_the_nhc_check_follows_nhcs_die_contract(tmp_path, planted):
    """Source contrib/nhc/execsys.nhc in bash with a `die` of NHC's shape; the check dies on a failing
    hazard with execsys's line and returns 0 on a clean node and when execsys cannot check."""
    nhc = Path(__file__).resolve().parent.parent / "contrib" / "nhc" / "execsys.nhc"
    execsys_bin = Path(sys.executable).with_name("execsys")
    harness = (
        'die() { echo "DIE:$1:$2"; return "$1"; }\n'
        'log() { echo "LOG:$*"; }\n'
        f'source {nhc}\n'
        'check_execsys_doctor "$@"; echo "RC:$?"\n'
    )

    def nhc_run(*args: str, env_extra: dict[str, str] | None = None) -> list[str]:
        env = {"PATH": CLEAN_PATH, "EXECSYS_BIN": str(execsys_bin), **(env_extra or {})}
        proc = subprocess.run(["bash", "-c", harness, "nhc", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=90)
        return proc.stdout.splitlines()

    out = nhc_run("--path", CLEAN_PATH)
    assert out == ["RC:0"], out
    out = nhc_run("--path", f"{planted}:{CLEAN_PATH}")
    assert out[0].startswith("DIE:1:execsys: fail stub-executables: "), out
    assert out[-1] == "RC:1"
    empty = tmp_path / "empty.env"
    empty.write_text("PATH=\n")
    out = nhc_run("--env-from", str(empty))
    assert out[0].startswith("LOG:check_execsys_doctor: could not check (rc 2)"), out
    assert out[-1] == "RC:0"


def test_the_npd_monitor_config_uses_npds_fields():
    """contrib/npd/execsys-monitor.json against node-problem-detector's CustomPluginConfig
    (pkg/custompluginmonitor/types/config.go, types.go): known JSON keys only, Go durations, the
    checks Validate() makes, and a rule that runs this node check."""
    import re

    config = json.loads((Path(__file__).resolve().parent.parent / "contrib" / "npd" / "execsys-monitor.json")
                        .read_text())
    assert set(config) <= {"plugin", "pluginConfig", "source", "conditions", "rules", "metricsReporting"}
    assert config["plugin"] == "custom" and config["source"]
    assert set(config["pluginConfig"]) <= {"invoke_interval", "timeout", "max_output_length", "concurrency",
                                           "enable_message_change_based_condition_update", "skip_initial_status"}
    duration = re.compile(r"^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$")

    def seconds(text: str) -> float:
        assert duration.match(text), text
        units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        return sum(float(n) * units[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(ms|s|m|h)", text))

    global_timeout = seconds(config["pluginConfig"]["timeout"])
    assert config["pluginConfig"]["max_output_length"] == LINE_LIMIT
    conditions = {c["type"] for c in config["conditions"]}
    for condition in config["conditions"]:
        assert set(condition) <= {"type", "status", "transition", "reason", "message"}
    for rule in config["rules"]:
        assert set(rule) <= {"type", "condition", "reason", "path", "args", "timeout", "invoke_interval"}
        assert rule["type"] in ("temporary", "permanent")
        if rule["type"] == "permanent":
            assert rule["condition"] in conditions  # Validate(): a permanent problem needs a default condition
        assert seconds(rule["timeout"]) <= global_timeout  # Validate(): rule timeout <= global timeout
        from execsys.doctor.node_checks.check import BUDGET_S

        assert seconds(rule["timeout"]) > BUDGET_S + 5  # the watchdog answers before NPD kills it
        assert os.path.basename(rule["path"]) == "execsys"
        assert rule["args"][:3] == ["doctor", "--node-check", "npd"]


def test_the_engine_tells_its_face_what_happens(tmp_path, monkeypatch, planted):
    """run_node_check never prints: a face learns the environment and each hazard from typed events."""
    from execsys.doctor.node_checks.check import (
        HazardChecked,
        NodeCheckOptions,
        NodeCheckStarted,
        run_node_check,
    )

    monkeypatch.chdir(tmp_path)
    events: list[object] = []
    options = NodeCheckOptions.from_sources(None, None, mode="slurm", path=f"{planted}:{CLEAN_PATH}")
    report = run_node_check(options, on_event=events.append)
    assert isinstance(events[0], NodeCheckStarted) and "PATH from --path" in events[0].environment
    checked = [e.result.id for e in events if isinstance(e, HazardChecked)]
    assert sorted(checked) == sorted(HAZARD_IDS)
    assert report.exit_code == 1 and report.hazard == "stub-executables" and report.drain is None
    assert os.environ.get("PATH") != f"{planted}:{CLEAN_PATH}"  # this process's environment is restored


def test_pin_task_prolog_prints_only_the_export_lines(tmp_path, cli):
    (tmp_path / "execsys.toml").write_text('[model]\nname = "tiny"\n')
    result = cli("pin", "--task-prolog", "--config", str(tmp_path / "execsys.toml"))
    assert result.returncode == 0, result.stderr
    lock = json.loads((tmp_path / "execsys.lock.json").read_text())
    assert result.stdout.splitlines() == [f"export EXECSYS_IDENTITY={lock['id']}",
                                          f"export EXECSYS_LOCK={tmp_path / 'execsys.lock.json'}"]


def test_the_process_table_read_from_proc_is_what_psutil_reports():
    """A node check reads processes from /proc itself (psutil's import alone is a tenth of its CPU
    budget): name, argv, start time and owner must be psutil's, for every process and for a zombie."""
    psutil = pytest.importorskip("psutil")
    from execsys.doctor import sysinfo

    child = subprocess.Popen([sys.executable, "-c", "pass"])  # never waited for below: a zombie once it exits
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert sysinfo.process(child.pid).error == "no such process"  # psutil raises ZombieProcess there
        compared = 0
        for pid in psutil.pids():
            try:
                p = psutil.Process(pid)
                with p.oneshot():
                    expected = (p.name(), p.cmdline(), p.create_time(), p.username())
            except psutil.Error:
                continue
            info = sysinfo.process(pid)
            if info.error == "no such process":
                continue  # gone in between
            assert (info.name, info.cmdline, info.create_time, info.username) == expected, pid
            compared += 1
        assert compared > 5
        before = set(psutil.pids())
        engines = {p.pid for p in sysinfo.engine_processes()}  # the cheap first look skips no engine
        tokens = tuple(t for ts in sysinfo.ENGINE_TOKENS.values() for t in ts)
        every = {p.pid for p in map(sysinfo.process, psutil.pids()) if p.cmdline and p.matches(tokens)}
        stable = before & set(psutil.pids())  # other work starts and ends processes meanwhile
        assert engines & stable == every & stable
    finally:
        child.wait()


def test_listening_addresses_read_from_proc_are_written_as_inet_ntop_writes_them():
    """port-collisions names each listener by address; /proc/net/tcp6 holds them as hex words, and
    the doctor writes them without socket (a node check never imports it) exactly as inet_ntop does."""
    import random
    import socket

    from execsys.doctor.sysinfo import _hex_to_addr

    def as_proc_writes(packed: bytes) -> str:
        return (packed[::-1] if len(packed) == 4 else b"".join(packed[i:i + 4][::-1] for i in range(0, 16, 4))).hex()

    for address in ("127.0.0.1", "0.0.0.0", "10.1.2.3", "255.255.255.255"):
        assert _hex_to_addr(as_proc_writes(socket.inet_pton(socket.AF_INET, address)), "IPv4") == address
    chosen = random.Random(7)
    six = ["::", "::1", "::ffff:127.0.0.1", "::ffff:0.0.0.0", "::1.2.3.4", "::0.1.0.0", "fe80::1", "1::", "1:0:0:1::1",
           "2001:db8::8a2e:370:7334", "::2:0:0", *(socket.inet_ntop(socket.AF_INET6, chosen.randbytes(16))
                                                  for _ in range(500))]
    for address in six:
        packed = socket.inet_pton(socket.AF_INET6, address)
        assert _hex_to_addr(as_proc_writes(packed), "IPv6") == socket.inet_ntop(socket.AF_INET6, packed), address
