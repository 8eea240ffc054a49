"""binary-aliasing: the program that runs is not the one you think.

Two ``python3`` on PATH, a ``vllm`` from another environment earlier in PATH, a
shell alias or function with the same name: the command line looks identical in
every log, but a different program ran. For every command this lists each match
on PATH (resolved through symlinks) with its BLAKE3 digest, and the ``--version``
of the one that actually runs. Fails when the first match is not the binary that
``[doctor] pins`` in execsys.toml names (by path or digest); warns when different
programs share the name, or when the operator's shell shadows it.
"""

from __future__ import annotations

import os
import threading

from execsys.doctor import files
from execsys.doctor.model import Finding, HazardResult, fold

ID = "binary-aliasing"
TITLE = "Which binary actually runs"
FINDINGS = ("not-on-path", "pinned-path-differs", "pinned-digest-differs", "several-programs", "shell-shadow")


def _shell_shadows(ctx, names: list[str]) -> tuple[dict[str, str], str | None]:
    """Ask the operator's interactive shell (bash/zsh) what each name is: alias, function, file."""
    shell_path = None
    try:
        import shellingham

        _, shell_path = shellingham.detect_shell()
    except Exception:  # noqa: BLE001 - ShellDetectionFailure, ImportError, odd /proc: fall back to $SHELL
        shell_path = os.environ.get("SHELL")
    if not shell_path:
        return {}, "operator's shell unknown; aliases not checked"
    shell = os.path.basename(shell_path)
    if shell not in ("bash", "zsh"):
        return {}, f"shell {shell}: aliases not checked (bash and zsh are)"
    if shell == "bash":
        script = 'for n in "$@"; do printf "%s\\t%s\\n" "$n" "$(type -t -- "$n" 2>/dev/null)"; done'
    else:
        script = 'for n in "$@"; do printf "%s\\t%s\\n" "$n" "$(whence -w -- "$n" 2>/dev/null)"; done'
    # HISTFILE=/dev/null: the interactive shell must not append to the operator's history (read-only doctor).
    env = {**os.environ, "HISTFILE": "/dev/null"}
    inv = files.bounded_run([shell_path, "-ic", script, "execsys-doctor", *names], min(ctx.timeout, 3.0), env=env)
    if inv.timed_out or inv.error:
        return {}, f"{shell} -i did not answer ({inv.describe()}); aliases not checked"
    kinds: dict[str, str] = {}
    for line in inv.output.splitlines():
        name, _, kind = line.partition("\t")
        kind = kind.split(":")[-1].strip()
        if name in names and kind in ("alias", "function"):
            kinds[name] = kind
    return kinds, None


def check(ctx) -> HazardResult:
    names = ctx.commands()
    pins = ctx.options.pins
    evidence: list[str] = []
    findings: list[Finding] = []
    shadow_box: dict = {}
    def _ask_shell() -> None:
        kinds, note = _shell_shadows(ctx, names)
        shadow_box.update(kinds=kinds, note=note)

    shell_thread = threading.Thread(target=_ask_shell, daemon=True)
    if ctx.options.shell_aliases:
        shell_thread.start()
    else:
        shadow_box["note"] = ("shell aliases not checked: a node check runs under a daemon, which starts no "
                              "interactive shell (`execsys doctor` checks them)")
    checked = 0
    for name in names:
        matches = files.which_all(name)
        pin = pins.get(name, {})
        if not matches:
            if pin or ctx.commands_explicit:
                findings.append(Finding("fail", f"{name}: not found on PATH", f"{ID}/not-on-path"))
                evidence.append(f"{name}: not found on PATH")
            continue
        checked += 1
        digests: list[str] = []
        decisive = ctx.options.evidence_digests or bool(pin.get("digest")) or \
            len({os.path.realpath(p) for p in matches}) > 1
        for i, path in enumerate(matches):
            real = os.path.realpath(path)
            try:
                dig = files.digest(real) if decisive else "not hashed"
            except OSError as exc:
                dig = f"unreadable ({exc.strerror})"
            digests.append(dig)
            arrow = f" -> {real}" if real != os.path.abspath(path) else ""
            evidence.append(f"{name} [{i + 1}] {path}{arrow}  {dig[:23]}")
        first = matches[0]
        version = ctx.invoke([first, "--version"])
        evidence.append(f"{name} runs: {version.describe(first)}")
        distinct = {d for d in digests if not d.startswith("unreadable")}
        if len(distinct) > 1:
            findings.append(Finding("warn", f"{name}: {len(distinct)} different programs on PATH",
                                    f"{ID}/several-programs"))
        if pin.get("path"):
            pinned = os.path.expanduser(pin["path"])
            if os.path.realpath(first) != os.path.realpath(pinned) and os.path.abspath(first) != os.path.abspath(pinned):
                findings.append(Finding("fail", f"{name}: PATH runs {first}, execsys.toml pins {pinned}",
                                        f"{ID}/pinned-path-differs"))
        if pin.get("digest"):
            algo = pin["digest"].split(":", 1)[0]
            if algo != digests[0].split(":", 1)[0]:
                evidence.append(f"{name}: pinned {algo} digest not comparable here ({digests[0].split(':')[0]} only)")
            elif digests[0] != pin["digest"]:
                findings.append(Finding("fail", f"{name}: {first} is {digests[0][:23]}, execsys.toml pins "
                                        f"{pin['digest'][:23]}", f"{ID}/pinned-digest-differs"))
    if ctx.options.shell_aliases:
        shell_thread.join(timeout=min(ctx.timeout, 3.0) + 1)
    for name, kind in sorted((shadow_box.get("kinds") or {}).items()):
        findings.append(Finding("warn", f"{name}: a shell {kind} shadows the binary in interactive shells",
                                f"{ID}/shell-shadow"))
    if shadow_box.get("note"):
        evidence.append(shadow_box["note"])
    fix = ("Call the program by absolute path in run scripts, pin it in execsys.toml ([doctor] pins = "
           "{ python3 = \"/path/to/python3\" }), or reorder PATH so the intended directory comes first; "
           "remove shadowing aliases/functions from the shell profile.")
    withheld = list(getattr(ctx.options, "withheld_commands", None) or [])
    untrusted = str(getattr(ctx.options, "untrusted", None) or "declaration not trusted")
    evidence += [f"{name}: not run ({untrusted})" for name in withheld]
    if not checked and withheld and not findings:
        # every command declared is a program shipped with a declaration the operator has not trusted
        return HazardResult(ID, "skip", untrusted, evidence, "")
    if not checked:
        return fold(ID, findings, ok="none of the commands is on PATH", quiet="skip", fix=fix, evidence=evidence,
                    accept=ctx.accept)
    plural = "s" if checked != 1 else ""
    ok = f"{checked} command{plural}: one program each, as pinned" if pins else \
        f"{checked} command{plural}: one program each on PATH"
    return fold(ID, findings, ok=ok, fix=fix, evidence=evidence, accept=ctx.accept)
