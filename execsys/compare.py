"""Compare two results and say what the comparison is entitled to claim.

Two numbers side by side claim comparable conditions. ``compare`` names the components that moved
between the two results' identities (via the identity diff) and labels the comparison:

- ``causal`` only when exactly the declared intervention moved, and the two results came from one
  session or crossed only boundaries licensed (measured at agreement 1.0) for their identities;
- ``descriptive`` otherwise: both numbers are reported, no causal sentence is produced, and the
  reasons say why (more than the intervention moved; the crossed axis is unstable or unmeasured).

Every comparison is recorded in the ledger (kind ``comparison``), so that ``execsys scope --audit``
can flag it later if an axis it crossed is found unstable.

Result file format (``execsys.result/1``; JSON)::

    {"schema": "execsys.result/1",             # optional
     "identity": "execsys.lock.json",          # lock path (relative to this file), ledger id or identity id
     "session": "2026-11-30-run-1",            # runs in one server session share this
     "host": "gpu1",                           # optional
     "concurrency": 1,                         # optional
     "outcomes": {"case-1": true, "case-2": false}}   # per case: true/false, 1/0, or {"correct": bool}

A result may also be a ledger record: ``plan-run-...:ARM`` (one arm of a paired run) or
``probe-...:PASS`` (one pass of a probe, outcomes compared for agreement only).

Results that harnesses write are read as they are (adapters in :mod:`execsys.harnesses`): an
lm-eval ``results_*.json`` (per-case outcomes from the ``samples_<task>_*.jsonl`` beside it), an
Inspect ``.eval``/``.json`` log (read with Inspect's own reader), or a run id ``run-...`` (its one
result, or ``run-...:PATH``). Their identity comes from the ``<result>.execsys.json`` sidecar that
``execsys run``/``attach`` wrote, else from the harness's embedded metadata; a result with neither
is compared descriptively, with the reason "no identity recorded for A".
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execsys import COMPONENTS
from execsys.errors import InputError, UsageError
from execsys.fsutil import RECORD_FILE_LIMIT, read_bounded, read_json_object
from execsys.ledger import Ledger
from execsys.scope import IdentityRef, ScopeReport, compute_scope, resolve_identity

RESULT_SCHEMA = "execsys.result/1"
SCHEMA = "execsys.comparison/1"


@dataclass
class Result:
    ref: str
    identity: IdentityRef
    outcomes: dict[str, Any]
    session: str | None = None
    host: str | None = None
    concurrency: int | None = None
    paired_run: str | None = None  # the plan-run record this arm belongs to
    paired_failures: list[str] = field(default_factory=list)  # checks that failed in that run
    run: str | None = None  # the execsys run (or attach) record that produced or described it
    caveats: list[str] = field(default_factory=list)  # "{side}" reasons that make it descriptive

    def binary(self) -> dict[str, bool] | None:
        """Outcomes as right/wrong, or None when they are answers rather than scores."""
        values: dict[str, bool] = {}
        for case, value in self.outcomes.items():
            if isinstance(value, dict) and isinstance(value.get("correct"), bool):
                values[case] = value["correct"]
            elif isinstance(value, bool):
                values[case] = value
            elif isinstance(value, (int, float)) and value in (0, 1):
                values[case] = bool(value)
            else:
                return None
        return values

    def to_json(self) -> dict[str, Any]:
        binary = self.binary()
        return {
            "ref": self.ref, "identity": self.identity.id, "session": self.session, "host": self.host,
            "concurrency": self.concurrency, "n": len(self.outcomes),
            "rate": (sum(binary.values()) / len(binary)) if binary else None, "run": self.run,
        }


def load_result(ref: str, ledger: Ledger) -> Result:
    """A result file, or ``RECORD:ARM`` / ``RECORD:PASS`` naming a plan-run or probe record."""
    path = Path(ref)
    if path.is_file():
        harness_result = _load_harness_file(path, ledger)
        return harness_result if harness_result is not None else _load_file(path, ledger)
    record_ref, _, part = ref.partition(":")
    if record_ref.startswith(("run-", "attach-")):
        return _load_run(ref, record_ref, part, ledger)
    try:
        record = ledger.get(record_ref)
    except InputError:
        raise InputError(f"{ref}: neither a result file nor a ledger record") from None
    if record.kind == "plan-run":
        arms = list((record.body.get("arms") or {}).keys())
        if part not in arms:
            raise InputError(f"{ref}: name one arm of the paired run as {record.id}:ARM (arms: {', '.join(arms)})")
        outcomes = {case: {"correct": bool(o.get(part, {}).get("correct"))}
                    for case, o in (record.body.get("outcomes") or {}).items() if part in o and not o[part].get("error")}
        ident = record.identity or record.body.get("identity") or f"unpinned:{record.id}"
        identity = _identity(ident, ledger)
        host = (record.body.get("arms") or {}).get(part, {}).get("host")
        failures = [f"{c.get('name')}: {c.get('detail')}" for c in record.body.get("checks") or [] if not c.get("passed")]
        return Result(ref, identity, outcomes, session=record.id, host=host, paired_run=record.id,
                      paired_failures=failures)
    if record.kind == "probe":
        try:
            index = int(part or 0)
        except ValueError:
            raise InputError(f"{ref}: name a pass of the probe as {record.id}:0, :1, ...") from None
        # the cases live in the body or, for a large probe, in probe-result rows beside it
        from execsys.probes.record import load_case_results

        outcomes = {}
        for case in load_case_results(ledger, record):
            passes = case.passes
            if index < len(passes) and passes[index] and not passes[index].get("error"):
                outcomes[case.id] = passes[index].get("outcome") or passes[index].get("digest")
        ident = record.identity or f"unpinned:{record.id}"
        return Result(ref, _identity(ident, ledger), outcomes, session=f"{record.id}:pass{index}")
    raise InputError(f"{ref}: ledger record {record.id} is a {record.kind} record, not a result")


def _load_harness_file(path: Path, ledger: Ledger, run: dict[str, Any] | None = None) -> Result | None:
    """A harness's own result file (None when no harness adapter claims it)."""
    from execsys.harnesses import registry
    from execsys.harnesses.base import sidecar_name

    adapter = registry.for_file(path)
    if adapter.name == "other":
        return None
    loaded = adapter.read(path)
    if not loaded.outcomes:
        raise InputError(f"{path}: no per-case outcomes to compare" + (f" ({'; '.join(loaded.notes)})"
                                                                       if loaded.notes else ""))
    sidecar_file = path.with_name(sidecar_name(path.name))
    if run is None and sidecar_file.is_file():
        with_sidecar = read_json_object(sidecar_file, "run sidecar")
        run = with_sidecar if with_sidecar is not None else None
    caveats: list[str] = []
    ident: str | None = None
    lock: str | None = None
    if run is not None:
        ident = (run.get("identity") or {}).get("id")
        lock = (run.get("identity") or {}).get("lock")
        if run.get("attached_after"):
            caveats.append("identity recorded after the run for {side} (attached): descriptive only")
        elif run.get("drifted"):
            caveats.append(f"run {run.get('id')} for {{side}} drifted: its result is not attributable to one system")
    if not ident and loaded.embedded:
        ident = loaded.embedded.get("identity")
    run_id = (run or {}).get("id") or (loaded.embedded or {}).get("run")
    if not ident:
        caveats.append("no identity recorded for {side}")
        identity = IdentityRef(f"unrecorded:{path}", {}, str(path))
    else:
        identity = _known_identity(str(ident), lock, ledger)
    return Result(str(path), identity, loaded.outcomes, session=str(run_id) if run_id else None,
                  run=str(run_id) if run_id else None, caveats=caveats)


