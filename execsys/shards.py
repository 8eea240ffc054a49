"""A sharded evaluation checked as one: every shard present, clean, and of one system.

When an evaluation is split into N shards (a Slurm job array, a Kubernetes Indexed Job, ``execsys
run --shard K/N``), the merged score is read as one evaluation, yet nothing else checks that every
shard ran, nor that every shard ran the same system: one node with another engine build, one task
under a stale declaration, and the merged number mixes two systems. Each ``execsys run`` records
the shard it is (:mod:`execsys.run.shard`); given the shards' run records (sidecars, receipts, ledger
ids, or the ledger's runs since a time), this answers:

- **presence**: k/N shards present, each missing index named. N is the shards' own count (Slurm's
  ``SLURM_ARRAY_TASK_COUNT``, the ``N`` of ``--shard K/N``), or ``--expect N``, which must agree with
  it. A shard run twice (a requeued task) counts once, by its newest run; the earlier are listed;
- **identity agreement**: k/n shards share the modal system, compared by the fleet rule
  (:func:`execsys.fleet.fleet_components`): the pinned components with the facts that name one
  machine (hostname, machine id, GPU UUIDs) set aside, so shards on two nodes of one build agree.
  Each outlier is named with the components that differ, and the fields within them. A shard whose
  identity the ledger (or its lock) does not hold in full is compared by identity id alone;
- **verdicts**: every shard whose run was not clean (drifted, failed, interrupted, overridden,
  refused) is named; and a shard given by its receipt (``<result>.execsys.intoto.json``, whose
  predicate is the run record) whose subjects no longer match the files on disk is never counted
  clean (``receipt-mismatch``): its score would be read from bytes the run did not produce.

It answers for one job: runs of several jobs given together are refused (exit 2) unless ``--job``
picks one. ``exit_code`` is 0 only when every shard is present, clean and of one system; else 1.

    options = ShardsOptions.from_sources(declaration, lock, runs=["out/scores.json.execsys.json"])
    report = run(options)        # never prints
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from execsys import COMPONENTS
from execsys.errors import InputError, UsageError

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity

__all__ = ["ShardRun", "ShardsOptions", "ShardsReport", "run"]

SCHEMA = "execsys.shards/1"
RECEIPT_MISMATCH = "receipt-mismatch"  # a shard whose result files are not the ones its receipt names
FIELDS_SHOWN = 5  # per differing component, in the one-line outlier; --json has them all


@dataclass
class ShardsOptions:
    """Where the shards' run records come from, and how many shards there should be."""

    runs: list[str] = field(default_factory=list)  # sidecar paths or ledger record ids
    ledger_since: str | None = None  # ISO UTC, already parsed
    ledger_path: str | None = None
    expect: int | None = None
    job: str | None = None

    @classmethod
    def from_sources(cls, declaration: Declaration | None = None, lock: Identity | None = None,
                     **overrides: Any) -> ShardsOptions:
        """The runs (``runs`` or ``ledger_since``, exactly one), ``expect`` (a positive integer) and ``job``.

        The declaration and the lock play no part: the shards are compared with each other."""
        from execsys.fleet import parse_since

        runs = [str(r) for r in overrides.pop("runs", None) or []]
        since = overrides.pop("ledger_since", None)
        if not runs and not since:
            raise UsageError("no shards: give their run records (sidecars, ledger run ids) or --ledger-since T")
        if runs and since:
            raise UsageError("give the shards' run records or --ledger-since T, not both")
        expect = overrides.pop("expect", None)
        if expect is not None:
            try:
                expect = int(expect)
            except (TypeError, ValueError):
                raise UsageError(f"--expect {expect!r}: the number of shards, an integer") from None
            if expect < 1:
                raise UsageError(f"--expect {expect}: the number of shards, 1 or more")
        job = overrides.pop("job", None)
        if job is not None and not str(job).strip():
            raise UsageError("--job needs the job's key (a Slurm array job id, or the @GROUP of --shard K/N@GROUP)")
        options = cls(runs=runs, ledger_since=parse_since(str(since)) if since else None,
                      ledger_path=overrides.pop("ledger_path", None), expect=expect,
                      job=str(job).strip() if job is not None else None)
        if overrides:
            raise TypeError(f"unknown shards option(s): {', '.join(sorted(overrides))}")
        return options


