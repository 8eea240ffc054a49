"""Observe the runtime component: which engine, which version, with which numerics settings.

Three witnesses, because each can lie alone: the installed package or binary
(what ``pip``/``PATH`` would run), the endpoint itself (``/v1/models``,
``/version``, ``/openapi.json``, a one-token request's ``system_fingerprint``:
what is actually serving), and the serving process found listening on the
endpoint's port (its flags and numerics environment variables: how it was
started). Every value passes through redaction: engines are often launched with
``--api-key`` on the command line.

Every request to the endpoint has an overall deadline and a size cap, not only
per-read timeouts: an endpoint that trickles its body a byte a second, or sends
a gigabyte, must not hang or swell ``pin``, ``verify`` or the restart axis.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from typing import Any
from urllib.parse import urlsplit

from execsys.errors import InputError
from execsys.observe.http import OBSERVE_BODY_LIMIT, Unanswered, fetch_bounded
from execsys.observe.vocabulary import (
    ENGINES,
    REMOTE_PROCESS_NOTE,
    api_and_root,
    canonical_engine,
    numerics_env,
)
from execsys.redact import redact_argv, redact_url, register_secret


def engine_version(engine: str | None, process_hint: str | None = None) -> dict[str, Any]:
    """Engine name and version from installed package metadata, else from ``<binary> --version``."""
    from execsys.proc import run

    name = canonical_engine(engine)
    spec = ENGINES.get(name or "", {"modules": [], "packages": [name] if name else [],
                                    "binaries": [name] if name else []})
    for module in spec["modules"]:
        found = _module_distribution(module)
        if found is not None:
            return {"name": name, "version": found[1], "source": f"package metadata ({found[0]})"}
    for package in spec["packages"]:
        from importlib import metadata

        with contextlib.suppress(metadata.PackageNotFoundError):
            return {"name": name, "version": metadata.version(package), "source": f"package metadata ({package})"}
    binaries = ([process_hint] if process_hint else []) + spec["binaries"]
    for binary in binaries:
        path = shutil.which(binary) if binary else None
        if not path:
            continue
        result = run([path, "--version"], timeout=10)
        text = (result.text() + "\n" + result.text("stderr")).strip()
        if result.ok or text:
            version = _version_in(text)
            return {"name": name or os.path.basename(path), "version": version,
                    "source": f"{os.path.basename(path)} --version", "binary": path}
    if name is None:
        return {"name": None, "version": None, "source": None}
    return {"name": name, "version": None, "source": "not found installed here (no package metadata, no binary on PATH)"}


def _module_distribution(module: str) -> tuple[str, str] | None:
    """(name, version) of the first distribution on this interpreter's ``sys.path`` that provides top-level
    ``module``, read from the ``*.dist-info`` files (execsys.observe.harness.module_distributions): what
    ``importlib.metadata.packages_distributions()`` says, without building a path object for every file of
    every installed distribution (0.2 s of CPU, a third of a pin's, on a test venv of 125 distributions).
    That walk is kept for a module that is importable here and that no ``.dist-info`` claims (an
    ``.egg-info`` install)."""
    import importlib.util
    import sys

    from execsys.observe.harness import module_distributions

    found = module_distributions([entry or "." for entry in sys.path], module)
    if found:
        return found[0]
    try:
        importable = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        importable = False
    if not importable:
        return None
    from importlib import metadata  # here: email, csv and zipfile with it

    for dist_name in metadata.packages_distributions().get(module, []):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return dist_name, metadata.version(dist_name)
    return None


def _version_in(text: str) -> str | None:
    for pattern in (r"version:?\s*(\S+(?: \([0-9a-f]{6,}\))?)", r"\bv?(\d+\.\d+(?:\.\d+)?[\w.+-]*)", r"\b(b\d{3,})\b"):
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return match.group(1)
    first = text.splitlines()[0].strip() if text else ""
    return first[:120] or None


# -- the endpoint -------------------------------------------------------------------------------


def observe_endpoint(endpoint: str, *, api_key: str | None = None, timeout: float = 5.0,
                     fingerprint_timeout: float = 30.0, ask_fingerprint: bool = True) -> dict[str, Any]:
    """What the endpoint says about itself. Raises InputError when it does not answer.

    ``ask_fingerprint=False`` sends no completion (the fingerprint is then None): for an observer whose
    own requests' responses carry the fingerprint, such as a probe pass."""
    import httpx

    from execsys.observe.http import observation_client

    api, root = api_and_root(endpoint)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    observed: dict[str, Any] = {"url": redact_url(endpoint)}
    try:
        with observation_client(api, timeout=timeout, headers=headers) as client:
            try:
                response = fetch_bounded(client, "GET", f"{api}/models", budget=timeout)
            except httpx.TimeoutException as exc:
                raise InputError(f"endpoint {redact_url(endpoint)}: no answer within {timeout:.0f}s "
                                 "(is the server up? check [runtime] endpoint)") from exc
            except Unanswered as exc:
                raise InputError(f"endpoint {redact_url(endpoint)}: /v1/models {exc} "
                                 "(is it the serving engine? check [runtime] endpoint)") from exc
            except httpx.HTTPError as exc:
                raise InputError(f"endpoint {redact_url(endpoint)}: unreachable ({type(exc).__name__}: "
                                 f"{_short(exc)}); start the server or fix [runtime] endpoint") from exc
            observed["models_status"] = response.status
            models: list[str] = []
            if response.status == 200:
                with contextlib.suppress(ValueError, AttributeError, TypeError, RecursionError):
                    models = sorted(str(m.get("id")) for m in response.json().get("data", []) if isinstance(m, dict))
            observed["models"] = models
            observed["server_version"] = _json_field(client, f"{root}/version", ("version",), timeout)
            openapi = _json_any(client, f"{root}/openapi.json", timeout)
            info = openapi.get("info", {}) if isinstance(openapi, dict) else {}
            observed["openapi"] = ({"title": info.get("title"), "version": info.get("version")}
                                   if isinstance(info, dict) and info else None)
            props = _json_any(client, f"{root}/props", timeout)
            build = props.get("build_info") if isinstance(props, dict) else None
            observed["build_info"] = build if isinstance(build, str) else None
            observed["system_fingerprint"] = (_fingerprint(client, api, models, fingerprint_timeout)
                                              if ask_fingerprint else None)
    except InputError:
        raise
    return observed


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:160] or "connection failed"


