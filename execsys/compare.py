"""Compare two results and say what the comparison is entitled to claim.

Two numbers side by side claim comparable conditions. ``compare`` names the components that moved
between the two results' identities (via the identity diff) and labels the comparison:

- ``causal`` only when the declared intervention is exactly what moved between the two identities,
  and the two results came from one session (or one paired run) or crossed only boundaries licensed
  (measured at agreement 1.0) for their identities;
- ``descriptive`` otherwise: both numbers are reported, no causal sentence is produced, and the
  reasons say why ("you named budget; what moved: artifact"; the crossed axis is unstable or
  unmeasured; the arms' identities were not observed; the result changed since its run recorded it).

What moved is derived from the identities, never from the label: the arms of a paired run compare
by their own identities (``arms.<ARM>.identity`` in the plan-run record); a plan run that recorded
one identity for both arms did not observe what its arms differ in, so the comparison is
descriptive. A sidecar is a claim, checked whenever it is read: the run it names must be in the
ledger (whose record, not the sidecar, then says what the run ran under), and every result file
read must still have the BLAKE3 the run recorded for it.

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
import os
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
    # a paired-run arm whose own identity was not observed: why (its identity is then the run's)
    unobserved: str | None = None

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
        arm = (record.body.get("arms") or {}).get(part)
        arm = arm if isinstance(arm, dict) else {}
        identity, unobserved = _arm_identity(record, part, arm, ledger)
        failures = [f"{c.get('name')}: {c.get('detail')}" for c in record.body.get("checks") or [] if not c.get("passed")]
        return Result(ref, identity, outcomes, session=record.id, host=arm.get("host"), paired_run=record.id,
                      paired_failures=failures, unobserved=unobserved)
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


def _arm_identity(record: Any, arm_name: str, arm: dict[str, Any], ledger: Ledger) -> tuple[IdentityRef, str | None]:
    """The arm's own identity (``arms.<ARM>.identity``), or the run's with the reason it is not the arm's."""
    if "identity" in arm:
        own = arm.get("identity")
        own = own.get("id") if isinstance(own, dict) else own
        if isinstance(own, str) and own:
            return _known_identity(own, None, ledger), None
        reason = arm.get("identity_reason")
        unobserved = str(reason) if isinstance(reason, str) and reason else (
            f"{record.id} observed no identity for arm {arm_name}")
    else:
        unobserved = f"{record.id} records one identity for both arms"
    ident = record.identity or record.body.get("identity") or f"unpinned:{record.id}"
    return _identity(str(ident), ledger), unobserved


def _load_harness_file(path: Path, ledger: Ledger, run: dict[str, Any] | None = None) -> Result | None:
    """A harness's own result file (None when no harness adapter claims it)."""
    from execsys.harnesses import registry

    adapter = registry.for_file(path)
    if adapter.name == "other":
        return None
    loaded = adapter.read(path)
    if not loaded.outcomes:
        raise InputError(f"{path}: no per-case outcomes to compare" + (f" ({'; '.join(loaded.notes)})"
                                                                       if loaded.notes else ""))
    run, caveats = _provenance(path, loaded.sources, ledger, run)
    ident: str | None = None
    lock: str | None = None
    if run is not None:
        ident = (run.get("identity") or {}).get("id")
        lock = (run.get("identity") or {}).get("lock")
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


