"""pin / verify / diff in-process (execsys/identity.py): the verdicts, sentences and changes a user reads.

Written for mutants that survived scripts/mutation.sh (the CLI tests run `execsys pin|verify|diff` in
subprocesses, where a mutant cannot be seen). A real declaration and artifact in tmp_path, a real lock
file; the artifact digests are b3sum's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.errors import InputError
from execsys.identity import (
    SCHEMA,
    ArtifactHashed,
    Cancelled,
    ComponentChecked,
    ComponentObserved,
    Identity,
    describe_change,
    diff_identities,
    diff_sentence,
    field_changes,
    flatten,
    load_lock,
    pin,
    verify,
    write_lock,
)

DECLARATION = """\
[artifact]
path = "model.bin"
format = "gguf"

[budget]
temperature = 0.0
seed = 7
"""


def b3sum(path: Path) -> str:
    done = subprocess.run(["b3sum", "--no-names", str(path)], capture_output=True, timeout=30, check=True)
    return done.stdout.decode().strip()


@pytest.fixture
def pinned(tmp_path: Path) -> tuple[Path, Identity]:
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION)
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    lock = write_lock(identity, tmp_path / "execsys.lock.json")
    return lock, load_lock(lock)


@pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum is installed by scripts/test.sh")
def test_verify_right_after_pin_is_the_same_system(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    assert identity.observed("artifact")["digest"] == b3sum(tmp_path / "model.bin")
    assert identity.declared("budget") == {"temperature": 0.0, "seed": 7}
    report = verify(identity)
    assert report.verdict == "same-system" and report.observed_id == identity.id
    assert report.sentence == f"all twelve components match identity {identity.id[:12]}"
    assert {name: check.status for name, check in report.components.items()} == dict.fromkeys(COMPONENTS, "same")
    data = report.to_json()
    assert (data["schema"], data["lock_id"], data["lock_schema"], data["verdict"]) == (
        "execsys.verify/1", identity.id, SCHEMA, "same-system")
    assert data["components"]["artifact"] == {"status": "same", "changes": [], "reason": None}
    assert (data["observed_id"], data["sentence"]) == (identity.id, report.sentence)
    # who pinned and who checks: shown by `verify`, never compared
    assert data["pinned_observer"] == identity.observer and identity.observer.get("cwd")
    assert data["observer"] == report.observer and report.observer.get("cwd")


def test_verify_tells_what_it_observes_and_stops_on_cancel(pinned: tuple[Path, Identity]) -> None:
    _, identity = pinned
    events: list = []
    verify(identity, on_event=events.append)
    assert [e.name for e in events if isinstance(e, ComponentChecked)] == list(COMPONENTS)
    assert any(isinstance(e, ArtifactHashed) for e in events)
    assert {e.name for e in events if isinstance(e, ComponentObserved)} >= {"artifact", "budget"}
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        verify(identity, cancel=cancel)


def test_an_unreachable_endpoint_makes_the_runtime_unverifiable_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    report = verify(identity)
    runtime = report.components["runtime"]
    assert runtime.status == "unverifiable" and "endpoint http://127.0.0.1:9/v1: unreachable" in (runtime.reason or "")
    assert report.sentence.startswith(f"1 unverifiable (runtime) since {identity.id[:12]} was pinned")


@pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum is installed by scripts/test.sh")
def test_verify_rehashes_the_artifact_and_names_what_moved(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    old = identity.observed("artifact")["digest"]
    (tmp_path / "model.bin").write_bytes(b"weightz")  # same size, one byte moved
    report = verify(identity)
    assert report.verdict == "new-identity" and report.observed_id not in (None, identity.id)
    assert report.sentence == (f"1 changed (artifact) since {identity.id[:12]} was pinned; "
                               "re-measure before comparing results across this change")
    artifact = report.components["artifact"]
    assert artifact.status == "changed"
    assert artifact.changes == [{"field": "observed.digest", "old": old, "new": b3sum(tmp_path / "model.bin")}]
    assert [name for name, check in report.components.items() if check.status != "same"] == ["artifact"]


def test_an_edited_declaration_is_a_move_too(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 8"))
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    assert report.components["budget"].status == "changed"
    assert report.components["budget"].changes == [{"field": "declared.seed", "old": 7, "new": 8}]
    assert report.sentence.startswith(f"1 changed (budget) since {identity.id[:12]} was pinned")


def test_a_missing_artifact_is_unverifiable_not_changed(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "model.bin").unlink()
    report = verify(identity)
    assert report.verdict == "new-identity" and report.observed_id is None
    assert report.components["artifact"].status == "unverifiable"
    assert report.components["artifact"].reason
    assert report.components["budget"].status == "same"
    # the model is read from the artifact's files, so it cannot be checked either
    assert report.sentence == (f"2 unverifiable (model, artifact) since {identity.id[:12]} was pinned; "
                               "re-measure before comparing results across this change")


def test_an_older_schema_is_not_compared_at_all(pinned: tuple[Path, Identity]) -> None:
    _, identity = pinned
    old = Identity(identity.id, identity.recorded_at, identity.components, schema="execsys.identity/1",
                   observer=identity.observer)
    report = verify(old)
    assert report.verdict == "new-identity" and report.observed_id is None
    assert report.sentence == "pinned with identity schema 1; re-pin to compare under schema 2"
    assert {check.status for check in report.components.values()} == {"unverifiable"}
    assert report.components["budget"].to_json() == {"status": "unverifiable", "changes": [],
                                                     "reason": "pinned with identity schema 1"}
    data = report.to_json()
    assert (data["lock_id"], data["lock_schema"]) == (identity.id, "execsys.identity/1")
    assert data["observer"].get("cwd") and data["pinned_observer"] == identity.observer
    assert report.schema_outdated and not verify(identity).schema_outdated


def identity_with(**declared: dict) -> Identity:
    components = {name: {"declared": dict(declared.get(name, {})), "observed": {}} for name in COMPONENTS}
    return Identity(id="0" * 64, recorded_at="2026-12-01T00:00:00Z", components=components, source="lock")


def test_diff_says_what_a_comparison_isolates() -> None:
    a = identity_with(budget={"seed": 1}, artifact={"path": "m"})
    assert diff_identities(a, a).sentence == "same system: no component moved"
    one = diff_identities(a, identity_with(budget={"seed": 2}, artifact={"path": "m"}))
    assert one.moved == ["budget"] and one.sentence == "isolates budget"
    assert one.changes == {"budget": [{"field": "declared.seed", "old": 1, "new": 2}]}
    two = diff_identities(a, identity_with(budget={"seed": 2}, artifact={"path": "n"}, grader={"name": "g"}))
    assert two.moved == ["artifact", "budget", "grader"]  # in component order
    assert two.sentence == "descriptive only: 3 components moved (artifact, budget, grader)"
    data = two.to_json()
    assert data["schema"] == "execsys.diff/1" and data["moved"] == two.moved
    assert data["a"] == {"id": "0" * 64, "recorded_at": "2026-12-01T00:00:00Z", "source": "lock", "schema": SCHEMA}
    assert data["b"] == data["a"]  # identity_with gives every side the same id, time and source
    assert data["changes"] == two.changes and data["sentence"] == two.sentence
    assert two.schema_note is None
    older = identity_with(budget={"seed": 1})
    older.schema = "execsys.identity/1"
    assert diff_identities(older, a).schema_note == (
        "A was pinned with identity schema 1, B with schema 2: fields that moved may reflect the schema, "
        "not the system; re-pin both")
    assert diff_sentence(["x", "y"]) == "descriptive only: 2 components moved (x, y)"


def test_fields_are_compared_by_dotted_path() -> None:
    assert flatten({"a": {"b": 1, "c": {}}, "gpus": [{"uuid": "u0"}, {"uuid": "u1"}], "flags": ["-x", "-y"],
                    "none": []}) == {
        "a.b": 1, "a.c": {}, "gpus[0].uuid": "u0", "gpus[1].uuid": "u1", "gpus.length": 2, "flags": ["-x", "-y"],
        "none": []}
    assert flatten({}) == {} and flatten(5, "x") == {"x": 5}
    assert field_changes({"a": 1, "b": None, "gone": 3}, {"a": 2, "b": None, "new": None}) == [
        {"field": "a", "old": 1, "new": 2}, {"field": "gone", "old": 3, "new": None},
        {"field": "new", "old": None, "new": None}]
    assert field_changes({"gpus": [{"u": 1}]}, {"gpus": [{"u": 1}, {"u": 2}]}) == [
        {"field": "gpus.length", "old": 1, "new": 2}, {"field": "gpus[1].u", "old": None, "new": 2}]


def test_a_change_is_described_in_one_readable_line() -> None:
    digest_a, digest_b = "a" * 64, "b" * 64
    assert describe_change({"field": "observed.digest", "old": digest_a, "new": digest_b}) == (
        "observed.digest: aaaaaaaaaaaaaaaa… -> bbbbbbbbbbbbbbbb…")
    assert describe_change({"field": "seed", "old": 7, "new": None}) == "seed: 7 -> null"
    assert describe_change({"field": "f", "old": ["-x"], "new": "é"}) == 'f: ["-x"] -> é'
    long = "x" * 100
    assert describe_change({"field": "f", "old": long, "new": "x" * 80}) == f"f: {'x' * 77}... -> {'x' * 80}"
    assert describe_change({"field": "f", "old": "A" * 64, "new": "g" * 64}) == f"f: {'A' * 64} -> {'g' * 64}"
    assert describe_change({"field": "f", "old": "X" * 64, "new": ["é"]}) == f'f: {"X" * 64} -> ["é"]'
    assert describe_change({"field": "f", "old": "y" * 81, "new": "z" * 80}) == f"f: {'y' * 77}... -> {'z' * 80}"


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
