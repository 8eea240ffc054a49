"""The plan: a pre-registered, counterbalanced order of two arms over a set of cases.

A paired comparison licenses a causal claim only when "which arm ran first" cannot pass for the
effect, so the order is fixed before any case runs and balanced: each arm goes first in half the
cases. The schedule is deterministic in (arms, cases, design, seed); its ``digest`` covers
everything but ``registered_at``, and the ledger record id derives from the digest, so a plan
edited after registration no longer matches its record and is refused.

- :func:`new_plan` builds the schedule (``execsys.plan/1``);
- :class:`NewPlanOptions` + :func:`make_plan` are ``execsys plan new`` (build, register, report);
- :func:`register_plan` writes it to the ledger (registering the same plan twice is a no-op);
- :func:`verify_registration` is what ``plan run`` and ``plan check`` ask first;
- :func:`plan_from_json` / :func:`load_plan` read a plan file, naming a malformed field.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.canonical import content_id
from execsys.errors import InputError, UsageError
from execsys.fsutil import RECORD_FILE_LIMIT, read_bounded
from execsys.ledger import Ledger, now_iso
from execsys.sources import no_identity_reason

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity
    from execsys.probes.cases import Case

SCHEMA = "execsys.plan/1"
DESIGNS = ("abba", "random")
LOCAL_HOSTS = ("", "local", "localhost", "127.0.0.1", "::1")
_ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # whole name: "$" would let a trailing newline in
NO_PLAN_IDENTITY = "the plan was registered without a pinned identity: this plan will not count toward any scope"


def unpinned_reason(lock_path: str | os.PathLike[str] | None) -> str:
    """Why a plan counts toward no scope: the lock that was looked for and not found."""
    if lock_path is None:
        return "no pinned identity: this plan will not count toward any scope"
    return no_identity_reason(Path(lock_path), "this plan")


def is_local(host: str | None) -> bool:
    """Whether a registered host means "this machine" (no remote placement checks apply)."""
    return (host or "") in LOCAL_HOSTS


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
    # Why ``identity`` is null (the lock looked for), when a face registered it without one.
    identity_reason: str | None = None

    def digest_body(self) -> dict[str, Any]:
        """Everything the digest covers: the whole plan except ``registered_at`` (and the digest).

        Byte-for-byte what it was when plans were first registered (tests/test_plan_golden.py):
        a change here turns every plan file in existence into a "tampered" one. ``identity_reason``
        is covered too -- nothing in a plan file escapes the digest -- but only where a plan has
        one, so the plans registered before it existed keep their digests."""
        body: dict[str, Any] = {
            "schema": SCHEMA, "arms": self.arms, "order": self.order, "design": self.design, "seed": self.seed,
            "placement": self.placement, "cases": self.cases, "identity": self.identity,
        }
        if self.identity_reason is not None:
            body["identity_reason"] = self.identity_reason
        return body

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

    def remote_host(self, arm: str) -> str | None:
        """The host ``arm`` is registered on when that is not this machine, else None."""
        host = self.placement.get(arm)
        return None if is_local(host) else host

    def cases_file(self, base_dir: str | os.PathLike[str] | None = None) -> Path | None:
        """The registered cases file, a relative one found from ``base_dir`` (the plan's own
        directory) when it is not found from here; None when the plan was made from case ids."""
        source = self.cases.get("file")
        if not source:
            return None
        path = Path(source)
        if base_dir is not None and not path.is_absolute() and not path.exists():
            path = Path(base_dir) / source
        return path


def plan_record_id(digest: str) -> str:
    return f"plan-{digest[:24]}"


def parse_assignments(items: Sequence[str] | None, flag: str, value_name: str, example: str, *,
                      once: bool = False) -> dict[str, str]:
    """``["A=gpu1", "B=gpu2"]`` -> ``{"A": "gpu1", "B": "gpu2"}``: the ARM=VALUE syntax of
    ``--placement``, ``--arm`` and ``--arm-params``. Which arms exist is checked by the options."""
    found: dict[str, str] = {}
    for item in items or []:
        arm, sep, value = item.partition("=")
        if not sep or not arm or not value:
            raise UsageError(f"{flag} {item!r}: expected ARM={value_name} (e.g. {example})")
        if once and arm in found:
            raise UsageError(f"{flag}: arm '{arm}' placed twice")
        found[arm] = value
    return found


def check_arms(given: Mapping[str, Any], arms: Sequence[str], where: Callable[[str, Any], str], *,
               error: type[Exception] = InputError, listed: str = "arms") -> None:
    """Every arm named in ``given`` is one of ``arms``; else ``error`` naming it. ``where(arm, value)``
    starts the message (``"--arm 'C=URL': "``), ``listed`` names the list it ends with."""
    for arm, value in given.items():
        if arm not in arms:
            raise error(f"{where(arm, value)}unknown arm '{arm}' ({listed}: {', '.join(arms)})")


def validate_schedule(arms: Sequence[str], design: str, placement: Mapping[str, str],
                      where: Callable[[str, Any], str] = lambda arm, host: "placement names ") -> None:
    """The inputs of a schedule: two distinct, plain arm names, a known design, placement of known arms."""
    if len(arms) != 2 or arms[0] == arms[1]:
        raise UsageError("--arms takes exactly two distinct arm names (e.g. --arms A B)")
    for arm in arms:
        if not _ARM_NAME.fullmatch(arm):
            raise UsageError(f"arm name {arm!r}: letters, digits, '_', '.', '-' only")
    if design not in DESIGNS:
        raise UsageError(f"--design {design!r}: expected one of {', '.join(DESIGNS)}")
    check_arms(placement, arms, where)


def placement_flag(arm: str, host: str) -> str:
    """How an unknown arm in ``--placement`` is named: as the operator typed it."""
    return f"--placement {f'{arm}={host}'!r}: "


def new_plan(arms: Sequence[str], cases: Sequence[Any] | str | Path, design: str = "abba",
             seed: int | str = 0, placement: dict[str, str] | None = None, *,
             identity: str | None = None, identity_reason: str | None = None) -> Plan:
    """A counterbalanced schedule: each arm goes first in half the cases (one more when n is odd).

    ``cases`` is a JSON Lines cases file (the probe format) or a list of case ids / Case objects.
    The same inputs always give the same plan: the case order is shuffled by ``seed`` and the arm
    going first follows the design -- ``abba`` (A B B A A B B A ... over the shuffled order, the
    starting arm chosen by the seed) or ``random`` (a seeded shuffle of a balanced list)."""
    arms = list(arms)
    placement = dict(placement or {})
    validate_schedule(arms, design, placement)
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
    plan = Plan(arms, order, design, seed, placement, case_meta, identity,
                identity_reason=identity_reason if identity is None else None)
    plan.digest = plan.compute_digest()
    return plan


def plan_from_json(data: Any, where: str = "plan") -> Plan:
    """Parse an ``execsys.plan/1`` document; a malformed one is an input error naming the field."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"{where}: not an {SCHEMA} plan")

    def field_of(name: str, expected: str, parse: Callable[[Any], Any], default: Any = ...) -> Any:
        if name not in data and default is not ...:
            return default
        try:
            return parse(data[name])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InputError(f"{where}: malformed plan: field '{name}' is missing or not {expected}") from None

    def typed(kind: type) -> Callable[[Any], Any]:
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
    reason = field_of("identity_reason", "a sentence", lambda v: None if v is None else typed(str)(v), default=None)
    plan = Plan(arms, order, design, seed, placement, cases, data.get("identity"), digest,
                data.get("registered_at"), reason)
    if len(arms) != 2:
        raise InputError(f"{where}: a plan has exactly two arms")
    for entry in order:
        if entry["first"] not in arms:
            raise InputError(f"{where}: order names unknown arm '{entry['first']}' (arms: {', '.join(arms)})")
    check_arms(plan.placement, arms, lambda arm, host: f"{where}: placement names ")
    return plan


