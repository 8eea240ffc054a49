"""Comparing two identities: which components moved, field by field, and the sentence a report
comparing their results must carry."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from execsys import COMPONENTS
from execsys.delta import ARROW, value_change
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


class FieldChange(dict):  # type: ignore[type-arg]
    """One field that moved, as records hold it: ``{"field", "old", "new"}``. ``absent`` ("old" or
    "new") says which side did not have the field at all -- JSON's ``null`` cannot tell a key gained
    from a value that became null, and the rendering must (``+key: value``). It is never serialized."""

    absent: str | None = None


def field_changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    a, b = flatten(old), flatten(new)
    changes: list[dict[str, Any]] = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            change = FieldChange(field=key, old=a.get(key), new=b.get(key))
            change.absent = "old" if key not in a else "new" if key not in b else None
            changes.append(change)
    return changes


def renamed(change: dict[str, Any], field: str) -> dict[str, Any]:
    """``change`` under another field path (``observed.<path>``), still knowing which side was absent."""
    out = FieldChange(change, field=field)
    out.absent = getattr(change, "absent", None)
    return out


_MISSING = object()


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _render_value(value: Any) -> str:
    if _is_digest(value):
        return value[:16] + "…"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def describe_change(change: dict[str, Any], *, arrow: str = ARROW, under: str = "") -> str:
    """One field's change in one line, showing only what moved: ``argv: --n_threads 2 → 1``,
    ``+variables.B: 2`` (a key gained), ``-seed: 7`` (a key lost), ``env: A: 1 → 2``; ``arrow="->"``
    where the words go into a record; ``under`` goes before the field's path (``budget.``)."""
    field, old, new = under + str(change["field"]), change["old"], change["new"]
    absent = getattr(change, "absent", None)
    if absent == "old":
        return f"+{field}: {_render_value(new)}"
    if absent == "new":
        return f"-{field}: {_render_value(old)}"
    if _is_digest(old) or _is_digest(new):
        return f"{field}: {_render_value(old)} {arrow} {_render_value(new)}"
    return f"{field}: {value_change(old, new, render=_render_value, arrow=arrow)}"


def describe_changes(changes: list[dict[str, Any]], *, arrow: str = ARROW, under: str = "") -> list[str]:
    """Each change in one line (:func:`describe_change`), leaving out an empty table that gained or lost
    its keys (``{} → null`` beside them): the keys' own lines say what moved."""
    fields = [str(c["field"]) for c in changes]

    def parent_of_others(change: dict[str, Any]) -> bool:
        field = str(change["field"])
        emptied = {} in (change["old"], change["new"]) and None in (change["old"], change["new"])
        return emptied and any(f.startswith((field + ".", field + "[")) for f in fields)

    return [describe_change(c, arrow=arrow, under=under) for c in changes if not parent_of_others(c)]


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
