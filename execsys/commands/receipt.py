"""``execsys receipt verify RECEIPT [--key PUB] [--lock LOCK]``: check a run's receipt with only the files."""

from __future__ import annotations

import argparse

from execsys.cli import add_json
from execsys.errors import ExitCode

HELP = "verify a receipt: its signature, every result's digest, and the identity against a lock"
DESCRIPTION = """\
A receipt (<result>.execsys.intoto.json, written by 'execsys run' and 'execsys attach') is an in-toto
Statement v1 in a DSSE envelope: its subjects are the result files with their sha256 and BLAKE3, its
predicate (https://execsys.dev/run/v1) the run record. 'verify' needs only the receipt, the files
and a public key: it checks the signature against --key, every subject against the file on disk
(named relative to the receipt's directory), and with --lock the identity the run was under.

examples:
  execsys receipt verify out/results.json.execsys.intoto.json --key team.pub
  execsys receipt verify logs/execsys-2026-12-01T10-00-00_task.eval.execsys.intoto.json --lock execsys.lock.json
  execsys receipt verify scores.jsonl.execsys.intoto.json --json

exit codes: 0 verified (one line: how many subjects, signed by which key or unsigned); 1 a mismatch,
named in one line (which file and digest, a bad signature, an unsigned receipt given --key, another
identity than the lock's); 2 a receipt that cannot be read or is not one, or a key or lock that cannot
be read
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    verify = sub.add_parser("verify", help="check a receipt against the files, a public key and a lock",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="examples:\n  execsys receipt verify r.json.execsys.intoto.json --key team.pub\n"
                                   "  execsys receipt verify r.json.execsys.intoto.json --lock execsys.lock.json")
    verify.add_argument("receipt", metavar="RECEIPT", help="the receipt file (<result>.execsys.intoto.json)")
    verify.add_argument("--key", metavar="PUB",
                        help="the signer's public key (PEM); without it a signature is reported, not checked")
    verify.add_argument("--lock", metavar="LOCK", help="check that the run was under this lock's identity")
    add_json(verify)


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.receipt import verify_receipt

    check = verify_receipt(args.receipt, key=args.key, lock=args.lock)
    if args.json:
        console.print_json(check.to_json())
    else:
        status = "ok" if check.verified else "fail"
        from rich.markup import escape

        from execsys.termsafe import shown

        console.out().print(f"[{console.STYLES[status]}]{console.symbol(status)}[/] {escape(shown(check.sentence()))}",
                            highlight=False)
    return ExitCode.OK if check.verified else ExitCode.FINDING
