"""Comparability scope: the claims a project may make, given the boundaries it has measured.

Setting two numbers side by side asserts they came from comparable conditions. This module turns
the probe records of one pinned identity into that licence: the widest reproducibility boundary
measured with agreement 1.0, the axes never probed (unlicensed -- never "probably fine"), and the
unstable axes, which any causal claim may cross only with a contemporaneous paired control.
A boundary belongs to one identity: probes taken under another identity do not count here.

It also runs the backward consequence (``audit``): comparisons already recorded in the ledger that
crossed an axis since found unstable need re-evaluation or a paired control, and a comparison
recorded causal whose two identities do not back it -- what moved, derived from them, is not
exactly the intervention named, or the arms of a paired run had no identities of their own -- is
``not causal``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.errors import InputError, UsageError
from execsys.ledger import Ledger, Record
from execsys.operation import Event, OnEvent, emit

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity

SCHEMA = "execsys.scope/1"
AUDIT_SCHEMA = "execsys.scope-audit/1"

# The probe axes, narrowest boundary first. session < restart < hosts < redeploy nest (agreement
# across a restart is a wider licence than agreement within one session); concurrency is orthogonal.
AXES: tuple[str, ...] = ("session", "restart", "concurrency", "hosts", "redeploy")
CHAIN: tuple[str, ...] = ("session", "restart", "hosts", "redeploy")
# Axes whose passes straddle an event the probe causes or expects (a restart, a redeploy): a record
# licenses them only with evidence the event happened (its ``evidence``); without a way to see it, the
# licence is "unverified"; a record that saw no such event licenses nothing.
EVENT_AXES: tuple[str, ...] = ("restart", "redeploy")

_LICENCE_PHRASE = {
    "session": "comparable within one session{host}",
    "restart": "comparable across server restarts{host}",
    "hosts": "comparable across hosts",
    "redeploy": "comparable across redeploys",
}
_AXIS_NOUN = {
    "session": "the session boundary",
    "restart": "a restart",
    "concurrency": "concurrent load",
    "hosts": "hosts",
    "redeploy": "a redeploy",
}


# ------------------------------------------------------------------ identity references
@dataclass
class IdentityRef:
    """An identity as this module needs it: its id, and its components when known."""

    id: str
    components: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # where it came from: a lock path, a ledger record id, or the bare id
    identity: Identity | None = None  # the loaded identity, when there is one

    def host(self) -> str | None:
        hardware = self.components.get("hardware") or {}
        for source in (hardware, hardware.get("declared") or {}, hardware.get("observed") or {}):
            if isinstance(source, dict):
                for key in ("host", "hostname"):
                    if isinstance(source.get(key), str) and source[key]:
                        return source[key]
        return None


# A complete identity id (the BLAKE3 hex of the components) names an identity even when nothing
# has been recorded under it yet; its scope is then simply empty. A shorter string must be found.
_COMPLETE_ID = re.compile(r"[0-9a-f]{64}")


def resolve_identity(ref: str, ledger: Ledger) -> IdentityRef:
    """A lock file path, a ledger record id (an ``identity`` record or any record carrying an
    identity), or an identity id (or a unique prefix of one that the ledger knows), through the one
    resolver every command uses, :func:`execsys.identity.load_identity_ref`."""
    from execsys.identity import load_identity_ref

    try:
        identity = load_identity_ref(ref, ledger)
    except InputError:
        if _COMPLETE_ID.fullmatch(ref) and not Path(ref).exists():
            return IdentityRef(ref, {}, ref)
        raise
    return IdentityRef(identity.id, dict(identity.components), identity.source or ref, identity)


def identity_ref(identity: Identity) -> IdentityRef:
    """An already loaded identity (the lock from :func:`execsys.sources.load_sources`) as a reference."""
    return IdentityRef(identity.id, dict(identity.components), identity.source or identity.id, identity)


# ------------------------------------------------------------------ the operation
@dataclass(frozen=True)
class ScopeOptions:
    """Which identity to scope (a ref to resolve, or the loaded lock), from which ledger; or the audit."""

    identity: str | None = None  # --identity: an identity id, a ledger record id, or a lock path
    lock: Identity | None = None  # the pinned identity (--lock, else the lock beside the declaration)
    audit: bool = False
    ledger: str | Path | None = None  # None: $EXECSYS_LEDGER, else the user data directory

    @classmethod
    def from_sources(cls, declaration: Declaration | None = None, lock: Identity | None = None, *,
                     identity: str | None = None, audit: bool | None = None, ledger: str | Path | None = None,
                     lock_path: Path | None = None) -> ScopeOptions:
        """``identity`` (an override) > ``lock``. Without either, scope has nothing to speak for:
        ``UsageError`` naming where the lock was looked for (``lock_path``) -- except for the audit,
        which then checks every recorded comparison. ``declaration`` holds no scope settings today."""
        if identity is not None and not identity.strip():
            raise UsageError("--identity is empty: give an identity id, a ledger record id or a lock file")
        if identity is None and lock is None and not audit:
            where = lock_path if lock_path is not None else Path("execsys.lock.json")
            raise UsageError(f"no pinned identity (looked for {where}): give --lock FILE or --identity ID, "
                             "or pin one with 'execsys pin'")
        return cls(identity=identity, lock=None if identity is not None else lock, audit=bool(audit), ledger=ledger)


@dataclass(frozen=True)
class IdentityResolved(Event):
    """The identity the scope speaks for, and where it came from (a lock path, a ledger id, an id)."""

    identity: str
    source: str
    components_known: bool


def _resolve(options: ScopeOptions, ledger: Ledger) -> IdentityRef | None:
    if options.identity is not None:
        return resolve_identity(options.identity, ledger)
    return identity_ref(options.lock) if options.lock is not None else None


def run_scope(options: ScopeOptions, on_event: OnEvent | None = None,
              cancel: threading.Event | None = None) -> ScopeReport:
    """The comparability licence of the options' identity, from the ledger's probe records."""
    with Ledger.open(options.ledger) as ledger:
        ref = _resolve(options, ledger)
        if ref is None:
            raise UsageError("scope needs an identity: give --lock FILE or --identity ID")
        emit(on_event, IdentityResolved(ref.id, ref.source, bool(ref.components)))
        report = compute_scope(ledger, ref.id, host=ref.host())
    report.ref = ref
    return report


def run_audit(options: ScopeOptions, on_event: OnEvent | None = None,
              cancel: threading.Event | None = None) -> AuditReport:
    """Recorded comparisons that crossed an axis since found unstable (all of them, or the identity's)."""
    with Ledger.open(options.ledger) as ledger:
        ref = _resolve(options, ledger)
        if ref is not None:
            emit(on_event, IdentityResolved(ref.id, ref.source, bool(ref.components)))
        return audit(ledger, ref.id if ref is not None else None)


# ------------------------------------------------------------------ the report
@dataclass
class AxisMeasure:
    axis: str
    m: int
    n: int
    agreement_rate: float | None
    ci95: tuple[float, float] | None
    record: str  # newest probe record id for this axis
    records: list[str]

    @property
    def stable(self) -> bool:
        return self.n > 0 and self.m == self.n

    def figure(self) -> str:
        rate = f"{self.agreement_rate:.2f}" if self.agreement_rate is not None else "n/a"
        text = f"{self.m}/{self.n} = {rate}"
        if self.ci95:
            text += f", 95% CI {self.ci95[0]:.2f}-{self.ci95[1]:.2f}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "m": self.m,
            "n": self.n,
            "agreement_rate": self.agreement_rate,
            "ci95": list(self.ci95) if self.ci95 else None,
            "record": self.record,
            "records": self.records,
        }


