"""Finding an identity by reference -- a lock file, a ledger record or an id prefix: the newest record
of an identity, one known only from the probes, runs and comparisons taken under it, and an
ambiguous or unknown reference refused in one line. A real SQLite ledger.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from execsys import declaration
from execsys.canonical import content_id
from execsys.errors import InputError
from execsys.identity import (
    Identity,
    load_identity_ref,
    pin,
    record_identity,
)
from execsys.ledger import Ledger
from tests.fixtures.identity_project import write_project


def test_an_identity_is_found_by_lock_record_or_id_prefix(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    from execsys.identity import load_identity_ref, record_identity
    from execsys.ledger import Ledger

    lock, identity = pinned
    assert load_identity_ref(str(lock)).id == identity.id
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        record_id = record_identity(identity, ledger)
        by_record = load_identity_ref(record_id, ledger)
        assert (by_record.id, by_record.source) == (identity.id, f"ledger record {record_id}")
        assert load_identity_ref(identity.id[:10], ledger).id == identity.id
        # a probe taken under an identity the ledger has no record of is known by its id alone
        probe = ledger.append("probe", {"axis": "restart"}, identity="ab" * 32)
        known = load_identity_ref(probe, ledger)
        assert (known.id, known.components) == ("ab" * 32, {})
        assert known.notes == [f"known only by its id from ledger record {probe}: the ledger holds no identity "
                               "record for it"]
        assert load_identity_ref("abab", ledger).id == "ab" * 32
        under = ledger.append("probe", {"axis": "restart"}, identity=identity.id)
        assert load_identity_ref(under, ledger).components == identity.components
        note = ledger.append("note", {"text": "x"})
        with pytest.raises(InputError) as caught:
            load_identity_ref(note, ledger)
        assert str(caught.value) == f"ledger record {note} is a note record and carries no identity"
        with pytest.raises(InputError) as caught:
            load_identity_ref("zz", ledger)
        assert str(caught.value) == (f"'zz' is neither a lock file nor an identity in the ledger {ledger.path} "
                                     "(see 'execsys ledger list --kind identity')")
        with pytest.raises(InputError) as caught:
            load_identity_ref(str(tmp_path / "missing.json"), ledger)
        assert "no such lock file" in str(caught.value)


def _variants(identity: Identity, count: int) -> list[Identity]:
    """Real identities of ``count`` budgets (seed 0, 1, ...): each id is its components' content id."""
    out = []
    for seed in range(count):
        components = json.loads(json.dumps(identity.components))
        components["budget"]["declared"]["seed"] = seed
        out.append(dataclasses.replace(identity, id=content_id(components), components=components))
    return out


@pytest.fixture
def pinned_identity(tmp_path: Path) -> Identity:
    return pin(declaration.load(write_project(tmp_path / "eval")), require_endpoint=False)


def _sharing_a_first_character(identity: Identity, count: int) -> tuple[str, list[Identity]]:
    groups: dict[str, list[Identity]] = {}
    for variant in _variants(identity, 400):
        group = groups.setdefault(variant.id[0], [])
        group.append(variant)
        if len(group) == count:
            return variant.id[0], group
    raise AssertionError("no first character shared")  # pragma: no cover - 400 ids over 16 characters


def test_an_ambiguous_identity_prefix_lists_up_to_four_ids(pinned_identity: Identity, tmp_path: Path) -> None:
    first, group = _sharing_a_first_character(pinned_identity, 5)
    for size in (2, 4, 5):
        with Ledger.open(tmp_path / f"ledger{size}.db") as ledger:
            for identity in group[:size]:
                record_identity(identity, ledger)
                record_identity(identity, ledger)  # an identity pinned_identity twice is one match
            with pytest.raises(InputError) as caught:
                load_identity_ref(first, ledger)
        shown = ", ".join(sorted(i.id[:12] for i in group[:size])[:4])
        more = ", ..." if size > 4 else ""
        assert str(caught.value) == (f"identity prefix '{first}' is ambiguous in the ledger ({shown}{more}): "
                                     "give more characters")
    with Ledger.open(tmp_path / "ledger2.db") as ledger:
        assert load_identity_ref(group[1].id[:20], ledger).id == group[1].id