def _known_identity(ident: str, lock: str | None, ledger: Ledger) -> IdentityRef:
    """The identity by id: its lock when that still holds it, else the ledger, else the bare id."""
    if lock and Path(lock).is_file():
        with contextlib.suppress(InputError):
            found = resolve_identity(lock, ledger)
            if found.id == ident:
                return found
    try:
        return resolve_identity(ident, ledger)
    except InputError:
        return IdentityRef(ident, {}, ident)


def _load_run(ref: str, record_ref: str, part: str, ledger: Ledger) -> Result:
    """``run-...`` (its one result) or ``run-...:PATH``, through the sidecar the run wrote."""
    from execsys.harnesses import registry

    try:
        record = ledger.get(record_ref)
    except InputError:
        raise InputError(f"{ref}: no such run in the ledger") from None
    if record.kind not in ("run", "attach"):
        raise InputError(f"{ref}: ledger record {record.id} is a {record.kind} record, not a run")
    results = [r for r in record.body.get("results") or [] if isinstance(r, dict)]
    if part:
        chosen = [r for r in results if r.get("path") == part or str(r.get("path", "")).endswith("/" + part)
                  or Path(str(r.get("path"))).name == part]
    else:
        chosen = [r for r in results if registry.by_name(str(r.get("harness"))).is_primary(Path(str(r.get("path"))))]
    if len(chosen) != 1:
        listed = ", ".join(str(r.get("path")) for r in results) or "none"
        raise InputError(f"{ref}: name one result of the run as {record.id}:PATH (its results: {listed})")
    path = Path(str(chosen[0]["path"]))
    if not path.is_file():
        raise InputError(f"{ref}: the run's result {path} is no longer there")
    loaded = _load_harness_file(path, ledger, run=record.body)
    if loaded is None:
        loaded = _load_file(path, ledger)
        loaded.run = loaded.session = record.id
    loaded.ref = ref
    return loaded