@dataclass
class ScopeReport:
    identity: str
    measured: dict[str, AxisMeasure]
    licensed: list[str]
    unstable: list[str]
    unmeasured: list[str]
    needs_paired_control: list[str]
    statement: str
    licence: str | None  # the widest boundary licensed, or None
    host: str | None = None
    other_identities: dict[str, list[str]] = field(default_factory=dict)  # identity -> probe record ids
    excluded: list[dict[str, str]] = field(default_factory=list)  # {record, reason}: this identity, not the axis
    # {record, axis, reason}: probes run under this identity's lock that measured another system
    another_system: list[dict[str, str]] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # licensed axes whose event could not be confirmed
    unverified_why: dict[str, str] = field(default_factory=dict)
    ref: IdentityRef | None = None  # the identity as resolved (components for the contract); not in the JSON
    grader: dict[str, Any] | None = None  # the grader's own verdict agreement (probe grader), beside the axes

    @property
    def ignored_probes(self) -> int:
        return sum(len(v) for v in self.other_identities.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "identity": self.identity,
            "licensed": self.licensed,
            "unstable": self.unstable,
            "unmeasured": self.unmeasured,
            "measured": {axis: m.to_json() for axis, m in self.measured.items()},
            "needs_paired_control": self.needs_paired_control,
            "statement": self.statement,
            "licence": self.licence,
            "host": self.host,
            "unverified": self.unverified,
            "ignored": {
                "reason": "probes taken under a different identity do not count: a boundary belongs to one pinned identity",
                "records": sum(len(v) for v in self.other_identities.values()),
                "identities": sorted(self.other_identities),
                # probes under this identity's lock whose engine was not the pinned system
                "another_system": self.another_system,
            },
            "excluded": self.excluded,
            "grader": self.grader,
        }


