"""Where output goes and how it looks.

stdout is data (``--json`` prints the documented JSON there and nothing else);
stderr is diagnostics and progress. Human output uses rich on a terminal and
plain text when piped; ``NO_COLOR`` is honoured by rich itself.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from execsys.redact import scrub

if TYPE_CHECKING:
    from rich.console import Console

# Status symbols shared by every face (CLI, TUI): never colour alone.
SYMBOLS = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "–", "error": "?"}
STYLES = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim", "error": "magenta"}


def print_json(obj: Any) -> None:
    """The documented JSON on stdout, secrets scrubbed, one trailing newline."""
    sys.stdout.write(json.dumps(scrub(obj), indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


_stdout_console: Console | None = None
_stderr_console: Console | None = None


def _console(**kwargs: Any) -> Console:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1 -- the code for "a finding" -- when `execsys doctor | head` closes the
            # pipe early; let the CLI treat it as every other closed pipe (silent, exit 0)
            self.quiet = True
            raise BrokenPipeError

    return _Console(**kwargs)


def out() -> Console:
    """Console for human output on stdout."""
    global _stdout_console
    if _stdout_console is None:
        _stdout_console = _console(soft_wrap=True, highlight=False)
    return _stdout_console


def err() -> Console:
    """Console for warnings and progress on stderr."""
    global _stderr_console
    if _stderr_console is None:
        _stderr_console = _console(stderr=True, soft_wrap=True, highlight=False)
    return _stderr_console


def warn(message: str) -> None:
    """One warning line on stderr."""
    from rich.markup import escape

    from execsys.redact import redact_text

    err().print(f"[yellow]warning:[/] {escape(redact_text(message))}")


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def symbol(status: str) -> str:
    return SYMBOLS.get(status, "?")
