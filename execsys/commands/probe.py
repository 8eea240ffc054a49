"""``execsys probe AXIS``: measure where a serving stack stops repeating itself.

Argument parsing and rendering only; the engine is :mod:`execsys.probes.runner`.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

from execsys.cli import add_json, add_sources
from execsys.errors import UsageError

HELP = "measure agreement across a session, restart, load, hosts or a redeploy (m/n, Wilson CI)"

# One line (or a few) per axis: the combined help lists them all, `execsys probe AXIS --help` its own.
AXIS_LINES = {
    "session": "the cases twice within one server session (second pass in a seeded different order)",
    "restart": "pass A, --restart CMD, wait for --ready, pass B (says so if the engine itself changed)",
    "concurrency": "pass A at concurrency 1, pass B under --load K concurrent requests",
    "hosts": "one pass per --endpoint (repeat it, one per host); or 'probe merge RECORD...'",
    "redeploy": "a fresh pass against a stored probe record (--baseline RECORD_ID)",
    "grader": ("the same outputs graded twice (or --repeats N) by the declared [grader]\n"
               "(cases: {\"id\", \"prompt\", \"output\", \"expected\"?}, an lm-eval samples_<task>_*.jsonl,\n"
               "an Inspect .eval/.json log, or a probe's run/record id: what the model answered on its\n"
               "first pass; resumable like the other axes)"),
    "merge": "one hosts record from single-host probe records of the same cases (RECORD...)",
    "size": "how many cases a probe needs for a 95% interval as narrow as --width at rate --expect",
}
MEASURING = ("session", "restart", "concurrency", "hosts", "redeploy")

INTRO = """\
Send the same cases twice across one axis and report the agreement rate m/n with its
Wilson 95% interval -- never a pass/fail label. Even at temperature 0 a serving stack can
disagree with itself: batched kernels reorder floating-point sums, a near-tie flips, a
cached prefix changes the numerics. Where that starts is a fact to measure."""

CASES = """\
cases are JSON Lines: {"id", "prompt" | "messages", "max_tokens"?, "params"?, "expected"?}.
prompt -> /v1/completions, messages -> /v1/chat/completions. Decoding comes from the lock's
[budget] (temperature 0 unless declared; seed when declared)."""

IDENTITY = """\
The record is tied to the pinned identity: --lock, else execsys.lock.json beside the declaration
(--config, else $EXECSYS_CONFIG or ./execsys.toml). Without a lock the probe says so in one line
and records "identity": null with that reason: it will not count toward any scope. An endpoint
that stops accepting connections ends the probe after 5 failures in a row; --resume continues."""

EXAMPLES = """\
  execsys probe session --endpoint http://127.0.0.1:8000/v1 --cases cases.jsonl
  execsys probe restart --endpoint http://127.0.0.1:8000/v1 --cases cases.jsonl \\
      --restart 'systemctl restart vllm' --ready-timeout 300
  execsys probe concurrency --endpoint URL --cases cases.jsonl --load 16
  execsys probe session --command 'python harness.py' --cases cases.jsonl --compare outcome --extract last-number
  execsys probe hosts --endpoint http://gpu1:8000/v1 --endpoint http://gpu2:8000/v1 --cases cases.jsonl
  execsys probe redeploy --endpoint URL --cases cases.jsonl --baseline probe-20261130T010203-ab12cd34
  execsys probe merge probe-...-host1 probe-...-host2
  execsys probe grader --cases graded.jsonl --repeats 5 --extract 'regex:(correct|incorrect)'
  execsys probe grader --cases out/model/samples_gsm8k_2026-12-01T10-00-00.jsonl --resume
  execsys probe size --expect 0.95 --width 0.10   how many cases for a 95% interval that narrow
  execsys probe session ... --until-width 0.10 --max-n 500   stop once the interval is that narrow
  execsys probe session ... --resume --retry-errored          send the errored cases again
  execsys probe session ... --resume          continue the newest unfinished run with these parameters"""

SYSTEM_CHECK = """\
Every pass observes the serving runtime at its start and end and compares it with the lock
("system_check"): a probe of another system than the pinned one says so on stderr, records
"identity": null and counts toward no scope. A restart or redeploy probe whose serving process
(pid + start time) did not change is "no restart observed" / "no redeploy observed"."""

GRADER_CHECK = """\
The grader is observed as `execsys pin` records it before the first grading and after the last, and
compared with the lock's ("system_check"): a grader that is not the pinned one (grade.py edited,
before or during the probe) says so on stderr, records "identity": null and counts toward no scope."""

EXIT_CODES = """\
exit codes: 0 every case agreed, 1 some disagreed, or the probe measured another system than the
pinned one, or saw no restart/redeploy; 2 usage error or no case completed."""


def _axis_block(axes) -> str:
    lines = []
    for axis in axes:
        first, *rest = AXIS_LINES[axis].splitlines()
        lines.append(f"  {axis:<12} {first}")
        lines.extend(f"  {'':<12} {line}" for line in rest)
    return "\n".join(lines)


DESCRIPTION = "\n\n".join([
    INTRO,
    "axes:\n" + _axis_block([a for a in AXIS_LINES if a not in ("merge", "size")]),
    CASES, IDENTITY, "examples:\n" + EXAMPLES, SYSTEM_CHECK, EXIT_CODES,
])


def axis_description(axis: str) -> str:
    """The help of one axis: what it measures, what applies to it, its own examples."""
    examples = []
    for line in EXAMPLES.replace("\\\n", "\x00").splitlines():
        if line.strip().startswith(f"execsys probe {axis} "):
            examples.append(line.replace("\x00", "\\\n"))
    parts = [textwrap.fill(f"execsys probe {axis}: " + " ".join(AXIS_LINES[axis].split()), 96)]
    if axis in MEASURING:
        parts += [INTRO.split(". ", 1)[0] + ".", CASES, IDENTITY]
    elif axis == "grader":
        parts.append(IDENTITY.split(" An endpoint")[0])
    if examples:
        parts.append("examples:\n" + "\n".join(examples))
    if axis in MEASURING:
        parts += [SYSTEM_CHECK, EXIT_CODES]
    elif axis == "grader":
        parts.append(GRADER_CHECK)
        parts.append("exit codes: 0 every case graded the same each time, 1 some flipped, or the grader was not\n"
                     "the pinned one; 2 usage error or no case graded")
    elif axis == "merge":
        parts.append("exit codes: 0 every case agreed across the hosts, 1 some disagreed, 2 fewer than two "
                     "records, or records that cannot be merged")
    else:
        parts.append("exit codes: 0, 2 usage error")
    parts.append("all axes: execsys probe --help")
    return "\n\n".join(parts)


class _AxisHelp(argparse.Action):
    """``-h``/``--help``: after an axis (`execsys probe restart --help`) that axis's help, else all of it.

    argparse has taken the AXIS positional by the time it meets ``--help`` after it, so the action
    sees which axis was named; an unknown or missing one gets the combined help."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        axis = getattr(namespace, "axis", None)
        if axis in AXIS_LINES:
            axis_parser(axis, parser.prog).print_help()
        else:
            parser.print_help()
        parser.exit()


