"""Step 7, the record: ``execsys.run/1`` in the ledger and a sidecar beside each result file.

A sidecar (``execsys.run/3``) is the run record plus ``result`` (the file it describes) and
``previous``: the ids of the earlier runs (or attaches) whose sidecar this one replaced at that
path, newest first, so a result two runs wrote names the latest and still links the earlier ones
(each is in the ledger). Readers accept ``execsys.run/1`` sidecars, which have no ``previous``.

The verdict is one word a reader can act on, chosen by precedence (the booleans behind it are
kept too): ``interrupted`` (stopped by a signal; partial results still digested) > ``failed`` (the
harness exited non-zero) > ``drifted`` (the runtime changed mid-run, or verify-after found a new
identity: compare causally with nothing) > ``overridden`` (ran past a failing gate) > ``clean``.
A run the gate or the identity check refused never started: ``refused``.

The ledger row is written before any sidecar, and a run is recorded whatever happens to the files
around it: a result that cannot be digested (still growing after the harness exited, gone) is
listed under ``result_errors`` instead of ``results``, a sidecar that cannot be written (a
read-only or full directory, a FIFO at its name) under ``sidecar_errors``; either makes the exit
status non-zero (1 where it would have been 0). ``execsys.run/2`` added those two lists; a
``/1`` record simply has neither. ``execsys.run/3`` names the gate's mode ``doctor.gate_mode`` (it was
``doctor.gate``: ``gate: "fail"`` beside ``verdict: "clean"`` read as a failed gate); readers take either.

Beside each sidecar goes a receipt (``<result>.execsys.intoto.json``, :mod:`execsys.receipt`): the
same record as the predicate of an in-toto Statement over the run's result files, in a DSSE
envelope. It is written as a sidecar is (prepared before the row, renamed after it, never through a
planted symlink); one that cannot be is listed under ``receipt_errors``, with the same exit status.
"""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from execsys.errors import InputError
from execsys.fsutil import PreparedWrite, json_bytes, prepare_write
from execsys.harnesses.base import receipt_name, sidecar_name
from execsys.redact import scrub

# /2: the record gained result_errors, sidecar_errors and the unverified verify-after; its sidecar is the
# record plus "result" (which file it describes) and "previous" (earlier runs that wrote that file)
SCHEMA = "execsys.run/3"
SIDECAR_SCHEMA = SCHEMA
# verify_after's verdict when the system could not be re-observed (the harness deleted the working
# directory, say): such a run cannot claim the same system after it, so it counts as drifted
UNVERIFIED = "unverified"
# the run verdict: a Literal type, so a mistyped verdict is a type error
RunVerdict = Literal["clean", "drifted", "overridden", "failed", "interrupted", "refused"]
VERDICTS: tuple[RunVerdict, ...] = get_args(RunVerdict)


