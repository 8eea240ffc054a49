"""Write files so that a reader never sees half of one; read files without unbounded cost.

Writes go to a temp file in the target's directory and are renamed over it, so a
crash leaves either the old file or the new one. Only a regular file (or nothing)
is ever replaced: a device node, FIFO or directory at the target is refused --
renaming over ``/dev/null`` as root would replace the system's ``/dev/null``.
A symlink the user made (a lock or plan kept elsewhere) is written through to the
file it points at, so the link survives; where the directory belongs to someone
else's program (a sidecar beside a harness's results) ``follow_symlinks=False``
renames over the link itself, so a planted link never redirects the write.

A write can be split in two (:func:`prepare_write`, then :meth:`PreparedWrite.commit`):
the bytes are already on disk beside the target when the caller commits, so a
full, read-only or otherwise unwritable directory is known *before* the caller
records anything that names the file (the ledger row a sidecar belongs to, the
ledger row a lock belongs to), and nothing is left half-written either way.

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
from collections.abc import Iterator
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


def _write_target(path: str | os.PathLike[str], follow_symlinks: bool = True) -> Path:
    """The file a write to ``path`` must replace: a symlink's final target (followed, so the link is
    kept) or, with ``follow_symlinks=False``, the link itself (replaced by the new file); refused
    when something other than a regular file is there."""
    target = Path(path)
    if target.is_symlink():
        if not follow_symlinks:
            return target
        try:
            target = Path(os.path.realpath(target, strict=True))
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # nothing to write through to; replacing it would destroy the link
                raise InputError(f"{os.fspath(path)}: is a symlink loop, not a regular file: "
                                 "refusing to replace it") from None
            target = Path(os.path.realpath(target))  # a dangling link: the write creates what it names
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError:
        return target  # let the write itself report it (permission, a file as a parent directory)
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{os.fspath(path)}: is {file_kind(st.st_mode)}, not a regular file: refusing to replace it")
    return target


class PreparedWrite:
    """New content already written and fsynced to a temp file beside ``target``: :meth:`commit`
    renames it over the target, :meth:`discard` (or leaving the ``with`` block uncommitted) removes it."""

    def __init__(self, target: Path, tmp: str, follow_symlinks: bool) -> None:
        self.target = target
        self._tmp: str | None = tmp
        self._follow = follow_symlinks
        self.what: tuple[str | os.PathLike[str], str] | None = None  # (path as named, what): errors as write_output's

    def commit(self) -> Path:
        """Rename over the target (checked again: a FIFO or directory put there since is refused)."""
        tmp = self._tmp
        if tmp is None:
            raise ValueError("this write was already committed or discarded")
        try:
            with _output_errors(*self.what) if self.what is not None else contextlib.nullcontext():
                _write_target(self.target, self._follow)
                os.replace(tmp, self.target)
        except BaseException:
            self.discard()
            raise
        self._tmp = None
        return self.target

    def discard(self) -> None:
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._tmp = None

    def __enter__(self) -> PreparedWrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def prepare_write(path: str | os.PathLike[str], data: bytes, *, follow_symlinks: bool = True) -> PreparedWrite:
    """The first half of :func:`atomic_write_bytes`: the bytes in a temp file in the target's
    directory, fsynced, not yet renamed. Raises InputError for a non-regular target and OSError
    when the directory cannot take the file (read-only, full, missing and not creatable)."""
    target = _write_target(path, follow_symlinks)
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
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return PreparedWrite(target, tmp, follow_symlinks)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, follow_symlinks: bool = True) -> Path:
    """Write to a temp file in the same directory, fsync, then rename over ``path``.

    Raises InputError when ``path`` exists and is not a regular file; a symlink is written through
    (or, with ``follow_symlinks=False``, replaced). Returns the path written (a symlink's target)."""
    return prepare_write(path, data, follow_symlinks=follow_symlinks).commit()


def _mode_for(target: Path) -> int:
    """The mode of the regular file being replaced, else the umask default (also for a symlink being
    replaced: the mode of whatever a planted link points at is not ours to copy)."""
    try:
        st = os.lstat(target)
        if stat.S_ISREG(st.st_mode):
            return st.st_mode & 0o7777
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_text(path: str | os.PathLike[str], text: str, *, follow_symlinks: bool = True) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), follow_symlinks=follow_symlinks)


