"""What every harness adapter provides, and the shape of a result read back from a harness file."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

SIDECAR_SUFFIX = ".execsys.json"
# the in-toto receipt written beside the sidecar (execsys.receipt)
RECEIPT_SUFFIX = ".execsys.intoto.json"
# Inspect lists every file in a log directory whose name starts with an ISO time and ends in .json as
# a log (and fails on one that is not): a sidecar beside an Inspect log must not look like that.
_INSPECT_LOG_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}[:-]\d{2}[:-]\d{2}")


def sidecar_name(result_name: str) -> str:
    """``<result>.execsys.json``; prefixed ``execsys-`` where Inspect would take that name for a log."""
    return _beside(result_name + SIDECAR_SUFFIX)


def receipt_name(result_name: str) -> str:
    """``<result>.execsys.intoto.json``; prefixed ``execsys-`` as the sidecar's name is, for the same reason."""
    return _beside(result_name + RECEIPT_SUFFIX)


def _beside(name: str) -> str:
    return f"execsys-{name}" if _INSPECT_LOG_NAME.match(name) else name


@dataclass
class HarnessResult:
    """One result file read back: per-case outcomes and the identity embedded in it, if any."""

    path: Path
    harness: str
    outcomes: dict[str, Any]
    embedded: dict[str, Any] | None = None  # {"identity": ID, "run": RUN_ID} from the harness's own metadata
    notes: list[str] = field(default_factory=list)
    # the other files the outcomes were read from (lm-eval's samples files), whose digests a run recorded too
    sources: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class SampleOutput:
    """One sample a harness logged, as a grader sees it again (``execsys probe grader --cases``).

    ``id`` is the key :meth:`HarnessAdapter.read` gives the sample's outcome (``<task>/<id>``), so a
    flipped verdict names the same case ``compare`` does."""

    id: str
    prompt: str  # what the model was asked (a chat input: its messages as JSON)
    output: str  # the text the harness's own scorer graded
    expected: Any = None  # the harness's target


class HarnessAdapter(Protocol):
    """One evaluation harness, as ``execsys run`` and ``execsys compare`` see it."""

    name: str

    def matches(self, argv: Sequence[str]) -> bool:
        """Whether this command line runs this harness."""
        ...

    def task(self, argv: Sequence[str]) -> str:
        """The task this command line evaluates, as a list of runs names it (``arc_easy``, ``gsm8k.py``)."""
        ...

    def prepare(self, argv: Sequence[str], identity_id: str, run_id: str) -> list[str]:
        """The command line to start instead: the identity added where the harness keeps metadata."""
        ...

    def output_dirs(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> list[Path]:
        """Where this command will write its results (absolute)."""
        ...

    def owns(self, path: Path) -> bool:
        """Whether ``path`` is one of this harness's result files (by name, and by content if needed)."""
        ...

    def is_primary(self, path: Path) -> bool:
        """A result to compare (lm-eval's ``results_*.json``), not a companion (its ``samples_*.jsonl``)."""
        ...

    def read(self, path: Path) -> HarnessResult:
        """Read per-case outcomes and the embedded identity; InputError when unreadable."""
        ...


def flag_value(argv: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--flag VALUE`` / ``--flag=VALUE`` among ``names`` (None when absent)."""
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1:]
    return value


_INTERPRETER = re.compile(r"^(python|pypy|bash|sh|zsh)[0-9.]*$")


def script_name(argv: Sequence[str]) -> str:
    """What a plain command runs, by name: ``python eval.py out.json`` -> ``eval.py``, ``python -m pkg``
    -> ``pkg``, ``./run.sh`` -> ``run.sh`` (``?`` for an empty command)."""
    words = program_words(argv)
    if len(words) > 1 and _INTERPRETER.match(os.path.basename(str(argv[0]))):
        return words[1]
    return words[0] if words else "?"


def program_words(argv: Sequence[str]) -> list[str]:
    """The program and module names a command runs: ``python -m lm_eval`` -> ["python", "lm_eval"],
    ``/venv/bin/inspect eval`` -> ["inspect", "eval"] (basenames, up to the first option that is not -m)."""
    words: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "-m":
            module = next(it, None)
            if module:
                words.append(module)
            continue
        if arg.startswith("-"):
            break
        words.append(os.path.basename(arg))
    return words
