"""The pinned identity of an execution system: twelve components, each declared and observed.

``pin`` records, before a run, what the operator declared (``execsys.toml``) beside
what this machine shows (artifact bytes, engine, hardware, git, environment). The
identity ``id`` is the BLAKE3 of the canonical JSON of the components -- no
timestamps, nothing volatile -- so the same system always gets the same id and any
moved component gives a new one. ``verify`` re-observes everything (the artifact
digest always from the bytes) and says, component by component, whether this is
still the system that was pinned; ``diff_identities`` says which components moved
between two identities and therefore what a comparison of their results can claim.

This is the public API the probes, scope/plan and the TUI build on; the CLI
commands ``pin``, ``verify`` and ``diff`` only call it and render.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.declaration import Declaration
from execsys.errors import InputError
from execsys.redact import redact_argv, redact_env, redact_text, redact_url, scrub

SCHEMA = "execsys.identity/1"
VERIFY_SCHEMA = "execsys.verify/1"
DIFF_SCHEMA = "execsys.diff/1"
DEFAULT_LOCK = "execsys.lock.json"

ProgressFn = Callable[[int, int], None]


@dataclass
class Identity:
    """One pinned system. ``components[name] == {"declared": {...}, "observed": {...}}``."""

    id: str
    recorded_at: str
    components: dict[str, dict[str, Any]]
    declaration: dict[str, Any] = field(default_factory=dict)  # {"path": ..., "base_dir": ...}
    notes: list[str] = field(default_factory=list)
    schema: str = SCHEMA
    source: str | None = None  # where it was loaded from (lock path or ledger id); not serialised

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "id": self.id,
            "recorded_at": self.recorded_at,
            "summary": self.summary,
            "declaration": self.declaration,
            "components": self.components,
            "notes": self.notes,
        }

    @property
    def summary(self) -> str:
        """One line for listings: artifact, engine, host."""
        artifact = self.observed("artifact")
        engine = self.observed("runtime").get("engine") or {}
        hardware = self.observed("hardware")
        gpus = hardware.get("gpus") or []
        parts = []
        if artifact.get("digest"):
            parts.append(f"artifact {artifact['digest'][:12]} {artifact.get('format') or ''} "
                         f"{artifact.get('quantization') or ''}".strip())
        if engine.get("name"):
            parts.append(f"{engine['name']} {engine.get('version') or '?'}")
        host = hardware.get("hostname") or "?"
        parts.append(f"{host} {len(gpus)}x {gpus[0]['name']}" if gpus else f"{host} no GPU")
        return "; ".join(parts)

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> Identity:
        if not isinstance(data, dict):
            raise InputError(f"{where}: not an execsys identity (expected a JSON object)")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise InputError(f"{where}: identity schema {schema!r} is not understood (this execsys reads {SCHEMA}); "
                             "re-pin with 'execsys pin' or upgrade execsys")
        components = data.get("components")
        if not isinstance(components, dict) or set(components) != set(COMPONENTS):
            raise InputError(f"{where}: 'components' must hold exactly the twelve components ({', '.join(COMPONENTS)})")
        for name, value in components.items():
            if not isinstance(value, dict) or not isinstance(value.get("declared"), dict) \
                    or not isinstance(value.get("observed"), dict):
                raise InputError(f"{where}: component '{name}' must be {{\"declared\": {{...}}, \"observed\": {{...}}}}")
        expected = content_id(components)
        if data.get("id") != expected:
            raise InputError(f"{where}: the id does not match the components it claims to identify "
                             "(edited by hand?); re-pin with 'execsys pin'")
        return cls(id=expected, recorded_at=str(data.get("recorded_at") or ""), components=components,
                   declaration=data.get("declaration") or {}, notes=list(data.get("notes") or []), source=where)

    def observed(self, component: str) -> dict[str, Any]:
        return self.components.get(component, {}).get("observed", {})

    def declared(self, component: str) -> dict[str, Any]:
        return self.components.get(component, {}).get("declared", {})


# -- observing ---------------------------------------------------------------------------------


def sanitize_declared(name: str, table: dict[str, Any]) -> dict[str, Any]:
    """A declared table as it may be recorded: credentials out of URLs, argv and variables."""
    clean = dict(table)
    if name == "runtime":
        if isinstance(clean.get("endpoint"), str):
            clean["endpoint"] = redact_url(clean["endpoint"])
        if isinstance(clean.get("flags"), list):
            clean["flags"] = redact_argv([str(f) for f in clean["flags"]])
        for key in ("restart", "ready"):
            if isinstance(clean.get(key), str):
                clean[key] = redact_text(clean[key])
    if name == "environment" and isinstance(clean.get("variables"), dict):
        clean["variables"] = redact_env({str(k): str(v) for k, v in clean["variables"].items()})
    if name == "harness" and isinstance(clean.get("repo"), str):
        from execsys.observe.harness import strip_credentials

        clean["repo"] = strip_credentials(clean["repo"])
    return scrub(clean)


def _normalise(obj: Any) -> Any:
    """Scrubbed and JSON-round-tripped, so the id computed now equals the id recomputed from the lock."""
    return json.loads(json.dumps(scrub(obj), ensure_ascii=False, allow_nan=False))


def _base_dir(decl: Declaration) -> Path:
    return Path(os.path.abspath(decl.path)).parent if decl.path else Path.cwd()


def _path_digest(path_text: str, base_dir: Path) -> dict[str, Any]:
    from execsys.digest import digest_path
    from execsys.observe.artifact import resolve

    path = resolve(path_text, base_dir)
    if not path.exists():
        return {"path": str(path), "digest": None, "note": "not found on this machine"}
    result = digest_path(path)
    return {"path": str(path), "kind": result.kind, "digest": result.digest, "files": result.files}


def observe_components(decl: Declaration, *, progress: ProgressFn | None = None,
                       require_endpoint: bool = True, exclude: list[Path] | None = None,
                       base_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """Declared and observed facts for all twelve components (redacted, JSON-ready).

    Raises InputError for what makes the identity unusable: a declared artifact that is
    missing or unreadable, or (with ``require_endpoint``) a declared endpoint that does not answer.
    """
    from execsys.observe.artifact import observe_artifact
    from execsys.observe.environment import observe_environment
    from execsys.observe.hardware import observe_hardware
    from execsys.observe.harness import observe_harness
    from execsys.observe.runtime import observe_runtime

    base = base_dir or _base_dir(decl)
    declared = {name: decl.component(name) for name in COMPONENTS}
    observed: dict[str, dict[str, Any]] = {name: {} for name in COMPONENTS}

    # the runtime first: an endpoint that does not answer fails before minutes of hashing
    observed["runtime"] = observe_runtime(declared["runtime"], require_endpoint=require_endpoint)
    observed["artifact"], model_facts = observe_artifact(declared["artifact"], base_dir=base, progress=progress)
    if model_facts:
        observed["model"]["from_files"] = model_facts
    observed["hardware"] = observe_hardware(declared["hardware"])
    observed["harness"] = observe_harness(declared["harness"], base_dir=base, exclude=exclude)
    observed["environment"] = observe_environment(declared["environment"])
    if declared["context_policy"].get("template"):
        observed["context_policy"]["template"] = _path_digest(declared["context_policy"]["template"], base)
    for key in ("index", "corpus"):
        if declared["retrieval"].get(key):
            observed["retrieval"][key] = _path_digest(declared["retrieval"][key], base)
    return _normalise({name: {"declared": sanitize_declared(name, declared[name]), "observed": observed[name]}
                       for name in COMPONENTS})


def _notes(decl: Declaration, components: dict[str, dict[str, Any]]) -> list[str]:
    notes = list(decl.warnings)
    artifact = components["artifact"]["observed"]
    if artifact.get("quantization_matches_declared") is False:
        notes.append(f"declared quantization {components['artifact']['declared'].get('quantization')!r} but the files "
                     f"say {artifact.get('quantization')!r} ({artifact.get('quantization_source')})")
    missing = components["environment"]["observed"].get("variables_not_holding") or []
    if missing:
        notes.append(f"declared environment variables that do not hold here: {', '.join(missing)}")
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


def pin(decl: Declaration, *, progress: ProgressFn | None = None, exclude: list[Path] | None = None) -> Identity:
    """Observe the declared system and return its identity (not yet written anywhere)."""
    from execsys.ledger import now_iso

    components = observe_components(decl, progress=progress, require_endpoint=True, exclude=exclude)
    declaration = {"path": os.path.abspath(decl.path) if decl.path else None, "base_dir": str(_base_dir(decl))}
    return Identity(id=content_id(components), recorded_at=now_iso(), components=components,
                    declaration=declaration, notes=_normalise(_notes(decl, components)))


def write_lock(identity: Identity, path: str | os.PathLike[str]) -> Path:
    """Write the lock atomically (temp file + rename), scrubbed."""
    from execsys.fsutil import write_output

    return write_output(path, scrub(identity.to_json()), "the lock")


def record_identity(identity: Identity, ledger: Any) -> str:
    """Append the identity to the ledger (kind ``identity``); returns the record id."""
    return ledger.append("identity", identity.to_json(), identity=identity.id)


def load_lock(path: str | os.PathLike[str]) -> Identity:
    from execsys.fsutil import LOCK_LIMIT, read_bounded

    where = os.fspath(path)
    try:
        text = read_bounded(path, LOCK_LIMIT, "lock").decode("utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"{where}: no such lock file (create one with 'execsys pin')") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read ({getattr(exc, 'strerror', None) or exc})") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where}: not valid JSON ({exc})") from exc
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to be a lock") from None
    return Identity.from_json(data, where=where)


def load_identity_ref(ref: str, ledger: Any = None) -> Identity:
    """A lock file path, a ledger record id (or unique prefix), or an identity id prefix."""
    if os.path.exists(ref) or ref.endswith(".json"):
        return load_lock(ref)
    from execsys.ledger import Ledger

    own = ledger is None
    ledger = ledger or Ledger.open()
    try:
        try:
            record = ledger.get(ref)
        except InputError:
            matches: dict[str, Any] = {}
            for r in ledger.iter(kind="identity", newest_first=True):
                if r.identity and ref and r.identity.startswith(ref):
                    matches.setdefault(r.identity, r)  # the newest record of each identity
            if len(matches) > 1:
                shown = ", ".join(sorted(i[:12] for i in matches)[:4])
                raise InputError(f"identity prefix '{ref}' is ambiguous in the ledger ({shown}"
                                 f"{', ...' if len(matches) > 4 else ''}): give more characters") from None
            record = next(iter(matches.values()), None)
            if record is None:
                raise InputError(f"'{ref}' is neither a lock file nor an identity in the ledger {ledger.path} "
                                 "(see 'execsys ledger list --kind identity')") from None
        if record.kind != "identity":
            raise InputError(f"ledger record {record.id} is a {record.kind} record, not an identity")
        return Identity.from_json(record.body, where=f"ledger record {record.id}")
    finally:
        if own:
            ledger.close()


# -- comparing ------------------------------------------------------------------------------------


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaf values; lists of tables are indexed (``gpus[0].uuid``), other lists are leaves."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            out[prefix] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(obj, list) and obj and all(isinstance(item, dict) for item in obj):
        for index, item in enumerate(obj):
            out.update(flatten(item, f"{prefix}[{index}]"))
        out[f"{prefix}.length"] = len(obj)
    else:
        out[prefix] = obj
    return out


def field_changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    a, b = flatten(old), flatten(new)
    changes = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            changes.append({"field": key, "old": a.get(key), "new": b.get(key)})
    return changes


_MISSING = object()


def _render_value(value: Any) -> str:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:16] + "…"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def describe_change(change: dict[str, Any]) -> str:
    return f"{change['field']}: {_render_value(change['old'])} -> {_render_value(change['new'])}"


@dataclass
class ComponentCheck:
    status: str  # same | changed | unverifiable
    changes: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "changes": self.changes, "reason": self.reason}


@dataclass
class VerifyReport:
    lock_id: str
    observed_id: str | None
    verdict: str  # same-system | new-identity
    components: dict[str, ComponentCheck]
    sentence: str

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": VERIFY_SCHEMA,
            "lock_id": self.lock_id,
            "observed_id": self.observed_id,
            "verdict": self.verdict,
            "sentence": self.sentence,
            "components": {name: check.to_json() for name, check in self.components.items()},
        }


def verify(identity: Identity, *, progress: ProgressFn | None = None, declaration: Declaration | None = None,
           exclude: list[Path] | None = None) -> VerifyReport:
    """Re-observe the pinned system and compare component by component.

    The lock's own declarations drive the observation (the artifact path pinned is the one
    re-hashed); when ``declaration`` (the current ``execsys.toml``) is given, its tables are
    compared with the pinned ones too, so an edited declaration also counts as a move.
    """
    from execsys.observe.artifact import observe_artifact
    from execsys.observe.environment import observe_environment
    from execsys.observe.hardware import observe_hardware
    from execsys.observe.harness import observe_harness
    from execsys.observe.runtime import observe_runtime

    base = Path(identity.declaration.get("base_dir") or Path.cwd())
    if exclude is None and identity.source and os.path.exists(identity.source):
        exclude = [Path(identity.source)]
    declared = {name: identity.declared(name) for name in COMPONENTS}
    fresh: dict[str, dict[str, Any]] = {name: {} for name in COMPONENTS}
    reasons: dict[str, str] = {}

    try:
        fresh["artifact"], model_facts = observe_artifact(declared["artifact"], base_dir=base, progress=progress)
        if model_facts:
            fresh["model"]["from_files"] = model_facts
    except InputError as exc:
        reasons["artifact"] = f"cannot re-hash the artifact: {exc}"
        reasons["model"] = "the artifact's files cannot be read"
    fresh["runtime"] = observe_runtime(declared["runtime"], require_endpoint=False)
    endpoint_error = (fresh["runtime"].get("endpoint") or {}).get("error")
    if endpoint_error:
        reasons["runtime"] = endpoint_error
    fresh["hardware"] = observe_hardware(declared["hardware"])
    fresh["harness"] = observe_harness(declared["harness"], base_dir=base, exclude=exclude)
    fresh["environment"] = observe_environment(declared["environment"])
    for key_component, key in (("context_policy", "template"), ("retrieval", "index"), ("retrieval", "corpus")):
        if declared[key_component].get(key):
            try:
                target = fresh[key_component]
                target[key] = _path_digest(declared[key_component][key], base)
            except InputError as exc:
                reasons[key_component] = str(exc)
    fresh = _normalise(fresh)

    checks: dict[str, ComponentCheck] = {}
    for name in COMPONENTS:
        changes = [dict(c, field=f"observed.{c['field']}") for c in field_changes(identity.observed(name), fresh[name])]
        if declaration is not None:
            now_declared = _normalise(sanitize_declared(name, declaration.component(name)))
            changes += [dict(c, field=f"declared.{c['field']}")
                        for c in field_changes(identity.declared(name), now_declared)]
        if name in reasons:
            # keep only the fields that could be observed; the rest is unknown, not changed
            if name in ("artifact", "model"):
                changes = [c for c in changes if c["field"].startswith("declared.")]
            elif name == "runtime":
                changes = [c for c in changes if not c["field"].startswith("observed.endpoint.")]
            checks[name] = ComponentCheck("unverifiable", changes, reasons[name])
        elif changes:
            checks[name] = ComponentCheck("changed", changes)
        else:
            checks[name] = ComponentCheck("same")

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
        sentence = (f"{'; '.join(parts)} since {identity.id[:12]} was pinned; "
                    "re-measure before comparing results across this change")
    return VerifyReport(identity.id, observed_id, verdict, checks, sentence)


@dataclass
class DiffReport:
    a: Identity
    b: Identity
    moved: list[str]
    changes: dict[str, list[dict[str, Any]]]
    sentence: str

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": DIFF_SCHEMA,
            "a": {"id": self.a.id, "recorded_at": self.a.recorded_at, "source": self.a.source},
            "b": {"id": self.b.id, "recorded_at": self.b.recorded_at, "source": self.b.source},
            "moved": self.moved,
            "changes": self.changes,
            "sentence": self.sentence,
        }


def diff_sentence(moved: list[str]) -> str:
    """The sentence a report comparing results from the two identities must carry."""
    if not moved:
        return "same system: no component moved"
    if len(moved) == 1:
        return f"isolates {moved[0]}"
    return f"descriptive only: {len(moved)} components moved ({', '.join(moved)})"


def diff_identities(a: Identity, b: Identity) -> DiffReport:
    changes: dict[str, list[dict[str, Any]]] = {}
    for name in COMPONENTS:
        found = field_changes(a.components.get(name, {}), b.components.get(name, {}))
        if found:
            changes[name] = found
    moved = [name for name in COMPONENTS if name in changes]
    return DiffReport(a, b, moved, changes, diff_sentence(moved))


# re-exported for callers that re-observe one component (the probes' restart axis)
def observe_runtime(declared_runtime: dict[str, Any], *, require_endpoint: bool = True) -> dict[str, Any]:
    """Re-observe the runtime component alone, redacted (see :mod:`execsys.observe.runtime`)."""
    from execsys.observe import runtime

    return _normalise(runtime.observe_runtime(declared_runtime, require_endpoint=require_endpoint))