def axis_parser(axis: str, prog: str = "execsys probe") -> argparse.ArgumentParser:
    """A parser holding only what ``axis`` reads, for its help."""
    from execsys.cli import add_common

    parser = argparse.ArgumentParser(prog=f"{prog} {axis}", description=axis_description(axis),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, axis=axis)
    add_common(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser, *, axis: str | None = None) -> None:
    """Every option (``axis`` None: the parser `execsys probe` runs with), or only those ``axis`` reads
    (the parser its ``--help`` shows)."""

    def used_by(*axes: str) -> bool:
        return axis is None or axis in axes

    if axis is None:
        help_action = parser._option_string_actions.get("--help")
        if help_action is not None:  # the subparser's own -h/--help gives way to the axis-aware one
            parser._handle_conflict_resolve(help_action, [(o, help_action) for o in help_action.option_strings])
        parser.add_argument("-h", "--help", action=_AxisHelp, help="show this help message and exit "
                            "(after an axis: that axis's help)")
        parser.add_argument("axis", metavar="AXIS",
                            help="session | restart | concurrency | hosts | redeploy | merge | grader | size")
    if used_by("merge"):
        parser.add_argument("records", nargs="*", metavar="RECORD", help="(merge only) probe record ids to merge")
    # every group is made (argparse leaves an empty one out of the help); options only where read
    target = parser.add_argument_group("target")
    cases = parser.add_argument_group("cases and comparison")
    run = parser.add_argument_group("passes")
    size = parser.add_argument_group("size (execsys probe size)")
    group = parser.add_argument_group("axis options")
    if used_by(*MEASURING):
        target.add_argument("--endpoint", action="append", default=[], metavar="URL",
                            help="OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (repeat for the hosts axis)")
        target.add_argument("--command", dest="target_command", metavar="CMD", help="a harness command: one case as JSON on stdin, output on stdout")
        target.add_argument("--model", metavar="NAME", help="model name to request (default: the one the endpoint lists)")
        target.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key (never recorded)")
    if used_by(*MEASURING, "grader"):
        target.add_argument("--timeout", type=float, metavar="S", help="per-request timeout in seconds (default 120)")
    if used_by(*MEASURING):
        target.add_argument("--retries", type=int, default=3, metavar="N", help="retries on 5xx/timeouts/bad bodies (default 3)")
    if used_by(*MEASURING, "grader"):
        cases.add_argument("--cases", metavar="FILE", help="JSON Lines cases file (or [probe] cases); for grader also an "
                           "lm-eval samples_<task>_*.jsonl, an Inspect .eval/.json log, or a probe's run or record id")
        cases.add_argument("--n", type=int, metavar="N", help="use the first N cases (or a seeded sample with --sample)")
    if used_by(*MEASURING):
        cases.add_argument("--sample", type=int, metavar="SEED", help="with --n: a seeded random sample instead of the first N")
        cases.add_argument("--compare", choices=("output", "outcome"), help="headline level (default output; both are reported)")
    if used_by(*MEASURING, "grader"):
        cases.add_argument("--extract", metavar="SPEC",
                           help="outcome extractor: regex:PATTERN, json:PATH, last-number or command:CMD")
    if used_by(*MEASURING):
        cases.add_argument("--tokens", action="store_true",
                           help="ask for logprobs so a divergence is also located by token index")
        cases.add_argument("--logprobs", type=int, metavar="K",
                           help="top-K token logprobs per pass, for the margin at a flip's first divergent token "
                                "(default 5; 0 turns it off; an engine without them is recorded as unsupported)")
        cases.add_argument("--tie-margin", type=float, metavar="NATS",
                           help="a flip whose margin is at most this is a near-tie (default 0.1 nats)")
    if used_by(*MEASURING, "grader"):
        run.add_argument("--repeats", type=int, metavar="N", help="N passes (N >= 2): agreement = all N identical")
    if used_by(*MEASURING):
        run.add_argument("--concurrency", type=int, default=1, metavar="C", help="requests in flight per pass (default 1)")
        run.add_argument("--order-seed", type=int, default=0, metavar="S", help="seed of the shuffled order of later passes")
    if used_by(*MEASURING, "grader"):
        run.add_argument("--resume", nargs="?", const=True, default=False, metavar="RUN_ID",
                         help="continue the newest unfinished run with the same parameters (or RUN_ID)")
        run.add_argument("--retry-errored", action="store_true",
                         help="with --resume: send the cases that errored again (the completed ones are kept)")
    if used_by(*MEASURING):
        run.add_argument("--until-width", type=float, metavar="W",
                         help="stop once the 95%% interval is at most W wide (cases in the seeded order)")
        run.add_argument("--max-n", type=int, metavar="N", help="with --until-width: take at most N cases")
    if used_by("size"):
        size.add_argument("--expect", type=float, metavar="RATE", help="the agreement rate you expect (e.g. 0.95)")
        size.add_argument("--width", type=float, metavar="W", help="the widest 95%% interval you accept (e.g. 0.10)")
    if used_by("restart"):
        group.add_argument("--restart", metavar="CMD", help="restart command for the restart axis (or runtime.restart)")
        group.add_argument("--ready", metavar="URL|CMD", help="readiness check after a restart (default: GET <endpoint>/models)")
        group.add_argument("--ready-timeout", type=float, metavar="S", help="seconds to wait for readiness (default 120)")
    if used_by("concurrency"):
        group.add_argument("--load", type=int, metavar="K", help="concurrency axis: requests kept in flight during pass B")
    if used_by("redeploy"):
        group.add_argument("--baseline", metavar="RECORD_ID", help="redeploy axis: the stored probe record to compare against")
    if used_by("grader"):
        group.add_argument("--via", choices=("judge", "command"),
                           help="grader: grade through [grader.judge] or [grader] command (default: the judge if declared)")
    if used_by(*MEASURING, "grader"):
        add_sources(parser, lock_help="the identity to tie the record to (default: execsys.lock.json beside the "
                                      "declaration; without one the probe counts toward no scope, and says so)")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    if args.axis == "merge":
        return _merge(args)
    if args.axis == "grader":
        return _grader(args)
    if args.axis == "size":
        return _size(args)
    if args.records:
        raise UsageError(f"unexpected arguments after the axis: {' '.join(args.records)}")
    options = build_options(args)
    from execsys.commands.probe_render import ProgressReporter, render_record
    from execsys.console import err, out, stderr_is_terminal
    from execsys.probes.runner import ProbeInterrupted, run_probe

    cancel = threading.Event()
    try:
        with _first_interrupt_stops(cancel, "the requests in flight"), \
                ProgressReporter(err(), live=stderr_is_terminal()) as reporter:
            record = run_probe(options, on_event=reporter, cancel=cancel)
    except ProbeInterrupted as exc:
        sys.stderr.write(
            f"execsys probe: interrupted: {exc.saved} of {exc.total} case results saved in run {exc.run_id}\n"
            f"resume with: {_resume_command(exc.run_id)}\n"
        )
        return 130
    if args.json:
        record.write_json(sys.stdout)  # print_json's exact text, streamed case by case (flat in n)
    else:
        render_record(record, out())
    return record.exit_code