def load_plan(path: str | os.PathLike[str]) -> Plan:
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


def load_registered_cases(plan: Plan, path: str | os.PathLike[str]) -> dict[str, Case]:
    """The plan's cases by id from ``path``; InputError when the file has changed since the plan
    was registered (``plan run`` and ``plan check`` refuse it alike) or lacks a planned case."""
    from execsys.probes.cases import cases_digest, load_cases

    loaded = load_cases(Path(path))
    if plan.cases.get("file") and plan.cases.get("digest") and cases_digest(loaded) != plan.cases["digest"]:
        raise InputError(f"cases file {path} changed since the plan was registered (digest mismatch)")
    cases = {c.id: c for c in loaded}
    missing = [e["case"] for e in plan.order if e["case"] not in cases]
    if missing:
        raise InputError(f"cases file {path} lacks planned case(s) {', '.join(missing[:5])}")
    return cases


# ------------------------------------------------------------------ execsys plan new
@dataclass(frozen=True)
class NewPlanOptions:
    """What ``execsys plan new`` needs: the schedule's inputs and the identity to record."""

    arms: tuple[str, ...]
    cases: str | Path | tuple[Any, ...]
    design: str = "abba"
    seed: int | str = 0
    placement: dict[str, str] = field(default_factory=dict)
    identity: str | None = None
    identity_reason: str | None = None
    ledger: Path | None = None

    @classmethod
    def from_sources(cls, declaration: Declaration | None, lock: Identity | None, *,
                     arms: Sequence[str], cases: str | Path | Sequence[Any],
                     design: str | None = None, seed: int | str | None = None,
                     placement: Mapping[str, str] | None = None, identity: str | None = None,
                     lock_path: str | os.PathLike[str] | None = None,
                     ledger: str | os.PathLike[str] | None = None) -> NewPlanOptions:
        """Flags over the lock: ``identity`` (an id given directly, as the TUI does) wins over the
        lock's; with neither, ``identity_reason`` says where the lock was looked for.

        The declaration holds nothing ``plan new`` reads today; it is taken so that every
        operation is built the same way."""
        del declaration
        arm_list, placed = list(arms), dict(placement or {})
        design = design if design is not None else "abba"
        validate_schedule(arm_list, design, placed, placement_flag)
        identity_id = identity if identity is not None else (lock.id if lock is not None else None)
        reason = unpinned_reason(lock_path) if identity_id is None else None
        return cls(arms=tuple(arm_list), cases=cases if isinstance(cases, (str, Path)) else tuple(cases),
                   design=design, seed=seed if seed is not None else 0,
                   placement=placed, identity=identity_id, identity_reason=reason,
                   ledger=Path(ledger).expanduser() if ledger else None)


@dataclass
class NewPlan:
    """``execsys plan new``'s report: the registered plan and what ``plan run`` will lack."""

    plan: Plan
    record_id: str
    without_expected: list[str]  # case ids with no "expected" answer: 'plan run' cannot score them

    def to_json(self) -> dict[str, Any]:
        return self.plan.to_json()


def make_plan(options: NewPlanOptions, ledger: Ledger | None = None) -> NewPlan:
    """Build the schedule and register it before any case runs (in ``ledger``, else the one
    ``options.ledger`` names, else the default ledger)."""
    plan = new_plan(options.arms, options.cases, options.design, options.seed, options.placement,
                    identity=options.identity, identity_reason=options.identity_reason)
    if ledger is not None:
        register_plan(plan, ledger)
    else:
        with Ledger.open(options.ledger) as own:
            register_plan(plan, own)
    without_expected: list[str] = []
    cases_file = plan.cases_file()
    if cases_file is not None:
        from execsys.probes.cases import load_cases

        without_expected = [c.id for c in load_cases(cases_file) if c.expected is None]
    return NewPlan(plan, plan.record_id, without_expected)
