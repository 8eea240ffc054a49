"""Reach a remote host through the system OpenSSH client, never interactively.

Batch mode means the user's ``~/.ssh/config``, agent, keys and jump hosts all
work, and nothing ever stops to ask for a password. Code for the remote side is
sent on stdin to ``python3 -`` -- never as inline shell arguments, which the
remote shell would re-split and re-expand (the interop-mangling hazard).
``EXECSYS_SSH_CONFIG`` names an ssh_config file to use instead of the default
(passed as ``-F``); the test suite uses it for its loopback sshd.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from execsys.proc import ProcResult, run

CONFIG_ENV = "EXECSYS_SSH_CONFIG"
DEFAULT_CONNECT_TIMEOUT = 5


@dataclass(frozen=True)
class Destination:
    """What the user typed (alias, user@host, ssh://user@host:port) split for the ssh client."""

    raw: str
    target: str  # user@host or alias, as ssh takes it
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Destination:
        text = text.strip()
        if not text or text.startswith("-") or any(c.isspace() for c in text):
            raise ValueError(f"not an ssh destination: {text!r}")
        if text.startswith("ssh://"):
            parts = urlsplit(text)
            if not parts.hostname:
                raise ValueError(f"not an ssh destination: {text!r}")
            user = f"{parts.username}@" if parts.username else ""
            target = f"{user}{parts.hostname}"
            if target.startswith("-"):  # ssh://-oProxyCommand=...@h would reach ssh as an option
                raise ValueError(f"not an ssh destination: {text!r} (a user or host cannot start with '-')")
            return cls(text, target, parts.port)
        return cls(text, text, None)


def base_argv(dest: Destination, *, connect_timeout: int = DEFAULT_CONNECT_TIMEOUT) -> list[str]:
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2", "-T"]
    config = os.environ.get(CONFIG_ENV)
    if config:
        argv += ["-F", config]
    if dest.port:
        argv += ["-p", str(dest.port)]
    return argv + [dest.target]


def run_remote(dest: Destination | str, remote_argv: list[str], *, timeout: float = 30.0,
               input: bytes | None = None) -> ProcResult:
    """Run one command remotely. ``remote_argv`` is quoted for the remote POSIX shell exactly once."""
    if isinstance(dest, str):
        dest = Destination.parse(dest)
    command = " ".join(shlex.quote(a) for a in remote_argv)
    return run([*base_argv(dest), command], timeout=timeout, input=input)


def run_python(dest: Destination | str, source: str, payload: Any = None, *, timeout: float = 30.0,
               python: str = "python3") -> ProcResult:
    """Run Python ``source`` on the remote host via stdin; ``payload`` (JSON) is readable there as ``PAYLOAD``.

    The program is sent as ``PAYLOAD = json.loads(<literal>)`` followed by ``source``, so no argument
    crosses the remote shell except the interpreter name.
    """
    prelude = f"import json as _j\nPAYLOAD = _j.loads({json.dumps(json.dumps(payload))})\n"
    return run_remote(dest, [python, "-"], timeout=timeout, input=(prelude + source).encode())


def describe_failure(result: ProcResult) -> str:
    """A one-line reason a remote call failed: unreachable, key refused, no python3, timeout."""
    if result.error:
        return f"ssh could not start ({result.error})"
    if result.timed_out:
        return f"no answer within {result.duration_s:.0f}s"
    err = result.text("stderr").strip().splitlines()
    last = err[-1] if err else ""
    if result.returncode == 255:
        return f"ssh failed: {last or 'connection error'}"
    if result.returncode == 127 or "python3: not found" in last or "command not found" in last:
        return f"remote has no usable python3 ({last or 'exit 127'})"
    return f"remote command exited {result.returncode}: {last}"
