"""slurm: a Slurm ``HealthCheckProgram`` (``contrib/slurm/``).

slurmd runs it as root on every node every ``HealthCheckInterval`` and kills it after 60 s, and
takes no action on its result: "any action ... must be explicitly performed by the program". So
with ``--drain`` a failing hazard runs ``scontrol update NodeName=$SLURMD_NODENAME State=DRAIN
Reason="execsys: <line>"`` itself. "Could not check" (exit 2) never drains -- a node is not taken
out of service because execsys could not look -- and only logs: slurmd writes ``health_check
failed: rc:2 output:<line>`` to its log. The check, drain included, ends within ``BUDGET_S``.
"""

from __future__ import annotations

from execsys.doctor.node_checks.check import Outcome, Verdict

ID = "slurm"
EXIT = {"ok": 0, "fail": 1, "unknown": 2}


def outcome(verdict: Verdict, drain_requested: bool = False) -> Outcome:
    drain = drain_requested and verdict.level == "fail"
    log = verdict.line if verdict.level == "unknown" else None
    return Outcome(EXIT[verdict.level], verdict.line, log=log, drain=drain)