def _probe_figures(body: dict[str, Any]) -> tuple[int, int] | None:
    m, n = body.get("m"), body.get("n")
    if isinstance(m, int) and isinstance(n, int) and not isinstance(m, bool) and n >= 0 and 0 <= m <= n:
        return m, n
    return None


def _final_records(ledger: Ledger) -> list[Record]:
    """The ``probe`` records, one per probe run: a ``--resume --retry-errored`` writes the run's record
    again (every case, the retried ones included), and pooling both would count its cases twice."""
    newest: dict[str, Record] = {}
    records: list[Record] = []
    for record in ledger.iter(kind="probe"):
        if record.parent is None:
            records.append(record)
        else:
            if record.parent not in newest:
                records.append(record)  # its place in ledger order; replaced below by the run's newest
            newest[record.parent] = record
    return [newest.get(r.parent, r) if r.parent is not None else r for r in records]


def _target_key(body: dict[str, Any]) -> tuple[str | None, tuple[str, ...], str | None]:
    """What a probe record sent its cases to: the endpoints, or the harness command (``body["target"]``)."""
    raw = body.get("target")
    target: dict[str, Any] = raw if isinstance(raw, dict) else {}
    endpoints = tuple(str(e) for e in target.get("endpoints") or [] if e)
    command = str(target["command"]) if target.get("command") else None
    kind = target.get("kind") if isinstance(target.get("kind"), str) else None
    return kind or ("command" if command else "endpoint" if endpoints else None), endpoints, command


def _describe_target(key: tuple[str | None, tuple[str, ...], str | None]) -> str:
    kind, endpoints, command = key
    if command:
        return f"the harness command `{command}`"
    if endpoints:
        return f"endpoint{'s' if len(endpoints) != 1 else ''} {', '.join(endpoints)}"
    return f"an unrecorded {kind}" if kind else "an unrecorded target"


def _describe_cases(body: dict[str, Any]) -> str:
    digest = body.get("cases_digest")
    if not isinstance(digest, str) or not digest:
        return "an unrecorded case set"
    name = Path(str(body["cases_file"])).name if body.get("cases_file") else ""
    return f"{name} (cases digest {digest[:12]})" if name else f"cases digest {digest[:12]}"


def _newest_measurement(axis: str, records: list[Record]) -> tuple[list[Record], list[dict[str, str]]]:
    """The records of one axis that measure one thing, and the others as ``excluded`` entries.

    Agreement pooled over two probe targets (an endpoint and a harness command) or two case sets is
    a figure of neither: only the records probing what the newest one probed (the newest that
    compared a case, when there is one) count; the rest are listed with what they probed instead."""
    def key(record: Record) -> tuple[Any, ...]:
        return _target_key(record.body), record.body.get("cases_digest") or None

    figures = [r for r in records if (_probe_figures(r.body) or (0, 0))[1] > 0]
    newest = (figures or records)[-1]
    wanted = key(newest)
    kept = [r for r in records if key(r) == wanted]
    apart: list[dict[str, str]] = []
    for record in records:
        if key(record) == wanted:
            continue
        differs = []
        if _target_key(record.body) != wanted[0]:
            differs.append(f"another target: {_describe_target(_target_key(record.body))}, "
                           f"not {_describe_target(wanted[0])}")
        if (record.body.get("cases_digest") or None) != wanted[1]:
            differs.append(f"another case set: {_describe_cases(record.body)}, not {_describe_cases(newest.body)}")
        apart.append({"record": record.id, "reason": f"probed {'; and '.join(differs)}: not pooled with "
                      f"{newest.id}, the newest {axis} probe"})
    return kept, apart


