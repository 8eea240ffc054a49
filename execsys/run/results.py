"""Step 6, the results: the files this run created or modified, digested, each with its harness.

Looked for in the harness's own output directory (lm-eval's ``--output_path``, Inspect's
``--log-dir``) and in every ``--result PATH|GLOB``. A file that was already there and did not change
is an older run's and is left alone: the snapshot taken before the harness starts tells them apart.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from execsys.errors import InputError
from execsys.harnesses import registry
from execsys.harnesses.base import HarnessAdapter

Stamp = tuple[int, int]  # (mtime_ns, size)

PATTERN_BUDGET_S = 20.0
"""How long the walk of one ``--result`` glob may take when it is checked before the run. ``glob``
follows symlinks to directories, so ``/**/*.json`` walks /proc's loops (and two links back to their
own directory 2**40 paths deep) without end: such a pattern is refused up front rather than matched
before and after the run for ever."""


def check_pattern_finishes(pattern: str, budget_s: float = PATTERN_BUDGET_S) -> None:
    """InputError when walking what ``pattern`` (absolute) walks is not done within ``budget_s``.

    Only a ``**`` walks a tree; it is walked here as glob would walk it (``ROOT/**``, links
    followed), one entry at a time, so the check stops at its deadline and leaves nothing running."""
    if "**" not in pattern:
        return
    parts = Path(pattern).parts
    root = Path(*parts[:next(i for i, part in enumerate(parts) if glob.has_magic(part))])
    deadline = time.monotonic() + budget_s
    for _ in glob.iglob(os.path.join(glob.escape(str(root)), "**"), recursive=True):
        if time.monotonic() > deadline:
            raise InputError(f"--result {pattern}: still matching after {budget_s:g} s (a glob over / or through "
                             "a symlink loop?); name the directory the harness writes to")


@dataclass(frozen=True)
class FoundResult:
    path: Path
    blake3: str
    harness: str

    def to_json(self) -> dict[str, str]:
        return {"path": str(self.path), "blake3": self.blake3, "harness": self.harness}


class ResultFinder:
    """Snapshot before the run (:meth:`before`), then :meth:`found` after it."""

    def __init__(self, adapter: HarnessAdapter, harness_dirs: list[Path], patterns: list[str], cwd: Path) -> None:
        self.adapter = adapter
        self.harness_dirs = harness_dirs
        self.patterns = [p if os.path.isabs(os.path.expanduser(p)) else str(cwd / p)
                         for p in (os.path.expanduser(p) for p in patterns)]
        self._before: dict[Path, Stamp] = {}

    def _harness_files(self) -> Iterable[Path]:
        for directory in self.harness_dirs:
            if directory.is_dir():
                for root, _dirs, files in os.walk(directory):
                    for name in files:
                        yield Path(root) / name

    def _pattern_files(self) -> Iterable[Path]:
        for pattern in self.patterns:
            for name in sorted(glob.glob(pattern, recursive=True)):
                yield Path(name)

    def _candidates(self) -> dict[Path, str | None]:
        """Every candidate file -> the harness it must belong to (None: whichever claims it)."""
        out: dict[Path, str | None] = {}
        for path in self._pattern_files():
            out[path.absolute()] = None
        for path in self._harness_files():
            out.setdefault(path.absolute(), self.adapter.name)
        return {p: h for p, h in out.items() if p.is_file() and not registry.is_sidecar(p)}

    def before(self) -> None:
        self._before = {p: _stamp(p) for p in self._candidates()}

    def found(self) -> list[tuple[Path, str]]:
        """(path, harness) for each file created or modified since :meth:`before`, sorted by path."""
        out: list[tuple[Path, str]] = []
        for path, harness in sorted(self._candidates().items()):
            if self._before.get(path) == _stamp(path):
                continue
            if harness is not None and self.adapter.owns(path):
                out.append((path, harness))
            else:
                out.append((path, registry.for_file(path).name))
        return out


def _stamp(path: Path) -> Stamp:
    try:
        st = path.stat()
    except OSError:
        return (0, -1)
    return (st.st_mtime_ns, st.st_size)


def digest(path: Path) -> str:
    from execsys.digest import hash_file

    return hash_file(path)


# Pauses after hashing before a result's digest is trusted: its size and modification time must
# not move over hash + pause (a harness's last flush, a log rotated on exit, a writer it left
# behind). One still moving after the last pause is reported, not waited on: about a second in all.
SETTLE_PAUSES_S = (0.2, 0.3, 0.5)


def settled_digests(paths: list[Path]) -> dict[Path, str | Exception]:
    """The BLAKE3 of each result once it has held still, or the exception saying why there is none.

    All results settle together (one pause per round, not one per file). A result whose size or
    modification time moved between the stamp taken before hashing and the end of the pause is
    hashed again next round; after the last round it is an InputError "still being written after
    the harness exited". Gone or unreadable: the OSError or InputError the digest raised. The
    caller records the run either way, without the digests it cannot vouch for."""
    from execsys.digest import ChangedWhileHashed
    from execsys.errors import InputError

    out: dict[Path, str | Exception] = {}
    pending = list(paths)
    for pause in SETTLE_PAUSES_S:
        hashed: dict[Path, tuple[Stamp, str]] = {}
        for path in pending:
            before = _stamp(path)
            try:
                hashed[path] = (before, digest(path))
            except ChangedWhileHashed:
                continue
            except (OSError, InputError) as exc:
                out[path] = exc
        pending = [p for p in pending if p not in out]
        if not pending:
            break
        time.sleep(pause)
        for path, (before, blake3) in hashed.items():
            if _stamp(path) == before:
                out[path] = blake3
        pending = [p for p in pending if p not in out]
        if not pending:
            break
    for path in pending:
        out[path] = InputError(f"{path}: still being written after the harness exited (it kept changing for "
                               f"{sum(SETTLE_PAUSES_S):g} s after it was hashed)")
    return out
