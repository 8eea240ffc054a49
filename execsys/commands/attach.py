"""``execsys attach RESULT... [--lock L]``: a sidecar for results made without ``execsys run``."""

from __future__ import annotations

import argparse

from execsys.cli import add_json, add_sign_key, add_sources

HELP = "record the identity beside results made without 'execsys run' (descriptive only)"
DESCRIPTION = """\
Digests each result file, verifies the lock now, and writes <result>.execsys.json beside it with
"attached_after": true and the sentence "identity recorded after the run: the system may have moved
in between; descriptive only". compare reads the sidecar and labels comparisons with it descriptive.
Beside each sidecar, a receipt <result>.execsys.intoto.json (an in-toto Statement in a DSSE envelope,
its predicate marked "attached_after": true), signed with --sign-key or [receipts] key, else unsigned.

examples:
  execsys attach out/tiny/results_2026-12-01T10-00-00.json out/tiny/samples_gsm8k_*.jsonl
  execsys attach logs/*.eval --lock eval/execsys.lock.json --json

Inside a Slurm job array or a Kubernetes Indexed Job (or with --shard K/N[@JOB]) the record says which
shard it is, {index, count, source, job}, as execsys run's does.

A result that 'execsys run' recorded already has its identity pinned before the run: attach
refuses it (exit 2, naming the run and its verdict) and writes nothing.

exit codes: 0 attached and the lock still matches; 1 attached but the system has moved since the lock
(new-identity); 2 a missing result or lock, or a result a run recorded
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", metavar="RESULT", help="result files (any harness)")
    add_sources(parser)
    parser.add_argument("--sidecar-dir", metavar="DIR", help="write the sidecars here instead of beside each result")
    add_sign_key(parser)
    parser.add_argument("--shard", metavar="K/N[@JOB]",
                        help="these are the results of shard K of N (from 0) of one evaluation, JOB naming it; read "
                             "from SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT inside a Slurm job array and "
                             "JOB_COMPLETION_INDEX in a Kubernetes Indexed Job (which gives no N: say it here), as "
                             "execsys run reads it")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from execsys import console
    from execsys.run.attach import ATTACHED_SENTENCE, AttachOptions, attach_results
    from execsys.sources import load_sources

    sources = load_sources(args.config, args.lock, ledger=args.ledger)
    options = AttachOptions.from_sources(sources, results=args.results, sidecar_dir=args.sidecar_dir,
                                         sign_key=args.sign_key, shard=args.shard)
    report = attach_results(options)
    if args.json:
        console.print_json(report.to_json())
    else:
        err = console.err()
        for result, sidecar in zip(report.results, report.sidecars, strict=True):
            err.print(f"  {escape(result['path'])} {result['blake3'][:16]} ({result['harness']}) -> "
                      f"{escape(sidecar)}", highlight=False)
        status = "ok" if report.exit_code == 0 else "warn"
        err.print(f"[{console.STYLES[status]}]{console.symbol(status)}[/] verify now: "
                  f"{escape(report.verify_now['verdict'])}: {escape(report.verify_now['sentence'])}", highlight=False)
        if report.receipts:
            from execsys.receipt import signed_by_key

            err.print(f"  {len(report.receipts)} receipt(s), {escape(signed_by_key(options.signer))}",
                      highlight=False)
        err.print(f"[yellow]![/] {ATTACHED_SENTENCE} ({report.id})", highlight=False)
    return report.exit_code
