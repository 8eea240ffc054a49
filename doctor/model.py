"""The doctor's results as plain data: one hazard, one host, one whole report.

Every face (CLI, TUI, ledger, the remote side over SSH) passes these around and
renders them; ``to_json`` gives the documented ``execsys.doctor/1`` shape. The
module is stdlib-only because it is also shipped to remote hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast, get_args

SCHEMA = "execsys.doctor/1"
# A hazard's status, and a finding's level (a level is never "ok" or "skip"): Literal types, so a
# mistyped status is a type error rather than a silently unknown word
Status = Literal["ok", "warn", "fail", "skip", "error"]
Level = Literal["fail", "error", "warn"]
# a host's or a whole report's verdict
Verdict = Literal["clean", "hazards"]
STATUSES: tuple[Status, ...] = get_args(Status)
# Which statuses keep a report from being clean. An ``error`` counts: a check that could
# not look is not evidence of a clean system.
BLOCKING = ("fail", "error")
# A finding's level, worst first: the worst active finding is the hazard's status.
LEVELS: tuple[Level, ...] = get_args(Level)
# Levels an operator may accept. An ``error`` says the check could not look; accepting it would
# turn "not inspected" into "clean", so it is never silenced.
ACCEPTABLE = ("fail", "warn")
# Kinds of finding the runner itself emits for any hazard (``<hazard>/<kind>``, level ``error``).
RUNNER_FINDINGS = ("check-failed", "check-did-not-finish", "host-not-inspected", "no-remote-result")


@dataclass(frozen=True)
class Finding:
    """One thing a hazard check found, with an id stable across runs and hosts.

    ``id`` is ``<hazard>/<kind>`` (``lost-mode-bits/core-filemode-false``): one id per kind of
    finding, never per path or host, so ``[doctor] accept = ["<id>"]`` in execsys.toml means the
    same thing on every machine. ``accepted`` is set by :func:`fold` from that list: an accepted
    finding no longer decides the status, and is still shown, marked as accepted."""

    level: Level
    text: str
    id: str
    accepted: bool = False

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"unknown finding level {self.level!r}")

    @property
    def active(self) -> bool:
        return not self.accepted

    def shown(self) -> str:
        """The finding as an evidence line: its text, marked when it was accepted."""
        return f"accepted ({self.id}): {self.text}" if self.accepted else self.text

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "level": self.level, "text": self.text, "accepted": self.accepted}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        return cls(level=cast(Level, str(data["level"])), text=str(data["text"]), id=str(data["id"]),
                   accepted=bool(data.get("accepted", False)))


@dataclass
class HazardResult:
    """The outcome of one hazard check on one host."""

    id: str
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    duration_s: float = 0.0  # not part of the JSON contract; shown with -v
    findings: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown hazard status {self.status!r}")

    @property
    def accepted(self) -> list[Finding]:
        return [f for f in self.findings if f.accepted]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "summary": self.summary,
                "evidence": list(self.evidence), "fix": self.fix,
                "findings": [f.to_json() for f in self.findings]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HazardResult:
        return cls(id=str(data["id"]), status=cast(Status, str(data["status"])), summary=str(data.get("summary", "")),
                   evidence=[str(e) for e in data.get("evidence", [])], fix=str(data.get("fix", "")),
                   duration_s=float(data.get("duration_s", 0.0) or 0.0),
                   findings=[Finding.from_json(f) for f in data.get("findings", [])])


def headline(findings: list[str]) -> str:
    """A hazard's one-line summary from its findings: the first, and how many more the evidence lists."""
    return findings[0] + (f" (+{len(findings) - 1} more)" if len(findings) > 1 else "")


def mark_accepted(findings: Iterable[Finding], accept: Iterable[str]) -> list[Finding]:
    """``findings`` with ``accepted`` set on those whose id the operator accepted (warn/fail only)."""
    wanted = set(accept)
    return [replace(f, accepted=f.id in wanted and f.level in ACCEPTABLE) for f in findings]


def status_of(findings: Iterable[Finding], quiet: Status = "ok") -> Status:
    """The one rule from findings to a status: the worst active finding's level, else ``quiet``."""
    levels = {f.level for f in findings if f.active}
    for level in LEVELS:
        if level in levels:
            return level
    return quiet


