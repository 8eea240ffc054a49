"""The probe record, schema ``execsys.probe/1``: what one probe measured, in one JSON object.

The record says m agreeing out of n cases that completed on every pass, the Wilson 95%
interval, both comparison levels, which cases flipped and where, and the boundary the
measurement speaks for (``scope``). It is what the ledger keeps (kind ``probe``) and what
``execsys probe --json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = "execsys.probe/1"


@dataclass(slots=True)
class CaseResult:
    id: str
    passes: list[dict[str, Any]]  # per pass: {"digest", "outcome", "error"} (None when not run)
    agree: bool | None  # None when the case errored on some pass (excluded from n)
    outcome_agree: bool | None = None
    distinct: int | None = None  # number of distinct outputs across the passes
    first_divergence: dict[str, Any] | None = None  # {"pass", "char", "token"} vs pass 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "passes": self.passes,
            "agree": self.agree,
            "outcome_agree": self.outcome_agree,
            "distinct": self.distinct,
            "first_divergence": self.first_divergence,
        }


@dataclass
class ProbeRecord:
    axis: str
    identity: str | None
    target: dict[str, Any]
    n: int
    m: int
    agreement_rate: float | None
    ci95: list[float] | None
    compare: dict[str, Any]
    errored: int
    flipped: list[str]
    cases: list[CaseResult]
    started_at: str
    finished_at: str
    scope: dict[str, Any]
    sentence: str
    id: str | None = None
    run: str | None = None
    passes: list[dict[str, Any]] = field(default_factory=list)
    repeats: int = 2
    decoding: dict[str, Any] = field(default_factory=dict)
    cases_file: str | None = None
    cases_digest: str | None = None
    errored_cases: list[str] = field(default_factory=list)
    engine_changed: bool = False
    notes: list[str] = field(default_factory=list)
    baseline: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        """0 when every completed case agreed, 1 below that, 2 when no case completed."""
        if self.n == 0:
            return 2
        return 0 if self.m == self.n else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "id": self.id,
            "run": self.run,
            "axis": self.axis,
            "identity": self.identity,
            "target": self.target,
            "n": self.n,
            "m": self.m,
            "agreement_rate": self.agreement_rate,
            "ci95": self.ci95,
            "compare": self.compare,
            "errored": self.errored,
            "errored_cases": self.errored_cases,
            "flipped": self.flipped,
            "repeats": self.repeats,
            "passes": self.passes,
            "decoding": self.decoding,
            "cases_file": self.cases_file,
            "cases_digest": self.cases_digest,
            "engine_changed": self.engine_changed,
            "baseline": self.baseline,
            "notes": self.notes,
            "cases": [case.to_json() for case in self.cases],
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "scope": self.scope,
            "sentence": self.sentence,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeRecord:
        cases = [
            CaseResult(
                str(c["id"]), list(c.get("passes") or []), c.get("agree"), c.get("outcome_agree"),
                c.get("distinct"), c.get("first_divergence"),
            )
            for c in data.get("cases") or []
        ]
        return cls(
            axis=data["axis"], identity=data.get("identity"), target=data.get("target") or {},
            n=int(data.get("n") or 0), m=int(data.get("m") or 0), agreement_rate=data.get("agreement_rate"),
            ci95=data.get("ci95"), compare=data.get("compare") or {}, errored=int(data.get("errored") or 0),
            flipped=list(data.get("flipped") or []), cases=cases, started_at=data.get("started_at", ""),
            finished_at=data.get("finished_at", ""), scope=data.get("scope") or {},
            sentence=data.get("sentence", ""), id=data.get("id"), run=data.get("run"),
            passes=list(data.get("passes") or []), repeats=int(data.get("repeats") or 2),
            decoding=data.get("decoding") or {}, cases_file=data.get("cases_file"),
            cases_digest=data.get("cases_digest"), errored_cases=list(data.get("errored_cases") or []),
            engine_changed=bool(data.get("engine_changed")), notes=list(data.get("notes") or []),
            baseline=data.get("baseline"),
        )