@dataclass
class ShardRun:
    """One shard's run, reduced to what the answer needs."""

    run_id: str
    source: str  # where it was read: a sidecar path or "ledger"
    index: int
    count: int | None
    job: str | None
    shard_source: str
    verdict: str
    verdict_detail: str
    finished_at: str
    identity_id: str | None
    system: str = ""  # what agreement compares: the fleet digest, else "identity:<id>"
    components: dict[str, str] | None = None  # component -> fleet component digest, when known
    labels: dict[str, str] = field(default_factory=dict)  # component -> short value
    fleet_view: dict[str, Any] | None = None  # the fleet components, for field-level differences
    identity_note: str | None = None  # why only the id is known
    # each receipt given for this run, checked against its result files: {receipt, verified, mismatch, signature}
    receipts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def receipt_mismatch(self) -> str | None:
        """The first receipt's mismatch: a result that is no longer the file the run recorded."""
        return next((r["mismatch"] for r in self.receipts if r.get("mismatch")), None)

    @property
    def counted_verdict(self) -> str:
        """The run's verdict, unless its results no longer match its receipt: then never clean."""
        return RECEIPT_MISMATCH if self.receipt_mismatch else self.verdict

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "run": self.run_id, "source": self.source, "verdict": self.verdict,
                "identity": self.identity_id, "system": self.system, "job": self.job, "count": self.count,
                "shard_source": self.shard_source, "finished_at": self.finished_at, "receipts": self.receipts}