@contextlib.contextmanager
def _first_interrupt_stops(cancel: threading.Event, in_flight: str) -> Iterator[None]:
    """The first Ctrl-C sets ``cancel`` (the run saves what it has and says how to resume); a second
    one quits at once. The previous handler is back on the way out."""
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        sys.stderr.write(f"stopping after {in_flight} (Ctrl-C again to quit at once)\n")

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def build_options(args: argparse.Namespace):
    """The flags as overrides (None = not given) for :meth:`ProbeOptions.from_sources`, over the
    declaration (``--config``) and the lock (``--lock``, else the one beside the declaration)."""
    from execsys.probes.axes import AXES
    from execsys.probes.runner import ProbeOptions
    from execsys.sources import load_sources

    if args.axis not in AXES:
        raise UsageError(f"unknown axis {args.axis!r}: choose one of {', '.join(AXES)} or merge")
    sources = load_sources(args.config, args.lock, ledger=args.ledger)
    return ProbeOptions.from_sources(
        sources,
        axis=args.axis,
        endpoints=list(args.endpoint),
        command=args.target_command,
        cases=args.cases,
        model=args.model,
        n=args.n,
        sample_seed=args.sample,
        compare=args.compare,
        extract=args.extract,
        repeats=args.repeats,
        concurrency=args.concurrency,
        load=args.load,
        restart=args.restart,
        ready=args.ready,
        ready_timeout=args.ready_timeout,
        baseline=args.baseline,
        order_seed=args.order_seed,
        timeout=args.timeout,
        retries=args.retries,
        api_key_env=args.api_key_env,
        want_tokens=args.tokens or None,
        logprobs=args.logprobs,
        tie_margin=args.tie_margin,
        until_width=args.until_width,
        max_n=args.max_n,
        retry_errored=args.retry_errored or None,
        resume=args.resume or None,
    )


