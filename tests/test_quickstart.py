"""QUICKSTART.md, executed: every command of its ``bash`` blocks, in order, verbatim, in a fresh directory.

The quickstart is the one page a newcomer follows word for word, so it is tested the same way: its
``bash`` blocks are split into commands (a trailing ``\\`` continues a line; ``# exit N`` at the end
of a line is the exit code the page promises, 0 otherwise) and each runs in ``bash`` with the
working directory and exported variables the commands before it left, as in one terminal. The
``sh`` block (the one-time installs) is not run: the suite's own venv and the harness venv have
those packages.

The page is written for a box of one's own (port 8000, the only llama.cpp server there), so the
commands run in fresh network and PID namespaces (``unshare``, as root): no other server of this
machine is listening there or visible in /proc, and everything the commands start ends with them.
Where ``unshare`` is refused, they run here with the port moved to a free one instead, unless
another serving engine listens on this machine (then ``init`` would declare that one: skipped).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.common import run_cli

pytest_plugins = ["tests.fixtures.harness"]

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "QUICKSTART.md"
EXIT = re.compile(r"\s#\s*exit (\d+)\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Command:
    line: str
    exit: int


def quickstart_commands(text: str) -> list[Command]:
    """The commands of the ``bash`` blocks, continuation lines joined, each with its promised exit code."""
    commands: list[Command] = []
    language: str | None = None
    pending = ""
    for raw in text.splitlines():
        fence = FENCE.match(raw.strip())
        if fence:
            assert not pending, f"a bash block ends inside a continued line: {pending!r}"
            language = fence.group(1) if language is None else None
            continue
        if language != "bash":
            continue
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if not line or line.startswith("#"):
            continue
        promised = EXIT.search(line)
        commands.append(Command(line, int(promised.group(1)) if promised else 0))
    return commands


def test_the_quickstart_walks_the_whole_procedure_in_order():
    """The page names every step the issue asks for, in the order of the procedure."""
    commands = [c.line for c in quickstart_commands(QUICKSTART.read_text())]
    steps = ["python3 make_tiny_model.py", "bash llama-server.sh start", "execsys doctor", "execsys init",
             "execsys pin", "execsys probe session", "execsys probe restart", "execsys scope",
             "execsys run -- lm_eval", "execsys verify", "bash llama-server.sh stop"]
    found = {step: next((i for i, line in enumerate(commands) if line.startswith(step)), -1) for step in steps}
    assert -1 not in found.values(), found
    assert list(found.values()) == sorted(found.values()), found
    # every file the page copies is shipped
    copied = next(line for line in commands if line.startswith("cp "))
    for word in shlex.split(copied)[2:-1]:
        assert (REPO / word).exists(), word


def test_blocks_split_into_commands_with_their_promised_exit_codes():
    text = "```sh\nnot run\n```\n```bash\n# a comment\necho a \\\n  b\nfalse   # exit 1\n```\n"
    assert quickstart_commands(text) == [Command("echo a b", 0), Command("false   # exit 1", 1)]


def test_the_example_model_is_the_suites_tiny_model(tmp_path):
    """examples/make_tiny_model.py and the suite's fixture write the same bytes: the quickstart's
    identity is the one the suite's tests pin."""
    pytest.importorskip("gguf")
    from tests.fixtures.llama import make_tiny_gguf

    made = subprocess.run([sys.executable, str(REPO / "examples" / "make_tiny_model.py"),
                           str(tmp_path / "models" / "tiny.gguf")], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "models" / "tiny.gguf").read_bytes() == make_tiny_gguf(tmp_path / "fixture.gguf").read_bytes()


# -- the driver: runs inside the namespaces -------------------------------------------------------

def _loopback_up() -> None:
    """A new network namespace has its loopback down: bring it up (SIOCGIFFLAGS/SIOCSIFFLAGS)."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sH", fcntl.ioctl(sock, 0x8913, struct.pack("16sH", b"lo", 0))[:18])[1]
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", flags | 1))


def drive(spec_path: Path) -> None:
    """Run the spec's commands one by one as one terminal would; write what each did to spec["out"]."""
    spec = json.loads(spec_path.read_text())
    if spec["isolated"]:
        _loopback_up()
    state = Path(spec["state"])
    state.mkdir(parents=True, exist_ok=True)
    cwd_file, env_file = state / "cwd", state / "env.sh"
    cwd_file.write_text(spec["cwd"])
    env_file.write_text("")
    results = []
    for command in spec["commands"]:
        # the command runs as typed; before it, the directory and exports the last one left; after it,
        # what it left is saved for the next (bash's own `export -p`, so any value round-trips)
        script = (f'cd "$(cat {shlex.quote(str(cwd_file))})" && . {shlex.quote(str(env_file))}\n'
                  f"{command['line']}\n"
                  "__rc=$?\n"
                  f"pwd > {shlex.quote(str(cwd_file))}; export -p > {shlex.quote(str(env_file))}\n"
                  "exit $__rc\n")
        started = time.monotonic()
        proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=spec["env"],
                              stdin=subprocess.DEVNULL, timeout=spec["timeout"])
        results.append({"line": command["line"], "exit": command["exit"], "rc": proc.returncode,
                        "seconds": round(time.monotonic() - started, 2),
                        "stdout": proc.stdout[-6000:], "stderr": proc.stderr[-6000:]})
        Path(spec["out"]).write_text(json.dumps(results))
        if proc.returncode != command["exit"]:
            break


