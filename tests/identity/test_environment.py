"""Where pin and verify read the declared ``[environment] variables``, and how every message names it:
the serving process's environment, by its pid, whenever one is found ([runtime] process); execsys's own
environment, said so, where there is none. The pid and the place are outside the id (the lock's ``live``),
the values inside it.

A real Python process started with its own environment stands for the serving engine (found by the
marker in its argv, as a declared ``[runtime] process`` is); the real llama.cpp server, through the CLI,
is in tests/test_environment_variables.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from execsys import declaration
from execsys.identity import load_lock, pin, verify, write_lock
from execsys.observe.environment import OWN_ENVIRONMENT
from tests.fixtures.identity_project import DECLARATION, write_project

VAR = "EXECSYS_TEST_ENV_DECLARED"
VAR2 = "EXECSYS_TEST_ENV_DECLARED_TOO"
UNSET = "EXECSYS_TEST_ENV_NEVER_SET"


class ServingProcess:
    """A real process with an environment of its own, found by the marker in its argv."""

    def __init__(self) -> None:
        self.marker = f"execsys-serving-{uuid.uuid4().hex}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, value: str) -> int:
        env = {key: val for key, val in os.environ.items() if key not in (VAR, UNSET)}
        env[VAR] = value
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", self.marker], env=env)
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def serving() -> Iterator[ServingProcess]:
    process = ServingProcess()
    try:
        yield process
    finally:
        process.stop()


def _declare(directory: Path, runtime: str = "", *, also: str = "") -> declaration.Declaration:
    text = DECLARATION + runtime + f'\n[environment]\nvariables = {{ {VAR} = "pinned", {also}{UNSET} = "x" }}\n'
    return declaration.load(write_project(directory, text))


def test_without_a_serving_process_pin_and_verify_read_execsys_own_environment_and_say_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "pinned")
    monkeypatch.setenv(VAR2, "pinned")
    monkeypatch.delenv(UNSET, raising=False)
    decl = _declare(tmp_path, also=f'{VAR2} = "pinned", ')
    identity = pin(decl, require_endpoint=False)
    assert identity.components["environment"]["observed"]["variables"] == {VAR: "pinned", VAR2: "pinned", UNSET: None}
    assert identity.live == {"environment": {"variables_checked": {"where": OWN_ENVIRONMENT, "pid": None}}}
    assert f"declared [environment] variables that do not hold: {UNSET} ({OWN_ENVIRONMENT})" in identity.notes
    lock = write_lock(identity, tmp_path / "execsys.lock.json")

    # only the declaration was edited: nothing moved in the environment read, and the reason says none did
    edited = _declare(tmp_path, also=f'{VAR2} = "edited", ')
    report = verify(load_lock(lock), declaration=edited)
    environment = report.components["environment"]
    assert (environment.status, environment.reason) == ("changed", None)
    assert [c["field"] for c in environment.changes] == [f"declared.variables.{VAR2}"]

    # both values moved: both are named, in order
    monkeypatch.setenv(VAR, "moved")
    monkeypatch.setenv(VAR2, "moved")
    report = verify(load_lock(lock))
    environment = report.components["environment"]
    assert (environment.status, environment.reason) == (
        "changed", f"[environment] variables {VAR}, {VAR2}: {OWN_ENVIRONMENT}")
    assert [c["field"] for c in environment.changes] == [f"observed.variables.{VAR}", f"observed.variables.{VAR2}",
                                                          "observed.variables_not_holding"]
    assert report.verdict == "new-identity"


def test_pin_and_verify_read_the_serving_process_environment_and_name_its_pid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serving: ServingProcess) -> None:
    pid = serving.start("pinned")
    monkeypatch.setenv(VAR, "elsewhere")  # execsys's own value does not count
    identity = pin(_declare(tmp_path, f'\n[runtime]\nprocess = "{serving.marker}"\n'), require_endpoint=False)
    where = f"checked in pid {pid}, the serving process"
    assert identity.components["environment"]["observed"]["variables"] == {VAR: "pinned", UNSET: None}
    assert identity.live["environment"] == {"variables_checked": {"where": where, "pid": pid}}
    assert f"declared [environment] variables that do not hold: {UNSET} ({where})" in identity.notes
    lock = write_lock(identity, tmp_path / "execsys.lock.json")

    # the engine restarted with another value: verify names the variable and the process it read
    serving.stop()
    pid = serving.start("restarted")
    monkeypatch.setenv(VAR, "pinned")
    report = verify(load_lock(lock))
    environment = report.components["environment"]
    assert (environment.status, environment.reason) == (
        "changed", f"[environment] variables {VAR}: checked in pid {pid}, the serving process")
    assert report.components["runtime"].status == "same"  # a restart alone is no move of the runtime

