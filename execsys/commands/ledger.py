"""``execsys ledger``: list, show and export the append-only record."""

from __future__ import annotations

import argparse
import json
import sys

from execsys.cli import add_json, non_negative_int
from execsys.errors import ExitCode

HELP = "list, show or export ledger records"
DESCRIPTION = """\
The ledger holds every identity pinned, doctor report and probe record, append-only.

examples:
  execsys ledger list                      newest first
  execsys ledger list --kind probe --json
  execsys ledger list --kind run           evaluation runs with their verdicts
  execsys ledger show identity-20261130T101500-1a2b   (a unique prefix is enough)
  execsys ledger export > ledger.jsonl     one JSON record per line
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    ls = sub.add_parser("list", help="records, newest first", formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog="examples:\n  execsys ledger list --kind identity\n  execsys ledger list --limit 0 --json")
    ls.add_argument("--kind", help="only records of this kind (identity, doctor, probe, plan, run, ...)")
    ls.add_argument("--limit", type=non_negative_int, default=50, help="at most this many (default 50; 0 = all)")
    add_json(ls)
    show = sub.add_parser("show", help="one record in full", formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n  execsys ledger show identity-20261130T101500-1a2b\n"
                                 "  execsys ledger show doctor-2026 --json     (a unique prefix is enough)")
    show.add_argument("id", help="record id or a unique prefix of one")
    add_json(show)
    export = sub.add_parser("export", help="every record as JSON Lines (or one JSON array with --json)",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="examples:\n  execsys ledger export > ledger.jsonl\n"
                                   "  execsys ledger export --kind probe --json | jq length")
    export.add_argument("--kind", help="only records of this kind")
    add_json(export)


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.ledger import Ledger

    with Ledger.open(args.ledger) as ledger:
        if args.action == "list":
            records = ledger.find(kind=args.kind, limit=args.limit or None, newest_first=True)
            if args.json:
                console.print_json([_summary(r) for r in records])
                return ExitCode.OK
            if not records:
                console.out().print(f"no records in {ledger.path}", markup=False)
                return ExitCode.OK
            _print_list(ledger, records)
            return ExitCode.OK
        if args.action == "show":
            record = ledger.get(args.id)
            if args.json:
                console.print_json(record.to_json())
            else:
                console.out().print_json(json.dumps(record.to_json(), ensure_ascii=False))
            return ExitCode.OK
        # export
        records = list(ledger.iter(kind=args.kind))
        if args.json:
            console.print_json([r.to_json() for r in records])
        else:
            for r in records:
                sys.stdout.write(json.dumps(r.to_json(), ensure_ascii=False, sort_keys=True) + "\n")
        return ExitCode.OK


SUMMARY_MIN = 12  # the summary column is cut to no fewer characters than this


def _print_list(ledger, records: list) -> None:
    """The table of ``ledger list``. Its id column is the prefix 'ledger show' resolves to that record
    alone and is never cut (a narrow terminal loses the identity column first, then wraps the line);
    the kind and the time are in the id, so there is no kind column (unless an id does not start with
    its kind) and no created_at; the summary is one line, cut at the terminal's edge."""
    from rich.cells import cell_len
    from rich.text import Text

    from execsys import console
    from execsys.redact import redact_text
    from execsys.termsafe import shown

    prefixes = ledger.shortest_prefixes([r.id for r in records])
    names = ["id", "identity", "summary"]
    cells = [[prefixes[r.id], (r.identity or "")[:12], _row_summary(r)] for r in records]
    if not all(r.id.startswith(f"{r.kind}-") for r in records):
        names.insert(1, "kind")
        for r, row in zip(records, cells, strict=True):
            row.insert(1, r.kind)
    rows = [[shown(redact_text(cell)) for cell in row] for row in cells]
    widths = [max(len(name), *(cell_len(row[i]) for row in rows)) for i, name in enumerate(names)]

    def fixed() -> int:  # the columns before the summary, and the two spaces after each
        return sum(widths[:-1]) + 2 * (len(names) - 1)

    width = console.out().width
    if fixed() + SUMMARY_MIN > width:
        at = names.index("identity")
        for seq in (names, widths, *rows):
            del seq[at]
    widths[-1] = max(SUMMARY_MIN, min(width - fixed(), widths[-1]))
    out = console.out()
    for row in [names, *rows]:
        line = Text()
        for i, (cell, column) in enumerate(zip(row, widths, strict=True)):
            last = i == len(row) - 1
            # Text, not markup: a summary may quote '[/x]' or '[1]' from what was recorded
            text = Text(cell, style="bold" if row is names else "")
            text.truncate(column, overflow="ellipsis", pad=not last)
            line.append_text(text)
            if not last:
                line.append("  ")
        # never cropped at the terminal's edge: an id too long for it wraps, whole
        out.print(line, no_wrap=True, crop=False, overflow="ignore")


def _row_summary(record) -> str:
    """A run's row says its verdict and the task it evaluated first (``clean: arc_easy (lm_eval, 2
    results)``); any other record its summary."""
    body = record.body
    command = body.get("command")
    if record.kind != "run" or not isinstance(command, dict):
        return _summary(record)["summary"]
    from execsys.harnesses.registry import by_name

    argv = [str(a) for a in command.get("argv") or []]
    harness = str(command.get("harness") or "other")
    results = len(body.get("results") or [])
    text = (f"{body.get('verdict')}: {by_name(harness).task(argv)} ({harness}, {results} result"
            f"{'s' if results != 1 else ''})")
    return f"{text}; {body['refused']}" if body.get("refused") else text


def _summary(record) -> dict:
    body = record.body
    text = body.get("summary") or body.get("statement") or body.get("verdict") or ""
    if not text and "agreement_rate" in body:
        text = f"{body.get('axis')} {body.get('m')}/{body.get('n')}"
    if not text and record.kind == "plan" and isinstance(body.get("order"), list):
        arms = " vs ".join(str(a) for a in body.get("arms") or [])
        text = f"{arms}, {len(body['order'])} cases, design {body.get('design')}, seed {body.get('seed')}"
    summary = {"id": record.id, "kind": record.kind, "identity": record.identity, "parent": record.parent,
               "created_at": record.created_at, "summary": str(text)}
    if record.kind in ("run", "attach"):
        # runs are listed to be judged: the verdict word is a field, not only inside the summary
        summary["verdict"] = body.get("verdict")
    return summary
