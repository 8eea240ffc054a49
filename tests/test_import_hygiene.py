"""CLI start-up stays light: `--version` and `digest` never import textual; core modules never do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def imported_modules(*args: str, cwd: Path | None = None) -> set[str]:
    """Module names a real `python -X importtime -m execsys ARGS` run imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "execsys", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120)
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert names, proc.stderr[-2000:]
    return names


def test_version_imports_nothing_heavy() -> None:
    names = imported_modules("--version")
    assert not {n for n in names if n.split(".")[0] in ("textual", "rich", "git", "httpx", "psutil", "blake3")}


def test_digest_never_imports_textual(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    names = imported_modules("digest", str(tmp_path / "f"))
    assert "blake3" in names  # the run really hashed
    assert not any(n == "textual" or n.startswith("textual.") for n in names)


def test_a_node_check_imports_only_what_it_uses(tmp_path: Path) -> None:
    """A node check runs every 30-60 s on every node: with no declaration and no endpoint it parses
    no TOML, opens no socket and speaks no HTTP, so it loads none of those modules."""
    names = imported_modules("doctor", "--node-check", "npd", cwd=tmp_path)
    assert "execsys.doctor.node_checks.check" in names  # it really ran a node check
    assert not names & {"tomllib", "socket", "http.client", "ssl", "sqlite3", "platform", "getpass"}


def test_the_python_probe_imports_neither_re_nor_json(tmp_path: Path) -> None:
    """The one program a doctor run starts in each interpreter it asks: re and json would be a third
    of its CPU on a Debian python3. Run without site (as such a python3 starts, with nothing loaded)."""
    import ast

    from execsys.doctor import files

    lib = tmp_path / "lib"
    (lib / "withdist").mkdir(parents=True)
    (lib / "withdist" / "__init__.py").write_text("")
    (lib / "withdist-1.2.3.dist-info").mkdir()
    (lib / "pkgv").mkdir()
    (lib / "pkgv" / "__init__.py").write_text('__version__ = "4.5.6"\n')
    code = files.PYTHON_PROBE + "\nprint(sorted({'re', 'json'} & set(sys.modules)))\n"

    def probe(module: str) -> tuple[dict, str]:
        proc = subprocess.run([sys.executable, "-S", "-c", code, module], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, env={"PYTHONPATH": str(lib), "PATH": "/usr/bin:/bin"})
        *_, said, loaded = proc.stdout.splitlines()
        return ast.literal_eval(said), loaded

    python = f"(python {sys.version_info[0]}.{sys.version_info[1]})"
    info, loaded = probe("withdist")
    assert loaded == "[]"
    assert info["entries"]["withdist"] == (0, f"withdist 1.2.3 from {lib / 'withdist'} {python}")
    assert info["dists"][str(lib)] == {"withdist": "1.2.3"}
    # a package without a dist-info is read for its __version__ line (re is imported only then)
    info, _ = probe("pkgv")
    assert info["entries"]["pkgv"] == (0, f"pkgv 4.5.6 from {lib / 'pkgv'} {python}")


@pytest.mark.parametrize("module", ["execsys.identity", "execsys.digest", "execsys.observe.hardware",
                                    "execsys.observe.runtime", "execsys.observe.harness",
                                    "execsys.observe.environment", "execsys.observe.artifact",
                                    "execsys.commands.pin", "execsys.commands.verify", "execsys.commands.diff",
                                    "execsys.commands.digest", "execsys.commands.init", "execsys.cli"])
def test_core_module_does_not_import_textual(module: str) -> None:
    code = f"import sys, {module}; sys.exit(1 if any(m.split('.')[0] == 'textual' for m in sys.modules) else 0)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_hardware_observer_runs_with_the_standard_library_only(tmp_path: Path) -> None:
    """The source sent over SSH must work where psutil, distro and pynvml are absent."""
    import json

    source = (Path(__file__).parents[1] / "execsys" / "observe" / "hardware.py").read_text()
    blocker = ("import sys\nclass _Block:\n    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('psutil', 'distro', 'pynvml', 'execsys'):\n"
               "            raise ImportError(name)\n        return None\nsys.meta_path.insert(0, _Block())\n")
    script = tmp_path / "hw.py"
    script.write_text(blocker + "ns = {'__name__': 'remote'}\nexec(compile(" + repr(source) + ", 'hardware.py', 'exec'), ns)\n"
                      "print(ns['json'].dumps(ns['observe_hardware']()))\n")
    proc = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    from execsys.observe.hardware import observe_hardware

    full = observe_hardware()
    for key in ("hostname", "machine_id", "kernel", "architecture", "gpus"):
        assert facts[key] == full[key]
    assert facts["memory_total_bytes"] == full["memory_total_bytes"]
    assert facts["os"]["id"] == full["os"]["id"] and facts["cpu"]["model"] == full["cpu"]["model"]


def test_remote_hardware_over_real_ssh(ssh_config_env) -> None:
    from execsys.errors import InputError
    from execsys.observe.hardware import observe_hardware, observe_remote_hardware

    remote = observe_remote_hardware(ssh_config_env.dest, timeout=60)
    local = observe_hardware()
    assert remote["machine_id"] == local["machine_id"] and remote["kernel"] == local["kernel"]
    with pytest.raises(InputError, match="hardware of"):
        observe_remote_hardware(ssh_config_env.unreachable_dest, timeout=30)
