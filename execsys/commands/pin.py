"""``execsys pin``: record the identity of the declared system in execsys.lock.json and the ledger."""

from __future__ import annotations

import argparse
from pathlib import Path

from execsys.cli import add_json
from execsys.errors import ExitCode

HELP = "pin the twelve-component identity of the declared system (execsys.lock.json + ledger)"
DESCRIPTION = """\
Observe the system declared in execsys.toml -- artifact bytes (BLAKE3), engine and endpoint,
numerics environment variables and serving flags, hardware and GPUs, git state of the
harness, interpreter and environment -- and record it beside what was declared, before the
run. The identity id is the BLAKE3 of the canonical components: the same system always gets
the same id. The lock is written atomically and appended to the ledger.

examples:
  execsys init && execsys pin                       declare, then pin
  execsys pin --config eval/execsys.toml --out eval/execsys.lock.json
  execsys pin --json | jq .id
  execsys verify                                    later: is it still the same system?

exit codes: 0 pinned, 2 unusable declaration, artifact or endpoint (nothing written)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH", help="the declaration (default: ./execsys.toml if present)")
    parser.add_argument("--out", metavar="PATH", help="the lock to write (default: execsys.lock.json beside the config)")
    add_json(parser)
    parser.add_argument("--task-prolog", action="store_true",
                        help="print only `export EXECSYS_IDENTITY=...` and `export EXECSYS_LOCK=...` lines "
                             "(a Slurm TaskProlog: every job step gets the node's identity)")


def run(args: argparse.Namespace) -> int:
    from execsys import console, declaration
    from execsys.digest import artifact_size, with_progress_bar
    from execsys.identity import DEFAULT_LOCK, pin, record_identity, write_lock
    from execsys.ledger import Ledger
    from execsys.observe.artifact import resolve

    decl = declaration.load(args.config)
    for warning in decl.warnings:
        console.warn(warning)
    base = Path(decl.path).resolve().parent if decl.path else Path.cwd()
    out = Path(args.out) if args.out else base / DEFAULT_LOCK
    ledger = Ledger.open()  # fail on an unusable ledger before minutes of hashing
    artifact_path = decl.get("artifact", "path")
    size = artifact_size(resolve(artifact_path, base)) if artifact_path else 0
    identity = with_progress_bar(lambda progress: pin(decl, progress=progress, exclude=[out.resolve()]),
                                 label="hashing the artifact", total_hint=size)
    write_lock(identity, out)
    with ledger:
        record_id = record_identity(identity, ledger)
    for note in identity.notes[len(decl.warnings):]:  # the declaration's own warnings were shown above
        console.warn(note)
    if args.task_prolog:
        from execsys.doctor.node_checks.slurm_prolog import task_prolog_exports

        print("\n".join(task_prolog_exports(identity.id, out)))
        return ExitCode.OK
    if args.json:
        console.print_json(identity.to_json())
        return ExitCode.OK
    render(identity, out, record_id)
    return ExitCode.OK


def component_summary(name: str, component: dict) -> str:
    """One line per component for humans: the facts someone would check first."""
    observed, declared = component.get("observed", {}), component.get("declared", {})
    if name == "artifact":
        if not observed.get("digest"):
            return observed.get("note", "not declared")
        quant = observed.get("quantization") or "?"
        return (f"{observed['digest'][:16]}  {observed.get('format')} {quant}  {observed.get('files')} files, "
                f"{observed.get('size_bytes', 0) / 2**30:.2f} GiB")
    if name == "runtime":
        engine = observed.get("engine") or {}
        text = f"{engine.get('name') or 'engine not declared'} {engine.get('version') or ''}".strip()
        endpoint = observed.get("endpoint")
        if endpoint:
            models = ", ".join(endpoint.get("models") or []) or "no models listed"
            text += f"  endpoint {endpoint.get('url')} ({models})"
        return text
    if name == "hardware":
        gpus = observed.get("gpus") or []
        gpu = f"{len(gpus)}x {gpus[0]['name']}" if gpus else "no GPU"
        return f"{observed.get('hostname')}  {(observed.get('cpu') or {}).get('model')}  {gpu}"
    if name == "harness":
        if not observed.get("git"):
            return observed.get("note", "no git repository")
        dirty = " +dirty" if observed.get("dirty") else ""
        return f"{(observed.get('commit') or 'no commit')[:12]}{dirty}  {observed.get('branch') or 'detached'}"
    if name == "environment":
        py = observed.get("python") or {}
        return f"python {py.get('version')}  shell {(observed.get('shell') or {}).get('name')}  " \
               f"container {observed.get('container')}"
    if name == "model":
        facts = observed.get("from_files") or {}
        return str(declared.get("name") or facts.get("name") or facts.get("_name_or_path") or "not declared")
    if declared:
        return ", ".join(f"{k}={v}" for k, v in list(declared.items())[:4])
    return "not declared"


def render(identity, out: Path, record_id: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    from execsys import COMPONENTS, console

    table = Table(box=None, pad_edge=False, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name in COMPONENTS:
        table.add_row(name, escape(component_summary(name, identity.components[name])))
    console.out().print(table)
    console.out().print(f"identity {identity.id}", markup=False)
    console.out().print(f"lock     {out}  (ledger record {record_id})", markup=False)
