"""Which system each arm of a paired run measured: its serving runtime observed against its own lock.

A plan run's two arms are two endpoints. Under one lock, an arm answered by an engine started with
other flags (or serving another artifact) is not the pinned system, and a plan-run record with one
identity for both arms would let ``compare --intervention budget`` call the difference causal while
what really moved was the runtime. So every arm is observed the way a probe pass observes its
target (:class:`execsys.probes.system.SystemObserver`: models, version, the serving process's pid,
start time, argv and numerics environment) at the start and at the end of its work in the window,
and judged against the arm's lock: the one given with ``--arm-lock ARM=PATH`` (two arms that are two
pinned systems, e.g. two artifacts), else the run's lock.

Per arm the record carries ``system_check`` (as a probe's: ``matches-lock`` | ``differs`` |
``unverified``, ``at_start``, ``at_end``, ``differences``) and ``identity``: the lock's id only when
the arm matched it, else null with ``identity_reason`` saying why -- so ``compare`` derives what
moved between the arms from their own identities, never from the label.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from execsys.errors import UsageError

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity

SUBJECT = "this plan"
# what of the declaration's [runtime] an arm's observation takes (its endpoint is the arm's own)
_DECLARED_KEYS = ("engine", "process", "env_file")


@dataclass(frozen=True)
class ArmSystem:
    """What one arm is checked against: its lock (id, pinned runtime) and how its runtime is observed."""

    lock_id: str | None
    lock_path: str | None = None  # --arm-lock's file; None: the run's lock (or none)
    pinned_runtime: dict[str, Any] | None = None
    pinned_declared_runtime: dict[str, Any] | None = None
    declared_runtime: dict[str, Any] = field(default_factory=dict)

    def runtime(self, endpoint: str, api_key_env: str | None) -> dict[str, Any]:
        """The runtime to observe for this arm: its endpoint, the engine and process as its lock pinned
        them (else as declared), as a probe pass builds it (comparable with the lock)."""
        declared: dict[str, Any] = {**self.declared_runtime, "endpoint": endpoint, "api_key_env": api_key_env}
        for key in ("engine", "process"):
            pinned = (self.pinned_declared_runtime or {}).get(key)
            if pinned:
                declared[key] = pinned
        return {k: v for k, v in declared.items() if v not in (None, "")}


def arm_lock(arm: str, value: Identity | str | os.PathLike[str]) -> tuple[Identity, str | None]:
    """``--arm-lock ARM=PATH``: the identity and the file it was read from, read as every named lock is
    (one line, exit 2, when it is not there or not a lock); an identity given as such has no file."""
    from execsys.identity import Identity
    from execsys.sources import read_lock

    if isinstance(value, Identity):
        return value, None
    if not str(value).strip():
        raise UsageError(f"--arm-lock {arm}=: give the lock file of arm {arm}")
    return read_lock(value), str(value)


def arm_systems(declaration: Declaration | None, lock: Identity | None, arms: tuple[str, ...] | list[str],
                arm_locks: Mapping[str, tuple[Identity, str | None]] | None = None) -> dict[str, ArmSystem]:
    """Each arm's :class:`ArmSystem`: its ``--arm-lock`` (identity, path) when given, else the run's lock."""
    runtime_t = dict((declaration.tables.get("runtime") or {}) if declaration is not None else {})
    declared = {k: v for k, v in runtime_t.items() if k in _DECLARED_KEYS}
    systems: dict[str, ArmSystem] = {}
    for arm in arms:
        own, path = (arm_locks or {}).get(arm, (lock, None))
        systems[arm] = ArmSystem(
            lock_id=own.id if own is not None else None, lock_path=path,
            pinned_runtime=dict(own.observed("runtime")) if own is not None else None,
            pinned_declared_runtime=dict(own.declared("runtime")) if own is not None else None,
            declared_runtime=declared)
    return systems


class ArmObserver:
    """Observes each arm's serving runtime (start and end of its work) and judges it against its lock."""

    def __init__(self, systems: Mapping[str, ArmSystem]) -> None:
        from execsys.probes.system import SystemObserver

        self.systems = dict(systems)
        self.entries: dict[str, list[dict[str, Any]]] = {arm: [] for arm in systems}
        self._observers = {arm: SystemObserver(pinned_runtime=s.pinned_runtime,
                                               pinned_declared=s.pinned_declared_runtime, lock_id=s.lock_id)
                           for arm, s in systems.items()}
        self._said: set[str] = set()

    def observe_all(self, endpoints: Mapping[str, str], api_key_env: str | None,
                    at: str) -> list[tuple[str, dict[str, Any], str | None]]:
        """Every arm observed at once (``at``: "start" or "end"; one look can spawn the serving process's
        interpreter, and the arms' looks are independent), then kept in arm order: ``(arm, entry, line)``
        with the line to say now when the arm is not its pinned system."""
        from concurrent.futures import ThreadPoolExecutor

        arms = list(self.systems)
        with ThreadPoolExecutor(max_workers=max(1, len(arms)), thread_name_prefix="plan-arm-system") as pool:
            looks = [pool.submit(self._look, arm, endpoints[arm], api_key_env, at) for arm in arms]
            entries = [look.result() for look in looks]
        return [(arm, entry, self._keep(arm, entry)) for arm, entry in zip(arms, entries, strict=True)]

    def _look(self, arm: str, endpoint: str, api_key_env: str | None, at: str) -> dict[str, Any]:
        return self._observers[arm].observe(0, self.systems[arm].runtime(endpoint, api_key_env), arm, at)

    def _keep(self, arm: str, entry: dict[str, Any]) -> str | None:
        from execsys.probes.system import DIFFERS, sentence
        from execsys.redact import redact_text

        self.entries[arm].append(entry)
        if entry["verdict"] != DIFFERS:
            return None
        line = redact_text(f"arm {arm}: {sentence(entry['differences'], subject=SUBJECT)}")
        if line in self._said:
            return None
        self._said.add(line)
        return line

    def judge(self, arm: str, *, models: list[str], fingerprints: list[str]) -> dict[str, Any]:
        """``{"system_check", "identity", "identity_reason"}`` for ``arm``: its observations, and what its
        own responses said (the models that answered, the ``system_fingerprint``), against its lock."""
        from execsys.probes.system import DIFFERS, MATCHES, answered_differences, summarise, with_differences

        system = self.systems[arm]
        check = summarise(self.entries[arm], lock_id=system.lock_id, subject=SUBJECT)
        if self._observers[arm].comparable:
            answered = answered_differences([{"source": "send", "label": arm, "models": models,
                                              "system_fingerprints": fingerprints}], system.pinned_runtime)
            check = with_differences(check, answered, subject=SUBJECT)
        if system.lock_path is not None:
            check = {**check, "lock_file": system.lock_path}
        if check["verdict"] == MATCHES:
            return {"system_check": check, "identity": system.lock_id, "identity_reason": None}
        if system.lock_id is None:
            reason = f"no pinned identity for arm {arm}: it counts toward no identity"
        elif check["verdict"] == DIFFERS:
            reason = (f"{check['sentence']} (identity {system.lock_id[:12]} was pinned): arm {arm} counts toward "
                      "no identity")
        else:
            reason = (f"arm {arm}'s system could not be checked against identity {system.lock_id[:12]} "
                      f"({check.get('reason')}): it counts toward no identity")
        return {"system_check": check, "identity": None, "identity_reason": reason}
