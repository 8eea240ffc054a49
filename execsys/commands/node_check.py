"""``execsys doctor --node-check MODE``: the doctor as a fleet engine's check program.

Wiring and rendering only: flags -> ``NodeCheckOptions.from_sources`` -> ``run_node_check`` (in
``execsys.doctor.node_checks``), then the mode's one line on stdout (the whole report with
``--json``), its log line on stderr and in syslog, and its exit code. Nothing here imports rich:
a node check runs every 30-60 s on every node and must stay cheap.

Whatever hangs, the process ends within the budget: a watchdog prints the mode's "could not
check" line and exits with that mode's code (0 for a Prolog, which fails open).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading

from execsys.errors import ExecsysError

NODE_CHECK_HELP = ("run as a fleet engine's check program: slurm (HealthCheckProgram), slurm-prolog (Prolog), "
                   "npd (node-problem-detector plugin), nhc (LBNL NHC); see contrib/")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The node-check flags, added to ``execsys doctor``'s parser. ``--path`` is the doctor's own flag:
    with ``--node-check`` its values are the PATH to inspect (joined with ':')."""
    from execsys.doctor.node_checks import registry

    parser.add_argument("--node-check", metavar="MODE", choices=registry.IDS, help=NODE_CHECK_HELP)
    parser.add_argument("--drain", action="store_true",
                        help="with --node-check slurm: drain this node (scontrol) on a failing hazard")
    parser.add_argument("--env-from", metavar="FILE|pid:N",
                        help="with --node-check: inspect this environment (an env file, or a process's)")


def _log(line: str) -> None:
    from execsys.redact import redact_text
    from execsys.termsafe import shown

    line = shown(redact_text(line))  # scontrol's output is in it: not execsys's own text
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    try:
        import syslog

        syslog.openlog("execsys", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_WARNING, line)
    except (ImportError, OSError):  # no syslog on this host: stderr has the line
        pass


def _finish(code: int) -> int:
    """Return the exit code; if an abandoned check still runs in a worker thread, exit now instead of
    waiting for it at interpreter shutdown (concurrent.futures joins its workers there)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        os._exit(code)
    return code


def _watchdog(mode: str, budget: float) -> threading.Timer:
    from execsys.doctor.node_checks.check import unknown_report

    def fire() -> None:
        report = unknown_report(mode, f"the node check did not finish within {budget:.0f} s")
        sys.stdout.write(report.line + "\n")
        if report.log:
            _log(report.log)
        sys.stdout.flush()
        os._exit(report.exit_code)

    timer = threading.Timer(budget, fire)
    timer.daemon = True
    timer.start()
    return timer


def run(args: argparse.Namespace) -> int:
    from execsys.doctor.node_checks.check import BUDGET_S, NodeCheckOptions, run_node_check, unknown_report

    mode = args.node_check
    watchdog = _watchdog(mode, BUDGET_S + 5.0)
    try:
        from execsys import declaration

        options = NodeCheckOptions.from_sources(
            declaration.load(args.config), None, mode=mode, drain=args.drain or None,
            path=":".join(args.paths) if args.paths else None, env_from=args.env_from,
            commands=args.commands, ports=args.ports, venvs=args.venvs, repos=args.repos,
            env_file=args.env_file, pid=args.pid, process=args.process, layers=args.layers,
            only=args.only or None, strict=args.strict or None, timeout=args.timeout,
        )
        report = run_node_check(options)
    except ExecsysError as exc:
        if mode != "slurm-prolog":
            raise
        report = unknown_report(mode, str(exc))  # a usage error must not drain every node: fail open
    watchdog.cancel()
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(report.line + "\n")
    if report.log:
        _log(report.log)
    if report.drain is not None:
        drained = report.drain
        if drained.get("returncode") != 0:
            _log(f"execsys: could not drain {drained.get('node')}: {drained.get('output') or 'no output'}")
    return _finish(report.exit_code)
