"""The ledger under concurrency and corruption: nothing lost, nothing crashes.

Several processes opening a ledger that does not exist yet used to lose a record
("database is locked" at once: creating the file and switching it to WAL does not
wait on SQLite's busy timeout). A ledger file that another program wrote, or that
a disk damaged, is exit 2 naming the file -- never an internal error.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from execsys.errors import InputError
from execsys.ledger import Ledger

WRITER = r"""
import os, sys, time
from execsys.ledger import Ledger
path, go, index = sys.argv[1], sys.argv[2], sys.argv[3]
while not os.path.exists(go):  # start together: the race is in creating the file
    time.sleep(0.0005)
with Ledger.open(path) as ledger:
    ledger.append("race", {"writer": int(index)})
"""

PROCESSES = 4
TRIALS = 12


def test_a_new_ledger_opened_by_several_processes_at_once_loses_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    failures = []
    for trial in range(TRIALS):
        path = tmp_path / f"trial{trial}" / "ledger.sqlite3"
        go = tmp_path / f"go{trial}"
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(go), str(i)], env=env,
                                  stderr=subprocess.PIPE, text=True) for i in range(PROCESSES)]
        time.sleep(0.6)  # every writer imported and waiting
        go.touch()
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                failures.append(err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}")
        with Ledger.open(path) as ledger:
            writers = sorted(r.body["writer"] for r in ledger.iter(kind="race"))
        assert writers == list(range(PROCESSES)) or failures, writers
    assert not failures, failures


def _corrupt_page(path: Path) -> None:
    with Ledger.open(path) as ledger:
        for i in range(200):
            ledger.append("filler", {"i": i, "pad": "x" * 500})
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    data = bytearray(path.read_bytes())
    page = 4096
    data[page * 3: page * 6] = b"\xde\xad\xbe\xef" * (page * 3 // 4)  # garbage over interior pages
    path.write_bytes(bytes(data))


def test_a_garbage_page_is_an_input_error_naming_the_file(cli, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    _corrupt_page(path)
    with pytest.raises(InputError, match=str(path)), Ledger.open(path) as ledger:
        list(ledger.iter())
    result = cli("ledger", "list", "--ledger", str(path))
    assert result.returncode == 2, result.stderr
    assert str(path) in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_file_that_is_not_sqlite_is_an_input_error(cli, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    path.write_bytes(b"this is not a database\n" * 500)
    result = cli("ledger", "list", "--ledger", str(path))
    assert result.returncode == 2 and str(path) in result.stderr and "Traceback" not in result.stderr


def test_a_schema_version_that_is_not_a_number_is_an_input_error(cli, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    Ledger.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = 'one' WHERE name = 'schema'")
    with pytest.raises(InputError, match="schema version 'one' is not a number"):
        Ledger.open(path)
    result = cli("ledger", "list", "--ledger", str(path))
    assert result.returncode == 2 and str(path) in result.stderr and "internal error" not in result.stderr


def test_a_foreign_row_whose_body_is_not_json_is_an_input_error(cli, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger.open(path) as ledger:
        good = ledger.append("identity", {"fine": True})
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO records (id, kind, created_at, body) VALUES ('foreign-1', 'identity', 'now', "
                     "'<xml/>')")
    with Ledger.open(path) as ledger:
        assert ledger.get(good).body == {"fine": True}  # the rest of the ledger still reads
        with pytest.raises(InputError, match="foreign-1"):
            ledger.get("foreign-1")
        with pytest.raises(InputError, match=str(path)):
            list(ledger.iter(kind="identity"))
    for args in (["ledger", "list"], ["ledger", "show", "foreign-1"], ["ledger", "export"]):
        result = cli(*args, "--ledger", str(path))
        assert result.returncode == 2, (args, result.stderr)
        assert "foreign-1" in result.stderr and "Traceback" not in result.stderr, args
    assert json.loads(cli("ledger", "show", good, "--json", "--ledger", str(path)).stdout)["body"] == {"fine": True}


def _sqlite_of_another_program(path: Path) -> bytes:
    """An application's own database (rollback journal, its own tables and rows); its bytes."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT)")
    conn.execute("CREATE TABLE meta (name TEXT, value TEXT)")  # a table named like ours, without our marker
    conn.execute("INSERT INTO users (name) VALUES ('ada'), ('grace')")
    conn.commit()
    conn.close()
    return path.read_bytes()


def test_another_programs_sqlite_file_is_refused_and_left_byte_for_byte(cli, tmp_path: Path) -> None:
    app = tmp_path / "app.db"
    before = _sqlite_of_another_program(app)
    with pytest.raises(InputError, match="another program.*tables meta, users"):
        Ledger.open(app)
    for args in (["scope", "--audit"], ["ledger", "list"], ["ledger", "export"]):
        result = cli(*args, "--ledger", str(app), cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert str(app) in line and "not an execsys ledger" in line and "Traceback" not in line
    assert app.read_bytes() == before  # no execsys tables added, not switched to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal, -shm or -journal left
    with sqlite3.connect(app) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_an_empty_file_or_an_execsys_ledger_still_opens(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    with Ledger.open(empty) as ledger:
        ledger.append("identity", {"fine": True})
    with Ledger.open(empty) as ledger:  # a ledger now: its marker is there
        assert ledger.count(kind="identity") == 1
