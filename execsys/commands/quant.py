"""``execsys quant check``: is a quantization format native, a fallback, or unsupported on a target?"""

from __future__ import annotations

import argparse

from execsys.cli import add_json, add_sources, positive_float
from execsys.errors import ExitCode, InputError, UsageError

HELP = "check a quantization format against a deployment target (native, fallback, unsupported)"
DESCRIPTION = """\
Quantize for the deployment target, not the development box: a format chosen for the GPU in front of
you may refuse to load on the serving GPU, or worse, load and run on a slower fallback kernel.
The answer comes from a support table shipped with execsys (format x scheme x engine x compute
capability), each rule with its source and as-of date.

formats: fp8 (per-tensor, block), nvfp4, mxfp4, mxfp8, int8 (W8A8), awq, gptq (W4A16, marlin,
         machete), bnb-nf4, gguf
engines: vllm, sglang, trtllm, llamacpp (all four when --engine is not given)
targets: sm_XX (sm_80, sm_90a, sm_120), a compute capability (8.9), a GPU name (A100, L40S,
         H100, B200, RTX 5090), or auto (NVML here; over SSH with --host DEST)

examples:
  execsys quant check fp8 --engine vllm --target A100       fallback: FP8 Marlin, weight-only
  execsys quant check fp8 --scheme block --engine vllm --target sm_80
  execsys quant check nvfp4 --target sm_90 --json           every engine, one JSON object each
  execsys quant check --lock execsys.lock.json --target auto --host gpu1
  execsys quant check --config eval/execsys.toml --target H100     the format pinned in eval/execsys.lock.json
  execsys quant check nvfp4 --engine vllm --target sm_120 --engine-log vllm.log    what the engine ran

With --engine-log (or a lock pinned with [runtime] log), the format is also compared with the kernels
the engine's log says it selected: an observed fallback is exit 1 whatever the table says.

exit codes: 0 native (with every engine: at least one engine native), 1 fallback or unsupported,
2 unknown format, scheme, engine or target, or no GPU for --target auto
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    chk = sub.add_parser("check", help="check one format against a target", description=DESCRIPTION,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    chk.add_argument("format", nargs="?", help="quantization format (omit with --lock)")
    chk.add_argument("--scheme", help="scheme within the format: per-tensor, block, W4A16, W8A8, marlin, machete, ...")
    chk.add_argument("--engine", help="vllm, sglang, trtllm or llamacpp (default: all four)")
    chk.add_argument("--target", default="auto", help="auto, sm_XX, a compute capability or a GPU name (default: auto)")
    chk.add_argument("--host", metavar="DEST", help="with --target auto: read the GPU of this ssh destination")
    add_sources(chk, lock_help="check the quantization pinned in this lock file (without FORMAT: the lock "
                               "beside the declaration, execsys.lock.json)")
    chk.add_argument("--engine-log", metavar="PATH",
                     help="the engine's start-up log: compare the format with the kernels it selected (default: "
                          "the kernels pinned from [runtime] log in the lock)")
    chk.add_argument("--timeout", type=positive_float, default=30.0, help="seconds for the remote GPU query (default 30)")
    add_json(chk)


def run(args: argparse.Namespace) -> int:
    from execsys import console, quant

    fmt, scheme, engine = args.format, args.scheme, args.engine
    kernels = None
    # The pinned quantization is read when --lock names a lock, or when FORMAT is left out (then the
    # lock beside the declaration); `quant check fp8 ...` alone never depends on a lock lying about.
    if args.lock is not None or not fmt:
        from execsys.sources import load_sources

        sources = load_sources(args.config, args.lock)
        if sources.lock is None:
            raise UsageError(f"give a FORMAT (e.g. fp8, nvfp4, awq) or --lock FILE (no pinned identity: looked for "
                             f"{sources.lock_path})")
        pinned = quant.quantization_from_identity(sources.lock)
        kernels = sources.lock.observed("runtime").get("kernels")
        if not fmt:
            if not pinned["format"]:
                what = f"'{pinned['quantization']}'" if pinned["quantization"] else "no quantization"
                raise UsageError(f"{sources.lock_path}: the pinned artifact records {what}, which is no format the "
                                 "support table knows; give FORMAT")
            fmt = pinned["format"]
            scheme = scheme or pinned["scheme"]
        if not engine and pinned["engine"]:
            try:
                engine = quant.resolve_engine(pinned["engine"])
            except InputError:
                engine = None  # an engine the table does not know: check all four
    if args.host and args.target != "auto":
        raise UsageError("--host reads the target GPU over SSH: use it with --target auto")

    # Validate the cheap inputs before touching NVML or SSH.
    fmt = quant.resolve_format(fmt)
    quant.resolve_scheme(fmt, scheme)
    if engine:
        engine = quant.resolve_engine(engine)

    if args.target == "auto":
        target = quant.detect_remote_target(args.host, args.timeout) if args.host else quant.detect_local_target()
    else:
        target = quant.parse_target(args.target)

    if args.engine_log:
        from execsys.observe.kernels import observe_kernels

        kernels = observe_kernels(args.engine_log, engine)
    if engine:
        verdicts = [quant.check(fmt, scheme=scheme, engine=engine, target=target)]
    else:
        verdicts = quant.check_all_engines(fmt, scheme=scheme, target=target)
    observed = quant.observed_kernels_check(fmt, kernels)
    for verdict in verdicts:
        verdict.observed = observed
    observed_fallback = observed is not None and observed["verdict"] == "fallback"

    if args.json:
        console.print_json(verdicts[0].to_json() if engine else [v.to_json() for v in verdicts])
    else:
        _render(verdicts, target)
    if observed_fallback:
        return ExitCode.FINDING
    if engine:
        return ExitCode.OK if verdicts[0].verdict == "native" else ExitCode.FINDING
    return ExitCode.OK if any(v.verdict == "native" for v in verdicts) else ExitCode.FINDING


def _render(verdicts, target) -> None:
    from rich.markup import escape

    from execsys import console

    out = console.out()
    first = verdicts[0]
    where = f" on {target.detected_on}" if target.detected_on and target.detected_on != "local" else ""
    out.print(f"{escape(first.format)} ({escape(first.scheme)}) on {escape(target.label)}{escape(where)}")
    status = {"native": "ok", "fallback": "warn", "unsupported": "fail"}
    for v in verdicts:
        key = status[v.verdict]
        out.print(
            f"  [{console.STYLES[key]}]{console.symbol(key)} {v.engine:<8} {v.verdict}[/]  {escape(v.reason)}"
        )
        out.print(f"    [dim]source: {escape(v.source)} (as of {v.as_of})[/]")
    observed = first.observed
    if observed is not None:
        key = "fail" if observed["verdict"] == "fallback" else "ok"
        out.print(f"[{console.STYLES[key]}]{console.symbol(key)} {escape(observed['sentence'])}[/]")
        for line in observed["evidence"]:
            out.print(f"    [dim]{escape(str(observed.get('log')))}: {escape(str(line))}[/]")
