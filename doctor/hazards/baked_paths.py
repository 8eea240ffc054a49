"""baked-paths: absolute paths written into files at install time that no longer hold.

A virtual environment copied or moved to another directory (or another host)
still names its old location: ``pyvenv.cfg``'s ``home``, every console script's
``#!`` line and the ``activate`` scripts. Binaries and ``.so`` files carry an ELF
interpreter and RPATH/RUNPATH entries; ``.pth`` files add absolute directories
to ``sys.path``. When those point at directories that are gone, programs fail
only when they reach that import or that library -- mid-run. This reads them
all (never executes them) in the declared venvs (or the active one) and under
``--path``.
"""

from __future__ import annotations

import glob
import os
import re
import sys

from execsys.doctor import files
from execsys.doctor.model import Finding, HazardResult, fold

ID = "baked-paths"
TITLE = "Absolute paths baked into files"
FINDINGS = ("not-a-venv", "venv-missing", "venv-home-missing", "activate-names-other-venv",
            "script-interpreter-outside-venv", "dangling-python-link", "pth-path-missing", "path-missing",
            "scan-truncated", "dead-shebang", "elf-interpreter-missing", "runpath-missing", "rpath-missing")

FIX = ("Recreate a moved virtual environment in place (python -m venv NEW && pip install -r requirements.txt) "
       "instead of copying it; rebuild binaries whose RPATH/RUNPATH or interpreter point at missing directories; "
       "delete or correct .pth lines naming missing paths.")

MAX_FILES = 4000


def _site_packages(venv: str) -> list[str]:
    return sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))
                  + glob.glob(os.path.join(venv, "Lib", "site-packages")))


def _inside(path: str, root: str) -> bool:
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _problem(kind: str, text: str) -> Finding:
    """Every baked path that does not hold fails: the program fails when it reaches it."""
    return Finding("fail", text, f"{ID}/{kind}")


