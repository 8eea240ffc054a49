"""BLAKE3 digests of artifacts: one file, or a whole directory tree through a b3sum manifest.

A model artifact is identified by its bytes, not by its name: a file's digest is
the standard BLAKE3 of its contents (the same hex ``b3sum FILE`` prints), and a
directory's digest is the BLAKE3 of its manifest -- one ``b3sum``-format line per
regular file, sorted bytewise by relative path -- so ``b3sum --check`` run inside
the directory verifies the same manifest independently of execsys.

Names in a manifest are byte-exact, so two trees whose names differ in any byte
never share a digest. A line is written as b3sum writes it; where b3sum would show
a name lossily (bytes that are not UTF-8 become U+FFFD, so two different names
could print the same), the line is escaped instead: it starts with ``\\`` (as b3sum
marks escaped lines), a backslash is ``\\\\``, a newline ``\\n`` and each byte that is
not UTF-8 ``\\xHH``. Those lines, and only those, ``b3sum --check`` cannot check: it cannot name
such a file from a UTF-8 check file, and refuses its own lossy line (``Unicode replacement character
in path``) as it refuses the escaped one (``Invalid backslash escape``), checking every other line
and exiting 1.
A single file's digest line (``execsys digest FILE``) is exactly b3sum's.

Files are hashed multi-threaded from memory mappings, one fixed-size window at a
time, so peak memory stays flat however large the weights are. The file's size is
checked again before each window and at the end: a file truncated, grown or
rewritten while it is hashed is an error ("changed while it was being hashed"),
never a window mapped past the end (that is SIGBUS) or a digest of a mix of two
versions. Symlinks are followed (Hugging Face caches are symlinks into a blob
store); a symlink loop is an error, never an endless walk, and trees are walked
iteratively, so depth is bounded only by the file system.

The module imports only the standard library at load time (``blake3`` is imported
where it is used), because :func:`remote_digest` sends its tree-walking code to
hosts that may have nothing but ``python3``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Callable
from typing import Any

from execsys.errors import InputError  # on a remote host, remote_program() provides a stand-in

ProgressFn = Callable[[int, int], None]
"""``progress(done_bytes, total_bytes)``, called while hashing."""

# 64 MiB per mapping window: large enough for BLAKE3's parallel tree hashing to keep
# every core busy, small enough that unmapping each window keeps RSS flat.
WINDOW = 64 << 20
# Files smaller than one window are read in chunks of this size; larger ones are mapped (in a child
# process, see _MAPPED_HASHER).
READ_CHUNK = 8 << 20


# Plain classes rather than dataclasses: `execsys digest` start-up is part of its throughput on
# real weights, and importing dataclasses (and inspect with it) costs about 10 ms.


class ManifestEntry:
    __slots__ = ("relpath", "digest", "size")

    def __init__(self, relpath: bytes, digest: str, size: int) -> None:
        self.relpath = relpath  # raw bytes of the '/'-separated path under the root (need not be UTF-8)
        self.digest = digest
        self.size = size

    @property
    def line(self) -> str:
        return manifest_line(self.digest, self.relpath)


class DigestResult:
    """What was hashed and what came out."""

    def __init__(self, path: str, kind: str, digest: str, size_bytes: int, files: int,
                 entries: list[ManifestEntry] | None = None) -> None:
        self.path = path
        self.kind = kind  # "file" or "tree"
        self.digest = digest
        self.size_bytes = size_bytes
        self.files = files
        self.entries = entries or []  # trees only

    @property
    def manifest(self) -> str:
        return "".join(e.line + "\n" for e in self.entries)

    def to_json(self, *, manifest: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "kind": self.kind,
            "algorithm": "blake3",
            "digest": self.digest,
            "size_bytes": self.size_bytes,
            "files": self.files,
        }
        if manifest and self.kind == "tree":
            out["manifest"] = self.manifest
        return out


# -- the b3sum line format ------------------------------------------------------------


def manifest_line(digest: str, relpath: bytes) -> str:
    """One manifest line (without the newline): exactly what ``b3sum`` prints for a UTF-8 name.

    A name holding a backslash or newline is escaped as b3sum escapes it (the line starts with
    ``\\``); a name that is not UTF-8 is escaped too, each undecodable byte as ``\\xHH``, so the
    line keeps every byte of the name (b3sum would print U+FFFD and lose them).
    """
    try:
        name = relpath.decode("utf-8")
    except UnicodeDecodeError:
        return "\\" + digest + "  " + _escape_bytes(relpath)
    if "\\" in name or "\n" in name:
        return "\\" + digest + "  " + name.replace("\\", "\\\\").replace("\n", "\\n")
    return digest + "  " + name


def _escape_bytes(raw: bytes) -> str:
    """Backslash, newline and every byte that is not part of valid UTF-8, escaped; the rest as text."""
    text = raw.decode("utf-8", "surrogateescape")
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif "\udc80" <= char <= "\udcff":
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        else:
            out.append(char)
    return "".join(out)


def b3sum_line(digest: str, name: str | bytes | os.PathLike) -> str:
    """The line ``b3sum NAME`` prints for one file: the name lossily decoded, escaped for backslash
    and newline (the line then starts with ``\\``)."""
    text = os.fsencode(name).decode("utf-8", "replace")
    if "\\" in text or "\n" in text:
        return "\\" + digest + "  " + text.replace("\\", "\\\\").replace("\n", "\\n")
    return digest + "  " + text


# -- hashing one file ------------------------------------------------------------------


def _hasher():
    import blake3

    return blake3.blake3(max_threads=blake3.blake3.AUTO)


def hash_file(path: str | bytes | os.PathLike, *, progress: ProgressFn | None = None,
              done_before: int = 0, total: int | None = None) -> str:
    """BLAKE3 hex of one file's bytes: read in chunks below one window, else hashed window by window
    from a memory mapping in a child process (a truncation under a mapping is SIGBUS there, not here).

    Raises InputError "PATH changed while it was being hashed" when the file's size or
    modification time moves while it is hashed (the size is re-checked before each window, so a
    truncated file is never mapped past its end)."""
    display = shown(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _input_error(display, exc) from exc
    try:
        before = os.fstat(fd)
        size = before.st_size
        hasher = _hasher()
        total = size if total is None else total
        if size < WINDOW:
            # read(), not a mapping: a file that shrinks under read() just ends early (no SIGBUS)
            done = 0
            while True:
                chunk = os.read(fd, READ_CHUNK)
                if not chunk:
                    break
                hasher.update(chunk)
                done += len(chunk)
                if done > size:
                    raise _changed(display)
                if progress is not None:
                    progress(done_before + done, total)
            if done != size:
                raise _changed(display)
        else:
            digest = _hash_mapped_in_child(fd, size, display, progress, done_before, total)
            after = os.fstat(fd)
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                raise _changed(display)
            return digest
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise _changed(display)
        return hasher.hexdigest()
    except OSError as exc:
        raise _input_error(display, exc) from exc
    finally:
        os.close(fd)


# Hashes one file from memory-mapped windows and prints the offset after each window, then the
# digest. It runs in a child process because a mapped page past the end of a file that another
# process truncated is SIGBUS on first touch -- fatal to whichever process touches it, and no Python
# code can catch it. The child may die of it; the parent reports the file as changed.
_MAPPED_HASHER = r"""
import mmap, os, sys
import blake3
fd, size, window = (int(arg) for arg in sys.argv[1:4])
hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
offset = 0
while offset < size:
    length = min(window, size - offset)
    if os.fstat(fd).st_size < offset + length:
        sys.exit(3)
    try:
        mapped = mmap.mmap(fd, length, offset=offset, access=mmap.ACCESS_READ)
    except ValueError:
        sys.exit(3)
    with mapped:
        hasher.update(mapped)
    offset += length
    sys.stdout.write(f"{offset}\n")
    sys.stdout.flush()