def _json_any(client: Any, url: str, budget: float) -> Any:
    try:
        response = fetch_bounded(client, "GET", url, budget=budget)
        if response.status != 200 or "json" not in response.content_type:
            return None
        return response.json()
    except Exception:  # noqa: BLE001 - optional facts: absence (or a stalled answer) is recorded as None
        return None


def _json_field(client: Any, url: str, path: tuple[str, ...], budget: float) -> Any:
    data = _json_any(client, url, budget)
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data if isinstance(data, (str, int, float)) else None


def _fingerprint(client: Any, api: str, models: list[str], timeout: float) -> str | None:
    """``system_fingerprint`` from a one-token request, where the engine gives one."""
    if not models:
        return None
    body = {"model": models[0], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "temperature": 0}
    try:
        import httpx

        deadline = time.monotonic() + timeout
        with client.stream("POST", f"{api}/chat/completions", json=body, timeout=httpx.Timeout(timeout)) as response:
            if response.status_code != 200:
                return None
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > OBSERVE_BODY_LIMIT or time.monotonic() > deadline:
                    return None
        value = json.loads(b"".join(chunks)).get("system_fingerprint")
        return str(value) if value else None
    except Exception:  # noqa: BLE001
        return None


# -- the serving process ----------------------------------------------------------------------------


def find_serving_process(endpoint: str | None, name_hint: str | None = None) -> Any:
    """The local ``psutil.Process`` listening on the endpoint's port (or named ``name_hint``), None when
    there is none here, or :data:`REMOTE_PROCESS_NOTE` for an endpoint on another host."""
    import psutil

    from execsys.observe.listener import is_local_host, listening_pid

    proc = None
    if endpoint:
        if not is_local_host(urlsplit(endpoint).hostname):
            return REMOTE_PROCESS_NOTE
        pid = listening_pid(endpoint)
        with contextlib.suppress(psutil.Error, OSError):
            proc = psutil.Process(pid) if pid is not None else None
    if proc is None and name_hint:
        for candidate in psutil.process_iter(["name", "cmdline"]):
            cmdline = " ".join(candidate.info.get("cmdline") or [])
            if candidate.info.get("name") == name_hint or (name_hint in cmdline and candidate.pid != os.getpid()):
                proc = candidate
                break
    return proc


