"""Write files so that a reader never sees half of one; read files without unbounded cost.

Writes go to a temp file in the target's directory and are renamed over it, so a
crash leaves either the old file or the new one. Only a regular file (or nothing)
is ever replaced: a device node, FIFO or directory at the target is refused --
renaming over ``/dev/null`` as root would replace the system's ``/dev/null`` --
and a symlink is written through to the file it points at, so the link survives.

Reads of the small files execsys is handed (declaration, lock, env file) go
through :func:`read_bounded`: it opens with ``O_NONBLOCK`` (a FIFO never blocks),
refuses anything that is not a regular file and anything over a cap suited to
what the file is (``/dev/zero`` as a declaration is an error, not 1 GB/s of
memory growth).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from execsys.errors import InputError

# Caps for files that are read whole. A declaration or a lock of a few KiB is typical; a few MiB
# leaves room for long notes and many flags while keeping a mistaken `--config /dev/zero`-like
# input (a huge log, a model file) an immediate, clear error.
DECLARATION_LIMIT = 4 << 20
LOCK_LIMIT = 16 << 20
ENV_FILE_LIMIT = 4 << 20
# Plans, executed logs and result files grow with the number of cases (tens of bytes each).
RECORD_FILE_LIMIT = 256 << 20


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words: 'a FIFO', 'a character device', 'a directory'."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _write_target(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` must replace: a symlink's final target (followed, so the link is
    kept), refused when something other than a regular file is there."""
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError:
        return target  # let the write itself report it (permission, a file as a parent directory)
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{os.fspath(path)}: is {file_kind(st.st_mode)}, not a regular file: refusing to replace it")
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write to a temp file in the same directory, fsync, then rename over ``path``.

    Raises InputError when ``path`` exists and is not a regular file; a symlink is written through.
    Returns the path written (a symlink's target)."""
    target = _write_target(path)
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
    a path that cannot be written (a directory, a device or FIFO, a missing or read-only parent) is an
    input error naming ``what`` -- 'cannot write the plan' -- never a traceback."""
    try:
        if isinstance(content, bytes):
            return atomic_write_bytes(path, content)
        if isinstance(content, str):
            return atomic_write_text(path, content)
        return atomic_write_json(path, content)
    except InputError as exc:
        raise InputError(f"{exc} (cannot write {what} there)") from exc
    except OSError as exc:
        reason = "is a directory" if Path(path).is_dir() else (exc.strerror or str(exc))
        raise InputError(f"{os.fspath(path)}: cannot write {what} ({reason})") from exc


def read_bounded(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of a regular file no larger than ``limit``, for ``what`` ('declaration', 'lock').

    Opened with ``O_NONBLOCK`` so a FIFO cannot block the open; a FIFO, device or directory is
    refused, as is a file over ``limit`` (also one that grows past it while read). Raises
    FileNotFoundError unchanged (callers say what to create), InputError for the rest."""
    shown = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise InputError(f"{what} {shown}: cannot read ({exc.strerror or exc})") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {shown}: is {file_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise InputError(f"{what} {shown}: {st.st_size} bytes, more than a {what} may have ({_size(limit)})")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise InputError(f"{what} {shown}: grew past {_size(limit)} while it was read")
        return b"".join(chunks)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise InputError(f"{what} {shown}: is a directory, not a regular file") from exc
        raise InputError(f"{what} {shown}: cannot read ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)


def read_json_object(path: str | os.PathLike[str], what: str, limit: int = RECORD_FILE_LIMIT) -> dict[str, Any] | None:
    """The JSON object a regular file holds, through :func:`read_bounded`; None when there is none:
    missing, unreadable, not a regular file (a FIFO named like a result never blocks), over
    ``limit``, not JSON, or JSON that is not an object. For telling what a file is, where the
    caller says what it expected."""
    try:
        data = json.loads(read_bounded(path, limit, what))
    except (OSError, InputError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"
