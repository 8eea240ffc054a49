"""The environment component and its observer as decision tables (issue 26): which declared variables
hold, what is kept of them (a secret-named one only as present), the machine's locale and zone read from
its files, the shells a harness runs through -- real files, real executables on a tmp PATH, a real
serving process -- in milliseconds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from execsys.observe import environment as env_mod
from execsys.observe.environment import (
    OWN_ENVIRONMENT,
    VariablesSource,
    detect_shell,
    locale_facts,
    observe_environment,
    observe_observer,
    observe_shell,
    system_locale,
    system_timezone,
    variables_source,
)
from execsys.redact import REDACTED


def source(**environ: str) -> VariablesSource:
    return VariablesSource(environ, "a test's environment")


# -- the declared variables -------------------------------------------------------------------------


@pytest.mark.parametrize(("declared", "environ", "kept", "not_holding"), [
    ({}, {"A": "1"}, {}, []),
    ({"A": "1"}, {"A": "1"}, {"A": "1"}, []),
    ({"A": "1"}, {"A": "2"}, {"A": "2"}, ["A"]),
    ({"A": "1"}, {}, {"A": None}, ["A"]),
    ({"A": ""}, {"A": ""}, {"A": ""}, []),  # set to the empty string is set
    ({"A": 1}, {"A": "1"}, {"A": "1"}, []),  # a TOML integer is compared as its text
    ({"A": True}, {"A": "true"}, {"A": "true"}, ["A"]),  # str(True) is "True"
    ({"HF_TOKEN": "x"}, {"HF_TOKEN": "something-else"}, {"HF_TOKEN": REDACTED}, []),  # presence only
    ({"HF_TOKEN": "x"}, {}, {"HF_TOKEN": None}, ["HF_TOKEN"]),
    ({"B": "2", "A": "1"}, {"A": "0", "B": "0"}, {"A": "0", "B": "0"}, ["A", "B"]),  # sorted by name
])
def test_declared_variables_hold_or_not(declared: dict, environ: dict, kept: dict, not_holding: list) -> None:
    observed = observe_environment({"variables": declared}, source=source(**environ))
    assert observed["variables"] == kept
    assert list(observed["variables"]) == sorted(kept)
    assert observed["variables_not_holding"] == not_holding


def test_a_value_carrying_a_credential_is_redacted_but_still_compared() -> None:
    url = "https://user:hunter2@mirror.example/simple"
    observed = observe_environment({"variables": {"PIP_INDEX_URL": url}}, source=source(PIP_INDEX_URL=url))
    assert "hunter2" not in observed["variables"]["PIP_INDEX_URL"]
    assert observed["variables_not_holding"] == []


def test_without_a_source_the_own_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECSYS_T_VAR", "yes")
    observed = observe_environment({"variables": {"EXECSYS_T_VAR": "yes"}})
    assert observed["variables"] == {"EXECSYS_T_VAR": "yes"} and observed["variables_not_holding"] == []
    observed = observe_environment({"variables": {"EXECSYS_T_VAR": "yes"}}, source=source())
    assert observed["variables"] == {"EXECSYS_T_VAR": None}


def test_the_component_has_the_machine_s_facts_and_no_shells_unless_one_is_run() -> None:
    observed = observe_environment({}, source=source())
    assert set(observed) == {"container", "locale", "timezone", "variables", "variables_not_holding"}
    assert observed["container"] == (env_mod.detect_container() or "none")
    assert observed["locale"] == system_locale() and observed["timezone"] == system_timezone()
    assert observed["variables"] == {} and observed["variables_not_holding"] == []


# -- the shells -------------------------------------------------------------------------------------


def executable(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_shell_not_on_path_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert observe_shell("zsh", "because") == {"program": "zsh", "executable": None, "because": "because",
                                               "note": "not found on PATH"}


@pytest.mark.parametrize("name", ["bash", "zsh", "ksh", "mksh", "fish"])
def test_a_versioned_shell_gives_its_first_version_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         name: str) -> None:
    from execsys.doctor import files

    path = executable(tmp_path / "bin", name,
                      '[ "$1" = --version ] || { echo "asked $1"; exit 0; }; echo; echo "  GNU fake 5.2  "; echo second')
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}{os.pathsep}{tmp_path / 'bin'}")
    assert observe_shell(name, "runs it") == {"program": name, "executable": str(path), "because": "runs it",
                                              "digest": files.digest(str(path)), "version": "GNU fake 5.2"}


def test_a_failing_version_is_none_and_sh_is_never_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    executable(tmp_path / "bin", "bash", "echo broken; exit 3")
    executable(tmp_path / "bin", "dash", "echo 'dash has no --version'")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert observe_shell("bash", "b")["version"] is None
    assert "version" not in observe_shell("dash", "d")


def test_a_shell_is_known_by_its_real_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = executable(tmp_path / "real", "bash", "echo 'bash 9'")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sh").symlink_to(real)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    record = observe_shell("sh", "via sh")
    assert record["executable"] == str(real) and record["version"] == "bash 9"


def test_the_declared_shell_comes_first_and_a_harness_s_duplicate_keeps_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    executable(tmp_path / "bin", "dash", "true")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    observed = observe_environment({"shell": "dash"}, source=source(),
                                   harness_shells=[("dash", "harness run"), ("ash", "harness eval")])
    assert [(s["program"], s["because"]) for s in observed["shells"]] == [
        ("ash", "harness eval"), ("dash", "declared in [environment] shell")]
    observed = observe_environment({}, source=source(), harness_shells=[("dash", "one"), ("dash", "two")])
    assert [(s["program"], s["because"]) for s in observed["shells"]] == [("dash", "one")]
    assert "shells" not in observe_environment({"shell": ""}, source=source(), harness_shells=[])


# -- the machine's locale and zone, from its files --------------------------------------------------


@pytest.fixture
def etc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """/etc/... read from tmp_path/etc/... (the paths are the module's own; only where they lead moves)."""
    root = tmp_path
    (root / "etc").mkdir()

    def moved(text: Any) -> str:
        text = os.fspath(text)
        return str(root) + text if text.startswith("/etc/") else text

    real_path, real_readlink = env_mod.Path, os.readlink
    monkeypatch.setattr(env_mod, "Path", lambda p, *rest: real_path(moved(p), *rest))
    monkeypatch.setattr(os, "readlink", lambda p, *a, **k: real_readlink(moved(p), *a, **k))
    return root / "etc"


def test_the_zone_is_etc_timezone_s_first(etc: Path) -> None:
    (etc / "timezone").write_text("  Europe/Paris\n")
    (etc / "localtime").symlink_to("/usr/share/zoneinfo/Asia/Tokyo")
    assert system_timezone() == "Europe/Paris"


def test_an_empty_timezone_file_falls_to_the_localtime_link(etc: Path) -> None:
    (etc / "timezone").write_text("\n")
    (etc / "localtime").symlink_to("/usr/share/zoneinfo/America/New_York")
    assert system_timezone() == "America/New_York"


def test_a_link_outside_zoneinfo_or_no_link_is_no_zone(etc: Path) -> None:
    assert system_timezone() is None
    (etc / "localtime").symlink_to("/opt/zones/UTC")
    assert system_timezone() is None


def test_a_nested_zoneinfo_path_keeps_all_after_the_first(etc: Path) -> None:
    (etc / "localtime").symlink_to("../usr/share/zoneinfo/right/zoneinfo/UTC")
    assert system_timezone() == "right/zoneinfo/UTC"


@pytest.mark.parametrize(("files", "expected"), [
    ({}, None),
    ({"default/locale": 'LANG="en_GB.UTF-8"\nLC_ALL=C\n'}, "en_GB.UTF-8"),
    ({"default/locale": "  LANG='de_DE.UTF-8'  \n"}, "de_DE.UTF-8"),
    ({"default/locale": "LANGUAGE=fr\nLANG=\n", "locale.conf": "LANG=C.UTF-8\n"}, "C.UTF-8"),
    ({"default/locale": "# LANG=x\n", "locale.conf": "LC_CTYPE=y\nLANG=pt_BR\n"}, "pt_BR"),
    ({"default/locale": "LANG=a=b\n"}, "a=b"),
    ({"default/locale": "LANG='X'\n"}, "X"),
    ({"default/locale": "LANG=ja_JP\n", "locale.conf": "LANG=zh_CN\n"}, "ja_JP"),
])
def test_the_locale_is_the_first_lang_in_the_locale_files(etc: Path, files: dict, expected: str | None) -> None:
    for name, text in files.items():
        (etc / name).parent.mkdir(parents=True, exist_ok=True)
        (etc / name).write_text(text)
    assert system_locale() == expected


def test_a_locale_file_with_bad_bytes_is_still_read(etc: Path) -> None:
    (etc / "locale.conf").write_bytes(b"X=\xff\nLANG=en_US\n")
    assert system_locale() == "en_US"


# -- the serving process's environment --------------------------------------------------------------


def test_no_runtime_declared_reads_the_own_environment() -> None:
    for declared in (None, {}):
        got = variables_source(declared)
        assert got.environ is os.environ and got.where == OWN_ENVIRONMENT and got.pid is None
    assert OWN_ENVIRONMENT == "checked in execsys's own environment (no serving process found)"


def test_an_endpoint_on_another_machine_reads_the_own_environment() -> None:
    got = variables_source({"endpoint": "http://10.255.255.1:8000/v1"})
    assert got.environ is os.environ and got.where == OWN_ENVIRONMENT and got.pid is None


def test_a_named_serving_process_s_environment_is_read() -> None:
    marker = f"execsys-env-serving-{uuid.uuid4().hex}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker],
                            env={"EXECSYS_T_SERVING": "theirs", "PATH": os.environ.get("PATH", "")})
    try:
        for _ in range(100):  # until its cmdline is readable
            got = variables_source({"process": marker})
            if got.pid is not None:
                break
            time.sleep(0.02)
        assert got.pid == proc.pid
        assert got.where == f"checked in pid {proc.pid}, the serving process"
        assert got.environ.get("EXECSYS_T_SERVING") == "theirs"
        observed = observe_environment({"variables": {"EXECSYS_T_SERVING": "theirs"}}, source=got)
        assert observed["variables_not_holding"] == []
    finally:
        proc.kill()
        proc.wait()