def _resume_command(run_id: str) -> str:
    from execsys.redact import redact_argv

    argv = list(sys.argv[1:])
    cleaned: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--resume":
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            skip = bool(nxt) and not nxt.startswith("-") and nxt.startswith("probe-run-")
            continue
        if arg.startswith("--resume="):
            continue
        cleaned.append(arg)
    return "execsys " + shlex.join(redact_argv(cleaned)) + f" --resume {run_id}"


def _size(args: argparse.Namespace) -> int:
    import math

    from execsys.console import out, print_json
    from execsys.stats import cases_for_width, wilson_width

    if args.records:
        raise UsageError(f"unexpected arguments after 'probe size': {' '.join(args.records)}")
    if args.expect is None or args.width is None:
        raise UsageError("probe size needs --expect RATE (e.g. 0.95) and --width W (e.g. 0.10)")
    if not math.isfinite(args.expect) or not 0 <= args.expect <= 1:
        raise UsageError(f"--expect must be a rate between 0 and 1, got {args.expect}")
    if not math.isfinite(args.width) or not 0 < args.width <= 1:
        raise UsageError(f"--width must be greater than 0 and at most 1, got {args.width}")
    try:
        n = cases_for_width(args.expect, args.width)
    except ValueError as exc:
        raise UsageError(f"--width {args.width}: {exc}") from None
    if args.json:
        print_json({"n": n, "expect": args.expect, "width": args.width})
    else:
        out().print(f"{n} cases: at an observed rate of {args.expect:g} the 95% Wilson interval is "
                    f"{wilson_width(args.expect, n):.4f} wide (at most {args.width:g})")
    return 0


