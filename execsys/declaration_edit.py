"""Edit ``execsys.toml`` in place: change only the keys that changed, keep everything else.

The declaration is a file people write and comment (``execsys init`` writes eighty commented
lines). A face that edits it (the TUI's Identity form) must not turn it into twelve bare tables:
comments, key order, blank lines, tables the form does not show (``[doctor]``, ``[probe]``...)
and keys execsys does not know (a newer version's, or a typo the loader warns about) all stay.
tomlkit keeps the document's formatting; this module decides which keys the form owns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.items import Table

from execsys.declaration import SCHEMA


def _plain(value: Any) -> Any:
    """A tomlkit item as the plain Python value it stands for (to compare with the form's)."""
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def edit_declaration_text(original: str, tables: Mapping[str, Mapping[str, Any]]) -> str:
    """``original`` with each given table's known keys set to ``tables`` (absent = not declared).

    For every table named in ``tables``: a known key (one in the declaration SCHEMA) that is
    missing from the given table is removed, one whose value differs is replaced, one that is
    equal is left byte for byte as it was. Unknown keys, comments and other tables are untouched.
    A table that does not exist yet is appended, in the declaration's table order.
    """
    document = tomlkit.parse(original)
    for name, values in tables.items():
        known = SCHEMA.get(name, {})
        existing = document.get(name)
        if not isinstance(existing, Table):
            if not values:
                continue
            table = tomlkit.table()
            for key, value in values.items():
                table.add(key, value)
            document.add(name, table)
            continue
        for key in list(existing.keys()):
            if key in known and values.get(key) is None:
                del existing[key]
        for key, value in values.items():
            if value is None:
                continue
            if key in existing and _plain(existing[key]) == value:
                continue
            existing[key] = value
    return tomlkit.dumps(document)