@dataclass
class ShardsReport:
    """The answer for one sharded run. ``shards`` are the counted runs, by index."""

    job: str | None
    expected: int | None
    expected_source: str
    shards: list[ShardRun]
    superseded: list[ShardRun] = field(default_factory=list)  # an index run again: the earlier runs
    out_of_range: list[ShardRun] = field(default_factory=list)  # an index >= N
    counts_disagree: list[dict[str, Any]] = field(default_factory=list)  # {count, shards}
    modal_system: str | None = None

    @property
    def present(self) -> list[int]:
        return [s.index for s in self.shards]

    @property
    def missing(self) -> list[int]:
        if self.expected is None:
            return []
        have = set(self.present)
        return [i for i in range(self.expected) if i not in have]

    @property
    def agreeing(self) -> int:
        return sum(1 for s in self.shards if s.system == self.modal_system)

    def outliers(self) -> list[dict[str, Any]]:
        from execsys.identity import describe_changes, field_changes

        modal = next((s for s in self.shards if s.system == self.modal_system), None)
        out = []
        for shard in self.shards:
            if modal is None or shard.system == self.modal_system:
                continue
            entry: dict[str, Any] = {"index": shard.index, "run": shard.run_id, "identity": shard.identity_id,
                                     "components": [], "changes": []}
            if shard.components is None or modal.components is None:
                entry["note"] = shard.identity_note or modal.identity_note or "the components are not known"
            else:
                for name in COMPONENTS:
                    if shard.components.get(name) == modal.components.get(name):
                        continue
                    fields = field_changes((modal.fleet_view or {}).get(name) or {},
                                           (shard.fleet_view or {}).get(name) or {})
                    entry["components"].append(name)
                    entry["changes"].append({"component": name, "modal": modal.labels.get(name, ""),
                                             "this": shard.labels.get(name, ""),
                                             "fields": describe_changes(fields, arrow="->")})
            out.append(entry)
        return out

    def not_clean(self) -> list[ShardRun]:
        return [s for s in self.shards if s.counted_verdict != "clean"]

    def reasons(self) -> list[str]:
        """Why this is not one evaluation, one sentence each; empty when it is."""
        reasons = []
        if self.expected is None:
            reasons.append("the number of shards is unknown (no shard recorded N): give --expect N")
        if self.missing:
            reasons.append(f"{len(self.missing)} of {self.expected} shards missing: {_indices(self.missing)}")
        for shard in self.out_of_range:
            reasons.append(f"shard {shard.index} ({shard.run_id}) is outside 0-{(self.expected or 1) - 1}")
        for entry in self.counts_disagree:
            reasons.append(f"shards {_indices(entry['shards'])} say there are {entry['count']} shards, not "
                           f"{self.expected} ({self.expected_source})")
        for outlier in self.outliers():
            what = ", ".join(outlier["components"]) or outlier.get("note") or "its identity"
            reasons.append(f"shard {outlier['index']} ran another system: {what}")
        for shard in self.not_clean():
            if shard.receipt_mismatch:
                reasons.append(f"shard {shard.index}'s results are not the files its receipt names: "
                               f"{shard.receipt_mismatch}")
            else:
                reasons.append(f"shard {shard.index} is {shard.verdict}")
        return reasons

    @property
    def one_evaluation(self) -> bool:
        return not self.reasons()

    @property
    def exit_code(self) -> int:
        return 0 if self.one_evaluation else 1

    def to_json(self) -> dict[str, Any]:
        n = len(self.shards)
        return {
            "schema": SCHEMA,
            "job": self.job,
            "shards": {"present": len(self.present), "expected": self.expected,
                       "expected_source": self.expected_source, "indices": self.present,
                       "missing": self.missing},
            "identity_agreement": {"k": self.agreeing, "n": n, "system": self.modal_system,
                                   "rule": "fleet components: the facts naming one machine set aside"},
            "outliers": self.outliers(),
            "verdicts": {s.counted_verdict: sum(1 for x in self.shards if x.counted_verdict == s.counted_verdict)
                         for s in self.shards},
            "not_clean": [{"index": s.index, "run": s.run_id, "verdict": s.counted_verdict,
                           "detail": s.receipt_mismatch or s.verdict_detail} for s in self.not_clean()],
            "superseded": [s.to_json() for s in self.superseded],
            "out_of_range": [s.to_json() for s in self.out_of_range],
            "counts_disagree": self.counts_disagree,
            "runs": [s.to_json() for s in self.shards],
            "reasons": self.reasons(),
            "verdict": "one evaluation" if self.one_evaluation else "not one evaluation",
        }


def _indices(indices: list[int]) -> str:
    shown = ", ".join(map(str, indices[:20]))
    return shown + (f" ... and {len(indices) - 20} more" if len(indices) > 20 else "")


# -- reading the runs -----------------------------------------------------------------------------

def _is_run(body: dict[str, Any] | None) -> bool:
    return isinstance(body, dict) and str(body.get("schema") or "").startswith("execsys.run/")


def _given_records(options: ShardsOptions, ledger: Any) -> list[tuple[str, dict[str, Any], str, dict[str, Any] | None]]:
    """(where, run body, when the ledger recorded it, the receipt's check) for each run given: a sidecar
    file, a receipt (``<result>.execsys.intoto.json``: its predicate is the run record, and its subjects
    are checked against the files on disk now), else a ledger record id (or prefix)."""
    from execsys.fsutil import read_json_object

    out: list[tuple[str, dict[str, Any], str, dict[str, Any] | None]] = []
    for ref in options.runs:
        if os.path.exists(ref):
            body = read_json_object(ref, "run sidecar")
            if isinstance(body, dict) and "payloadType" in body and "payload" in body:
                out.append(_receipt_record(ref))
                continue
            if not _is_run(body):
                raise InputError(f"{ref}: not an execsys run sidecar (a <result>.execsys.json that execsys run "
                                 "wrote) nor its receipt (<result>.execsys.intoto.json)")
            assert body is not None
            out.append((ref, body, "", None))
            continue
        record = ledger.get(ref)  # InputError naming it when the ledger has no such record
        if record.kind != "run" or not _is_run(record.body):
            raise InputError(f"ledger record {record.id} is a {record.kind} record, not a run")
        out.append(("ledger", record.body, record.created_at, None))
    return out


