"""Observe the environment component -- and, apart from it, the observer that pins it.

The same system must get the same id whichever shell, terminal, directory, user or execsys
install pins it. So this module keeps two records:

- :func:`observe_environment` (in the id): what the harness gets whoever launches it -- the
  container, the machine's configured locale and timezone, the declared ``[environment]
  variables`` as the serving process has them (:func:`variables_source`: execsys's own environment,
  said so, only where no serving process is found; redacted when the name looks secret, so only
  their presence is compared) and the
  shells a declared harness command runs through (or that ``[environment] shell`` declares).
- :func:`observe_observer` (outside the id, the lock's ``observer``): execsys's own version and
  interpreter, the invoking shell, terminal, working directory, user, the process's locale and
  ``$TZ``, and the numerics variables that happen to be set in the pinning process. Shown by
  ``pin`` and ``verify``, never compared as identity.
"""

from __future__ import annotations

import contextlib
import locale
import os
import platform
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execsys.observe.hardware import detect_container
from execsys.redact import REDACTED, is_secret_name, redact_text

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox"})


# -- the observer (outside the id) -------------------------------------------------------------


def detect_shell() -> dict[str, Any]:
    """The operator's interactive shell (the parent chain, else ``$SHELL``): the observer's, not the system's."""
    try:
        import shellingham

        name, path = shellingham.detect_shell()
        return {"name": name, "path": path, "source": "shellingham"}
    except Exception:  # noqa: BLE001 - ShellDetectionFailure, unsupported platform
        shell = os.environ.get("SHELL")
        if shell:
            return {"name": os.path.basename(shell), "path": shell, "source": "$SHELL"}
        return {"name": None, "path": None, "source": None}


def locale_facts() -> dict[str, Any]:
    """The pinning process's locale variables: the operator's terminal settings (observer)."""
    return {
        "LANG": os.environ.get("LANG"),
        "LC_ALL": os.environ.get("LC_ALL"),
        "LC_CTYPE": os.environ.get("LC_CTYPE"),
        "preferred_encoding": locale.getpreferredencoding(False),
    }


def _user() -> str | None:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no name for this uid (containers): the uid says enough
        return str(os.getuid()) if hasattr(os, "getuid") else None


def observe_observer() -> dict[str, Any]:
    """Who and what pinned: recorded beside the identity, never part of its id."""
    from execsys import __version__
    from execsys.observe.vocabulary import numerics_env

    size = shutil.get_terminal_size(fallback=(0, 0))
    return {
        "execsys": __version__,
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": os.path.realpath(sys.executable),
            "prefix": sys.prefix,
        },
        "shell": detect_shell(),
        "terminal": {"TERM": os.environ.get("TERM"), "stdout_is_terminal": sys.stdout.isatty(),
                     "columns": size.columns or None, "lines": size.lines or None},
        "cwd": os.getcwd(),
        "user": _user(),
        "locale": locale_facts(),
        "TZ": os.environ.get("TZ"),
        # the serving process's numerics switches are runtime's (the id); these are the pinning shell's
        "numerics_env": numerics_env(os.environ),
    }


# -- the environment component (in the id) -----------------------------------------------------


def system_timezone() -> str | None:
    """The machine's configured zone (``/etc/timezone``, ``/etc/localtime``), not the pinning shell's ``$TZ``."""
    try:
        text = Path("/etc/timezone").read_text().strip()
        if text:
            return text
    except OSError:
        pass
    try:
        target = os.readlink("/etc/localtime")
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    except OSError:
        pass
    return None


def system_locale() -> str | None:
    """The machine's default ``LANG`` (what a service or cron job gets), not the pinning shell's."""
    for path in ("/etc/default/locale", "/etc/locale.conf"):
        with contextlib.suppress(OSError):
            for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
                key, _, value = line.strip().partition("=")
                if key == "LANG" and value:
                    return value.strip().strip("'\"")
    return None


