"""Write files so that a reader never sees half of one."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write to a temp file in the same directory, fsync, then rename over ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp creates 0600; a lock or plan is shared with the team like any file written with
        # open(): keep the mode of the file being replaced, else the umask default
        os.fchmod(fd, _mode_for(target))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def _mode_for(target: Path) -> int:
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def write_output(path: str | os.PathLike[str], content: str | bytes | Any, what: str) -> Path:
    """Atomically write a file the user named on the command line (text, bytes, or an object as JSON);
    a path that cannot be written (a directory, a missing or read-only parent) is an input error
    naming ``what`` -- 'cannot write the plan' -- never a traceback."""
    from execsys.errors import InputError

    try:
        if isinstance(content, bytes):
            return atomic_write_bytes(path, content)
        if isinstance(content, str):
            return atomic_write_text(path, content)
        return atomic_write_json(path, content)
    except OSError as exc:
        reason = "is a directory" if Path(path).is_dir() else (exc.strerror or str(exc))
        raise InputError(f"{path}: cannot write {what} ({reason})") from exc

