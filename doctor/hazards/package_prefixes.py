"""package-prefixes: packages come from a different prefix than the one you installed into.

``pip install`` on PATH can belong to another interpreter than ``python3``; a
user-site copy (``~/.local``) of a package shadows the environment's;
``PYTHONPATH``/``PYTHONHOME`` graft other trees onto ``sys.path``; a venv on a
conda base sees two package worlds; a global pip ``target``/``prefix`` sends
installs elsewhere. The upgrade you just installed is then not the one that
imports. This asks the ``python3`` on PATH for its prefix and ``sys.path``
(listing ``*.dist-info`` per entry), asks ``pip --version`` where it installs,
and reads pip's configuration files and environment -- without importing pip.
"""

from __future__ import annotations

import os
import re

from execsys.doctor import files
from execsys.doctor.model import Finding, HazardResult, fold

ID = "package-prefixes"
TITLE = "Which prefix packages come from"
FINDINGS = ("pythonpath-set", "pythonhome-set", "venv-on-conda", "pip-redirected", "pip-installs-elsewhere",
            "user-site-shadows", "installed-twice-different-versions", "installed-twice", "python3-silent")

FIX = ("Install with the interpreter that runs (`python3 -m pip install ...`), unset PYTHONPATH/PYTHONHOME for "
       "runs, remove user-site copies (`python3 -m pip uninstall --user PKG`) or set PYTHONNOUSERSITE=1, and "
       "remove global pip target/prefix settings.")

_PIP_FROM = re.compile(r"^pip (\S+) from (.+?) \(python ([\d.]+)\)")


def pip_config_files() -> list[str]:
    home = os.path.expanduser("~")
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    candidates = [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs if d] + [
        "/etc/pip.conf",
        os.path.join(home, ".pip", "pip.conf"),
        os.path.join(os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config")), "pip", "pip.conf"),
    ]
    if os.environ.get("VIRTUAL_ENV"):
        candidates.append(os.path.join(os.environ["VIRTUAL_ENV"], "pip.conf"))
    if os.environ.get("PIP_CONFIG_FILE") and os.environ["PIP_CONFIG_FILE"] != os.devnull:
        candidates.append(os.environ["PIP_CONFIG_FILE"])
    return [c for c in dict.fromkeys(candidates) if os.path.isfile(c)]


def pip_redirects() -> list[str]:
    """Global settings that send every ``pip install`` somewhere other than the interpreter's prefix."""
    found: list[str] = []
    for var in ("PIP_TARGET", "PIP_PREFIX", "PIP_ROOT"):
        if os.environ.get(var):
            found.append(f"{var}={os.environ[var]} is set")
    if os.environ.get("PIP_USER", "").lower() in ("1", "true", "yes", "on"):
        found.append("PIP_USER is set: installs go to the user site")
    for path in pip_config_files():
        import configparser  # here: most hosts have no pip configuration file to read

        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            continue
        for section in ("global", "install"):
            if not parser.has_section(section):
                continue
            for key in ("target", "prefix", "root"):
                if parser.get(section, key, fallback=None):
                    found.append(f"{path}: [{section}] {key} = {parser.get(section, key)}")
            if parser.get(section, "user", fallback="").lower() in ("true", "yes", "1", "on"):
                found.append(f"{path}: [{section}] user = true (installs go to the user site)")
    return found


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check(ctx) -> HazardResult:
    findings: list[Finding] = []
    evidence: list[str] = []
    for var in ("PYTHONPATH", "PYTHONHOME"):
        if os.environ.get(var):
            findings.append(Finding("warn", f"{var}={os.environ[var]} is set: it changes what every interpreter "
                                    "imports", f"{ID}/{var.lower()}-set"))
    if os.environ.get("CONDA_PREFIX") and os.environ.get("VIRTUAL_ENV"):
        findings.append(Finding("warn", f"a venv ({os.environ['VIRTUAL_ENV']}) is active on top of conda "
                                f"({os.environ['CONDA_PREFIX']}): two package worlds", f"{ID}/venv-on-conda"))
    findings += [Finding("warn", text, f"{ID}/pip-redirected") for text in pip_redirects()]
    pythons = files.which_all("python3")
    if not pythons:
        return fold(ID, findings, ok="python3 is not on PATH", quiet="skip", fix=FIX, accept=ctx.accept,
                    summary=lambda top: top[0].text)
    inv = ctx.python_facts(pythons[0])
    info = files.described(inv)
    if info is None:
        findings.append(Finding("error", f"python3 did not describe itself: {inv.describe()}", f"{ID}/python3-silent"))
        return fold(ID, findings, ok="", fix="", evidence=evidence, accept=ctx.accept, listed=True)
    prefix = info["prefix"]
    evidence.append(f"python3 ({pythons[0]}): {info['executable']} {info['version']}, prefix {prefix}")
    if inv.attempts > 1:
        evidence.append(f"python3 gave no answer within {ctx.timeout:g}s at first; it answered when asked again")
    if info["base_prefix"] != prefix:
        evidence.append(f"python3 is a venv on {info['base_prefix']}")
        if os.path.isdir(os.path.join(info["base_prefix"], "conda-meta")):
            findings.append(Finding("warn", f"the venv {prefix} is layered on a conda base ({info['base_prefix']})",
                                    f"{ID}/venv-on-conda"))
    sys_path = [os.path.realpath(p) for p in info["path"]]
    for pip_name in ("pip", "pip3"):
        pips = files.which_all(pip_name)
        if not pips:
            continue
        pip_inv = ctx.invoke([pips[0], "--version"])
        match = _PIP_FROM.match(pip_inv.first_line())
        if not match:
            evidence.append(f"{pip_name}: {pip_inv.describe()}")
            continue
        location = os.path.dirname(match.group(2).strip())  # .../site-packages
        evidence.append(f"{pip_name} ({pips[0]}): pip {match.group(1)} installs into {location} "
                        f"(python {match.group(3)})")
        if os.path.realpath(location) not in sys_path:
            findings.append(Finding("fail", f"{pip_name} installs into {location} (python {match.group(3)}), which "
                                    f"python3 ({info['executable']}, {info['version']}) does not import from",
                                    f"{ID}/pip-installs-elsewhere"))
    usersite = info.get("usersite")
    dists: dict[str, dict[str, str]] = info.get("dists", {})
    seen: dict[str, list[tuple[str, str]]] = {}
    for entry in info["path"]:
        for name, version in dists.get(entry, {}).items():
            seen.setdefault(name, []).append((entry, version))
    for name, where in sorted(seen.items()):
        if len(where) < 2:
            continue
        versions = {v for _, v in where}
        places = ", ".join(f"{v} in {p}" for p, v in where)
        user_first = usersite and where[0][0] == usersite
        if user_first and len(versions) > 1:
            findings.append(Finding("fail", f"{name}: user site {where[0][1]} shadows the environment's "
                                    f"{where[1][1]} ({places})", f"{ID}/user-site-shadows"))
        elif len(versions) > 1:
            findings.append(Finding("fail", f"{name}: installed twice on sys.path with different versions ({places}); "
                                    f"{where[0][1]} imports", f"{ID}/installed-twice-different-versions"))
        else:
            findings.append(Finding("warn", f"{name}: installed twice on sys.path ({places})", f"{ID}/installed-twice"))
    if usersite and info.get("user_enabled") and usersite in info["path"] and dists.get(usersite):
        evidence.append(f"user site {usersite} is active with {len(dists[usersite])} distribution(s)")
    return fold(ID, findings, ok=f"python3 and pip share {prefix}; one copy of each distribution", fix=FIX,
                evidence=evidence, accept=ctx.accept)
