"""``execsys verify``: is this still the system that was pinned?"""

from __future__ import annotations

import argparse

from execsys.cli import add_json, add_sources
from execsys.errors import ExitCode

HELP = "re-observe the pinned system and say whether it is still the same one"
DESCRIPTION = """\
Re-observe every component of the identity in the lock -- the artifact digest always
recomputed from the bytes, never from a cache -- and compare field by field: each
component is `same`, `changed` (old -> new) or `unverifiable` (why). The declaration
(execsys.toml) is compared with the pinned one too. This is the check that catches "what
the launch script intended to load is not what loaded".

A lock pinned under an older identity schema is not compared (its id was defined over other
fields): verify says so and exits 1; re-pin to compare.

examples:
  execsys verify
  execsys verify --config eval/execsys.toml         checks eval/execsys.lock.json
  execsys verify --lock runs/2026-11-30/execsys.lock.json --json

exit codes: 0 same-system, 1 new-identity (re-measure before comparing), 2 unusable lock
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sources(parser)
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.console import with_progress_bar
    from execsys.digest import artifact_size
    from execsys.identity import ArtifactHashed, VerifyOptions, run_verify
    from execsys.sources import config_given, load_sources

    # a declaration only when named (it must exist); otherwise the pinned one is compared, if it still exists
    sources = load_sources(args.config, args.lock, need_lock=True, default_declaration=False)
    decl = sources.declaration if config_given(args.config) else None
    for warning in decl.warnings if decl is not None else ():
        console.warn(warning)
    options = VerifyOptions.from_sources(decl, sources.lock, lock_path=sources.lock_path)
    if options.declaration is not None and decl is None:
        for warning in options.declaration.warnings:
            console.warn(warning)
    artifact = options.lock.observed("artifact").get("path")

    def verify_with(progress):
        def on_event(event) -> None:
            if progress is not None and isinstance(event, ArtifactHashed):
                progress(event.done_bytes, event.total_bytes)

        return run_verify(options, on_event=on_event)

    report = with_progress_bar(verify_with, label="re-hashing the artifact",
                               total_hint=artifact_size(artifact) if artifact else 0)
    if args.json:
        console.print_json(report.to_json())
    else:
        render(report)
    return ExitCode.OK if report.verdict == "same-system" else ExitCode.FINDING


def render(report) -> None:
    from rich.markup import escape

    from execsys import console
    from execsys.commands.pin import observer_line
    from execsys.identity import describe_changes
    from execsys.termsafe import shown

    if report.schema_outdated:
        # an id defined over other fields: comparing would list every component as changed
        console.out().print(report.sentence, markup=False)
        return
    look = {"same": "ok", "changed": "fail", "unverifiable": "error"}
    for name, check in report.components.items():
        key = look[check.status]
        line = f"[{console.STYLES[key]}]{console.symbol(key)}[/] {name}: {check.status}"
        if check.reason:
            line += f" ({escape(shown(check.reason))})"
        console.out().print(line)
        if check.signature is not None and check.signature.get("status") != "not-verified":
            # whose signature covers the bytes: said when it holds too (a failure is the reason above)
            sign_key = "ok" if check.signature.get("status") == "verified" else "skip"
            console.out().print(f"    [{console.STYLES[sign_key]}]{console.symbol(sign_key)}[/] "
                                f"{escape(shown(str(check.signature.get('sentence'))))}")
        said = describe_changes(check.changes)  # only what moved in each field, on both sides
        for words in said[:12]:
            console.out().print(f"    {escape(shown(words))}")
        if len(said) > 12:
            console.out().print(f"    ... and {len(said) - 12} more (--json lists all)")
    console.out().print(f"pinned by   {shown(observer_line(report.pinned_observer))}", markup=False)
    console.out().print(f"checked by  {shown(observer_line(report.observer))}  (observers are never compared)",
                        markup=False)
    console.out().print(f"{report.verdict}: {shown(report.sentence)}", markup=False)