def _provenance(path: Path, sources: list[Path], ledger: Ledger,
                run: dict[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """The run record that describes ``path`` and the "{side}" caveats it earns.

    ``run`` is the ledger's record when the result was named by its run id; else the sidecar beside
    the result is read, and the ledger's record of the run it names replaces it (a sidecar is a
    file anyone can write). Every file read (``path`` and the ``sources`` its outcomes came from)
    whose BLAKE3 the run recorded is hashed again: a file changed since is not that run's result."""
    from execsys.harnesses.base import sidecar_name

    caveats: list[str] = []
    recorded: str | None = None
    if run is not None:
        entry = _recorded_entry(run, path)
        recorded = _digest_of(entry)
    else:
        sidecar_file = path.with_name(sidecar_name(path.name))
        sidecar = read_json_object(sidecar_file, "run sidecar") if sidecar_file.is_file() else None
        if sidecar is None:
            return None, []
        entry = sidecar.get("result") if isinstance(sidecar.get("result"), dict) else None
        recorded = _digest_of(entry)
        claimed = sidecar.get("id")
        stored = _recorded_run(ledger, claimed)
        if stored is None:
            caveats.append(f"the sidecar of {{side}}'s result {path} names {_safe(claimed)}, which the ledger never "
                           "recorded: nothing vouches for it")
            run = sidecar
        else:
            run = stored
            in_ledger = _recorded_entry(stored, path, recorded)
            if in_ledger is None or _digest_of(in_ledger) != recorded:
                caveats.append(f"the sidecar of {{side}}'s result {path} does not match what {stored.get('id')} "
                               "recorded in the ledger")
    run_id = _safe(run.get("id"))
    if recorded is None:
        caveats.append(f"{run_id} recorded no BLAKE3 for {{side}}'s result {path}: it cannot be re-checked")
    for file, digest in [(path, recorded), *((s, _digest_of(_recorded_entry(run, s))) for s in sources)]:
        now = _hash(file) if digest else None
        if digest and now != digest:
            caveats.append(f"{{side}}'s result {file} changed after {run_id} recorded it (BLAKE3 {digest[:16]} then, "
                           f"{(now or 'unreadable')[:16]} now): it is not what the run produced")
    if run.get("attached_after"):
        caveats.append("identity recorded after the run for {side} (attached): descriptive only")
    elif run.get("drifted"):
        caveats.append(f"run {run_id} for {{side}} drifted: its result is not attributable to one system")
    return run, caveats


def _safe(value: Any) -> str:
    """A value a file supplied, for one line of a reason."""
    return " ".join(str(value).split())[:120]


def _recorded_run(ledger: Ledger, run_id: Any) -> dict[str, Any] | None:
    """The body of the ``run``/``attach`` record ``run_id`` in the ledger, or None."""
    if not isinstance(run_id, str) or not run_id.startswith(("run-", "attach-")):
        return None
    try:
        record = ledger.get(run_id)
    except InputError:
        return None
    return record.body if record.kind in ("run", "attach") and isinstance(record.body, dict) else None


def _recorded_entry(run: dict[str, Any], path: Path, digest: str | None = None) -> dict[str, Any] | None:
    """The run's ``results`` entry for ``path``: by path, else the one entry with its name (and digest)."""
    entries = [e for e in run.get("results") or [] if isinstance(e, dict)]
    here = os.path.abspath(path)
    for entry in entries:
        if os.path.abspath(str(entry.get("path"))) == here:
            return entry
    named = [e for e in entries if Path(str(e.get("path"))).name == path.name
             and (digest is None or e.get("blake3") == digest)]
    return named[0] if len(named) == 1 else None


def _digest_of(entry: dict[str, Any] | None) -> str | None:
    digest = (entry or {}).get("blake3")
    return digest if isinstance(digest, str) and digest else None


def _hash(path: Path) -> str | None:
    from execsys.digest import hash_file

    try:
        return hash_file(path)
    except (OSError, InputError):
        return None


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
        loaded = _load_file(path, ledger, run=record.body)
        loaded.run = loaded.session = record.id
    loaded.ref = ref
    return loaded


def _identity(ident: str, ledger: Ledger) -> IdentityRef:
    if ident.startswith("unpinned:"):
        return IdentityRef(ident, {}, ident)
    return resolve_identity(ident, ledger)


def _load_file(path: Path, ledger: Ledger, run: dict[str, Any] | None = None) -> Result:
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
    # the file names its own identity; a run's sidecar beside it still vouches (or not) for its content
    described, caveats = _provenance(path, [], ledger, run)
    return Result(str(path), identity, {str(k): v for k, v in outcomes.items()},
                  session=str(session) if session is not None else None,
                  host=str(host) if host is not None else None, concurrency=concurrency,
                  run=str(described["id"]) if described and isinstance(described.get("id"), str) else None,
                  caveats=caveats)


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


def moved_between(a: Result, b: Result) -> tuple[list[str] | None, dict[str, Any], list[str]]:
    """What moved between two results' identities (the identity diff, observer set aside), its per-component
    changes, and why it cannot be named when it cannot (``moved`` None): an arm whose own identity was
    not observed, or a side with no pinned identity record."""
    reasons: list[str] = []
    moved: list[str] | None
    changes: dict[str, Any] = {}
    unobserved = [(side, r) for side, r in (("A", a), ("B", b)) if r.unobserved]
    if unobserved:
        # a plan run that recorded one identity for both arms: the arms' own systems were never observed
        moved = None
        if len(unobserved) == 2 and a.unobserved == b.unobserved:
            reasons.append(f"the arms' identities were not observed ({a.unobserved}): what moved between them "
                           "is unknown")
        else:
            reasons.extend(f"arm {side}'s identity was not observed ({r.unobserved}): what moved is unknown"
                           for side, r in unobserved)
    elif a.identity.identity is not None and b.identity.identity is not None and pinned(a.identity) \
            and pinned(b.identity):
        from execsys.identity import diff_identities

        report = diff_identities(a.identity.identity, b.identity.identity)
        moved, changes = list(report.moved), report.changes
    elif a.identity.id == b.identity.id:
        moved = []
    else:
        moved = None
        reasons.append("the components that moved cannot be named: "
                       + ", ".join(f"{r.ref} has no pinned identity record" for r in (a, b)
                                   if not pinned(r.identity)))
    return moved, changes, reasons


def compare(a: Result, b: Result, ledger: Ledger, intervention: list[str] | None = None, *,
            record: bool = True) -> Comparison:
    """Label the comparison causal or descriptive, compute the figures, and record it."""
    intervention = list(intervention or [])
    for name in intervention:
        if name not in COMPONENTS:
            raise UsageError(f"--intervention {name!r}: not a component (one of {', '.join(COMPONENTS)})")
    moved, changes, reasons = moved_between(a, b)
    for side, result in (("A", a), ("B", b)):
        # replace, not format: a caveat may quote a path or run id with braces in it
        reasons.extend(caveat.replace("{side}", side) for caveat in result.caveats)
    paired_control = bool(a.paired_run) and a.paired_run == b.paired_run
    if paired_control:
        # Both arms of one pre-registered paired run: the run's own order, placement, window and
        # identity checks stand in for the session; what moved still comes from the arms' identities.
        reasons.extend(f"the paired run's check failed ({f})" for f in a.paired_failures)
    if moved is not None:
        mismatch = intervention_mismatch(intervention, moved)
        if mismatch:
            reasons.append(mismatch)
        elif not intervention and not paired_control:
            reasons.append("no intervention declared (give --intervention COMPONENT)"
                           + (f"; moved: {', '.join(moved)}" if moved else "; no component moved"))

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

    paired = paired_figures(a, b)
    label = "descriptive" if reasons else "causal"
    statement = _statement(a, b, paired, label, intervention, reasons, crossed, paired_control)
    comparison = Comparison(a, b, moved, changes, intervention, crossed, reasons, label, statement, paired,
                            paired_control, scopes=scopes)
    if record:
        comparison.record = ledger.append("comparison", comparison.to_json(), identity=a.identity.id)
    return comparison


def pinned(ref: IdentityRef) -> bool:
    """Whether the identity's components are known (not an id the ledger knows only from the records
    taken under it): only then can what moved be derived from it."""
    return ref.identity is not None and bool(ref.identity.components)


def intervention_mismatch(intervention: list[str], moved: list[str]) -> str | None:
    """Why a named intervention does not license a causal reading: it is not exactly what moved."""
    if not intervention or set(intervention) == set(moved):
        return None
    return f"you named {', '.join(intervention)}; what moved: {', '.join(moved) or 'nothing'}"


def paired_figures(a: Result, b: Result) -> dict[str, Any] | None:
    """The two results paired by case id: discordant counts ``b`` (A right, B wrong) and ``c`` (A wrong,
    B right), the paired difference B - A with its 95% interval and the exact McNemar p; or, when the
    outcomes are answers rather than scores, how many shared cases agree."""
    from execsys.stats import mcnemar_exact, paired_difference_ci

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
