"""The fleet's options and ``--ledger-since`` as tables: each refusal's whole message (what the user reads),
the expected digest's precedence with a real lock, and the time arithmetic under a local time zone that is
not UTC (a naive time read as UTC, never as the machine's local time).

Written against the survivors of the fleet package's mutation run (scripts/mutation.sh fleet); test names
avoid the words the script's -k filter leaves out."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.errors import InputError, UsageError
from execsys.fleet import FleetOptions, parse_since, run_fleet
from execsys.identity import load_lock, pin, write_lock
from execsys.ledger import Ledger, new_id

A, B, C = "a" * 64, "b" * 64, "c" * 64
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def report(tmp_path: Path) -> str:
    path = tmp_path / "r.json"
    path.write_text("{}")
    return str(path)


@pytest.fixture
def new_york(monkeypatch):
    """This process's local time zone five hours behind UTC (no daylight saving), restored after."""
    monkeypatch.setenv("TZ", "EST+5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# -- refusals: the whole message ------------------------------------------------------------------------

def test_no_source_names_all_three(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        FleetOptions.from_sources(None, None)
    assert str(caught.value) == "no host reports: give REPORT files, --from-ansible DIR or --ledger-since T"


def test_an_ansible_source_that_is_a_file(report: str) -> None:
    with pytest.raises(InputError) as caught:
        FleetOptions.from_sources(None, None, from_ansible=report)
    assert str(caught.value) == (f"--from-ansible {report}: not a directory (an Ansible fact cache or --tree "
                                 "output)")


def test_a_fifo_at_prom_is_refused_before_any_report_is_read(tmp_path: Path, report: str) -> None:
    fifo = tmp_path / "fleet.prom"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as caught:
        FleetOptions.from_sources(None, None, reports=[report], prom=str(fifo))
    assert str(caught.value) == (f"{fifo}: is a FIFO (named pipe), not a regular file: refusing to replace it "
                                 "(cannot write the Prometheus textfile there)")


@pytest.mark.parametrize("digest", [
    pytest.param("z" * 64, id="64-characters-not-hex"),
    pytest.param("a" * 63, id="63-hex"),
    pytest.param("a" * 65, id="65-hex"),
    pytest.param("sha256:" + "a" * 57, id="prefixed"),
])
def test_an_expected_digest_that_is_no_blake3_digest(report: str, digest: str) -> None:
    with pytest.raises(UsageError) as caught:
        FleetOptions.from_sources(None, None, reports=[report], expected_digest=digest)
    assert str(caught.value) == f"--expected-digest {digest!r}: not a BLAKE3 hex digest (64 hex characters)"


@pytest.mark.parametrize(("given", "held"), [
    pytest.param(" " + "AB" * 32 + "\n", "ab" * 32, id="upper-case-and-spaces-normalised"),
    pytest.param("0123456789abcdef" * 4, "0123456789abcdef" * 4, id="every-hex-digit"),
])
def test_an_expected_digest_is_held_normalised(report: str, given: str, held: str) -> None:
    options = FleetOptions.from_sources(None, None, reports=[report], expected_digest=given)
    assert (options.expected_digest, options.expected_source) == (held, "--expected-digest")


@pytest.mark.parametrize("text", ["7x", "", "yesterday"])
def test_a_since_that_is_neither_a_time_nor_an_age(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_since(text, NOW)
    assert str(caught.value) == (f"--ledger-since {text!r}: not an ISO date/time (2026-12-01T08:00) or an age "
                                 "(90m, 24h, 7d)")


# -- what the options hold --------------------------------------------------------------------------

def test_the_options_keep_every_source_given(tmp_path: Path, report: str) -> None:
    options = FleetOptions.from_sources(None, None, reports=[report], ledger_path="l.db")
    assert (options.reports, options.from_ansible, options.ledger_since, options.ledger_path, options.prom) == (
        [report], None, None, "l.db", None)
    assert (options.expected_digest, options.expected_source) == (None, None)
    tree = tmp_path / "tree"
    tree.mkdir()
    prom = str(tmp_path / "fleet.prom")
    by_tree = FleetOptions.from_sources(None, None, from_ansible=str(tree), prom=prom)
    assert (by_tree.reports, by_tree.from_ansible, by_tree.prom) == ([], str(tree), prom)
    by_ledger = FleetOptions.from_sources(None, None, ledger_since="2026-11-30T08:00Z")
    assert (by_ledger.reports, by_ledger.ledger_since) == ([], "2026-11-30T08:00:00.000Z")


def _locked(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model.bin"\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"))
    lock = write_lock(identity, tmp_path / "execsys.lock.json")
    return lock, str(identity.observed("artifact")["digest"])


def test_the_lock_s_pinned_digest_is_expected_below_the_flag_and_above_the_declaration(
        tmp_path: Path, report: str) -> None:
    lock_path, pinned = _locked(tmp_path)
    lock = load_lock(lock_path)
    decl = declaration.parse(f'[artifact]\npath = "/m"\ndigest = "{C}"\n', tmp_path / "d.toml")
    by_lock = FleetOptions.from_sources(decl, lock, reports=[report])
    assert (by_lock.expected_digest, by_lock.expected_source) == (pinned, f"the lock ({lock_path})")
    by_flag = FleetOptions.from_sources(decl, lock, reports=[report], expected_digest=B)
    assert (by_flag.expected_digest, by_flag.expected_source) == (B, "--expected-digest")
    lock.source = None  # a lock read from the ledger, say: named by what it is
    unnamed = FleetOptions.from_sources(None, lock, reports=[report])
    assert (unnamed.expected_digest, unnamed.expected_source) == (pinned, "the lock (pinned identity)")


def test_a_lock_without_a_digest_leaves_it_to_the_declaration(tmp_path: Path, report: str) -> None:
    lock_path, _ = _locked(tmp_path)
    lock = load_lock(lock_path)
    lock.components["artifact"]["observed"].pop("digest")
    decl = declaration.parse(f'[artifact]\npath = "/m"\ndigest = "{C}"\n', tmp_path / "d.toml")
    options = FleetOptions.from_sources(decl, lock, reports=[report])
    assert (options.expected_digest, options.expected_source) == (C, f"the declaration ({tmp_path / 'd.toml'})")
    neither = FleetOptions.from_sources(None, lock, reports=[report])
    assert (neither.expected_digest, neither.expected_source) == (None, None)


# -- --ledger-since: the arithmetic ----------------------------------------------------------------

def test_an_age_older_than_any_date_is_the_first_instant() -> None:
    assert parse_since("100000000000d", NOW) == "0001-01-01T00:00:00.000Z"


def test_a_naive_time_is_utc_whatever_the_local_zone(new_york) -> None:
    assert parse_since("2026-11-30T08:00", NOW) == "2026-11-30T08:00:00.000Z"
    assert parse_since("2026-11-30T08:00:00-05:00", NOW) == "2026-11-30T13:00:00.000Z"
    assert parse_since("100000000000d", NOW) == "0001-01-01T00:00:00.000Z"
    assert parse_since("90m", NOW) == "2026-12-01T10:30:00.000Z"


def test_an_age_without_now_counts_back_from_the_current_utc_time(new_york) -> None:
    before = datetime.now(timezone.utc)
    since = parse_since("1h")
    after = datetime.now(timezone.utc)
    assert since.endswith("Z")
    when = datetime.fromisoformat(since.replace("Z", "+00:00"))
    # shown to the millisecond, cut down
    assert before - timedelta(hours=1, milliseconds=1) <= when <= after - timedelta(hours=1)


def test_a_ledger_since_in_the_future_finds_nothing(tmp_path: Path) -> None:
    options = FleetOptions.from_sources(None, None, ledger_since="2999-01-01T00:00:00Z",
                                        ledger_path=str(tmp_path / "ledger.db"))
    with pytest.raises(InputError) as caught:
        run_fleet(options)
    assert str(caught.value) == "no host reports found in the ledger since 2999-01-01T00:00:00.000Z"


# -- the ledger's records since a time ---------------------------------------------------------------

def _append_at(path: Path, kind: str, body: dict, created_at: str) -> str:
    """A record as the ledger stores one, made at ``created_at`` (``Ledger.append`` stamps the time of the
    append; the rows here were made at other times, as in a ledger gathered from a node)."""
    with Ledger.open(path):
        pass  # the schema
    record_id = new_id(kind)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO records (id, kind, identity, parent, key, created_at, body) VALUES (?,?,?,?,?,?,?)",
                     (record_id, kind, None, None, None, created_at, json.dumps(body, sort_keys=True)))
    return record_id


def _doctor(name: str | None, status: str) -> dict:
    return {"schema": "execsys.doctor/1", "host": {"name": name} if name else {},
            "hazards": [{"id": "x", "status": status}]}


def _pin(name: str, *, digest: str, declared: str | None) -> dict:
    components = {c: {"declared": {}, "observed": {}} for c in COMPONENTS}
    components["artifact"] = {"declared": {"digest": declared} if declared else {}, "observed": {"digest": digest}}
    components["hardware"]["observed"] = {"hostname": name}
    return {"schema": "execsys.identity/1", "id": f"id-{name}", "components": components}


def test_the_ledger_since_a_time_keeps_a_record_made_at_that_time_and_later_ones(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    _append_at(path, "doctor", _doctor("n1", "fail"), "2026-01-01T00:00:00.000Z")  # first, before the time
    at = _append_at(path, "doctor", _doctor("n1", "ok"), "2026-06-01T00:00:00.000Z")
    later = _append_at(path, "doctor", _doctor("n2", "warn"), "2026-06-02T00:00:00.000Z")
    _append_at(path, "doctor", _doctor("n3", "fail"), "2026-05-31T23:59:59.999Z")
    report = run_fleet(FleetOptions.from_sources(None, None, ledger_since="2026-06-01T00:00:00Z",
                                                 ledger_path=str(path)))
    by_name = {r.host: r for r in report.records}
    assert sorted(by_name) == ["n1", "n2"]
    assert (by_name["n1"].hazards, by_name["n1"].report) == ({"x": "ok"}, at)
    assert (by_name["n2"].hazards, by_name["n2"].report) == ({"x": "warn"}, later)


def test_a_ledger_record_without_a_name_is_named_by_its_id_and_a_declared_digest_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger:
        nameless = ledger.append("doctor", _doctor(None, "ok"))
        pinned = ledger.append("identity", _pin("n1", digest=A, declared=B))
        ledger.append("identity", _pin("n2", digest=A, declared=None))
    report = run_fleet(FleetOptions.from_sources(None, None, ledger_since="1970-01-01T00:00:00Z",
                                                 ledger_path=str(path)))
    by_name = {r.host: r for r in report.records}
    assert sorted(by_name) == ["n1", "n2", f"record {nameless}"]
    assert (by_name["n1"].digest, by_name["n1"].declared_digest) == (A, B)
    # n1 is held to its own declared digest (B), n2 to the fleet's modal one
    assert [d["host"] for d in report.digest_match()["defects"]] == ["n1"]
    assert report.digest_match()["defects"][0] == {"host": "n1", "report": pinned, "digest": A, "expected": B}


def test_a_fleet_without_digests_expects_none_and_names_no_source(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps(_doctor("n1", "ok")))
    report = run_fleet(FleetOptions.from_sources(None, None, reports=[str(path)]))
    assert report.digest_match() == {"k": 0, "n": 0, "ratio": None, "expected": None, "expected_source": None,
                                     "defects": []}


# -- report files that cannot be read, and the inventory's names ----------------------------------------

def test_an_unreadable_report_says_why_in_its_own_words(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    gone = tmp_path / "gone.json"  # removed after the options were made
    report = run_fleet(FleetOptions(reports=[str(fifo), str(gone)]))
    assert list(report.problems()) == [
        {"host": "pipe", "report": str(fifo),
         "problem": f"unreadable report: host report {fifo}: is a FIFO (named pipe), not a regular file"},
        {"host": "gone", "report": str(gone), "problem": "unreadable report: No such file or directory"},
    ]


def test_an_ansible_tree_names_each_node_by_its_inventory_file(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "inv-1").write_text(json.dumps(_doctor("gpu-1.example", "ok")))
    (tree / "inv-2.json").write_text(json.dumps(_doctor("gpu-2.example", "warn")))
    by_tree = run_fleet(FleetOptions.from_sources(None, None, from_ansible=str(tree)))
    assert [(r.host, r.hazards) for r in by_tree.records] == [("inv-1", {"x": "ok"}), ("inv-2", {"x": "warn"})]
    # the same files given as REPORT: named by what they say
    by_files = run_fleet(FleetOptions.from_sources(None, None, reports=[str(tree)]))
    assert [r.host for r in by_files.records] == ["gpu-1.example", "gpu-2.example"]


# -- one node's reports of two kinds, and what cannot be paired --------------------------------------

def _files(tmp_path: Path, *docs: tuple[str, object]) -> list[str]:
    """Each (name, document) in a directory of its own, so two files may share a name; given in order."""
    paths = []
    for i, (name, doc) in enumerate(docs):
        directory = tmp_path / f"d{i}"
        directory.mkdir(parents=True)
        path = directory / name
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        paths.append(str(path))
    return paths


FACTS_N1 = {"execsys": {"doctor": {"hazards": {"x": "ok"}},
                        "identity": {"id": "id-n1", "components": dict.fromkeys(COMPONENTS, "sha256:1")},
                        "artifact": {"blake3": A}}}


@pytest.mark.parametrize("second", [
    pytest.param(("d.json", _doctor("n1", "ok")), id="facts-then-a-doctor-report"),
    pytest.param(("p.json", _pin("n1", digest=A, declared=None)), id="facts-then-a-pin-report"),
])
def test_execsys_facts_already_hold_both_kinds_so_another_report_is_a_duplicate(tmp_path: Path, second) -> None:
    report = run_fleet(FleetOptions(reports=_files(tmp_path, ("n1.json", FACTS_N1), second)))
    assert [r.key for r in report.records] == ["n1", "n1#2"]
    assert report.duplicates == {"n1": 2}


def test_an_unreadable_report_pairs_with_nothing(tmp_path: Path) -> None:
    paths = _files(tmp_path, ("n1.json", "{not json"), ("d.json", _doctor("n1", "ok")),
                   ("p.json", _pin("n1", digest=A, declared=None)))
    events: list = []
    report = run_fleet(FleetOptions(reports=paths), on_event=events.append)
    assert [(r.key, r.report) for r in report.records] == [("n1", paths[0]), ("n1#2", f"{paths[1]}+{paths[2]}")]
    assert report.records[0].problem.startswith("unreadable report: ")
    assert report.records[1].problem is None and report.records[1].digest == A
    assert [(e.index, e.host, e.report) for e in events] == [(1, "n1", paths[0]), (2, "n1", paths[1]),
                                                            (3, "n1", paths[2])]
    # a doctor report first, then an unreadable one of the same name: still two
    again = run_fleet(FleetOptions(reports=_files(tmp_path / "again", ("d.json", _doctor("n1", "ok")),
                                                  ("n1.json", "{not json"))))
    assert [r.key for r in again.records] == ["n1", "n1#2"] and again.records[0].problem is None


def test_the_modal_digest_is_the_most_common_not_the_first_in_order(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for name, digest in (("n1", B), ("n2", B), ("n3", A)):
        (tree / f"{name}.json").write_text(json.dumps({"execsys": {"artifact": {"blake3": digest}}}))
    report = run_fleet(FleetOptions(from_ansible=str(tree)))
    match = report.digest_match()
    assert (match["expected"], match["k"], match["n"]) == (B, 2, 3)
    assert [d["host"] for d in match["defects"]] == ["n3"]
    assert report.to_json()["cancelled"] is False and report.cancelled is False


def test_a_pin_report_joins_the_first_doctor_report_of_its_node(tmp_path: Path) -> None:
    paths = _files(tmp_path, ("a.json", _doctor("n1", "fail")), ("b.json", _doctor("n1", "ok")),
                   ("p.json", _pin("n1", digest=A, declared=None)))
    report = run_fleet(FleetOptions(reports=paths))
    assert [(r.key, r.report, r.digest) for r in report.records] == [
        ("n1", f"{paths[0]}+{paths[2]}", A), ("n1#2", paths[1], None)]
