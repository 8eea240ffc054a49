"""Each hazard created for real (programs on PATH, venvs, git repos, sockets, processes) and found.

Every test builds the defect with real parts, runs the one check through the public API
(``run_hazard``) and asserts what an operator would read; each has a clean twin that must be ok.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from execsys.doctor.runner import DoctorOptions, run_hazard


def _script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(mode)
    return path


def _prepend_path(monkeypatch, *dirs: Path) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join([*map(str, dirs), os.environ["PATH"]]))


def _blake3(path: Path) -> str:
    import blake3

    return "blake3:" + blake3.blake3(path.read_bytes()).hexdigest()


# -- binary-aliasing -------------------------------------------------------------------------

@pytest.fixture
def two_tools(tmp_path, monkeypatch):
    first = _script(tmp_path / "a" / "mytool", "#!/bin/sh\necho 'mytool 1.0 (a)'\n")
    second = _script(tmp_path / "b" / "mytool", "#!/bin/sh\necho 'mytool 2.0 (b)'\n")
    _prepend_path(monkeypatch, first.parent, second.parent)
    return first, second


def test_binary_aliasing_warns_on_two_programs_with_one_name(two_tools):
    first, second = two_tools
    result = run_hazard("binary-aliasing", DoctorOptions(commands=["mytool"]))
    assert result.status == "warn"
    assert "mytool: 2 different programs on PATH" in result.summary
    text = "\n".join(result.evidence)
    assert str(first) in text and str(second) in text
    assert "mytool 1.0 (a)" in text  # the --version of the one that actually runs


def test_binary_aliasing_fails_when_path_runs_another_binary_than_pinned(two_tools):
    first, second = two_tools
    by_path = run_hazard("binary-aliasing", DoctorOptions(commands=["mytool"], pins={"mytool": {"path": str(second)}}))
    assert by_path.status == "fail"
    assert f"PATH runs {first}" in by_path.summary and str(second) in by_path.summary
    by_digest = run_hazard("binary-aliasing",
                           DoctorOptions(commands=["mytool"], pins={"mytool": {"digest": _blake3(second)}}))
    assert by_digest.status == "fail"
    assert "pins blake3:" in by_digest.summary


def test_binary_aliasing_pins_from_execsys_toml(two_tools, tmp_path, monkeypatch):
    """Digest pins read from execsys.toml decide per command: the command whose running binary is the
    pinned one is not flagged for its pin; the one whose running binary is not the pinned one fails."""
    from execsys import declaration

    first, second = two_tools
    other = _script(tmp_path / "c" / "othertool", "#!/bin/sh\necho 'othertool 1.0'\n")
    _prepend_path(monkeypatch, other.parent)
    # mytool pinned (prefixed spelling) to the binary PATH runs; othertool pinned (bare hex) to mytool's second copy
    decl = declaration.parse(f'[doctor]\ncommands = ["mytool", "othertool"]\npins = {{ mytool = "{_blake3(first)}", '
                             f'othertool = "{_blake3(second).removeprefix("blake3:")}" }}\n',
                             tmp_path / "execsys.toml")
    result = run_hazard("binary-aliasing", DoctorOptions.from_sources(decl))
    assert result.status == "fail"
    by_id = sorted((f.id, f.text.split(":")[0]) for f in result.findings)
    assert by_id == [("binary-aliasing/pinned-digest-differs", "othertool"),
                     ("binary-aliasing/several-programs", "mytool")], result.findings
    assert result.summary.startswith(f"othertool: {other} is blake3:"), result.summary

    # pinned to the binary that runs, each command is clean of pin findings (mytool's second copy still warns)
    decl = declaration.parse(f'[doctor]\ncommands = ["mytool", "othertool"]\npins = {{ mytool = "{_blake3(first)}", '
                             f'othertool = "{_blake3(other)}" }}\n', tmp_path / "execsys.toml")
    result = run_hazard("binary-aliasing", DoctorOptions.from_sources(decl))
    assert result.status == "warn"
    assert [f.id for f in result.findings] == ["binary-aliasing/several-programs"]


def test_binary_aliasing_ok_with_one_program(tmp_path, monkeypatch):
    tool = _script(tmp_path / "only" / "mytool", "#!/bin/sh\necho 'mytool 1.0'\n")
    _prepend_path(monkeypatch, tool.parent)
    result = run_hazard("binary-aliasing", DoctorOptions(commands=["mytool"], pins={"mytool": {"path": str(tool)}}))
    assert result.status == "ok", result.evidence


def test_binary_aliasing_sees_a_shell_alias(tmp_path):
    """A real interactive bash (the doctor's parent shell, found by shellingham) with an alias in ~/.bashrc."""
    tool = _script(tmp_path / "only" / "mytool", "#!/bin/sh\necho 'mytool 1.0'\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("alias mytool='echo not the binary'\n")
    env = {**os.environ, "HOME": str(home), "SHELL": "/bin/bash", "PATH": f"{tool.parent}:{os.environ['PATH']}",
           "EXECSYS_LEDGER": str(tmp_path / "ledger.sqlite3")}
    # `; exit $?` keeps bash alive as the doctor's parent (no exec optimisation).
    command = (f"{sys.executable} -m execsys doctor --json --only binary-aliasing --cmd mytool; exit $?")
    proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60)
    import json

    result = json.loads(proc.stdout)["hazards"][0]
    assert result["status"] == "warn", result
    assert result["summary"] == "mytool: a shell alias shadows the binary in interactive shells"


# -- interop-mangling ------------------------------------------------------------------------

def test_interop_layers_that_pass_argv_through_are_ok(tmp_path):
    relay = _script(tmp_path / "relay-exec", '#!/bin/sh\nexec "$@"\n')
    result = run_hazard("interop-mangling", DoctorOptions(layers=["env", str(relay)]))
    assert result.status == "ok", result.evidence
    assert "all 13 canary arguments arrived intact" in "\n".join(result.evidence)


def test_interop_layer_that_re_evaluates_arguments_fails(tmp_path):
    relay = _script(tmp_path / "relay-eval", '#!/bin/sh\neval "$@"\n')
    result = run_hazard("interop-mangling", DoctorOptions(layers=[str(relay), "env"]))
    assert result.status == "fail"
    assert str(relay) in result.summary and "'env'" not in result.summary
    text = "\n".join(result.evidence)
    assert "sent:" in text and "received:" in text
    assert 'received: ["two", "words", "single quoted",' in text  # split, and the quotes eaten
    assert "write the command into a script" in result.fix


def test_interop_bash_c_drops_the_arguments(tmp_path):
    result = run_hazard("interop-mangling", DoctorOptions(layers=["bash -c"]))
    assert result.status == "fail"
    assert "sent 13 arguments, received 0" in "\n".join(result.evidence)


def test_interop_ssh_re_splits_arguments(ssh_config_env):
    layer = f"ssh -F {ssh_config_env.config_path} -o BatchMode=yes {ssh_config_env.dest}"
    result = run_hazard("interop-mangling", DoctorOptions(layers=[layer], timeout=15))
    assert result.status == "fail", result.evidence
    text = "\n".join(result.evidence)
    assert 'arg 0: sent "two words"' in text  # split in two by the remote shell


def test_interop_a_layer_that_does_not_run_is_an_error_not_a_finding(tmp_path):
    no_stdin = _script(tmp_path / "no-stdin", '#!/bin/sh\nexec "$@" < /dev/null\n')
    result = run_hazard("interop-mangling", DoctorOptions(layers=[str(no_stdin), "false"]))
    assert result.status == "error"
    text = "\n".join(result.evidence)
    assert "did not pass stdin through" in text and "layer 'false': the reporter did not run" in text


def test_interop_skips_without_layers():
    result = run_hazard("interop-mangling", DoctorOptions(layers=[]))
    assert result.status in ("skip", "warn")  # warn only under WSL


# -- stub-executables ------------------------------------------------------------------------

def _foreign_elf(path: Path) -> Path:
    """A minimal ELF64 header for a machine that is not this one (aarch64 here, x86_64 on arm)."""
    import platform

    machine = 62 if platform.machine().lower() in ("aarch64", "arm64") else 183
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header += struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0x400078, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    header += struct.pack("<IIQQQQQQ", 1, 5, 0, 0x400000, 0x400000, 0x80, 0x80, 0x1000)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + b"\0" * 8)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("kind", ["zero", "dead-shebang", "foreign-elf"])
def test_stub_executables_fail(tmp_path, monkeypatch, kind):
    path = tmp_path / "bin" / "engine"
    if kind == "zero":
        _script(path, "")
        expected = "0-byte file"
    elif kind == "dead-shebang":
        _script(path, "#!/opt/nowhere/python9\nprint('hi')\n")
        expected = "interpreter /opt/nowhere/python9 does not exist"
    else:
        _foreign_elf(path)
        expected = "ELF for"
    _prepend_path(monkeypatch, path.parent)
    result = run_hazard("stub-executables", DoctorOptions(commands=["engine"]))
    assert result.status == "fail"
    assert result.summary == "cannot run: engine"
    assert expected in "\n".join(result.evidence)


