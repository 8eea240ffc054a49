"""``execsys doctor``: check the ten layered-environment hazards, here and on ``--host``s.

Parses flags into ``DoctorOptions`` (flags override ``execsys.toml``, which
overrides the GPU-box defaults), runs ``execsys.doctor.runner.run_doctor``,
prints the report (or its JSON) and appends it to the ledger as kind ``doctor``.
"""

from __future__ import annotations

import argparse

from execsys.cli import add_json, add_sources, positive_float
from execsys.errors import ExitCode

HELP = "check the ten environment hazards (locally and over SSH)"
DESCRIPTION = """\
Find the defects of layered environments (containers in VMs, interop shells, mounted
filesystems, shared GPU boxes) that look like model weakness, before any run counts:

  binary-aliasing     the program that runs is not the one pinned / another shares its name
  interop-mangling    arguments arrive altered after crossing ssh, docker exec, sudo, bash -lc
  stub-executables    0-byte files, dead shebangs, foreign-architecture binaries, hangs
  unread-env-config   the serving process never read the env file / artifact you declared
  baked-paths         moved venvs, RPATH/RUNPATH, .pth lines pointing at missing paths
  package-prefixes    pip installs elsewhere than python3 imports; user-site shadows
  lost-mode-bits      execute bits git records are not on disk (core.fileMode=false hides it)
  port-collisions     more than one process, or the wrong one, listens on the engine port
  clock-skew          unsynchronised clocks, unstable clocksource, skew between hosts

Every list defaults from execsys.toml ([doctor], [runtime], [environment], [artifact]), else
to what matters on a GPU box. Read-only: it changes nothing and prints no secrets.
A finding you have judged harmless is silenced by its id (shown with -v) in execsys.toml:
[doctor] accept = ["lost-mode-bits/core-filemode-false"]; it no longer makes the hazard warn
or fail, and is still shown, marked accepted.

examples:
  execsys doctor                                  ~1 s, one line per hazard
  execsys doctor -v                               with evidence and the fix
  execsys doctor --only port-collisions --port 8000 --process llama-server
  execsys doctor --layer "ssh gpu1" --layer "docker exec -i box"
  execsys doctor --host gpu1 --host ubuntu@10.0.0.7 --json
  execsys doctor --strict                         warnings fail too (for CI)

exit codes: 0 no hazard failed, 1 a hazard failed (or a host/check could not be inspected;
with --strict also a warning), 2 usage error.
"""


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range 1-65535: {value}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a process id: {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_json(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="show evidence and the fix for each hazard")
    add_sources(parser, lock_help="the pinned identity; fills in the artifact, engine and endpoint the declaration "
                                  "leaves open (default: execsys.lock.json beside the declaration)")
    parser.add_argument("--cmd", dest="commands", action="append", metavar="NAME",
                        help="a command to check (repeatable; default: python3 python pip pip3 git nvidia-smi + "
                             "engines on PATH)")
    parser.add_argument("--port", dest="ports", action="append", type=_port, metavar="N",
                        help="a port the engine serves on (repeatable; default: ports of running engines)")
    parser.add_argument("--path", dest="paths", action="append", metavar="P",
                        help="a file or directory whose shebangs, ELF RPATH/RUNPATH and .pth files to check")
    parser.add_argument("--venv", dest="venvs", action="append", metavar="DIR",
                        help="a virtual environment to check (default: the active one)")
    parser.add_argument("--repo", dest="repos", action="append", metavar="DIR",
                        help="a harness git repository (default: the repository of the current directory)")
    parser.add_argument("--env-file", metavar="F", help="the env file the serving process should have read")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--pid", type=_pid, metavar="PID", help="the serving process")
    who.add_argument("--process", metavar="NAME", help="the serving process, by name")
    parser.add_argument("--layer", dest="layers", action="append", metavar='"PREFIX"',
                        help='a layer commands cross, as a command prefix: "ssh gpu1", "docker exec -i box", '
                             '"sudo -u svc", "bash -lc" (repeatable)')
    parser.add_argument("--host", dest="hosts", action="append", metavar="DEST",
                        help="also inspect this host over ssh: alias, user@host, ssh://user@host:port (repeatable)")
    parser.add_argument("--only", action="append", metavar="ID", default=[],
                        help="run only this hazard (repeatable)")
    parser.add_argument("--strict", action="store_true", help="warnings count as failures (exit 1)")
    parser.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                        help="per program invocation (default 3; checks and hosts scale from it)")
    parser.add_argument("--clock-skew-threshold-ms", type=positive_float, metavar="MS",
                        help="inter-host clock skew that fails (default 250, or [doctor] clock_skew_threshold_ms)")
    from execsys.commands import node_check

    node_check.add_arguments(parser)


def options_from_args(args: argparse.Namespace):
    """Flags -> DoctorOptions (flags > declaration > lock); raises UsageError/InputError with one clear line."""
    from execsys.doctor.runner import DoctorOptions
    from execsys.sources import load_sources

    sources = load_sources(args.config, args.lock)
    if sources.declaration.warnings:
        from execsys.console import warn

        for line in sources.declaration.warnings:
            warn(line)
    return DoctorOptions.from_sources(
        sources.declaration, sources.lock,
        commands=args.commands, ports=args.ports, paths=args.paths, venvs=args.venvs, repos=args.repos,
        env_file=args.env_file, pid=args.pid, process=args.process, layers=args.layers, hosts=args.hosts,
        only=args.only or None, strict=args.strict or None, timeout=args.timeout,
        clock_skew_threshold_ms=args.clock_skew_threshold_ms,
    )


def run(args: argparse.Namespace) -> int:
    if args.node_check:  # before the renderer and the ledger: a node check needs neither, and runs every minute
        from execsys.commands import node_check

        return node_check.run(args)
    from execsys import console
    from execsys.commands.doctor_render import render
    from execsys.doctor.runner import run_doctor
    from execsys.ledger import Ledger

    options = options_from_args(args)
    status = None
    if not args.json and console.stderr_is_terminal():
        status = console.err().status("checking the ten hazards ...")
        status.start()
    try:
        report = run_doctor(options)
    finally:
        if status is not None:
            status.stop()
    body = report.to_json()
    try:
        with Ledger.open(args.ledger) as ledger:
            record_id = ledger.append("doctor", body)
    except Exception as exc:  # noqa: BLE001 - a ledger problem must not hide the findings
        record_id = None
        console.warn(f"report not recorded in the ledger: {exc}")
    if args.json:
        console.print_json(body)
    else:
        render(report, console.out(), verbose=args.verbose)
        if record_id:
            console.err().print(f"[dim]recorded as {record_id}[/]", highlight=False)
    return ExitCode.OK if report.exit_code == 0 else ExitCode.FINDING
