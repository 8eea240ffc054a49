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
from execsys.stats import wilson

from .compare import context, first_divergence, first_token_divergence
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

    by_record = [{case.id: case for case in record.cases} for record in records]
    n = m = 0
    cases: list[CaseResult] = []
    flipped: list[str] = []
    errored: list[str] = []
    for case in first.cases:
        slots = []
        for table in by_record:
            stored = table.get(case.id)
            slots.append((stored.passes[0] if stored and stored.passes else None) or None)
        passes = [{"digest": s.get("digest"), "outcome": s.get("outcome"), "error": s.get("error")} if s else None
                  for s in slots]
        if any(s is None or s.get("error") or not s.get("digest") for s in slots):
            errored.append(case.id)
            cases.append(CaseResult(case.id, passes, None))
            continue
        n += 1
        digests = [s["digest"] for s in slots]
        agree = len(set(digests)) == 1
        m += agree
        divergence = None
        if not agree:
            k = next(i for i, d in enumerate(digests) if d != digests[0])
            divergence = _divergence(ledger, records[0].run, records[k].run, case.id, k)
            flipped.append(case.id)
        cases.append(CaseResult(case.id, passes, agree, None, len(set(digests)), divergence))
    ci = wilson(m, n)
    rate = m / n if n else None
    holds = n > 0 and m == n
    statement = ("stable across hosts for these cases: outputs carry across these hosts" if holds
                 else "unstable across hosts: scope comparisons to one host (same hardware and drivers)")
    if n == 0:
        sentence = "hosts agreement: no case completed on every host"
    else:
        assert ci is not None
        sentence = f"hosts agreement {m}/{n} = {rate:.2f} (95% CI {ci[0]:.2f}–{ci[1]:.2f}) — {statement}"
    level = {"m": m, "n": n, "rate": rate, "ci95": list(ci) if ci else None}
    merged = ProbeRecord(
        axis="hosts", identity=None,
        target={"kind": "merge", "records": [r.id for r in records],
                "identities": [r.identity for r in records],
                "endpoints": [e for r in records for e in (r.target.get("endpoints") or [])]},
        n=n, m=m, agreement_rate=rate, ci95=list(ci) if ci else None,
        compare={"level": "output", "output": level, "outcome": None}, errored=len(errored), flipped=flipped,
        cases=cases, started_at=min(r.started_at for r in records), finished_at=now_iso(),
        scope={"axis": "hosts", "boundary": "across hosts", "holds": holds if n else None, "level": "output",
               "statement": statement, "engine_changed": False},
        sentence=sentence, passes=[{"index": i, "label": f"host {i + 1}", "record": r.id,
                                    "target": (r.target.get("endpoints") or [None])[0]} for i, r in enumerate(records)],
        repeats=len(records), decoding=first.decoding, cases_file=first.cases_file, cases_digest=first.cases_digest,
        errored_cases=errored,
    )
    merged.id = new_id("probe")
    ledger.append("probe", merged.to_json(), record_id=merged.id)
    return merged


def _divergence(ledger: Ledger, run_a: str | None, run_b: str | None, case_id: str, k: int) -> dict[str, Any]:
    def text(run: str | None) -> tuple[str | None, list[str] | None]:
        row = ledger.child(run, f"0:{case_id}") if run else None
        return (row.body.get("text"), row.body.get("tokens")) if row else (None, None)

    (a, ta), (b, tb) = text(run_a), text(run_b)
    if a is None or b is None:
        return {"pass": k, "char": None, "token": None}
    char = first_divergence(a, b)
    return {"pass": k, "char": char, "token": first_token_divergence(ta, tb),
            "a": context(a, char or 0), "b": context(b, char or 0)}
