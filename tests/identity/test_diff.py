"""`diff` in-process: which components moved between two identities, each change by its dotted field
path, how a change reads in one line, and the sentence that says what a comparison isolates.
"""

from __future__ import annotations

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.identity import (
    SCHEMA,
    Identity,
    describe_change,
    describe_changes,
    diff_identities,
    diff_sentence,
    field_changes,
    flatten,
)


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


def test_a_field_that_was_null_and_is_now_absent_is_a_change() -> None:
    # the id is computed over both, so verify must be able to name the field that moved it
    assert content_id({"kernels": None}) != content_id({})
    assert field_changes({"kernels": None}, {}) == [{"field": "kernels", "old": None, "new": None}]
    assert field_changes({}, {"kernels": None}) == [{"field": "kernels", "old": None, "new": None}]


def test_a_change_is_described_in_one_readable_line() -> None:
    digest_a, digest_b = "a" * 64, "b" * 64
    assert describe_change({"field": "observed.digest", "old": digest_a, "new": digest_b}) == (
        "observed.digest: aaaaaaaaaaaaaaaa… → bbbbbbbbbbbbbbbb…")
    assert describe_change({"field": "observed.digest", "old": digest_a, "new": digest_b}, arrow="->") == (
        "observed.digest: aaaaaaaaaaaaaaaa… -> bbbbbbbbbbbbbbbb…")
    # a record read back from JSON cannot tell a key lost from a value that became null
    assert describe_change({"field": "seed", "old": 7, "new": None}) == "seed: 7 → null"
    assert describe_change({"field": "f", "old": ["-x"], "new": "é"}) == 'f: ["-x"] → é'
    assert describe_change({"field": "f", "old": "x" * 100, "new": "x" * 80}) == f"f: {'x' * 100} → {'x' * 80}"
    assert describe_change({"field": "f", "old": "A" * 64, "new": "g" * 64}) == f"f: {'A' * 64} → {'g' * 64}"
    assert describe_change({"field": "f", "old": "X" * 64, "new": ["é"]}) == f'f: {"X" * 64} → ["é"]'
    assert describe_change({"field": "f", "old": {"a": 1}, "new": 2}) == 'f: {"a": 1} → 2'
    assert describe_change({"field": "f", "old": 1, "new": 2}, under="budget.") == "budget.f: 1 → 2"


def test_a_long_value_shows_only_what_differs_on_both_sides() -> None:
    argv = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/models/tiny.gguf", "--n_threads", "2"]
    [change] = field_changes({"argv": argv}, {"argv": [*argv[:-1], "1"]})
    assert describe_change(change) == "argv: --n_threads 2 → 1"
    [change] = field_changes({"argv": argv}, {"argv": [*argv, "--n_batch", "64"]})
    assert describe_change(change) == "argv: +--n_batch 64"
    old, new = "v" * 130 + "abc" + "w" * 20, "v" * 130 + "abd" + "w" * 20
    assert describe_change({"field": "f", "old": old, "new": new}) == (
        f"f: …{'v' * 10}abc{'w' * 12}… → …{'v' * 10}abd{'w' * 12}…")
    assert describe_change({"field": "f", "old": "x" * 130, "new": "x" * 130 + "y"}) == (
        f"f: …{'x' * 12} → …{'x' * 12}y")


def test_a_table_that_gained_or_lost_a_key_says_plus_or_minus_key_never_null() -> None:
    # an empty table flattens to itself: its key appearing used to read "env: {} -> null"
    gained = field_changes({"env": {}, "seed": 7}, {"env": {"A": "1"}})
    assert [c["field"] for c in gained] == ["env", "env.A", "seed"]  # the record keeps every field
    assert describe_changes(gained) == ["+env.A: 1", "-seed: 7"]
    lost = field_changes({"env": {"A": "1", "B": "2"}}, {"env": {"A": "1"}, "kernels": None})
    assert describe_changes(lost) == ["-env.B: 2", "+kernels: null"]
    emptied = field_changes({"env": {"A": "1"}}, {"env": {}})
    assert describe_changes(emptied) == ["-env.A: 1"]
    # an empty table that went away whole is said, with nothing else to say it
    assert describe_changes(field_changes({"env": {}}, {})) == ["-env: {}"]
    assert describe_changes(field_changes({"gpus": [{"u": 1}]}, {"gpus": [{"u": 1}, {"u": 2}]})) == [
        "gpus.length: 1 → 2", "+gpus[1].u: 2"]
