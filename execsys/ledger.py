"""The ledger: an append-only SQLite record of identities, doctor reports and probes.

One file (WAL mode) in the user data directory, or ``--ledger PATH`` /
``EXECSYS_LEDGER``. Rows are never updated or deleted (triggers refuse it), so a
record once written stays what it was. Each append is one short transaction;
concurrent writers wait on SQLite's lock (busy timeout) and a killed writer
leaves at most an uncommitted transaction that SQLite rolls back. Creating the
file is safe under concurrency too: switching a new database to WAL and creating
the schema can report "database is locked" at once (SQLite does not wait on the
busy timeout there), so opening retries that step until the busy timeout is spent.

A file that is not a usable ledger -- not SQLite, a corrupt page, a ``meta.schema``
that is not a number, a row whose body is not JSON -- is an InputError naming the
file, wherever it is noticed (open, read or write), never a crash. Nor is another
program's SQLite database made into one: a file that already has tables but no
execsys schema marker (``meta.schema``) is refused before anything is written to it
(no tables added, no switch to WAL: the file stays byte for byte what it was). An
empty or new file becomes a ledger.

Rows may name a ``parent`` and a ``key`` unique under it: a probe's per-case
results are appended that way, so a resumed probe can re-append without
double-counting (the second insert of the same key is ignored).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import random
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar, cast

from execsys.clock import now_iso
from execsys.errors import InputError
from execsys.redact import scrub

ENV_VAR = "EXECSYS_LEDGER"
_SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0

_DDL = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    kind       TEXT NOT NULL,
    identity   TEXT,
    parent     TEXT,
    key        TEXT,
    created_at TEXT NOT NULL,
    body       TEXT NOT NULL,
    UNIQUE (parent, key)
);
CREATE INDEX IF NOT EXISTS records_kind ON records (kind, seq);
CREATE INDEX IF NOT EXISTS records_identity ON records (identity, kind);
CREATE INDEX IF NOT EXISTS records_parent ON records (parent, seq);
CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'the execsys ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'the execsys ledger is append-only'); END;
"""


def default_path() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_path

    return user_data_path("execsys", appauthor=False) / "ledger.sqlite3"


@dataclass
class Record:
    id: str
    kind: str
    identity: str | None
    parent: str | None
    key: str | None
    created_at: str
    body: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "identity": self.identity,
            "parent": self.parent,
            "key": self.key,
            "created_at": self.created_at,
            "body": self.body,
        }


