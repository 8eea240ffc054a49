"""The engine of ``pin``: observe the declared system, note what does not hold, then record the identity
in the ledger and the lock (``PinOptions.from_sources`` -> :func:`run_pin` -> :class:`PinReport`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execsys import sources
from execsys.canonical import content_id
from execsys.declaration import Declaration
from execsys.errors import InputError
from execsys.identity.diff import DiffReport, diff_identities
from execsys.identity.model import Identity, IdentityRecorded
from execsys.identity.observe import (
    _check_cancel,
    _normalise,
    observe_components,
    observe_observer,
)
from execsys.identity.store import record_identity
from execsys.operation import Cancel, OnEvent, emit, first_given
from execsys.redact import scrub
from execsys.sources import declared_base


def _notes(decl: Declaration, components: dict[str, dict[str, Any]], variables_where: str | None = None) -> list[str]:
    notes = list(decl.warnings)
    artifact = components["artifact"]["observed"]
    if artifact.get("quantization_matches_declared") is False:
        notes.append(f"declared quantization {components['artifact']['declared'].get('quantization')!r} but the files "
                     f"say {artifact.get('quantization')!r} ({artifact.get('quantization_source')})")
    signature = artifact.get("signature") if isinstance(artifact.get("signature"), dict) else {}
    if signature.get("error"):
        notes.append(f"the artifact's {signature['error']}: its signature cannot be read")
    elif signature and not signature.get("present") and (signature.get("key") or {}).get("path"):
        notes.append("[artifact] signature_key is declared but the artifact holds no model.sig: verify will say "
                     "its signature is not verified")
    elif (signature.get("key") or {}).get("matches_bundle") is False:
        notes.append(f"model.sig names key {str((signature.get('signer') or {}).get('key_sha256'))[:16]}, not the "
                     f"declared [artifact] signature_key {str(signature['key'].get('sha256'))[:16]}: verify will "
                     "not verify it")
    missing = components["environment"]["observed"].get("variables_not_holding") or []
    if missing:
        from execsys.observe.environment import OWN_ENVIRONMENT

        notes.append(f"declared [environment] variables that do not hold: {', '.join(missing)} "
                     f"({variables_where or OWN_ENVIRONMENT})")
    for command in components["harness"]["observed"].get("commands") or []:
        if command.get("note"):
            notes.append(f"harness command {command.get('command')!r}: {command['note']}")
        elif (command.get("interpreter") or {}).get("note"):
            notes.append(f"harness command {command.get('command')!r}: its interpreter did not describe itself "
                         f"({command['interpreter']['note']})")
    from execsys.observe.tools import tools_not_offered

    not_offered = tools_not_offered(components["tools"]["declared"], components["tools"]["observed"])
    if not_offered:
        notes.append(f"declared tools that no MCP server offers: {', '.join(not_offered)}")
    applied = components["context_policy"]["observed"].get("applied_template") or {}
    if applied.get("matches_declared") is False:
        notes.append(f"the chat template the engine applies ({applied.get('source')}) is not the declared "
                     f"[context_policy] template: a flip no decoding margin explains may be this")
    endpoint = components["runtime"]["observed"].get("endpoint") or {}
    if endpoint.get("models_status") in (401, 403):
        notes.append(f"the endpoint refused /v1/models ({endpoint['models_status']}): name the variable holding "
                     "its key in [runtime] api_key_env")
    hardware = components["hardware"]
    declared_host = hardware["declared"].get("host")
    if declared_host and declared_host != hardware["observed"].get("hostname"):
        notes.append(f"declared host {declared_host!r} but this is {hardware['observed'].get('hostname')!r}")
    declared_gpu = hardware["declared"].get("gpu")
    gpu_names = [g.get("name") or "" for g in hardware["observed"].get("gpus") or []]
    if declared_gpu and not any(declared_gpu.lower() in name.lower() for name in gpu_names):
        notes.append(f"declared GPU {declared_gpu!r} but this host has {', '.join(gpu_names) or 'no NVIDIA GPU'}")
    declared_count = hardware["declared"].get("gpu_count")
    if isinstance(declared_count, int) and declared_count != len(gpu_names):
        notes.append(f"declared {declared_count} GPU(s) but this host has {len(gpu_names)}")
    if components["hardware"]["observed"].get("gpu_note"):
        notes.append(f"hardware: {components['hardware']['observed']['gpu_note']}")
    return notes


def pin(decl: Declaration, *, on_event: OnEvent | None = None, cancel: Cancel | None = None,
        exclude: list[Path] | None = None, require_endpoint: bool = True) -> Identity:
    """Observe the declared system and return its identity (not yet written anywhere)."""
    from execsys.clock import now_iso

    _refuse_unusable_signature_key(decl)
    checked: dict[str, Any] = {}
    components = observe_components(decl, on_event=on_event, cancel=cancel, require_endpoint=require_endpoint,
                                    exclude=exclude, live=checked)
    live = _live_facts(components["runtime"]["observed"], decl.component("runtime"))
    if checked.get("variables_checked"):
        live["environment"] = {"variables_checked": checked["variables_checked"]}
    declaration = {"path": os.path.abspath(decl.path) if decl.path else None, "base_dir": str(declared_base(decl))}
    where = (checked.get("variables_checked") or {}).get("where")
    return Identity(id=content_id(components), recorded_at=now_iso(), components=components,
                    declaration=declaration, notes=_normalise(_notes(decl, components, where) +
                                                              _served_notes(components, live)),
                    observer=observe_observer(), live=_normalise(live))


def _refuse_unusable_signature_key(decl: Declaration) -> None:
    """A declared ``[artifact] signature_key`` that cannot check a signature (missing, a private key, not
    an ECDSA key or certificates) is bad input, said before minutes of hashing: nothing is pinned."""
    key = decl.get("artifact", "signature_key")
    if not key:
        return
    from execsys.observe.artifact import resolve
    from execsys.observe.model_signature import observe_key

    error = observe_key(resolve(str(key), declared_base(decl))).get("error")
    if error:
        raise InputError(f"{error}: nothing pinned")


def _live_facts(runtime_observed: dict[str, Any], declared_runtime: dict[str, Any]) -> dict[str, Any]:
    """What the engine is doing now (moved out of the observed runtime, so outside the id), and whether it
    answers a model name it does not list."""
    from execsys.observe.served import model_name_honesty

    live: dict[str, Any] = {}
    engine_live = runtime_observed.pop("engine_live", None)
    if engine_live:
        live["engine"] = engine_live
    endpoint = runtime_observed.get("endpoint") or {}
    if declared_runtime.get("endpoint") and endpoint.get("models") and not endpoint.get("error"):
        api_key_env = declared_runtime.get("api_key_env")
        honesty = model_name_honesty(declared_runtime["endpoint"], list(endpoint["models"]),
                                     api_key=os.environ.get(api_key_env) if api_key_env else None)
        if honesty is not None:
            live["model_name_honesty"] = honesty
    return live


def _served_notes(components: dict[str, dict[str, Any]], live: dict[str, Any]) -> list[str]:
    from execsys.observe.served import ANOTHER, ANSWERS_ANY_NAME, honesty_evidence

    notes = []
    served = components["runtime"]["observed"].get("served") or {}
    if served.get("verdict") == ANOTHER:
        notes.append(f"{served['sentence']} -- an integrity defect: results measured now are not the pinned "
                     "artifact's")
    honesty = live.get("model_name_honesty") or {}
    if honesty.get("answered"):
        notes.append(f"{ANSWERS_ANY_NAME} ({honesty_evidence(honesty)})")
    return notes


@dataclass(frozen=True)
class PinOptions:
    """What ``pin`` observes and where it records it."""

    declaration: Declaration
    lock_path: Path
    previous: Identity | None = None  # the lock being replaced, if it could be read (for the diff)
    ledger_path: Path | None = None  # None: $EXECSYS_LEDGER or the user data dir
    record: bool = True  # False: observe only (the TUI's "observe now"); nothing is written
    require_endpoint: bool = True

    @classmethod
    def from_sources(cls, declaration: Declaration, lock: Identity | None = None, *,
                     lock_path: str | os.PathLike[str] | None = None, ledger: str | os.PathLike[str] | None = None,
                     record: bool | None = None, require_endpoint: bool | None = None,
                     engine_log: str | os.PathLike[str] | None = None) -> PinOptions:
        """``lock_path`` (``--lock``/``--out``) over the lock beside the declaration; ``lock`` is the
        identity currently pinned there, if any; ``engine_log`` (``--engine-log``) over ``[runtime] log``."""
        target = sources.lock_path(lock_path, declaration.path)  # the one rule: --lock, else beside the declaration
        if target.is_dir():
            raise InputError(f"{target}: cannot write the lock (is a directory)")
        record_value = first_given(record, True)
        require = first_given(require_endpoint, bool(record_value))
        if engine_log is not None:
            if not str(engine_log).strip():
                raise InputError("--engine-log is empty: give the engine's log file")
            log = os.path.abspath(os.path.expanduser(engine_log))  # the flag means the path as the user typed it
            declaration = Declaration(path=declaration.path, warnings=list(declaration.warnings),
                                      tables={**declaration.tables,
                                              "runtime": {**declaration.component("runtime"), "log": log}},
                                      trusted=declaration.trusted)
        return cls(declaration=declaration, lock_path=target, previous=lock,
                   ledger_path=Path(ledger).expanduser() if ledger else None,
                   record=bool(record_value), require_endpoint=bool(require))


@dataclass
class PinReport:
    """The pinned identity, where it was recorded, and how it differs from the lock it replaced."""

    identity: Identity
    lock_path: Path | None
    record_id: str | None
    diff: DiffReport | None  # against the previous lock, when there was one
    # the identity this pin replaced in the lock, when it differs, with the probe records that count for it
    superseded: SupersededLicences | None = None

    def to_json(self) -> dict[str, Any]:
        """The documented ``pin --json``: the lock itself."""
        return self.identity.to_json()


@dataclass(frozen=True)
class SupersededLicences:
    """A new identity replaced the pinned one: the licences measured so far are the old one's, not this one's."""

    previous: str
    records: int
    axes: tuple[str, ...]

    def sentence(self) -> str:
        if not self.records:
            return f"this is a new identity (the lock held {self.previous[:12]}…); it is unlicensed until probed"
        plural = "s" if self.records != 1 else ""
        return (f"{self.records} probe record{plural} ({', '.join(self.axes)}) belong to {self.previous[:12]}…; "
                "this identity is unlicensed until probed")


def superseded_licences(ledger: Any, previous_id: str | None, new_id: str) -> SupersededLicences | None:
    """What a new identity leaves behind: None when the lock held no identity, or the same one."""
    if not previous_id or previous_id == new_id:
        return None
    from execsys.scope import compute_scope

    measured = compute_scope(ledger, previous_id).measured
    return SupersededLicences(previous_id, sum(len(m.records) for m in measured.values()), tuple(measured))


def _pinned_id(lock_path: Path) -> str | None:
    """The id of the lock about to be replaced, read without judging it (a broken lock is simply replaced)."""
    from execsys.fsutil import read_json_object

    lock = read_json_object(lock_path, "the lock")
    value = lock.get("id") if lock is not None else None
    return value if isinstance(value, str) and value else None


def run_pin(options: PinOptions, on_event: OnEvent | None = None, cancel: Cancel | None = None) -> PinReport:
    """Observe, then append to the ledger, then replace the lock: a ledger that cannot take the record
    leaves the old lock untouched; a cancel before the end writes nothing."""
    from execsys.fsutil import check_output, prepare_output
    from execsys.ledger import Ledger

    if options.record:  # fail before minutes of hashing, and before the ledger row (--out /dev/null)
        check_output(options.lock_path, "the lock")
    ledger = Ledger.open(options.ledger_path) if options.record else None
    superseded = None
    try:
        identity = pin(options.declaration, on_event=on_event, cancel=cancel,
                       exclude=[options.lock_path.resolve()], require_endpoint=options.require_endpoint)
        record_id = None
        if ledger is not None:
            _check_cancel(cancel)
            previous_id = options.previous.id if options.previous is not None else _pinned_id(options.lock_path)
            # the lock's bytes are on disk beside it before the row is appended, renamed over it after:
            # a lock that cannot be written leaves no row, a row that cannot be appended no new lock
            with prepare_output(options.lock_path, scrub(identity.to_json()), "the lock") as lock:
                record_id = record_identity(identity, ledger)
                lock.commit()
            emit(on_event, IdentityRecorded(identity.id, record_id, str(options.lock_path)))
            superseded = superseded_licences(ledger, previous_id, identity.id)
    finally:
        if ledger is not None:
            ledger.close()
    diff = diff_identities(options.previous, identity) if options.previous is not None else None
    return PinReport(identity, options.lock_path if ledger is not None else None, record_id, diff, superseded)