def test_stub_executables_a_hang_is_a_finding_within_the_timeout(tmp_path, monkeypatch):
    _script(tmp_path / "bin" / "hangs", "#!/bin/sh\nsleep 60\n")
    _script(tmp_path / "bin" / "floods", "#!/bin/sh\nexec yes flood\n")
    _script(tmp_path / "bin" / "reads", "#!/bin/sh\ncat\necho done reading\n")
    _prepend_path(monkeypatch, tmp_path / "bin")
    start = time.monotonic()
    result = run_hazard("stub-executables", DoctorOptions(commands=["hangs", "floods", "reads"], timeout=1.0))
    elapsed = time.monotonic() - start
    assert result.status == "fail"
    assert "hangs" in result.summary and "floods" in result.summary and "reads" not in result.summary
    text = "\n".join(result.evidence)
    assert "no answer within" in text and "flooded its output" in text
    assert elapsed < 15  # bounded by the 1 s timeout, not by sleep 60


def test_stub_executables_pyenv_shim_for_a_version_not_selected(monkeypatch):
    shims = Path.home() / ".pyenv" / "shims"
    versions = sorted(p.name for p in (Path.home() / ".pyenv" / "versions").glob("3.*"))
    if not (shims / "python3.12").exists() or "3.12.1" not in versions or len(versions) < 2:
        pytest.skip("needs pyenv with a python3.12 shim and another version to select")
    other = next(v for v in versions if not v.startswith("3.12"))
    monkeypatch.setenv("PYENV_VERSION", other)
    _prepend_path(monkeypatch, shims)
    result = run_hazard("stub-executables", DoctorOptions(commands=["python3.12"], timeout=10))
    assert result.status == "fail"
    text = "\n".join(result.evidence)
    assert "shim for an uninstalled version" in text and "python3.12: command not found" in text


