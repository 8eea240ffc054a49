"""``execsys plan``: pre-registered, counterbalanced paired runs (contemporaneous paired control)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from execsys.cli import add_json, add_sources, positive_float
from execsys.errors import ExitCode, UsageError

HELP = "pre-register and run a counterbalanced paired comparison of two arms"
DESCRIPTION = """\
When a boundary is unstable (execsys scope), a causal claim needs a contemporaneous paired control:
both arms inside one window, everything fixed but the intervention, the order of arms registered in
advance and counterbalanced so that running first cannot pass for the effect.

  plan new    build the schedule (execsys.plan/1) and register it in the ledger before any case runs
  plan run    execute the registered order against two OpenAI-compatible endpoints; report the
              paired difference with an exact McNemar test and a 95% interval; the claim is causal
              only when order, placement, window and identity checks all held
  plan check  reject a plan edited after registration (exit 2); with --executed LOG, report order
              violations, arms outside the window, restarts between arms, placement not as registered

Cases are the probe format (JSON Lines: id, prompt or messages, expected). Remote placement
(--placement A=HOST) is checked before the arm starts: (a) registered before any case ran, (b) the
artifact digest computed on the host over SSH equals the lock's, (c) the host's identity recorded,
(d) the host admissible under [placement] allowed in execsys.toml.

examples:
  execsys plan new --arms A B --cases cases.jsonl --design abba --seed 7 --out plan.json
  execsys plan run plan.json --arm A=http://127.0.0.1:8001/v1 --arm B=http://127.0.0.1:8002/v1 \\
      --extract last-number --log executed.jsonl
  execsys plan check plan.json --executed executed.jsonl

The declaration and the lock are found as everywhere (--config, else $EXECSYS_CONFIG, else
./execsys.toml; --lock, else execsys.lock.json beside the declaration). 'plan new' records the
lock's identity in the plan; 'plan run' checks the plan was registered for the lock's identity and
verifies remote placement (b) against its artifact digest. With no lock, 'plan new' and 'plan run'
say so in one line on stderr, and --json records "identity": null with "identity_reason".

Each arm's system is checked: 'plan run' observes every arm's serving runtime (models, version, the
serving process's pid, start time, argv, numerics environment) at the start and end of the window and
compares it with the arm's lock -- --arm-lock ARM=PATH for an arm that is a pinned system of its own
(two artifacts, two engine builds: pin each), else the run's lock. The record (execsys.plan-run/2)
has per arm "system_check" {verdict: matches-lock|differs|unverified, at_start, at_end, differences}
and "identity": the lock's id when the arm matches it, else null with "identity_reason". An arm that
is not its pinned system is said in one line on stderr as it is seen ("arm B: the engine answering
this plan is not the pinned system: runtime argv +--n_batch 7"). 'execsys compare RUN:A RUN:B'
derives what moved from the arms' own identities.

exit codes: new 0; run 0 causal, 1 descriptive (a check failed); check 0 clean, 1 violations;
2 a tampered or unregistered plan, unknown arms, a malformed log, a named lock that does not
exist or other bad input
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    new = sub.add_parser("new", help="build and register a counterbalanced schedule",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                             "examples:\n"
                             "  execsys plan new --arms A B --cases cases.jsonl --design abba --seed 7 --out plan.json\n"
                             "  execsys plan new --arms base tuned --cases cases.jsonl --placement base=gpu1 "
                             "--placement tuned=gpu2 \\\n      --lock execsys.lock.json --out plan.json"))
    new.add_argument("--arms", nargs=2, metavar=("A", "B"), required=True, help="the two arm names")
    new.add_argument("--cases", metavar="FILE", required=True, help="cases, JSON Lines (probe format)")
    new.add_argument("--design", default="abba", help="abba (default) or random (balanced)")
    new.add_argument("--seed", default="0", help="seed for the case order and the counterbalance (default 0)")
    new.add_argument("--placement", action="append", metavar="ARM=HOST", help="register where an arm runs (repeat)")
    add_sources(new, lock_help="record this identity in the plan: a lock file, or an identity or record id the "
                               "ledger knows (default: execsys.lock.json beside the declaration)")
    new.add_argument("--out", metavar="FILE", help="write the plan here (default: print it)")
    add_json(new)

    run = sub.add_parser("run", help="execute a registered plan against two endpoints",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                             "examples:\n"
                             "  execsys plan run plan.json --arm A=http://127.0.0.1:8001/v1 "
                             "--arm B=http://127.0.0.1:8002/v1 --extract last-number\n"
                             "  execsys plan run plan.json --arm A=URL --arm B=URL --arm-params "
                             "B='{\"temperature\": 0.8}' --json\n"
                             "  execsys plan run plan.json --arm A=URL --arm B=URL --arm-lock A=a/execsys.lock.json "
                             "--arm-lock B=b/execsys.lock.json\n\n"
                             "Each arm's serving runtime is observed at the start and end of the window and checked "
                             "against its lock\n(--arm-lock, else the run's): --json has arms.<ARM>.system_check "
                             "and arms.<ARM>.identity (null,\nwith identity_reason, unless the arm matched); a "
                             "differing arm is one line on stderr. Both arms\nsend the declared [budget] unless "
                             "--params/--arm-params say otherwise. Record: execsys.plan-run/2."))
    run.add_argument("plan", help="plan file from 'execsys plan new'")
    run.add_argument("--arm", action="append", metavar="ARM=URL", required=True, help="endpoint of an arm (repeat)")
    run.add_argument("--arm-params", action="append", metavar="ARM=JSON", default=[],
                     help="sampling parameters for one arm, e.g. B='{\"temperature\": 0.8}'")
    run.add_argument("--params", metavar="JSON",
                     help="sampling parameters for both arms (default: the declared [budget], as probes send "
                          "it; temperature 0 and max_tokens 32 where the budget is silent)")
    run.add_argument("--extract", metavar="SPEC", help="outcome extractor: regex:PAT, json:PATH, last-number, command:CMD")
    run.add_argument("--cases", metavar="FILE", help="cases file (default: the one registered in the plan)")
    add_sources(run, lock_help="the pinned identity the plan must be registered for, and whose artifact digest "
                               "remote placement (b) verifies (default: execsys.lock.json beside the declaration)")
    run.add_argument("--arm-lock", action="append", metavar="ARM=PATH", default=[],
                     help="the lock of one arm that is a pinned system of its own (repeat): that arm's serving "
                          "runtime is checked against it and the arm gets its identity (default: the run's lock)")
    run.add_argument("--artifact", metavar="PATH", help="artifact path on the remote hosts (default: the lock's)")
    run.add_argument("--log", metavar="FILE", help="executed log (default: <plan>.executed.jsonl)")
    run.add_argument("--timeout", type=positive_float, default=None, help="seconds per request (default 120)")
    run.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key")
    add_json(run)

    chk = sub.add_parser("check", help="verify a plan's digest and registration, and an executed log",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                             "examples:\n"
                             "  execsys plan check plan.json                  edited after registration? (exit 2)\n"
                             "  execsys plan check plan.json --executed plan.json.executed.jsonl --json"))
    chk.add_argument("plan", help="plan file")
    chk.add_argument("--executed", metavar="LOG", help="executed log (execsys.plan-log/1) to check against the plan")
    add_sources(chk, lock_help="check that the plan was registered for this lock's identity "
                               "(default: execsys.lock.json beside the declaration)")
    add_json(chk)