def fold(hazard_id: str, findings: list[Finding], *, ok: str, fix: str | Mapping[str, str], evidence: Iterable[str] = (),
         accept: Iterable[str] = (), quiet: Status = "ok", listed: bool = False,
         summary: Callable[[list[Finding]], str] | None = None) -> HazardResult:
    """One hazard's result from its findings: the single fold every hazard module uses.

    The status is the worst active (not accepted) finding's level, else ``quiet`` (``ok``, or
    ``skip`` when nothing could be checked). The summary is ``summary(worst active findings)``
    (default: the first of them and how many more), else what was accepted, else ``ok``.
    The evidence lists the findings first (worst first, accepted ones marked), then
    ``evidence``; with ``listed`` the caller's ``evidence`` already holds the finding texts in
    its own order, and only the accepted ones are marked there. ``fix`` (one text, or one per
    status) is shown only when something is active."""
    findings = mark_accepted(findings, accept)
    status = status_of(findings, quiet)
    top = [f for f in findings if f.active and f.level == status]
    accepted = [f for f in findings if f.accepted]
    if top:
        line = summary(top) if summary is not None else headline([f.text for f in top])
    elif accepted:
        # not ``ok``: its words ("one copy of each distribution") would deny what was accepted
        line = headline([f.shown() for f in accepted])
    else:
        line = ok
    if listed:
        marked = {f.text: f.shown() for f in findings if f.accepted}
        lines = [marked.get(text, text) for text in evidence]
        lines += [f.shown() for f in findings if f.accepted and f.text not in lines and f.shown() not in lines]
    else:
        ordered = sorted(findings, key=lambda f: (f.accepted, LEVELS.index(f.level)))
        lines = [f.shown() for f in ordered] + list(evidence)
    advice = (fix if isinstance(fix, str) else fix.get(status, "")) if top else ""
    return HazardResult(hazard_id, status, line, lines, advice, findings=findings)


def blocking(results: list[HazardResult], strict: bool = False) -> list[HazardResult]:
    statuses = BLOCKING + (("warn",) if strict else ())
    return [r for r in results if r.status in statuses]


class _ByStatus:
    """The hazards of a host or a whole report, by status."""

    hazards: list[HazardResult]

    @property
    def failed(self) -> list[HazardResult]:
        return [r for r in self.hazards if r.status == "fail"]

    @property
    def warnings(self) -> list[HazardResult]:
        return [r for r in self.hazards if r.status == "warn"]

    @property
    def errors(self) -> list[HazardResult]:
        return [r for r in self.hazards if r.status == "error"]

    def counts(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for r in self.hazards:
            counts[r.status] += 1
        return counts


@dataclass
class HostReport(_ByStatus):
    """All hazard results for one host (``name`` is ``local`` or the SSH destination)."""

    name: str
    host: dict[str, Any] = field(default_factory=dict)
    hazards: list[HazardResult] = field(default_factory=list)
    duration_s: float = 0.0
    error: str | None = None  # set when the host could not be inspected at all
    strict: bool = False

    @property
    def verdict(self) -> Verdict:
        return "hazards" if self.error or blocking(self.hazards, self.strict) else "clean"

    def result(self, hazard_id: str) -> HazardResult | None:
        return next((r for r in self.hazards if r.id == hazard_id), None)

    def to_json(self) -> dict[str, Any]:
        host = dict(self.host)
        host.setdefault("name", self.name)
        if self.error:
            host["error"] = self.error
        return {"schema": SCHEMA, "host": host, "hazards": [r.to_json() for r in self.hazards],
                "verdict": self.verdict, "duration_s": round(self.duration_s, 3)}


@dataclass
class DoctorReport(_ByStatus):
    """The local host first, then each ``--host`` in the order given."""

    hosts: list[HostReport]
    duration_s: float = 0.0
    strict: bool = False
    remote: bool = False  # whether any --host was asked for (adds the top-level "hosts" list)

    @property
    def local(self) -> HostReport:
        return self.hosts[0]

    @property
    def hazards(self) -> list[HazardResult]:
        return [r for h in self.hosts for r in h.hazards]

    @property
    def unreachable(self) -> list[HostReport]:
        return [h for h in self.hosts if h.error]

    @property
    def verdict(self) -> Verdict:
        return "hazards" if any(h.verdict == "hazards" for h in self.hosts) else "clean"

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "clean" else 1

    def to_json(self) -> dict[str, Any]:
        for h in self.hosts:
            h.strict = self.strict
        body = self.local.to_json()
        body["verdict"] = self.verdict
        body["duration_s"] = round(self.duration_s, 3)
        if self.remote:
            body["hosts"] = [h.to_json() for h in self.hosts]
        return body