def _merge(args: argparse.Namespace) -> int:
    from execsys.commands.probe_render import render_record
    from execsys.console import out, print_json
    from execsys.ledger import Ledger
    from execsys.probes.merge import merge

    if len(args.records) < 2:
        raise UsageError("probe merge needs two or more probe record ids (one per host)")
    with Ledger.open(args.ledger) as ledger:
        record = merge(ledger, list(args.records))
    if args.json:
        print_json(record.to_json())
    else:
        render_record(record, out())
    return record.exit_code



def _grader(args: argparse.Namespace) -> int:
    """``execsys probe grader``: the grader's own agreement (engine: :mod:`execsys.probes.grader`)."""
    from execsys.console import print_json, stderr_is_terminal
    from execsys.errors import InputError
    from execsys.probes.events import Note, RunOpened
    from execsys.probes.grader import CaseGraded, GraderProbeOptions, run_grader_probe
    from execsys.probes.runner import ProbeInterrupted
    from execsys.sources import load_sources

    if args.records:
        raise UsageError(f"unexpected arguments after the axis: {' '.join(args.records)}")
    sources = load_sources(args.config, args.lock)
    options = GraderProbeOptions.from_sources(sources.declaration, sources.lock, cases=args.cases,
                                              repeats=args.repeats, extract=args.extract, via=args.via, n=args.n,
                                              timeout=args.timeout, ledger=getattr(args, "ledger", None),
                                              resume=args.resume or None, retry_errored=args.retry_errored or None)
    cancel = threading.Event()
    live = stderr_is_terminal()

    def on_event(event: Any) -> None:
        if isinstance(event, Note):
            sys.stderr.write(("\n" if live else "") + event.message + "\n")
        elif isinstance(event, RunOpened) and not live:
            # said before the first grading, so a run killed outright can still be resumed by its id
            sys.stderr.write(f"{'resuming' if event.resumed else 'grading into'} run {event.run_id}\n")
        elif live and isinstance(event, CaseGraded):
            sys.stderr.write(f"\rgrading {event.done}/{event.total} (repeat {event.repeat} of {event.repeats})")
            if event.done == event.total:
                sys.stderr.write("\n")

    try:
        with _first_interrupt_stops(cancel, "the grading in flight"):
            report = run_grader_probe(options, on_event=on_event, cancel=cancel)
    except ProbeInterrupted as exc:
        sys.stderr.write(
            f"execsys probe grader: interrupted: {exc.saved} of {exc.total} gradings saved in run {exc.run_id}\n"
            f"resume with: {_resume_command(exc.run_id)}\n"
        )
        return 130
    if report.n == 0:
        first = report.errored[0]["errors"][0] if report.errored and report.errored[0]["errors"] else "no case graded"
        resume = (f"; once fixed: {_resume_command(report.run)}" + ("" if args.retry_errored else " --retry-errored")
                  if report.run else "")
        raise InputError(f"probe grader: no case could be graded {report.repeats} times ({first}){resume}")
    if args.json:
        print_json(report.to_json())
    else:
        _render_grader(report)
    return report.exit_code


def _render_grader(report: Any) -> None:
    """The flipped cases with every verdict (and the judge's reply), then the sentence."""
    from execsys.console import out

    console = out()
    for case in report.flipped:
        console.print(f"\u25b8 {case['id']}: " + " | ".join(repr(v) for v in case["verdicts"]), markup=False)
        for index, rationale in enumerate(case.get("rationales") or [], 1):
            console.print(f"    {index}: {' '.join(str(rationale).split())[:100]}", markup=False)
    if report.errored:
        console.print(f"{len(report.errored)} case(s) errored on some grading and are excluded from n", markup=False)
    console.print(report.sentence, markup=False)
    if report.identity_reason:  # the agreement of another grader than the pinned one: said beside it
        console.print(report.identity_reason, markup=False)