def serving_process(endpoint: str | None, name_hint: str | None = None) -> dict[str, Any] | None:
    """The process listening on the endpoint's port (or named ``name_hint``): name, exe, flags, numerics env."""
    import psutil

    from execsys.observe.harness import process_interpreter

    proc = find_serving_process(endpoint, name_hint)
    if proc == REMOTE_PROCESS_NOTE:
        return {"note": REMOTE_PROCESS_NOTE}
    if proc is None:
        return None
    info: dict[str, Any] = {}
    with contextlib.suppress(psutil.Error):
        info["name"] = proc.name()
    with contextlib.suppress(psutil.Error):
        info["exe"] = proc.exe()
    argv: list[str] = []
    with contextlib.suppress(psutil.Error):
        argv = proc.cmdline()
        info["argv"] = redact_argv(argv)
    # the interpreter it runs in, by the path that started it (a venv's python, not the base behind it)
    interpreter = process_interpreter(proc.pid, argv, info.get("exe"))
    if interpreter:
        info["interpreter"] = interpreter
    try:
        info["numerics_env"] = numerics_env(proc.environ())
    except psutil.Error:
        info["numerics_env"] = None
        info["note"] = "its environment is not readable from this user"
    return info


def read_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines of the declared env file (a regular file of at most a few MiB: a FIFO or
    /dev/zero there is an error, never a hang)."""
    from execsys.fsutil import ENV_FILE_LIMIT, read_bounded

    values: dict[str, str] = {}
    try:
        text = read_bounded(os.path.expanduser(path), ENV_FILE_LIMIT, "[runtime] env_file").decode("utf-8", "replace")
    except FileNotFoundError as exc:
        raise InputError(f"[runtime] env_file {path}: {exc.strerror}") from exc
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        values[key.strip()] = value.strip().strip("'\"")
    return values


def observe_runtime(declared_runtime: dict[str, Any], *, require_endpoint: bool = True,
                    ask_fingerprint: bool = True) -> dict[str, Any]:
    """Observe the runtime as declared (engine, endpoint, process, env).

    An endpoint that is declared but does not answer raises InputError when
    ``require_endpoint`` (pin); otherwise it is recorded as ``endpoint: {"error": ...}``.
    ``ask_fingerprint=False``: no completion is sent (see :func:`observe_endpoint`).
    """
    declared = declared_runtime or {}
    observed: dict[str, Any] = {"engine": engine_version(declared.get("engine"), declared.get("process"))}
    endpoint = declared.get("endpoint")
    if endpoint:
        api_key = None
        if declared.get("api_key_env"):
            api_key = os.environ.get(declared["api_key_env"])
            register_secret(api_key)
        timeout = float(declared.get("ready_timeout") or 5.0)
        try:
            observed["endpoint"] = observe_endpoint(endpoint, api_key=api_key, timeout=min(timeout, 10.0),
                                                    ask_fingerprint=ask_fingerprint)
        except InputError as exc:
            if require_endpoint:
                raise
            observed["endpoint"] = {"url": redact_url(endpoint), "error": str(exc)}
    observed["numerics_env"] = numerics_env(os.environ)
    if declared.get("env_file"):
        observed["env_file_numerics"] = numerics_env(read_env_file(declared["env_file"]))
    process = serving_process(endpoint, declared.get("process"))
    if process is not None:
        observed["process"] = process
    if endpoint and not observed["endpoint"].get("error"):
        _observe_engine_native(observed, declared, endpoint, process)
    if process is not None and (process.get("exe") or process.get("argv")):  # a local process, not a note
        from execsys.observe.listener import listening_pid
        from execsys.observe.stack import observe_stack

        observed["stack"] = observe_stack(process, listening_pid(endpoint) if endpoint else None)
    if declared.get("log"):
        from execsys.observe.kernels import observe_kernels

        try:
            observed["kernels"] = observe_kernels(declared["log"], declared.get("engine"),
                                                  observed["engine"].get("version"))
        except InputError as exc:
            if require_endpoint:
                raise
            observed["kernels"] = {"log": declared["log"], "error": str(exc)}
    return observed


def _observe_engine_native(observed: dict[str, Any], declared: dict[str, Any], endpoint: str,
                           process: dict[str, Any] | None) -> None:
    """The declared engine's own account of itself (:mod:`execsys.observe.engines`): ``engine_native`` goes
    into the id, ``engine_live`` (uptime, queue depth, free KV blocks) is for the caller to keep outside it."""
    from execsys.observe import engines

    api_key = os.environ.get(declared["api_key_env"]) if declared.get("api_key_env") else None
    timeout = min(float(declared.get("ready_timeout") or 5.0), 10.0)
    fingerprint = (observed.get("endpoint") or {}).get("system_fingerprint")
    native = engines.introspect(declared.get("engine"), api_and_root(endpoint)[1], process=process,
                                api_key=api_key, timeout=timeout,
                                system_fingerprint=fingerprint if isinstance(fingerprint, str) else None)
    if native is not None:
        observed["engine_native"] = native.to_identity_json()
        observed["engine_live"] = native.to_volatile_json()
