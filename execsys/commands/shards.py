"""``execsys shards``: a sharded evaluation checked as one (every shard present, clean, one system)."""

from __future__ import annotations

import argparse

from execsys.cli import add_json
from execsys.errors import ExitCode

HELP = "is a sharded run one evaluation? every shard present, clean, and of one system"
DESCRIPTION = """\
Read the run records of a sharded evaluation's shards -- their sidecars (<result>.execsys.json),
their receipts (<result>.execsys.intoto.json), their ledger run ids, or the ledger's sharded runs
since a time -- and answer for it as one:

  shards     k/N present, each missing index named. Each run records the shard it is: a Slurm
             job array's SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT, a Kubernetes Indexed
             Job's JOB_COMPLETION_INDEX (its N given as execsys run --shard K/N), or --shard K/N.
             --expect N says how many there must be (it must agree with what the shards say)
  identity   k/n shards share one system, compared as fleet compares hosts: the pinned components
             less the facts that name one machine (hostname, machine id, GPU UUIDs); each outlier
             with the components, and the fields in them, that differ
  verdicts   every shard whose run was not clean (drifted, failed, interrupted, ...) named; a
             shard given by its receipt whose result files no longer match the receipt's digests
             is receipt-mismatch, never clean (the file and its digest named)

One job at a time: the shards of a Slurm array share its SLURM_ARRAY_JOB_ID, others the JOB of
--shard K/N@JOB; runs of several jobs are refused unless --job picks one. A shard run twice counts
by its newest run.

examples:
  execsys shards out/shard-*/scores.json.execsys.json
  execsys shards out/shard-*/scores.json.execsys.intoto.json      the receipts: files checked too
  execsys shards --ledger-since 6h --job 4242 --json | jq .reasons

exit codes: 0 every shard is present, clean and of one system; 1 one is missing, not clean, or
another system (each reason named); 2 usage or input error (a run with no shard, runs of two jobs)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN-OR-SIDECAR",
                        help="a shard's run sidecar (<result>.execsys.json), its receipt (<result>.execsys.intoto.json: "
                             "its results are checked against it) or its ledger run id")
    parser.add_argument("--ledger-since", metavar="T",
                        help="the ledger's sharded runs since T (ISO date/time, or an age: 90m, 24h, 7d)")
    parser.add_argument("--expect", metavar="N", help="how many shards there must be")
    parser.add_argument("--job", metavar="KEY",
                        help="the job whose shards to check, where the runs are of several (a Slurm array job "
                             "id, or the JOB of --shard K/N@JOB)")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    import json
    import os
    import sys

    from execsys.shards import ShardsOptions
    from execsys.shards import run as run_shards

    options = ShardsOptions.from_sources(
        None, None, runs=args.runs, ledger_since=args.ledger_since, expect=args.expect, job=args.job,
        ledger_path=args.ledger or os.environ.get("EXECSYS_LEDGER"))
    report = run_shards(options)
    if args.json:
        from execsys.redact import scrub

        sys.stdout.write(json.dumps(scrub(report.to_json()), ensure_ascii=False) + "\n")
    else:
        render(report)
    return ExitCode.OK if report.exit_code == 0 else ExitCode.FINDING


def render(report) -> None:
    from execsys import console
    from execsys.canonical import short
    from execsys.termsafe import shown

    out = console.RedactingStream("stdout")

    def line(text: str) -> None:
        out.write(shown(text) + "\n")

    body = report.to_json()
    shards = body["shards"]
    of = shards["expected"] if shards["expected"] is not None else "?"
    job = f"job {report.job}" if report.job else "an unnamed job"
    line(f"shards     {shards['present']}/{of} present of {job} (N from {shards['expected_source']})")
    if shards["missing"]:
        line(f"  missing  {', '.join(map(str, shards['missing']))}")
    for entry in body["counts_disagree"]:
        line(f"  count    shards {', '.join(map(str, entry['shards']))} say N = {entry['count']}")
    for entry in body["out_of_range"]:
        line(f"  range    shard {entry['index']} ({entry['run']}) is outside 0-{(shards['expected'] or 1) - 1}")
    for entry in body["superseded"]:
        line(f"  rerun    shard {entry['index']}: {entry['run']} superseded by a newer run")
    agreement = body["identity_agreement"]
    line(f"identity   {agreement['k']}/{agreement['n']} shards share one system "
         f"{short(agreement['system'], 19)} (the pinned components less each machine's own facts)")
    for outlier in body["outliers"]:
        named = f" (identity {short(outlier['identity'], 12)})" if outlier["identity"] else ""
        if outlier["changes"]:
            changes = "; ".join(f"{c['component']} ({_change(c)})" for c in outlier["changes"])
        else:
            changes = outlier.get("note") or "no component differs"
        line(f"  outlier  shard {outlier['index']}{named}: {changes}")
    receipts = [r for run in body["runs"] for r in run.get("receipts") or []]
    if receipts:
        matching = sum(1 for r in receipts if r["verified"])
        line(f"receipts   {matching}/{len(receipts)} match the result files on disk")
    counts = ", ".join(f"{n} {verdict}" for verdict, n in body["verdicts"].items())
    line(f"verdicts   {counts or 'none'}")
    for entry in body["not_clean"]:
        line(f"  {entry['verdict']:<8} shard {entry['index']} ({entry['run']}): {entry['detail']}")
    if report.one_evaluation:
        line("verdict    one evaluation: every shard present, clean and of one system")
    else:
        line("verdict    not one evaluation: " + "; ".join(body["reasons"]))


def _change(change: dict) -> str:
    """'tiny -> other: declared.name: tiny -> other', the labels left out where neither has one."""
    fields = ", ".join(change["fields"][:5]) + (" ..." if len(change["fields"]) > 5 else "")
    labels = f"{change['modal'] or '?'} -> {change['this'] or '?'}" if change["modal"] or change["this"] else ""
    return ": ".join(p for p in (labels, fields) if p) or "differs"
