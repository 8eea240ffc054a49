"""``execsys tui``: the Textual app over the same engines as the CLI (also what bare ``execsys`` opens)."""

from __future__ import annotations

import argparse

from execsys.cli import add_sources
from execsys.errors import ExitCode, UsageError

HELP = "open the terminal UI: doctor, identity, probes, scope and plan, in order"
DESCRIPTION = """\
One place that walks through the procedure in order: 1 Doctor (the ten hazards, live, on this
machine and any --host), 2 Identity (declare and pin the twelve components), 3 Probes (agreement
rates across an axis), 4 Scope & plan (what the measurements license; a paired plan). Probes and
plans stay behind a gate until the doctor finds nothing failing, or you override it -- and the
override is recorded with the run.

Keys: 1-4 (or F1-F4) switch steps, ctrl+p opens the command palette, ctrl+t toggles the dark and
light themes, ctrl+q quits; each step lists its own keys in the footer. Usable at 80x24 over SSH.

examples:
  execsys                                  (in a terminal) the same as 'execsys tui'
  execsys tui --config eval/execsys.toml --ledger /data/execsys.sqlite3
  execsys tui --host gpu1 --host gpu2      check two remote hosts beside this one
  execsys tui --light                      start with the light theme
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sources(parser)
    parser.add_argument("--host", action="append", default=[], metavar="DEST",
                        help="also check this SSH destination in the doctor step (repeatable)")
    parser.add_argument("--light", action="store_true", help="start with the light theme (ctrl+t toggles)")


def run(args: argparse.Namespace) -> int:
    import sys

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("the TUI needs an interactive terminal (for scripts, use the subcommands: see 'execsys --help')")
    from execsys.tui.app import DARK, LIGHT, ExecsysApp

    app = ExecsysApp(config=args.config, lock=args.lock, ledger=args.ledger, hosts=args.host, theme=LIGHT if args.light else DARK,
                     show_tracebacks=args.debug)
    result = app.run()
    return exit_code_of(app, result)


def exit_code_of(app, result: int | None) -> int:
    """The shell's exit code for a finished app: a crash is never 0, and says what broke in one line."""
    import sys

    from execsys.redact import redact_text

    crash = getattr(app, "crash", None)
    if crash is not None or app.return_code:
        what = f"{type(crash).__name__}: {' '.join(str(crash).split())}" if crash is not None else "the app failed"
        sys.stderr.write(f"execsys tui: internal error: {redact_text(what)} "
                         "(run again with --debug for the traceback, and please report it)\n")
        return int(ExitCode.INTERNAL)
    return int(result or ExitCode.OK)
