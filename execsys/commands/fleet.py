"""``execsys fleet``: add host reports up to a fleet answer (identity, artifact digests, hazards)."""

from __future__ import annotations

import argparse

from execsys.cli import add_json, add_sources
from execsys.errors import ExitCode

HELP = "are all hosts serving the same bytes under the same identity? (host reports -> fleet answer)"
DESCRIPTION = """\
Read host reports -- an Ansible fact cache or `ansible ... --tree` output of contrib/ansible's
execsys_facts module, the ledger's records from many hosts, or doctor / node-check / pin JSON
files -- and answer for the fleet:

  identity agreement   k/n hosts share the modal fleet digest (a sha256 of the pinned components
                       minus what names one machine: hostname, machine id, GPU UUIDs; not the
                       execsys identity id, which each outlier is named by where its report has it);
                       each outlier with the components that differ from the mode
  digest match rate    hosts whose artifact digest equals the expected one (the lock's, else the
                       declared, else the fleet's modal digest); every mismatch is an integrity defect
  hazard matrix        hazard x host, the worst hazard first, with counts

A doctor report and a pin report of one host are one host; two reports of one kind naming the
same host both count, and the second is flagged (keyed host#2). --prom writes node_exporter
textfile metrics atomically: execsys_doctor_hazard_status{host,hazard},
execsys_identity_info{host,fleet_digest,identity},
execsys_fleet_identity_agreement, execsys_fleet_digest_match_ratio.

examples:
  ansible gpu -m execsys_facts --tree facts/ && execsys fleet --from-ansible facts/
  execsys fleet --ledger-since 24h --prom /var/lib/node_exporter/textfile/execsys.prom
  execsys fleet reports/*.json --lock execsys.lock.json --json | jq .digest_match

exit codes: 0 the fleet agrees, 1 identities disagree, a digest mismatches, a hazard fails or a
host could not be inspected, 2 usage or input error
"""

LIST_LIMIT = 20  # names shown per line in human output; --json has them all


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="*", metavar="REPORT",
                        help="doctor, node-check or pin JSON files (or directories of them)")
    parser.add_argument("--from-ansible", metavar="DIR",
                        help="an Ansible fact cache (jsonfile) or `ansible ... --tree DIR` output")
    parser.add_argument("--ledger-since", metavar="T",
                        help="the ledger's newest doctor and identity record per host since T "
                             "(ISO date/time, or an age: 90m, 24h, 7d)")
    parser.add_argument("--prom", metavar="FILE", help="write Prometheus textfile-collector metrics (atomically)")
    parser.add_argument("--expected-digest", metavar="DIGEST",
                        help="the artifact digest every host must serve (default: the lock's, if any)")
    add_sources(parser, lock_help="the pinned identity whose artifact digest every host must serve "
                                  "(default: execsys.lock.json beside the declaration, if present)")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    import json
    import os
    import sys

    from execsys.fleet import FleetOptions, run_fleet
    from execsys.sources import load_sources

    sources = load_sources(args.config, args.lock)
    options = FleetOptions.from_sources(
        sources.declaration, sources.lock, reports=args.reports or None, from_ansible=args.from_ansible,
        ledger_since=args.ledger_since, ledger_path=args.ledger or os.environ.get("EXECSYS_LEDGER"),
        prom=args.prom, expected_digest=args.expected_digest)
    report = run_fleet(options)
    if args.json:
        from execsys.redact import scrub

        sys.stdout.write(json.dumps(scrub(report.to_json()), ensure_ascii=False) + "\n")
    else:
        render(report)
    return ExitCode.OK if report.exit_code == 0 else ExitCode.FINDING


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:LIST_LIMIT])
    return shown + (f" ... and {len(items) - LIST_LIMIT} more" if len(items) > LIST_LIMIT else "")


def render(report) -> None:
    from execsys import console
    from execsys.canonical import short
    from execsys.termsafe import shown

    # Plain lines, redacted like every console line: nothing here is styled, and rich's import
    # would be a tenth of a 10,000-host run
    out = console.RedactingStream("stdout")

    def line(text: str) -> None:
        out.write(shown(text) + "\n")  # one line each: a newline inside a host name cannot forge another

    if report.reports > report.hosts:  # a doctor and a pin report of one host are one host
        line(f"{report.hosts} host{'s' if report.hosts != 1 else ''} from {report.reports} host reports")
    else:
        line(f"{report.hosts} host reports")
    k, n = report.identity_k, report.identity_n
    if n:
        line(f"identity   {k}/{n} share the modal fleet digest {short(report.modal_fleet_digest, 19)} (the "
             "pinned components less each machine's own facts; not an execsys identity id)")
    else:
        line("identity   no report carries an identity (pin JSON or execsys_facts)")
    outliers = list(report.outliers())
    for outlier in outliers[:LIST_LIMIT]:
        changes = ", ".join(f"{c['component']} ({c['modal'] or '?'} -> {c['this'] or '?'})" for c in outlier["changes"])
        named = f" (identity {short(outlier['identity'], 12)})" if outlier["identity"] else ""
        line(f"  outlier  {outlier['host']}{named}: {changes or 'no component differs'}")
    if len(outliers) > LIST_LIMIT:
        line(f"  ... and {len(outliers) - LIST_LIMIT} more outliers (--json lists them all)")
    body = report.digest_match()
    if body["n"]:
        line(f"digests    {body['k']}/{body['n']} = {body['ratio']:.3f} match {short(body['expected'], 19)} "
             f"({body['expected_source']})")
    else:
        line("digests    no report carries an artifact digest")
    defects = body["defects"]
    for defect in defects[:LIST_LIMIT]:
        line(f"  DEFECT   {defect['host']}: serves {short(defect['digest'], 19)}, expected "
             f"{short(defect['expected'], 19)} (integrity defect)")
    if len(defects) > LIST_LIMIT:
        line(f"  ... and {len(defects) - LIST_LIMIT} more integrity defects (--json lists them all)")
    counts = report.hazard_counts()
    if report.hazard_ids:
        line("hazards    worst first: fail / error / warn / ok / skip")
    for hazard in report.hazard_ids:
        c = counts[hazard]
        bad = [r.key for r in report.records if r.hazards and r.hazards.get(hazard) in ("fail", "error")]
        tail = f"  {_names(bad)}" if bad else ""
        line(f"  {hazard:<18} {c['fail']:>5} {c['error']:>5} {c['warn']:>5} {c['ok']:>5} {c['skip']:>5}{tail}")
    for host, count in report.duplicates.items():
        line(f"duplicate  {host} is named by {count} reports (each counted; keyed {host}#2 ...)")
    problems = list(report.problems())
    for problem in problems[:LIST_LIMIT]:
        line(f"problem    {problem['host']}: {problem['problem']}")
    if len(problems) > LIST_LIMIT:
        line(f"  ... and {len(problems) - LIST_LIMIT} more hosts with problems")
    if report.prom_path:
        line(f"metrics    {report.prom_path}")
    line("verdict    the fleet agrees" if report.agrees else "verdict    the fleet disagrees")
