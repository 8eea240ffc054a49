"""Contemporaneous paired control: a pre-registered, counterbalanced schedule for two arms.

When a reproducibility boundary is unstable, one design still supports a causal claim: both arms
run inside one window, everything fixed but the intervention, and the order of arms fixed in
advance and counterbalanced, so that "which arm ran first" cannot pass for the effect.

One module per responsibility:

- :mod:`~execsys.plan.schedule` -- the plan (``execsys.plan/1``), its seeded counterbalanced
  order and digest, registration in the ledger, ``plan new`` (:class:`NewPlanOptions`, :func:`make_plan`);
- :mod:`~execsys.plan.checks` -- the registry of execution checks (order, window, restarts,
  placement, endpoint identity, completeness, pinned identity) and ``plan check``;
- :mod:`~execsys.plan.placement` -- remote placement conditions (a)-(d) over SSH;
- :mod:`~execsys.plan.paired` -- the paired difference and the exact McNemar test;
- :mod:`~execsys.plan.log` -- the executed log (``execsys.plan-log/1``);
- :mod:`~execsys.plan.system` -- each arm's serving runtime observed against its own lock (per-arm identity);
- :mod:`~execsys.plan.run` -- ``plan run``: :class:`PlanRunOptions`, :func:`run_plan`, its events.
"""

from execsys.plan.checks import CHECKS, Check, Execution, PlanCheck, check_executed, check_plan, run_checks
from execsys.plan.log import LOG_SCHEMA, ExecutedLog, read_log
from execsys.plan.paired import PairedStats, is_correct, paired_stats
from execsys.plan.placement import PlacementReport, check_placement, host_admissible
from execsys.plan.run import (
    RUN_SCHEMA,
    RUN_SCHEMAS,
    ArmAnswered,
    ArmSystemDiffers,
    CaseSent,
    CheckResult,
    NoPinnedIdentity,
    PairScored,
    PlacementChecked,
    PlanRun,
    PlanRunOptions,
    RestartSeen,
    WindowClosed,
    WindowOpened,
    lock_artifact,
    run_plan,
)
from execsys.plan.schedule import (
    DESIGNS,
    SCHEMA,
    NewPlan,
    NewPlanOptions,
    Plan,
    is_local,
    load_plan,
    load_registered_cases,
    make_plan,
    new_plan,
    parse_assignments,
    plan_from_json,
    plan_record_id,
    register_plan,
    verify_registration,
)

__all__ = [
    "CHECKS", "DESIGNS", "LOG_SCHEMA", "RUN_SCHEMA", "RUN_SCHEMAS", "SCHEMA",
    "ArmAnswered", "ArmSystemDiffers", "CaseSent", "Check", "CheckResult", "Execution", "ExecutedLog", "NewPlan", "NewPlanOptions",
    "NoPinnedIdentity",
    "PairScored", "PairedStats", "PlacementChecked", "PlacementReport", "Plan", "PlanCheck", "PlanRun",
    "PlanRunOptions", "RestartSeen", "WindowClosed", "WindowOpened",
    "check_executed", "check_placement", "check_plan", "host_admissible", "is_correct", "is_local",
    "load_plan", "load_registered_cases", "lock_artifact", "make_plan", "new_plan", "paired_stats",
    "parse_assignments", "plan_from_json", "plan_record_id", "read_log", "register_plan", "run_checks",
    "run_plan", "verify_registration",
]
