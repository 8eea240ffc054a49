"""``execsys run [options] -- CMD [ARGS...]``: run an evaluation harness inside the execution system's record."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from execsys.cli import add_json, add_sign_key, add_sources
from execsys.errors import UsageError

HELP = "run an evaluation harness with its identity pinned before, watched during, verified after"
DESCRIPTION = """\
Runs the harness command given after '--' in seven steps, one line each on stderr:
gate (the doctor: a failing hazard refuses the run), identity (verify the lock, or pin one now),
run (the command, with EXECSYS_RUN_ID, EXECSYS_IDENTITY and EXECSYS_LOCK in its environment),
watch (the serving runtime every --watch seconds), verify after, results (the files written during
the run, BLAKE3 each), record (an execsys.run/3 ledger record, a <result>.execsys.json sidecar
beside each result, and beside it a receipt, <result>.execsys.intoto.json: an in-toto Statement of
the results' sha256 and BLAKE3 and the run record, in a DSSE envelope signed with --sign-key or
[receipts] key, unsigned without one; check it with 'execsys receipt verify'). lm-eval gets
--metadata '{"execsys": {...}}' added, so the identity lands in its results JSON; Inspect AI gets it
through execsys's hook (pip install 'execsys[inspect]').

in a job: where the environment carries EXECSYS_LOCK (a Slurm TaskProlog running `execsys pin
--task-prolog`, or an enclosing execsys run), that lock is the one verified unless --lock is given,
and its own declaration is used unless --config, $EXECSYS_CONFIG or ./execsys.toml names one. A lock
re-pinned since the job started (it no longer holds $EXECSYS_IDENTITY) refuses the run unless --repin.

in a sharded evaluation: the record's shard ({index, count, source, job}) comes from a Slurm job
array's SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT / SLURM_ARRAY_JOB_ID, a Kubernetes Indexed Job's
JOB_COMPLETION_INDEX (with --shard K/N for its N), or --shard K/N[@JOB]; 'execsys shards' checks the
shards' runs as one evaluation.

verdicts: clean, drifted (the runtime moved: compare causally with nothing), overridden (ran past a
failing gate), failed (the harness exited non-zero), interrupted (stopped by a signal), refused.

examples:
  execsys run -- lm_eval --model local-completions --tasks gsm8k --output_path out --log_samples
  execsys run --watch 10 -- inspect eval task.py --model openai-api/local/tiny
  execsys run --override "port 8000 shared with the metrics proxy, checked" -- python eval.py
  execsys run --result 'scores/*.json' --json -- ./eval.sh > run.json

signals: SIGINT, SIGTERM and SIGHUP (a closing terminal or ssh session) are forwarded to the
harness's process group; after SIGTERM or SIGHUP it has 10 s to stop before SIGKILL. The run is
recorded either way (verdict interrupted).

the ledger row is written before any sidecar: a result still being written after the harness exited,
or a sidecar that cannot be written (a read-only or full directory, a FIFO at its name), is stated
in one line and in the record (result_errors, sidecar_errors, receipt_errors), and the run is still
recorded.

exit codes: the harness's when it failed or was interrupted (128+N for signal N where it exited 0);
1 when drifted or refused, or when a result, sidecar or receipt could not be written down; 0 when
clean; 2 bad usage (no '--', a bad lock, a --result directory that does not exist, a --sign-key that
cannot sign)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sources(parser)
    parser.add_argument("--gate", choices=("fail", "warn", "off"), default=None,
                        help="fail (default): a failing hazard refuses the run; warn: report only; off: no doctor")
    parser.add_argument("--override", metavar="REASON",
                        help="run past a failing gate; the reason is recorded with the run")
    parser.add_argument("--repin", action="store_true",
                        help="when the lock no longer matches, pin the system as it is instead of refusing")
    parser.add_argument("--watch", dest="watch_s", type=float, metavar="S", default=None,
                        help="re-observe the serving runtime every S seconds while the harness runs "
                             "(default 30; 0 = off)")
    parser.add_argument("--result", dest="results", action="append", metavar="PATH|GLOB", default=[],
                        help="a result file the harness writes (repeatable; lm-eval's --output_path and "
                             "Inspect's --log-dir are found without it)")
    parser.add_argument("--sidecar-dir", metavar="DIR",
                        help="write the sidecars here instead of beside each result, as "
                             "<result>.<12 hex of BLAKE3(result's absolute path)>.execsys.json, so two results "
                             "with one name keep two sidecars")
    parser.add_argument("--shard", metavar="K/N[@JOB]",
                        help="this run is shard K of N (from 0) of one evaluation, JOB naming it; read from "
                             "Slurm's SLURM_ARRAY_* without it, and from JOB_COMPLETION_INDEX in a Kubernetes "
                             "Indexed Job (which gives no N: say it here). Check the shards with 'execsys shards'")
    add_sign_key(parser)
    add_json(parser)
    parser.add_argument("harness_command", nargs=argparse.REMAINDER, metavar="-- CMD", help="-- then the harness command and its arguments")