def json_bytes(obj: Any) -> bytes:
    """How execsys writes a JSON file: indented, UTF-8, a final newline."""
    return (json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8")


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, follow_symlinks: bool = True) -> Path:
    return atomic_write_bytes(path, json_bytes(obj), follow_symlinks=follow_symlinks)


def write_output(path: str | os.PathLike[str], content: str | bytes | Any, what: str) -> Path:
    """Atomically write a file the user named on the command line (text, bytes, or an object as JSON);
    a path that cannot be written (a directory, a device or FIFO, a missing or read-only parent) is an
    input error naming ``what`` -- 'cannot write the plan' -- never a traceback."""
    return prepare_output(path, content, what).commit()


def prepare_output(path: str | os.PathLike[str], content: str | bytes | Any, what: str) -> PreparedWrite:
    """:func:`write_output`'s first half: the content beside ``path``, to commit once the record that
    names it is written. Same errors, raised before anything is committed."""
    if isinstance(content, bytes):
        data = content
    elif isinstance(content, str):
        data = content.encode("utf-8")
    else:
        data = json_bytes(content)
    with _output_errors(path, what):
        prepared = prepare_write(path, data)
    prepared.what = (path, what)
    return prepared


def check_output(path: str | os.PathLike[str], what: str) -> None:
    """Raise the InputError :func:`write_output` would, without writing: for checking an output path
    before work that takes minutes or writes a record (``pin --out /dev/null`` refuses up front). A
    directory that exists is probed with a temp file, removed at once; a missing one is left to the write."""
    with _output_errors(path, what):
        target = _write_target(path)
        if target.parent.is_dir():
            prepare_write(target, b"").discard()


@contextlib.contextmanager
def _output_errors(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    try:
        yield
    except InputError as exc:
        raise InputError(f"{exc} (cannot write {what} there)") from exc
    except OSError as exc:
        reason = "is a directory" if Path(path).is_dir() else (exc.strerror or str(exc))
        raise InputError(f"{os.fspath(path)}: cannot write {what} ({reason})") from exc


def _open_regular(path: str | os.PathLike[str], what: str) -> tuple[int, os.stat_result]:
    """An open descriptor on a regular file and its stat: opened with ``O_NONBLOCK`` so a FIFO cannot
    block the open, anything else refused. FileNotFoundError unchanged, InputError for the rest."""
    shown = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise InputError(f"{what} {shown}: is a directory, not a regular file") from exc
        raise InputError(f"{what} {shown}: cannot read ({exc.strerror or exc})") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {shown}: is {file_kind(st.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def require_regular(path: str | os.PathLike[str], what: str) -> None:
    """Raise what :func:`read_bounded` would for a FIFO, device or directory at ``path``, reading
    nothing: for a file another library reads itself (an Inspect log), which would block on a FIFO."""
    fd, _ = _open_regular(path, what)
    os.close(fd)


def read_bounded(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of a regular file no larger than ``limit``, for ``what`` ('declaration', 'lock').

    Opened with ``O_NONBLOCK`` so a FIFO cannot block the open; a FIFO, device or directory is
    refused, as is a file over ``limit`` (also one that grows past it while read). Raises
    FileNotFoundError unchanged (callers say what to create), InputError for the rest."""
    shown = os.fspath(path)
    fd, st = _open_regular(path, what)
    try:
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


def read_head(path: str | os.PathLike[str], size: int, what: str) -> bytes:
    """The first ``size`` bytes of a regular file (fewer when it is shorter), for telling what a file
    is from its start; the same refusals as :func:`read_bounded`, and no cap on the file itself."""
    fd, _ = _open_regular(path, what)
    try:
        return os.read(fd, size)
    except OSError as exc:
        raise InputError(f"{what} {os.fspath(path)}: cannot read ({exc.strerror or exc})") from exc
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
