"""Run a subprocess that can never hang the caller.

Every external program execsys touches (``--version`` probes, git, ssh, a
restart command) goes through :func:`run`: a hard timeout, stdin closed unless
input is given, output capped, and the whole process group killed on timeout so
that grandchildren holding the pipes cannot keep us waiting. Output is read as it comes and
only its first part kept, so a flood costs no memory. The doctor's ``files.bounded_run`` is this
runner with stderr merged and a flood limit.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_TIMEOUT = 5.0
DEFAULT_MAX_OUTPUT = 1 << 20  # 1 MiB per stream is plenty for anything we parse
MAX_WAIT_S = 2_000_000.0
"""The longest wait :func:`run` asks for (23 days): epoll takes at most 2**31-1 ms, so a longer
``timeout`` (a user's ``--timeout 1e12``) would be an OverflowError, not a wait."""


@dataclass
class ProcResult:
    argv: list[str]
    returncode: int | None  # None when it timed out or could not start
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    error: str | None = None  # why it could not start (ENOENT, EACCES, exec format error, ...)
    duration_s: float = 0.0
    truncated: bool = False  # more was printed than kept
    flooded: bool = False  # more was printed than read_limit allows: killed
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    def text(self, stream: str = "stdout") -> str:
        data = self.stdout if stream == "stdout" else self.stderr
        return data.decode("utf-8", "replace")

    def describe(self) -> str:
        """One line saying what happened, for evidence lists."""
        cmd = " ".join(self.argv)
        if self.error:
            return f"{cmd}: could not run ({self.error})"
        if self.timed_out:
            return f"{cmd}: no answer within {self.duration_s:.1f}s (killed)"
        out = (self.text().strip() or self.text("stderr").strip()).splitlines()
        first = out[0][:200] if out else ""
        return f"{cmd}: exit {self.returncode}" + (f": {first}" if first else "")


def run(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    max_output: int = DEFAULT_MAX_OUTPUT,
    merge_stderr: bool = False,
    read_limit: int | None = None,
    linger_s: float | None = None,
) -> ProcResult:
    """Run ``argv`` with a timeout; never raises for a failing or missing program.

    Output is streamed: at most ``max_output`` bytes of each stream are kept and the rest is read
    and dropped, so a program that prints gigabytes costs the caller no more memory than one that
    prints a page. ``merge_stderr`` reads both streams as one (``stdout``). ``read_limit`` caps what
    is read at all: past it the whole group is killed and the result is ``flooded``. A program that
    exits while a grandchild still holds its pipe is waited for up to the timeout (``linger_s``
    None) or for ``linger_s`` seconds, after which the group is killed and what was printed is kept.
    """
    argv = [str(a) for a in argv]
    # a timeout the clock cannot hold (1e12 s overflows select(); nan and inf are no wait at all)
    # is "as long as it takes", up to the longest wait the platform can express
    timeout = timeout if math.isfinite(timeout) and timeout < MAX_WAIT_S else MAX_WAIT_S
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return ProcResult(argv, None, error=exc.strerror or str(exc), duration_s=time.monotonic() - start)
    flooded = threading.Event()
    read_total = [0]
    total_lock = threading.Lock()

    def _drain(stream, kept: bytearray) -> None:
        read1 = getattr(stream, "read1", None) or stream.read
        while True:
            try:
                chunk = read1(65536)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            if len(kept) < max_output:
                kept.extend(chunk[: max_output - len(kept)])
            with total_lock:
                read_total[0] += len(chunk)
                over = read_limit is not None and read_total[0] > read_limit
            if over:
                flooded.set()
                _kill_group(proc)
                return

    out, err = bytearray(), bytearray()
    readers = [threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True)]
    if proc.stderr is not None:
        readers.append(threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True))
    for reader in readers:
        reader.start()
    if input is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, input), daemon=True).start()
    deadline = start + timeout
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    if not timed_out:
        # exited: its pipes close unless a grandchild holds them (communicate()'s wait, bounded)
        until = deadline if linger_s is None else min(deadline, time.monotonic() + linger_s)
        for reader in readers:
            reader.join(timeout=max(0.0, until - time.monotonic()))
        # still open at the deadline is a run that did not finish; after a linger, only a held pipe
        timed_out = linger_s is None and any(reader.is_alive() for reader in readers)
    if timed_out or any(reader.is_alive() for reader in readers):
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        # killing the group closes the pipes; what is in them stays readable
        for reader in readers:
            reader.join(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    duration = time.monotonic() - start
    total = len(out) + len(err)
    return ProcResult(
        argv,
        None if (timed_out or flooded.is_set()) else proc.returncode,
        bytes(out),
        bytes(err),
        timed_out=timed_out,
        flooded=flooded.is_set(),
        duration_s=duration,
        truncated=read_total[0] > total,
    )


def _feed(stdin, data: bytes) -> None:
    """Write ``data`` to the child's stdin and close it; a child that exits early is not an error."""
    try:
        stdin.write(data)
        stdin.close()
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
