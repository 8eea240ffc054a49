"""``execsys explain A B``: why the score changed, from the evidence the ledger holds. Wiring and
rendering only; the engine is :mod:`execsys.explain`."""

from __future__ import annotations

import argparse

from execsys.cli import add_json, non_negative_int, positive_float
from execsys.errors import ExitCode

HELP = "explain a score change: what moved, the flips, the measured noise floor, one verdict"
DESCRIPTION = """\
A and B are two results compare accepts (result files, lm-eval results, Inspect logs, run ids,
plan-run-...:ARM, probe-...:PASS). explain puts together what execsys already holds about them:

  what moved    the components that differ between the two identities (or "no identity recorded")
  flips         right->wrong and wrong->right over the cases paired by id, exact McNemar p, the
                paired difference B - A with its 95% interval
  noise floor   for each axis separating A from B (session, restart, hosts, concurrency) the agreement
                scope measured for both identities, and the flips it alone predicts (95% interval);
                an axis never probed, or licensed unverified, is unmeasured, never assumed quiet
  margins       which flips are near-ties, where both are probe passes with logprobs or lm-eval
                multiple-choice results (the gap between the two best choices)
  verdict       within-measured-noise | attributable (one component moved, flips beyond noise:
                more than predicted, or lopsided, McNemar p < 0.05) |
                not-attributable (several moved: the paired plans that separate them) |
                unmeasured (the noise floor is unknown: the probe that would measure it)

--rerun A=URL --rerun B=URL sends the flipped cases and a seeded sample of the agreeing ones to both
systems again in one registered AB/BA window (the plan engine; results scored right or wrong, with
the cases they were made from): a flip that both systems score as before reproduces (a system
effect); one that does not was noise.

examples:
  execsys explain out/before/results.json out/after/results.json
  execsys explain run-20261201T100000-1a2b run-20261202T100000-3c4d --json
  execsys explain probe-20261201T100000-ab12cd34:0 probe-20261201T100000-ab12cd34:1
  execsys explain plan-run-20261201T100000-1a2b:A plan-run-20261201T100000-1a2b:B \\
      --rerun A=http://gpu1:8000/v1 --rerun B=http://gpu2:8000/v1

exit codes: 0 within measured noise, 1 any other verdict (the difference is real, or cannot be told
apart from noise yet), 2 unreadable results or a bad argument
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", help="result A (file, run id, RECORD:ARM or RECORD:PASS)")
    parser.add_argument("b", help="result B")
    parser.add_argument("--tie-margin", type=positive_float, metavar="NATS",
                        help="a flip whose first-divergence margin is at most this is a near-tie (default 0.1)")
    rerun = parser.add_argument_group("re-run (the flips reproduce, or not)")
    rerun.add_argument("--rerun", action="append", metavar="ARM=URL",
                       help="send the flipped cases and a sample of the agreeing ones to both systems again in "
                            "one AB/BA window: --rerun A=URL --rerun B=URL")
    rerun.add_argument("--cases", metavar="FILE",
                       help="the cases the results were made from (default: the probe's or the plan's cases file)")
    rerun.add_argument("--sample", type=non_negative_int, metavar="N",
                       help="agreeing cases to send again (default: as many as flipped, at least 10)")
    rerun.add_argument("--seed", type=int, default=0, help="seed of the sample and the AB/BA order (default 0)")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.explain import ExplainOptions, run_explain
    from execsys.plan.schedule import parse_assignments

    rerun = parse_assignments(args.rerun, "--rerun", "URL", "A=http://127.0.0.1:8000/v1", once=True) \
        if args.rerun else None
    options = ExplainOptions.from_sources(None, None, a=args.a, b=args.b, tie_margin=args.tie_margin, rerun=rerun,
                                          cases=args.cases, sample=args.sample, seed=args.seed, ledger=args.ledger)
    report = run_explain(options, on_event=None if args.json else _progress())
    if args.json:
        console.print_json(report.to_json())
    else:
        _render(report)
    return ExitCode.OK if report.exit_code == 0 else ExitCode.FINDING


def _progress():
    """Re-run progress on stderr, one line per case sent (the plan engine's events)."""
    from execsys import console
    from execsys.plan.run import CaseSent

    err = console.err()

    def show(event) -> None:
        if isinstance(event, CaseSent):
            err.print(f"re-run {event.step}/{event.total}: {event.case_id} to {event.arm}", markup=False)

    return show


def _render(report) -> None:
    from rich.markup import escape

    from execsys import console
    from execsys.explain import WITHIN, report_lines

    out = console.out()
    for kind, line in report_lines(report):
        if kind == "verdict":
            status = "ok" if report.verdict == WITHIN else "warn"
            out.print(f"[{console.STYLES[status]}]{report.verdict}[/]: {escape(report.sentence)}")
        else:
            out.print(escape(line))
