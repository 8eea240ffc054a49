"""A real SQLite ledger, and the locks of the base system and of two systems moved from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys.ledger import Ledger
from tests.fixtures.compare_records import BASE, write_lock


@pytest.fixture
def ledger(tmp_path: Path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as opened:
        yield opened


@pytest.fixture
def locks(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    out = {}
    for name, declared in {
        "base": BASE,
        "runtime": {**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}},
        "both": {**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}, "hardware": {"host": "gpu2"}},
    }.items():
        path = tmp_path / f"{name}.lock.json"
        out[name] = (path, write_lock(path, **declared))
    return out
