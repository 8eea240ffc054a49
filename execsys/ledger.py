"""The ledger: an append-only SQLite record of identities, doctor reports and probes.

One file (WAL mode) in the user data directory, or ``--ledger PATH`` /
``EXECSYS_LEDGER``. Rows are never updated or deleted (triggers refuse it), so a
record once written stays what it was. Each append is one short transaction;
concurrent writers wait on SQLite's lock (busy timeout) and a killed writer
leaves at most an uncommitted transaction that SQLite rolls back.

Rows may name a ``parent`` and a ``key`` unique under it: a probe's per-case
results are appended that way, so a resumed probe can re-append without
double-counting (the second insert of the same key is ignored).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from execsys.errors import InputError
from execsys.redact import scrub

ENV_VAR = "EXECSYS_LEDGER"
_SCHEMA_VERSION = 1

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


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
            conn = sqlite3.connect(target, timeout=60.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _DDL.split(";\n"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT OR IGNORE INTO meta (name, value) VALUES ('schema', ?)", (str(_SCHEMA_VERSION),)
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            row = conn.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"ledger {target}: not a usable execsys ledger ({exc})") from exc
        except OSError as exc:
            blocker = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
            reason = f"{blocker} is a file, not a directory" if blocker else (exc.strerror or str(exc))
            raise InputError(f"ledger {target}: {reason} (set --ledger or EXECSYS_LEDGER to a usable path)") from exc
        if row and int(row[0]) > _SCHEMA_VERSION:
            raise InputError(f"ledger {target}: schema {row[0]} is newer than this execsys understands; upgrade execsys")
        return cls(target, conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------
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
        return _record(row)

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
        for row in self._conn.execute(sql, params):
            yield _record(row)

    def child(self, parent: str, key: str) -> Record | None:
        """The record appended under ``parent`` with ``key`` (one indexed lookup), or None."""
        row = self._conn.execute(_SELECT + " WHERE parent = ? AND key = ?", (parent, key)).fetchone()
        return _record(row) if row else None

    def has_child(self, parent: str, key: str) -> bool:
        """Whether a record was appended under ``parent`` with ``key`` (an index probe; no body parsed)."""
        return self._conn.execute("SELECT 1 FROM records WHERE parent = ? AND key = ?", (parent, key)).fetchone() is not None

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


def _record(row: tuple) -> Record:
    return Record(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]))


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def new_id(kind: str) -> str:
    """Sortable, collision-resistant record id: ``<kind>-<UTC time>-<random>``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{kind}-{stamp}-{secrets.token_hex(4)}"
