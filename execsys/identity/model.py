"""The identity itself: the schema names, the typed events of pin and verify, and :class:`Identity`,
which reads a lock or ledger record and refuses anything a reader would trip over later."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.errors import InputError
from execsys.operation import Event
from execsys.sources import LOCK_NAME

SCHEMA_VERSION = 2
SCHEMA = f"execsys.identity/{SCHEMA_VERSION}"
# every identity schema this execsys reads; ids of older ones are checked under their own rule
READABLE_SCHEMAS = {"execsys.identity/1": 1, SCHEMA: SCHEMA_VERSION}
VERIFY_SCHEMA = "execsys.verify/1"
DIFF_SCHEMA = "execsys.diff/1"
DEFAULT_LOCK = LOCK_NAME


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentObserved(Event):
    """One component's observation is done (``index`` of ``total``, counting from 1)."""

    name: str
    index: int
    total: int


@dataclass(frozen=True)
class ArtifactHashed(Event):
    """Hashing progress of the artifact (pin) or its re-hash (verify), in bytes."""

    done_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class IdentityRecorded(Event):
    """The identity is in the ledger and the lock is written."""

    identity_id: str
    record_id: str
    lock_path: str


@dataclass(frozen=True)
class ComponentChecked(Event):
    """Verify compared one component: ``status`` is same, changed or unverifiable."""

    name: str
    status: str
    changes: int
    reason: str | None


# -- the identity ---------------------------------------------------------------------------------


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
    observer: dict[str, Any] = field(default_factory=dict)  # who pinned it: outside the id, never compared
    live: dict[str, Any] = field(default_factory=dict)  # the engine's volatile state when pinned: outside the id

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "id": self.id,
            "recorded_at": self.recorded_at,
            "summary": self.summary,
            "declaration": self.declaration,
            "components": self.components,
            "notes": self.notes,
            "observer": self.observer,
            "live": self.live,
        }

    @property
    def schema_version(self) -> int:
        return READABLE_SCHEMAS.get(self.schema, 0)

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
        if isinstance(engine, dict) and engine.get("name"):
            parts.append(f"{engine['name']} {engine.get('version') or '?'}")
        host = hardware.get("hostname") or "?"
        first = gpus[0] if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) else None
        parts.append(f"{host} {len(gpus)}x {first.get('name')}" if first else f"{host} no GPU")
        return "; ".join(parts)

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> Identity:
        """Read a lock or ledger record; anything a reader would trip over later is refused here, naming it."""
        if not isinstance(data, dict):
            raise InputError(f"{where}: not an execsys identity (expected a JSON object)")
        schema = data.get("schema")
        if schema not in READABLE_SCHEMAS:
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
        _check_inner_types(components, data, where)
        return cls(id=expected, recorded_at=str(data.get("recorded_at") or ""), components=components,
                   declaration=data.get("declaration") or {}, notes=list(data.get("notes") or []),
                   schema=str(schema), source=where, observer=data.get("observer") or {},
                   live=data["live"] if isinstance(data.get("live"), dict) else {})

    def observed(self, component: str) -> dict[str, Any]:
        return self.components.get(component, {}).get("observed", {})

    def declared(self, component: str) -> dict[str, Any]:
        return self.components.get(component, {}).get("declared", {})


# observed fields that pin/verify/probes read back as values (not only compare): their types must hold
_OBSERVED_TYPES: dict[tuple[str, str], tuple[type, ...]] = {
    ("artifact", "path"): (str,), ("artifact", "digest"): (str,), ("artifact", "kind"): (str,),
    ("artifact", "size_bytes"): (int,), ("runtime", "engine"): (dict,), ("runtime", "endpoint"): (dict,),
    ("hardware", "hostname"): (str,), ("hardware", "gpus"): (list,), ("harness", "commands"): (list,),
}


def _check_inner_types(components: dict[str, Any], data: dict[str, Any], where: str) -> None:
    """A lock whose id was recomputed over wrongly typed fields is bad input (exit 2), never a crash later."""
    from execsys.declaration import SCHEMA as DECLARED_TYPES
    from execsys.declaration import _type_name, _type_ok

    for name in COMPONENTS:
        known = DECLARED_TYPES[name]
        for key, value in components[name]["declared"].items():
            if key in known and not _type_ok(value, known[key]):
                raise InputError(f"{where}: components.{name}.declared.{key} must be {_type_name(known[key])}, "
                                 f"not {type(value).__name__}")
    for (name, key), types in _OBSERVED_TYPES.items():
        value = components[name]["observed"].get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise InputError(f"{where}: components.{name}.observed.{key} must be a {types[0].__name__}, "
                             f"not {type(value).__name__}")
    for key, types in (("declaration", (dict,)), ("notes", (list,)), ("observer", (dict,)),
                       ("recorded_at", (str,))):
        value = data.get(key)
        if value is not None and not isinstance(value, types):
            raise InputError(f"{where}: '{key}' must be a {types[0].__name__}, not {type(value).__name__}")
    for key in ("path", "base_dir"):
        value = (data.get("declaration") or {}).get(key)
        if value is not None and not isinstance(value, str):
            raise InputError(f"{where}: declaration.{key} must be a string, not {type(value).__name__}")