def _prepare(conn: sqlite3.Connection) -> None:
    """WAL mode and the schema, in one immediate transaction (idempotent: every open runs it)."""
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _DDL.split(";\n"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('schema', ?)", (str(_SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """InputError when ``path`` is some other program's SQLite database: it has tables, and no
    ``meta`` table holding execsys's ``schema`` row. Only reads (no pragma that writes), so a
    refused file is left exactly as it was."""
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    tables.discard("sqlite_sequence")  # SQLite's own, made by AUTOINCREMENT
    if not tables:
        return  # empty or new: it becomes a ledger
    if "meta" in tables:
        with contextlib.suppress(sqlite3.DatabaseError):
            if conn.execute("SELECT 1 FROM meta WHERE name = 'schema'").fetchone() is not None:
                return
    shown = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
    raise InputError(f"ledger {path}: an SQLite database of another program (tables {shown}), not an execsys "
                     "ledger: left untouched; set --ledger or EXECSYS_LEDGER to another file")


def _retry_while_locked(step: Callable[[], None]) -> None:
    """Run ``step`` again while SQLite says the database is locked or busy, up to the busy timeout: two
    processes creating the same new ledger make one of them fail at once otherwise."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.005
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            message = str(exc).lower()
            if ("locked" not in message and "busy" not in message) or time.monotonic() >= deadline:
                raise
        time.sleep(pause * (1 + random.random()))
        pause = min(pause * 2, 0.2)


def _unusable(path: Path, exc: Exception) -> InputError:
    message = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message):
        return InputError(f"ledger {path}: still locked by another process after {BUSY_TIMEOUT_S:.0f}s ({exc}); "
                          "try again when it is done")
    return InputError(f"ledger {path}: not a usable execsys ledger ({exc}); move it aside or set --ledger "
                      "to another file")


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _guarded(method: _Method) -> _Method:
    """A SQLite error while reading or writing a ledger is the file's problem: an InputError naming it."""
    import functools

    @functools.wraps(method)
    def wrapper(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            raise _unusable(self.path, exc) from exc

    return cast(_Method, wrapper)


class Ledger:
    """Append-only store. Open with :meth:`open`; safe to use from several processes at once."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self._conn = conn

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None) -> Ledger:
        target = Path(path).expanduser() if path else default_path()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            try:
                _retry_while_locked(lambda: _refuse_foreign(conn, target) or _prepare(conn))
                row = conn.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
            except BaseException:
                conn.close()
                raise
        except sqlite3.DatabaseError as exc:
            raise _unusable(target, exc) from exc
        except OSError as exc:
            blocker = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
            reason = f"{blocker} is a file, not a directory" if blocker else (exc.strerror or str(exc))
            raise InputError(f"ledger {target}: {reason} (set --ledger or EXECSYS_LEDGER to a usable path)") from exc
        try:
            schema = int(row[0]) if row else _SCHEMA_VERSION
        except (TypeError, ValueError):
            conn.close()
            raise InputError(f"ledger {target}: not a usable execsys ledger (schema version {row[0]!r} is not "
                             "a number)") from None
        if schema > _SCHEMA_VERSION:
            conn.close()
            raise InputError(f"ledger {target}: schema {row[0]} is newer than this execsys understands; upgrade execsys")
        return cls(target, conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------
    @_guarded
    def append(
        self,
        kind: str,
        body: dict[str, Any],
        *,
        identity: str | None = None,
        parent: str | None = None,
        key: str | None = None,
        record_id: str | None = None,
    ) -> str:
        """Append one record and return its id. With ``parent`` and ``key``, a repeat append is a no-op
        returning the id already stored (resumed work never double-counts)."""
        rid = record_id or new_id(kind)
        text = json.dumps(scrub(body), ensure_ascii=False, sort_keys=True)
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            if parent is not None and key is not None:
                existing = self._conn.execute(
                    "SELECT id FROM records WHERE parent = ? AND key = ?", (parent, key)
                ).fetchone()
                if existing:
                    self._conn.execute("COMMIT")
                    return existing[0]
            self._conn.execute(
                "INSERT INTO records (id, kind, identity, parent, key, created_at, body) VALUES (?,?,?,?,?,?,?)",
                (rid, kind, identity, parent, key, now_iso(), text),
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return rid

    @_guarded
    def append_many(self, kind: str, entries: list[tuple[dict[str, Any], str | None, str | None]], *,
                    identity: str | None = None) -> list[str]:
        """Append several ``(body, parent, key)`` records of one kind in one transaction (same rules as
        :meth:`append`, including the no-op repeat of a parent+key); returns their ids in order.
        For high-rate writers (a probe's per-case results): one commit instead of one per record."""
        rows = [(new_id(kind), json.dumps(scrub(body), ensure_ascii=False, sort_keys=True), parent, key)
                for body, parent, key in entries]
        ids: list[str] = []
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for rid, text, parent, key in rows:
                if parent is not None and key is not None:
                    existing = self._conn.execute(
                        "SELECT id FROM records WHERE parent = ? AND key = ?", (parent, key)
                    ).fetchone()
                    if existing:
                        ids.append(existing[0])
                        continue
                self._conn.execute(
                    "INSERT INTO records (id, kind, identity, parent, key, created_at, body) VALUES (?,?,?,?,?,?,?)",
                    (rid, kind, identity, parent, key, now_iso(), text),
                )
                ids.append(rid)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return ids

    # -- reading ---------------------------------------------------------
    @_guarded
    def get(self, record_id: str) -> Record:
        """Exact id, or a unique prefix of one."""
        if not record_id.strip():
            raise InputError("an empty record id matches every record: give an id (see 'execsys ledger list')")
        row = self._conn.execute(_SELECT + " WHERE id = ?", (record_id,)).fetchone()
        if row is None:
            rows = self._conn.execute(_SELECT + " WHERE id LIKE ? ESCAPE '\\' LIMIT 2", (_like_prefix(record_id),)).fetchall()
            if len(rows) == 1:
                row = rows[0]
            elif len(rows) > 1:
                raise InputError(f"ledger record '{record_id}' is ambiguous: give more characters of the id")
        if row is None:
            raise InputError(f"no ledger record '{record_id}' in {self.path} (see 'execsys ledger list')")
        return _record(row, self.path)

    @_guarded
    def shortest_prefixes(self, ids: list[str]) -> dict[str, str]:
        """For each of ``ids``, the shortest prefix :meth:`get` resolves to that record alone, for a list
        narrower than the ids: never cut inside the id's ``<kind>-<time>`` (a readable place to stop), and
        once into the random part at least 4 characters of it. ``get`` matches a prefix with SQL
        ``LIKE``, which ignores ASCII case, so uniqueness is judged the same way."""
        every = sorted(_ascii_lower(row[0]) for row in self._conn.execute("SELECT id FROM records"))
        out: dict[str, str] = {}
        for record_id in ids:
            low = _ascii_lower(record_id)
            at = bisect.bisect_left(every, low)
            shared = 0
            for neighbour in (every[at - 1] if at > 0 else None, every[at + 1] if at + 1 < len(every) else None,
                              every[at] if at < len(every) and every[at] != low else None):
                if neighbour is not None:
                    shared = max(shared, _common_length(low, neighbour))
            length = shared + 1
            stamp = _STAMPED.match(record_id)
            if stamp is not None:
                length = max(length, stamp.end(1)) if length <= stamp.end(1) else max(length, stamp.end(1) + 5)
            out[record_id] = record_id[:length] if length < len(record_id) else record_id
        return out

    @_guarded
    def find(
        self,
        *,
        kind: str | None = None,
        identity: str | None = None,
        parent: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Record]:
        return list(self.iter(kind=kind, identity=identity, parent=parent, limit=limit, newest_first=newest_first))

    def iter(
        self,
        *,
        kind: str | None = None,
        identity: str | None = None,
        parent: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> Iterator[Record]:
        where, params = _where(kind=kind, identity=identity, parent=parent)
        sql = _SELECT + where + " ORDER BY seq " + ("DESC" if newest_first else "ASC")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        try:
            cursor = self._conn.execute(sql, params)
            for row in cursor:
                yield _record(row, self.path)
        except sqlite3.DatabaseError as exc:
            raise _unusable(self.path, exc) from exc

    @_guarded
    def child(self, parent: str, key: str) -> Record | None:
        """The record appended under ``parent`` with ``key`` (one indexed lookup), or None."""
        row = self._conn.execute(_SELECT + " WHERE parent = ? AND key = ?", (parent, key)).fetchone()
        return _record(row, self.path) if row else None

    @_guarded
    def has_child(self, parent: str, key: str) -> bool:
        """Whether a record was appended under ``parent`` with ``key`` (an index probe; no body parsed)."""
        return self._conn.execute("SELECT 1 FROM records WHERE parent = ? AND key = ?", (parent, key)).fetchone() is not None

    @_guarded
    def count(self, *, kind: str | None = None, parent: str | None = None) -> int:
        where, params = _where(kind=kind, parent=parent)
        sql = "SELECT COUNT(*) FROM records" + where
        return int(self._conn.execute(sql, params).fetchone()[0])


def _where(**columns: str | None) -> tuple[str, list[str]]:
    """' WHERE a = ? AND b = ?' for the columns given a value (column names are ours, never user input)."""
    given = {column: value for column, value in columns.items() if value is not None}
    clause = " WHERE " + " AND ".join(f"{column} = ?" for column in given) if given else ""
    return clause, list(given.values())


_SELECT = "SELECT id, kind, identity, parent, key, created_at, body FROM records"


def _record(row: tuple, path: Path) -> Record:
    try:
        body = json.loads(row[6])
    except (TypeError, ValueError, RecursionError):
        raise InputError(f"ledger {path}: record {row[0]} is not an execsys record (its body is not JSON); "
                         "was the file written by another program?") from None
    if not isinstance(body, dict):
        raise InputError(f"ledger {path}: record {row[0]} is not an execsys record (its body is not a JSON "
                         "object)")
    return Record(row[0], row[1], row[2], row[3], row[4], row[5], body)


_STAMPED = re.compile(r"^(.+-\d{8}T\d{6})-")  # new_id's <kind>-<UTC time>- before its random part
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _ascii_lower(text: str) -> str:
    """As SQLite's LIKE compares: ASCII letters without case, every other character as it is."""
    return text.translate(_ASCII_LOWER)


def _common_length(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def new_id(kind: str) -> str:
    """Sortable, collision-resistant record id: ``<kind>-<UTC time>-<random>``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{kind}-{stamp}-{secrets.token_hex(4)}"