# -- the test ------------------------------------------------------------------------------------

def _can_isolate() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-n", "-p", "-f", "--mount-proc", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_quickstart_runs_as_written(tmp_path, harness_venv):
    from tests.fixtures.llama import free_port
    from tests.fixtures.markers import starts_real_service

    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    starts_real_service("the quickstart's llama.cpp server")
    clone = tmp_path / "clone"  # the page starts in a clone: only examples/ is read from it
    shutil.copytree(REPO / "examples", clone / "examples")
    home = tmp_path / "home"
    home.mkdir()
    isolated = _can_isolate()
    commands = [{"line": c.line, "exit": c.exit} for c in quickstart_commands(QUICKSTART.read_text())]
    env = {
        # what step 0 puts on PATH: execsys, llama-cpp-python and gguf (the suite's venv), lm-eval after
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", ""),
                                 str(harness_venv / "bin")]),
        "HOME": str(home), "LANG": "C.UTF-8", "COLUMNS": "120", "TOKENIZERS_PARALLELISM": "false",
        "EXECSYS_LEDGER": str(tmp_path / "ledger.sqlite3"),
        "EXECSYS_DATA_DIR": os.environ["EXECSYS_DATA_DIR"],  # the test's own trust store
    }
    if not isolated:  # no namespaces: this machine's own listeners are what `execsys init` sees
        from execsys.observe.listener import engine_listeners

        others = engine_listeners()
        if others:  # init would declare the first of them, and the probes would measure another system
            pytest.skip("unshare is refused here and other serving engines listen on this machine "
                        f"({', '.join(o['endpoint'] for o in others)}): the quickstart assumes a box of its own")
        port = free_port()
        env["PORT"] = str(port)
        for command in commands:
            command["line"] = command["line"].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    out = tmp_path / "results.json"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"commands": commands, "cwd": str(clone), "env": env, "isolated": isolated,
                                "state": str(tmp_path / "shell-state"), "out": str(out), "timeout": 600}))
    driver = [sys.executable, "-m", "tests.test_quickstart", str(spec)]
    workdir = home / "execsys-quickstart"
    started = time.monotonic()
    try:
        ran = subprocess.run(["unshare", "-n", "-p", "-f", "--mount-proc", *driver] if isolated else driver,
                             cwd=REPO, timeout=840, check=False, capture_output=True, text=True)
    finally:
        if not isolated and (workdir / "server.pid").exists():
            subprocess.run(["bash", "llama-server.sh", "stop"], cwd=workdir, env=env, timeout=60, check=False)
    elapsed = time.monotonic() - started

    results = json.loads(out.read_text()) if out.exists() else []
    timings = "\n".join(f"  {r['seconds']:7.2f} s  exit {r['rc']}  {r['line'][:100]}" for r in results)
    print(f"\nthe quickstart took {elapsed:.1f} s here ({'isolated' if isolated else 'port ' + env['PORT']}):\n"
          f"{timings}")
    for result in results:
        assert result["rc"] == result["exit"], (
            f"quickstart command exited {result['rc']}, the page says {result['exit']}: {result['line']}\n"
            f"--- stdout\n{result['stdout']}\n--- stderr\n{result['stderr']}")
    assert len(results) == len(commands), (
        f"the driver stopped after {len(results)} of {len(commands)} commands (exit {ran.returncode}): "
        f"{ran.stderr[-3000:]}")
    assert elapsed <= 600, f"the quickstart took {elapsed:.0f} s: the page promises minutes, not more than ten"

    # what the page says happened, checked against the files and the ledger
    by_start = {r["line"].split(" --")[0]: r for r in results}
    identity = json.loads((workdir / "execsys.lock.json").read_text())["id"]
    run = by_start["execsys run"]
    assert re.search(r"✓ record\s+run-\S+: clean", run["stderr"]), run["stderr"][-3000:]
    shown = next(r for r in results if r["line"].startswith("python3 -c"))
    assert f"'identity': '{identity}'" in shown["stdout"], shown["stdout"]
    assert "same-system" in by_start["execsys verify"]["stdout"]
    session = next(r for r in results if r["line"].startswith("execsys probe session"))
    assert "session agreement 20/20" in session["stdout"], session["stdout"]
    scope_env = {"EXECSYS_LEDGER": env["EXECSYS_LEDGER"], "HOME": str(home)}
    scope = run_cli("scope", "--json", cwd=workdir, env=scope_env)
    assert scope.returncode == 0, scope.stderr
    assert scope.json()["identity"] == identity
    assert {"session", "restart"} <= set(scope.json()["licensed"]), scope.stdout
    runs = run_cli("ledger", "list", "--kind", "run", "--json", cwd=workdir, env=scope_env).json()
    assert [r["verdict"] for r in runs] == ["clean"]


if __name__ == "__main__":  # the driver, started by the test inside the namespaces
    drive(Path(sys.argv[1]))