def compute_scope(ledger: Ledger, identity_id: str, *, host: str | None = None) -> ScopeReport:
    """The comparability licence for ``identity_id`` from the ``probe`` records in ``ledger``.

    Several probes of one axis under the same identity are pooled (m and n summed) when they probed
    the same target with the same cases: an axis is licensed only if every pair ever measured agreed.
    Records of the axis that probed another target or case set than its newest are not pooled with it
    (``excluded``, with what they probed)."""
    from execsys.stats import wilson

    per_axis: dict[str, list[Record]] = {}
    other: dict[str, list[str]] = {}
    excluded: list[dict[str, str]] = []
    another: list[dict[str, str]] = []
    unverified_why: dict[str, str] = {}
    unverified_by_record: dict[str, str] = {}
    final = _final_records(ledger)
    for record in final:
        body = record.body
        axis = body.get("axis")
        if axis == "grader" and _grader_differs(body, identity_id):
            # graded under this lock by another grader than the pinned one: its noise is not this grader's
            another.append({"record": record.id, "axis": "grader",
                            "reason": str(_check_of(body).get("sentence") or "the grader answering the probe "
                                          "was not the pinned one")})
            continue
        if axis not in AXES or _probe_figures(body) is None:
            continue
        owner = record.identity or body.get("identity")
        if isinstance(owner, dict):
            owner = owner.get("id")
        raw_check = body.get("system_check")
        check: dict[str, Any] = raw_check if isinstance(raw_check, dict) else {}
        if check.get("verdict") == "differs" and identity_id in (check.get("lock"), owner):
            # taken under this lock, but what answered was another system: it counts toward no identity
            another.append({"record": record.id, "axis": str(axis),
                            "reason": str(check.get("sentence") or "the engine answering the probe was not "
                                          "the pinned system")})
            continue
        if owner != identity_id:
            other.setdefault(str(owner or "none (probe taken without a pinned identity)"), []).append(record.id)
            continue
        raw_scope = body.get("scope")
        scope_info: dict[str, Any] = raw_scope if isinstance(raw_scope, dict) else {}
        if scope_info.get("engine_changed"):
            # The engine itself changed between the passes: the probe measured that change, not the axis.
            excluded.append({"record": record.id, "reason": f"{axis} probe saw the engine change between passes: "
                             "it measured the engine change, not the axis"})
            continue
        if axis in EVENT_AXES:
            raw_evidence = body.get("evidence")
            evidence: dict[str, Any] = raw_evidence if isinstance(raw_evidence, dict) else {}
            verdict = evidence.get("verdict")
            if verdict == "not-observed":
                seen = evidence.get("sentence") or f"no {axis} observed"
                excluded.append({"record": record.id,
                                 "reason": f"{axis} probe: {seen}: it licenses nothing across {_AXIS_NOUN[axis]}"})
                continue
            if verdict != "observed":
                unverified_by_record[record.id] = str(
                    evidence.get("sentence") or f"{record.id} was recorded before execsys confirmed that "
                    f"{_AXIS_NOUN[axis]} happened (execsys.probe/1)")
        per_axis.setdefault(axis, []).append(record)

    not_pooled: list[dict[str, str]] = []
    for axis, records in per_axis.items():
        per_axis[axis], apart = _newest_measurement(str(axis), records)
        not_pooled += apart
    counted = {r.id for records in per_axis.values() for r in records}
    for record in final:  # ledger order: the first counted record naming a host or an unverified event speaks
        if record.id not in counted:
            continue
        axis = record.body.get("axis")
        if record.id in unverified_by_record:
            unverified_why.setdefault(str(axis), unverified_by_record[record.id])
        scope = record.body.get("scope")
        if host is None and isinstance(scope, dict) and isinstance(scope.get("host"), str):
            host = scope["host"]
    excluded += not_pooled

    measured: dict[str, AxisMeasure] = {}
    for axis in AXES:
        records = per_axis.get(axis)
        if not records:
            continue
        m = sum(_probe_figures(r.body)[0] for r in records)  # type: ignore[index]
        n = sum(_probe_figures(r.body)[1] for r in records)  # type: ignore[index]
        if n == 0:
            continue
        rate = m / n
        measured[axis] = AxisMeasure(axis, m, n, rate, wilson(m, n), records[-1].id, [r.id for r in records])

    licensed = [a for a in AXES if a in measured and measured[a].stable]
    unstable = [a for a in AXES if a in measured and not measured[a].stable]
    unmeasured = [a for a in AXES if a not in measured]
    needs = [a for a in AXES if a not in licensed]

    licence = None
    for axis in CHAIN:
        if axis in unstable:
            break  # nothing wider than an unstable boundary is licensed
        if axis in licensed:
            licence = axis
    unverified = [a for a in licensed if a in unverified_why]
    statement = _statement(identity_id, measured, licensed, unstable, unmeasured, licence, host, other, unverified)
    grader = _grader_boundary(ledger, identity_id)
    if grader is not None:
        statement += f" Grader: {grader['sentence']}."
    if excluded:
        changes = [e for e in excluded if "saw the engine change" in e["reason"]]
        missing = len(excluded) - len(changes) - len(not_pooled)
        if changes:
            statement += (f" {len(changes)} probe record{'s' if len(changes) != 1 else ''} of this identity measured "
                          "an engine change rather than its axis and did not count.")
        if missing:
            statement += (f" {missing} probe record{'s' if missing != 1 else ''} of this identity saw no sign of the "
                          "restart or redeploy it measures and did not count.")
    if not_pooled:
        statement += (f" {len(not_pooled)} probe record{'s' if len(not_pooled) != 1 else ''} of this identity probed "
                      "another target or case set than the newest of its axis and "
                      f"{'were' if len(not_pooled) != 1 else 'was'} not pooled with it.")
    engines = [a for a in another if a["axis"] != "grader"]
    graders = len(another) - len(engines)
    if engines:
        statement += (f" {len(engines)} probe record{'s' if len(engines) != 1 else ''} taken under this lock measured "
                      "another system (the engine answering was not the pinned one) and did not count.")
    if graders:
        statement += (f" {graders} grader probe record{'s' if graders != 1 else ''} taken under this lock graded "
                      "with another grader than the pinned one and did not count.")
    return ScopeReport(identity_id, measured, licensed, unstable, unmeasured, needs, statement, licence, host, other,
                       excluded, grader=grader, another_system=another, unverified=unverified,
                       unverified_why={a: unverified_why[a] for a in unverified})