# What the stubs print, verbatim: the App Execution Alias (python/cpython#85499), pyenv 2.x's
# libexec/pyenv-which (its "command not found" text was also measured on the real pyenv here, in the
# test above), asdf's shims.
_ALIAS_TEXT = ("Python was not found; run without arguments to install from the Microsoft Store, or disable this "
               "shortcut from Settings > Manage App Execution Aliases.")
_STUBS = {
    "windows-app-alias": (f"echo '{_ALIAS_TEXT}' >&2\nexit 9009\n", "windows-app-alias",
                          "a Windows App Execution Alias stub"),
    "pyenv-not-selected": ("echo 'pyenv: python3.12: command not found' >&2\necho >&2\n"
                           "echo \"The \\`python3.12' command exists in these Python versions:\" >&2\n"
                           "echo '  3.12.1' >&2\nexit 127\n", "shim-uninstalled",
                           "shim for an uninstalled version (pyenv: the command exists only in a Python version"),
    "pyenv-not-installed": ("echo \"pyenv: version \\`3.99.0' is not installed (set by PYENV_VERSION environment "
                            "variable)\" >&2\nexit 1\n", "shim-uninstalled",
                            "pyenv: the selected version is not installed"),
    "asdf-not-installed": ("echo 'No preset version installed for command python3' >&2\n"
                           "echo 'Please install a version by running one of the following:' >&2\nexit 126\n",
                           "shim-uninstalled", "shim for an uninstalled version (asdf)"),
    "asdf-not-set": ("echo 'No version is set for command python3' >&2\nexit 126\n", "shim-uninstalled",
                     "asdf: no version selected"),
}


@pytest.mark.parametrize("stub", sorted(_STUBS))
def test_stub_executables_fail_on_a_known_stub_anywhere_on_path(tmp_path, monkeypatch, stub):
    """Recognised by what the stub prints, in an ordinary bin directory (not WindowsApps, not .pyenv/shims)."""
    body, kind, said = _STUBS[stub]
    _script(tmp_path / "bin" / "python3", "#!/bin/sh\n" + body)
    _prepend_path(monkeypatch, tmp_path / "bin")
    result = run_hazard("stub-executables", DoctorOptions(commands=["python3"]))
    assert result.status == "fail"
    assert result.summary == "cannot run: python3"
    assert [f.id for f in result.findings] == [f"stub-executables/{kind}"]
    assert said in result.findings[0].text


def test_stub_executables_a_signature_with_exit_0_is_a_working_program(tmp_path, monkeypatch):
    _script(tmp_path / "bin" / "helper", "#!/bin/sh\necho 'pyenv: helper: command not found (quoted in help)'\n")
    _prepend_path(monkeypatch, tmp_path / "bin")
    result = run_hazard("stub-executables", DoctorOptions(commands=["helper"]))
    assert result.status == "ok"


def test_stub_executables_ok_for_working_programs(tmp_path, monkeypatch):
    _script(tmp_path / "bin" / "engine", "#!/bin/sh\necho 'engine 1.2.3'\n")
    _prepend_path(monkeypatch, tmp_path / "bin")
    result = run_hazard("stub-executables", DoctorOptions(commands=["engine"]))
    assert result.status == "ok"
    assert "engine 1.2.3" in "\n".join(result.evidence)



def _console_script(bindir: Path, name: str, interpreter: Path, module: str) -> Path:
    """What pip writes for a ``[project.scripts]`` entry: a shebang and ``from MOD import main``."""
    return _script(bindir / name, f"#!{interpreter}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                                  f"from {module} import main\nif __name__ == '__main__':\n"
                                  "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                                  "    sys.exit(main())\n")


def test_stub_executables_resolves_a_console_script_in_its_own_interpreter_without_running_it(tmp_path,
                                                                                               monkeypatch):
    """A console script is checked by its interpreter finding the entry module (not by starting the
    tool): the version comes from the distribution's dist-info; an entry module that is gone is named."""
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "evaltool" / "cli").mkdir(parents=True)
    (site / "evaltool" / "__init__.py").write_text("raise SystemExit('the package ran: it must not')\n")
    (site / "evaltool" / "cli" / "__init__.py").write_text("")
    (site / "evaltool" / "cli" / "main.py").write_text("def main():\n    return 0\n")
    (site / "evaltool-4.5.6.dist-info").mkdir()
    bindir = tmp_path / "bin"
    _console_script(bindir, "evaltool", venv / "bin" / "python", "evaltool.cli.main")
    _console_script(bindir, "gonetool", venv / "bin" / "python", "evaltool.gone.main")
    _prepend_path(monkeypatch, bindir)
    ok = run_hazard("stub-executables", DoctorOptions(commands=["evaltool"], timeout=10))
    assert ok.status == "ok", ok.evidence
    assert f"evaltool 4.5.6 from {site / 'evaltool'}" in "\n".join(ok.evidence)
    gone = run_hazard("stub-executables", DoctorOptions(commands=["gonetool"], timeout=10))
    assert gone.status == "warn", gone.evidence
    assert "exit 1: No module named 'evaltool.gone' (runs, but --version failed)" in "\n".join(gone.evidence)


