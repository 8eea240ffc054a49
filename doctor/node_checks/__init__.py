"""The doctor as the check program a fleet engine already runs: one module per engine's contract.

Fleets run node checks through Slurm (``HealthCheckProgram``, ``Prolog``), Kubernetes
node-problem-detector custom plugins and LBNL NHC, and will not adopt another daemon. Each mode
here turns one doctor run into that engine's contract -- an exit code, one short line, and for
Slurm the drain it must perform itself -- so the ten hazards are checked where the fleet already
checks nodes. ``check`` holds what all modes share (the environment to inspect, the worst finding);
``registry`` lists the modes.

    options = NodeCheckOptions.from_sources(declaration, None, mode="npd")
    report = run_node_check(options)            # never prints
    report.exit_code, report.line
"""

from execsys.doctor.node_checks.check import NodeCheckOptions, NodeCheckReport, run_node_check

__all__ = ["NodeCheckOptions", "NodeCheckReport", "run_node_check"]