def _check_of(body: dict[str, Any]) -> dict[str, Any]:
    check = body.get("system_check")
    return check if isinstance(check, dict) else {}


def _grader_differs(body: dict[str, Any], identity_id: str) -> bool:
    """A grader probe (``execsys.probe-grader/2``) taken under this identity's lock whose grader was not
    the pinned one (``/1`` records carry no check: they count as before)."""
    check = _check_of(body)
    return check.get("verdict") == "differs" and identity_id in (check.get("lock"), body.get("identity"))


def _grader_boundary(ledger: Ledger, identity_id: str) -> dict[str, Any] | None:
    """The grader's own agreement under this identity (``probe grader`` records, pooled), or None.

    Beside the model's boundaries: a score difference smaller than the grader's flip rate is grader noise."""
    from execsys.stats import wilson

    records = [r for r in _final_records(ledger) if r.body.get("axis") == "grader"
               and (r.identity or r.body.get("identity")) == identity_id and _probe_figures(r.body) is not None
               and _check_of(r.body).get("verdict") != "differs"]
    if not records:
        return None
    m = sum(_probe_figures(r.body)[0] for r in records)  # type: ignore[index]
    n = sum(_probe_figures(r.body)[1] for r in records)  # type: ignore[index]
    if n == 0:
        return None
    ci = wilson(m, n)
    sentence = f"verdicts agree {m}/{n} ({m / n:.2f}) across repeats"
    if m < n:
        sentence += f": a {100 * (n - m) / n:.0f}-point difference is within grader noise"
    else:
        sentence += ": score differences are not grader flips at this n"
    return {"m": m, "n": n, "agreement_rate": m / n, "ci95": list(ci) if ci else None, "sentence": sentence,
            "records": [r.id for r in records]}