sys.stdout.write(hasher.hexdigest() + "\n")
"""


def _hash_mapped_in_child(fd: int, size: int, display: str, progress: ProgressFn | None, done_before: int,
                          total: int) -> str:
    import subprocess
    import sys
    import time

    # generous: even a slow network file system moves 20 MB/s
    deadline = time.monotonic() + 120 + size / 20e6
    proc = subprocess.Popen([sys.executable, "-c", _MAPPED_HASHER, str(fd), str(size), str(WINDOW)],
                            pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    last = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            last = line.strip()
            if progress is not None and last.isdigit():
                progress(done_before + int(last), total)
            if time.monotonic() > deadline:
                raise InputError(f"{display}: hashing took longer than {deadline:.0f}s; is the file system stalled?")
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise InputError(f"{display}: hashing did not finish in time; is the file system stalled?") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode == 0 and len(last) == 64:
        return last
    import signal

    if proc.returncode in (3, -signal.SIGBUS):
        raise _changed(display)
    error = (proc.stderr.read() if proc.stderr else "").strip().splitlines()
    raise InputError(f"{display}: could not be hashed ({error[-1] if error else f'exit {proc.returncode}'})")


class ChangedWhileHashed(InputError):
    """A file's size or modification time moved while it was hashed: hash it again once complete."""


