"""stub-executables: a file on PATH that exists but cannot run.

Existence is not executability. A 0-byte file left by a failed install, a
script whose shebang interpreter is gone, a binary for another architecture,
a Windows App Execution Alias stub, a pyenv/asdf shim for a version that is not
installed, or a program that hangs: ``which`` finds each of them, and the run
then fails (or waits) in a place that looks like the model's fault. Each command
is inspected and started once with ``--version`` under a timeout, stdin closed
and output capped; evidence shows what ran and what it said. Known stubs are
recognised by what they print (:data:`STUB_SIGNATURES`, data with their sources),
wherever they are on PATH.
"""

from __future__ import annotations

import os
import re
import threading
from typing import NamedTuple

from execsys.doctor import files
from execsys.doctor.model import Finding, HazardResult, fold

ID = "stub-executables"
TITLE = "Executables that cannot run"
FINDINGS = ("windows-app-alias", "unreadable", "zero-byte", "dead-shebang", "foreign-architecture",
            "cannot-start", "hangs", "floods-output", "exec-format-error", "shim-uninstalled", "version-failed")

FIX = ("Reinstall or remove the broken file (a 0-byte or foreign-architecture file, a dead shebang), install the "
       "version a shim points at (pyenv install / asdf install), or call the real program by absolute path; "
       "a program that hangs on --version needs investigating before a run depends on it.")



class StubSignature(NamedTuple):
    """What a known stub prints when it is run instead of the program: recognised anywhere on PATH,
    whatever the file is called, because the text (not the location) is the stub's own."""

    kind: str  # the finding kind (FINDINGS)
    pattern: str  # a regular expression searched in what it printed (stdout and stderr)
    what: str  # what the finding says it is
    source: str  # where the text comes from


# Each one fails, not warns: the file exists, `command -v` finds it, and it cannot run the program.
# A match counts only with a non-zero exit (every one of these stubs exits non-zero).
STUB_SIGNATURES: tuple[StubSignature, ...] = (
    StubSignature("windows-app-alias",
                  r"Python was not found; run without arguments to install from the Microsoft Store",
                  "a Windows App Execution Alias stub -- it offers the Microsoft Store instead of running Python",
                  "python/cpython#85499 (the alias prints this and exits 9009)"),
    StubSignature("shim-uninstalled", r"pyenv: [^\s:]+: command not found",
                  "shim for an uninstalled version (pyenv: the command exists only in a Python version that is "
                  "not selected)", "pyenv libexec/pyenv-which; pyenv/pyenv#3328"),
    StubSignature("shim-uninstalled", r"pyenv: version `[^']+' is not installed",
                  "shim for an uninstalled version (pyenv: the selected version is not installed)",
                  "pyenv libexec/pyenv-which"),
    StubSignature("shim-uninstalled", r"No preset version installed for command \S+",
                  "shim for an uninstalled version (asdf)", "asdf-vm/asdf shims"),
    StubSignature("shim-uninstalled", r"No version is set for command \S+",
                  "shim for an uninstalled version (asdf: no version selected for it)", "asdf-vm/asdf shims"),
)


def stub_signature(output: str, returncode: int | None) -> StubSignature | None:
    """The known stub whose words ``output`` carries, when the program also failed."""
    if not returncode:
        return None
    for signature in STUB_SIGNATURES:
        if re.search(signature.pattern, output):
            return signature
    return None


_SHIM_DIRS = (os.sep + ".pyenv" + os.sep + "shims", os.sep + ".asdf" + os.sep + "shims",
              os.sep + "pyenv" + os.sep + "shims", os.sep + "asdf" + os.sep + "shims")