def _statement(identity_id: str, measured: dict[str, AxisMeasure], licensed: list[str], unstable: list[str],
               unmeasured: list[str], licence: str | None, host: str | None,
               other: dict[str, list[str]], unverified: list[str] | None = None) -> str:
    short = identity_id[:12]
    host_text = f" on host {host}" if host else ""
    parts: list[str] = []
    if licence:
        m = measured[licence]
        claim = _LICENCE_PHRASE[licence].format(host=host_text)
        extra = ""
        if "concurrency" in licensed:
            extra = ", also under concurrent load"
        elif "concurrency" in unstable:
            extra = ", with requests sent one at a time"
        if licence in (unverified or []):
            claim += f", unverified ({_AXIS_NOUN[licence]} could not be confirmed from here)"
        parts.append(f"Identity {short}: {claim}{extra} ({licence} agreement {m.figure()}).")
    elif not measured:
        parts.append(f"Identity {short}: no comparability is licensed: no boundary has been probed under this identity.")
    else:
        parts.append(f"Identity {short}: no comparability is licensed: no boundary was measured with agreement 1.0.")
    for axis in unstable:
        parts.append(
            f"Causal claims crossing {axis} need a contemporaneous paired control ({axis} agreement {measured[axis].figure()})."
        )
    others = [a for a in (unverified or []) if a != licence]
    if others:
        parts.append("Licensed unverified (the event could not be confirmed from here): " + ", ".join(others) + ".")
    if unmeasured:
        parts.append("Not licensed (never probed under this identity): " + ", ".join(unmeasured) + ".")
    if other:
        count = sum(len(v) for v in other.values())
        parts.append(
            f"{count} probe record{'s' if count != 1 else ''} under {len(other)} other "
            f"identit{'ies' if len(other) != 1 else 'y'} {'do' if count != 1 else 'does'} not count: "
            "a boundary belongs to one pinned identity."
        )
    return " ".join(parts)


# ------------------------------------------------------------------ the experiment contract
def contract_markdown(report: ScopeReport, identity: IdentityRef | Any | None = None) -> str:
    """The comparability section of an experiment contract, as Markdown."""
    from execsys.ledger import now_iso

    components: dict[str, Any] = {}
    if isinstance(identity, IdentityRef):
        components = identity.components
    elif identity is not None:
        components = dict(getattr(identity, "components", {}) or {})
    lines = [
        "## Comparability",
        "",
        f"- Identity: `{report.identity}`",
        f"- Scope computed: {now_iso()} by execsys from the ledger's probe records",
        "",
        "### Scope statement",
        "",
        report.statement,
        "",
    ]
    if components:
        from execsys import COMPONENTS

        lines += ["### Pinned components", "", "| component | pinned as |", "|---|---|"]
        for name in COMPONENTS:
            value = components.get(name)
            lines.append(f"| {name} | {_md_cell(_summarise_component(value, name))} |")
        lines.append("")
    lines += ["### Boundaries measured", "", "| axis | agreement | m/n | 95% CI | verdict | record |",
              "|---|---|---|---|---|---|"]
    for axis in AXES:
        m = report.measured.get(axis)
        if m is None:
            lines.append(f"| {axis} | - | - | - | not probed: unlicensed | - |")
            continue
        ci = f"{m.ci95[0]:.2f}-{m.ci95[1]:.2f}" if m.ci95 else "-"
        verdict = "licensed" if m.stable else "unstable: paired control required"
        if m.stable and axis in report.unverified:
            verdict = f"licensed, unverified: {_md_cell(report.unverified_why.get(axis, ''))}"
        lines.append(f"| {axis} | {m.agreement_rate:.2f} | {m.m}/{m.n} | {ci} | {verdict} | `{m.record}` |")
    if report.grader is not None:
        lines += ["", f"Grader: {report.grader['sentence']} (`execsys probe grader`)."]
    lines += ["", "### Claims that need a contemporaneous paired control", ""]
    if report.needs_paired_control:
        for axis in report.needs_paired_control:
            why = (f"unstable ({report.measured[axis].figure()})" if axis in report.unstable
                   else "never probed under this identity")
            lines.append(f"- Any causal claim crossing **{axis}**: {why}. Run both arms inside one window "
                         "(`execsys plan new ... --design abba`) or report the comparison as descriptive.")
    else:
        lines.append("- None: every probe axis was measured with agreement 1.0 under this identity.")
    if report.other_identities:
        lines += ["", f"Probe records under other identities ({report.ignored_probes}) were not counted."]
    return "\n".join(lines) + "\n"


# A component's cell in the contract's table: long enough for an endpoint, a full digest and a command.
_CELL_LIMIT = 240