def _receipt_record(path: str) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    """A receipt as a shard's input: the run record its predicate holds, and whether every subject still
    matches its file (signatures are reported, not checked: ``execsys receipt verify --key`` does that)."""
    from execsys.receipt import read_receipt, verify_receipt

    _envelope, statement = read_receipt(path)  # InputError (exit 2) for what is not a receipt
    predicate = statement.get("predicate")
    if not _is_run(predicate):
        raise InputError(f"{path}: a receipt of {str((predicate or {}).get('schema') or 'no run')!r}, not of an "
                         "execsys run (an attach records no shard's run)")
    check = verify_receipt(path)
    assert isinstance(predicate, dict)
    return path, predicate, "", {"receipt": path, "verified": check.verified, "mismatch": check.mismatch,
                                 "signature": check.signature, "subjects": len(check.subjects)}


def _ledger_runs(options: ShardsOptions, ledger: Any) -> list[tuple[str, dict[str, Any], str, dict[str, Any] | None]]:
    since = options.ledger_since or ""
    return [("ledger", r.body, r.created_at, None) for r in ledger.iter(kind="run") if r.created_at >= since
            and _is_run(r.body) and isinstance(r.body.get("shard"), dict)]


def _identity_of(body: dict[str, Any]) -> dict[str, Any]:
    identity = body.get("identity")
    return identity if isinstance(identity, dict) else {}


def _shard_run(where: str, body: dict[str, Any], recorded_at: str = "") -> ShardRun:
    shard = body.get("shard")
    run_id = str(body.get("id") or "?")
    if not isinstance(shard, dict) or not isinstance(shard.get("index"), int):
        raise InputError(f"{where if where != 'ledger' else run_id}: run {run_id} records no shard (run each shard "
                         "inside a Slurm job array or Indexed Job, or with --shard K/N)")
    count = shard.get("count")
    identity = _identity_of(body)
    job = shard.get("job")
    return ShardRun(run_id=run_id, source=where, index=shard["index"],
                    count=count if isinstance(count, int) else None,
                    job=str(job) if job is not None else None, shard_source=str(shard.get("source") or "?"),
                    verdict=str(body.get("verdict") or "?"), verdict_detail=str(body.get("verdict_detail") or ""),
                    # a refused run never started: when the ledger recorded it orders it among its reruns
                    finished_at=str(body.get("finished_at") or body.get("started_at") or recorded_at),
                    identity_id=identity.get("id"))


def _resolve_system(shard: ShardRun, lock_path: str | None, ledger: Any, cache: dict[str, Any]) -> None:
    """Fill in what the shard's system is: its identity's fleet components, from the ledger's
    identity record, else from the lock the run names (when it still holds that identity)."""
    from execsys.fleet import component_digests, component_label, fleet_components, fleet_digest
    from execsys.identity import Identity, load_lock

    ident = shard.identity_id
    if not ident:
        shard.system, shard.identity_note = "identity:none", "the run recorded no identity (it was refused)"
        return
    if ident not in cache:
        found: Identity | None = None
        for record in ledger.iter(kind="identity", identity=ident, newest_first=True, limit=1):
            found = Identity.from_json(record.body, where=f"ledger record {record.id}")
        if found is None and lock_path and os.path.isfile(lock_path):
            try:
                candidate = load_lock(lock_path)
            except InputError:
                candidate = None
            if candidate is not None and candidate.id == ident:
                found = candidate
        cache[ident] = found
    identity = cache[ident]
    if identity is None or not identity.components:
        shard.system = f"identity:{ident}"
        shard.identity_note = (f"identity {ident[:12]} is known by its id alone (no identity record in the ledger, "
                               "no lock holding it)")
        return
    digests = component_digests(identity.components)
    shard.components = digests
    shard.system = fleet_digest(digests)
    shard.fleet_view = fleet_components(identity.components)
    shard.labels = {name: component_label(name, identity.components.get(name) or {}) for name in COMPONENTS}