def observe_shell(program: str, because: str) -> dict[str, Any]:
    """The shell a harness command runs through: which file it is, and its version where it says one."""
    from execsys.doctor import files

    matches = files.which_all(program)
    if not matches:
        return {"program": program, "executable": None, "because": because, "note": "not found on PATH"}
    real = os.path.realpath(matches[0])
    record: dict[str, Any] = {"program": program, "executable": real, "because": because}
    try:
        record["digest"] = files.digest(real)
    except OSError as exc:
        record["digest"] = None
        record["note"] = f"unreadable ({exc.strerror})"
    if os.path.basename(real) in ("bash", "zsh", "ksh", "mksh", "fish"):
        inv = files.bounded_run([real, "--version"], 5.0)
        record["version"] = inv.first_line() if inv.ok else None
    return record


# [environment] variables mean the serving process's environment; without one, execsys can look only here
OWN_ENVIRONMENT = "checked in execsys's own environment (no serving process found)"


@dataclass(frozen=True)
class VariablesSource:
    """Where the declared ``[environment] variables`` are read: the serving process's environment
    (``pid``) wherever one is declared or found, else execsys's own; ``where`` says which, in words."""

    environ: Mapping[str, str]
    where: str
    pid: int | None = None


def variables_source(declared_runtime: dict[str, Any] | None) -> VariablesSource:
    """The serving process of ``[runtime]`` (the listener on its endpoint's port, or its ``process``)
    and its environment; execsys's own environment, said so, when there is none here or it is unreadable."""
    import psutil

    from execsys.observe.runtime import find_serving_process
    from execsys.observe.vocabulary import REMOTE_PROCESS_NOTE

    runtime = declared_runtime or {}
    proc = find_serving_process(runtime.get("endpoint"), runtime.get("process"))
    if proc is None or proc == REMOTE_PROCESS_NOTE:
        return VariablesSource(os.environ, OWN_ENVIRONMENT)
    try:
        return VariablesSource(proc.environ(), f"checked in pid {proc.pid}, the serving process", proc.pid)
    except psutil.Error:
        return VariablesSource(os.environ, f"checked in execsys's own environment (the environment of pid "
                                           f"{proc.pid}, the serving process, is not readable from this user)")


def observe_environment(declared: dict[str, Any], *, harness_shells: list[tuple[str, str]] | None = None,
                        source: VariablesSource | None = None) -> dict[str, Any]:
    """The environment the harness runs in. ``harness_shells``: (shell, why) for each declared harness
    command that runs through a shell (see :func:`execsys.observe.harness.observe_commands`). The
    declared variables are read from ``source`` (:func:`variables_source`; execsys's own environment
    without one)."""
    variables = declared.get("variables") or {}
    environ = source.environ if source is not None else os.environ
    observed_vars: dict[str, Any] = {}
    not_holding: list[str] = []
    for name, expected in sorted(variables.items()):
        actual = environ.get(name)
        if actual is None:
            observed_vars[name] = None
        elif is_secret_name(name):
            observed_vars[name] = REDACTED
        else:
            observed_vars[name] = redact_text(actual)
        # a secret-named variable can only be checked for presence: its value is never compared or kept
        holds = actual is not None and (is_secret_name(name) or str(expected) == actual)
        if not holds:
            not_holding.append(name)
    observed: dict[str, Any] = {
        # the harness runs in the same container as the pinning process: a property of the system
        "container": detect_container() or "none",
        # machine configuration, the same for every operator; the shell's LANG/TZ are the observer's
        "locale": system_locale(),
        "timezone": system_timezone(),
        "variables": observed_vars,
        "variables_not_holding": not_holding,
    }
    wanted: dict[str, str] = {}
    if declared.get("shell"):
        wanted[str(declared["shell"])] = "declared in [environment] shell"
    for shell, why in harness_shells or []:
        wanted.setdefault(shell, why)
    if wanted:
        # only a shell the harness actually runs through is part of the system; the operator's is not
        observed["shells"] = [observe_shell(program, why) for program, why in sorted(wanted.items())]
    return observed