def _identity(ident: str, ledger: Ledger) -> IdentityRef:
    if ident.startswith("unpinned:"):
        return IdentityRef(ident, {}, ident)
    return resolve_identity(ident, ledger)


def _load_file(path: Path, ledger: Ledger) -> Result:
    try:
        data = json.loads(read_bounded(path, RECORD_FILE_LIMIT, "result file").decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable JSON result file ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a result file is a JSON object ({RESULT_SCHEMA})")
    if data.get("schema") not in (None, RESULT_SCHEMA):
        raise InputError(f"{path}: schema {data.get('schema')!r} is not {RESULT_SCHEMA}")
    ident = data.get("identity")
    if not isinstance(ident, str) or not ident:
        raise InputError(f"{path}: 'identity' (a lock path, ledger id or identity id) is required")
    outcomes = data.get("outcomes")
    if not isinstance(outcomes, dict) or not outcomes:
        raise InputError(f"{path}: 'outcomes' must be a non-empty object {{case id: outcome}}")
    relative = path.parent / ident
    identity = resolve_identity(str(relative) if relative.is_file() else ident, ledger)
    concurrency = data.get("concurrency")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)):
        raise InputError(f"{path}: 'concurrency' must be an integer")
    session, host = data.get("session"), data.get("host")
    return Result(str(path), identity, {str(k): v for k, v in outcomes.items()},
                  session=str(session) if session is not None else None,
                  host=str(host) if host is not None else None, concurrency=concurrency)


@dataclass
class Comparison:
    a: Result
    b: Result
    moved: list[str] | None  # None when a side has no pinned identity to diff
    changes: dict[str, Any]
    intervention: list[str]
    crossed: list[str]
    reasons: list[str]
    label: str
    statement: str
    paired: dict[str, Any] | None
    paired_control: bool
    record: str | None = None
    scopes: dict[str, ScopeReport] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "record": self.record, "a": self.a.to_json(), "b": self.b.to_json(),
            "identities": sorted({self.a.identity.id, self.b.identity.id}), "moved": self.moved,
            "changes": self.changes, "intervention": self.intervention, "crossed": self.crossed,
            "label": self.label, "reasons": self.reasons, "statement": self.statement, "paired": self.paired,
            "paired_control": self.paired_control,
        }


def crossed_axes(a: Result, b: Result) -> list[str]:
    """The probe axes separating two results: none inside one session; a restart between sessions;
    hosts when the hosts differ; concurrency when the load differs."""
    crossed: list[str] = []
    same_session = a.session is not None and a.session == b.session
    if not same_session:
        crossed.append("restart")
        if (a.host or "") != (b.host or "") and (a.host or b.host):
            crossed.append("hosts")
    if a.concurrency is not None and b.concurrency is not None and a.concurrency != b.concurrency:
        crossed.append("concurrency")
    return crossed


def compare(a: Result, b: Result, ledger: Ledger, intervention: list[str] | None = None, *,
            record: bool = True) -> Comparison:
    """Label the comparison causal or descriptive, compute the figures, and record it."""
    from execsys.stats import mcnemar_exact, paired_difference_ci

    intervention = list(intervention or [])
    for name in intervention:
        if name not in COMPONENTS:
            raise UsageError(f"--intervention {name!r}: not a component (one of {', '.join(COMPONENTS)})")
    reasons: list[str] = []
    moved: list[str] | None
    changes: dict[str, Any] = {}
    if a.identity.identity is not None and b.identity.identity is not None:
        from execsys.identity import diff_identities

        report = diff_identities(a.identity.identity, b.identity.identity)
        moved, changes = list(report.moved), report.changes
    elif a.identity.id == b.identity.id:
        moved = []
    else:
        moved = None
        reasons.append("the components that moved cannot be named: "
                       + ", ".join(f"{r.ref} has no pinned identity record" for r in (a, b)
                                   if r.identity.identity is None))
    for side, result in (("A", a), ("B", b)):
        reasons.extend(caveat.format(side=side) for caveat in result.caveats)
    paired_control = bool(a.paired_run) and a.paired_run == b.paired_run
    if paired_control:
        # Both arms of one pre-registered paired run: the intervention is what the arms differ in,
        # and the run's own order, placement, window and identity checks decide the label.
        reasons = [f"the paired run's check failed ({f})" for f in a.paired_failures]
    elif moved is not None:
        extra = [m for m in moved if m not in intervention]
        if not intervention:
            reasons.append("no intervention declared (give --intervention COMPONENT)"
                           + (f"; moved: {', '.join(moved)}" if moved else "; no component moved"))
        elif extra and not any(m in moved for m in intervention):
            reasons.append(f"the declared intervention ({', '.join(intervention)}) did not move; "
                           f"{', '.join(extra)} moved instead")
        elif extra:
            reasons.append(f"more than the declared intervention moved: {', '.join(extra)}")
        elif not any(m in moved for m in intervention):
            reasons.append(f"the declared intervention ({', '.join(intervention)}) did not move")

    crossed = [] if paired_control else crossed_axes(a, b)
    scopes: dict[str, ScopeReport] = {}
    for result in (a, b):
        if result.identity.id not in scopes:
            scopes[result.identity.id] = compute_scope(ledger, result.identity.id)
    for axis in crossed:
        for ident, scope in scopes.items():
            if axis in scope.unstable:
                reasons.append(f"different sessions and {axis} is unstable under identity {ident[:12]} "
                               f"({axis} agreement {scope.measured[axis].figure()})")
            elif axis in scope.unmeasured:
                reasons.append(f"different sessions and {axis} was never probed under identity {ident[:12]}")

    paired = _paired(a, b, mcnemar_exact, paired_difference_ci)
    label = "descriptive" if reasons else "causal"
    statement = _statement(a, b, paired, label, intervention, reasons, crossed, paired_control)
    comparison = Comparison(a, b, moved, changes, intervention, crossed, reasons, label, statement, paired,
                            paired_control, scopes=scopes)
    if record:
        comparison.record = ledger.append("comparison", comparison.to_json(), identity=a.identity.id)
    return comparison


