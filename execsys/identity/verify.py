"""The engine of ``verify``: re-observe the pinned system and say, component by component, whether
this is still the system that was pinned (``VerifyOptions.from_sources`` -> :func:`run_verify` ->
:class:`VerifyReport`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.declaration import Declaration
from execsys.errors import InputError
from execsys.identity.diff import field_changes, renamed
from execsys.identity.model import SCHEMA, SCHEMA_VERSION, VERIFY_SCHEMA, ComponentChecked, Identity
from execsys.identity.observe import _normalise, _observe_all, observe_observer, sanitize_declared
from execsys.operation import Cancel, OnEvent, emit
from execsys.sources import LOCK_NAME


@dataclass
class ComponentCheck:
    status: Literal["same", "changed", "unverifiable"]
    changes: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None
    # the artifact's model-signing bundle checked (execsys.observe.model_signature.SignatureCheck.to_json)
    signature: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        body = {"status": self.status, "changes": self.changes, "reason": self.reason}
        if self.signature is not None:
            body["signature"] = self.signature
        return body


def schema_outdated_sentence(identity: Identity) -> str:
    return (f"pinned with identity schema {identity.schema_version}; "
            f"re-pin to compare under schema {SCHEMA_VERSION}")


@dataclass
class VerifyReport:
    lock_id: str
    observed_id: str | None
    verdict: Literal["same-system", "new-identity"]
    components: dict[str, ComponentCheck]
    sentence: str
    observer: dict[str, Any] = field(default_factory=dict)  # who verifies now (never compared)
    pinned_observer: dict[str, Any] = field(default_factory=dict)  # who pinned (never compared)
    lock_schema: str = SCHEMA

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": VERIFY_SCHEMA,
            "lock_id": self.lock_id,
            "lock_schema": self.lock_schema,
            "observed_id": self.observed_id,
            "verdict": self.verdict,
            "sentence": self.sentence,
            "components": {name: check.to_json() for name, check in self.components.items()},
            "observer": self.observer,
            "pinned_observer": self.pinned_observer,
        }

    @property
    def schema_outdated(self) -> bool:
        return self.lock_schema != SCHEMA


def verify(identity: Identity, *, on_event: OnEvent | None = None, cancel: Cancel | None = None,
           declaration: Declaration | None = None, exclude: list[Path] | None = None) -> VerifyReport:
    """Re-observe the pinned system and compare component by component.

    The lock's own declarations drive the observation (the artifact path pinned is the one
    re-hashed); when ``declaration`` (the current ``execsys.toml``) is given, its tables are
    compared with the pinned ones too, so an edited declaration also counts as a move. A lock of an
    older identity schema is not compared at all: its id was defined over other fields, and
    listing every component as changed would be a false alarm.
    """
    observer = observe_observer()
    if identity.schema != SCHEMA:
        reason = f"pinned with identity schema {identity.schema_version}"
        checks = {name: ComponentCheck("unverifiable", [], reason) for name in COMPONENTS}
        return VerifyReport(identity.id, None, "new-identity", checks, schema_outdated_sentence(identity),
                            observer, identity.observer, identity.schema)
    base = Path(identity.declaration.get("base_dir") or Path.cwd())
    if exclude is None and identity.source and os.path.exists(identity.source):
        exclude = [Path(identity.source)]
    declared = {name: identity.declared(name) for name in COMPONENTS}
    reasons: dict[str, str] = {}
    checked: dict[str, Any] = {}
    # model-signing re-reads every file of a signed artifact (SHA-256) while the artifact is re-hashed
    # (BLAKE3) for the id: side by side, verify takes the longer of the two, not their sum
    signature_check = _SignatureCheckInBackground.start(declared["artifact"], base)
    fresh = _observe_all(declared, base, on_event=on_event, cancel=cancel, require_endpoint=False,
                         exclude=exclude, reasons=reasons, live=checked)
    fresh["runtime"].pop("engine_live", None)
    served = _served_defect(fresh["runtime"])
    signature = signature_check.result() if signature_check is not None and "artifact" not in reasons else None

    checks: dict[str, ComponentCheck] = {}
    for name in COMPONENTS:
        changes = component_changes(name, identity.components.get(name) or {}, fresh[name],
                                    declaration.component(name) if declaration is not None else None)
        if name in reasons:
            # keep only the fields that could be observed; the rest is unknown, not changed
            if name in ("artifact", "model"):
                changes = [c for c in changes if c["field"].startswith("declared.")]
            elif name == "runtime":
                changes = [c for c in changes if not c["field"].startswith("observed.endpoint.")]
            elif name == "grader":
                changes = [c for c in changes if not c["field"].startswith("observed.judge.")]
            elif name == "tools":
                changes = [c for c in changes if not c["field"].startswith(("observed.servers", "observed.unreachable"))]
            checks[name] = ComponentCheck("unverifiable", changes, reasons[name])
        elif name == "runtime" and served is not None:
            checks[name] = ComponentCheck("changed", changes, served)
        elif name == "artifact" and signature is not None and signature.failed:
            # whose signature covers these bytes is an integrity check: a file that is not the one signed,
            # or a key that is not the signer's, is a finding; a check that could not be made is unknown
            checks[name] = ComponentCheck("changed" if signature.checkable else "unverifiable", changes,
                                          signature.sentence())
        elif changes:
            checks[name] = ComponentCheck("changed", changes, _change_summary(name, changes, fresh[name], checked))
        else:
            checks[name] = ComponentCheck("same")
        if name == "artifact" and signature is not None:
            checks[name].signature = signature.to_json()
        emit(on_event, ComponentChecked(name, checks[name].status, len(checks[name].changes), checks[name].reason))

    observed_id = None
    if not reasons:
        fresh_components = {name: {"declared": identity.declared(name), "observed": fresh[name]} for name in COMPONENTS}
        observed_id = content_id(fresh_components)
    changed = [n for n, c in checks.items() if c.status == "changed"]
    unverifiable = [n for n, c in checks.items() if c.status == "unverifiable"]
    if not changed and not unverifiable:
        verdict = "same-system"
        sentence = f"all twelve components match identity {identity.id[:12]}"
    else:
        verdict = "new-identity"
        parts = []
        if changed:
            parts.append(f"{len(changed)} changed ({', '.join(changed)})")
        if unverifiable:
            parts.append(f"{len(unverifiable)} unverifiable ({', '.join(unverifiable)})")
        if served is not None:
            parts.append(served)
        if signature is not None and signature.failed:
            parts.append(signature.sentence())
        sentence = (f"{'; '.join(parts)} since {identity.id[:12]} was pinned; "
                    "re-measure before comparing results across this change")
    return VerifyReport(identity.id, observed_id, verdict, checks, sentence, observer, identity.observer,
                        identity.schema)


def component_changes(name: str, pinned: dict[str, Any], observed: dict[str, Any],
                      declared: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """What moved in one component: its fresh observation against the pinned one (``observed.<path>``)
    and, when the current declaration's table is given, that against the pinned declaration
    (``declared.<path>``). The one comparison verify and the grader probe's system check make."""
    changes = [renamed(c, f"observed.{c['field']}") for c in field_changes(pinned.get("observed") or {}, observed)]
    if declared is not None:
        now_declared = _normalise(sanitize_declared(name, declared))
        changes += [renamed(c, f"declared.{c['field']}")
                    for c in field_changes(pinned.get("declared") or {}, now_declared)]
    return changes