def _changed(display: str) -> InputError:
    return ChangedWhileHashed(f"{display} changed while it was being hashed (is something still writing it?); "
                      "hash it again once it is complete")


def shown(path: str | bytes | os.PathLike) -> str:
    """A path as text for messages and JSON: bytes that are not UTF-8 become U+FFFD, as b3sum shows them."""
    return os.fsencode(path).decode("utf-8", "replace")


def _input_error(display: str, exc: OSError) -> InputError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ELOOP:
        reason = "symlink loop"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        reason = "permission denied (execsys must read every byte to identify the artifact)"
    return InputError(f"{display}: {reason}")


# -- walking a tree ----------------------------------------------------------------------


def walk_tree(root: bytes) -> list[tuple[bytes, bytes, int]]:
    """Regular files under ``root`` as (relpath, abspath, size), sorted bytewise by relpath.

    Symlinks are followed; a directory reached again from inside itself is a loop and an
    error. Things that are neither files nor directories (FIFOs, sockets, devices) are not
    artifact bytes and are left out -- opening a FIFO would block forever. The walk keeps its
    own stack (no recursion), so a tree 1,500 directories deep is walked like any other.
    """
    found: list[tuple[bytes, bytes, int]] = []
    root_st = os.stat(root)
    # each entry: (directory, its relpath prefix, the (dev, ino) of it and its ancestors)
    stack: list[tuple[bytes, bytes, frozenset[tuple[int, int]]]] = [
        (root, b"", frozenset({(root_st.st_dev, root_st.st_ino)}))]
    while stack:
        directory, prefix, ancestors = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError as exc:
            raise _input_error(shown(directory), exc) from exc
        for entry in entries:
            full = entry.path
            rel = prefix + entry.name
            try:
                st = os.stat(full)  # follows symlinks
            except OSError as exc:
                if exc.errno == errno.ENOENT and os.path.islink(full):
                    raise InputError(f"{shown(full)}: dangling symlink (points at "
                                     f"{shown(os.readlink(full))}, which does not exist)") from exc
                raise _input_error(shown(full), exc) from exc
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in ancestors:
                    raise InputError(f"{shown(full)}: symlink loop (leads back to a directory that contains it)")
                stack.append((full, rel + b"/", ancestors | {key}))
            elif stat.S_ISREG(st.st_mode):
                found.append((rel, full, st.st_size))
    found.sort(key=lambda item: item[0])
    return found


# -- the public entry points -----------------------------------------------------------------


