"""Contemporaneous paired control: a pre-registered, counterbalanced schedule for two arms.

When a reproducibility boundary is unstable, one design still supports a causal claim: both arms
run inside one window, everything fixed but the intervention, and the order of arms fixed in
advance and counterbalanced, so that "which arm ran first" cannot pass for the effect.

- :func:`new_plan` builds the schedule (``execsys.plan/1``) deterministically from the arms, the
  cases, the design and the seed; its ``digest`` covers everything but ``registered_at``.
- :func:`register_plan` writes it to the ledger before any case runs (the record id derives from
  the digest, so registering the same plan twice is a no-op).
- :func:`check_plan` rejects a plan edited after registration and, given the executed log,
  reports order violations, arms outside the window, restarts between arms and placement not as
  registered.
- :func:`run_plan` executes the registered order against two OpenAI-compatible endpoints,
  verifies remote placement (a)-(d) first, and reports the paired difference with an exact
  McNemar test; the claim is labelled causal only when every check held.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from execsys.canonical import content_id
from execsys.errors import InputError, UsageError
from execsys.fsutil import RECORD_FILE_LIMIT, read_bounded
from execsys.ledger import Ledger, now_iso

SCHEMA = "execsys.plan/1"
RUN_SCHEMA = "execsys.plan-run/1"
LOG_SCHEMA = "execsys.plan-log/1"
DESIGNS = ("abba", "random")
LOCAL_HOSTS = ("", "local", "localhost", "127.0.0.1", "::1")
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


# ------------------------------------------------------------------ the plan
@dataclass
class Plan:
    arms: list[str]
    order: list[dict[str, str]]
    design: str
    seed: int | str
    placement: dict[str, str]
    cases: dict[str, Any]
    identity: str | None = None
    digest: str = ""
    registered_at: str | None = None

    def digest_body(self) -> dict[str, Any]:
        """Everything the digest covers: the whole plan except ``registered_at`` (and the digest)."""
        return {
            "schema": SCHEMA, "arms": self.arms, "order": self.order, "design": self.design, "seed": self.seed,
            "placement": self.placement, "cases": self.cases, "identity": self.identity,
        }

    def compute_digest(self) -> str:
        return content_id(self.digest_body())

    @property
    def record_id(self) -> str:
        return plan_record_id(self.digest)

    def to_json(self) -> dict[str, Any]:
        return {**self.digest_body(), "digest": self.digest, "registered_at": self.registered_at}

    def first_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(self.arms, 0)
        for entry in self.order:
            counts[entry["first"]] += 1
        return counts

    def other(self, arm: str) -> str:
        return self.arms[1] if arm == self.arms[0] else self.arms[0]

    def expected_sequence(self) -> list[tuple[str, str]]:
        """(case, arm) in the registered execution order: each case's first arm, then the other."""
        seq: list[tuple[str, str]] = []
        for entry in self.order:
            seq.append((entry["case"], entry["first"]))
            seq.append((entry["case"], self.other(entry["first"])))
        return seq


def plan_record_id(digest: str) -> str:
    return f"plan-{digest[:24]}"


def parse_placement(items: Sequence[str] | None, arms: Sequence[str]) -> dict[str, str]:
    """``["A=gpu1", "B=gpu2"]`` -> ``{"A": "gpu1", "B": "gpu2"}``; unknown arms are an input error."""
    placement: dict[str, str] = {}
    for item in items or []:
        arm, sep, host = item.partition("=")
        if not sep or not arm or not host:
            raise UsageError(f"--placement {item!r}: expected ARM=HOST (e.g. A=gpu1)")
        if arm not in arms:
            raise InputError(f"--placement {item!r}: unknown arm '{arm}' (arms: {', '.join(arms)})")
        if arm in placement:
            raise UsageError(f"--placement: arm '{arm}' placed twice")
        placement[arm] = host
    return placement


