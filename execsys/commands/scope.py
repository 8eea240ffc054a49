"""``execsys scope``: what comparisons the measured boundaries license for one pinned identity."""

from __future__ import annotations

import argparse
from pathlib import Path

from execsys.cli import add_json
from execsys.errors import ExitCode, InputError, UsageError

HELP = "state the comparability licence the probes measured for an identity"
DESCRIPTION = """\
Setting two numbers side by side claims they came from comparable conditions. scope reads the probe
records of one pinned identity from the ledger and states the claim it licenses: the widest boundary
measured with agreement 1.0, the axes never probed (unlicensed), and the unstable axes, which a
causal claim may cross only with a contemporaneous paired control (execsys plan). Probes taken
under another identity do not count. Axes: session, restart, concurrency, hosts, redeploy.

examples:
  execsys scope                                  the identity in ./execsys.lock.json
  execsys scope --identity 3f9a2c41b7de --json
  execsys scope --contract contract.md           write the contract's comparability section
  execsys scope --audit                          recorded comparisons that crossed an unstable axis

exit codes: 0 no measured axis is unstable (and, with --audit, no comparison needs re-evaluation),
1 some axis is unstable (with --audit: some recorded comparison needs re-evaluation),
2 no identity or a bad argument
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--lock", metavar="FILE", help="lock file of the identity (default: ./execsys.lock.json)")
    which.add_argument("--identity", metavar="ID", help="identity id, or a ledger record id carrying one")
    parser.add_argument("--contract", metavar="FILE.md", help="write the comparability section of an experiment contract")
    parser.add_argument("--audit", action="store_true",
                        help="list recorded comparisons that crossed an axis since found unstable")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.fsutil import write_output
    from execsys.ledger import Ledger
    from execsys.scope import audit, compute_scope, contract_markdown, merge_contract, resolve_identity

    with Ledger.open() as ledger:
        if args.audit and not (args.lock or args.identity):
            identity = None
        else:
            ref = args.identity or args.lock
            if ref is None:
                if not Path("execsys.lock.json").exists():
                    raise UsageError("no identity: give --lock FILE or --identity ID (no ./execsys.lock.json here)")
                ref = "execsys.lock.json"
            identity = resolve_identity(ref, ledger)

        if args.audit:
            report = audit(ledger, identity.id if identity else None)
            if args.json:
                console.print_json(report.to_json())
            else:
                _render_audit(report)
            return ExitCode.FINDING if report.flagged else ExitCode.OK

        scope = compute_scope(ledger, identity.id, host=identity.host())
        if args.contract:
            existing = _read_contract(args.contract)
            write_output(args.contract, merge_contract(existing, contract_markdown(scope, identity)), "the contract")
            console.err().print(f"wrote the comparability section to {args.contract}", markup=False)
        if args.json:
            console.print_json(scope.to_json())
        else:
            _render(scope)
        return ExitCode.FINDING if scope.unstable else ExitCode.OK


def _read_contract(path: str) -> str:
    """The contract as it stands ('' when new), read before anything is measured or written."""
    target = Path(path)
    if not target.exists() or target.is_dir():
        return ""  # a directory is refused by the write, naming it
    try:
        return target.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 Markdown file; give a new file or the contract itself") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the contract ({exc.strerror or exc})") from None


def _render(scope) -> None:
    from rich.markup import escape

    from execsys import console
    from execsys.scope import AXES

    out = console.out()
    out.print(escape(scope.statement))
    out.print()
    for axis in AXES:
        m = scope.measured.get(axis)
        if m is None:
            key, text = "skip", "not probed: unlicensed"
        elif m.stable:
            key, text = "ok", f"licensed  {m.figure()}  [dim]{m.record}[/]"
        else:
            key, text = "fail", f"unstable  {m.figure()}: paired control required  [dim]{m.record}[/]"
        out.print(f"  [{console.STYLES[key]}]{console.symbol(key)}[/] {axis:<12} {text}")


def _render_audit(report) -> None:
    from rich.markup import escape

    from execsys import console

    out = console.out()
    if not report.findings:
        out.print("no recorded comparisons in the ledger")
        return
    for finding in report.findings:
        key = "ok" if finding.verdict == "ok" else "fail"
        out.print(f"[{console.STYLES[key]}]{console.symbol(key)}[/] {escape(finding.statement)}")
    out.print(f"\n{len(report.flagged)} of {report.checked} comparisons need re-evaluation or a paired control")
