"""The run declaration, ``execsys.toml``: what the operator says the system is.

One table per execution-system component plus a few tables for the tools
themselves (``doctor``, ``probe``, ``placement``). Loading checks the types of
known keys (a wrong type is an error naming the key) and warns about unknown
keys with their line, so a typo cannot silently drop a declared fact.

Values end up in canonical JSON (the identity id), so what JSON cannot say
exactly is refused with the key named: ``nan``/``inf`` and TOML dates and times
(quote them as strings). Nesting deeper than :data:`MAX_DEPTH` is refused too,
and a file is read through :func:`execsys.fsutil.read_bounded` (a regular file of
at most a few MiB). A UTF-8 byte-order mark at the start is accepted.

A loaded file that declares commands (layers, restart, a grader command...) carries whether the
user trusted its bytes (:mod:`execsys.trust`); the operations refuse its commands until then.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from execsys import COMPONENTS
from execsys.errors import InputError

DEFAULT_NAME = "execsys.toml"
# No real declaration nests deeper than a few levels; this keeps every later walk of it (canonical
# JSON, redaction) far from Python's recursion limit.
MAX_DEPTH = 32

STR, INT, FLOAT, BOOL, LIST, TABLE = str, int, (int, float), bool, list, dict

# Known keys and their types; every component also takes a free-text ``notes``.
SCHEMA: dict[str, dict[str, Any]] = {
    "model": {"name": STR, "revision": STR, "source": STR, "family": STR},
    # signature_key: the public key or certificate chain (PEM) that checks the artifact's model-signing
    # bundle, model.sig (execsys.observe.model_signature)
    "artifact": {"path": STR, "quantization": STR, "adapter": STR, "format": STR, "digest": STR,
                 "signature_key": STR},
    "runtime": {
        "engine": STR, "version": STR, "endpoint": STR, "restart": STR, "ready": STR,
        "ready_timeout": FLOAT, "env_file": STR, "api_key_env": STR, "process": STR, "flags": LIST,
        "log": STR,
    },
    "hardware": {"host": STR, "gpu": STR, "gpu_count": INT, "accelerator": STR},
    "harness": {"repo": STR, "commands": LIST, "version": STR, "name": STR},
    "context_policy": {"max_context": INT, "truncation": STR, "template": STR, "system_prompt": STR},
    "retrieval": {"enabled": BOOL, "index": STR, "top_k": INT, "embedder": STR, "corpus": STR},
    # mcp: [{name, command = [...]} | {name, url}] -- servers whose tool lists are observed
    "tools": {"enabled": LIST, "versions": TABLE, "mcp": LIST, "packages": LIST},
    "workflow": {"name": STR, "steps": LIST, "max_turns": INT, "packages": LIST, "config": LIST},
    "budget": {
        "temperature": FLOAT, "top_p": FLOAT, "top_k": INT, "seed": INT, "max_tokens": INT,
        "reasoning_budget": (int, str), "repeat_penalty": FLOAT, "stop": LIST,
    },
    # judge: [grader.judge] endpoint, model, api_key_env, temperature, seed, max_tokens, prompt
    "grader": {"name": STR, "command": STR, "version": STR, "model": STR, "packages": LIST, "judge": TABLE},
    "environment": {"variables": TABLE, "layers": LIST, "hosts": LIST, "env_file": STR, "shell": STR},
    # Tool settings, not components of the system under test.
    "doctor": {
        "commands": LIST, "ports": LIST, "paths": LIST, "venvs": LIST, "repos": LIST, "pins": TABLE,
        "timeout": FLOAT, "clock_skew_threshold_ms": FLOAT, "layers": LIST, "hosts": LIST, "accept": LIST,
    },
    "probe": {"cases": STR, "n": INT, "compare": STR, "extract": STR, "api_key_env": STR, "timeout": FLOAT},
    "placement": {"allowed": LIST, "hosts": TABLE, "policy": STR},
    # key: the PEM private key (Ed25519 or ECDSA) that signs each run's receipt (execsys.receipt)
    "receipts": {"key": STR},
}
for _component in COMPONENTS:
    SCHEMA[_component]["notes"] = STR

_TYPE_NAMES = {STR: "a string", INT: "an integer", FLOAT: "a number", BOOL: "true or false", LIST: "a list", TABLE: "a table"}


@dataclass
class Declaration:
    """A loaded ``execsys.toml``: one dict per table (empty when not declared)."""

    path: Path | None
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Whether the commands it declares may run (execsys.trust): False only for a file read by load()
    # that declares commands and whose bytes the user has not trusted (execsys trust, --trust).
    trusted: bool = True

    def component(self, name: str) -> dict[str, Any]:
        return dict(self.tables.get(name, {}))

    def get(self, table: str, key: str, default: Any = None) -> Any:
        return self.tables.get(table, {}).get(key, default)

    @property
    def components(self) -> dict[str, dict[str, Any]]:
        return {name: self.component(name) for name in COMPONENTS}


def empty() -> Declaration:
    return Declaration(path=None, tables={name: {} for name in SCHEMA})


def load(path: str | Path | None = None, *, required: bool = False) -> Declaration:
    """Load ``path`` (default ``./execsys.toml``). A missing default file gives an empty declaration."""
    if path is not None and not str(path).strip():
        # `--config "$CONFIG"` with CONFIG unset must not quietly fall back to ./execsys.toml
        raise InputError("the declaration path is empty: give --config FILE, or omit it for ./execsys.toml")
    target = Path(path) if path else Path(DEFAULT_NAME)
    if not target.exists():
        if required or path:
            raise InputError(f"{target}: no such declaration (create one with 'execsys init')")
        return empty()
    from execsys.fsutil import DECLARATION_LIMIT, read_bounded

    try:
        data = read_bounded(target, DECLARATION_LIMIT, "declaration")
    except FileNotFoundError as exc:
        raise InputError(f"{target}: no such declaration (create one with 'execsys init')") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{target}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
    decl = parse(text, target)
    from execsys import trust

    if trust.declared_commands(decl):
        # judged on the very bytes parsed: a file swapped after this read cannot borrow the verdict
        decl.trusted = trust.is_trusted(target, data)
    return decl


def toml_module() -> ModuleType:
    """tomllib (tomli on 3.10), imported when a file is first parsed: a node check on a host with no
    declaration parses no TOML, and tomllib with the datetime module it loads is a tenth of its imports."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # pyright: ignore[reportMissingImports]  (Python 3.10 only)
    return tomllib