def new_plan(arms: Sequence[str], cases: Sequence[Any] | str | Path, design: str = "abba",
             seed: int | str = 0, placement: dict[str, str] | None = None, *,
             identity: str | None = None) -> Plan:
    """A counterbalanced schedule: each arm goes first in half the cases (one more when n is odd).

    ``cases`` is a JSON Lines cases file (the probe format) or a list of case ids / Case objects.
    The same inputs always give the same plan: the case order is shuffled by ``seed`` and the arm
    going first follows the design -- ``abba`` (A B B A A B B A ... over the shuffled order, the
    starting arm chosen by the seed) or ``random`` (a seeded shuffle of a balanced list)."""
    arms = list(arms)
    if len(arms) != 2 or arms[0] == arms[1]:
        raise UsageError("--arms takes exactly two distinct arm names (e.g. --arms A B)")
    for arm in arms:
        if not _ARM_NAME.match(arm):
            raise UsageError(f"arm name {arm!r}: letters, digits, '_', '.', '-' only")
    if design not in DESIGNS:
        raise UsageError(f"--design {design!r}: expected one of {', '.join(DESIGNS)}")
    case_meta: dict[str, Any]
    if isinstance(cases, (str, Path)):
        from execsys.probes.cases import cases_digest, load_cases

        loaded = load_cases(cases)
        ids = [c.id for c in loaded]
        case_meta = {"file": str(cases), "digest": cases_digest(loaded), "n": len(ids)}
    else:
        ids = [str(getattr(c, "id", c)) for c in cases]
        if len(set(ids)) != len(ids):
            raise InputError("case ids must be unique")
        case_meta = {"file": None, "digest": content_id(ids), "n": len(ids)}
    if not ids:
        raise InputError("a plan needs at least one case")
    placement = dict(placement or {})
    for arm in placement:
        if arm not in arms:
            raise InputError(f"placement names unknown arm '{arm}' (arms: {', '.join(arms)})")

    rng = random.Random(f"execsys-plan:{design}:{seed}")
    shuffled = list(ids)
    rng.shuffle(shuffled)
    n = len(shuffled)
    if design == "abba":
        start = rng.randrange(2)
        pattern = (0, 1, 1, 0)
        firsts = [arms[pattern[i % 4] ^ start] for i in range(n)]
    else:
        firsts = [arms[0]] * (n // 2) + [arms[1]] * (n // 2)
        if n % 2:
            firsts.append(arms[rng.randrange(2)])
        rng.shuffle(firsts)
    order = [{"case": case, "first": first} for case, first in zip(shuffled, firsts, strict=True)]
    plan = Plan(arms, order, design, seed, placement, case_meta, identity)
    plan.digest = plan.compute_digest()
    return plan


def plan_from_json(data: Any, where: str = "plan") -> Plan:
    """Parse an ``execsys.plan/1`` document; a malformed one is an input error naming the field."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"{where}: not an {SCHEMA} plan")
    def field_of(name: str, expected: str, parse: Any, default: Any = ...) -> Any:
        if name not in data and default is not ...:
            return default
        try:
            return parse(data[name])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InputError(f"{where}: malformed plan: field '{name}' is missing or not {expected}") from None

    def typed(kind: type) -> Any:
        def parse(value: Any) -> Any:
            if not isinstance(value, kind):
                raise TypeError(f"expected {kind.__name__}")
            return value
        return parse

    arms = field_of("arms", "a list of two arm names", lambda v: [str(a) for a in typed(list)(v)])
    order = field_of("order", 'a list of {"case": ID, "first": ARM} objects',
                     lambda v: [{"case": str(e["case"]), "first": str(e["first"])} for e in typed(list)(v)])
    design = field_of("design", "a design name", typed(str))
    seed = field_of("seed", "a seed", lambda v: v)
    placement = field_of("placement", "an object of ARM: HOST", lambda v: dict(v or {}), default={})
    cases = field_of("cases", "an object", lambda v: dict(v or {}), default={})
    digest = field_of("digest", "a digest", typed(str))
    plan = Plan(arms, order, design, seed, placement, cases, data.get("identity"), digest,
                data.get("registered_at"))
    if len(arms) != 2:
        raise InputError(f"{where}: a plan has exactly two arms")
    for entry in order:
        if entry["first"] not in arms:
            raise InputError(f"{where}: order names unknown arm '{entry['first']}' (arms: {', '.join(arms)})")
    for arm in plan.placement:
        if arm not in arms:
            raise InputError(f"{where}: placement names unknown arm '{arm}' (arms: {', '.join(arms)})")
    return plan


def load_plan(path: str | Path) -> Plan:
    try:
        data = json.loads(read_bounded(path, RECORD_FILE_LIMIT, "plan").decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such plan file") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable JSON plan ({exc})") from None
    return plan_from_json(data, str(path))


def register_plan(plan: Plan, ledger: Ledger) -> Plan:
    """Record the plan in the ledger (kind ``plan``) and stamp ``registered_at``.

    Registering an identical plan again returns the first registration unchanged."""
    if plan.digest != plan.compute_digest():
        raise InputError("the plan's digest does not match its content: it was edited")
    try:
        existing = ledger.get(plan.record_id)
    except InputError:
        existing = None
    if existing is not None and existing.kind == "plan" and existing.body.get("digest") == plan.digest:
        plan.registered_at = existing.body.get("registered_at") or existing.created_at
        return plan
    plan.registered_at = now_iso()
    ledger.append("plan", plan.to_json(), identity=plan.identity, record_id=plan.record_id)
    return plan


# ------------------------------------------------------------------ checks
@dataclass
class Check:
    name: str
    passed: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class PlanCheck:
    plan: Plan
    record: str
    registered_at: str
    violations: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    executed: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "execsys.plan-check/1", "plan": self.plan.digest, "record": self.record,
            "registered_at": self.registered_at, "digest_ok": True, "registered": True,
            "executed": self.executed, "checks": [c.to_json() for c in self.checks],
            "violations": self.violations, "ok": self.ok,
        }


def verify_registration(plan: Plan, ledger: Ledger, where: str = "plan") -> tuple[str, str]:
    """(record id, registered_at) of the plan's registration; InputError when the plan was edited
    after registration or was never registered in this ledger."""
    actual = plan.compute_digest()
    if actual != plan.digest:
        raise InputError(
            f"{where} was edited after registration: its content digest is {actual[:16]}, "
            f"the registered digest {plan.digest[:16]}"
        )
    try:
        record = ledger.get(plan.record_id)
    except InputError:
        raise InputError(
            f"{where} is not registered in the ledger {ledger.path} (register it with 'execsys plan new')"
        ) from None
    if record.kind != "plan" or record.body.get("digest") != plan.digest:
        raise InputError(f"{where}: ledger record {record.id} is not this plan's registration")
    registered_at = record.body.get("registered_at") or record.created_at
    if plan.registered_at and plan.registered_at != registered_at:
        raise InputError(f"{where}: registered_at {plan.registered_at} differs from the ledger's {registered_at}")
    return record.id, registered_at


def read_log(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Header and events of an executed log (``execsys.plan-log/1`` JSON Lines)."""
    try:
        lines = read_bounded(path, RECORD_FILE_LIMIT, "executed log").decode("utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"executed log {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"executed log {path}: cannot read ({exc})") from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise InputError(f"executed log {path} line {number}: not JSON (expected {LOG_SCHEMA} JSON Lines)") from None
        if not isinstance(row, dict):
            raise InputError(f"executed log {path} line {number}: expected a JSON object")
        rows.append(row)
    if not rows or rows[0].get("schema") != LOG_SCHEMA:
        raise InputError(f"executed log {path}: not an {LOG_SCHEMA} log (its first line must name the schema)")
    header, events = rows[0], rows[1:]
    for number, event in enumerate(events, 2):
        if not isinstance(event.get("event"), str) or not isinstance(event.get("at"), str):
            raise InputError(f"executed log {path} line {number}: every event needs 'event' and 'at'")
        try:
            _parse_time(event["at"])
        except ValueError:
            raise InputError(f"executed log {path} line {number}: 'at' is not an ISO 8601 time") from None
        if event["event"] == "case" and not (isinstance(event.get("case"), str) and isinstance(event.get("arm"), str)):
            raise InputError(f"executed log {path} line {number}: a case event needs 'case' and 'arm'")
    return header, events


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def check_executed(plan: Plan, registered_at: str, header: dict[str, Any],
                   events: list[dict[str, Any]]) -> list[Check]:
    """Order, window, restart, placement and identity checks of an executed log against the plan."""
    checks: list[Check] = []
    if header.get("plan") != plan.digest:
        raise InputError(f"the executed log is for plan {str(header.get('plan'))[:16]}, not this plan ({plan.digest[:16]})")
    case_events = [e for e in events if e["event"] == "case"]
    for event in case_events:
        if event["arm"] not in plan.arms:
            raise InputError(f"executed log names unknown arm '{event['arm']}' (arms: {', '.join(plan.arms)})")

    # (a) registered before any case ran
    registered = _parse_time(registered_at)
    early = [e for e in case_events if _parse_time(e["at"]) < registered]
    checks.append(Check("registered-first", not early,
                        "the plan was registered before any case ran" if not early else
                        f"{len(early)} case(s) ran before the plan was registered at {registered_at}"))

    # order
    expected = plan.expected_sequence()
    actual = [(e["case"], e["arm"]) for e in case_events]
    problems: list[str] = []
    for index, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if want != got:
            problems.append(f"step {index + 1}: ran case {got[0]} arm {got[1]}, registered case {want[0]} arm {want[1]}")
            break
    if len(actual) < len(expected):
        problems.append(f"{len(expected) - len(actual)} registered step(s) never ran")
    elif len(actual) > len(expected):
        problems.append(f"{len(actual) - len(expected)} step(s) ran that the plan does not contain")
    checks.append(Check("order", not problems, "; ".join(problems) or "every case ran in the registered order"))

    # window
    starts = [e for e in events if e["event"] == "window-start"]
    ends = [e for e in events if e["event"] == "window-end"]
    window_problems: list[str] = []
    if len(starts) != 1 or len(ends) != 1:
        window_problems.append(f"expected one window-start and one window-end, found {len(starts)} and {len(ends)}")
    else:
        lo, hi = _parse_time(starts[0]["at"]), _parse_time(ends[0]["at"])
        outside = [e for e in case_events if not lo <= _parse_time(e["at"]) <= hi]
        if outside:
            arms = sorted({e["arm"] for e in outside})
            window_problems.append(f"{len(outside)} case run(s) of arm(s) {', '.join(arms)} outside the window "
                                   f"{starts[0]['at']} .. {ends[0]['at']}")
    errored = [e for e in case_events if e.get("error")]
    if errored:
        window_problems.append(f"{len(errored)} case run(s) failed inside the window")
    checks.append(Check("window", not window_problems,
                        "; ".join(window_problems) or "both arms ran every case inside one window"))

    # restarts between the arms of a case (or anywhere inside the window)
    restarts = [e for e in events if e["event"] == "restart"]
    restart_problems = []
    for r in restarts:
        at = _parse_time(r["at"])
        crossing = None
        for entry in plan.order:
            runs = [e for e in case_events if e["case"] == entry["case"]]
            if len(runs) == 2 and _parse_time(runs[0]["at"]) <= at <= _parse_time(runs[1]["at"]):
                crossing = entry["case"]
                break
        where = f"between the arms of case {crossing}" if crossing else "inside the window"
        restart_problems.append(f"restart of arm {r.get('arm', '?')} at {r['at']} {where}")
    checks.append(Check("no-restart", not restart_problems,
                        "; ".join(restart_problems) or "no restart between arms"))

    # placement as registered
    placed = {e.get("arm"): e for e in events if e["event"] == "placement"}
    placement_problems = []
    for arm in plan.arms:
        registered_host = plan.placement.get(arm)
        event = placed.get(arm)
        actual_host = event.get("host") if event else None
        if registered_host and not event:
            placement_problems.append(f"arm {arm}: registered on {registered_host}, no placement recorded")
        elif event and (actual_host or "") != (registered_host or "") and not (
            _is_local(actual_host) and _is_local(registered_host)
        ):
            placement_problems.append(f"arm {arm}: ran on {actual_host or 'local'}, registered {registered_host or 'local'}")
        elif event and event.get("checks"):
            failed = [c["name"] for c in event["checks"] if not c.get("passed")]
            if failed:
                placement_problems.append(f"arm {arm}: placement check(s) failed: {', '.join(failed)}")
    checks.append(Check("placement", not placement_problems,
                        "; ".join(placement_problems) or "placement as registered"))

    # endpoint identity unchanged across the window
    identity_problems = []
    observed: dict[str, list[Any]] = {}
    for e in events:
        if e["event"] == "endpoint":
            observed.setdefault(e.get("arm"), []).append(e.get("observed"))
    for arm, seen in observed.items():
        if any(s != seen[0] for s in seen[1:]):
            identity_problems.append(f"arm {arm}: the endpoint's identity changed inside the window")
    checks.append(Check("identity", not identity_problems,
                        "; ".join(identity_problems) or "each endpoint answered as the same server throughout"))
    return checks


def _is_local(host: str | None) -> bool:
    return (host or "") in LOCAL_HOSTS


def check_plan(plan_path: str | Path, ledger: Ledger, executed: str | Path | None = None) -> PlanCheck:
    """Digest and registration (InputError when edited or unregistered); with an executed log, the
    order, window, restart, placement and identity checks as violations."""
    plan = load_plan(plan_path)
    record, registered_at = verify_registration(plan, ledger, str(plan_path))
    _check_registered_cases(plan, Path(plan_path).parent)
    result = PlanCheck(plan, record, registered_at)
    if executed is not None:
        header, events = read_log(executed)
        result.checks = check_executed(plan, registered_at, header, events)
        result.violations = [f"{c.name}: {c.detail}" for c in result.checks if not c.passed]
        result.executed = str(executed)
    return result


def _check_registered_cases(plan: Plan, base_dir: Path) -> None:
    """The cases file the plan registered must still hold the registered cases: 'plan run' refuses an
    edited one, so 'plan check' says so first. A cases file not present here is not checked."""
    source = plan.cases.get("file")
    if not source or not plan.cases.get("digest"):
        return
    path = Path(source)
    if not path.is_absolute() and not path.exists():
        path = base_dir / source  # registered relative to the plan's own directory
    if not path.is_file():
        return
    from execsys.probes.cases import cases_digest, load_cases

    if cases_digest(load_cases(path)) != plan.cases["digest"]:
        raise InputError(f"cases file {source} changed since the plan was registered (digest mismatch)")


# ------------------------------------------------------------------ placement (a)-(d)
@dataclass
class PlacementReport:
    arm: str
    host: str
    checks: list[Check]
    hardware: dict[str, Any] | None = None
    digest: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"arm": self.arm, "host": self.host, "passed": self.passed,
                "checks": [c.to_json() for c in self.checks], "hardware": self.hardware, "digest": self.digest}


def host_admissible(host: str, placement_table: dict[str, Any]) -> Check:
    """(d): the host's tier/region (``[placement] hosts``) must be in ``[placement] allowed``."""
    allowed = [str(a) for a in placement_table.get("allowed") or []]
    if not allowed:
        return Check("d-admissible", False,
                     "no residency policy declared ([placement] allowed in execsys.toml): admissibility unknown")
    hosts = placement_table.get("hosts") or {}
    entry = hosts.get(host)
    labels: list[str] = [host]
    if isinstance(entry, str):
        labels.append(entry)
    elif isinstance(entry, dict):
        labels += [str(v) for k, v in entry.items() if k in ("tier", "region", "surface", "zone")]
    elif isinstance(entry, list):
        labels += [str(v) for v in entry]
    hit = [label for label in labels if label in allowed]
    if hit:
        return Check("d-admissible", True, f"{host} is {hit[0]}, allowed by [placement] allowed = {allowed}")
    if entry is None:
        return Check("d-admissible", False, f"{host} has no tier/region in [placement] hosts; allowed: {allowed}")
    return Check("d-admissible", False, f"{host} ({', '.join(labels[1:])}) is not in [placement] allowed = {allowed}")


def check_placement(arm: str, host: str, *, registered_at: str | None, artifact_path: str | None,
                    expected_digest: str | None, placement_table: dict[str, Any],
                    timeout: float = 600.0) -> PlacementReport:
    """The four remote-placement conditions for one arm, each pass/fail, before the arm starts."""
    checks: list[Check] = []
    now = now_iso()
    checks.append(Check("a-registered", bool(registered_at) and registered_at <= now,
                        f"placement {arm}={host} registered at {registered_at}, before any case ran"
                        if registered_at else "the placement was not registered"))
    digest_json = None
    if not artifact_path or not expected_digest:
        checks.append(Check("b-digest", False,
                            "no artifact path and pinned digest to verify (give --lock with a pinned artifact)"))
    else:
        from execsys.digest import remote_digest

        remote = remote_digest(host, artifact_path, timeout=timeout)
        digest_json = remote.to_json()
        if not remote.ok:
            checks.append(Check("b-digest", False, f"could not compute the digest on {host}: {remote.error}"))
        elif remote.digest == expected_digest:
            checks.append(Check("b-digest", True, f"{artifact_path} on {host} hashes to the pinned {expected_digest[:16]}"
                                f" ({remote.method})"))
        else:
            checks.append(Check("b-digest", False, f"integrity defect: {artifact_path} on {host} hashes to "
                                f"{remote.digest[:16]}, the lock pins {expected_digest[:16]}"))
    hardware = None
    try:
        from execsys.observe.hardware import observe_remote_hardware

        hardware = observe_remote_hardware(host, timeout=min(timeout, 120.0))
        gpus = hardware.get("gpus") or []
        what = ", ".join(str(g.get("name")) for g in gpus) or "no GPU"
        driver = next((g.get("driver_version") for g in gpus if g.get("driver_version")), None)
        checks.append(Check("c-host-identity", True, f"recorded {host}: {what}" + (f", driver {driver}" if driver else "")))
    except InputError as exc:
        checks.append(Check("c-host-identity", False, f"could not record the identity of {host}: {exc}"))
    checks.append(host_admissible(host, placement_table))
    return PlacementReport(arm, host, checks, hardware, digest_json)


# ------------------------------------------------------------------ running a plan
@dataclass
class PairedStats:
    n: int
    b: int  # first arm right, second wrong
    c: int  # first arm wrong, second right
    both_right: int
    both_wrong: int
    rate_a: float | None
    rate_b: float | None
    difference: float | None
    ci95: tuple[float, float] | None
    mcnemar_p: float

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "b": self.b, "c": self.c, "both_right": self.both_right, "both_wrong": self.both_wrong,
                "rate_a": self.rate_a, "rate_b": self.rate_b, "difference": self.difference,
                "ci95": list(self.ci95) if self.ci95 else None, "mcnemar_p": self.mcnemar_p}


