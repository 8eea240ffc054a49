"""interop-mangling: arguments arrive altered after crossing a layer.

``ssh host cmd args`` joins argv with spaces and hands it to the remote shell,
which splits and expands it again; ``bash -lc`` takes only one string;
Windows executables re-parse their command line; a relay script with ``eval``
re-evaluates everything. A prompt with quotes or ``$`` then reaches the engine
different from what the harness sent. For each declared layer (``--layer``,
``[environment] layers``) this sends a canary argument vector through the layer
to ``python3 -`` (the reporter code goes on stdin, so the only arguments that
cross the layer are the canary's) and compares what arrived, argument by argument.
A layer is a command: one from a declaration the operator has not trusted
(``execsys trust``) is not run, and the check is a skip saying so.
"""

from __future__ import annotations

import json
import shlex
from typing import cast

from execsys.doctor import files, sysinfo
from execsys.doctor.model import Finding, HazardResult, Level, fold

ID = "interop-mangling"
TITLE = "Arguments across layers"
FINDINGS = ("arguments-altered", "layer-did-not-run", "wsl-interop-untested")

# Quotes are balanced and there is no ``;``/``&``/``|``: a re-evaluating layer must still run the
# reporter (so the evidence shows what arrived) and must not run anything but ``id``, which reads only.
CANARY: list[str] = [
    "two words",
    "'single quoted'",
    'say "hi"',
    "$HOME",
    "%PATH%",
    "`id`",
    "back\\slash",
    "*.py",
    "?",
    "[ab]",
    "naïve — 日本語",
    "",
    "tab\there",
]
REPORTER = "import sys, json\nsys.stdout.write('EXECSYS-CANARY ' + json.dumps(sys.argv[1:]) + '\\n')\n"
FIX = ("Do not pass arguments through the layer: write the command into a script, copy it across, and run "
       "the script (or send it on stdin, e.g. `ssh host bash -s < run.sh`); for ssh quote once with shlex.quote.")


def _received(output: str) -> list[str] | None:
    for line in output.splitlines():
        if line.startswith("EXECSYS-CANARY "):
            try:
                value = json.loads(line[len("EXECSYS-CANARY "):])
            except ValueError:
                return None
            return [str(v) for v in value] if isinstance(value, list) else None
    return None


def compare(sent: list[str], received: list[str]) -> list[str]:
    """Argument-level differences, for evidence."""
    diffs: list[str] = []
    if len(sent) != len(received):
        diffs.append(f"sent {len(sent)} arguments, received {len(received)}")
    for i, value in enumerate(sent):
        got = received[i] if i < len(received) else None
        if got != value:
            diffs.append(f"arg {i}: sent {json.dumps(value, ensure_ascii=False)} received "
                         f"{'(missing)' if got is None else json.dumps(got, ensure_ascii=False)}")
    return diffs


def probe_layer(layer: str, timeout: float) -> tuple[str, list[str]]:
    """('ok'|'fail'|'error', evidence) for one layer prefix."""
    try:
        prefix = shlex.split(layer)
    except ValueError as exc:
        return "error", [f"layer {layer!r}: cannot split ({exc})"]
    if not prefix:
        return "error", ["empty layer"]
    argv = [*prefix, "python3", "-", *CANARY]
    inv = files.bounded_run(argv, timeout, input=REPORTER.encode())
    received = _received(inv.output)
    if received is None:
        # python3 never reported: the layer itself did not run (password prompt, no python3 on the far
        # side, no stdin passed through). That is not evidence of mangling either way.
        hint = ""
        if inv.returncode == 0 and not inv.output.strip():
            hint = " -- the layer did not pass stdin through (docker exec needs -i)"
        return "error", [f"layer {layer!r}: the reporter did not run: {inv.describe()}{hint}",
                         f"sent: {json.dumps(CANARY, ensure_ascii=False)}"]
    diffs = compare(CANARY, received)
    if not diffs:
        return "ok", [f"layer {layer!r}: all {len(CANARY)} canary arguments arrived intact"]
    return "fail", [f"layer {layer!r}: arguments altered",
                    f"sent:     {json.dumps(CANARY, ensure_ascii=False)}",
                    f"received: {json.dumps(received, ensure_ascii=False)}", *diffs]


def check(ctx) -> HazardResult:
    layers = ctx.layers()
    withheld = list(getattr(ctx.options, "withheld_layers", None) or [])
    if not layers and withheld:
        # the declaration's layers are commands from a file the operator has not trusted: not run
        untrusted = str(getattr(ctx.options, "untrusted", None) or "declaration not trusted")
        return HazardResult(ID, "skip", untrusted,
                            [f"layer {layer!r}: not run (the declaration is not trusted)" for layer in withheld],
                            "Review the declaration, then `execsys trust` it (or pass --trust for one run).")
    wsl_note = []
    if sysinfo.is_wsl():
        wsl_note = ["WSL interop detected: Windows programs re-parse their command line "
                    "(CommandLineToArgvW); pass arguments to them through a script file"]
    if not layers:
        if wsl_note:
            return fold(ID, [Finding("warn", "WSL interop present and no layer declared to test",
                                     f"{ID}/wsl-interop-untested")],
                        ok="WSL interop present; no layer declared to test", fix=FIX, evidence=wsl_note,
                        accept=ctx.accept, listed=True)
        return HazardResult(ID, "skip", "no layers declared (--layer \"ssh gpu1\", [environment] layers)", [],
                            "")
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(max_workers=min(8, len(layers))) as pool:
        outcomes = list(pool.map(lambda layer: probe_layer(layer, ctx.timeout), layers))
    evidence = [line for _, ev in outcomes for line in ev] + wsl_note
    # The first evidence line of a layer names it and what happened: that line is the finding.
    kinds = {"fail": "arguments-altered", "error": "layer-did-not-run"}
    findings = [Finding(cast(Level, status), ev[0], f"{ID}/{kinds[status]}") for status, ev in outcomes if status in kinds]
    layer_of = {ev[0]: layers[i] for i, (_, ev) in enumerate(outcomes)}

    def summary(top: list[Finding]) -> str:
        which = ", ".join(repr(layer_of[f.text]) for f in top)
        if top[0].level == "fail":
            return f"arguments altered crossing {which}"
        return f"could not send the canary through {which}"

    return fold(ID, findings, ok=f"{len(layers)} layer{'s' if len(layers) != 1 else ''} pass arguments intact",
                fix={"fail": FIX, "error": "Check that the layer runs and that python3 exists on its far side."},
                evidence=evidence, accept=ctx.accept, listed=True, summary=summary)
