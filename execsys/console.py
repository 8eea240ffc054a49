"""Where output goes and how it looks.

stdout is data (``--json`` prints the documented JSON there and nothing else);
stderr is diagnostics and progress. Human output uses rich on a terminal and
plain text when piped; ``NO_COLOR`` is honoured by rich itself.

Everything the consoles print passes through the same redaction as what is
recorded (:func:`execsys.redact.redact_text`): a restart command or an error
echoing a ``--token`` never reaches a terminal or a CI log. It also passes through
:func:`execsys.termsafe.neutralise`: an ESC sequence or bidi override inside a model
id or a host name is shown escaped, never obeyed by the terminal. A terminal that
cannot encode a character (``PYTHONIOENCODING=ascii``, a C locale) gets ASCII
instead of a crash: status symbols and dashes become their ASCII look-alikes and
anything else a ``\\uXXXX`` escape, which inside JSON is the JSON escape itself
(see :func:`install_encoding_fallback`).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from execsys.redact import redact_text, scrub
from execsys.termsafe import neutralise, shown

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


# What a stream that cannot encode a character shows instead (human output only).
ASCII_LOOKALIKES = {"✓": "+", "✗": "x", "–": "-", "—": "-", "…": "...", "→": "->", "←": "<-", "·": "*",
                    "•": "*", "×": "x", "≥": ">=", "≤": "<=", "±": "+/-", "‘": "'", "’": "'", "“": '"',
                    "”": '"', "█": "#", "━": "-", "─": "-", "│": "|", "▏": "|"}


def _json_escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # JSON spells a non-BMP character as its UTF-16 surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _escape_for_json(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(_json_escape(c) for c in error.object[error.start:error.end]), error.end


def _escape_for_humans(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    chunk = error.object[error.start:error.end]
    return "".join(ASCII_LOOKALIKES.get(c) or _json_escape(c) for c in chunk), error.end


codecs.register_error("execsys-json", _escape_for_json)
codecs.register_error("execsys-ascii", _escape_for_humans)


def install_encoding_fallback(*, json_output: bool) -> None:
    """Make stdout and stderr write what they cannot encode as ASCII instead of raising
    UnicodeEncodeError: ``\\uXXXX`` escapes on stdout when it carries JSON (``json_output``; valid
    JSON, as ``ensure_ascii`` writes it), ASCII look-alikes for symbols otherwise."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:
            continue
        try:
            if json_output and name == "stdout":
                if _is_utf8(getattr(stream, "encoding", None)):
                    reconfigure(errors="execsys-json")  # only lone surrogates need it
                else:
                    # JSON is UTF-8 for every reader (jq, json.loads on bytes): on a latin-1 or ASCII
                    # stream write pure ASCII, every other character as its \\u escape
                    stream.flush()
                    reconfigure(encoding="ascii", errors="execsys-json")
            else:
                reconfigure(errors="execsys-ascii")
        except (ValueError, OSError):  # a closed or detached stream: nothing will be written there
            continue


def _is_utf8(encoding: str | None) -> bool:
    return (encoding or "").lower().replace("_", "-") in ("utf-8", "utf8", "utf-8-sig")


_SGR = re.compile(r"\x1b\[[0-9;]*m")


class RedactingStream:
    """A text stream that redacts what is written to it before it reaches ``sys.<name>`` (looked up
    on each write, so a replaced ``sys.stdout`` is honoured). Colour codes may split a secret, so a
    line in which redaction finds something is written without them."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def _stream(self) -> IO[str]:
        return getattr(sys, self._name)

    def write(self, text: str) -> int:
        clean = redact_text(text)
        if clean == text and "\x1b[" in text:
            plain = _SGR.sub("", text)
            redacted = redact_text(plain)
            if redacted != plain:
                clean = redacted
        self._stream.write(neutralise(clean))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _console(**kwargs: Any) -> Console:
    from rich.console import Console

    kwargs["file"] = RedactingStream("stderr" if kwargs.pop("stderr", False) else "stdout")

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

    err().print(f"[yellow]warning:[/] {escape(shown(redact_text(message)))}")


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def symbol(status: str) -> str:
    return SYMBOLS.get(status, "?")


def with_progress_bar(fn: Callable[[Callable[[int, int], None] | None], Any], *, label: str, total_hint: int,
                      threshold: int = 256 << 20) -> Any:
    """Run ``fn(progress)`` with a rich progress bar on stderr when it is a terminal and the work is large."""
    if not stderr_is_terminal() or total_hint < threshold:
        return fn(None)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=err(), transient=True) as bar:
        task = bar.add_task(label, total=total_hint)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return fn(progress)