def paired_stats(pairs: Sequence[tuple[bool, bool]]) -> PairedStats:
    """Paired difference (A - B) with the exact McNemar test on the discordant pairs."""
    from execsys.stats import mcnemar_exact, paired_difference_ci

    n = len(pairs)
    b = sum(1 for a, bb in pairs if a and not bb)
    c = sum(1 for a, bb in pairs if bb and not a)
    both_right = sum(1 for a, bb in pairs if a and bb)
    both_wrong = n - b - c - both_right
    rate_a = (b + both_right) / n if n else None
    rate_b = (c + both_right) / n if n else None
    return PairedStats(n, b, c, both_right, both_wrong, rate_a, rate_b,
                       (b - c) / n if n else None, paired_difference_ci(b, c, n), mcnemar_exact(b, c))


@dataclass
class PlanRun:
    plan: Plan
    plan_record: str
    arms: dict[str, dict[str, Any]]
    outcomes: dict[str, dict[str, dict[str, Any]]]
    stats: PairedStats
    checks: list[Check]
    placement: list[PlacementReport]
    label: str
    statement: str
    started_at: str
    finished_at: str
    log: str | None
    cancelled: bool = False
    record: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RUN_SCHEMA, "plan": self.plan.digest, "plan_record": self.plan_record, "record": self.record,
            "arms": self.arms, "design": self.plan.design, "identity": self.plan.identity,
            "paired": self.stats.to_json(), "checks": [c.to_json() for c in self.checks],
            "placement": [p.to_json() for p in self.placement], "label": self.label, "statement": self.statement,
            "started_at": self.started_at, "finished_at": self.finished_at, "log": self.log,
            "cancelled": self.cancelled, "outcomes": self.outcomes,
        }