def loads_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads``; raises its ``TOMLDecodeError`` (a ``ValueError``)."""
    return toml_module().loads(text)


def parse(text: str, path: Path | None = None) -> Declaration:
    where = str(path or DEFAULT_NAME)
    text = text.removeprefix("\ufeff")  # a byte-order mark, as some Windows editors write it
    tomllib = toml_module()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: malformed TOML: {exc}") from exc
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to be a declaration (more than {MAX_DEPTH} levels)") from None
    _check_values(data, where, text)
    decl = Declaration(path=path, tables={name: {} for name in SCHEMA})
    for table, value in data.items():
        if table not in SCHEMA:
            decl.warnings.append(f"{where}:{_line_of(text, None, table)}: unknown table [{table}] (ignored)")
            continue
        if not isinstance(value, dict):
            raise InputError(f"{where}: '{table}' must be a table ([{table}])")
        known = SCHEMA[table]
        clean: dict[str, Any] = {}
        for key, item in value.items():
            if key not in known:
                decl.warnings.append(f"{where}:{_line_of(text, table, key)}: unknown key '{table}.{key}' (ignored)")
                continue
            expected = known[key]
            if not _type_ok(item, expected):
                raise InputError(
                    f"{where}:{_line_of(text, table, key)}: '{table}.{key}' must be {_type_name(expected)}, "
                    f"not {type(item).__name__}"
                )
            clean[key] = item
        decl.tables[table] = clean
    return decl


def _check_values(data: dict[str, Any], where: str, text: str) -> None:
    """Refuse what canonical JSON cannot hold exactly: nan/inf, dates and times, and nesting deeper
    than MAX_DEPTH. Walked with an explicit stack (a deep value must not recurse here either)."""
    import datetime  # tomllib has loaded it already

    stack: list[tuple[str, Any, int]] = [(key, value, 1) for key, value in data.items()]
    while stack:
        name, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"{where}: '{_head(name)}' is nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            stack.extend((f"{name}.{key}", item, depth + 1) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((f"{name}[{i}]", item, depth + 1) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{where}:{_line_for(text, name)}: '{name}' must be a finite number, not {value}")
        elif isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            raise InputError(f"{where}:{_line_for(text, name)}: '{name}' is a TOML date/time; write it as a "
                             f"string (\"{value}\")")
        elif isinstance(value, str) and "\x00" in value:
            # no path, URL, command or name can hold one: the OS and every URL parser refuse it later, mid-work
            raise InputError(f"{where}:{_line_for(text, name)}: '{name}' contains a NUL character")
        elif isinstance(value, str) and name.rsplit(".", 1)[-1] == "endpoint" and value:
            _check_url(value, f"{where}:{_line_for(text, name)}: '{name}'")


def _check_url(value: str, what: str) -> None:
    """An endpoint the HTTP client can use: http(s), a host, a port that is a number (``http://[::1`` is not)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - reading it is the check: a port that is not a number raises here
    except ValueError as exc:
        raise InputError(f"{what} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{what} must be an http:// or https:// URL with a host, not {value!r}")
    if any(ord(c) < 0x21 or ord(c) == 0x7f for c in value):
        raise InputError(f"{what} has a space or control character in it")


def _head(name: str) -> str:
    return name if len(name) <= 80 else name[:80] + "..."


def _line_for(text: str, dotted: str) -> int:
    parts = re.split(r"[.\[]", dotted, maxsplit=2)
    return _line_of(text, parts[0], parts[1]) if len(parts) > 1 else _line_of(text, None, parts[0])


def _type_ok(value: Any, expected: Any) -> bool:
    if expected is FLOAT or expected == (int, str):
        return isinstance(value, expected) and not isinstance(value, bool)
    if expected is INT:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _type_name(expected: Any) -> str:
    if expected == (int, str):
        return "an integer or a string"
    return _TYPE_NAMES.get(expected, "of another type")


def _line_of(text: str, table: str | None, key: str) -> int:
    """Best-effort line number of ``key`` within ``[table]`` (or of the table header itself)."""
    lines = text.splitlines()
    current: str | None = None
    header = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]")
    for number, line in enumerate(lines, start=1):
        found = header.match(line)
        if found:
            current = found.group(1).strip().strip('"')
            if table is None and current == key:
                return number
            continue
        if table is not None and current == table and re.match(rf"^\s*\"?{re.escape(key)}\"?\s*=", line):
            return number
    return 0
