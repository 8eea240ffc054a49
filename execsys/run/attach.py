"""``attach``: give results made without ``execsys run`` a sidecar, honestly marked as recorded after.

Many results already exist. Their identity can still be written down, but only as the system is
*now*: the engine may have been upgraded or restarted since the run. So the sidecar says
``"attached_after": true`` with that sentence, the lock is verified at attach time (the verdict is
kept), and ``compare`` treats such a result as descriptive only.

Provenance is never downgraded: a result ``execsys run`` recorded (its sidecar, beside the result or
in ``--sidecar-dir``, is an ``execsys.run/…`` record, or a run in the ledger recorded this file with
this digest) already has the identity pinned *before* it was made. Attaching to it is refused
(InputError naming the run and its verdict) before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.errors import InputError, UsageError
from execsys.fsutil import read_json_object
from execsys.harnesses import registry
from execsys.ledger import Ledger, new_id, now_iso
from execsys.operation import Cancel, OnEvent, emit, new_cancel
from execsys.run import results as results_step
from execsys.run.events import ResultFound, RunRecorded
from execsys.run.record import keep_receipts, prepare_receipts, sidecar_path
from execsys.sources import no_identity_reason

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity
    from execsys.run.shard import Shard
    from execsys.sources import Sources

SCHEMA = "execsys.attach/1"
ATTACHED_SENTENCE = "identity recorded after the run: the system may have moved in between; descriptive only"


@dataclass(frozen=True)
class AttachOptions:
    results: list[Path]
    declaration: Declaration
    lock: Identity
    lock_path: Path
    sidecar_dir: Path | None = None
    sign_key: Path | None = None  # --sign-key / [receipts] key
    signer: Any = None  # its securesystemslib CryptoSigner; None: the receipts are unsigned
    # the shard these results are of a sharded evaluation, read as execsys run reads it (execsys.run.shard)
    shard: Shard | None = None
    ledger: Path | None = None  # --ledger; None: $EXECSYS_LEDGER, else the user data dir

    @classmethod
    def from_sources(cls, sources: Sources, *, results: Sequence[str | os.PathLike[str]] | None = None,
                     sidecar_dir: str | os.PathLike[str] | None = None,
                     sign_key: str | os.PathLike[str] | None = None, shard: str | None = None,
                     environ: Mapping[str, str] | None = None) -> AttachOptions:
        """Needs ``results`` (paths that exist); the sources' lock must exist (nothing to attach else)."""
        declaration, lock = sources.declaration, sources.lock
        paths = [Path(p).expanduser().absolute() for p in results or []]
        if not paths:
            raise UsageError("name at least one result file: execsys attach RESULT... [--lock L]")
        for path in paths:
            if not path.is_file():
                raise InputError(f"{path}: no such result file")
            if registry.is_sidecar(path):
                raise InputError(f"{path}: that is a sidecar or a receipt; attach the result file beside it")
        lock_path = sources.lock_path.absolute()
        if lock is None:
            raise InputError(no_identity_reason(lock_path, "nothing can be attached") + "; run 'execsys pin' first")
        sidecars = Path(sidecar_dir).expanduser().absolute() if sidecar_dir is not None else None
        if sidecars is not None and not sidecars.is_dir():
            raise InputError(f"--sidecar-dir {sidecars}: no such directory")
        from execsys.run.options import signing_key

        key, signer = signing_key(sign_key, declaration)
        from execsys.run.shard import shard_from

        # a results-only job step of a Slurm array or an Indexed Job is its shard as a run there would be
        this_shard = shard_from(shard, os.environ if environ is None else environ)
        for path in paths:
            for sidecar in dict.fromkeys((sidecar_path(path, None), sidecar_path(path, sidecars))):
                body = read_json_object(sidecar, "run sidecar") if sidecar.is_file() else None
                if body is not None and str(body.get("schema") or "").startswith(RUN_SCHEMA_PREFIX):
                    raise InputError(_recorded_by_run(path, body))
        return cls(paths, declaration, lock, lock_path, sidecars, key, signer, this_shard, sources.ledger_path)


RUN_SCHEMA_PREFIX = "execsys.run/"


def _recorded_by_run(path: Path, run: dict[str, Any]) -> str:
    """The one line that refuses to attach to a result a run recorded."""
    run_id = " ".join(str(run.get("id") or "?").split())[:80]
    verdict = " ".join(str(run.get("verdict") or "?").split())[:40]
    return (f"{path}: recorded by execsys run {run_id} (verdict {verdict}) with the identity pinned before it ran; "
            "attach would replace that with an after-the-fact record: nothing written")