def digest_path(path: str | os.PathLike, *, progress: ProgressFn | None = None) -> DigestResult:
    """Digest a file or a directory tree. Raises InputError (one line) for anything unusable."""
    display = shown(path)
    raw = os.fsencode(path)
    if not raw:
        raise InputError("the path is empty: give a file or directory to digest")
    try:
        st = os.stat(raw)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise InputError(f"{display}: no such file or directory") from exc
        raise _input_error(display, exc) from exc
    if stat.S_ISREG(st.st_mode):
        digest = hash_file(raw, progress=progress, total=st.st_size)
        return DigestResult(display, "file", digest, st.st_size, 1)
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{display}: neither a regular file nor a directory")
    files = walk_tree(raw)
    total = sum(size for _, _, size in files)
    entries: list[ManifestEntry] = []
    done = 0
    for rel, full, size in files:
        digest = hash_file(full, progress=progress, done_before=done, total=total)
        done += size
        if progress is not None:
            progress(done, total)
        entries.append(ManifestEntry(rel, digest, size))
    manifest = "".join(e.line + "\n" for e in entries).encode("utf-8")
    import blake3

    tree_digest = blake3.blake3(manifest).hexdigest()
    return DigestResult(display, "tree", tree_digest, total, len(entries), entries)


def artifact_size(path: str | os.PathLike) -> int:
    """Bytes that :func:`digest_path` would hash (for deciding whether to show progress)."""
    raw = os.fsencode(path)
    try:
        st = os.stat(raw)
        if stat.S_ISDIR(st.st_mode):
            return sum(size for _, _, size in walk_tree(raw))
        return st.st_size
    except (OSError, InputError):
        return 0


# -- on another host -------------------------------------------------------------------------------

_REMOTE_DRIVER = r'''
import shutil, subprocess, sys, os, json as _json

def _b3sum_many(paths):
    exe = shutil.which("b3sum")
    out = []
    for i in range(0, len(paths), 256):
        batch = paths[i:i + 256]
        res = subprocess.run([exe, "--no-names", "--"] + batch, capture_output=True, timeout=PAYLOAD["timeout"])
        if res.returncode != 0:
            raise InputError(res.stderr.decode("utf-8", "replace").strip().splitlines()[-1])
        out += res.stdout.decode().split()
    return out

def _python_blake3(paths):
    import blake3
    digests = []
    for p in paths:
        h = blake3.blake3(max_threads=blake3.blake3.AUTO)
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(16 << 20), b""):
                h.update(block)
        digests.append(h.hexdigest())
    return digests

def _main():
    path = os.fsencode(os.path.expanduser(PAYLOAD["path"]))
    have_blake3 = True
    try:
        import blake3  # noqa: F401
    except ImportError:
        have_blake3 = False
    if shutil.which("b3sum"):
        method, many = "b3sum", _b3sum_many
    elif have_blake3:
        method, many = "python-blake3", _python_blake3
    elif shutil.which("execsys"):
        res = subprocess.run(["execsys", "digest", "--json", path], capture_output=True, timeout=PAYLOAD["timeout"])
        if res.returncode != 0:
            return {"error": res.stderr.decode("utf-8", "replace").strip()}
        data = _json.loads(res.stdout)
        return {"method": "execsys", "digest": data["digest"], "kind": data["kind"],
                "size_bytes": data["size_bytes"], "files": data["files"]}
    else:
        return {"error": "no b3sum, no python blake3 module and no execsys there: the digest cannot be computed on this host"}
    try:
        st = os.stat(path)
    except OSError as exc:
        return {"error": f"{shown(path)}: {exc.strerror}"}
    if os.path.isdir(path):
        files = walk_tree(path)
        digests = many([f[1] for f in files]) if files else []
        manifest = "".join(manifest_line(d, f[0]) + "\n" for d, f in zip(digests, files)).encode()
        if method == "b3sum":
            res = subprocess.run([shutil.which("b3sum"), "--no-names", "-"], input=manifest,
                                 capture_output=True, timeout=PAYLOAD["timeout"])
            digest = res.stdout.decode().split()[0]
        else:
            import blake3
            digest = blake3.blake3(manifest).hexdigest()
        return {"method": method, "digest": digest, "kind": "tree",
                "size_bytes": sum(f[2] for f in files), "files": len(files)}
    return {"method": method, "digest": many([path])[0], "kind": "file", "size_bytes": st.st_size, "files": 1}

try:
    _result = _main()
except InputError as exc:
    _result = {"error": str(exc)}
except Exception as exc:
    _result = {"error": f"{type(exc).__name__}: {exc}"}
print("EXECSYS-DIGEST " + _json.dumps(_result))
'''