def parse_arm_endpoints(items: Sequence[str], plan: Plan) -> dict[str, str]:
    endpoints: dict[str, str] = {}
    for item in items:
        arm, sep, url = item.partition("=")
        if not sep or not url:
            raise UsageError(f"--arm {item!r}: expected ARM=URL (e.g. A=http://127.0.0.1:8000/v1)")
        if arm not in plan.arms:
            raise InputError(f"--arm {item!r}: unknown arm '{arm}' (the plan's arms: {', '.join(plan.arms)})")
        endpoints[arm] = url
    missing = [a for a in plan.arms if a not in endpoints]
    if missing:
        raise UsageError(f"no endpoint for arm(s) {', '.join(missing)}: give --arm {missing[0]}=URL")
    return endpoints


class _Log:
    """The executed log: JSON Lines, one event per line, flushed as it happens (evidence survives a crash)."""

    def __init__(self, path: str | Path | None, header: dict[str, Any]):
        self.events: list[dict[str, Any]] = []
        self.header = header
        try:
            self._fh = open(path, "w", encoding="utf-8") if path else None  # noqa: SIM115 - closed in close()
        except OSError as exc:
            reason = "is a directory" if Path(path).is_dir() else (exc.strerror or str(exc))
            raise InputError(f"{path}: cannot write the executed log ({reason})") from None
        self._write(header)

    def _write(self, row: dict[str, Any]) -> None:
        if self._fh:
            from execsys.redact import scrub

            self._fh.write(json.dumps(scrub(row), ensure_ascii=False, sort_keys=True) + "\n")
            self._fh.flush()

    def event(self, name: str, **data: Any) -> dict[str, Any]:
        row = {"event": name, "at": now_iso(), **data}
        self.events.append(row)
        self._write(row)
        return row

    def close(self) -> None:
        if self._fh:
            self._fh.close()