def options_from_args(args: argparse.Namespace):
    from execsys.run.options import RunOptions, load_run_sources

    command = list(args.harness_command or [])
    if not command or command[0] != "--":
        raise UsageError("put the harness command after '--': execsys run [options] -- CMD [ARGS...]")
    sources, job = load_run_sources(args.config, args.lock, os.environ, ledger=args.ledger)
    return RunOptions.from_sources(
        sources, command=command[1:],
        gate=args.gate, override=args.override, repin=args.repin or None, watch_s=args.watch_s,
        results=args.results, sidecar_dir=args.sidecar_dir, child_stdout_to_stderr=args.json or None, job=job,
        sign_key=args.sign_key, shard=args.shard,
    )


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.run.runner import run_eval

    options = options_from_args(args)
    record = run_eval(options, on_event=StepPrinter())
    if args.json:
        try:
            console.print_json(record.to_json() | {"sidecars": record.sidecars, "receipts": record.receipts})
            sys.stdout.flush()
        except OSError:
            if "SIGHUP" not in record.signals:
                raise
            # the terminal that would show it has closed: the record is in the ledger, the exit
            # status is the run's
            with contextlib.suppress(OSError, ValueError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    return record.exit_status


class StepPrinter:
    """One stderr line per step (and per drift event, signal and result), symbol first.

    rich styles them on a terminal; piped, the lines are written plainly (and rich is never imported:
    the wrapper's own cost is the point of keeping it small)."""

    def __init__(self) -> None:
        from execsys import console
        from execsys.run.drift import LookNarrator

        self.rich = console.stderr_is_terminal()
        self.narrator = LookNarrator()  # each look's drift worded against what was seen before it
        self.drift: list[dict] = []  # every drift event heard, for the summary when the watch ends

    def __call__(self, event: object) -> None:
        from execsys import console
        from execsys.redact import redact_text
        from execsys.run import events
        from execsys.termsafe import shown

        status, text, more = None, None, []
        if isinstance(event, events.StepFinished):
            status, text = event.status, f"{event.step:<8} {event.text}"
            if event.step == "watch" and self.drift:
                from execsys.run.drift import summary_lines

                # each change once, as a delta, with its count: one restart is many events
                more = summary_lines(self.drift)
        elif isinstance(event, events.StepStarted) and event.step == "run":
            status, text = "start", f"run      {event.text}"
        elif isinstance(event, events.DriftDetected):
            look = list(event.events) or [event.event]
            self.drift.extend(look)
            status, text = "warn", f"drift    {look[0].get('at')} {self.narrator.line(look)}"
        elif isinstance(event, events.SignalForwarded):
            status, text = "warn", f"signal   {event.signal} sent to the harness (process group {event.pid})"
        elif isinstance(event, events.ResultFound):
            status, text = "result", f"result   {event.path} {event.blake3[:16]} ({event.harness})"
        if status is None or text is None:
            return
        symbol = {"start": "→", "result": " "}.get(status) or console.symbol(status)
        lines = [(symbol, text)] + [(" ", f"         {line}") for line in more]
        # a line that cannot be shown (the terminal closed under a SIGHUP: EIO) must not stop the run
        # from being recorded
        with contextlib.suppress(OSError):
            for mark, line in lines:
                line = shown(redact_text(line))  # argv, paths and drift values are the harness's and the engine's
                if not self.rich:
                    sys.stderr.write(f"{mark} {line}\n")
                    sys.stderr.flush()
                    continue
                from rich.markup import escape

                style = console.STYLES.get(status, "dim")
                console.err().print(f"[{style}]{mark}[/] {escape(line)}", highlight=False)