def test_one_python_start_answers_package_prefixes_and_every_console_script_it_runs(tmp_path, monkeypatch):
    """A node check runs every 30-60 s: python3 is started once for its prefixes and for locating
    pip's entry module, not once per question (each start is a tenth of the check's CPU budget)."""
    system_python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    starts = tmp_path / "starts.log"
    bindir = tmp_path / "bin"
    python3 = _script(bindir / "python3", f"#!/bin/sh\necho \"$1\" >> {starts}\nexec {system_python} \"$@\"\n")
    _console_script(bindir, "pip", python3, "pip._internal.cli.main")
    _console_script(bindir, "pip3", python3, "pip._internal.cli.main")
    _prepend_path(monkeypatch, bindir)
    from execsys.doctor.runner import run_local

    report = run_local(DoctorOptions(only=["package-prefixes", "stub-executables"], commands=["python3", "pip"],
                                     timeout=20))
    by_id = {r.id: r for r in report.hazards}
    stub, prefixes = by_id["stub-executables"], by_id["package-prefixes"]
    located = subprocess.run([system_python, "-c", "import pip, os; print(os.path.dirname(pip.__file__))"],
                             capture_output=True, text=True, timeout=60)
    if located.returncode != 0:
        pytest.skip(f"{system_python} has no pip to locate")
    pip_dir = located.stdout.strip()
    assert f"pip (entry point pip._internal.cli.main:main, resolved by {python3}): exit 0: pip " in \
        "\n".join(stub.evidence)
    assert f"from {pip_dir} (python " in "\n".join(stub.evidence)
    assert prefixes.status == "ok", prefixes.evidence
    assert f"installs into {os.path.dirname(pip_dir)}" in "\n".join(prefixes.evidence)
    # `python3 --version` (does it start at all: no site, no imports) and one run of the probe
    assert sorted(starts.read_text().splitlines()) == ["--version", "-c"]

# -- unread-env-config -----------------------------------------------------------------------

@pytest.fixture
def serving_process(tmp_path):
    """A real long-running process with its own environment and a model path on its argv."""
    procs = []

    def start(env: dict[str, str], model: str) -> subprocess.Popen:
        base = {"PATH": os.environ["PATH"]}
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--model", model,
                                 "--api-key", "sk-live-abcdef123456"], env={**base, **env})
        procs.append(proc)
        time.sleep(0.3)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_unread_env_config_fails_on_missing_and_different_variables(tmp_path, serving_process):
    env_file = tmp_path / "engine.env"
    env_file.write_text("export CUDA_VISIBLE_DEVICES=0\nLLAMA_ARG_CTX=4096\n# comment\nHF_TOKEN='hf_declaredsecret99'\n")
    proc = serving_process({"CUDA_VISIBLE_DEVICES": "1", "HF_TOKEN": "hf_othersecret1234"}, "/models/a.gguf")
    result = run_hazard("unread-env-config", DoctorOptions(env_file=str(env_file), pid=proc.pid))
    assert result.status == "fail"
    text = "\n".join(result.evidence)
    assert "CUDA_VISIBLE_DEVICES: declared '0', pid" in text and "has '1'" in text
    assert "LLAMA_ARG_CTX: declared, missing in pid" in text
    assert "HF_TOKEN: declared <redacted>" in text
    assert "hf_declaredsecret99" not in text and "hf_othersecret1234" not in text
    assert "sk-live-abcdef123456" not in text  # the argv is redacted too


def test_unread_env_config_warns_when_env_file_changed_after_start(tmp_path, serving_process):
    env_file = tmp_path / "engine.env"
    env_file.write_text("LLAMA_ARG_CTX=4096\n")
    proc = serving_process({"LLAMA_ARG_CTX": "4096"}, "/models/a.gguf")
    ok = run_hazard("unread-env-config", DoctorOptions(env_file=str(env_file), pid=proc.pid))
    assert ok.status == "ok", ok.evidence
    later = time.time() + 5
    os.utime(env_file, (later, later))
    stale = run_hazard("unread-env-config", DoctorOptions(env_file=str(env_file), pid=proc.pid))
    assert stale.status == "warn"
    assert "after pid" in stale.summary and "old config" in stale.summary


def test_unread_env_config_fails_on_another_artifact_on_argv(tmp_path, serving_process):
    proc = serving_process({"A": "1"}, "/models/served.gguf")
    result = run_hazard("unread-env-config", DoctorOptions(pid=proc.pid, declared_env={"A": "1"},
                                                           artifact_path="/models/declared.gguf"))
    assert result.status == "fail"
    assert "artifact: declared /models/declared.gguf" in result.summary and "/models/served.gguf" in result.summary
    same = run_hazard("unread-env-config", DoctorOptions(pid=proc.pid, artifact_path="/models/served.gguf"))
    assert same.status == "ok", same.evidence