def _summarise_component(value: Any, name: str = "", *, limit: int | None = _CELL_LIMIT) -> str:
    """One cell of the contract's "Pinned components" table: the component's flat fields (declared,
    then observed over them). The runtime names what serves: engine and version, endpoint, served model
    and digest, before the rest (its restart command). A cell too long ends at a word with "…"."""
    if value in (None, {}, []):
        return "(not declared)"
    runtime: list[str] = []
    if isinstance(value, dict) and ("declared" in value or "observed" in value):
        declared = value.get("declared") or {}
        observed = value.get("observed") or {}
        if name == "runtime":
            runtime = _runtime_facts(declared, observed)
        merged = {**declared, **observed}
        if not merged:
            return "(not declared)"
        value = merged
    if isinstance(value, dict):
        said = {"engine", "endpoint"} if runtime else set()
        items = runtime + [f"{k}={v}" for k, v in value.items()
                           if k not in said and not isinstance(v, (dict, list)) and v not in (None, "")]
        text = ", ".join(items) or json.dumps(value, sort_keys=True)
    else:
        text = str(value)
    return _shorten(" ".join(text.split()), limit)


def _runtime_facts(declared: dict[str, Any], observed: dict[str, Any]) -> list[str]:
    """What serves, as pinned: the engine and its version, the endpoint, the models it served and the
    digest of the artifact it loaded (observed over declared)."""
    facts: list[str] = []
    engine = observed.get("engine")
    name = (engine.get("name") if isinstance(engine, dict) else None) or declared.get("engine")
    if isinstance(name, str) and name:
        version = engine.get("version") if isinstance(engine, dict) else None
        facts.append(f"engine={name}" + (f" {version}" if isinstance(version, str) and version else ""))
    endpoint = observed.get("endpoint")
    url = (endpoint.get("url") if isinstance(endpoint, dict) else None) or declared.get("endpoint")
    if isinstance(url, str) and url:
        facts.append(f"endpoint={url}")
    models = endpoint.get("models") if isinstance(endpoint, dict) else None
    if isinstance(models, list) and models:
        facts.append(f"served model{'s' if len(models) != 1 else ''}={' '.join(str(m) for m in models)}")
    served = observed.get("served")
    if isinstance(served, dict):
        if served.get("digest"):
            facts.append(f"served digest={served['digest']}" + (f" ({served['verdict']})" if served.get("verdict")
                                                                 else ""))
        elif served.get("verdict"):
            facts.append(f"served={served['verdict']}")
    return facts


def _shorten(text: str, limit: int | None) -> str:
    """``text`` whole when it fits; else up to its last whole word that fits, and "…". A first word
    longer than the limit is kept whole: a word is never cut."""
    if limit is None or len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    if cut <= 0:
        space = text.find(" ")
        return text if space < 0 else text[:space].rstrip(",;:") + " …"
    return text[:cut].rstrip(",;:") + " …"


def merge_contract(existing: str, section: str) -> str:
    """The contract ``existing`` with its ``## Comparability`` section replaced by ``section`` (or
    ``section`` appended when it has none): the rest of the operator's contract is never lost."""
    if not existing.strip():
        return section
    lines = existing.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "## Comparability"), None)
    if start is None:
        return existing.rstrip("\n") + "\n\n" + section
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"#{1,2} ", lines[i])), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + section.rstrip("\n") + "\n" + ("\n" + tail if tail else "")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# ------------------------------------------------------------------ audit
@dataclass
class AuditFinding:
    comparison: str
    recorded_at: str
    label: str
    crossed: list[str]
    unstable_now: list[str]
    unmeasured_now: list[str]
    verdict: str  # "needs re-evaluation or a paired control" | "not causal" | "ok"
    statement: str
    runs: list[str] = field(default_factory=list)  # the execsys runs compared, when results came from runs

    def to_json(self) -> dict[str, Any]:
        return {
            "comparison": self.comparison, "recorded_at": self.recorded_at, "label": self.label,
            "crossed": self.crossed, "unstable_now": self.unstable_now, "unmeasured_now": self.unmeasured_now,
            "verdict": self.verdict, "statement": self.statement, "runs": self.runs,
        }


@dataclass
class AuditReport:
    findings: list[AuditFinding]
    checked: int

    @property
    def flagged(self) -> list[AuditFinding]:
        return [f for f in self.findings if f.verdict != "ok"]

    def to_json(self) -> dict[str, Any]:
        return {"schema": AUDIT_SCHEMA, "checked": self.checked, "flagged": len(self.flagged),
                "comparisons": [f.to_json() for f in self.findings]}


NEEDS_REEVALUATION = "needs re-evaluation or a paired control"
NOT_CAUSAL = "not causal"


