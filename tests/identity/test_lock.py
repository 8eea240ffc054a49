"""The lock file: every documented field written and read back as it was, and a lock that is not an
identity, not JSON, edited by hand or wrongly typed refused in one line naming the file and field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.errors import InputError
from execsys.identity import (
    SCHEMA,
    Identity,
    load_lock,
    write_lock,
)


def test_the_lock_file_holds_every_documented_field(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    data = json.loads(lock.read_text())
    assert data == {"schema": SCHEMA, "id": identity.id, "recorded_at": identity.recorded_at,
                    "summary": identity.summary, "declaration": identity.declaration,
                    "components": identity.components, "notes": identity.notes, "observer": identity.observer,
                    "live": identity.live}
    assert data["recorded_at"].startswith("20") and data["summary"].startswith("artifact ")
    assert data["declaration"] == {"path": str(tmp_path / "execsys.toml"), "base_dir": str(tmp_path)}
    with pytest.raises(InputError) as caught:
        write_lock(identity, tmp_path)
    assert str(caught.value) == (f"{tmp_path}: is a directory, not a regular file: refusing to replace it "
                                 "(cannot write the lock there)")


def test_a_lock_reads_back_what_was_written(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    loaded = load_lock(lock)
    assert (loaded.id, loaded.recorded_at, loaded.schema, loaded.source) == (
        identity.id, identity.recorded_at, SCHEMA, str(lock))
    assert (loaded.components, loaded.declaration, loaded.notes, loaded.observer, loaded.live) == (
        identity.components, identity.declaration, identity.notes, identity.observer, identity.live)
    data = json.loads(lock.read_text())
    for key in ("recorded_at", "declaration", "notes", "observer", "live"):
        del data[key]
    bare = tmp_path / "bare.lock.json"
    bare.write_text(json.dumps(data))
    loaded = load_lock(bare)
    assert (loaded.recorded_at, loaded.declaration, loaded.notes, loaded.observer, loaded.live) == ("", {}, [], {}, {})
    data["live"] = ["not", "a", "table"]
    bare.write_text(json.dumps(data))
    assert load_lock(bare).live == {}


def test_a_lock_that_is_not_an_identity_is_refused_naming_why(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    data = json.loads(lock.read_text())

    def problem(body: object) -> str:
        path = tmp_path / "bad.lock.json"
        path.write_text(json.dumps(body))
        with pytest.raises(InputError) as caught:
            load_lock(path)
        return str(caught.value)

    assert problem([1]) == f"{tmp_path / 'bad.lock.json'}: not an execsys identity (expected a JSON object)"
    assert "identity schema 'execsys.identity/9' is not understood" in problem({**data, "schema": "execsys.identity/9"})
    short = {**data, "components": {k: v for k, v in data["components"].items() if k != "tools"}}
    assert "'components' must hold exactly the twelve components (model, artifact, " in problem(short)
    broken = json.loads(lock.read_text())
    broken["components"]["tools"] = {"declared": {}}
    assert "component 'tools' must be" in problem(broken)
    assert "the id does not match the components" in problem({**data, "id": "f" * 64})
    assert load_lock(lock).id == identity.id
    assert identity.summary.startswith(f"artifact {identity.observed('artifact')['digest'][:12]} ")


def test_a_lock_is_read_whole_or_refused_in_one_line(tmp_path: Path) -> None:
    golden = json.loads((Path(__file__).parents[1] / "data" / "golden" / "execsys.lock.json").read_text(encoding="utf-8"))
    older = tmp_path / "older.lock.json"
    older.write_text(json.dumps({**golden, "schema": "execsys.identity/1", "live": {"engine": {"uptime_s": 5}}}))
    loaded = load_lock(older)
    assert (loaded.schema, loaded.schema_version, loaded.live) == ("execsys.identity/1", 1, {"engine": {"uptime_s": 5}})
    binary = tmp_path / "binary.lock.json"
    binary.write_bytes(b"\xff{}")
    with pytest.raises(InputError) as caught:
        load_lock(binary)
    assert str(caught.value) == (f"{binary}: cannot read ('utf-8' codec can't decode byte 0xff in position 0: "
                                 "invalid start byte)")
    with pytest.raises(InputError) as caught:
        load_lock(tmp_path)
    assert str(caught.value) == f"lock {tmp_path}: is a directory, not a regular file"

    def problem(body: object) -> str:
        path = tmp_path / "bad.lock.json"
        path.write_text(json.dumps(body))
        with pytest.raises(InputError) as caught:
            load_lock(path)
        return str(caught.value).removeprefix(f"{path}: ")

    assert problem({**golden, "schema": "execsys.identity/9"}) == (
        "identity schema 'execsys.identity/9' is not understood (this execsys reads execsys.identity/2); "
        "re-pin with 'execsys pin' or upgrade execsys")
    assert problem({**golden, "id": "f" * 64}) == ("the id does not match the components it claims to identify "
                                                   "(edited by hand?); re-pin with 'execsys pin'")
    assert problem({**golden, "components": {**golden["components"], "tools": []}}) == (
        "component 'tools' must be {\"declared\": {...}, \"observed\": {...}}")


def test_a_lock_that_is_not_json_is_refused_naming_the_file(tmp_path: Path) -> None:
    lock = tmp_path / "execsys.lock.json"
    lock.write_text("{")
    with pytest.raises(InputError) as caught:
        load_lock(lock)
    assert str(caught.value).startswith(f"{lock}: not valid JSON (Expecting property name enclosed in double quotes")
    lock.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InputError) as caught:
        load_lock(lock)
    assert str(caught.value) == f"{lock}: nested too deeply to be a lock"


def _relocked(tmp_path: Path, edit) -> str:
    from execsys.canonical import content_id

    data = json.loads((Path(__file__).parents[1] / "data" / "golden" / "execsys.lock.json").read_text(encoding="utf-8"))
    edit(data)
    data["id"] = content_id(data["components"])
    path = tmp_path / "edited.lock.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        load_lock(path)
    return str(caught.value).removeprefix(f"{path}: ")


def test_a_lock_with_wrongly_typed_fields_is_refused_naming_the_field(tmp_path: Path) -> None:
    def declared_seed(data: dict) -> None:
        data["components"]["budget"]["declared"]["seed"] = "seven"

    def size(value: object):
        return lambda data: data["components"]["artifact"]["observed"].__setitem__("size_bytes", value)

    def top(key: str, value: object):
        return lambda data: data.__setitem__(key, value)

    def declaration_field(key: str, value: object):
        return lambda data: data["declaration"].__setitem__(key, value)

    assert _relocked(tmp_path, declared_seed) == "components.budget.declared.seed must be an integer, not str"
    assert _relocked(tmp_path, size("64")) == "components.artifact.observed.size_bytes must be a int, not str"
    assert _relocked(tmp_path, size(True)) == "components.artifact.observed.size_bytes must be a int, not bool"
    assert _relocked(tmp_path, lambda d: d["components"]["hardware"]["observed"].__setitem__("gpus", {})) == (
        "components.hardware.observed.gpus must be a list, not dict")
    assert _relocked(tmp_path, top("notes", "x")) == "'notes' must be a list, not str"
    assert _relocked(tmp_path, top("observer", [])) == "'observer' must be a dict, not list"
    assert _relocked(tmp_path, top("recorded_at", 5)) == "'recorded_at' must be a str, not int"
    assert _relocked(tmp_path, top("declaration", "x")) == "'declaration' must be a dict, not str"
    assert _relocked(tmp_path, declaration_field("path", 5)) == "declaration.path must be a string, not int"
    assert _relocked(tmp_path, declaration_field("base_dir", [])) == "declaration.base_dir must be a string, not list"
