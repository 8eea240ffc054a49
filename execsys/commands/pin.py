"""``execsys pin``: record the identity of the declared system in execsys.lock.json and the ledger."""

from __future__ import annotations

import argparse
from pathlib import Path

from execsys.cli import add_json, add_sources
from execsys.errors import ExitCode, UsageError
from execsys.operation import first_given

HELP = "pin the twelve-component identity of the declared system (execsys.lock.json + ledger)"
DESCRIPTION = """\
Observe the system declared in execsys.toml -- artifact bytes (BLAKE3), engine and endpoint,
numerics environment variables and serving flags, hardware and GPUs, git state of the
harness and the interpreters its [harness] commands run, environment -- and record it beside
what was declared, before the run. The identity id is the BLAKE3 of the canonical components:
the same system always gets the same id, whichever shell, directory or execsys install pins it
(who pinned is recorded as `observer`, outside the id). The record is appended to the ledger,
then the lock is replaced atomically.

examples:
  execsys init && execsys pin                       declare, then pin
  execsys pin --config eval/execsys.toml            writes eval/execsys.lock.json
  execsys pin --lock runs/today.lock.json          (--out is the same flag, kept for scripts)
  execsys pin --json | jq .id
  execsys verify                                    later: is it still the same system?

exit codes: 0 pinned, 2 unusable declaration, artifact, endpoint or ledger (lock left as it was)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sources(parser, lock_help="the lock to write (default: execsys.lock.json beside the declaration)")
    parser.add_argument("--out", metavar="PATH", help="the lock to write (same as --lock; kept for scripts)")
    add_json(parser)
    parser.add_argument("--engine-log", metavar="PATH",
                        help="the engine's start-up log: the kernels and backends it selected (over [runtime] log)")
    parser.add_argument("--task-prolog", action="store_true",
                        help="print only `export EXECSYS_IDENTITY=...` and `export EXECSYS_LOCK=...` lines "
                             "(a Slurm TaskProlog: every job step gets the node's identity)")


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.console import with_progress_bar
    from execsys.digest import artifact_size
    from execsys.identity import ArtifactHashed, PinOptions, run_pin
    from execsys.observe.artifact import resolve

    if args.out is not None and args.lock is not None and args.out != args.lock:
        raise UsageError("--out and --lock both name the lock to write: give one of them")
    from execsys.sources import load_sources

    # the lock is only located: pin replaces it whatever it holds (a broken one included)
    sources = load_sources(args.config, first_given(args.out, args.lock), read_lock=False, ledger=args.ledger)
    decl = sources.declaration
    for warning in decl.warnings:
        console.warn(warning)
    options = PinOptions.from_sources(decl, None, lock_path=first_given(args.out, args.lock),
                                      ledger=sources.ledger_path, engine_log=args.engine_log)
    if args.task_prolog:
        from execsys.doctor.node_checks.slurm_prolog import task_prolog_exports
        from execsys.errors import InputError

        try:  # checked before anything is observed or written, not after the lock and the ledger row
            task_prolog_exports("0" * 64, options.lock_path)
        except ValueError as exc:
            raise InputError(f"--task-prolog: {exc}") from None
    artifact_path = decl.get("artifact", "path")
    base = Path(decl.path).resolve().parent if decl.path else Path.cwd()
    size = artifact_size(resolve(artifact_path, base)) if artifact_path else 0

    def pin_with(progress):
        def on_event(event) -> None:
            if progress is not None and isinstance(event, ArtifactHashed):
                progress(event.done_bytes, event.total_bytes)

        return run_pin(options, on_event=on_event)

    report = with_progress_bar(pin_with, label="hashing the artifact", total_hint=size)
    identity = report.identity
    for note in identity.notes[len(decl.warnings):]:  # the declaration's own warnings were shown above
        console.warn(note)
    if report.superseded is not None:  # on stderr, so --json and --task-prolog stay parseable
        console.warn(report.superseded.sentence())
    if args.task_prolog:
        from execsys.doctor.node_checks.slurm_prolog import task_prolog_exports

        print("\n".join(task_prolog_exports(identity.id, options.lock_path)))
        return ExitCode.OK
    if args.json:
        console.print_json(report.to_json())
        return ExitCode.OK
    render(identity, options.lock_path, report.record_id or "")
    return ExitCode.OK


def observer_line(observer: dict) -> str:
    """Who pinned or verifies: shown, never compared."""
    if not observer:
        return "not recorded (pinned before identity schema 2)"
    python = observer.get("python") or {}
    shell = (observer.get("shell") or {}).get("name") or "?"
    return (f"execsys {observer.get('execsys')}, python {python.get('version')} ({python.get('executable')}), "
            f"shell {shell}, user {observer.get('user')}, cwd {observer.get('cwd')}")


def component_summary(name: str, component: dict) -> str:
    """One line per component for humans: the facts someone would check first."""
    observed, declared = component.get("observed", {}), component.get("declared", {})
    if name == "artifact":
        if not observed.get("digest"):
            return observed.get("note", "not declared")
        quant = observed.get("quantization") or "?"
        text = (f"{observed['digest'][:16]}  {observed.get('format')} {quant}  {observed.get('files')} files, "
                f"{observed.get('size_bytes', 0) / 2**30:.2f} GiB")
        signature = observed.get("signature") if isinstance(observed.get("signature"), dict) else None
        if signature and signature.get("signed_by"):
            text += (f"  model.sig: {signature.get('files')} files signed by {signature['signed_by']} "
                     "(as the bundle states; verify checks it)")
        elif signature and signature.get("error"):
            text += f"  {signature['error']}"
        return text
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
        text = f"{(observed.get('commit') or 'no commit')[:12]}{dirty}  {observed.get('branch') or 'detached'}"
        pythons = [c["interpreter"] for c in observed.get("commands") or [] if c.get("interpreter")]
        if pythons:
            text += f"  python {pythons[0].get('version')} ({pythons[0].get('distributions')} distributions)"
        return text
    if name == "environment":
        shells = ", ".join(str(s.get("program")) for s in observed.get("shells") or [])
        return f"container {observed.get('container') or 'none'}  locale {observed.get('locale') or 'unset'}  " \
               f"tz {observed.get('timezone') or 'unset'}  " + (f"shell {shells}" if shells else "no shell declared")
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
    from execsys.termsafe import shown

    table = Table(box=None, pad_edge=False, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name in COMPONENTS:
        table.add_row(name, escape(shown(component_summary(name, identity.components[name]))))
    console.out().print(table)
    console.out().print(f"identity {identity.id}", markup=False)
    console.out().print(f"lock     {out}  (ledger record {record_id})", markup=False)
    console.out().print(f"observer {shown(observer_line(identity.observer))}  (not part of the id)", markup=False)