@dataclass
class RunRecord:
    """One run, as recorded. ``to_json`` is the documented ``execsys.run/3`` body."""

    id: str
    command: list[str]  # redacted
    cwd: str
    identity_id: str | None = None
    lock_path: str | None = None
    identity_how: str | None = None  # verified | pinned | repinned
    identity_from: str | None = None  # "EXECSYS_LOCK": the lock came from the job's environment
    doctor: dict[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    signals: list[str] = field(default_factory=list)  # signals forwarded to the harness
    drift: list[dict[str, Any]] = field(default_factory=list)
    watch: dict[str, Any] = field(default_factory=dict)
    verify_after: dict[str, Any] | None = None
    results: list[dict[str, str]] = field(default_factory=list)
    harness: str = "other"
    hook: dict[str, Any] | None = None  # the Inspect hook's reports, when the harness is Inspect
    refused: str | None = None  # why the run never started
    sidecars: list[str] = field(default_factory=list)
    result_errors: list[dict[str, str]] = field(default_factory=list)  # {"path", "error"}: not digested
    sidecar_errors: list[dict[str, str]] = field(default_factory=list)  # {"sidecar", "error"}: not written
    receipts: list[str] = field(default_factory=list)  # <result>.execsys.intoto.json (execsys.receipt)
    receipt_errors: list[dict[str, str]] = field(default_factory=list)  # {"receipt", "error"}: not written
    shard: dict[str, Any] | None = None  # {index, count, source, job}: the shard of a sharded evaluation

    # -- the booleans behind the verdict ------------------------------------------------------------
    @property
    def interrupted(self) -> bool:
        return bool(self.signals) or (self.exit_code is not None and self.exit_code < 0)

    @property
    def failed(self) -> bool:
        return self.exit_code not in (None, 0)

    @property
    def drifted(self) -> bool:
        # the Inspect hook's per-call check: a response from a model the pinned endpoint does not serve
        mismatches = bool((self.hook or {}).get("mismatches"))
        return bool(self.drift) or mismatches or (self.verify_after or {}).get("verdict") in ("new-identity", UNVERIFIED)

    @property
    def overridden(self) -> bool:
        return bool(self.doctor.get("failing")) and self.doctor.get("override") is not None

    @property
    def gate_passed(self) -> bool:
        return not self.doctor.get("failing")

    @property
    def verdict(self) -> RunVerdict:
        if self.refused:
            return "refused"
        precedence: tuple[RunVerdict, ...] = ("interrupted", "failed", "drifted", "overridden")
        for name in precedence:
            if getattr(self, name):
                return name
        return "clean"

    @property
    def hook_problem(self) -> str | None:
        if self.hook is None:
            return None
        if not self.hook.get("reports"):
            return "the Inspect hook did not run (is execsys[inspect] installed in the harness's environment?)"
        errors = [r.get("error") for r in self.hook["reports"] if r.get("error") or not r.get("recorded")]
        if errors:
            return "the Inspect hook could not record: " + "; ".join(str(e or "no record written") for e in errors)
        return None

    @property
    def exit_status(self) -> int:
        """The child's code when it failed or was interrupted (128+N for signal N when it exited 0 or
        never started); 1 when drifted or refused, or when a result, sidecar or receipt could not be
        written down; else 0."""
        if self.refused:
            return 1
        if self.interrupted:
            first = getattr(signal.Signals, self.signals[0], signal.SIGINT) if self.signals else signal.SIGINT
            code = self.exit_code if self.exit_code is not None else 128 + int(first)
            return 128 - code if code < 0 else (code or 128 + int(first))
        if self.failed:
            return int(self.exit_code or 1)
        return 1 if self.drifted or self.result_errors or self.sidecar_errors or self.receipt_errors else 0

    def file_problems(self) -> str | None:
        """One sentence for what the record could not vouch for: results not digested, sidecars or
        receipts not written."""
        parts = [f"result {e['path']} not digested: {_reason_only(e['path'], e['error'])}"
                 for e in self.result_errors]
        parts += [f"sidecar {e['sidecar']} not written: {_reason_only(e['sidecar'], e['error'])}"
                  for e in self.sidecar_errors]
        parts += [f"receipt {e['receipt']} not written: {_reason_only(e['receipt'], e['error'])}"
                  for e in self.receipt_errors]
        return "; ".join(parts) or None

    def summary(self) -> str:
        what = shlex.join(self.command)
        what = what if len(what) <= 60 else what[:57] + "..."
        text = f"{self.verdict}: {what} ({len(self.results)} result{'s' if len(self.results) != 1 else ''})"
        return f"{text}; {self.refused}" if self.refused else text

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "schema": SCHEMA,
            "id": self.id,
            "verdict": self.verdict,
            "summary": self.summary(),
            "identity": {"id": self.identity_id, "lock": self.lock_path, "how": self.identity_how,
                         "from": self.identity_from},
            "doctor": self.doctor,
            "command": {"argv": self.command, "harness": self.harness},
            "cwd": self.cwd,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "exit_code": self.exit_code,
            "signals": self.signals,
            "drift": self.drift,
            "watch": self.watch,
            "verify_after": self.verify_after,
            "results": self.results,
            "gate_passed": self.gate_passed,
            "overridden": self.overridden,
            "drifted": self.drifted,
            "failed": self.failed,
            "interrupted": self.interrupted,
            "refused": self.refused,
            "result_errors": self.result_errors,
            "sidecar_errors": self.sidecar_errors,
            "receipt_errors": self.receipt_errors,
            "shard": self.shard,
        }
        if self.hook is not None:
            body["hook"] = dict(self.hook, problem=self.hook_problem)
        body["verdict_detail"] = self.verdict_detail()
        return body

    def drift_cause(self) -> str:
        """Why the run drifted, first cause first: the watch's first drift event (what moved, when),
        then the Inspect hook's per-call count, then verify-after's new identity. A per-call count
        follows a drift event rather than replacing it: the event says what happened to the engine."""
        mismatches = (self.hook or {}).get("mismatches")
        counted = (f"{mismatches} model call(s) answered by another model or fingerprint than the pinned one"
                   if mismatches else None)
        if self.drift:
            from execsys.run.drift import fold

            # the first field that ended other than it began (a restart's argv, not the endpoint's
            # error while it was down), as a delta; else the first event
            moved = [f for f in fold(self.drift) if not f.as_before and None not in (f.before, f.after)]
            first = self.drift[0]
            component, at, before, after = ((moved[0].component, moved[0].last_at, moved[0].before, moved[0].after)
                                            if moved else (first.get("component"), first.get("at"),
                                                           first.get("before"), first.get("after")))
            text = (f"the runtime changed during the run ({component} at {at}: {_change(before, after)}"
                    + (f"; {len(self.drift)} drift events" if len(self.drift) > 1 else "") + ")")
            return f"{text}; {counted}" if counted else text
        if counted:
            return counted
        after = self.verify_after or {}
        if after.get("verdict") == "new-identity":
            return f"the system after the run is not the pinned one ({after.get('sentence') or 'new identity'})"
        if after.get("verdict") == UNVERIFIED:
            return after.get("sentence") or "the system could not be re-observed after the run"
        return "the runtime changed during the run"

    def verdict_detail(self) -> str:
        """One sentence: the verdict and what it rests on."""
        if self.refused:
            return f"refused: {self.refused}"
        parts = {
            "interrupted": "stopped by a signal; partial results digested",
            "failed": f"the harness exited {self.exit_code}",
            "drifted": self.drift_cause() + ": compare this result causally with nothing",
            "overridden": f"ran past a failing gate ({self.doctor.get('override')})",
            "clean": "gate passed, no drift, same system after, exit 0",
        }
        text = f"{self.verdict}: {parts[self.verdict]}"
        for problem in (self.hook_problem, self.file_problems()):
            if problem:
                text = f"{text}; {problem}"
        return text


