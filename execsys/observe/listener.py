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


# -- the serving engines listening here (init's pre-fill) ----------------------------------------

# (engine, the argv word that names it, the [runtime] process hint that finds it again)
_ENGINE_SHAPES = (
    ("vllm", "vllm.entrypoints", "vllm.entrypoints"),
    ("sglang", "sglang.launch_server", "sglang.launch_server"),
    ("llama-cpp-python", "llama_cpp.server", "llama_cpp.server"),
)


def engine_of_argv(argv: list[str]) -> tuple[str, str] | None:
    """(engine, the ``[runtime] process`` hint) a serving process's argv shows, or None.

    ``python -m vllm.entrypoints.openai.api_server`` and ``vllm serve`` are vLLM; ``python -m
    sglang.launch_server`` and ``sglang serve`` SGLang; ``python -m llama_cpp.server`` llama-cpp-python;
    ``llama-server`` llama.cpp; ``ollama serve`` Ollama (its ``ollama runner`` children listen too, on
    ports of their own, and are not what clients talk to)."""
    import os

    if not argv:
        return None
    words = [os.path.basename(a) for a in argv[:3]]
    for engine, token, hint in _ENGINE_SHAPES:
        if any(a == token or a.startswith(token + ".") for a in argv[:4]):
            return engine, hint
    for index, word in enumerate(words[:2]):
        following = argv[index + 1] if index + 1 < len(argv) else ""
        if word in ("vllm", "sglang") and following == "serve":
            return word, f"{word} serve"
        if word == "llama-server":
            return "llama.cpp", "llama-server"
        if word == "ollama" and following == "serve":
            return "ollama", "ollama serve"
    return None


def engine_listeners() -> list[dict[str, Any]]:
    """The serving engines listening on this machine, as the doctor finds them (its engine processes and
    its socket table): ``{"engine", "process", "pid", "port", "address", "endpoint", "argv"}``, oldest
    process first. Loopback and wildcard addresses only are reachable as ``127.0.0.1``; a listener bound
    to one other address is reached by that address."""
    from execsys.doctor import sysinfo
    from execsys.redact import redact_argv

    processes = [p for p in sysinfo.engine_processes() if engine_of_argv(p.cmdline)]
    if not processes:
        return []
    table, _hidden = sysinfo.listeners()
    found: list[dict[str, Any]] = []
    ports: set[int] = set()
    for proc in sorted(processes, key=lambda p: p.create_time or 0):
        engine, hint = engine_of_argv(proc.cmdline) or ("", "")
        # a forked worker holds its parent's listening socket: the port is the oldest process's
        mine = sorted((lst for lst in table if proc.pid in lst.pids and lst.port not in ports),
                      key=lambda lst: (lst.port, lst.family))
        for lst in mine[:1]:
            ports.add(lst.port)
            wildcard = lst.address in ("0.0.0.0", "::", "::ffff:0.0.0.0")
            host = "127.0.0.1" if wildcard or lst.address.startswith("127.") or lst.address in ("::1",) else (
                f"[{lst.address}]" if ":" in lst.address else lst.address)
            root = f"http://{host}:{lst.port}"
            found.append({"engine": engine, "process": hint, "pid": proc.pid, "port": lst.port,
                          "address": lst.address, "root": root,
                          "endpoint": f"{root}/v1",
                          "argv": redact_argv(proc.cmdline)})
    return found