def test_unread_env_config_finds_the_process_by_name(tmp_path):
    engine = tmp_path / "fake-engine"
    engine.symlink_to(sys.executable)  # the process is then called fake-engine
    proc = subprocess.Popen([str(engine), "-c", "import time; time.sleep(60)"],
                            env={"PATH": os.environ["PATH"], "A": "2"})
    try:
        time.sleep(0.3)
        result = run_hazard("unread-env-config", DoctorOptions(process="fake-engine", declared_env={"A": "1"}))
    finally:
        proc.kill()
        proc.wait()
    assert result.status == "fail"
    assert result.summary == f"A: declared '1', pid {proc.pid} has '2'"


def test_unread_env_config_finds_the_listener_of_the_declared_endpoint(listen, monkeypatch):
    monkeypatch.setenv("SERVED_BY", "listener")
    port = _free_port()
    proc = listen("4", "plain", port)
    result = run_hazard("unread-env-config", DoctorOptions(endpoint_port=port, declared_env={"SERVED_BY": "engine"}))
    assert result.status == "fail"
    assert f"process: pid {proc.pid}, the listener on port {port}" in result.evidence
    assert "SERVED_BY: declared 'engine'" in result.summary


# -- baked-paths -----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def moved_venv(tmp_path_factory):
    """A real venv (with pip and its console scripts) created in one place and moved to another."""
    root = tmp_path_factory.mktemp("venvs")
    subprocess.run([sys.executable, "-m", "venv", str(root / "original")], check=True, timeout=120)
    shutil.move(str(root / "original"), str(root / "moved"))
    return root / "moved"


@pytest.fixture(scope="session")
def clean_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean-venv")
    subprocess.run([sys.executable, "-m", "venv", str(root / "env")], check=True, timeout=120)
    return root / "env"


def test_baked_paths_fails_for_a_moved_venv(moved_venv):
    result = run_hazard("baked-paths", DoctorOptions(venvs=[str(moved_venv)]))
    assert result.status == "fail"
    text = "\n".join(result.evidence)
    assert "run an interpreter outside the venv" in text and "original/bin/python" in text
    assert "activates" in text and "original" in text


def test_baked_paths_ok_for_a_venv_in_place(clean_venv):
    result = run_hazard("baked-paths", DoctorOptions(venvs=[str(clean_venv)]))
    assert result.status == "ok", result.evidence


def test_baked_paths_pth_with_a_missing_absolute_path(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "good.pth").write_text(f"{tmp_path}\nimport os\n")
    (site / "stale.pth").write_text("/opt/gone/src\n")
    result = run_hazard("baked-paths", DoctorOptions(paths=[str(site)], venvs=[]))
    assert result.status == "fail"
    assert "stale.pth:1: /opt/gone/src does not exist" in result.summary
    (site / "stale.pth").unlink()
    assert run_hazard("baked-paths", DoctorOptions(paths=[str(site)], venvs=[])).status == "ok"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed: cannot build an ELF with a RUNPATH")
def test_baked_paths_elf_runpath_to_a_missing_dir(tmp_path):
    src = tmp_path / "main.c"
    src.write_text("int main(void) { return 0; }\n")
    out = tmp_path / "bin"
    out.mkdir()
    subprocess.run(["gcc", str(src), "-o", str(out / "tool"), "-Wl,-rpath,/opt/missing-cuda/lib64",
                    "-Wl,--enable-new-dtags"], check=True, timeout=60)
    subprocess.run(["gcc", str(src), "-o", str(out / "fine"), "-Wl,-rpath,$ORIGIN"], check=True, timeout=60)
    subprocess.run(["gcc", str(src), "-o", str(out / "noloader"), "-Wl,--dynamic-linker=/opt/old-glibc/ld.so"],
                   check=True, timeout=60)
    result = run_hazard("baked-paths", DoctorOptions(paths=[str(out)], venvs=[]))
    assert result.status == "fail"
    text = "\n".join(result.evidence)
    assert "tool: RUNPATH /opt/missing-cuda/lib64 does not exist" in text
    assert "noloader: ELF interpreter /opt/old-glibc/ld.so does not exist" in text
    assert "fine:" not in text  # $ORIGIN expands to a directory that exists
    # remote hosts without pyelftools read the same facts with struct alone
    from execsys.doctor import files

    for name in ("tool", "fine", "noloader"):
        full, bare = files.elf_info(str(out / name)), files.elf_info_stdlib(str(out / name))
        assert (bare.interpreter, bare.rpath, bare.runpath) == (full.interpreter, full.rpath, full.runpath)
    assert files.elf_info_stdlib(str(out / "tool")).runpath == ["/opt/missing-cuda/lib64"]


def test_baked_paths_dead_shebang_under_path(tmp_path):
    _script(tmp_path / "scripts" / "run", "#!/opt/conda-old/bin/python\n")
    result = run_hazard("baked-paths", DoctorOptions(paths=[str(tmp_path / "scripts")], venvs=[]))
    assert result.status == "fail"
    assert "/opt/conda-old/bin/python does not exist" in result.summary


# -- package-prefixes ------------------------------------------------------------------------

def _clean_python_env(monkeypatch):
    for var in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PIP_TARGET", "PIP_PREFIX", "VIRTUAL_ENV",
                "CONDA_PREFIX"):
        monkeypatch.delenv(var, raising=False)


