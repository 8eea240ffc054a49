"""``execsys trust``: let a declaration's commands run (``direnv allow`` for execsys.toml)."""

from __future__ import annotations

import argparse
import json
import sys

from execsys.cli import add_json
from execsys.errors import ExitCode, UsageError
from execsys.termsafe import shown

HELP = "trust a declaration, so the commands it declares (layers, restart, grader...) may run"
DESCRIPTION = """\
A declaration can name commands execsys runs: [environment] layers (the doctor), [runtime]
restart and ready (the restart probe), [grader] command and a [probe] extract = "command:..."
(the probes), [tools] mcp commands (pin). An execsys.toml that came with a cloned repository is
somebody else's code, so none of them runs until you trust the file: the doctor skips those
checks with "declaration not trusted: execsys trust", probes and pins refuse (exit 2), the TUI
offers to trust it. `execsys init` trusts what it writes.

Trusting records the BLAKE3 of the file's bytes in trust.json in your data directory
($EXECSYS_DATA_DIR, else the user data dir, as for the ledger); an edited file is untrusted
again. --trust on any command trusts the declaration it reads for that one run, recording nothing.

examples:
  execsys trust                             review ./execsys.toml first: its commands are listed
  execsys trust --config eval/execsys.toml
  execsys trust --list                      every trusted file, and whether it changed since
  execsys trust --revoke --config eval/execsys.toml
  execsys doctor --trust                    trust for this run only (CI, scripts)

exit codes: 0 done, 2 no such declaration, not trusted to revoke, or an unreadable trust store
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help="the declaration (default: $EXECSYS_CONFIG, else ./execsys.toml)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="list the trusted declarations")
    what.add_argument("--revoke", action="store_true", help="untrust the declaration")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from execsys import console, trust

    if args.list:
        if args.config is not None:
            raise UsageError("--list lists every trusted declaration: give it without --config")
        found = trust.entries()
        if args.json:
            sys.stdout.write(json.dumps({"store": str(trust.store_path()),
                                         "declarations": [e.to_json() for e in found]}, indent=2) + "\n")
            return ExitCode.OK
        out = console.out()
        if not found:
            out.print(f"no trusted declarations ({trust.store_path()})", markup=False)
        for entry in found:
            out.print(f"{entry.status:8} {shown(entry.path)}  blake3 {entry.blake3[:16]}  "
                      f"since {entry.trusted_at}", markup=False)
        return ExitCode.OK

    from execsys import declaration, sources

    path = sources.config_path(args.config)
    if args.revoke:
        if not trust.revoke(path):
            raise UsageError(f"{path}: not trusted, nothing to revoke")
        if args.json:
            sys.stdout.write(json.dumps({"revoked": trust.key(path)}) + "\n")
        else:
            console.out().print(f"revoked trust in {shown(str(path))}", markup=False)
        return ExitCode.OK

    decl = declaration.load(path, required=True)  # a file that does not parse is not worth trusting
    commands = trust.declared_commands(decl)
    entry = trust.trust(path)
    if args.json:
        sys.stdout.write(json.dumps({**entry.to_json(), "commands": [
            {"key": k, "command": _redacted(c)} for k, c in commands]}, indent=2) + "\n")
        return ExitCode.OK
    out = console.out()
    out.print(f"trusted {shown(str(path))} (blake3 {entry.blake3[:16]}); an edit untrusts it again",
              markup=False)
    if commands:
        out.print("its declared commands may now run:", markup=False)
        for key, command in commands:
            out.print(f"  {key}: {shown(_redacted(command))}", markup=False)
    else:
        out.print("it declares no command execsys would run", markup=False)
    return ExitCode.OK


def _redacted(text: str) -> str:
    from execsys.redact import redact_text

    return redact_text(text)