# -- the observer (outside the id) ------------------------------------------------------------------


def test_the_shell_falls_back_to_dollar_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "shellingham", None)  # as where it is not installed
    monkeypatch.setenv("SHELL", "/usr/local/bin/zsh")
    assert detect_shell() == {"name": "zsh", "path": "/usr/local/bin/zsh", "source": "$SHELL"}
    monkeypatch.setenv("SHELL", "")
    assert detect_shell() == {"name": None, "path": None, "source": None}
    monkeypatch.delenv("SHELL")
    assert detect_shell() == {"name": None, "path": None, "source": None}


def test_locale_facts_are_the_process_s_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    import locale

    monkeypatch.setenv("LANG", "en_US.UTF-8")
    monkeypatch.setenv("LC_ALL", "C")
    monkeypatch.delenv("LC_CTYPE", raising=False)
    assert locale_facts() == {"LANG": "en_US.UTF-8", "LC_ALL": "C", "LC_CTYPE": None,
                              "preferred_encoding": locale.getpreferredencoding(False)}
    monkeypatch.setenv("LC_CTYPE", "UTF-8")
    assert locale_facts()["LC_CTYPE"] == "UTF-8"


def test_the_observer_records_who_where_and_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    from execsys import __version__

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("LOGNAME", "alice")
    monkeypatch.setenv("TERM", "xterm-kitty")
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("COLUMNS", "123")
    monkeypatch.setenv("LINES", "45")
    monkeypatch.setenv("VLLM_USE_V1", "1")
    observer = observe_observer()
    assert observer["execsys"] == __version__
    assert observer["python"] == {"version": platform.python_version(),
                                  "implementation": platform.python_implementation(),
                                  "executable": os.path.realpath(sys.executable), "prefix": sys.prefix}
    assert observer["cwd"] == str(tmp_path) and observer["user"] == "alice" and observer["TZ"] == "UTC"
    assert observer["terminal"] == {"TERM": "xterm-kitty", "stdout_is_terminal": sys.stdout.isatty(),
                                    "columns": 123, "lines": 45}
    assert observer["numerics_env"]["VLLM_USE_V1"] == "1"
    assert observer["locale"] == locale_facts() and observer["shell"] == detect_shell()