def test_package_prefixes_pip_of_another_interpreter(tmp_path, monkeypatch, clean_venv):
    _clean_python_env(monkeypatch)
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None or os.path.realpath(system_python) == os.path.realpath(sys.executable):
        pytest.skip("needs a second python3 besides the test interpreter")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(system_python)
    (bindir / "pip").symlink_to(clean_venv / "bin" / "pip")
    _prepend_path(monkeypatch, bindir)
    result = run_hazard("package-prefixes", DoctorOptions(timeout=10))
    assert result.status == "fail"
    assert result.summary.startswith(f"pip installs into {clean_venv}")
    # clean twin: python3 and pip from the same venv
    _prepend_path(monkeypatch, clean_venv / "bin")
    ok = run_hazard("package-prefixes", DoctorOptions(timeout=10))
    assert ok.status == "ok", ok.evidence


def _python3_that_stalls(tmp_path: Path, monkeypatch, *, times: str) -> Path:
    """A ``python3`` first on PATH that sleeps instead of answering: the first time only, or always."""
    bindir = tmp_path / "stalling-bin"
    first = tmp_path / "asked-once"
    stall = f'if [ ! -e "{first}" ]; then : > "{first}"; exec sleep 60; fi\n' if times == "once" else "exec sleep 60\n"
    _script(bindir / "python3", f'#!/bin/sh\n{stall}exec "{sys.executable}" "$@"\n')
    _prepend_path(monkeypatch, bindir)
    return bindir


def test_package_prefixes_asks_a_python3_that_stalled_once_again(tmp_path, monkeypatch):
    """A loaded host can stretch one interpreter start past the timeout; that is not a broken python3."""
    _clean_python_env(monkeypatch)
    _python3_that_stalls(tmp_path, monkeypatch, times="once")
    result = run_hazard("package-prefixes", DoctorOptions(timeout=4))
    assert result.status != "error", result.summary
    assert "python3 gave no answer within 4s at first; it answered when asked again" in result.evidence
    assert any(line.startswith(f"python3 ({tmp_path / 'stalling-bin' / 'python3'}): ") for line in result.evidence)


def test_package_prefixes_reports_a_python3_that_never_answers_in_one_line(tmp_path, monkeypatch):
    _clean_python_env(monkeypatch)
    _python3_that_stalls(tmp_path, monkeypatch, times="always")
    start = time.monotonic()
    result = run_hazard("package-prefixes", DoctorOptions(timeout=1))
    assert time.monotonic() - start < 1 * 3 + 5  # inside the check's own deadline, both tries included
    assert result.status == "error"
    assert result.summary.startswith(f"python3 did not describe itself: {tmp_path / 'stalling-bin' / 'python3'} "
                                     "-c <code>: no answer within 1.0s on each of 2 tries (killed)"), result.summary
    assert "\n" not in result.summary and "def locate" not in result.summary


def test_package_prefixes_pythonpath_and_a_second_copy(tmp_path, monkeypatch):
    _clean_python_env(monkeypatch)
    extra = tmp_path / "extra"
    (extra / "rich-0.0.1.dist-info").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", str(extra))
    _prepend_path(monkeypatch, Path(sys.executable).parent)
    result = run_hazard("package-prefixes", DoctorOptions(timeout=10))
    assert result.status == "fail"
    text = "\n".join(result.evidence)
    assert "PYTHONPATH=" in text
    assert "rich: installed twice on sys.path with different versions (0.0.1 in" in text


def test_package_prefixes_user_site_shadow(tmp_path, monkeypatch):
    """The user site is off inside a venv (the suite's own interpreter), so the python3 the hazard finds
    first is the base interpreter behind it, with a pip of its own: its pip shadowed from a user site."""
    _clean_python_env(monkeypatch)
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(base)
    for pip in ("pip", "pip3"):
        (bindir / pip).write_text(f"#!/bin/sh\nexec {base} -m pip \"$@\"\n")
        (bindir / pip).chmod(0o755)
    _prepend_path(monkeypatch, bindir)
    version = subprocess.run([base, "-c", "import importlib.metadata as m; print(m.version('pip'))"],
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    userbase = tmp_path / "userbase"
    site = userbase / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "pip-0.0.2.dist-info").mkdir(parents=True)
    monkeypatch.setenv("PYTHONUSERBASE", str(userbase))
    result = run_hazard("package-prefixes", DoctorOptions(timeout=10))
    assert result.status == "fail", result
    assert result.summary.startswith(f"pip: user site 0.0.2 shadows the environment's {version} (0.0.2 in {site}")


def test_package_prefixes_global_pip_target(tmp_path, monkeypatch):
    _clean_python_env(monkeypatch)
    _prepend_path(monkeypatch, Path(sys.executable).parent)
    conf = tmp_path / "pip.conf"
    conf.write_text("[install]\ntarget = /opt/elsewhere\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    result = run_hazard("package-prefixes", DoctorOptions(timeout=10))
    assert result.status == "warn"
    assert f"{conf}: [install] target = /opt/elsewhere" in result.evidence


def test_package_prefixes_pythonpath_alone_warns(tmp_path, monkeypatch):
    _clean_python_env(monkeypatch)
    _prepend_path(monkeypatch, Path(sys.executable).parent)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "empty"))
    result = run_hazard("package-prefixes", DoctorOptions(timeout=10))
    assert result.status == "warn"
    assert result.summary.startswith("PYTHONPATH=")


