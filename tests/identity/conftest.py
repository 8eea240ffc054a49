"""What the identity tests pin: the small declared system, pinned and locked; a project directory
holding its artifact; a declaration that declares more than the artifact."""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys import declaration
from execsys.identity import (
    Identity,
    load_lock,
    pin,
    write_lock,
)
from tests.fixtures.identity_project import (
    RICH,
    llama_model_dir,
    write_project,
)


@pytest.fixture
def pinned(tmp_path: Path) -> tuple[Path, Identity]:
    identity = pin(declaration.load(write_project(tmp_path)), require_endpoint=False)
    lock = write_lock(identity, tmp_path / "execsys.lock.json")
    return lock, load_lock(lock)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "model.bin").write_bytes(b"weights")
    return tmp_path


@pytest.fixture
def rich(tmp_path: Path) -> Path:
    llama_model_dir(tmp_path)
    (tmp_path / "template.jinja").write_text("{{ messages }}\n")
    (tmp_path / "index.bin").write_bytes(b"index")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("a")
    (tmp_path / "corpus" / "b.txt").write_text("b")
    (tmp_path / "execsys.toml").write_text(RICH)
    return tmp_path