def _refuse_if_a_run_recorded(ledger: Ledger, results: list[dict[str, str]]) -> None:
    """A run in the ledger that recorded one of these files, as it is now, is its provenance."""
    wanted = {(r["path"], r["blake3"]) for r in results}
    for record in ledger.iter(kind="run"):
        for entry in record.body.get("results") or []:
            if isinstance(entry, dict) and (entry.get("path"), entry.get("blake3")) in wanted:
                raise InputError(_recorded_by_run(Path(str(entry["path"])), record.body))


@dataclass
class AttachReport:
    id: str
    identity_id: str
    lock_path: str
    verify_now: dict[str, Any]
    results: list[dict[str, str]] = field(default_factory=list)
    sidecars: list[str] = field(default_factory=list)
    receipts: list[str] = field(default_factory=list)
    recorded_at: str = ""
    shard: dict[str, Any] | None = None  # {index, count, source, job[, task_id]}, as a run records it

    @property
    def exit_code(self) -> int:
        return 0 if self.verify_now.get("verdict") == "same-system" else 1

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "id": self.id, "attached_after": True, "statement": ATTACHED_SENTENCE,
                "verdict": "attached", "summary": f"attached after the run: {len(self.results)} result(s); "
                                                  f"verify now {self.verify_now.get('verdict')}",
                "identity": {"id": self.identity_id, "lock": self.lock_path}, "verify_now": self.verify_now,
                "recorded_at": self.recorded_at, "results": self.results, "sidecars": self.sidecars,
                "receipts": self.receipts, "shard": self.shard}


def attach_results(options: AttachOptions, on_event: OnEvent | None = None,
                   cancel: Cancel | None = None) -> AttachReport:
    """Digest each result, verify the lock now, write the sidecars, record it in the ledger."""
    from execsys.fsutil import atomic_write_json
    from execsys.identity import verify
    from execsys.redact import scrub

    cancel = new_cancel(cancel)
    report = verify(options.lock, declaration=options.declaration, exclude=[options.lock_path])
    changed = [name for name, check in report.components.items() if check.status != "same"]
    attached = AttachReport(new_id("attach"), options.lock.id, str(options.lock_path),
                            {"verdict": report.verdict, "changed": changed, "sentence": report.sentence},
                            recorded_at=now_iso(),
                            shard=options.shard.to_json() if options.shard is not None else None)
    for path in options.results:
        if cancel.is_set():
            break
        found = results_step.FoundResult(path, results_step.digest(path), registry.for_file(path).name)
        attached.results.append(found.to_json())
        emit(on_event, ResultFound(str(path), found.blake3, found.harness))
    for result in attached.results:
        target = sidecar_path(Path(result["path"]), options.sidecar_dir)
        attached.sidecars.append(str(target))
    with Ledger.open(options.ledger) as ledger:
        _refuse_if_a_run_recorded(ledger, attached.results)
    # each receipt (marked attached_after) is made before anything is recorded: one that cannot be
    # made or written is said, and nothing is written
    receipts = prepare_receipts(attached.to_json(), attached.results, options.sidecar_dir, options.signer,
                                attached_after=True)
    if receipts.errors:
        receipts.discard()
        first = receipts.errors[0]
        raise InputError(f"receipt {first['receipt']}: cannot be written ({first['error']}): nothing written")
    attached.receipts = receipts.paths
    body = attached.to_json()
    # the ledger first: one that cannot be opened or written (exit 2) leaves no sidecar behind
    try:
        with Ledger.open(options.ledger) as ledger:
            ledger.append("attach", body, identity=options.lock.id, record_id=attached.id)
    except BaseException:
        receipts.discard()
        raise
    for result, target in zip(attached.results, attached.sidecars, strict=True):
        atomic_write_json(target, scrub(dict(body, result=result)), follow_symlinks=False)
    failed = receipts.commit()
    if failed:
        raise InputError(f"receipt {failed[0]['receipt']}: not written ({failed[0]['error']})")
    with Ledger.open(options.ledger) as ledger:
        keep_receipts(ledger, attached.id, options.lock.id, receipts)
    emit(on_event, RunRecorded(attached.id, "attached", tuple(attached.sidecars)))
    return attached