def _reason_only(path: str, error: str) -> str:
    """The error without the path it starts with, where it does (the caller names the path)."""
    return error.removeprefix(f"{path}: ").removeprefix(f"{path} ")


def _brief(value: Any) -> str:
    text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _change(before: Any, after: Any) -> str:
    """Two lists (an argv) or two dicts as what moved between them (``+--n_batch 64``), anything else
    as both values cut short; ASCII, as the record is read anywhere."""
    from execsys.delta import value_change

    if (isinstance(before, list) and isinstance(after, list)) or (isinstance(before, dict) and isinstance(after, dict)):
        return value_change(before, after, render=_brief, arrow="->")
    return f"{_brief(before)} -> {_brief(after)}"


def sidecar_path(result: Path, sidecar_dir: Path | None, name: Callable[[str], str] = sidecar_name) -> Path:
    """``<result>.execsys.json`` beside the result; in ``sidecar_dir``, ``<result>.<12 hex>.execsys.json``,
    the hex from the BLAKE3 of the result's absolute path, so two results with one basename (two
    task directories' ``results.json``) never share, or overwrite, one sidecar."""
    if sidecar_dir is None:
        return result.with_name(name(result.name))
    import blake3

    tag = blake3.blake3(os.fsencode(os.path.abspath(result))).hexdigest()[:12]
    return sidecar_dir / name(f"{result.name}.{tag}")


def receipt_path(result: Path, sidecar_dir: Path | None) -> Path:
    """Where the receipt for ``result`` goes: named as its sidecar is, ``.execsys.intoto.json``."""
    return sidecar_path(result, sidecar_dir, receipt_name)


@dataclass
class PreparedSidecars:
    """Sidecars written to temp files beside their targets, not yet renamed into place (see
    :func:`prepare_sidecars`), and the one-line reason for each that could not be."""

    writes: list[PreparedWrite] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    what: str = "sidecar"  # the key naming the file in each error: "sidecar" or "receipt"
    envelopes: list[dict[str, Any]] = field(default_factory=list)  # receipts only: one per write
    committed: list[str] = field(default_factory=list)  # the targets renamed into place by commit()

    @property
    def paths(self) -> list[str]:
        return [os.fspath(w.target) for w in self.writes]

    def commit(self) -> list[dict[str, str]]:
        """Rename each into place; the errors of those that could not be (the rest are written)."""
        failed: list[dict[str, str]] = []
        for write in self.writes:
            try:
                write.commit()
                self.committed.append(os.fspath(write.target))
            except (OSError, InputError) as exc:
                failed.append({self.what: os.fspath(write.target), "error": _reason(exc)})
        return failed

    def discard(self) -> None:
        for write in self.writes:
            write.discard()