# -- lost-mode-bits --------------------------------------------------------------------------

def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True, timeout=30)


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "harness"
    path.mkdir()
    _git(path, "init", "-q")
    _script(path / "run.sh", "#!/bin/sh\necho run\n")
    (path / "README").write_text("hello\n")
    _git(path, "add", ".")
    _git(path, "commit", "-q", "-m", "init")
    return path


def test_lost_mode_bits_fails_on_a_cleared_execute_bit(repo):
    (repo / "run.sh").chmod(0o644)
    result = run_hazard("lost-mode-bits", DoctorOptions(repos=[str(repo)]))
    assert result.status == "fail"
    assert "1 file(s) are 100755 in git but not executable here: run.sh" in result.summary


def test_lost_mode_bits_warns_on_core_filemode_false(repo):
    _git(repo, "config", "core.fileMode", "false")
    result = run_hazard("lost-mode-bits", DoctorOptions(repos=[str(repo)]))
    assert result.status == "warn"
    assert "core.fileMode=false" in result.summary


def test_lost_mode_bits_warns_on_a_script_without_execute_bit(repo):
    _script(repo / "bin" / "serve", "#!/bin/sh\n", mode=0o644)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "serve")
    result = run_hazard("lost-mode-bits", DoctorOptions(repos=[str(repo)]))
    assert result.status == "warn"
    assert "script(s) with a shebang and no execute bit: bin/serve" in result.summary


def test_lost_mode_bits_ok_on_a_clean_checkout(repo):
    result = run_hazard("lost-mode-bits", DoctorOptions(repos=[str(repo)]))
    assert result.status == "ok", result.evidence
    assert stat.S_IMODE((repo / "run.sh").stat().st_mode) == 0o755  # the doctor changed nothing


# -- port-collisions -------------------------------------------------------------------------

LISTENER = textwrap.dedent("""
    import socket, sys, time
    family = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    if sys.argv[2] == "reuseport":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::" if family == socket.AF_INET6 else "127.0.0.1", int(sys.argv[3])))
    s.listen()
    print("listening", flush=True)
    time.sleep(120)
""")


@pytest.fixture
def listen():
    procs = []

    def start(family: str, mode: str, port: int) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", LISTENER, family, mode, str(port)],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "listening"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_port_collisions_two_processes_share_a_port_with_reuseport(listen):
    port = _free_port()
    a = listen("4", "reuseport", port)
    b = listen("4", "reuseport", port)
    result = run_hazard("port-collisions", DoctorOptions(ports=[port]))
    assert result.status == "fail"
    assert f"port {port}: 2 processes listen" in result.summary
    assert str(a.pid) in result.summary and str(b.pid) in result.summary


def test_port_collisions_ipv4_and_ipv6_held_by_different_processes(listen):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    port = _free_port()
    listen("4", "plain", port)
    listen("6", "plain", port)
    result = run_hazard("port-collisions", DoctorOptions(ports=[port]))
    assert result.status == "fail"
    assert "IPv4 and IPv6 held by different processes" in result.summary


def test_port_collisions_listener_is_not_the_declared_engine(listen):
    port = _free_port()
    proc = listen("4", "plain", port)
    wrong = run_hazard("port-collisions", DoctorOptions(ports=[port], engine="llama.cpp"))
    assert wrong.status == "fail"
    assert f"pid {proc.pid} is not the declared engine 'llama.cpp'" in wrong.summary
    right = run_hazard("port-collisions", DoctorOptions(ports=[port], pid=proc.pid))
    assert right.status == "ok", right.evidence
    assert f"port {port}: IPv4 127.0.0.1:{port} -> {proc.pid}" in "\n".join(right.evidence)


def test_port_collisions_free_port_is_ok():
    port = _free_port()
    result = run_hazard("port-collisions", DoctorOptions(ports=[port]))
    assert result.status == "ok"
    assert f"port {port}: nothing listening" in result.evidence


def test_port_collisions_a_declared_process_that_is_not_running_is_a_finding(listen):
    """`doctor --port 8000 --process llama-server` with no llama-server anywhere used to say ✓."""
    import uuid

    port = _free_port()
    name = f"llama-server-{uuid.uuid4().hex[:8]}"
    absent = run_hazard("port-collisions", DoctorOptions(ports=[port], process=name))
    assert absent.status == "fail"
    assert absent.summary == f"the declared process {name!r} is not running"
    assert [f.id for f in absent.findings] == ["port-collisions/declared-process-not-running"]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    by_pid = run_hazard("port-collisions", DoctorOptions(ports=[port], pid=gone.pid))
    assert (by_pid.status, by_pid.summary) == ("fail", f"the declared pid {gone.pid} is not running")
    proc = listen("4", "plain", port)  # running, and the one listening: nothing to say
    running = run_hazard("port-collisions", DoctorOptions(ports=[port], pid=proc.pid))
    assert running.status == "ok", running.summary


# -- clock-skew (local) ----------------------------------------------------------------------

def test_clock_skew_reports_kernel_state_and_clocksource():
    """This host's real kernel state and clocksource are read (the planted cases below pin the verdicts)."""
    result = run_hazard("clock-skew", DoctorOptions())
    assert result.status in ("ok", "warn")
    text = "\n".join(result.evidence)
    source = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    if source.exists():
        assert f"clocksource: {source.read_text().strip()}" in text
    if sys.platform.startswith("linux"):
        assert "adjtimex: state" in text


