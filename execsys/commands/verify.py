"""``execsys verify``: is this still the system that was pinned?"""

from __future__ import annotations

import argparse
from pathlib import Path

from execsys.cli import add_json
from execsys.errors import ExitCode, InputError

HELP = "re-observe the pinned system and say whether it is still the same one"
DESCRIPTION = """\
Re-observe every component of the identity in the lock -- the artifact digest always
recomputed from the bytes, never from a cache -- and compare field by field: each
component is `same`, `changed` (old -> new) or `unverifiable` (why). The declaration
(execsys.toml) is compared with the pinned one too. This is the check that catches "what
the launch script intended to load is not what loaded".

examples:
  execsys verify
  execsys verify --lock runs/2026-11-30/execsys.lock.json --json

exit codes: 0 same-system, 1 new-identity (re-measure before comparing), 2 unusable lock
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lock", metavar="PATH", default=None, help="the lock to check (default: execsys.lock.json)")
    parser.add_argument("--config", metavar="PATH",
                        help="declaration to compare with the pinned one (default: the one pinned, if it still exists)")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from execsys import console, declaration
    from execsys.digest import artifact_size, with_progress_bar
    from execsys.identity import DEFAULT_LOCK, load_lock, verify

    if args.lock is not None and not args.lock.strip():
        raise InputError("the lock path is empty: give --lock FILE, or omit it for ./execsys.lock.json")
    if args.config is not None and not args.config.strip():
        raise InputError("the declaration path is empty: give --config FILE, or omit it for the pinned one")
    lock_path = Path(args.lock or DEFAULT_LOCK)
    identity = load_lock(lock_path)
    decl = None
    config = args.config or identity.declaration.get("path")
    if config and Path(config).exists():
        decl = declaration.load(config)
        for warning in decl.warnings:
            console.warn(warning)
    artifact = identity.observed("artifact").get("path")
    report = with_progress_bar(lambda progress: verify(identity, progress=progress, declaration=decl),
                               label="re-hashing the artifact", total_hint=artifact_size(artifact) if artifact else 0)
    if args.json:
        console.print_json(report.to_json())
    else:
        render(report)
    return ExitCode.OK if report.verdict == "same-system" else ExitCode.FINDING


def render(report) -> None:
    from rich.markup import escape

    from execsys import console
    from execsys.identity import describe_change

    look = {"same": "ok", "changed": "fail", "unverifiable": "error"}
    for name, check in report.components.items():
        key = look[check.status]
        line = f"[{console.STYLES[key]}]{console.symbol(key)}[/] {name}: {check.status}"
        if check.reason:
            line += f" ({escape(check.reason)})"
        console.out().print(line)
        for change in check.changes[:12]:
            console.out().print(f"    {escape(describe_change(change))}")
        if len(check.changes) > 12:
            console.out().print(f"    ... and {len(check.changes) - 12} more (--json lists all)")
    console.out().print(f"{report.verdict}: {report.sentence}", markup=False)