def prepare_sidecars(body: dict[str, Any], results: list[dict[str, Any]],
                     sidecar_dir: Path | None) -> PreparedSidecars:
    """One sidecar per result (scrubbed: ``body`` plus which result it describes), each written to a
    temp file beside its target. Never follows a symlink planted at the sidecar's name (the link is
    replaced, its target untouched); a FIFO, device or directory there, or a directory that is
    read-only or full, is an entry in ``errors`` naming the sidecar, not an exception: the run is
    recorded whatever happens to its sidecars."""
    prepared = PreparedSidecars()
    for result in results:
        target = sidecar_path(Path(result["path"]), sidecar_dir)
        try:
            previous = earlier_records(target, str(body.get("id") or ""))
            prepared.writes.append(prepare_write(target, json_bytes(scrub(dict(body, result=result, previous=previous))),
                                                 follow_symlinks=False))
        except (OSError, InputError) as exc:
            prepared.errors.append({"sidecar": os.fspath(target), "error": _reason(exc)})
    return prepared


def prepare_receipts(body: dict[str, Any], results: list[dict[str, Any]], sidecar_dir: Path | None,
                     signer: Any = None, *, attached_after: bool = False) -> PreparedSidecars:
    """One receipt per result, beside its sidecar (:func:`receipt_path`), each in a temp file beside
    its target: an in-toto Statement whose subjects are all of ``results`` and whose predicate is
    ``body`` (:func:`execsys.receipt.build`), signed when ``signer`` is given. Written as sidecars
    are, never through a planted symlink; one that cannot be made or written is an entry in
    ``errors`` naming the receipt."""
    from execsys import receipt

    prepared = PreparedSidecars(what="receipt")
    digested: receipt.Digested | Exception | None = None
    for result in results:
        target = receipt_path(Path(result["path"]), sidecar_dir)
        try:
            if digested is None:  # once for all the receipts: each has every result as a subject
                try:
                    digested = receipt.digest_results(results)
                except (OSError, InputError) as exc:
                    digested = exc
            if isinstance(digested, Exception):
                raise digested
            envelope = receipt.build(body, digested, target, signer, attached_after=attached_after)
            prepared.writes.append(prepare_write(target, json_bytes(envelope), follow_symlinks=False))
            prepared.envelopes.append(envelope)
        except (OSError, InputError) as exc:
            prepared.errors.append({"receipt": os.fspath(target), "error": _reason(exc)})
    return prepared


def keep_receipts(ledger: Any, parent: str, identity: str | None, receipts: PreparedSidecars) -> None:
    """A ``receipt`` ledger row (under ``parent``, the run or attach) for each receipt written."""
    from execsys.receipt import signed_by

    written = set(receipts.committed)
    for write, envelope in zip(receipts.writes, receipts.envelopes, strict=True):
        path = os.fspath(write.target)
        if path not in written:
            continue
        ledger.append("receipt", {"run": parent, "path": path, "summary": f"receipt {path}: {signed_by(envelope)}",
                                  "envelope": envelope},
                      identity=identity, parent=parent, key=f"receipt:{path}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)


def earlier_records(sidecar: Path, run_id: str) -> list[str]:
    """The record ids the sidecar at ``sidecar`` names (its own, then its ``previous``), newest first."""
    from execsys.fsutil import read_json_object

    body = read_json_object(sidecar, "run sidecar") if sidecar.is_file() and not sidecar.is_symlink() else None
    if body is None or not str(body.get("schema") or "").startswith(("execsys.run/", "execsys.attach/")):
        return []
    previous = body.get("previous")
    earlier = [body.get("id"), *(previous if isinstance(previous, list) else [])]
    ids = [i for i in earlier if isinstance(i, str) and i.startswith(("run-", "attach-")) and i != run_id]
    return list(dict.fromkeys(ids))