def test_an_identity_prefix_names_its_newest_record_and_a_record_id_that_record(pinned_identity: Identity,
                                                                                tmp_path: Path) -> None:
    older = dataclasses.replace(pinned_identity, recorded_at="2026-01-01T00:00:00Z")
    newer = dataclasses.replace(pinned_identity, recorded_at="2026-06-01T00:00:00Z")
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        older_id = record_identity(older, ledger)
        newer_id = record_identity(newer, ledger)
        by_prefix = load_identity_ref(pinned_identity.id[:8], ledger)
        assert (by_prefix.recorded_at, by_prefix.source) == (newer.recorded_at, f"ledger record {newer_id}")
        by_record = load_identity_ref(older_id, ledger)
        assert (by_record.recorded_at, by_record.source) == (older.recorded_at, f"ledger record {older_id}")


def test_an_identity_known_only_from_probes_is_found_by_prefix_naming_the_prefix(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        ledger.append("probe", {"axis": "restart"}, identity="ab" * 32)
        known = load_identity_ref("abab", ledger)
        assert (known.id, known.components, known.source) == ("ab" * 32, {}, "identity abab")
        assert known.notes == ["known only by its id from identity abab: the ledger holds no identity record for it"]
        # two identities behind one prefix, each known only from what was taken under it
        ledger.append("comparison", {"verdict": "same"}, identity="ac" * 32)
        with pytest.raises(InputError) as caught:
            load_identity_ref("a", ledger)
        assert str(caught.value) == "identity prefix 'a' is ambiguous in the ledger: give more characters"
        # a plan names the identity it is for, but nothing was taken under it yet
        ledger.append("plan", {"arms": []}, identity="cd" * 32)
        with pytest.raises(InputError) as caught:
            load_identity_ref("cdcd", ledger)
        assert str(caught.value).startswith("'cdcd' is neither a lock file nor an identity in the ledger")


@pytest.mark.parametrize("kind", ["run", "attach"])
def test_an_identity_known_only_from_harness_runs_is_found_by_prefix(tmp_path: Path, kind: str) -> None:
    """A job's ``execsys run`` verified the lock its TaskProlog pinned on the node: the ledger the
    results were gathered into has the run, not the identity record."""
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        run_id = ledger.append(kind, {"verdict": "clean"}, identity="ef" * 32)
        by_prefix = load_identity_ref("efef", ledger)
        assert (by_prefix.id, by_prefix.components, by_prefix.source) == ("ef" * 32, {}, "identity efef")
        by_record = load_identity_ref(run_id, ledger)
        assert (by_record.id, by_record.source) == ("ef" * 32, f"ledger record {run_id}")


def test_an_identity_known_only_by_its_id_reads_as_empty_not_as_an_error(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        probe = ledger.append("probe", {"axis": "restart"}, identity="cd" * 32)
        known = load_identity_ref(probe, ledger)
    assert (known.id, known.source, known.recorded_at) == ("cd" * 32, f"ledger record {probe}", "")
    assert known.to_json()["recorded_at"] == ""
    assert known.observed("artifact") == {} and known.declared("budget") == {}
    assert known.summary == "? no GPU"


def test_a_record_taken_under_an_identity_resolves_to_its_newest_identity_record(tmp_path: Path) -> None:
    (tmp_path / "model.gguf").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model.gguf"\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        # the same system pinned twice: one id, two records
        identity.recorded_at = "2026-01-05T10:00:00Z"
        first = record_identity(identity, ledger)
        identity.recorded_at = "2026-03-07T12:00:00Z"
        newest = record_identity(identity, ledger)
        probe = ledger.append("probe", {"axis": "restart"}, identity=identity.id)
        found = load_identity_ref(probe, ledger)
    assert first != newest
    assert (found.id, found.recorded_at, found.source) == (identity.id, "2026-03-07T12:00:00Z",
                                                           f"ledger record {newest}")


def test_a_ref_the_ledger_refuses_leaves_the_ledger_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger load_identity_ref opens itself is closed before the error reaches the caller: SQLite
    removes the write-ahead log beside it only when the last connection closes."""
    ledger_path = tmp_path / "ledger.db"
    monkeypatch.setenv("EXECSYS_LEDGER", str(ledger_path))
    Ledger.open(ledger_path).close()
    wal = tmp_path / "ledger.db-wal"
    assert not wal.exists()
    with pytest.raises(InputError) as caught:
        load_identity_ref("zz")
    assert "is neither a lock file nor an identity" in str(caught.value)
    assert not wal.exists()