def _paired(a: Result, b: Result, mcnemar_exact, paired_difference_ci) -> dict[str, Any] | None:
    common = sorted(set(a.outcomes) & set(b.outcomes))
    ba, bb = a.binary(), b.binary()
    if ba is None or bb is None:
        agree = sum(1 for case in common if a.outcomes[case] == b.outcomes[case])
        return {"kind": "agreement", "n": len(common), "agree": agree,
                "agreement_rate": agree / len(common) if common else None}
    n = len(common)
    disc_b = sum(1 for case in common if ba[case] and not bb[case])
    disc_c = sum(1 for case in common if bb[case] and not ba[case])
    ci = paired_difference_ci(disc_b, disc_c, n)
    return {
        "kind": "paired", "n": n, "b": disc_b, "c": disc_c,
        "rate_a": sum(ba[c] for c in common) / n if n else None,
        "rate_b": sum(bb[c] for c in common) / n if n else None,
        "difference": (disc_c - disc_b) / n if n else None,  # B - A: the effect of moving to B
        "ci95": [-ci[1], -ci[0]] if ci else None,
        "mcnemar_p": mcnemar_exact(disc_b, disc_c),
        "only_in_a": len(set(a.outcomes) - set(b.outcomes)), "only_in_b": len(set(b.outcomes) - set(a.outcomes)),
    }


def _statement(a: Result, b: Result, paired: dict[str, Any] | None, label: str, intervention: list[str],
               reasons: list[str], crossed: list[str], paired_control: bool) -> str:
    ra, rb = a.to_json()["rate"], b.to_json()["rate"]
    if ra is not None and rb is not None:
        numbers = f"A ({a.ref}) {ra:.3f} over {len(a.outcomes)} cases, B ({b.ref}) {rb:.3f} over {len(b.outcomes)} cases"
    else:
        agree = paired or {}
        # a paired count with a side that has no scored case (every case of an arm errored) shares none
        numbers = (f"A ({a.ref}) and B ({b.ref}): outcomes agree on {agree.get('agree', 0)}/{agree.get('n')} shared cases")
    if label == "descriptive":
        return f"Descriptive only: {numbers}. No causal claim: " + "; ".join(reasons) + "."
    where = ("inside one contemporaneous paired run" if paired_control else
             "inside one session" if not crossed else f"across {', '.join(crossed)} (licensed at agreement 1.0)")
    if paired and paired.get("kind") == "paired" and paired["n"]:
        ci = paired["ci95"]
        change = f"changing {', '.join(intervention)}" if intervention else f"switching from {a.ref} to {b.ref}"
        effect = (f"{change} moved the rate by {paired['difference']:+.3f} "
                  f"(B - A, 95% CI {ci[0]:+.3f} to {ci[1]:+.3f}; discordant {paired['b']} vs {paired['c']}, "
                  f"exact McNemar p = {paired['mcnemar_p']:.4g}, n = {paired['n']} paired cases)")
    else:
        effect = (f"changing {', '.join(intervention)} is the only difference between the two runs" if intervention
                  else "the two arms differ only in what the paired run set them apart by")
    return f"Causal, {where}: {effect}. {numbers}."
