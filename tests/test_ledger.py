"""The SQLite ledger under real concurrency: two writer processes, and a writer killed mid-stream."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from execsys.errors import InputError
from execsys.ledger import Ledger

WRITER = r'''
import sys
from execsys.ledger import Ledger
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ledger = Ledger.open(path)
print("ready", flush=True)
if len(sys.argv) > 4:  # wait for the go, so that two writers start their streams together
    sys.stdin.readline()
for i in range(n):
    ledger.append("probe-case", {"writer": tag, "i": i, "pad": "x" * 200}, parent=f"run-{tag}", key=str(i))
    if i % 50 == 0:
        print(i, flush=True)
ledger.close()
'''


def _writer(path: Path, tag: str, n: int, *, gate: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag, str(n), *(["gate"] if gate else [])],
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE if gate else None, text=True)


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def test_two_writer_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    Ledger.open(path).close()
    writers = [_writer(path, tag, 500, gate=True) for tag in ("a", "b")]
    # both open the ledger first, then start together: a loaded host that schedules one writer long
    # before the other would otherwise let it finish alone, and the test would not test concurrency
    for proc in writers:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in writers:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
    for proc in writers:
        assert proc.stdout is not None
        proc.stdout.read()  # drain the progress lines so a full pipe never blocks a writer
        assert proc.wait(timeout=240) == 0
    assert _integrity(path) == "ok"
    with Ledger.open(path) as ledger:
        assert ledger.count(kind="probe-case") == 1000
        for tag in ("a", "b"):
            seen = sorted(r.body["i"] for r in ledger.iter(parent=f"run-{tag}"))
            assert seen == list(range(500))
        # both really ran at the same time: their rows interleave
        order = [r.body["writer"] for r in ledger.iter(kind="probe-case")]
        switches = sum(1 for x, y in zip(order, order[1:], strict=False) if x != y)
        assert switches > 1


def test_killed_writer_leaves_a_consistent_database(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    proc = _writer(path, "k", 100000)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    for _ in range(4):  # let it get well into the stream
        proc.stdout.readline()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert _integrity(path) == "ok"
    with Ledger.open(path) as ledger:
        values = sorted(r.body["i"] for r in ledger.iter(parent="run-k"))
        assert len(values) >= 150
        assert values == list(range(len(values)))  # a prefix: nothing lost in the middle, nothing half-written
        # and the ledger keeps working after the crash, including resuming the same keys
        ledger.append("probe-case", {"writer": "k", "i": values[-1] + 1, "pad": ""}, parent="run-k",
                      key=str(values[-1] + 1))
        again = ledger.append("probe-case", {"writer": "k", "i": 0}, parent="run-k", key="0")
        assert again == ledger.find(parent="run-k", limit=1)[0].id
        assert ledger.count(parent="run-k") == len(values) + 1


def test_ledger_is_append_only(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger.open(path) as ledger:
        rid = ledger.append("identity", {"x": 1}, identity="abc")
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE records SET body = '{}' WHERE id = ?", (rid,))
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM records")
    conn.close()


def test_not_a_ledger_is_one_line_exit_2(cli, tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InputError):
        Ledger.open(bogus)
    result = cli("ledger", "list", "--ledger", str(bogus))
    assert result.returncode == 2
    assert "not a usable execsys ledger" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("where", ["under-a-file", "proc", "directory"])
def test_an_unusable_ledger_path_names_the_reason(cli, tmp_path: Path, where: str) -> None:
    (tmp_path / "afile").write_text("x")
    path = {"under-a-file": tmp_path / "afile" / "ledger.sqlite3", "proc": Path("/proc/no/ledger.sqlite3"),
            "directory": tmp_path}[where]
    result = cli("ledger", "list", env={"EXECSYS_LEDGER": str(path)})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "Traceback" not in result.stderr
    if where == "under-a-file":
        assert "afile is a file, not a directory" in result.stderr


def test_ledger_cli_list_show_export(cli, ledger_path: Path, tmp_path: Path) -> None:
    with Ledger.open(ledger_path) as ledger:
        first = ledger.append("identity", {"summary": "first"}, identity="a" * 64)
        second = ledger.append("doctor", {"summary": "second"})
    listed = cli("ledger", "list", "--json").json()
    assert [r["id"] for r in listed] == [second, first]
    assert cli("ledger", "list", "--kind", "identity", "--json").json()[0]["identity"] == "a" * 64
    shown = cli("ledger", "show", first[: len(first) - 3], "--json").json()
    assert shown["id"] == first and shown["body"] == {"summary": "first"}
    lines = cli("ledger", "export").stdout.splitlines()
    assert len(lines) == 2
    missing = cli("ledger", "show", "nope")
    assert missing.returncode == 2 and "no ledger record 'nope'" in missing.stderr
    started = time.monotonic()
    assert cli("ledger", "export", "--json").json()[1]["id"] == second
    assert time.monotonic() - started < 60


def test_an_empty_id_is_not_a_prefix_of_everything(cli, ledger_path: Path) -> None:
    with Ledger.open(ledger_path) as ledger:
        ledger.append("identity", {"a": 1})
    result = cli("ledger", "show", "")
    assert result.returncode == 2 and "empty record id" in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]


def test_recorded_text_that_looks_like_markup_is_printed_as_is(cli, ledger_path: Path) -> None:
    # summaries quote what users recorded (file names, case ids): '[/x]' must not crash the table
    with Ledger.open(ledger_path) as ledger:
        ledger.append("comparison", {"statement": "A ([/x].json) vs B ([bold]b.json)"}, identity="[/id]")
    result = cli("ledger", "list")
    assert result.returncode == 0, result.stderr
    assert "[/x].json" in result.stdout and "[bold]b.json" in result.stdout


# -- ledger list at 80 columns: ids that paste into `ledger show` ---------------------------------------

def _listed_ids(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    assert lines and lines[0].split()[0] == "id", stdout
    return [line.split()[0] for line in lines[1:] if line.strip()]


def test_ledger_list_at_80_columns_shows_id_prefixes_that_ledger_show_accepts(cli, ledger_path: Path,
                                                                             tmp_path: Path) -> None:
    # records made in one second share their <kind>-<time>: only the random part tells them apart
    same_second = ["run-20261203T101500-aaaa1111", "run-20261203T101500-aaaa2222", "run-20261203T101500-bbbb0000"]
    with Ledger.open(ledger_path) as ledger:
        for record_id in same_second:
            ledger.append("run", {"verdict": "clean", "summary": "s"}, record_id=record_id)
        ledger.append("doctor", {"summary": "x" * 300}, record_id="doctor-20261203T101501-cccc3333")
        ledger.append("identity", {"summary": "i"}, identity="e" * 64, record_id="identity-20261203T101502-dddd4444")
        # a lone record of another minute: its id is cut after its time, where the random part starts
        ledger.append("identity", {"summary": "j"}, identity="f" * 64, record_id="identity-20261203T111111-eeee5555")
    for columns in ("80", "60", "30"):
        listed = cli("ledger", "list", env={"COLUMNS": columns})
        assert listed.returncode == 0, listed.stderr
        if columns != "30":
            assert all(len(line) <= int(columns) for line in listed.stdout.splitlines()), listed.stdout
            assert listed.stdout.split()[:3] == ["id", "identity", "summary"], listed.stdout
        else:  # too narrow for the ids: the identity column goes, and the ids are still whole
            assert listed.stdout.split()[:2] == ["id", "summary"], listed.stdout
        shown = _listed_ids(listed.stdout)
        assert "…" not in "".join(shown) and len(set(shown)) == len(shown) == 6, listed.stdout
        assert shown[:3] == ["identity-20261203T111111", "identity-20261203T101502", "doctor-20261203T101501"]
        assert shown[3:] == ["run-20261203T101500-bbbb", "run-20261203T101500-aaaa2", "run-20261203T101500-aaaa1"]
        by_listing = {}
        for prefix in shown:
            got = cli("ledger", "show", prefix, "--json")
            assert got.returncode == 0, (prefix, got.stderr)
            by_listing[prefix] = got.json()["id"]
        assert sorted(by_listing.values()) == sorted([*same_second, "doctor-20261203T101501-cccc3333",
                                                      "identity-20261203T101502-dddd4444",
                                                      "identity-20261203T111111-eeee5555"])
        assert all(record_id.startswith(prefix) for prefix, record_id in by_listing.items())
    # the prefix is unique over the whole ledger, not only the rows shown (--kind, --limit)
    listed = cli("ledger", "list", "--kind", "run", "--limit", "1", env={"COLUMNS": "80"})
    [only] = _listed_ids(listed.stdout)
    assert only == "run-20261203T101500-bbbb"
    assert cli("ledger", "show", only, "--json").json()["id"] == "run-20261203T101500-bbbb0000"


def test_ledger_list_run_rows_name_their_task(cli, ledger_path: Path, tmp_path: Path) -> None:
    lm_eval = tmp_path / "bin" / "lm_eval"  # a real program named as lm-eval is, that evaluates nothing
    lm_eval.parent.mkdir()
    lm_eval.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(0)\n")
    lm_eval.chmod(0o755)
    (tmp_path / "eval_tiny.py").write_text("print('scored')\n")
    for command in ([str(lm_eval), "--model", "local-completions", "--model_args",
                     "base_url=http://127.0.0.1:9/v1/completions," + "x" * 80, "--tasks", "tiny_qa"],
                    [sys.executable, "eval_tiny.py", "--out", "scores.json"]):
        done = cli("run", "--gate", "off", "--watch", "0", "--", *command, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    listed = cli("ledger", "list", "--kind", "run", env={"COLUMNS": "80"})
    rows = listed.stdout.splitlines()[1:]
    assert "clean: eval_tiny.py (other, 0 results)" in rows[0], listed.stdout
    assert "clean: tiny_qa (lm-eval, 0 results)" in rows[1], listed.stdout
