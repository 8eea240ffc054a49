"""``execsys scope``: what comparisons the measured boundaries license for one pinned identity."""

from __future__ import annotations

import argparse
from pathlib import Path

from execsys.cli import add_json, add_sources
from execsys.errors import ExitCode, InputError, UsageError

HELP = "state the comparability licence the probes measured for an identity"
DESCRIPTION = """\
Setting two numbers side by side claims they came from comparable conditions. scope reads the probe
records of one pinned identity from the ledger and states the claim it licenses: the widest boundary
measured with agreement 1.0, the axes never probed (unlicensed), and the unstable axes, which a
causal claim may cross only with a contemporaneous paired control (execsys plan). Probes taken
under another identity do not count, nor do probes whose engine was not the pinned system (listed as
ignored), nor restart/redeploy probes that saw no restart/redeploy; one whose event could not be
seen from here (a remote endpoint) licenses its axis "unverified". Axes: session, restart,
concurrency, hosts, redeploy.

examples:
  execsys scope                                  the identity in ./execsys.lock.json
  execsys scope --config eval/execsys.toml       the identity in eval/execsys.lock.json
  execsys scope --identity 3f9a2c41b7de --json
  execsys scope --contract contract.md           write the contract's comparability section
  execsys scope --audit                          recorded comparisons that crossed an unstable axis

exit codes: 0 no measured axis is unstable (and, with --audit, no comparison needs re-evaluation),
1 some axis is unstable (with --audit: some recorded comparison needs re-evaluation),
2 no identity or a bad argument
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sources(parser, lock_help="lock file of the identity (default: execsys.lock.json beside the declaration)")
    parser.add_argument("--identity", metavar="ID", help="identity id, or a ledger record id carrying one")
    parser.add_argument("--contract", metavar="FILE.md", help="write the comparability section of an experiment contract")
    parser.add_argument("--audit", action="store_true",
                        help="list recorded comparisons that crossed an axis since found unstable")
    add_json(parser)


def options_from_args(args: argparse.Namespace):
    """Flags -> ScopeOptions: ``--identity`` > ``--lock`` > the lock beside the declaration."""
    from execsys.scope import ScopeOptions
    from execsys.sources import load_sources

    if args.identity is not None and args.lock is not None:
        raise UsageError("give --lock or --identity, not both")
    if args.identity is not None:  # names the identity outright: no lock is read
        return ScopeOptions.from_sources(None, None, identity=args.identity, audit=args.audit, ledger=args.ledger)
    if args.audit and args.lock is None:  # the audit covers every recorded comparison unless told one identity
        return ScopeOptions.from_sources(None, None, audit=True, ledger=args.ledger)
    sources = load_sources(args.config, args.lock, ledger=args.ledger)
    return ScopeOptions.from_sources(sources.declaration, sources.lock, audit=args.audit,
                                     lock_path=sources.lock_path, ledger=sources.ledger_path)


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.fsutil import write_output
    from execsys.scope import contract_markdown, merge_contract, run_audit, run_scope

    options = options_from_args(args)
    if args.audit:
        report = run_audit(options)
        if args.json:
            console.print_json(report.to_json())
        else:
            _render_audit(report)
        return ExitCode.FINDING if report.flagged else ExitCode.OK

    existing = _read_contract(args.contract) if args.contract else ""
    scope = run_scope(options)
    if args.contract:
        write_output(args.contract, merge_contract(existing, contract_markdown(scope, scope.ref)), "the contract")
        console.err().print(f"wrote the comparability section to {args.contract}", markup=False)
    if args.json:
        console.print_json(scope.to_json())
    else:
        _render(scope)
    return ExitCode.FINDING if scope.unstable else ExitCode.OK


def _read_contract(path: str) -> str:
    """The contract as it stands ('' when new), read before anything is measured or written."""
    from execsys.fsutil import DECLARATION_LIMIT, read_bounded

    target = Path(path)
    if not target.exists() or target.is_dir():
        return ""  # a directory is refused by the write, naming it
    try:
        # bounded: a FIFO or device as the contract is refused here, never read forever
        return read_bounded(target, DECLARATION_LIMIT, "contract").decode("utf-8")
    except FileNotFoundError:
        return ""  # removed since the check: a new contract
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 Markdown file; give a new file or the contract itself") from None


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
        elif m.stable and axis in scope.unverified:
            why = escape(scope.unverified_why.get(axis, ""))
            key, text = "warn", f"licensed, unverified  {m.figure()}: {why}  [dim]{m.record}[/]"
        elif m.stable:
            key, text = "ok", f"licensed  {m.figure()}  [dim]{m.record}[/]"
        else:
            key, text = "fail", f"unstable  {m.figure()}: paired control required  [dim]{m.record}[/]"
        out.print(f"  [{console.STYLES[key]}]{console.symbol(key)}[/] {axis:<12} {text}")
    for ignored in scope.another_system:
        out.print(f"  [{console.STYLES['skip']}]{console.symbol('skip')}[/] ignored      {escape(ignored['axis'])} "
                  f"[dim]{escape(ignored['record'])}[/]: {escape(ignored['reason'])}")
    for left_out in scope.excluded:
        out.print(f"  [{console.STYLES['skip']}]{console.symbol('skip')}[/] not counted  "
                  f"[dim]{escape(left_out['record'])}[/]: {escape(left_out['reason'])}")


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
    from execsys.scope import NOT_CAUSAL

    unbacked = sum(1 for f in report.flagged if f.verdict == NOT_CAUSAL)
    out.print(f"\n{len(report.flagged) - unbacked} of {report.checked} comparisons need re-evaluation or a paired "
              "control" + (f"; {unbacked} recorded causal are not causal (their identities do not back it)"
                           if unbacked else ""))
