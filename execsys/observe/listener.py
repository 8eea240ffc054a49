"""Which process on this machine listens on an endpoint's port: one socket-table scan per pass.

``psutil.net_connections`` reads every process's descriptors (``/proc/*/fd``) to map sockets to
pids. The serving process, its stack, the served-model check and the run watch all need the same
answer; inside an observation pass (:mod:`execsys.observe.passmemo`) it is scanned once and shared,
so a watch tick costs one scan, not three. An endpoint on another host has no local listener: a
process here that happens to hold the same port number is not the one serving it.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any
from urllib.parse import urlsplit

from execsys.observe.passmemo import remembered


def is_local_host(host: str | None) -> bool:
    """Whether ``host`` names this machine (loopback, a wildcard, its hostname or one of its addresses)."""
    if not host:
        return False
    if host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", "::") or host.startswith("127."):
        return True
    with contextlib.suppress(OSError):
        return host in (socket.gethostname(), socket.getfqdn()) or host in socket.gethostbyname_ex(
            socket.gethostname())[2]
    return False


def local_port(endpoint: str | None) -> int | None:
    """The endpoint's port when it is served from this machine, else None."""
    if not endpoint:
        return None
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if not is_local_host(parts.hostname):
        return None
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port that is not a number
        return None


def _scan(port: int) -> int | None:
    import psutil

    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return conn.pid
    return None


def listening_pid(endpoint: str | None) -> int | None:
    """The pid listening on a local endpoint's port, where this user may see it (once per pass)."""
    port = local_port(endpoint)
    return None if port is None else remembered(("listening-pid", port), lambda: _scan(port))


def listener(endpoint: str | None) -> dict[str, Any]:
    """``{"pid", "started_at"}`` of that process (``{}`` when none is visible): a restart on the same
    port is a new start time."""
    import psutil

    pid = listening_pid(endpoint)
    if pid is None:
        return {}
    with contextlib.suppress(psutil.Error, OSError):
        return {"pid": pid, "started_at": round(psutil.Process(pid).create_time(), 2)}
    return {}
