"""``execsys probe merge RECORD...``: one hosts-axis record from probes taken separately per host.

Each record's first pass is one host's outputs. Merging is only honest when the records
speak about the same cases and decoding, under identities that differ in nothing but the
hardware/host component; otherwise the merge is refused, naming the components that moved
(a difference there would be mistaken for a host effect).
"""

from __future__ import annotations

from typing import Any

from execsys.canonical import content_id
from execsys.errors import InputError, UsageError
from execsys.ledger import Ledger, new_id, now_iso

from .agreement import AgreementFold, Slot, sentence
from .axes import AXES
from .compare import divergence_between
from .record import CaseResult, ProbeRecord, load_record

HOST_COMPONENTS = ("hardware",)


def _lock_for(ledger: Ledger, identity: str) -> dict[str, Any] | None:
    for row in ledger.iter(kind="identity", identity=identity, newest_first=True, limit=1):
        return row.body
    for row in ledger.iter(kind="identity", newest_first=True):
        if row.body.get("id") == identity:
            return row.body
    return None


def _components(lock: dict[str, Any]) -> dict[str, str]:
    comps = lock.get("components") or {}
    return {name: content_id(value) for name, value in comps.items()} if isinstance(comps, dict) else {}


def merge(ledger: Ledger, record_ids: list[str]) -> ProbeRecord:
    if len(record_ids) < 2:
        raise UsageError("probe merge needs two or more probe record ids (one per host)")
    records: list[ProbeRecord] = []
    for rid in record_ids:
        row = ledger.get(rid)
        if row.kind != "probe":
            raise InputError(f"record {row.id} is a {row.kind}, not a probe record")
        record = load_record(ledger, row)
        record.id = row.id
        records.append(record)
    first = records[0]
    for record in records[1:]:
        if record.cases_digest != first.cases_digest:
            raise InputError(f"records {first.id} and {record.id} probed different cases: merge needs the same cases")
        if record.decoding != first.decoding:
            raise InputError(f"records {first.id} and {record.id} used different decoding: {first.decoding} vs {record.decoding}")
    for record in records:
        if not record.identity:
            raise InputError(f"record {record.id} has no identity: probe each host with --lock so the merge can check what moved")
    locks = {}
    for record in records:
        lock = _lock_for(ledger, record.identity or "")
        if lock is None:
            raise InputError(
                f"identity {record.identity[:12]} of record {record.id} is not in this ledger: "  # type: ignore[index]
                "run 'execsys pin' with this ledger on that host first"
            )
        locks[record.id] = _components(lock)
    reference = locks[first.id]
    moved: set[str] = set()
    for record in records[1:]:
        other = locks[record.id]
        for name in set(reference) | set(other):
            if name not in HOST_COMPONENTS and reference.get(name) != other.get(name):
                moved.add(name)
    if moved:
        raise InputError(
            "refusing to merge: the identities differ in more than hardware/host "
            f"({', '.join(sorted(moved))} moved too), so a disagreement would not be a host effect"
        )

    axis = AXES["hosts"]
    by_record = [{case.id: case for case in record.cases} for record in records]
    fold = AgreementFold(divergence=lambda case_id, k: _divergence(ledger, records[0].run, records[k].run,
                                                                   case_id, k))
    cases: list[CaseResult] = []
    for case in first.cases:
        slots: list[Slot | None] = []
        for table in by_record:
            stored = table.get(case.id)
            first_pass = (stored.passes[0] if stored and stored.passes else None) or None
            slots.append(Slot(first_pass.get("digest"), first_pass.get("outcome"), first_pass.get("error"))
                         if first_pass else None)
        cases.append(fold.add(case.id, slots))
    boundary = axis.boundary()
    statement = axis.statement(boundary, None, fold.holds, None)
    merged = ProbeRecord(
        axis="hosts", identity=None,
        target={"kind": "merge", "records": [r.id for r in records],
                "identities": [r.identity for r in records],
                "endpoints": [e for r in records for e in (r.target.get("endpoints") or [])]},
        n=fold.n, m=fold.m, agreement_rate=fold.rate(), ci95=fold.ci95(),
        compare=fold.compare_json(None), errored=fold.errored, flipped=fold.flipped,
        cases=cases, started_at=min(r.started_at for r in records), finished_at=now_iso(),
        scope={"axis": "hosts", "boundary": boundary, "holds": fold.holds if fold.n else None, "level": "output",
               "statement": statement, "engine_changed": False},
        sentence=sentence("hosts", "output", fold, statement, nothing="no case completed on every host"),
        passes=[{"index": i, "label": f"host {i + 1}", "record": r.id,
                 "target": (r.target.get("endpoints") or [None])[0]} for i, r in enumerate(records)],
        repeats=len(records), decoding=first.decoding, cases_file=first.cases_file, cases_digest=first.cases_digest,
        errored_cases=fold.errored_cases,
    )
    merged.id = new_id("probe")
    ledger.append("probe", merged.to_json(), record_id=merged.id)
    return merged


def _divergence(ledger: Ledger, run_a: str | None, run_b: str | None, case_id: str, k: int) -> dict[str, Any]:
    def text(run: str | None) -> tuple[str | None, list[str] | None]:
        row = ledger.child(run, f"0:{case_id}") if run else None
        return (row.body.get("text"), row.body.get("tokens")) if row else (None, None)

    return divergence_between(text(run_a), text(run_b), k)