class _Adjtimex:
    """libc as the hazard calls it, answering adjtimex(2) with a planted kernel state: the kernel's own
    cannot be changed from a test (and the doctor never changes it)."""

    def __init__(self, state: int, status: int, maxerror_us: int = 16000000):
        self.state, self.status, self.maxerror_us = state, status, maxerror_us

    def adjtimex(self, ref) -> int:
        tx = ref._obj
        tx.status, tx.maxerror, tx.esterror, tx.offset = self.status, self.maxerror_us, 1500, 250
        return self.state


def _planted_clock(monkeypatch, tmp_path: Path, *, state: int, status: int, current: str, available: str):
    from execsys.doctor.hazards import clock_skew

    source = tmp_path / "clocksource0"
    source.mkdir()
    (source / "current_clocksource").write_text(current + "\n")
    (source / "available_clocksource").write_text(available + "\n")
    monkeypatch.setattr(clock_skew, "CLOCKSOURCE", str(source))
    monkeypatch.setattr(clock_skew, "_libc", lambda: _Adjtimex(state, status))
    return run_hazard("clock-skew", DoctorOptions())


@pytest.mark.parametrize(("state", "status", "current", "available", "verdict", "summary", "finding"), [
    (0, 0x0001, "tsc", "tsc hpet acpi_pm", "ok", "kernel clock synchronised, clocksource tsc", None),
    (5, 0x0040, "tsc", "tsc hpet", "warn", "kernel clock is not synchronised (no NTP/PTP discipline: STA_UNSYNC)",
     "clock-skew/kernel-clock-unsynchronised"),
    (0, 0x0040, "kvm-clock", "kvm-clock tsc", "warn", "kernel clock is not synchronised",
     "clock-skew/kernel-clock-unsynchronised"),  # STA_UNSYNC alone, state TIME_OK
    (5, 0x0000, "tsc", "tsc", "warn", "kernel clock is not synchronised", "clock-skew/kernel-clock-unsynchronised"),
    (0, 0x0000, "hpet", "hpet acpi_pm", "warn", "clocksource is hpet: tsc was probably marked unstable",
     "clock-skew/tsc-unstable"),
    (0, 0x0000, "acpi_pm", "tsc acpi_pm", "warn", "clocksource is acpi_pm although tsc is available",
     "clock-skew/slow-clocksource"),
    (0, 0x0000, "kvm-clock", "kvm-clock hpet", "ok", "kernel clock synchronised, clocksource kvm-clock", None),
], ids=["synchronised-tsc", "unsync-time-error", "sta-unsync-only", "time-error-only", "tsc-demoted",
        "slow-with-tsc", "kvm-clock"])
def test_clock_skew_verdict_from_a_planted_kernel_state_and_clocksource(
        monkeypatch, tmp_path, state, status, current, available, verdict, summary, finding):
    result = _planted_clock(monkeypatch, tmp_path, state=state, status=status, current=current, available=available)
    assert result.status == verdict, result
    assert result.summary.startswith(summary)
    assert f"adjtimex: state {state}, maxerror 16000.0 ms, esterror 1.5 ms, offset 0.250 ms" in result.evidence
    assert f"clocksource: {current} (available: {available})" in result.evidence
    assert [f.id for f in result.findings] == ([finding] if finding else [])


def test_unread_env_config_without_a_serving_process_checks_execsys_own_environment_and_says_so(monkeypatch):
    from execsys.doctor.hazards.unread_env_config import OWN_ENVIRONMENT

    from execsys.observe import environment

    assert OWN_ENVIRONMENT == environment.OWN_ENVIRONMENT == (
        "checked in execsys's own environment (no serving process found)")
    monkeypatch.setenv("EXECSYS_TEST_HOLDS", "1")
    monkeypatch.setenv("EXECSYS_TEST_DIFFERS", "other")
    monkeypatch.delenv("EXECSYS_TEST_MISSING", raising=False)
    port = _free_port()  # nothing listens there: no serving process is found
    declared = {"EXECSYS_TEST_HOLDS": "1", "EXECSYS_TEST_DIFFERS": "wanted", "EXECSYS_TEST_MISSING": "x"}
    result = run_hazard("unread-env-config", DoctorOptions(endpoint_port=port, declared_env=declared))
    assert result.status == "warn"
    assert result.summary == ("EXECSYS_TEST_DIFFERS: declared 'wanted', has 'other' (checked in execsys's own "
                              "environment (no serving process found)); EXECSYS_TEST_MISSING: declared, missing "
                              "(checked in execsys's own environment (no serving process found))")
    assert f"nothing (visible) listens on the declared endpoint port {port}" in result.evidence
    assert ("3 declared variable(s) from [environment] variables; 1 match (checked in execsys's own environment "
            "(no serving process found))") in result.evidence
    holds = run_hazard("unread-env-config", DoctorOptions(declared_env={"EXECSYS_TEST_HOLDS": "1"}))
    assert (holds.status, holds.summary) == ("ok", "the declared [environment] variables hold (checked in "
                                                   "execsys's own environment (no serving process found))")