class RemoteDigest:
    """The digest of ``path`` as computed on host ``host`` (or why it could not be)."""

    def __init__(self, host: str, path: str, digest: str | None, method: str | None = None,
                 kind: str | None = None, size_bytes: int | None = None, files: int | None = None,
                 error: str | None = None) -> None:
        self.host = host
        self.path = path
        self.digest = digest
        self.method = method  # b3sum, python-blake3, execsys
        self.kind = kind
        self.size_bytes = size_bytes
        self.files = files
        self.error = error

    def __repr__(self) -> str:
        return f"RemoteDigest({self.to_json()!r})"

    @property
    def ok(self) -> bool:
        return self.digest is not None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "path": self.path, "digest": self.digest, "method": self.method,
                "kind": self.kind, "size_bytes": self.size_bytes, "files": self.files, "error": self.error}


def remote_digest(dest: str, path: str, timeout: float = 600.0) -> RemoteDigest:
    """Compute the artifact digest on ``dest`` over SSH, with whatever that host has.

    Preference: the remote ``b3sum`` binary, else the remote python ``blake3`` module, else a
    remote ``execsys``; the tree walk and manifest format are this module's own code, sent over,
    so a tree digest computed there is byte-for-byte the one computed here. Never raises for a
    host problem: the reason lands in ``error``.
    """
    from execsys import ssh

    try:
        destination = ssh.Destination.parse(dest)
    except ValueError as exc:
        return RemoteDigest(dest, path, None, error=str(exc))
    result = ssh.run_python(destination, remote_program(), {"path": path, "timeout": timeout}, timeout=timeout)
    marker = "EXECSYS-DIGEST "
    for line in result.text().splitlines():
        if line.startswith(marker):
            data = json.loads(line[len(marker):])
            if "error" in data:
                return RemoteDigest(dest, path, None, error=data["error"])
            return RemoteDigest(dest, path, data["digest"], data.get("method"), data.get("kind"),
                                data.get("size_bytes"), data.get("files"))
    if result.returncode == 127 or "python3" in result.text("stderr") and "not found" in result.text("stderr"):
        return _remote_b3sum_only(destination, dest, path, timeout)
    return RemoteDigest(dest, path, None, error=ssh.describe_failure(result))


def remote_program() -> str:
    """The Python program :func:`remote_digest` runs on the host (it reads ``PAYLOAD = {path, timeout}``)
    and which prints one ``EXECSYS-DIGEST {json}`` line."""
    import inspect
    import sys

    # exec(compile(...)) keeps this module's `from __future__` import first in its own unit,
    # after the PAYLOAD prelude that run_python puts in front.
    module_source = inspect.getsource(sys.modules[__name__])
    return _REMOTE_ERRORS + f"exec(compile({module_source!r}, 'execsys/digest.py', 'exec'))\n" + _REMOTE_DRIVER


# The host may have no execsys: this module's one import of its own package gets a stand-in there.
_REMOTE_ERRORS = """
import sys as _sys, types as _types
class InputError(Exception):
    pass
_errors = _types.ModuleType("execsys.errors")
_errors.InputError = InputError
_sys.modules.setdefault("execsys", _types.ModuleType("execsys"))
_sys.modules["execsys.errors"] = _errors
"""


def _remote_b3sum_only(destination, dest: str, path: str, timeout: float) -> RemoteDigest:
    """No python3 there: a single file can still be hashed by a remote ``b3sum``."""
    from execsys import ssh

    result = ssh.run_remote(destination, ["b3sum", "--no-names", "--", path], timeout=timeout)
    if result.ok and len(result.text().split()) == 1:
        return RemoteDigest(dest, path, result.text().split()[0], "b3sum", "file")
    return RemoteDigest(dest, path, None, error="no python3 and no b3sum able to hash it there "
                        f"({ssh.describe_failure(result)})")


def have_b3sum() -> bool:
    return shutil.which("b3sum") is not None