def test_an_unknown_terminal_size_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "0")
    monkeypatch.setenv("LINES", "0")

    def no_terminal(fd: int = 1) -> os.terminal_size:
        raise OSError(25, "Inappropriate ioctl for device")

    monkeypatch.setattr(os, "get_terminal_size", no_terminal)  # no terminal to ask: the (0, 0) fallback
    terminal = observe_observer()["terminal"]
    assert terminal["columns"] is None and terminal["lines"] is None


def test_a_uid_without_a_name_is_recorded_as_its_number(monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    def nameless() -> str:
        raise KeyError("getpwuid(): uid not found: 4242")

    monkeypatch.setattr(getpass, "getuser", nameless)
    assert observe_observer()["user"] == str(os.getuid())


def test_shellingham_s_answer_is_the_operator_s_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    fake = types.ModuleType("shellingham")
    fake.detect_shell = lambda: ("fish", "/usr/bin/fish")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shellingham", fake)
    monkeypatch.setenv("SHELL", "/bin/bash")
    assert detect_shell() == {"name": "fish", "path": "/usr/bin/fish", "source": "shellingham"}


def test_the_process_listening_on_the_endpoint_s_port_is_the_serving_one(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
            f"open({str(tmp_path / 'ready')!r}, 'w').close(); time.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-c", code],
                            env={"EXECSYS_T_LISTENER": "listening", "PATH": os.environ.get("PATH", "")})
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (tmp_path / "ready").exists():
            time.sleep(0.02)
        got = variables_source({"endpoint": f"http://127.0.0.1:{port}/v1"})
        assert got.pid == proc.pid and got.where == f"checked in pid {proc.pid}, the serving process"
        assert got.environ.get("EXECSYS_T_LISTENER") == "listening"
    finally:
        proc.kill()
        proc.wait()


def test_a_serving_process_whose_environment_cannot_be_read_is_said_so(tmp_path: Path) -> None:
    import shutil

    name = f"exz{uuid.uuid4().hex[:8]}"  # within the kernel's 15-character process name
    program = tmp_path / name
    shutil.copy(shutil.which("true") or "/bin/true", program)
    proc = subprocess.Popen([str(program)])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # a zombie until reaped: named, its environment unreadable
            if Path(f"/proc/{proc.pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                break
            time.sleep(0.01)
        got = variables_source({"process": name})
        assert got.environ is os.environ and got.pid is None
        assert got.where == (f"checked in execsys's own environment (the environment of pid {proc.pid}, the serving "
                             "process, is not readable from this user)")
    finally:
        proc.wait()
