"""The pinned identity of an execution system: twelve components, each declared and observed.

``pin`` records, before a run, what the operator declared (``execsys.toml``) beside
what this machine shows (artifact bytes, engine, hardware, git, the harness's own
interpreter, environment). The identity ``id`` is the BLAKE3 of the canonical JSON of the
components -- no timestamps, nothing volatile, nothing that depends on who pins or from where --
so the same system always gets the same id and any moved component gives a new one. The
observer (execsys's own version and interpreter, the invoking shell, terminal, cwd, user) is
recorded beside it as ``observer`` and never compared. ``verify`` re-observes everything (the
artifact digest always from the bytes) and says, component by component, whether this is still
the system that was pinned; ``diff_identities`` says which components moved between two
identities and therefore what a comparison of their results can claim.

The engine layer of ``pin`` and ``verify``: ``PinOptions.from_sources`` -> :func:`run_pin` ->
:class:`PinReport`, ``VerifyOptions.from_sources`` -> :func:`run_verify` -> :class:`VerifyReport`,
with typed events (:class:`ComponentObserved`, :class:`ArtifactHashed`, ...). The CLI commands
``pin``, ``verify`` and ``diff`` and the TUI only call these and render.

One module per seam: :mod:`~execsys.identity.model` (the schema, the events, :class:`Identity`),
:mod:`~execsys.identity.observe`, :mod:`~execsys.identity.store` (the lock and the ledger records),
:mod:`~execsys.identity.pin`, :mod:`~execsys.identity.verify` and :mod:`~execsys.identity.diff`. Callers
import from ``execsys.identity``; the names below are the whole of what they use. ``execsys.identity.pin``
and ``execsys.identity.verify`` are the functions (as they were before the split): the modules of the same
names are reached through ``sys.modules`` or ``from execsys.identity.pin import ...``.
"""

from __future__ import annotations

from execsys.identity.diff import (
    DiffReport,
    describe_change,
    describe_changes,
    diff_identities,
    diff_sentence,
    field_changes,
    flatten,
)
from execsys.identity.model import (
    DEFAULT_LOCK,
    DIFF_SCHEMA,
    READABLE_SCHEMAS,
    SCHEMA,
    SCHEMA_VERSION,
    VERIFY_SCHEMA,
    ArtifactHashed,
    ComponentChecked,
    ComponentObserved,
    Identity,
    IdentityRecorded,
)
from execsys.identity.observe import (
    Cancelled,
    observe_components,
    observe_observer,
    observe_runtime,
    sanitize_declared,
)
from execsys.identity.pin import (
    PinOptions,
    PinReport,
    SupersededLicences,
    pin,
    run_pin,
    superseded_licences,
)

# the tests read pin's notes directly
from execsys.identity.pin import _notes as _notes
from execsys.identity.store import load_identity_ref, load_lock, record_identity, write_lock
from execsys.identity.verify import (
    ComponentCheck,
    VerifyOptions,
    VerifyReport,
    run_verify,
    schema_outdated_sentence,
    verify,
)

__all__ = [
    "DEFAULT_LOCK", "DIFF_SCHEMA", "READABLE_SCHEMAS", "SCHEMA", "SCHEMA_VERSION", "VERIFY_SCHEMA",
    "ArtifactHashed", "ComponentChecked", "ComponentObserved", "Identity", "IdentityRecorded",
    "DiffReport", "describe_change", "describe_changes", "diff_identities", "diff_sentence", "field_changes", "flatten",
    "Cancelled", "observe_components", "observe_observer", "observe_runtime", "sanitize_declared",
    "load_identity_ref", "load_lock", "record_identity", "write_lock", "ComponentCheck", "VerifyOptions",
    "VerifyReport", "run_verify", "schema_outdated_sentence", "verify", "PinOptions", "PinReport",
    "SupersededLicences", "pin", "run_pin", "superseded_licences",
]
