"""The probe record, schema ``execsys.probe/2``: what one probe measured, in one JSON object.

``/2`` added ``system_check`` (the serving runtime observed at the start and end of every pass,
compared with the lock: ``matches-lock`` | ``differs`` | ``unverified``; a differing record has
``identity: null`` and counts toward no identity) and ``evidence`` (restart and redeploy: whether
the event was observed). Readers accept ``/1`` records, which carry neither.

The record says m agreeing out of n cases that completed on every pass, the Wilson 95%
interval, both comparison levels, which cases flipped and where, and the boundary the
measurement speaks for (``scope``). It is what the ledger keeps (kind ``probe``) and what
``execsys probe --json`` prints.

Large probes keep their per-case list out of the one ``probe`` ledger row: above
:data:`CASES_INLINE_LIMIT` cases each case's result is its own ledger row (kind
``probe-result``, parent = the probe-run id, key ``result:<case id>``, in case order) and the
``probe`` row says ``"cases_in_ledger": true`` instead of holding ``cases``. Readers never look
at ``body["cases"]`` directly: :func:`load_record` / :func:`load_case_results` give the cases either way,
and :meth:`ProbeRecord.write_json` streams the full ``execsys.probe/1`` JSON (every case
included) without building it in memory, so a probe's memory stays flat in n.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from execsys.ledger import Ledger, Record

SCHEMA = "execsys.probe/2"
READABLE_SCHEMAS = ("execsys.probe/1", SCHEMA)  # /1: before system_check and evidence
RESULT_KIND = "probe-result"  # one case's result row of a large probe (parent = run id)
GRADING_KIND = "probe-grading"  # one grading of one case by ``probe grader`` (parent = run id, key <repeat>:<case>)
CASES_INLINE_LIMIT = 2000  # up to this many cases, the ``probe`` ledger row holds the case list itself


def result_key(case_id: str) -> str:
    return f"result:{case_id}"


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

    @classmethod
    def from_json(cls, c: dict[str, Any]) -> CaseResult:
        return cls(str(c["id"]), list(c.get("passes") or []), c.get("agree"), c.get("outcome_agree"),
                   c.get("distinct"), c.get("first_divergence"))


class LedgerCases(Sequence[CaseResult]):
    """A large probe's cases, read from its ``probe-result`` ledger rows in case order on each pass
    over them (a connection of its own, so any thread may read it after the probe's ledger closed)."""

    def __init__(self, ledger_path: str | Path, run_id: str, count: int):
        self.ledger_path = Path(ledger_path)
        self.run_id = run_id
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[CaseResult]:
        from execsys.ledger import Ledger

        with Ledger.open(self.ledger_path) as ledger:
            for row in ledger.iter(kind=RESULT_KIND, parent=self.run_id):
                yield CaseResult.from_json(row.body)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._count
        for i, case in enumerate(self):
            if i == index:
                return case
        raise IndexError(index)


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
    cases: Sequence[CaseResult]  # a list, or a LedgerCases view for a large probe
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
    cases_in_ledger: bool = False  # stored without "cases": they are probe-result rows under ``run``
    identity_reason: str | None = None  # with identity None: why (no lock found), as the probe said it
    # {"status": "ok" | "unsupported" | "off", "k", "tie_margin", and with "ok" the near-tie split}
    logprobs: dict[str, Any] | None = None
    tar_n: int | None = None  # outputs per case the total agreement rates are over (the passes)
    tarr: float | None = None  # TARr@N: share of compared cases whose N raw outputs are all identical
    tara: float | None = None  # TARa@N: the same over parsed answers (None without an extractor)
    stopped: dict[str, Any] | None = None  # --until-width: {"reason": "width" | "max-n" | "cases", ...}
    # the serving runtime as each pass saw it, against the lock (probes/system.py); None: not observed
    system_check: dict[str, Any] | None = None
    # restart / redeploy: {"event", "verdict": "observed" | "not-observed" | "unverified", "sentence", ...}
    evidence: dict[str, Any] | None = None
    schema: str = SCHEMA  # what the record was written as (a /1 record read back keeps saying so)

    @property
    def exit_code(self) -> int:
        """0 when every completed case agreed, 1 below that -- or when the probe measured another system
        than the pinned one, or saw no sign of the restart or redeploy it measures -- 2 when no case completed."""
        if self.n == 0:
            return 2
        if (self.system_check or {}).get("verdict") == "differs" or \
                (self.evidence or {}).get("verdict") == "not-observed":
            return 1
        return 0 if self.m == self.n else 1

    def to_json(self) -> dict[str, Any]:
        """The whole ``execsys.probe/1`` object, every case included (a large probe: prefer write_json)."""
        return self._json([case.to_json() for case in self.cases])

    def ledger_json(self) -> dict[str, Any]:
        """What the ``probe`` ledger row holds: the record, or without ``cases`` for a large probe
        (``cases_in_ledger: true``; :func:`load_record` puts them back)."""
        if not self.cases_in_ledger:
            return self.to_json()
        data = self._json(None)
        del data["cases"]
        data["cases_in_ledger"] = True
        return data

    def write_json(self, stream: TextIO) -> None:
        """Exactly what ``print_json(self.to_json())`` prints (indented, secrets scrubbed), written case
        by case so the whole document never sits in memory."""
        from execsys.redact import scrub

        marker = "@@execsys-probe-cases@@"
        text = json.dumps(scrub(self._json(marker)), indent=2, ensure_ascii=False)
        head, tail = text.split(f'"cases": "{marker}"', 1)
        stream.write(head + '"cases": [')
        chunk: list[str] = []
        first = True
        for case in self.cases:
            body = json.dumps(scrub(case.to_json()), indent=2, ensure_ascii=False)
            chunk.append(("\n" if first else ",\n") + "\n".join("    " + line for line in body.split("\n")))
            first = False
            if len(chunk) >= 256:
                stream.write("".join(chunk))
                chunk.clear()
        stream.write("".join(chunk) + ("]" if first else "\n  ]") + tail + "\n")
        stream.flush()

    def _json(self, cases: Any) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "id": self.id,
            "run": self.run,
            "axis": self.axis,
            "identity": self.identity,
            "identity_reason": self.identity_reason,
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
            "cases": cases,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "scope": self.scope,
            "sentence": self.sentence,
            "logprobs": self.logprobs,
            "tar_n": self.tar_n,
            "tarr": self.tarr,
            "tara": self.tara,
            "stopped": self.stopped,
            "system_check": self.system_check,
            "evidence": self.evidence,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeRecord:
        """From the JSON; a ``cases_in_ledger`` body has no cases here: use :func:`load_record`."""
        cases = [CaseResult.from_json(c) for c in data.get("cases") or []]
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
            baseline=data.get("baseline"), cases_in_ledger=bool(data.get("cases_in_ledger")),
            identity_reason=data.get("identity_reason"), logprobs=data.get("logprobs"),
            tar_n=data.get("tar_n"), tarr=data.get("tarr"), tara=data.get("tara"), stopped=data.get("stopped"),
            system_check=data.get("system_check") if isinstance(data.get("system_check"), dict) else None,
            evidence=data.get("evidence") if isinstance(data.get("evidence"), dict) else None,
            schema=str(data.get("schema") or "execsys.probe/1"),
        )


def load_case_results(ledger: Ledger, record: Record | dict[str, Any]) -> Sequence[CaseResult]:
    """The per-case results of a ``probe`` ledger record (a row or its body), wherever they live:
    in the body, or (``cases_in_ledger``) as the run's ``probe-result`` rows, read lazily."""
    body = record if isinstance(record, dict) else record.body
    if not body.get("cases_in_ledger"):
        return [CaseResult.from_json(c) for c in body.get("cases") or []]
    run_id = body.get("run")
    if not run_id:
        raise ValueError("a probe record with cases_in_ledger names no run")
    count = int(body.get("n") or 0) + int(body.get("errored") or 0)
    return LedgerCases(ledger.path, str(run_id), count)


def load_record(ledger: Ledger, row: Record) -> ProbeRecord:
    """A ``probe`` ledger row as a :class:`ProbeRecord` with its cases (see :func:`load_case_results`)."""
    record = ProbeRecord.from_json(row.body)
    record.id = record.id or row.id
    if record.cases_in_ledger:
        record.cases = load_case_results(ledger, row)
    return record
