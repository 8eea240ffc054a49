"""The TUI reads its declaration and lock one way: at the session's own paths, never at a default beside them.

Before, three readers disagreed when a named file did not exist yet: the declaration reader fell
back to ./execsys.toml, and the doctor's and plan run's reader to the lock beside the declaration.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from execsys.tui import adapter
from execsys.tui.state import Paths


def test_a_declaration_not_saved_yet_is_empty_not_the_one_in_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EXECSYS_CONFIG", raising=False)
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "other-model.bin"\n')
    paths = Paths.resolve(tmp_path / "eval" / "execsys.toml", None)  # named, not written yet
    assert adapter.declared(paths, "artifact", "path") is None
    assert adapter.session_sources(paths).declaration.path is None
    here = Paths.resolve(None, None)
    assert adapter.declared(here, "artifact", "path") == "other-model.bin"


def test_a_named_lock_not_pinned_yet_is_no_lock_not_the_one_beside_the_declaration(
        cli, tmp_path: Path, ledger_path: Path) -> None:
    project = tmp_path / "eval"
    project.mkdir()
    (project / "model.bin").write_bytes(b"weights")
    (project / "execsys.toml").write_text('[artifact]\npath = "model.bin"\n')
    pinned = cli("pin", cwd=project)
    assert pinned.returncode == 0, pinned.stderr
    (project / "execsys.toml").write_text("")  # the declaration is silent: only a lock names the artifact
    beside = Paths.resolve(project / "execsys.toml", None)
    assert adapter.doctor_options(beside, ["local"]).artifact_path == str(project / "model.bin")
    named = Paths.resolve(project / "execsys.toml", None, lock=project / "other.lock.json")
    assert adapter.doctor_options(named, ["local"]).artifact_path is None
    assert adapter.session_sources(named).lock is None
    assert adapter.session_sources(named).lock_path == project / "other.lock.json"