def run(args: argparse.Namespace) -> int:
    return {"new": _new, "run": _run, "check": _check}[args.action](args)


def _seed(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def _names_a_file(ref: str) -> bool:
    """Whether ``--lock`` names a lock file rather than an identity or record id in the ledger."""
    return Path(ref).exists() or ref.endswith(".json") or "/" in ref


def _new(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.fsutil import write_output
    from execsys.plan import NewPlanOptions, make_plan, parse_assignments
    from execsys.sources import load_sources

    lock_file = args.lock if args.lock is None or _names_a_file(args.lock) else None
    sources = load_sources(args.config, lock_file, ledger=args.ledger)
    lock = sources.lock
    if args.lock is not None and lock_file is None:
        from execsys.identity import load_identity_ref

        lock = load_identity_ref(args.lock, ledger_path=sources.ledger_path)
    placement = parse_assignments(args.placement, "--placement", "HOST", "A=gpu1", once=True)
    options = NewPlanOptions.from_sources(sources.declaration, lock, arms=args.arms, cases=args.cases,
                                          design=args.design, seed=_seed(args.seed), placement=placement,
                                          lock_path=sources.lock_path, ledger=sources.ledger_path)
    made = make_plan(options)
    plan = made.plan
    data = made.to_json()
    if args.out:
        write_output(args.out, data, "the plan")
    # after the last thing that can fail: bad input stays one line
    if plan.identity_reason:
        console.warn(plan.identity_reason)
    if made.without_expected:
        console.warn(f"{len(made.without_expected)} case(s) have no \"expected\" answer "
                     f"(first: {made.without_expected[0]}); 'plan run' needs one per case to score the arms")
    if args.json or not args.out:
        console.print_json(data)
    else:
        counts = plan.first_counts()
        console.out().print(
            f"registered plan {plan.digest[:16]} ({plan.record_id}) at {plan.registered_at}: "
            f"{len(plan.order)} cases, design {plan.design}, "
            + ", ".join(f"{arm} first in {n}" for arm, n in counts.items())
            + f"; wrote {args.out}",
            markup=False,
        )
    return ExitCode.OK


def _json_arg(text: str, flag: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag}: expected a JSON object")
    return value


def _run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.plan import (
        ArmAnswered,
        ArmSystemDiffers,
        NoPinnedIdentity,
        PlacementChecked,
        PlanRunOptions,
        load_plan,
        parse_assignments,
        run_plan,
    )
    from execsys.sources import load_sources

    plan = load_plan(args.plan)
    sources = load_sources(args.config, args.lock, ledger=args.ledger)
    endpoints = parse_assignments(args.arm, "--arm", "URL", "A=http://127.0.0.1:8000/v1")
    arm_params = {arm: _json_arg(text, f"--arm-params {arm}")
                  for arm, text in parse_assignments(args.arm_params, "--arm-params", "JSON",
                                                         'B={"temperature": 0.8}').items()}
    arm_locks = parse_assignments(args.arm_lock, "--arm-lock", "PATH", "B=b/execsys.lock.json")
    if len(arm_locks) != len(args.arm_lock):
        raise UsageError("--arm-lock: one lock per arm (an arm was given twice)")
    options = PlanRunOptions.from_sources(
        sources.declaration, sources.lock, plan=plan, endpoints=endpoints,
        params=_json_arg(args.params, "--params") if args.params else None, arm_params=arm_params,
        extract=args.extract, cases=args.cases, artifact=args.artifact, log=args.log, plan_path=args.plan,
        timeout=args.timeout, api_key_env=args.api_key_env, lock_path=sources.lock_path, arm_locks=arm_locks,
        ledger=sources.ledger_path)

    headed = []

    def progress(event: object) -> None:
        if isinstance(event, ArmAnswered) and not args.json:
            if not headed:  # the columns named once, above the first answer
                headed.append(True)
                console.err().print(f"  {'case':<16} {'arm':<8} {'order':<6} correct (✓ yes, · no)",
                                    highlight=False, markup=False)
            mark = "✓" if event.correct else "·"
            # case ids come from the user's file: never markup ('[/x]' would stop the run half-way)
            console.err().print(f"  {event.case_id:<16} {event.arm:<8} {event.position:<6} {mark}",
                                highlight=False, markup=False)
        elif isinstance(event, NoPinnedIdentity):
            console.warn(event.reason)
        elif isinstance(event, ArmSystemDiffers):
            from rich.markup import escape

            from execsys.termsafe import shown

            # a warning that changes what the arm counts for: one line, never wrapped
            console.err().print(f"[yellow]{escape(shown(event.message))}[/]", soft_wrap=True)
        elif isinstance(event, PlacementChecked):
            for check in event.checks:
                status = "ok" if check.passed else "fail"
                console.err().print(f"  {console.symbol(status)} placement {event.arm}@{event.host} "
                                    f"{check.name}: {check.detail}", highlight=False, markup=False)

    result = run_plan(options, on_event=progress)
    if args.json:
        console.print_json(result.to_json())
    else:
        from rich.markup import escape

        out = console.out()
        for check in result.checks:
            status = "ok" if check.passed else "fail"
            out.print(f"[{console.STYLES[status]}]{console.symbol(status)}[/] {check.name:<16} {escape(check.detail)}")
        for arm, info in result.arms.items():
            verdict = str((info.get("system_check") or {}).get("verdict"))
            status = {"matches-lock": "ok", "differs": "fail"}.get(verdict, "warn")
            said = (f"identity {str(info['identity'])[:12]}" if info.get("identity")
                    else str(info.get("identity_reason") or "counts toward no identity"))
            out.print(f"[{console.STYLES[status]}]{console.symbol(status)}[/] {'system ' + arm:<16} "
                      f"{escape(verdict)}: {escape(said)}", soft_wrap=True)
        out.print(f"\n[bold]{result.label}[/]: {escape(result.statement)}")
        out.print(f"[dim]recorded {result.record}; executed log {escape(str(result.log))}[/]")
    return ExitCode.OK if result.label == "causal" else ExitCode.FINDING


def _check(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from execsys import console
    from execsys.ledger import Ledger
    from execsys.plan import check_plan
    from execsys.sources import load_sources

    sources = load_sources(args.config, args.lock, ledger=args.ledger)
    with Ledger.open(sources.ledger_path) as ledger:
        result = check_plan(args.plan, ledger, args.executed, lock_identity=sources.identity_id)
    if args.json:
        console.print_json(result.to_json())
    else:
        out = console.out()
        out.print(f"{console.symbol('ok')} plan {result.plan.digest[:16]}: digest matches its content, "
                  f"registered as {result.record} at {result.registered_at}")
        for check in result.checks:
            status = "ok" if check.passed else "fail"
            out.print(f"[{console.STYLES[status]}]{console.symbol(status)}[/] {check.name:<16} {escape(check.detail)}")
    return ExitCode.OK if result.ok else ExitCode.FINDING
