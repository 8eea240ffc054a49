"""nhc: the program ``contrib/nhc/execsys.nhc`` runs for LBNL Node Health Check.

NHC checks are bash functions ``check_<class>_<purpose>`` that fail with ``die 1 "message"`` and
pass with ``return 0``; with ``NHC_RM=slurm`` NHC drains the node itself with that message.
``check_execsys_doctor`` runs ``execsys doctor --node-check nhc`` and turns exit 1 into
``die 1 "<line>"``; exit 2 (execsys could not check) is logged and passes, as a Prolog fails open:
a node is not marked down because execsys could not look.
"""

from __future__ import annotations

from execsys.doctor.node_checks.check import Outcome, Verdict

ID = "nhc"
EXIT = {"ok": 0, "fail": 1, "unknown": 2}


def outcome(verdict: Verdict, drain_requested: bool = False) -> Outcome:
    del drain_requested  # NHC drains through its resource-manager support, not through execsys
    return Outcome(EXIT[verdict.level], verdict.line, log=verdict.line if verdict.level == "unknown" else None)
