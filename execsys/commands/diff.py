"""``execsys diff``: which components moved between two identities, and what a comparison may claim."""

from __future__ import annotations

import argparse

from execsys.cli import add_json
from execsys.errors import ExitCode

HELP = "compare two identities: which components moved, and whether a comparison isolates one"
DESCRIPTION = """\
Compare two pinned identities (lock files, ledger record ids, or identity id prefixes)
component by component. When exactly one component moved, a comparison of results from
the two "isolates <component>"; when more moved, it is "descriptive only" -- the sentence
a report comparing the two must carry.

examples:
  execsys diff before.lock.json execsys.lock.json
  execsys diff identity-20261130T101500-1a2b identity-20261201T090000-9f8e --json
  execsys ledger list --kind identity               find the ids

exit codes: 0 compared (whatever moved), 2 an identity that cannot be loaded
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="first identity: lock file, ledger id or identity id prefix")
    parser.add_argument("b", metavar="B", help="second identity")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.identity import diff_identities, load_identity_ref

    a = load_identity_ref(args.a, ledger_path=args.ledger)
    b = load_identity_ref(args.b, ledger_path=args.ledger)
    report = diff_identities(a, b)
    if report.schema_note:
        console.warn(report.schema_note)
    if args.json:
        console.print_json(report.to_json())
        return ExitCode.OK
    from rich.markup import escape

    from execsys.identity import describe_changes
    from execsys.termsafe import shown

    console.out().print(f"A {a.id[:16]}  {a.recorded_at}  ({a.source})", markup=False)
    console.out().print(f"B {b.id[:16]}  {b.recorded_at}  ({b.source})", markup=False)
    for name in report.moved:
        said = describe_changes(report.changes[name])  # only what moved in each field, on both sides
        console.out().print(f"[bold]{name}[/]: {len(said)} field(s)")
        for words in said[:12]:
            console.out().print(f"    {escape(shown(words))}")
        if len(said) > 12:
            console.out().print(f"    ... and {len(said) - 12} more (--json lists all)")
    console.out().print(report.sentence, markup=False)
    return ExitCode.OK
