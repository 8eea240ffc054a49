"""Which declarations the user has trusted to run commands, as ``direnv allow`` does for ``.envrc``.

A declaration names commands execsys runs: ``[environment] layers`` (the doctor sends a canary
through each), ``[runtime] restart`` and ``ready`` (the restart probe), ``[grader] command`` and
``[probe] extract = "command:..."`` (the probes), ``[tools] mcp`` servers' ``command`` (pin starts
them to list their tools). An ``execsys.toml`` that came with a cloned repository is somebody
else's code, and opening the TUI on it starts the doctor: so no declared command runs until the
user has trusted the declaration's exact bytes. A changed file is untrusted again.

The store is one small JSON file, ``trust.json``, in the user's data directory -- the directory
the ledger defaults to (platformdirs' user data dir, which follows ``$XDG_DATA_HOME``), or
``$EXECSYS_DATA_DIR`` when set (tests point it at a temp dir)::

    {"schema": "execsys.trust/1",
     "declarations": {"/abs/real/path/execsys.toml": {"blake3": "<hex>", "trusted_at": "<ISO 8601>"}}}

keyed by the declaration's resolved path (symlinks followed), holding the BLAKE3 of its bytes.
Writes are atomic (temp file + rename) under an advisory lock beside the store, so two
``execsys trust`` at once both land. A store that cannot be read trusts nothing (fail closed),
and is never overwritten: ``execsys trust`` then names it.

``trust_this_invocation()`` is ``--trust``: every declaration this process reads is trusted, and
nothing is recorded (scripts, CI, the quickstart). Engines never ask the store themselves:
:func:`execsys.declaration.load` sets ``Declaration.trusted`` from the very bytes it parsed, and
each operation's ``from_sources`` refuses (or, in the doctor, skips) a declared command from an
untrusted declaration with :data:`NOT_TRUSTED`. A command given on the command line is the
user's own and is never gated.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.errors import InputError

if TYPE_CHECKING:
    from execsys.declaration import Declaration

ENV_VAR = "EXECSYS_DATA_DIR"
STORE_NAME = "trust.json"
SCHEMA = "execsys.trust/1"
# The line every refusal and the doctor's skip carry: what to run to trust the declaration.
NOT_TRUSTED = "declaration not trusted: execsys trust"
# A store of a few thousand declarations is a few hundred KiB.
STORE_LIMIT = 16 << 20

_invocation_trust = False


class UntrustedDeclaration(InputError):
    """A declared command would run from a declaration the user has not trusted (exit 2)."""


@dataclass(frozen=True)
class TrustEntry:
    """One trusted declaration: its resolved path, the BLAKE3 trusted, when; and what the file is now."""

    path: str
    blake3: str
    trusted_at: str
    status: str = "trusted"  # trusted | changed (its bytes moved since) | missing

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "blake3": self.blake3, "trusted_at": self.trusted_at, "status": self.status}


def data_dir() -> Path:
    """``$EXECSYS_DATA_DIR``, else the user data directory (where the ledger lives by default)."""
    env = os.environ.get(ENV_VAR)
    if env and env.strip():
        return Path(env).expanduser()
    from platformdirs import user_data_path

    return user_data_path("execsys", appauthor=False)


def store_path() -> Path:
    return data_dir() / STORE_NAME


def digest(data: bytes) -> str:
    import blake3

    return blake3.blake3(data).hexdigest()


def key(path: str | os.PathLike[str]) -> str:
    """The store's key for a declaration: its absolute path, symlinks resolved."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def trust_this_invocation(on: bool = True) -> None:
    """``--trust``: trust every declaration this process reads, recording nothing."""
    global _invocation_trust
    _invocation_trust = on


def trusted_for_this_invocation() -> bool:
    return _invocation_trust


def _read_declaration(path: str | os.PathLike[str]) -> bytes:
    from execsys.fsutil import DECLARATION_LIMIT, read_bounded

    try:
        return read_bounded(path, DECLARATION_LIMIT, "declaration")
    except FileNotFoundError:
        raise InputError(f"{os.fspath(path)}: no such declaration (create one with 'execsys init')") from None


def _load_store(strict: bool) -> dict[str, dict[str, Any]]:
    """The store's declarations. Missing: empty. Unreadable or malformed: empty (``strict``: InputError)."""
    from execsys.fsutil import read_bounded

    path = store_path()
    try:
        data = json.loads(read_bounded(path, STORE_LIMIT, "trust store"))
    except FileNotFoundError:
        return {}
    except (InputError, ValueError, RecursionError) as exc:
        if strict:
            detail = str(exc) if isinstance(exc, InputError) else f"trust store {path}: not valid JSON"
            raise InputError(f"{detail} (fix it or remove it to start over; nothing was changed)") from None
        return {}
    table = data.get("declarations") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
    if not isinstance(table, dict):
        if strict:
            raise InputError(f"trust store {path}: not an {SCHEMA} file (fix it or remove it to start over; "
                             "nothing was changed)")
        return {}
    return {str(k): v for k, v in table.items() if isinstance(v, dict) and isinstance(v.get("blake3"), str)}


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """An advisory lock beside the store for a read-modify-write (two `execsys trust` at once both land)."""
    import fcntl

    directory = data_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / f".{STORE_NAME}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise InputError(f"trust store {store_path()}: cannot write ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _save_store(table: dict[str, dict[str, Any]]) -> None:
    from execsys.fsutil import write_output

    write_output(store_path(), {"schema": SCHEMA, "declarations": dict(sorted(table.items()))}, "the trust store")


