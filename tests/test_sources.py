"""One rule for where the declaration and the lock are (execsys.sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys.errors import InputError
from execsys.operation import first_given
from execsys.sources import config_path, default_lock, load_sources, lock_path, no_identity_reason


def test_lock_lives_beside_the_declaration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXECSYS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_lock(None) == Path("execsys.lock.json")
    assert default_lock("eval/execsys.toml") == Path("eval/execsys.lock.json")
    assert lock_path("other.json", "eval/execsys.toml") == Path("other.json")


def test_config_env_names_the_declaration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECSYS_CONFIG", str(tmp_path / "eval" / "execsys.toml"))
    assert config_path(None) == tmp_path / "eval" / "execsys.toml"
    assert default_lock(None) == tmp_path / "eval" / "execsys.lock.json"
    assert config_path("x.toml") == Path("x.toml")


def test_empty_paths_are_errors_not_defaults() -> None:
    with pytest.raises(InputError, match="declaration path is empty"):
        config_path("")
    with pytest.raises(InputError, match="lock path is empty"):
        lock_path(" ", None)


def test_missing_named_declaration_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXECSYS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no such declaration"):
        load_sources("eval/execsys.toml")
    sources = load_sources(None)  # the default one may be absent
    assert sources.lock is None
    assert sources.no_identity("this probe") == no_identity_reason(Path("execsys.lock.json"), "this probe")
    assert "looked for execsys.lock.json" in (sources.no_identity("this probe") or "")


def test_named_lock_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXECSYS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no such lock file"):
        load_sources(None, "missing.lock.json")


def test_a_broken_default_lock_is_not_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXECSYS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "execsys.lock.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_sources(None)


def test_first_given_keeps_zero_and_false() -> None:
    assert first_given(None, 0, 5) == 0
    assert first_given(None, False, True) is False
    assert first_given(None, None) is None
