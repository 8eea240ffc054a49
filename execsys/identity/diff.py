"""Comparing two identities: which components moved, field by field, and the sentence a report
comparing their results must carry."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from execsys import COMPONENTS
from execsys.identity.model import DIFF_SCHEMA, Identity


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
class DiffReport:
    a: Identity
    b: Identity
    moved: list[str]
    changes: dict[str, list[dict[str, Any]]]
    sentence: str

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": DIFF_SCHEMA,
            "a": {"id": self.a.id, "recorded_at": self.a.recorded_at, "source": self.a.source, "schema": self.a.schema},
            "b": {"id": self.b.id, "recorded_at": self.b.recorded_at, "source": self.b.source, "schema": self.b.schema},
            "moved": self.moved,
            "changes": self.changes,
            "sentence": self.sentence,
        }

    @property
    def schema_note(self) -> str | None:
        """Identities of two schemas hold different fields: what moved may be the definition, not the system."""
        if self.a.schema == self.b.schema:
            return None
        return (f"A was pinned with identity schema {self.a.schema_version}, B with schema "
                f"{self.b.schema_version}: fields that moved may reflect the schema, not the system; re-pin both")


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