def run(options: ShardsOptions) -> ShardsReport:
    """Read the shards' runs, pick the job, count, compare; never prints."""
    from execsys.ledger import Ledger

    with Ledger.open(options.ledger_path) as ledger:
        given = _given_records(options, ledger) if options.runs else _ledger_runs(options, ledger)
        seen: dict[str, ShardRun] = {}
        runs: list[ShardRun] = []
        locks: dict[str, str | None] = {}
        for where, body, recorded_at, receipt in given:
            run_id = str(body.get("id") or "")
            if run_id and run_id in seen:  # two sidecars or receipts of one run (it wrote two results): one shard
                if receipt is not None:
                    seen[run_id].receipts.append(receipt)
                continue
            shard = _shard_run(where, body, recorded_at)
            if receipt is not None:
                shard.receipts.append(receipt)
            seen[run_id] = shard
            locks[shard.run_id] = _identity_of(body).get("lock")
            runs.append(shard)
        if not runs:
            raise InputError("no sharded runs found" + (f" in the ledger since {options.ledger_since}"
                                                        if options.ledger_since else ""))
        jobs = Counter(r.job for r in runs)
        if options.job is not None:
            runs = [r for r in runs if r.job == options.job]
            if not runs:
                known = ", ".join(sorted(str(j) for j in jobs))
                raise InputError(f"--job {options.job}: no shard of that job among the runs (jobs: {known})")
        elif len(jobs) > 1:
            named = ", ".join(f"{j or '(unnamed)'} ({n} run{'s' if n != 1 else ''})" for j, n in sorted(
                jobs.items(), key=lambda kv: str(kv[0])))
            raise UsageError(f"these runs are shards of {len(jobs)} jobs: {named}; give the runs of one, or --job KEY")
        cache: dict[str, Any] = {}
        for shard in runs:
            _resolve_system(shard, locks.get(shard.run_id), ledger, cache)

    # an index run more than once: its newest run counts
    runs.sort(key=lambda r: (r.index, r.finished_at))
    newest: dict[int, ShardRun] = {}
    superseded: list[ShardRun] = []
    for shard in runs:
        if shard.index in newest:
            superseded.append(newest[shard.index])
        newest[shard.index] = shard
    counted = [newest[i] for i in sorted(newest)]

    counts = Counter(s.count for s in counted if s.count is not None)
    if options.expect is not None:
        expected, source = options.expect, "--expect"
    elif counts:
        expected = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        source = "the shards' own count" + (" (the most of them)" if len(counts) > 1 else "")
    else:
        expected, source = None, "unknown"
    disagree = [{"count": c, "shards": [s.index for s in counted if s.count == c]}
                for c in sorted(counts) if c != expected]
    out_of_range = [s for s in counted if expected is not None and not 0 <= s.index < expected]
    in_range = [s for s in counted if s not in out_of_range]
    systems = Counter(s.system for s in in_range)
    # the modal system; a tie goes to the one the lowest shard ran
    first = {s.system: s.index for s in reversed(in_range)}
    modal = min(systems, key=lambda k: (-systems[k], first[k])) if systems else None
    job = options.job if options.job is not None else next(iter(jobs))
    return ShardsReport(job=job, expected=expected, expected_source=source, shards=in_range,
                        superseded=superseded, out_of_range=out_of_range, counts_disagree=disagree,
                        modal_system=modal)
