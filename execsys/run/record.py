"""Step 7, the record: ``execsys.run/1`` in the ledger and a sidecar beside each result file.

A sidecar (``execsys.run/2``) is the run record plus ``result`` (the file it describes) and
``previous``: the ids of the earlier runs (or attaches) whose sidecar this one replaced at that
path, newest first, so a result two runs wrote names the latest and still links the earlier ones
(each is in the ledger). Readers accept ``execsys.run/1`` sidecars, which have no ``previous``.

The verdict is one word a reader can act on, chosen by precedence (the booleans behind it are
kept too): ``interrupted`` (stopped by a signal; partial results still digested) > ``failed`` (the
harness exited non-zero) > ``drifted`` (the runtime changed mid-run, or verify-after found a new
identity: compare causally with nothing) > ``overridden`` (ran past a failing gate) > ``clean``.
A run the gate or the identity check refused never started: ``refused``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execsys.fsutil import atomic_write_json
from execsys.harnesses.base import sidecar_name
from execsys.redact import scrub

SCHEMA = "execsys.run/1"
SIDECAR_SCHEMA = "execsys.run/2"  # SCHEMA's body plus "result" and "previous"
VERDICTS = ("clean", "drifted", "overridden", "failed", "interrupted", "refused")


@dataclass
class RunRecord:
    """One run, as recorded. ``to_json`` is the documented ``execsys.run/1`` body."""

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
        return bool(self.drift) or mismatches or (self.verify_after or {}).get("verdict") == "new-identity"

    @property
    def overridden(self) -> bool:
        return bool(self.doctor.get("failing")) and self.doctor.get("override") is not None

    @property
    def gate_passed(self) -> bool:
        return not self.doctor.get("failing")

    @property
    def verdict(self) -> str:
        if self.refused:
            return "refused"
        for name in ("interrupted", "failed", "drifted", "overridden"):
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
        """The child's code when it failed or was interrupted; 1 when drifted or refused; else 0."""
        if self.refused:
            return 1
        if self.interrupted:
            code = self.exit_code if self.exit_code is not None else 130
            return 128 - code if code < 0 else (code or 130)
        if self.failed:
            return int(self.exit_code or 1)
        return 1 if self.drifted else 0

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
            first = self.drift[0]
            text = (f"the runtime changed during the run ({first.get('component')} at {first.get('at')}: "
                    f"{_brief(first.get('before'))} -> {_brief(first.get('after'))}"
                    + (f"; {len(self.drift)} drift events" if len(self.drift) > 1 else "") + ")")
            return f"{text}; {counted}" if counted else text
        if counted:
            return counted
        after = self.verify_after or {}
        if after.get("verdict") == "new-identity":
            return f"the system after the run is not the pinned one ({after.get('sentence') or 'new identity'})"
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
        problem = self.hook_problem
        return f"{text}; {problem}" if problem else text


def _brief(value: Any) -> str:
    text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= 100 else text[:97] + "..."


def sidecar_path(result: Path, sidecar_dir: Path | None) -> Path:
    """``<result>.execsys.json`` beside the result, or in ``sidecar_dir`` under the same name."""
    name = sidecar_name(result.name)
    return (sidecar_dir / name) if sidecar_dir is not None else result.with_name(name)


def write_sidecars(record: RunRecord, sidecar_dir: Path | None) -> list[str]:
    """One sidecar per result (atomic, scrubbed): the run record plus which result it describes."""
    written: list[str] = []
    body = record.to_json()
    for result in record.results:
        target = sidecar_path(Path(result["path"]), sidecar_dir)
        atomic_write_json(target, scrub(dict(body, schema=SIDECAR_SCHEMA, result=result,
                                             previous=earlier_records(target, record.id))))
        written.append(os.fspath(target))
    return written


def earlier_records(sidecar: Path, run_id: str) -> list[str]:
    """The record ids the sidecar at ``sidecar`` names (its own, then its ``previous``), newest first."""
    from execsys.fsutil import read_json_object

    body = read_json_object(sidecar, "run sidecar") if sidecar.is_file() else None
    if body is None or not str(body.get("schema") or "").startswith(("execsys.run/", "execsys.attach/")):
        return []
    previous = body.get("previous")
    earlier = [body.get("id"), *(previous if isinstance(previous, list) else [])]
    ids = [i for i in earlier if isinstance(i, str) and i.startswith(("run-", "attach-")) and i != run_id]
    return list(dict.fromkeys(ids))
