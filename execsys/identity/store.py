"""Where identities are kept: the lock file (written atomically, read back and checked) and the
ledger's ``identity`` records, and the resolver every command uses for a lock path, record id or id prefix."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.errors import InputError
from execsys.identity.model import Identity
from execsys.redact import scrub

if TYPE_CHECKING:
    from execsys.ledger import Ledger


def write_lock(identity: Identity, path: str | os.PathLike[str]) -> Path:
    """Write the lock atomically (temp file + rename), scrubbed."""
    from execsys.fsutil import write_output

    return write_output(path, scrub(identity.to_json()), "the lock")


def record_identity(identity: Identity, ledger: Ledger) -> str:
    """Append the identity to the ledger (kind ``identity``); returns the record id.

    A ledger that turns out to be damaged (a corrupt page) is bad input naming the file, exit 2."""
    import sqlite3  # here: pinning for facts or a node writes no ledger

    try:
        return ledger.append("identity", identity.to_json(), identity=identity.id)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"ledger {ledger.path}: not a usable execsys ledger ({exc}); nothing was written") from exc


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


# Ledger records that carry the identity they were taken under: a ref to one resolves to that identity.
_CARRIES_IDENTITY = ("probe", "comparison", "plan-run", "run", "attach")


def _identity_by_id(ident: str, ledger: Any, *, where: str) -> Identity:
    """The newest ``identity`` record of ``ident``; when the ledger only knows the id from the records
    taken under it, an Identity known by its id alone (no components) -- enough to scope by."""
    for record in ledger.iter(kind="identity", identity=ident, newest_first=True, limit=1):
        return Identity.from_json(record.body, where=f"ledger record {record.id}")
    return Identity(id=ident, recorded_at="", components={}, source=where,
                    notes=[f"known only by its id from {where}: the ledger holds no identity record for it"])


def load_identity_ref(ref: str, ledger: Any = None, *, ledger_path: str | os.PathLike[str] | None = None) -> Identity:
    """A lock file path, a ledger record id (or unique prefix) -- an identity record, or a probe,
    comparison, plan-run, run or attach record, which resolves to the identity it carries -- or an
    identity id prefix (known from an identity record or from the records taken under it: a job's
    runs carry the identity its TaskProlog pinned on the node, which this ledger may never have seen)."""
    if os.path.exists(ref) or ref.endswith(".json"):
        return load_lock(ref)
    from execsys.ledger import Ledger

    own = ledger is None
    ledger = ledger or Ledger.open(ledger_path)  # ledger_path: --ledger; None: $EXECSYS_LEDGER, else the default
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
                carried = {r.identity for kind in _CARRIES_IDENTITY for r in ledger.iter(kind=kind)
                           if r.identity and ref and r.identity.startswith(ref)}
                if len(carried) > 1:
                    raise InputError(f"identity prefix '{ref}' is ambiguous in the ledger: give more characters") \
                        from None
                if carried:
                    return _identity_by_id(carried.pop(), ledger, where=f"identity {ref}")
                raise InputError(f"'{ref}' is neither a lock file nor an identity in the ledger {ledger.path} "
                                 "(see 'execsys ledger list --kind identity')") from None
        if record.kind != "identity":
            if record.identity:
                return _identity_by_id(record.identity, ledger, where=f"ledger record {record.id}")
            raise InputError(f"ledger record {record.id} is a {record.kind} record and carries no identity")
        return Identity.from_json(record.body, where=f"ledger record {record.id}")
    finally:
        if own:
            ledger.close()
