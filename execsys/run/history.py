"""Recent evaluation runs with their verdicts, for a face that lists them (the TUI's Scope step)."""

from __future__ import annotations

from dataclasses import dataclass

from execsys.ledger import Ledger


@dataclass(frozen=True)
class RunSummary:
    id: str
    created_at: str
    verdict: str
    identity: str | None
    summary: str
    results: int
    verdict_detail: str


def recent_runs(ledger: Ledger, limit: int = 10, identity: str | None = None) -> list[RunSummary]:
    """The newest ``execsys run`` records first (``identity`` narrows to one pinned system)."""
    out = []
    for record in ledger.find(kind="run", identity=identity, limit=limit, newest_first=True):
        body = record.body
        out.append(RunSummary(record.id, record.created_at, str(body.get("verdict") or "?"), record.identity,
                              str(body.get("summary") or ""), len(body.get("results") or []),
                              str(body.get("verdict_detail") or "")))
    return out
