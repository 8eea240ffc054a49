"""Observe the environment component: interpreter, shell, container, locale, timezone, declared variables.

The declared variables are the ones the operator says must hold for the run
(``[environment] variables``); their observed values are recorded -- redacted
when the name looks secret, so only their presence is compared -- and any that do
not hold are listed.
"""

from __future__ import annotations

import locale
import os
import platform
import sys
from pathlib import Path
from typing import Any

from execsys.observe.hardware import detect_container
from execsys.redact import REDACTED, is_secret_name, redact_text


def detect_shell() -> dict[str, Any]:
    try:
        import shellingham

        name, path = shellingham.detect_shell()
        return {"name": name, "path": path, "source": "shellingham"}
    except Exception:  # noqa: BLE001 - ShellDetectionFailure, unsupported platform
        shell = os.environ.get("SHELL")
        if shell:
            return {"name": os.path.basename(shell), "path": shell, "source": "$SHELL"}
        return {"name": None, "path": None, "source": None}


def timezone_name() -> str | None:
    if os.environ.get("TZ"):
        return os.environ["TZ"]
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
    import time

    return time.tzname[0] if time.tzname else None


def locale_facts() -> dict[str, Any]:
    return {
        "LANG": os.environ.get("LANG"),
        "LC_ALL": os.environ.get("LC_ALL"),
        "LC_CTYPE": os.environ.get("LC_CTYPE"),
        "preferred_encoding": locale.getpreferredencoding(False),
    }


def observe_environment(declared: dict[str, Any]) -> dict[str, Any]:
    variables = declared.get("variables") or {}
    observed_vars: dict[str, Any] = {}
    not_holding: list[str] = []
    for name, expected in sorted(variables.items()):
        actual = os.environ.get(name)
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
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            # resolved: `execsys` (python3.11 shebang) and `python -m execsys` run the same
            # interpreter and must pin the same identity; sys.prefix keeps a venv distinct
            "executable": os.path.realpath(sys.executable),
            "prefix": sys.prefix,
        },
        "shell": detect_shell(),
        "container": detect_container() or "none",
        "locale": locale_facts(),
        "timezone": timezone_name(),
        "variables": observed_vars,
        "variables_not_holding": not_holding,
    }
