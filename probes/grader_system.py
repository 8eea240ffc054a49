"""Which grader a grader probe measured: ``[grader]`` observed before the first grading and after the last.

A grader probe measures whatever grades its cases. A ``grade.py`` edited after the lock was pinned
(or while the probe runs), a new ``math-verify`` release or a judge alias resolving to another
snapshot still answers, and without a look at it the probe's agreement would count for the pinned
identity -- the noise of another grader. So the probe observes the grader exactly as ``execsys pin``
records it (:func:`execsys.observe.grader.observe_grader`, the declared ``[grader]`` resolved beside
the declaration) at its start and end, and compares each look with the lock's grader component by
verify's own comparison (:func:`execsys.identity.verify.component_changes`):

* ``matches-lock``  both looks are the pinned grader;
* ``differs``       some pinned fact is not what graded: the record counts toward no identity;
* ``unverified``    no lock, a lock that pins no grader, or a judge that could not be observed.

As for the serving runtime (:mod:`execsys.probes.system`), facts that move on every look are not
compared: the judge's serving process (pid, start time), and a ``system_fingerprint`` only when both
sides have one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from execsys.ledger import now_iso

from .system import DIFFERS, MATCHES, UNVERIFIED, overall_verdict

SENTENCE = "the grader answering this probe is not the pinned one"
STEP_KEYS = {"start": "system:grader:start", "end": "system:grader:end"}

# The judge's serving process and its mood of the moment: never compared (as _NOT_PINNED there).
_NOT_PINNED = ("observed.judge.endpoint.error", "observed.judge.process.pid", "observed.judge.process.started_at")
# Given on one look and not the next: compared only when both sides have a value (as _OPTIONAL there).
_OPTIONAL = ("observed.judge.completion.system_fingerprint", "observed.judge.system_fingerprint",
             "observed.judge.endpoint.system_fingerprint")


def lock_pins_a_grader(pinned: dict[str, Any] | None) -> bool:
    declared = (pinned or {}).get("declared") or {}
    return bool(declared.get("command") or declared.get("judge") or declared.get("packages"))


def _counted(change: dict[str, Any]) -> bool:
    field = str(change.get("field") or "")
    if field in _NOT_PINNED:
        return False
    return not (field in _OPTIONAL and (change.get("old") is None or change.get("new") is None))


def describe(change: dict[str, Any], observed: dict[str, Any]) -> str:
    """One change in words: ``grader.command.files grade.py changed``, ``grader judge model a -> b``."""
    from execsys.observe.grader import change_summary

    field = str(change.get("field") or "")
    if field.startswith("observed.command.files[") and field.endswith((".digest", ".path")):
        index = field.removeprefix("observed.command.files[").split("]", 1)[0]
        files = (observed.get("command") or {}).get("files") or []
        try:
            name = Path(str(files[int(index)]["path"])).name
        except (ValueError, IndexError, KeyError, TypeError):
            name = f"file {index}"
        return f"grader.command.files {name} changed"
    return change_summary([change]) or f"grader.{field.removeprefix('observed.')} changed"


def sentence(differences: list[dict[str, Any]]) -> str:
    seen: list[str] = []
    for difference in differences:
        words = str(difference.get("words") or difference.get("field"))
        if words not in seen:
            seen.append(words)
    return f"{SENTENCE}: " + "; ".join(seen)


class GraderObserver:
    """Observes the declared grader at the start and end of one grader probe, judged against the lock."""

    def __init__(self, *, declared: dict[str, Any], base_dir: Path, pinned: dict[str, Any] | None,
                 lock_id: str | None, harness_interpreter: str | None = None) -> None:
        self.declared = declared
        self.base_dir = base_dir
        self.pinned = pinned if lock_pins_a_grader(pinned) else None
        self.lock_id = lock_id
        self.harness_interpreter = harness_interpreter

    def observe(self, at: str) -> dict[str, Any]:
        """``{"at", "time", "observed", "verdict", "differences", "reason"}`` for one look."""
        from execsys.identity.observe import _normalise
        from execsys.identity.verify import component_changes
        from execsys.observe.grader import judge_error, observe_grader

        entry: dict[str, Any] = {"at": at, "time": now_iso(), "observed": {}, "differences": [], "reason": None}
        try:
            observed = _normalise(observe_grader(self.declared, base_dir=self.base_dir,
                                                 harness_interpreter=self.harness_interpreter,
                                                 require_endpoint=False))
        except Exception as exc:  # noqa: BLE001 - a look that fails is unverified, never fatal to the probe
            entry.update(verdict=UNVERIFIED, reason=f"could not observe the grader ({type(exc).__name__}: {exc})")
            return entry
        entry["observed"] = observed
        if self.lock_id is None or self.pinned is None:
            entry.update(verdict=UNVERIFIED, reason="no pinned identity to compare with" if self.lock_id is None
                         else "the lock pins no grader (no [grader] command, judge or packages)")
            return entry
        changes = [c for c in component_changes("grader", self.pinned, observed, self.declared) if _counted(c)]
        unreachable = judge_error(observed)
        if unreachable:  # what the judge would have said is unknown, not changed (as verify keeps it)
            changes = [c for c in changes if not str(c["field"]).startswith("observed.judge.")]
        entry["differences"] = [{**c, "words": describe(c, observed), "at": at} for c in changes]
        if changes:
            entry["verdict"] = DIFFERS
        elif unreachable:
            entry.update(verdict=UNVERIFIED, reason=f"could not observe the {unreachable}")
        else:
            entry["verdict"] = MATCHES
        return entry


def summarise(entries: list[dict[str, Any]], *, lock_id: str | None) -> dict[str, Any]:
    """``system_check`` from the looks at the start and end (in that order)."""
    differences = [d for e in entries for d in e.get("differences") or []]
    verdict = overall_verdict(entries, differences)
    reasons = [e["reason"] for e in entries if e.get("reason")]
    by_at = {e.get("at"): e for e in entries}
    return {
        "verdict": verdict,
        "lock": lock_id,
        "at_start": (by_at.get("start") or {}).get("observed"),
        "at_end": (by_at.get("end") or {}).get("observed"),
        "differences": differences,
        "reason": (reasons[0] if reasons else "no observation was taken") if verdict == UNVERIFIED else None,
        "sentence": sentence(differences) if differences else None,
        "observations": [{"at": e.get("at"), "time": e.get("time"), "verdict": e.get("verdict")} for e in entries],
    }