def inspect(path: str, ctx) -> tuple[str, list[str], str]:
    """('ok'|'warn'|'fail', evidence, finding kind) for one executable; the first evidence line is the finding."""
    name = os.path.basename(path)
    real = os.path.realpath(path)
    if "windowsapps" in real.lower():
        return "fail", [f"{path}: a Windows App Execution Alias stub (WindowsApps) -- it opens the Store instead "
                        "of running anything"], "windows-app-alias"
    try:
        size = os.path.getsize(real)
    except OSError as exc:
        return "fail", [f"{path}: {exc.strerror} ({real})"], "unreadable"
    if size == 0:
        return "fail", [f"{path}: 0-byte file ({real})"], "zero-byte"
    head = files.read_head(real, 256)
    notes: list[str] = []
    sb = files.shebang(head)
    if sb is not None:
        missing = files.shebang_missing(sb)
        if missing:
            return "fail", [f"{path}: #!{sb.text()}: {missing}"], "dead-shebang"
    elf = files.elf_header(head)
    if elf is not None:
        host = files.host_elf_machine()
        if host is not None and elf.machine != host:
            return "fail", [f"{path}: ELF for {elf.machine_name}, this host is {files.ELF_MACHINES.get(host, host)}"], \
                "foreign-architecture"
    shim = any(d in path for d in _SHIM_DIRS)
    if shim:
        notes.append(f"{path}: a version-manager shim")
    inv = ctx.invoke([path, "--version"])
    said = inv.describe(path)
    if inv.error:
        return "fail", [f"{path}: {said}", *notes], "cannot-start"
    if inv.timed_out:
        return "fail", [f"{path}: hangs -- {said}", *notes], "hangs"
    if inv.flooded:
        return "fail", [f"{path}: {said}", *notes], "floods-output"
    known = stub_signature(inv.output, inv.returncode)
    if known is not None:
        return "fail", [f"{path}: {known.what} -- {said}"], known.kind
    text = inv.output.lower()
    if inv.returncode == 126 or "exec format error" in text:
        return "fail", [f"{path}: {said}", *notes], "exec-format-error"
    if shim and inv.returncode != 0 and ("not installed" in text or "command not found" in text
                                         or "no preset version" in text or "not found" in text):
        return "fail", [f"{path}: shim for an uninstalled version -- {said}"], "shim-uninstalled"
    if inv.returncode != 0:
        return "warn", [f"{path}: {said} (runs, but --version failed)", *notes], "version-failed"
    return "ok", [f"{name}: {said}", *notes], ""


def _inspect_all(paths: list[str], ctx) -> list[tuple[str, list[str], str]]:
    """:func:`inspect` for each path, at most 8 at a time, in the given order. Plain threads rather than
    concurrent.futures, whose import (logging with it) a node check would pay every minute."""
    outcomes: list = [None] * len(paths)
    gate = threading.Semaphore(8)

    def one(index: int) -> None:
        with gate:
            try:
                outcomes[index] = inspect(paths[index], ctx)
            except BaseException as exc:  # noqa: BLE001 - re-raised below on the caller's thread
                outcomes[index] = exc

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(paths))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes


def check(ctx) -> HazardResult:
    targets: list[tuple[str, str]] = []
    for name in ctx.commands():
        matches = files.which_all(name)
        if matches:
            targets.append((name, matches[0]))
    if not targets:
        return HazardResult(ID, "skip", "none of the commands is on PATH", [], "")
    outcomes = _inspect_all([path for _, path in targets], ctx)
    evidence = [line for _, ev, _ in outcomes for line in ev]
    # (no zip(strict=...): this module also runs on python 3.9 remotes)
    findings = [Finding(status, ev[0], f"{ID}/{kind}") for status, ev, kind in outcomes if status in ("fail", "warn")]
    name_of = {ev[0]: targets[i][0] for i, (_, ev, _) in enumerate(outcomes)}

    def summary(top: list[Finding]) -> str:
        names = ", ".join(name_of[f.text] for f in top)
        return f"cannot run: {names}" if top[0].level == "fail" else f"--version failed: {names}"

    return fold(ID, findings, ok=f"{len(targets)} command{'s' if len(targets) != 1 else ''} start and answer",
                fix=FIX, evidence=evidence, accept=ctx.accept, listed=True, summary=summary)
