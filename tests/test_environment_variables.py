"""`[environment] variables` mean one thing: the serving process's environment wherever one is declared or
found (pin, verify; the doctor's unread-env-config in tests/test_doctor_hazards.py), named by its pid; execsys's
own environment, said so, where there is none. Against a real llama.cpp server started with its own environment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.llama import LlamaServer

SERVED = "EXECSYS_TEST_SERVED_ONLY"


def _declare(directory: Path, endpoint: str) -> None:
    (directory / "execsys.toml").write_text(
        f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{endpoint}"\n'
        f'[environment]\nvariables = {{ {SERVED} = "served" }}\n')


def test_pin_and_verify_read_the_variables_of_the_serving_process_and_name_its_pid(
        cli, tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SERVED, "served")  # the server starts with it ...
    server = LlamaServer(tiny_gguf).start()
    try:
        monkeypatch.delenv(SERVED)  # ... and execsys runs without it
        _declare(tmp_path, server.base_url)
        pinned = cli("pin", "--json", cwd=tmp_path)
        assert pinned.returncode == 0, pinned.stderr
        lock = pinned.json()
        env = lock["components"]["environment"]["observed"]
        assert env["variables"] == {SERVED: "served"} and env["variables_not_holding"] == []
        assert lock["live"]["environment"] == {"variables_checked": {
            "where": f"checked in pid {server.pid}, the serving process", "pid": server.pid}}
        assert not any(SERVED in note for note in lock["notes"])
        # the engine restarted without it: verify says which variable moved, and in which process
        monkeypatch.setenv(SERVED, "elsewhere")  # execsys's own value does not count
        server.stop()
        monkeypatch.delenv(SERVED)
        server.start()
        monkeypatch.setenv(SERVED, "served")
        verified = cli("verify", "--json", cwd=tmp_path)
        environment = verified.json()["components"]["environment"]
        assert environment["status"] == "changed"
        assert environment["reason"] == f"[environment] variables {SERVED}: checked in pid {server.pid}, the serving process"
        repinned = cli("pin", "--json", cwd=tmp_path).json()
        assert (f"declared [environment] variables that do not hold: {SERVED} (checked in pid {server.pid}, the "
                "serving process)") in repinned["notes"]
    finally:
        server.stop()


def test_without_a_serving_process_pin_says_it_checked_its_own_environment(
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVED, raising=False)
    (tmp_path / "execsys.toml").write_text(f'[environment]\nvariables = {{ {SERVED} = "served" }}\n')
    lock = cli("pin", "--json", cwd=tmp_path).json()
    assert lock["live"]["environment"] == {"variables_checked": {
        "where": "checked in execsys's own environment (no serving process found)", "pid": None}}
    assert (f"declared [environment] variables that do not hold: {SERVED} (checked in execsys's own environment "
            "(no serving process found))") in lock["notes"]