def is_trusted(path: str | os.PathLike[str], data: bytes | None = None) -> bool:
    """Whether the declaration at ``path`` -- whose bytes are ``data``, when the caller read them
    already (then exactly those bytes are judged) -- was trusted as it is now, or ``--trust`` was given."""
    if _invocation_trust:
        return True
    if data is None:
        try:
            data = _read_declaration(path)
        except InputError:
            return False
    entry = _load_store(strict=False).get(key(path))
    return entry is not None and entry.get("blake3") == digest(data)


def trust(path: str | os.PathLike[str], data: bytes | None = None) -> TrustEntry:
    """Record the declaration's current bytes (or ``data``, the bytes just written there) as trusted."""
    from execsys.clock import now_iso

    if data is None:
        data = _read_declaration(path)
    entry = {"blake3": digest(data), "trusted_at": now_iso()}
    with _locked():
        table = _load_store(strict=True)
        table[key(path)] = entry
        _save_store(table)
    return TrustEntry(key(path), entry["blake3"], entry["trusted_at"])


def revoke(path: str | os.PathLike[str]) -> bool:
    """Forget the declaration at ``path``; False when it was not in the store."""
    with _locked():
        table = _load_store(strict=True)
        if table.pop(key(path), None) is None:
            return False
        _save_store(table)
    return True


def entries() -> list[TrustEntry]:
    """Every trusted declaration, with whether the file still holds the bytes trusted."""
    found: list[TrustEntry] = []
    for path, entry in sorted(_load_store(strict=True).items()):
        try:
            now = digest(_read_declaration(path))
            status = "trusted" if now == entry["blake3"] else "changed"
        except InputError:
            status = "missing"
        found.append(TrustEntry(path, str(entry["blake3"]), str(entry.get("trusted_at") or ""), status))
    return found


def hint(path: str | os.PathLike[str] | None) -> str:
    """:data:`NOT_TRUSTED`, naming ``--config`` when the declaration is not the default one."""
    from execsys.sources import DEFAULT_CONFIG_NAME

    if path is None or os.fspath(path) == DEFAULT_CONFIG_NAME:
        return NOT_TRUSTED
    return f"{NOT_TRUSTED} --config {shlex.quote(os.fspath(path))}"


def refusal(decl: Declaration, what: str) -> UntrustedDeclaration:
    """The one line an operation refuses with when it would run ``what`` from an untrusted declaration."""
    return UntrustedDeclaration(
        f"{hint(decl.path)} ({decl.path} declares {what}, which execsys would run: review the file, "
        "then trust it, or pass --trust for this run only)")


def require(decl: Declaration | None, what: str) -> None:
    """Raise :func:`refusal` unless ``decl`` is trusted (or absent): call it where a declared command is
    taken into an operation's options, before anything runs."""
    if decl is not None and not getattr(decl, "trusted", True):
        raise refusal(decl, what)


def declared_commands(decl: Declaration) -> list[tuple[str, str]]:
    """(key, command) for every command ``decl`` declares that execsys may run: what trusting it allows.

    :func:`execsys.declaration.load` asks the store only for a declaration this finds commands in, so
    every gate's command must be listed here."""
    found: list[tuple[str, str]] = []
    get = decl.get
    for table in ("doctor", "environment"):
        for layer in get(table, "layers") or []:
            found.append((f"{table}.layers", str(layer)))
    for name in ("restart", "ready"):
        value = get("runtime", name)
        if value and not (name == "ready" and str(value).startswith(("http://", "https://"))):
            found.append((f"runtime.{name}", str(value)))
    if get("grader", "command"):
        found.append(("grader.command", str(get("grader", "command"))))
    extract = get("probe", "extract")
    if isinstance(extract, str) and extract.startswith("command:"):
        found.append(("probe.extract", extract))
    for server in get("tools", "mcp") or []:
        if isinstance(server, dict) and isinstance(server.get("command"), list):
            found.append((f"tools.mcp {server.get('name')}", shlex.join(str(w) for w in server["command"])))
    doctor = decl.tables.get("doctor", {})
    for name in [*(doctor.get("commands") or []), *(doctor.get("pins") or {})]:
        if "/" in str(name):  # a program shipped beside the declaration; a bare name is the user's PATH
            found.append(("doctor.commands", str(name)))
    for command in get("harness", "commands") or []:
        from execsys.observe.harness import first_program  # only with harness commands to read

        program = first_program(str(command))
        if program and "/" in program and not os.path.isabs(os.path.expanduser(program)):
            found.append(("harness.commands", str(command)))  # pin may start it to ask what it is
    return found
