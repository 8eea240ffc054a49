"""``execsys compare A B``: what moved between two results, and whether the comparison may be causal."""

from __future__ import annotations

import argparse

from execsys.cli import add_json
from execsys.errors import ExitCode

HELP = "compare two results: what moved, and whether a causal claim is licensed"
DESCRIPTION = """\
Each result carries its identity and per-case outcomes. compare names the components that moved
between the two identities and labels the comparison causal only when the declared intervention is
exactly what moved and the results came from one session (or crossed only boundaries measured at
agreement 1.0 for their identities). Otherwise it is descriptive: both numbers, no causal sentence,
and the reason ("you named budget; what moved: artifact"). The arms of a paired run compare by their
own identities; a sidecar must name a run the ledger recorded, and each result file must still have
the BLAKE3 its run recorded. Every comparison is recorded in the ledger (kind comparison) for
'execsys scope --audit'.

A result is a JSON file (execsys.result/1):
  {"identity": "execsys.lock.json", "session": "s1", "host": "gpu1",
   "outcomes": {"case-1": true, "case-2": false}}
or a ledger record: plan-run-...:ARM (one arm of a paired run), probe-...:PASS.

examples:
  execsys compare before.json after.json --intervention runtime
  execsys compare plan-run-20261130T101500-1a2b:A plan-run-20261130T101500-1a2b:B --intervention budget

exit codes: 0 causal, 1 descriptive, 2 unreadable results or a bad argument
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", help="result A (file or RECORD:ARM)")
    parser.add_argument("b", help="result B (file or RECORD:ARM)")
    parser.add_argument("--intervention", action="append", metavar="COMPONENT", default=[],
                        help="the component the experiment changes on purpose (repeat for a bundle)")
    parser.add_argument("--no-record", action="store_true", help="do not record the comparison in the ledger")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from execsys import console
    from execsys.compare import compare, load_result
    from execsys.ledger import Ledger

    with Ledger.open(args.ledger) as ledger:
        a = load_result(args.a, ledger)
        b = load_result(args.b, ledger)
        result = compare(a, b, ledger, args.intervention, record=not args.no_record)
    if args.json:
        console.print_json(result.to_json())
    else:
        out = console.out()
        moved = "unknown" if result.moved is None else (", ".join(result.moved) or "nothing")
        out.print(f"moved: {escape(moved)}")
        if result.crossed:
            out.print(f"crossed: {escape(', '.join(result.crossed))}")
        status = "ok" if result.label == "causal" else "warn"
        out.print(f"[{console.STYLES[status]}]{result.label}[/]: {escape(result.statement)}")
        if result.record:
            out.print(f"[dim]recorded {result.record}[/]")
    return ExitCode.OK if result.label == "causal" else ExitCode.FINDING