def is_correct(outcome: str | None, expected: Any) -> bool:
    if outcome is None or expected is None:
        return False
    if isinstance(expected, list):
        return any(is_correct(outcome, e) for e in expected)
    return outcome.strip() == str(expected).strip()


def run_plan(plan: Plan, endpoints: dict[str, str], ledger: Ledger, *,
             params: dict[str, Any] | None = None, arm_params: dict[str, dict[str, Any]] | None = None,
             extract: str | None = None, cases_path: str | Path | None = None,
             artifact_path: str | None = None, expected_digest: str | None = None,
             placement_table: dict[str, Any] | None = None, log_path: str | Path | None = None,
             timeout: float = 120.0, api_key_env: str | None = None, base_dir: str | Path | None = None,
             lock_identity: str | None = None,
             on_event: Callable[[dict[str, Any]], None] | None = None,
             cancel: threading.Event | None = None) -> PlanRun:
    """Execute the registered order inside one window and report the paired difference.

    ``lock_identity`` (the id of the lock given at run time) must match the identity the plan was
    registered for, when both are known; ``base_dir`` resolves a relative cases path.

    ``on_event`` receives every log event as it happens (the TUI's progress); setting ``cancel``
    stops after the current case (the run is then labelled descriptive: the window is incomplete)."""
    from execsys.probes.cases import cases_digest, load_cases
    from execsys.probes.client import EndpointClient
    from execsys.probes.compare import parse_extractor

    plan_record, registered_at = verify_registration(plan, ledger)
    for arm in endpoints:
        if arm not in plan.arms:
            raise InputError(f"unknown arm '{arm}' (the plan's arms: {', '.join(plan.arms)})")
    source = cases_path or plan.cases.get("file")
    if not source:
        raise UsageError("the plan was made from case ids, not a cases file: give --cases FILE")
    if not cases_path and base_dir is not None and not Path(source).is_absolute() and not Path(source).exists():
        source = Path(base_dir) / source  # a relative path registered from the plan's own directory
    cases = {c.id: c for c in load_cases(source)}
    planned_ids = [e["case"] for e in plan.order]
    missing = [cid for cid in planned_ids if cid not in cases]
    if missing:
        raise InputError(f"cases file {source} lacks planned case(s) {', '.join(missing[:5])}")
    if plan.cases.get("file") and cases_digest(list(cases.values())) != plan.cases.get("digest"):
        raise InputError(f"cases file {source} changed since the plan was registered (digest mismatch)")
    no_expected = [cid for cid in planned_ids if cases[cid].expected is None]
    if no_expected:
        raise InputError(f"case {no_expected[0]} has no \"expected\" answer: a paired comparison needs one per case")
    extractor = parse_extractor(extract)
    base_params = {"temperature": 0, "max_tokens": 32, **(params or {})}

    clients = {arm: EndpointClient(url, timeout=timeout, api_key_env=api_key_env) for arm, url in endpoints.items()}
    log = _Log(log_path, {"schema": LOG_SCHEMA, "plan": plan.digest, "plan_record": plan_record,
                          "arms": {a: clients[a].display for a in plan.arms}})

    def emit(name: str, **data: Any) -> dict[str, Any]:
        row = log.event(name, **data)
        if on_event:
            on_event(row)
        return row

    try:
        # Placement first: every condition is checked before the arm's first case.
        placements: list[PlacementReport] = []
        for arm in plan.arms:
            host = plan.placement.get(arm)
            if host and not _is_local(host):
                report = check_placement(arm, host, registered_at=registered_at, artifact_path=artifact_path,
                                         expected_digest=expected_digest, placement_table=placement_table or {},
                                         timeout=max(timeout, 60.0))
                placements.append(report)
                emit("placement", arm=arm, host=host, checks=[c.to_json() for c in report.checks],
                     hardware=report.hardware, digest=report.digest)
            else:
                emit("placement", arm=arm, host=host or "local", checks=[])
        models = {arm: clients[arm].resolve_model(None) for arm in plan.arms}
        for arm in plan.arms:
            emit("endpoint", arm=arm, observed=_observe(clients[arm]))
        started = emit("window-start")["at"]
        outcomes: dict[str, dict[str, dict[str, Any]]] = {}
        fingerprints: dict[str, set[str]] = {arm: set() for arm in plan.arms}
        cancelled = False
        for entry in plan.order:
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            case = cases[entry["case"]]
            for arm in (entry["first"], plan.other(entry["first"])):
                run_params = {**base_params, **(arm_params or {}).get(arm, {}), "model": models[arm]}
                completion = clients[arm].complete(case, run_params)
                text = completion.text if completion.ok else None
                outcome = (extractor(text) if extractor else text.strip()) if text is not None else None
                correct = is_correct(outcome, case.expected)
                if completion.system_fingerprint:
                    fingerprints[arm].add(completion.system_fingerprint)
                outcomes.setdefault(case.id, {})[arm] = {
                    "text": text, "outcome": outcome, "correct": correct, "error": completion.error,
                    "first": arm == entry["first"],
                }
                emit("case", case=case.id, arm=arm, position="first" if arm == entry["first"] else "second",
                     outcome=outcome, correct=correct, error=completion.error)
                if completion.error:
                    emit("restart", arm=arm, reason=f"the endpoint failed mid-window ({completion.error})")
        for arm in plan.arms:
            emit("endpoint", arm=arm, observed=_observe(clients[arm]))
        for arm, seen in fingerprints.items():
            if len(seen) > 1:
                emit("restart", arm=arm, reason=f"system_fingerprint changed inside the window: {sorted(seen)}")
        finished = emit("window-end")["at"]
    finally:
        log.close()
        for client in clients.values():
            client.close()

    checks = check_executed(plan, registered_at, log.header, log.events)
    if cancelled:
        checks.append(Check("complete", False, "cancelled before every case ran"))
    if plan.identity and lock_identity and lock_identity != plan.identity:
        checks.append(Check("pinned-identity", False, f"the plan was registered for identity {plan.identity[:12]}, "
                            f"the lock given pins {lock_identity[:12]}"))
    a, b = plan.arms
    pairs = [(o[a]["correct"], o[b]["correct"]) for o in outcomes.values()
             if a in o and b in o and not o[a]["error"] and not o[b]["error"]]
    stats = paired_stats(pairs)
    causal = all(c.passed for c in checks)
    label = "causal" if causal else "descriptive"
    statement = _run_statement(plan, stats, checks, causal)
    arms_json = {arm: {"endpoint": clients[arm].display, "model": models[arm],
                       "host": plan.placement.get(arm) or "local",
                       "params": {**base_params, **(arm_params or {}).get(arm, {})},
                       "correct": sum(1 for o in outcomes.values() if o.get(arm, {}).get("correct")),
                       "rate": stats.rate_a if arm == a else stats.rate_b} for arm in plan.arms}
    run = PlanRun(plan, plan_record, arms_json, outcomes, stats, checks, placements, label, statement,
                  started, finished, str(log_path) if log_path else None, cancelled)
    body = run.to_json()
    run.record = ledger.append("plan-run", body, identity=plan.identity, parent=plan_record)
    return run


def _observe(client: Any) -> dict[str, Any]:
    info = client.observe()
    return {"models": info.get("models"), "server": info.get("server")}


def _run_statement(plan: Plan, stats: PairedStats, checks: list[Check], causal: bool) -> str:
    a, b = plan.arms
    if stats.n == 0:
        return "No case produced an answer from both arms: nothing to compare."
    ci = f"95% CI {stats.ci95[0]:+.3f} to {stats.ci95[1]:+.3f}" if stats.ci95 else "no interval"
    figures = (f"{a} {stats.rate_a:.3f} vs {b} {stats.rate_b:.3f} over {stats.n} paired cases; "
               f"difference {a}-{b} {stats.difference:+.3f} ({ci}); discordant pairs {stats.b} ({a} only) "
               f"and {stats.c} ({b} only), exact McNemar p = {stats.mcnemar_p:.4g}")
    if causal:
        return (f"Contemporaneous paired control held (order, placement, window and identity checks all passed): "
                f"the paired difference is a causal estimate of {a} against {b}. {figures}.")
    failed = ", ".join(c.name for c in checks if not c.passed)
    return f"Descriptive only: the {failed} check(s) failed, so no causal claim is made. {figures}."
