"""Where the declaration and the lock are, for every command and the TUI alike.

One rule, used everywhere: the declaration is ``--config`` (or ``$EXECSYS_CONFIG``, else
``./execsys.toml``); the lock is ``--lock``, else ``execsys.lock.json`` *beside the declaration*.
So ``execsys pin --config eval/execsys.toml`` writes ``eval/execsys.lock.json``, and
``execsys probe ... --config eval/execsys.toml`` ties its record to that same identity.

An operation that ties results to an identity (probe, plan, run, scope) and finds no lock says so
in one line (:func:`no_identity_reason`) and records ``identity: null`` with that reason.

:class:`Sources` carries what was read and where from: the declaration and its path, the lock and
its path, the directory every declared path resolves against (:func:`declared_base`), and the
ledger named with ``--ledger`` (None: ``$EXECSYS_LEDGER``, else the user data dir, decided by
:meth:`execsys.ledger.Ledger.open`). An operation's options are built from it, so no caller names
a path twice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from execsys.errors import InputError

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity

CONFIG_ENV = "EXECSYS_CONFIG"
DEFAULT_CONFIG_NAME = "execsys.toml"
LOCK_NAME = "execsys.lock.json"


def config_path(given: str | os.PathLike[str] | None = None) -> Path:
    """The declaration's path: the one given, else ``$EXECSYS_CONFIG``, else ``./execsys.toml``.

    An empty string given explicitly (``--config "$UNSET"``) is an error, never a silent default."""
    if given is not None:
        if not str(given).strip():
            raise InputError("the declaration path is empty: give --config FILE, or omit it for ./execsys.toml")
        return Path(given).expanduser()
    env = os.environ.get(CONFIG_ENV)
    if env is not None and env.strip():
        return Path(env).expanduser()
    return Path(DEFAULT_CONFIG_NAME)


def config_given(given: str | os.PathLike[str] | None = None) -> bool:
    """Whether the operator named a declaration (flag or environment): then it must exist."""
    return given is not None or bool(os.environ.get(CONFIG_ENV, "").strip())


def default_lock(config: str | os.PathLike[str] | None = None) -> Path:
    """The lock that belongs to a declaration: ``execsys.lock.json`` in the declaration's directory."""
    return config_path(config).with_name(LOCK_NAME)


def lock_path(lock: str | os.PathLike[str] | None = None, config: str | os.PathLike[str] | None = None) -> Path:
    """``--lock`` if given (an empty one is an error), else the lock beside the declaration."""
    if lock is not None:
        if not str(lock).strip():
            raise InputError("the lock path is empty: give --lock FILE, or omit it for the lock beside the declaration")
        return Path(lock).expanduser()
    return default_lock(config)


def no_identity_reason(path: Path, what: str = "this result") -> str:
    """The one line an identity-tied operation prints when it finds no lock."""
    return f"no pinned identity (looked for {path}): {what} will not count toward any scope"


def read_lock(path: str | os.PathLike[str]) -> Identity:
    """A lock file named on the command line (``--lock``, ``plan run --arm-lock``): it must exist and parse."""
    from execsys.identity import load_lock  # only with a lock to read: importing it is costly

    return load_lock(lock_path(path))


def declared_base(declaration: Declaration) -> Path:
    """The directory a declared relative path (``[artifact] path``, a harness file) resolves against:
    the declaration's own directory, else the working directory (no declaration file)."""
    return Path(os.path.abspath(declaration.path)).parent if declaration.path else Path.cwd()


@dataclass(frozen=True)
class Sources:
    """The declaration and the lock an operation's options are built from, with their paths and the ledger's."""

    declaration: Declaration
    config_path: Path
    lock: Identity | None
    lock_path: Path
    lock_explicit: bool
    ledger_path: Path | None = None  # --ledger; None: $EXECSYS_LEDGER, else the user data dir

    @classmethod
    def of(cls, declaration: Declaration, lock: Identity | None = None, *,
           lock_file: str | os.PathLike[str] | None = None, ledger: str | os.PathLike[str] | None = None) -> Sources:
        """Sources already read (a library caller, a test): the lock's path is ``lock_file``, else the
        lock beside the declaration, by the one rule (:func:`lock_path`)."""
        return cls(declaration=declaration,
                   config_path=Path(declaration.path) if declaration.path else config_path(None),
                   lock=lock, lock_path=lock_path(lock_file, declaration.path), lock_explicit=lock_file is not None,
                   ledger_path=Path(ledger).expanduser() if ledger else None)

    @property
    def base_dir(self) -> Path:
        """Where the declaration's relative paths point from (:func:`declared_base`)."""
        return declared_base(self.declaration)

    @property
    def identity_id(self) -> str | None:
        return self.lock.id if self.lock is not None else None

    def no_identity(self, what: str = "this result") -> str | None:
        """The warning line when there is no lock, else None."""
        return None if self.lock is not None else no_identity_reason(self.lock_path, what)


def load_sources(config: str | os.PathLike[str] | None = None, lock: str | os.PathLike[str] | None = None,
                 *, need_lock: bool = False, read_lock: bool = True, default_declaration: bool = True,
                 ledger: str | os.PathLike[str] | None = None) -> Sources:
    """Read the declaration and the lock the way every command does.

    A declaration that was named must exist; the default one may be absent (an empty declaration).
    A lock named with ``--lock`` must exist and parse; the default lock may be absent (``lock=None``)
    unless ``need_lock``; a default lock that exists but does not parse is an error, never ignored.
    ``read_lock=False`` only locates the lock (``pin`` replaces it whatever it holds);
    ``default_declaration=False`` reads a declaration only when one was named (``verify`` compares
    the pinned one otherwise), else the declaration is an empty one. ``ledger`` is ``--ledger``.
    """
    from execsys import declaration as declaration_module

    path = config_path(config)
    named = config_given(config)
    if named or (default_declaration and path.exists()):
        decl = declaration_module.load(path, required=named)
    else:
        decl = declaration_module.empty()
    target = lock_path(lock, config)
    explicit = lock is not None
    identity = None
    if read_lock and (explicit or need_lock or target.exists()):
        from execsys.identity import load_lock  # only with a lock to read: importing it is costly

        identity = load_lock(target)
    return Sources(declaration=decl, config_path=path, lock=identity, lock_path=target, lock_explicit=explicit,
                   ledger_path=Path(ledger).expanduser() if ledger else None)


def declaration_at(path: Path) -> Declaration:
    """The declaration at a path already resolved (:func:`config_path`), or an empty one while none is there."""
    from execsys import declaration as declaration_module

    return declaration_module.load(path) if path.exists() else declaration_module.empty()


def lock_at(path: Path) -> Identity | None:
    """The lock at a path already resolved (:func:`lock_path`), or None while none is there; one that is
    there must parse."""
    if not path.exists():
        return None
    from execsys.identity import load_lock  # only with a lock to read: importing it is costly

    return load_lock(path)


def sources_at(config: Path, lock: Path, *, ledger: str | os.PathLike[str] | None = None) -> Sources:
    """The sources at paths already resolved, for a session that writes them there (the TUI): a
    declaration not written yet is an empty one, a lock not pinned yet is None."""
    return Sources(declaration=declaration_at(config), config_path=config, lock=lock_at(lock), lock_path=lock,
                   lock_explicit=lock != default_lock(config),
                   ledger_path=Path(ledger).expanduser() if ledger else None)
