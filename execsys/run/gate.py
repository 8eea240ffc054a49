"""Step 1, the gate: the doctor's ten hazards with the declaration's defaults, before the harness starts.

A result produced in a hazardous environment (a stray listener on the engine's port, a shadowed
binary) measures the hazard, not the system. A failing hazard refuses the run unless the operator
overrides it with a reason, which the run record keeps; ``warn`` demotes fails to warnings and
``off`` skips the doctor. Every doctor report is appended to the ledger, like ``execsys doctor``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from execsys.ledger import Ledger

if TYPE_CHECKING:
    from execsys.run.options import GateMode


GateVerdict = Literal["clean", "hazards", "off"]


@dataclass
class GateOutcome:
    mode: GateMode
    verdict: GateVerdict
    report_id: str | None
    failing: list[str] = field(default_factory=list)  # "hazard-id: summary"
    override: str | None = None

    @property
    def refused(self) -> bool:
        return self.mode == "fail" and bool(self.failing) and self.override is None

    @property
    def overridden(self) -> bool:
        return self.mode == "fail" and bool(self.failing) and self.override is not None

    @property
    def passed(self) -> bool:
        return not self.failing

    def to_json(self) -> dict[str, Any]:
        return {"report": self.report_id, "verdict": self.verdict, "gate_mode": self.mode,
                "failing": self.failing, "override": self.override}


def run_gate(declaration: Any, mode: GateMode, override: str | None, ledger: Ledger, lock: Any = None) -> GateOutcome:
    """Run the doctor as ``execsys doctor --lock`` would: set up by the declaration (``[doctor]``,
    ``[runtime]``, ``[environment]``) and checked against the lock's pins, so the gate is never weaker."""
    if mode == "off":
        return GateOutcome(mode, "off", None, override=override)
    from execsys.doctor.runner import DoctorOptions, run_doctor

    options = DoctorOptions.from_sources(declaration, lock)
    report = run_doctor(options)
    report_id = ledger.append("doctor", report.to_json())
    failing = [f"{r.id}: {r.summary}" for r in report.hazards if r.status in ("fail", "error")]
    failing += [f"host {h.name}: {h.error}" for h in report.unreachable]
    return GateOutcome(mode, report.verdict, report_id, failing, override)
