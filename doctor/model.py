"""The doctor's results as plain data: one hazard, one host, one whole report.

Every face (CLI, TUI, ledger, the remote side over SSH) passes these around and
renders them; ``to_json`` gives the documented ``execsys.doctor/1`` shape. The
module is stdlib-only because it is also shipped to remote hosts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = "execsys.doctor/1"
STATUSES = ("ok", "warn", "fail", "skip", "error")
# Which statuses keep a report from being clean. An ``error`` counts: a check that could
# not look is not evidence of a clean system.
BLOCKING = ("fail", "error")


@dataclass
class HazardResult:
    """The outcome of one hazard check on one host."""

    id: str
    status: str
    summary: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    duration_s: float = 0.0  # not part of the JSON contract; shown with -v

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown hazard status {self.status!r}")

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "summary": self.summary,
                "evidence": list(self.evidence), "fix": self.fix}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HazardResult:
        return cls(id=str(data["id"]), status=str(data["status"]), summary=str(data.get("summary", "")),
                   evidence=[str(e) for e in data.get("evidence", [])], fix=str(data.get("fix", "")),
                   duration_s=float(data.get("duration_s", 0.0) or 0.0))


def headline(findings: list[str]) -> str:
    """A hazard's one-line summary from its findings: the first, and how many more the evidence lists."""
    return findings[0] + (f" (+{len(findings) - 1} more)" if len(findings) > 1 else "")


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
    def verdict(self) -> str:
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
    def verdict(self) -> str:
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
