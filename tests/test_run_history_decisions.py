"""The recent runs a face lists (execsys/run/history.py): newest first, the limit, one identity, and
what a run row that lacks a field shows."""

from __future__ import annotations

from execsys.ledger import Ledger
from execsys.run.history import RunSummary, recent_runs


def _append(ledger: Ledger, body: dict, identity: str | None) -> str:
    return ledger.append("run", body, identity=identity)


def test_recent_runs_newest_first_limited_and_narrowed(tmp_path) -> None:
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        ids = []
        for i in range(4):
            ids.append(_append(ledger, {"verdict": f"v{i}", "summary": f"s{i}", "results": [{}] * i,
                                        "verdict_detail": f"d{i}"}, "idA" if i % 2 == 0 else "idB"))
        ledger.append("attach", {"verdict": "attached"}, identity="idA")
        runs = recent_runs(ledger)
        assert [r.id for r in runs] == ids[::-1]
        newest = runs[0]
        assert newest == RunSummary(ids[3], newest.created_at, "v3", "idB", "s3", 3, "d3")
        assert newest.created_at
        assert [r.id for r in recent_runs(ledger, limit=2)] == [ids[3], ids[2]]
        assert [r.id for r in recent_runs(ledger, identity="idA")] == [ids[2], ids[0]]
        assert [r.id for r in recent_runs(ledger, limit=1, identity="idA")] == [ids[2]]
        assert recent_runs(ledger, identity="nobody") == []


def test_default_limit_is_ten(tmp_path) -> None:
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        for _ in range(11):
            _append(ledger, {"verdict": "clean"}, None)
        assert len(recent_runs(ledger)) == 10


def test_a_row_without_fields_shows_placeholders(tmp_path) -> None:
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        rid = _append(ledger, {"verdict": "", "summary": None, "results": None}, None)
        [run] = recent_runs(ledger)
        assert (run.id, run.verdict, run.identity, run.summary, run.results, run.verdict_detail) == \
            (rid, "?", None, "", 0, "")