class _SignatureCheckInBackground:
    """model-signing's verdict on the artifact's bundle, computed on a daemon thread (a cancelled verify
    never waits for it: model-signing's hashing cannot be interrupted)."""

    def __init__(self, artifact: Path, observed: dict[str, Any]) -> None:
        import threading

        self._answer: list[Any] = []
        self._thread = threading.Thread(target=self._check, args=(artifact, observed), daemon=True,
                                        name="execsys-model-signing")
        self._thread.start()

    @classmethod
    def start(cls, declared_artifact: dict[str, Any], base: Path) -> _SignatureCheckInBackground | None:
        """None when the artifact ships no model.sig and no signature_key is declared (nothing to check)."""
        if not declared_artifact.get("path"):
            return None
        from execsys.observe.artifact import resolve
        from execsys.observe.model_signature import observe_signature

        artifact = resolve(str(declared_artifact["path"]), base)
        observed = observe_signature(artifact, declared_artifact, base)
        return cls(artifact, observed) if observed is not None else None

    def _check(self, artifact: Path, observed: dict[str, Any]) -> None:
        from execsys.observe.model_signature import NOT_VERIFIED, SignatureCheck, check_signature

        try:
            self._answer.append(check_signature(artifact, observed))
        except Exception as exc:  # noqa: BLE001 - a crash in the check is its answer, never verify's
            self._answer.append(SignatureCheck(NOT_VERIFIED, str(observed.get("signed_by") or "?"),
                                               int(observed.get("files") or 0),
                                               f"the check failed ({type(exc).__name__}: {exc})", checkable=False))

    def result(self) -> Any:
        self._thread.join()
        return self._answer[0]


