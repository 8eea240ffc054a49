"""Show a declared value in one text field and read it back: strings as typed, the rest as TOML.

A form field holds text; the declaration holds typed TOML values. Lists and tables are edited
as TOML inline values (``["a", "b"]``, ``{ KEY = "v" }``), and read back by the same TOML parser
the declaration loader uses, so what the form saves is exactly what ``execsys.toml`` would say.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # pyright: ignore[reportMissingImports]  (Python 3.10 only)

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def to_field(value: Any) -> str:
    """The text a form field shows for a declared value (empty when not declared)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return toml_inline(value)


def toml_inline(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_inline(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_key(k)} = {toml_inline(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    return json.dumps(str(value), ensure_ascii=False)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def from_field(text: str, expected: Any) -> Any:
    """Parse a field's text for a key of type ``expected`` (a SCHEMA entry); '' means not declared.

    Raises ValueError naming what was expected when the text is not such a value.
    """
    text = text.strip()
    if not text:
        return None
    if expected is str:
        return text
    if expected == (int, str):  # e.g. a reasoning budget: a number or a word
        try:
            return int(text)
        except ValueError:
            return text
    expected_words = {bool: "must be true or false", int: "must be an integer", list: 'must be a list, e.g. ["a", "b"]',
                      dict: 'must be a table, e.g. { KEY = "value" }'}
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError as exc:
        words = expected_words.get(expected, "must be a number" if expected == (int, float) else "must be a TOML value")
        raise ValueError(f"{words} ({exc})") from None
    if expected is bool and not isinstance(value, bool):
        raise ValueError("must be true or false")
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError("must be an integer")
    if expected == (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError("must be a number")
    if expected is list and not isinstance(value, list):
        raise ValueError('must be a list, e.g. ["a", "b"]')
    if expected is dict and not isinstance(value, dict):
        raise ValueError('must be a table, e.g. { KEY = "value" }')
    return value


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested observations as ``(dotted.key, text)`` lines, for a read-only view."""
    if isinstance(value, dict):
        lines: list[tuple[str, str]] = []
        for key, item in value.items():
            lines.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return lines or [(prefix, "{}")] if prefix else lines
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        lines = []
        for index, item in enumerate(value):
            lines.extend(flatten(item, f"{prefix}[{index}]"))
        return lines
    return [(prefix, value if isinstance(value, str) else toml_inline(value))]


def declaration_text(tables: dict[str, dict[str, Any]]) -> str:
    """``execsys.toml`` text for declaration tables, in the declaration's own table order."""
    from execsys.declaration import SCHEMA

    lines = ["# execsys.toml: the declared execution system (written by execsys tui)", ""]
    for name in SCHEMA:
        table = tables.get(name)
        if not table:
            continue
        lines.append(f"[{name}]")
        for key, value in table.items():
            lines.append(f"{_key(key)} = {toml_inline(value)}")
        lines.append("")
    return "\n".join(lines)
