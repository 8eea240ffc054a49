"""The ledger's rules as a user meets them, in process: what an append returns, when a repeat is a
no-op, which record an id or a prefix finds (and the one line when it finds none or several), the
order and filters of a listing, and the files it refuses. Each row is a rule a wrong answer would
break silently: a resumed probe double-counting, `ledger show` opening the wrong record, a listing
that drops the newest run."""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

from execsys import ledger as ledger_module
from execsys.errors import InputError
from execsys.ledger import Ledger, new_id


@pytest.fixture()
def book(tmp_path: Path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as opened:
        yield opened


def test_an_append_returns_its_id_and_stores_the_body_as_given(book: Ledger) -> None:
    rid = book.append("probe", {"b": 2, "a": [1, "x"]}, identity="id-1")
    record = book.get(rid)
    assert re.fullmatch(r"probe-\d{8}T\d{6}-[0-9a-f]{8}", rid)
    assert (record.kind, record.identity, record.parent, record.key) == ("probe", "id-1", None, None)
    assert record.body == {"a": [1, "x"], "b": 2}
    assert record.to_json() == {"id": rid, "kind": "probe", "identity": "id-1", "parent": None, "key": None,
                                "created_at": record.created_at, "body": {"a": [1, "x"], "b": 2}}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d.*", record.created_at)


def test_a_given_record_id_is_kept(book: Ledger) -> None:
    assert book.append("run", {}, record_id="run-fixed") == "run-fixed"
    assert book.get("run-fixed").kind == "run"


def test_a_repeated_parent_and_key_is_a_no_op_returning_the_first_id(book: Ledger) -> None:
    first = book.append("case", {"n": 1}, parent="p", key="k")
    again = book.append("case", {"n": 2}, parent="p", key="k")
    assert again == first
    assert book.child("p", "k").body == {"n": 1}
    assert book.count(parent="p") == 1


@pytest.mark.parametrize("parent, key", [("p", None), (None, "k")])
def test_a_parent_or_a_key_alone_never_deduplicates(book: Ledger, parent, key) -> None:
    one = book.append("case", {"n": 1}, parent=parent, key=key)
    two = book.append("case", {"n": 2}, parent=parent, key=key)
    assert one != two
    assert book.count(kind="case") == 2


def test_the_same_key_under_another_parent_is_another_record(book: Ledger) -> None:
    one = book.append("case", {}, parent="p1", key="k")
    two = book.append("case", {}, parent="p2", key="k")
    assert one != two and book.count() == 2


def test_append_many_keeps_order_and_skips_what_is_already_there(book: Ledger) -> None:
    existing = book.append("case", {"n": 0}, parent="p", key="a")
    ids = book.append_many("case", [({"n": 1}, "p", "a"), ({"n": 2}, "p", "b"), ({"n": 3}, None, None)],
                           identity="id-9")
    assert ids[0] == existing and len(set(ids)) == 3
    assert [r.body["n"] for r in book.find(kind="case")] == [0, 2, 3]
    assert book.get(ids[1]).identity == "id-9" and book.get(ids[0]).identity is None
    assert book.append_many("case", []) == []


def test_a_failed_append_many_writes_none_of_its_records(book: Ledger) -> None:
    with pytest.raises(TypeError):
        book.append_many("case", [({"n": 1}, None, None), ({"bad": object()}, None, None)])
    assert book.count() == 0


def test_an_id_is_found_exactly_or_by_a_unique_prefix(book: Ledger) -> None:
    a = book.append("run", {"n": 1}, record_id="run-20260101T000000-aaaa0001")
    book.append("run", {"n": 2}, record_id="run-20260101T000000-aaaa0002")
    assert book.get(a).body == {"n": 1}
    assert book.get("run-20260101T000000-aaaa0002").body == {"n": 2}
    with pytest.raises(InputError, match=r"^ledger record 'run-20260101' is ambiguous: give more characters"):
        book.get("run-20260101")
    with pytest.raises(InputError) as missing:
        book.get("probe-")
    assert str(missing.value) == f"no ledger record 'probe-' in {book.path} (see 'execsys ledger list')"


def test_an_exact_id_wins_over_a_longer_id_it_is_a_prefix_of(book: Ledger) -> None:
    book.append("run", {"n": 1}, record_id="run-x")
    book.append("run", {"n": 2}, record_id="run-x2")
    assert book.get("run-x").body == {"n": 1}


@pytest.mark.parametrize("given", ["", "   "])
def test_an_empty_id_is_refused_not_matched_against_everything(book: Ledger, given: str) -> None:
    book.append("run", {})
    with pytest.raises(InputError, match="an empty record id matches every record"):
        book.get(given)


@pytest.mark.parametrize("wildcard", ["run_", "run%", "ru\\"])
def test_sql_wildcards_in_a_prefix_are_literal_characters(book: Ledger, wildcard: str) -> None:
    book.append("run", {}, record_id="run-1")
    with pytest.raises(InputError, match="^no ledger record"):
        book.get(wildcard)
    book.append("run", {"literal": True}, record_id=wildcard + "tail")
    assert book.get(wildcard).body == {"literal": True}


def test_listings_are_oldest_first_or_newest_first_with_a_limit_and_filters(book: Ledger) -> None:
    for n, (kind, identity, parent) in enumerate([("run", "i1", None), ("probe", "i1", None), ("run", "i2", None),
                                                  ("case", None, "p"), ("run", "i1", "p")]):
        book.append(kind, {"n": n}, identity=identity, parent=parent)
    def numbers(**query):
        return [r.body["n"] for r in book.find(**query)]
    assert numbers() == [0, 1, 2, 3, 4]
    assert numbers(newest_first=True) == [4, 3, 2, 1, 0]
    assert numbers(newest_first=True, limit=2) == [4, 3]
    assert numbers(limit=2) == [0, 1]
    assert numbers(limit=0) == []
    assert numbers(kind="run") == [0, 2, 4]
    assert numbers(kind="run", identity="i1") == [0, 4]
    assert numbers(parent="p") == [3, 4]
    assert numbers(kind="run", parent="p") == [4]
    assert numbers(kind="nothing") == []
    assert [r.body["n"] for r in book.iter(kind="run", newest_first=True)] == [4, 2, 0]
    assert (book.count(), book.count(kind="run"), book.count(parent="p"), book.count(kind="run", parent="p")) == (5, 3, 2, 1)


def test_child_and_has_child_look_under_one_parent_only(book: Ledger) -> None:
    book.append("case", {"n": 1}, parent="p", key="k")
    assert book.child("p", "k").body == {"n": 1}
    assert book.child("p", "other") is None and book.child("q", "k") is None
    assert book.has_child("p", "k") and not book.has_child("p", "other") and not book.has_child("q", "k")


def test_records_cannot_be_changed_or_removed(book: Ledger) -> None:
    rid = book.append("run", {"n": 1})
    conn = sqlite3.connect(book.path)
    for statement in ("UPDATE records SET body = '{}'", "DELETE FROM records"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(statement)
    conn.close()
    assert book.get(rid).body == {"n": 1}


def test_secrets_in_a_body_are_scrubbed_before_they_are_stored(book: Ledger) -> None:
    token = "sk-" + "Q" * 40
    rid = book.append("run", {"argv": ["--api-key", token]})
    raw = sqlite3.connect(book.path).execute("SELECT body FROM records WHERE id = ?", (rid,)).fetchone()[0]
    assert token not in raw and "--api-key" in raw


def test_new_ids_are_unique_and_name_their_kind() -> None:
    ids = {new_id("plan") for _ in range(200)}
    assert len(ids) == 200 and all(i.startswith("plan-") for i in ids)


def test_the_default_path_is_the_environment_variable_expanded(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(ledger_module.ENV_VAR, "~/books/l.sqlite3")
    assert ledger_module.default_path() == tmp_path / "books" / "l.sqlite3"
    monkeypatch.setenv(ledger_module.ENV_VAR, "")
    assert ledger_module.default_path().name == "ledger.sqlite3"
    assert "execsys" in ledger_module.default_path().parts


def test_a_ledger_opened_without_a_path_uses_the_default(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ledger_module.ENV_VAR, str(tmp_path / "env" / "l.sqlite3"))
    with Ledger.open() as opened:
        assert opened.path == tmp_path / "env" / "l.sqlite3"
    assert (tmp_path / "env" / "l.sqlite3").exists()


def _schema(path: Path, value: str) -> None:
    if not path.exists():
        Ledger.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM meta")
    conn.execute("INSERT INTO meta (name, value) VALUES ('schema', ?)", (value,))
    conn.commit()
    conn.close()


def test_a_newer_schema_is_refused_and_the_current_one_opens(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    _schema(path, "2")
    with pytest.raises(InputError, match=r"schema 2 is newer than this execsys understands; upgrade execsys$"):
        Ledger.open(path)
    _schema(path, "1")
    Ledger.open(path).close()
    _schema(path, "0")
    Ledger.open(path).close()


def test_a_schema_that_is_no_number_is_named(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    _schema(path, "one")
    with pytest.raises(InputError, match=r"schema version 'one' is not a number"):
        Ledger.open(path)


def test_another_programs_database_is_refused_naming_three_of_its_tables(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    for name in ("users", "orders", "items", "zeta"):
        conn.execute(f"CREATE TABLE {name} (x)")
    conn.commit()
    conn.close()
    with pytest.raises(InputError) as refused:
        Ledger.open(path)
    assert str(refused.value).startswith(f"ledger {path}: an SQLite database of another program (tables items, "
                                         "orders, users, ...), not an execsys ledger: left untouched")


def test_a_database_with_a_meta_table_but_no_schema_row_is_foreign(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (name TEXT, value TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match=r"another program \(tables meta\)"):
        Ledger.open(path)


def test_an_empty_file_becomes_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite3"
    path.write_bytes(b"")
    with Ledger.open(path) as opened:
        assert opened.get(opened.append("run", {"n": 1})).body == {"n": 1}


@pytest.mark.parametrize("body, says", [("not json", "its body is not JSON"), (json.dumps([1]), "not a JSON object")])
def test_a_row_that_is_not_an_execsys_record_is_one_line(book: Ledger, body: str, says: str) -> None:
    conn = sqlite3.connect(book.path)
    conn.execute("INSERT INTO records (id, kind, created_at, body) VALUES ('odd-1', 'run', 't', ?)", (body,))
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match=f"^ledger {re.escape(str(book.path))}: record odd-1 is not an execsys record"
                                         f".*{says}"):
        book.get("odd-1")
    with pytest.raises(InputError, match=says):
        book.find(kind="run")


def test_a_locked_ledger_and_a_broken_one_are_told_apart() -> None:
    path = Path("/x/l.sqlite3")
    locked = ledger_module._unusable(path, sqlite3.OperationalError("database is locked"))
    busy = ledger_module._unusable(path, sqlite3.OperationalError("database is busy"))
    broken = ledger_module._unusable(path, sqlite3.DatabaseError("file is not a database"))
    assert str(locked) == ("ledger /x/l.sqlite3: still locked by another process after 60s (database is locked); "
                           "try again when it is done")
    assert "still locked" in str(busy)
    assert str(broken) == ("ledger /x/l.sqlite3: not a usable execsys ledger (file is not a database); move it "
                           "aside or set --ledger to another file")


def test_a_locked_step_is_retried_and_any_other_error_is_not(monkeypatch) -> None:
    monkeypatch.setattr(ledger_module.time, "sleep", lambda s: None)
    calls = []

    def locked_twice() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked" if len(calls) == 1 else "database table is busy")

    ledger_module._retry_while_locked(locked_twice)
    assert len(calls) == 3

    def broken() -> None:
        calls.append(2)
        raise sqlite3.OperationalError("no such table: x")

    calls.clear()
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        ledger_module._retry_while_locked(broken)
    assert calls == [2]


def _tries_while_always_locked(monkeypatch, clock_readings: list[float]) -> int:
    """How many times a step that is always locked is tried while the clock reads these values."""
    clock = iter(clock_readings)
    monkeypatch.setattr(ledger_module.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(ledger_module.time, "sleep", lambda s: None)
    calls = []

    def always_locked() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        ledger_module._retry_while_locked(always_locked)
    return len(calls)


def test_a_step_locked_past_the_busy_timeout_gives_up(monkeypatch) -> None:
    assert _tries_while_always_locked(monkeypatch, [0.0, 10.0, ledger_module.BUSY_TIMEOUT_S + 1]) == 2


def test_a_record_keeps_its_parent_and_key(book: Ledger) -> None:
    rid = book.append("case", {"n": 1}, parent="run-1", key="case-7")
    for record in (book.get(rid), book.child("run-1", "case-7"), book.find(parent="run-1")[0], next(book.iter())):
        assert (record.id, record.kind, record.parent, record.key, record.body) == (rid, "case", "run-1", "case-7",
                                                                                     {"n": 1})


def test_a_listing_without_an_order_is_oldest_first(book: Ledger) -> None:
    for n in range(3):
        book.append("run", {"n": n})
    assert [r.body["n"] for r in book.iter()] == [0, 1, 2]
    assert [r.body["n"] for r in book.find()] == [0, 1, 2]


def test_exactly_three_foreign_tables_are_all_named(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    for name in ("a", "b", "c"):
        conn.execute(f"CREATE TABLE {name} (x)")
    conn.commit()
    conn.close()
    with pytest.raises(InputError) as refused:
        Ledger.open(path)
    assert str(refused.value) == (f"ledger {path}: an SQLite database of another program (tables a, b, c), not an "
                                  "execsys ledger: left untouched; set --ledger or EXECSYS_LEDGER to another file")


def test_a_foreign_meta_table_of_another_shape_is_refused_as_foreign(tmp_path: Path) -> None:
    """Another program's ``meta`` table without execsys's columns: reading the schema row fails, and
    the file is still refused as another program's, not called a broken ledger."""
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (version INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(InputError, match=r"an SQLite database of another program \(tables meta\)"):
        Ledger.open(path)
    assert path.read_bytes() == before


def test_a_step_locked_until_exactly_the_deadline_gives_up_there(monkeypatch) -> None:
    assert _tries_while_always_locked(monkeypatch, [0.0, ledger_module.BUSY_TIMEOUT_S]) == 1


def test_an_operational_error_that_is_not_a_lock_is_a_broken_ledger() -> None:
    said = str(ledger_module._unusable(Path("/x/l"), sqlite3.OperationalError("disk I/O error")))
    assert said == "ledger /x/l: not a usable execsys ledger (disk I/O error); move it aside or set --ledger to another file"


def test_a_ledger_in_a_directory_that_does_not_exist_yet_is_made_with_its_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c" / "ledger.sqlite3"
    with Ledger.open(path) as opened:
        opened.append("run", {})
    assert path.is_file()


def test_a_ledger_path_under_a_file_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    path = tmp_path / "plain" / "sub" / "ledger.sqlite3"
    with pytest.raises(InputError) as refused:
        Ledger.open(path)
    assert str(refused.value) == (f"ledger {path}: {tmp_path / 'plain'} is a file, not a directory (set --ledger or "
                                  "EXECSYS_LEDGER to a usable path)")


def test_a_ledger_path_that_cannot_be_made_says_why(tmp_path: Path) -> None:
    path = Path("/proc/execsys-no-such/ledger.sqlite3")
    with pytest.raises(InputError) as refused:
        Ledger.open(path)
    # the system's own words for the error, not Python's "[Errno 2] ...: '/proc/...'" rendering
    assert str(refused.value) == (f"ledger {path}: {os.strerror(errno.ENOENT)} (set --ledger or EXECSYS_LEDGER to "
                                  "a usable path)")


def test_a_file_that_is_not_sqlite_is_named_as_unusable(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(InputError) as refused:
        Ledger.open(path)
    assert str(refused.value) == (f"ledger {path}: not a usable execsys ledger (file is not a database); move it "
                                  "aside or set --ledger to another file")


def test_a_ledger_opened_on_one_thread_is_read_and_written_on_another(book: Ledger) -> None:
    """The TUI and the probes' workers use one open ledger from several threads."""
    import threading

    seen: list[object] = []

    def worker() -> None:
        try:
            seen.append(book.get(book.append("run", {"n": 1})).body)
        except Exception as exc:  # the test asserts on what was seen
            seen.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(30)
    assert seen == [{"n": 1}]


def test_a_record_that_is_not_json_is_named_with_the_ledger_path_in_a_listing(book: Ledger) -> None:
    conn = sqlite3.connect(book.path)
    conn.execute("INSERT INTO records (id, kind, created_at, body) VALUES ('odd-2', 'run', 't', 'nope')")
    conn.commit()
    conn.close()
    with pytest.raises(InputError) as refused:
        book.find()
    assert str(refused.value) == (f"ledger {book.path}: record odd-2 is not an execsys record (its body is not JSON); "
                                  "was the file written by another program?")


def test_a_page_corrupted_under_an_open_ledger_is_named_when_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    with Ledger.open(path) as opened:
        opened.append_many("run", [({"text": "y" * 3000, "n": n}, None, None) for n in range(300)])
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(4 * page, len(data) - page, page):
        data[offset:offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with Ledger.open(path) as opened, pytest.raises(InputError) as refused:
        opened.find(kind="run")
    said = str(refused.value)
    assert said.startswith(f"ledger {path}: not a usable execsys ledger (") and "malformed" in said


def test_record_ids_are_stamped_in_utc_whatever_the_local_zone(monkeypatch) -> None:
    import time
    from datetime import datetime, timezone

    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14: a local stamp would be another day
    time.tzset()
    try:
        stamp = new_id("run").split("-")[1]
        now = datetime.now(timezone.utc)
        made = datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
        assert abs((now - made).total_seconds()) < 120
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_locked_open_backs_off_doubling_with_jitter_up_to_a_fifth_of_a_second(monkeypatch) -> None:
    """Retrying at once would spin on the lock; waiting longer than needed slows every concurrent start."""
    slept: list[float] = []
    monkeypatch.setattr(ledger_module.time, "sleep", slept.append)
    attempts = []

    def locked_nine_times() -> None:
        attempts.append(1)
        if len(attempts) <= 9:
            raise sqlite3.OperationalError("database is locked")

    ledger_module._retry_while_locked(locked_nine_times)
    assert len(slept) == 9
    pauses = [min(0.005 * 2 ** i, 0.2) for i in range(9)]
    assert pauses[-1] == 0.2 and pauses[-3] == 0.2 and pauses[-4] == 0.16
    for wait, pause in zip(slept, pauses, strict=True):
        assert isinstance(wait, float) and pause <= wait < 2 * pause, (slept, pauses)