def _served_defect(runtime_observed: dict[str, Any]) -> str | None:
    """The served-artifact sentence when the engine serves another artifact than the pinned one."""
    from execsys.observe.served import ANOTHER

    served = runtime_observed.get("served") or {}
    return str(served["sentence"]) if served.get("verdict") == ANOTHER else None


def _change_summary(component: str, changes: list[dict[str, Any]], observed: dict[str, Any],
                    live: dict[str, Any] | None = None) -> str | None:
    """What moved, in words, for the components whose field paths say little alone
    (``grader: changed (judge model A → B)``, ``tools: changed (tool search: description)``,
    ``environment: changed ([environment] variables A: checked in pid 7, the serving process)``)."""
    if component == "environment":
        moved = sorted({str(c["field"]).split(".")[2] for c in changes
                        if str(c["field"]).startswith("observed.variables.") and str(c["field"]).count(".") >= 2})
        if moved:
            from execsys.observe.environment import OWN_ENVIRONMENT

            where = ((live or {}).get("variables_checked") or {}).get("where") or OWN_ENVIRONMENT
            return f"[environment] variables {', '.join(moved)}: {where}"
        return None
    if component == "grader":
        from execsys.observe.grader import change_summary

        return change_summary(changes)
    if component == "tools":
        from execsys.observe.tools import change_summary as tools_summary

        return tools_summary(changes, observed)
    return None


@dataclass(frozen=True)
class VerifyOptions:
    """Which lock ``verify`` checks, and which current declaration (if any) it compares with the pinned one."""

    lock: Identity
    declaration: Declaration | None = None

    @classmethod
    def from_sources(cls, declaration: Declaration | None, lock: Identity | None, *,
                     lock_path: str | os.PathLike[str] | None = None) -> VerifyOptions:
        """``declaration``: the one named (``--config``), else None to use the pinned one if it still exists."""
        if lock is None:
            where = lock_path if lock_path is not None else LOCK_NAME
            raise InputError(f"{where}: no such lock file (create one with 'execsys pin')")
        if declaration is None:
            pinned = lock.declaration.get("path")
            if pinned and Path(pinned).is_file():
                from execsys import declaration as declaration_module

                declaration = declaration_module.load(pinned)
        return cls(lock=lock, declaration=declaration)


def run_verify(options: VerifyOptions, on_event: OnEvent | None = None, cancel: Cancel | None = None) -> VerifyReport:
    """Re-observe the pinned system (the artifact re-hashed from its bytes) and compare."""
    return verify(options.lock, on_event=on_event, cancel=cancel, declaration=options.declaration)
