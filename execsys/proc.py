"""Run a subprocess that can never hang the caller.

Every external program execsys touches (``--version`` probes, git, ssh, a
restart command) goes through :func:`run`: a hard timeout, stdin closed unless
input is given, output capped, and the whole process group killed on timeout so
that grandchildren holding the pipes cannot keep us waiting.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
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
    truncated: bool = False
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
) -> ProcResult:
    """Run ``argv`` with a timeout; never raises for a failing or missing program."""
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
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return ProcResult(argv, None, error=exc.strerror or str(exc), duration_s=time.monotonic() - start)
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=2)
        except (subprocess.TimeoutExpired, ValueError):
            out, err = b"", b""
        timed_out = True
    duration = time.monotonic() - start
    truncated = len(out) > max_output or len(err) > max_output
    return ProcResult(
        argv,
        None if timed_out else proc.returncode,
        out[:max_output],
        err[:max_output],
        timed_out=timed_out,
        duration_s=duration,
        truncated=truncated,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
