"""Plain state shared by the TUI's steps: the gate, the header's facts, the paths in use.

Nothing here imports textual: it is the small amount of bookkeeping the app keeps between
steps (which hosts were checked, which hazards fail, whether the operator overrode the gate),
kept apart from widgets so the rules read in one place and tests can reach them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEPS: tuple[tuple[str, str], ...] = (
    ("doctor", "Doctor"),
    ("identity", "Identity"),
    ("probes", "Probes"),
    ("scope", "Scope & plan"),
)
"""The four steps in order: (mode name, label). Key ``1``..``4`` opens each."""

LOCAL = "local"
"""Column name for this machine in the doctor's side-by-side view."""

STATUS_ORDER: tuple[str, ...] = ("ok", "warn", "fail", "skip", "error")
"""The doctor's result statuses in the order the summary counts them."""


@dataclass
class Paths:
    """Where the declaration, the lock and the ledger live for this session."""

    config: Path
    lock: Path
    ledger: Path | None

    @classmethod
    def resolve(cls, config: str | Path | None, ledger: str | Path | None, lock: str | Path | None = None) -> Paths:
        """The same defaults as every command: see :mod:`execsys.sources`."""
        from execsys.sources import config_path, lock_path

        return cls(
            config=config_path(config),
            lock=lock_path(lock, config),
            ledger=Path(ledger).expanduser() if ledger else None,
        )


@dataclass
class DoctorState:
    """Results as they arrive: ``results[host][hazard id] = result``; ``running`` while checks run."""

    hosts: list[str] = field(default_factory=lambda: [LOCAL])
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    running: bool = False
    finished_once: bool = False
    report_ids: list[str] = field(default_factory=list)
    hazard_ids: list[str] = field(default_factory=list)

    host_errors: dict[str, str] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    """Remote hosts the operator removed: they stay removed (a run still checking them, the declaration
    read again) until added back by hand."""
    cancelled: set[tuple[str, str]] = field(default_factory=set)
    """(host, hazard id) checks that Esc stopped before they finished: not evidence either way."""
    last_run_cancelled: bool = False

    def failing(self) -> list[tuple[str, str]]:
        """(host, hazard id) pairs that keep the report from being clean, for the current hosts only.

        The doctor's own rule decides which statuses block (``fail`` and ``error``: a check that
        could not look is not evidence of a clean system); an unreachable host blocks as a whole.
        """
        from execsys.doctor.model import BLOCKING

        found = []
        for host in self.hosts:
            if host in self.host_errors:
                found.append((host, "unreachable"))
            for hazard_id, result in self.results.get(host, {}).items():
                if getattr(result, "status", None) in BLOCKING:
                    found.append((host, f"{hazard_id} ({result.status})"))
        return found

    def status_counts(self) -> dict[str, int]:
        """How many results of each status the current hosts have (``{"ok": 8, "fail": 1, ...}``)."""
        totals: dict[str, int] = {}
        for host in self.hosts:
            for result in self.results.get(host, {}).values():
                status = getattr(result, "status", "?")
                totals[status] = totals.get(status, 0) + 1
        return totals

    def unreachable_hosts(self) -> list[str]:
        """Current hosts that could not be inspected and have no result of their own to count."""
        return [host for host in self.hosts if host in self.host_errors and not self.results.get(host)]

    def blocking_summary(self) -> str:
        """What blocks, counted and named as the Doctor's summary line counts it: ``1 fail, 10 error``.

        The header shows this beside the verdict. A host that could not be inspected already counts
        through its ``error`` rows; only one without any rows is named as unreachable."""
        from execsys.doctor.model import BLOCKING

        totals = self.status_counts()
        parts = [f"{totals[status]} {status}" for status in STATUS_ORDER if status in BLOCKING and totals.get(status)]
        unreachable = self.unreachable_hosts()
        if unreachable:
            parts.append(f"{len(unreachable)} host{'s' if len(unreachable) != 1 else ''} unreachable")
        return ", ".join(parts)

    def verdict(self) -> str:
        """``checking`` / ``not run`` / ``hazards`` / ``cancelled`` / ``incomplete`` / ``clean`` for the header and the gate.

        ``cancelled`` only when the last run was stopped and left a hazard without any result; a stopped
        re-run of checks that had results keeps the verdict those results give."""
        if self.running:
            return "checking"
        if not self.finished_once:
            return "not run"
        if self.failing():
            return "hazards"
        if self.unchecked():
            return "cancelled" if self.last_run_cancelled else "incomplete"
        return "clean"

    def gate_open(self) -> bool:
        """The gate opens only when every current host was checked and nothing fails."""
        if self.running or not self.finished_once:
            return False
        if self.unchecked():
            return False
        return not self.failing()

    def unchecked(self) -> list[str]:
        """Hosts with at least one hazard that has no result yet (a stopped or partial run)."""
        return [
            host for host in self.hosts
            if any(hazard_id not in self.results.get(host, {}) for hazard_id in self.hazard_ids)
            or host not in self.results
        ]

    def gate_reason(self) -> str:
        if self.running:
            return "the doctor is still checking"
        if not self.finished_once:
            return "the doctor has not finished a check of this environment"
        failing = self.failing()
        missing = self.unchecked()
        if missing and not failing:
            stopped = " (the last run was cancelled)" if self.last_run_cancelled else ""
            return f"not every hazard was checked on {', '.join(missing)}{stopped}"
        if failing:
            listed = ", ".join(f"{hazard} on {host}" for host, hazard in failing[:4])
            more = f" and {len(failing) - 4} more" if len(failing) > 4 else ""
            return f"{len(failing)} blocking finding{'s' if len(failing) != 1 else ''}: {listed}{more}"
        return "the doctor found no failing hazard"