def _identities_disagree(ledger: Ledger, body: dict[str, Any]) -> str | None:
    """Why a comparison recorded causal is not backed by its two identities (None when it is).

    What moved is derived again from the identities the comparison names (the recorded ``moved``
    when the ledger cannot resolve them); an arm of a paired run counts only by its own identity."""
    from execsys.compare import intervention_mismatch, pinned

    sides: list[dict[str, Any]] = [side if isinstance(side := body.get(k), dict) else {} for k in ("a", "b")]
    unobserved = []
    for side in sides:
        record_id, _, arm = str(side.get("ref") or "").partition(":")
        if not record_id.startswith("plan-run-") or not arm:
            continue
        try:
            plan_run = ledger.get(record_id)
        except InputError:
            continue
        own = ((plan_run.body.get("arms") or {}).get(arm) or {}) if isinstance(plan_run.body, dict) else {}
        if not (isinstance(own, dict) and own.get("identity")):
            unobserved.append(f"{record_id}:{arm}")
    if unobserved:
        return f"the arms' identities were not observed ({', '.join(unobserved)}): what moved is unknown"
    moved = body.get("moved")
    identities = [str(side.get("identity") or "") for side in sides]
    resolved = []
    for ident in identities:
        try:
            found = resolve_identity(ident, ledger) if ident else None
        except InputError:
            found = None
        resolved.append(found.identity if found is not None and pinned(found) else None)
    if resolved[0] is not None and resolved[1] is not None:
        from execsys.identity import diff_identities

        moved = list(diff_identities(resolved[0], resolved[1]).moved)
    if not isinstance(moved, list):
        return None  # neither derivable now nor recorded then: nothing to hold the label against
    intervention = [str(i) for i in body.get("intervention") or []]
    return intervention_mismatch(intervention, [str(m) for m in moved])


def audit(ledger: Ledger, identity_id: str | None = None) -> AuditReport:
    """Recorded comparisons (kind ``comparison``) that crossed an axis found unstable since.

    A comparison is flagged when an axis it crossed is now measured unstable under any identity it
    involved, and it was not itself a contemporaneous paired control."""
    scopes: dict[str, ScopeReport] = {}
    findings: list[AuditFinding] = []
    checked = 0
    for record in ledger.iter(kind="comparison"):
        body = record.body
        identities = [i for i in (body.get("identities") or [record.identity]) if i]
        if identity_id and identity_id not in identities:
            continue
        checked += 1
        crossed = [a for a in body.get("crossed") or [] if a in AXES]
        unstable_now: list[str] = []
        unmeasured_now: list[str] = []
        for ident in identities:
            if ident not in scopes:
                scopes[ident] = compute_scope(ledger, ident)
            scope = scopes[ident]
            for axis in crossed:
                if axis in scope.unstable and axis not in unstable_now:
                    unstable_now.append(axis)
                elif axis in scope.unmeasured and axis not in unmeasured_now and axis not in unstable_now:
                    unmeasured_now.append(axis)
        paired = bool(body.get("paired_control"))
        unbacked = _identities_disagree(ledger, body) if body.get("label") == "causal" else None
        if unbacked:
            verdict = NOT_CAUSAL
            statement = f"Comparison {record.id} was recorded causal, but {unbacked}: {NOT_CAUSAL}."
        elif unstable_now and not paired:
            figures = "; ".join(
                f"{axis} agreement {scopes[i].measured[axis].figure()}"
                for axis in unstable_now for i in identities if axis in scopes[i].measured
                and not scopes[i].measured[axis].stable
            )
            statement = (f"Comparison {record.id} ({body.get('label', 'unlabelled')}) crossed "
                         f"{', '.join(unstable_now)}, since found unstable ({figures}): {NEEDS_REEVALUATION}.")
            verdict = NEEDS_REEVALUATION
        else:
            verdict = "ok"
            statement = (f"Comparison {record.id}: " + ("a contemporaneous paired control; unaffected."
                         if paired else "crossed no axis now known to be unstable."))
        # comparisons between evaluation runs (execsys run / attach) are audited like any other
        runs = [str(side.get("run")) for side in (body.get("a") or {}, body.get("b") or {})
                if isinstance(side, dict) and side.get("run")]
        if runs:
            statement += f" (between runs {' and '.join(runs)})"
        findings.append(AuditFinding(record.id, record.created_at, str(body.get("label", "")), crossed,
                                     unstable_now, unmeasured_now, verdict, statement, runs))
    return AuditReport(findings, checked)