def check_venv(venv: str) -> tuple[list[Finding], list[str]]:
    """(problems, evidence) for one virtual environment."""
    problems: list[Finding] = []
    evidence: list[str] = []
    cfg_path = os.path.join(venv, "pyvenv.cfg")
    if not os.path.isfile(cfg_path):
        return [_problem("not-a-venv", f"{venv}: not a virtual environment (no pyvenv.cfg)")], []
    cfg: dict[str, str] = {}
    with open(cfg_path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if "=" in line:
                key, value = line.split("=", 1)
                cfg[key.strip().lower()] = value.strip()
    home = cfg.get("home")
    if home and not os.path.isdir(home):
        problems.append(_problem("venv-home-missing", f"{cfg_path}: home = {home} does not exist"))
    created = cfg.get("command", "")
    if created:
        evidence.append(f"{venv}: created by `{created}`")
    roots = {os.path.normpath(venv), os.path.realpath(venv)}
    bindir = os.path.join(venv, "bin") if os.path.isdir(os.path.join(venv, "bin")) else os.path.join(venv, "Scripts")
    stale_scripts: list[str] = []
    scripts = 0
    try:
        entries = sorted(os.listdir(bindir))
    except OSError:
        entries = []
    for entry in entries:
        path = os.path.join(bindir, entry)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        sb = files.shebang(files.read_head(path, 512))
        if sb is None:
            if entry.startswith("activate"):
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for match in re.finditer(r"""VIRTUAL_ENV[= ]\s*['"]?(/[^'"\s]*)""", text):
                    if not any(_inside(match.group(1), r) for r in roots):
                        problems.append(_problem("activate-names-other-venv",
                                                 f"{path}: activates {match.group(1)}, not this venv"))
                        break
            continue
        scripts += 1
        interp = sb.interpreter
        if os.path.basename(interp) == "env" or not os.path.isabs(interp):
            continue
        if not any(_inside(interp, r) for r in roots) and "python" in os.path.basename(interp):
            stale_scripts.append(f"{entry} -> #!{interp}" + ("" if os.path.exists(interp) else " (missing)"))
    if stale_scripts:
        problems.append(_problem("script-interpreter-outside-venv",
                                 f"{venv}: {len(stale_scripts)} script(s) run an interpreter outside the venv "
                                 "(moved?): " + ", ".join(stale_scripts[:5]) + (" ..." if len(stale_scripts) > 5 else "")))
    for link in ("python", "python3"):
        path = os.path.join(bindir, link)
        if os.path.islink(path) and not os.path.exists(path):
            problems.append(_problem("dangling-python-link", f"{path} -> {os.readlink(path)} (dangling)"))
    evidence.append(f"{venv}: home = {home}, {scripts} script(s) with shebangs checked")
    return problems, evidence


def check_pth_file(pth: str) -> list[Finding]:
    problems: list[Finding] = []
    try:
        with open(pth, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return problems
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith(("#", "import ", "import\t")):
            continue
        if os.path.isabs(line) and not os.path.exists(line):
            problems.append(_problem("pth-path-missing", f"{pth}:{number}: {line} does not exist"))
    return problems


def check_pth(site_dir: str) -> list[Finding]:
    return [p for pth in sorted(glob.glob(os.path.join(site_dir, "*.pth"))) for p in check_pth_file(pth)]


def _walk(root: str):
    if os.path.isfile(root):
        yield root
        return
    for directory, _dirs, names in os.walk(root):
        for name in sorted(names):
            yield os.path.join(directory, name)


def check_tree(root: str) -> tuple[list[Finding], list[str]]:
    """Shebangs, ELF interpreters, RPATH/RUNPATH and .pth files under ``root``."""
    problems: list[Finding] = []
    count = 0
    elf_unread = 0
    for path in _walk(root):
        if count >= MAX_FILES:
            problems.append(_problem("scan-truncated", f"{root}: stopped after {MAX_FILES} files"))
            break
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        if path.endswith(".pth"):
            problems += check_pth_file(path)
            continue
        if not (os.access(path, os.X_OK) or ".so" in os.path.basename(path)):
            continue
        count += 1
        head = files.read_head(path, 512)
        sb = files.shebang(head)
        if sb is not None:
            missing = files.shebang_missing(sb)
            if missing:
                problems.append(_problem("dead-shebang", f"{path}: #!{sb.text()}: {missing}"))
            continue
        if not files.is_elf(head):
            continue
        info = files.elf_info(path)
        if info is None:
            continue
        if not info.dynamic_read:
            elf_unread += 1
            continue
        if info.interpreter and not os.path.exists(info.interpreter):
            problems.append(_problem("elf-interpreter-missing",
                                     f"{path}: ELF interpreter {info.interpreter} does not exist"))
        for kind, entries in (("RUNPATH", info.runpath), ("RPATH", info.rpath)):
            for entry in entries:
                if not os.path.isdir(files.expand_origin(entry, path)):
                    problems.append(_problem(f"{kind.lower()}-missing", f"{path}: {kind} {entry} does not exist"))
    evidence = [f"{root}: {count} executable/shared files read"]
    if elf_unread:
        evidence.append(f"{root}: {elf_unread} ELF file(s) could not be parsed")
    return problems, evidence


def check(ctx) -> HazardResult:
    venvs = ctx.venvs()
    paths = ctx.paths()
    if not venvs and not paths:
        found, notes = check_pth_dirs(ctx)
        return fold(ID, found, ok="no virtual environment active and no --venv/--path given", quiet="skip", fix=FIX,
                    evidence=notes, accept=ctx.accept, summary=lambda top: top[0].text)
    problems: list[Finding] = []
    evidence: list[str] = []
    for venv in venvs:
        if not os.path.isdir(venv):
            problems.append(_problem("venv-missing", f"{venv}: virtual environment does not exist"))
            continue
        p, e = check_venv(venv)
        problems += p
        evidence += e
        for site in _site_packages(venv):
            problems += check_pth(site)
    for path in paths:
        if not os.path.exists(path):
            problems.append(_problem("path-missing", f"{path}: does not exist"))
            continue
        p, e = check_tree(path)
        problems += p
        evidence += e
    what = []
    if venvs:
        what.append(f"{len(venvs)} venv{'s' if len(venvs) != 1 else ''}")
    if paths:
        what.append(f"{len(paths)} path{'s' if len(paths) != 1 else ''}")
    return fold(ID, problems, ok=f"{' and '.join(what)}: every baked path exists", fix=FIX, evidence=evidence,
                accept=ctx.accept)


def check_pth_dirs(ctx) -> tuple[list[Finding], list[str]]:
    """With nothing declared, at least the .pth files of the doctor's own interpreter."""
    problems: list[Finding] = []
    dirs = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    for site in dirs:
        problems += check_pth(site)
    return problems, [f".pth files checked in {', '.join(dirs)}"] if dirs else []
