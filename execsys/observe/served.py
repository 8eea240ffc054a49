"""The served artifact check: are the weights the engine says it loaded the weights that were pinned?

A launch command says what it intended to load; a server restarted by hand, a systemd unit with
an old ``ExecStart``, a container with a stale volume all serve something else while ``[artifact]``
still hashes the file on disk. So the model path is taken from the engine itself (its native
introspection, :mod:`execsys.observe.engines`; the serving process's argv as the fallback),
digested, and compared with the pinned artifact's digest: ``served: the pinned artifact`` or
``served: another artifact (path, digest)`` -- the second is an integrity defect.

Digests are cached per (path, size, mtime) within one command only (a :class:`DigestCache` lives
as long as one pin or verify), so a served path that is the declared artifact is hashed once;
``verify`` builds a new cache, so it always re-hashes.

Model-name honesty: an engine that answers a model name it does not list evaluates whatever is
resident under any name a harness misspells (sglang#10065); :func:`model_name_honesty` asks it.
:func:`answered_as` is the same one-token question for ``execsys run``'s watch: the model the answer
names is watched like the model list, so an alias re-pointed mid-run is a drift event.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execsys.errors import InputError

PINNED = "the pinned artifact"
ANOTHER = "another artifact"
UNVERIFIABLE = "unverifiable"

# the generic model flags, for engines without a native module (tgi, lmdeploy, ...)
_MODEL_FLAGS = ("--model", "-m", "--model-path", "--model_path", "--model-id", "--model-dir")

UNLISTED_MODEL_NAME = "execsys-unlisted-model-name-check"
ANSWERS_ANY_NAME = ("any model name is answered by the resident model: a typo in a harness's model name "
                    "silently evaluates another model")


@dataclass
class DigestCache:
    """Digests by (real path, size, mtime_ns), for one command."""

    digests: dict[tuple[str, int, int], str] = field(default_factory=dict)

    @staticmethod
    def key(path: Path) -> tuple[str, int, int]:
        st = path.stat()
        return (os.path.realpath(path), st.st_size, st.st_mtime_ns)

    def remember(self, path: Path, digest: str) -> None:
        with contextlib.suppress(OSError):
            self.digests[self.key(path)] = digest

    def digest(self, path: Path) -> str:
        from execsys.digest import digest_path

        key = self.key(path)
        if key not in self.digests:
            self.digests[key] = digest_path(path).digest
        return self.digests[key]


def served_model_path(runtime_observed: dict[str, Any]) -> tuple[str, str] | None:
    """(path as the engine names it, which source said so): engine-native first, the process argv second."""
    native = runtime_observed.get("engine_native") or {}
    if isinstance(native.get("model_path"), str) and native["model_path"]:
        return native["model_path"], str(native.get("model_path_source") or "the engine")
    argv = (runtime_observed.get("process") or {}).get("argv") or []
    for index, arg in enumerate(argv):
        key, eq, value = str(arg).partition("=")
        if eq and key in _MODEL_FLAGS and value:
            return value, f"process argv {key}"
        if arg in _MODEL_FLAGS and index + 1 < len(argv):
            return str(argv[index + 1]), f"process argv {arg}"
    return None


def _process_cwd(endpoint: str | None) -> str | None:
    """The working directory of the process listening on the endpoint's port: relative model paths an
    engine reports are relative to it, not to the declaration."""
    import psutil

    from execsys.observe.listener import listening_pid

    pid = listening_pid(endpoint)
    if pid is None:
        return None
    with contextlib.suppress(psutil.Error, OSError):
        return psutil.Process(pid).cwd()
    return None


def check_served(runtime_observed: dict[str, Any], artifact_observed: dict[str, Any], *,
                 endpoint: str | None, cache: DigestCache) -> dict[str, Any] | None:
    """``{"path", "source", "digest", "verdict", "sentence"}`` for the model the engine serves, or None when
    no artifact is pinned or the engine names no model."""
    pinned_digest = artifact_observed.get("digest")
    pinned_path = artifact_observed.get("path")
    found = served_model_path(runtime_observed)
    if not pinned_path or found is None:
        return None
    named, source = found
    path = Path(os.path.expanduser(named))
    if not path.is_absolute():
        cwd = _process_cwd(endpoint)
        if cwd is None:
            return {"path": named, "source": source, "digest": None, "verdict": UNVERIFIABLE,
                    "sentence": f"served: {UNVERIFIABLE} ({source} names the relative path {named!r} and the "
                                "serving process's working directory is not visible from here)"}
        path = Path(cwd) / path
    path = Path(os.path.abspath(path))
    if not path.exists():
        return {"path": str(path), "source": source, "digest": None, "verdict": UNVERIFIABLE,
                "sentence": f"served: {UNVERIFIABLE} ({source} names {named!r}, which is not a path on this machine)"}
    if pinned_digest and os.path.exists(pinned_path):
        cache.remember(Path(pinned_path), pinned_digest)  # hashed moments ago by this same command
    try:
        digest = cache.digest(path)
    except (InputError, OSError) as exc:
        return {"path": str(path), "source": source, "digest": None, "verdict": UNVERIFIABLE,
                "sentence": f"served: {UNVERIFIABLE} (cannot hash {path}: {exc})"}
    if pinned_digest and digest == pinned_digest:
        return {"path": str(path), "source": source, "digest": digest, "verdict": PINNED,
                "sentence": f"served: {PINNED}"}
    return {"path": str(path), "source": source, "digest": digest, "verdict": ANOTHER,
            "sentence": f"served: {ANOTHER} ({path}, {digest}) according to {source}; "
                        f"the pinned artifact is {pinned_path}"}


def ask_model(endpoint: str, name: str, *, api_key: str | None = None, timeout: float = 30.0) -> dict[str, Any] | None:
    """One cheap chat request (max_tokens 1) naming the model ``name``: ``{"asked", "status", "answered"}``
    plus, when answered, ``answered_as`` (the ``model`` the response claims) and ``text``; None when the
    endpoint could not be asked (not reachable, no answer within ``timeout``)."""
    import httpx

    from execsys.observe.http import Unanswered, fetch_bounded, observation_client
    from execsys.observe.vocabulary import api_and_root

    api, _root = api_and_root(endpoint)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0}
    try:
        with observation_client(api, timeout=timeout, headers=headers) as client:
            answer = fetch_bounded(client, "POST", f"{api}/chat/completions", budget=timeout, json_body=body)
    except (httpx.HTTPError, Unanswered):
        return None
    result: dict[str, Any] = {"asked": name, "status": answer.status, "answered": answer.status == 200}
    if answer.status == 200:
        with contextlib.suppress(ValueError, AttributeError, TypeError, IndexError, KeyError):
            data = answer.json()
            result["answered_as"] = data.get("model")
            result["text"] = str(data["choices"][0]["message"].get("content") or "")[:80]
    return result


def model_name_honesty(endpoint: str, listed: list[str], *, api_key: str | None = None,
                       timeout: float = 30.0) -> dict[str, Any] | None:
    """Ask for a model name the endpoint does not list, one token. ``answered`` True means it served the
    request anyway (``answered_as``: the ``model`` its answer claims, ``text``: what it said); None when the
    endpoint could not be asked (no models listed, not reachable)."""
    if not listed:
        return None
    name = UNLISTED_MODEL_NAME
    while name in listed:
        name += "-x"
    return ask_model(endpoint, name, api_key=api_key, timeout=timeout)


def answered_as(endpoint: str, requested: str, *, api_key: str | None = None, timeout: float = 30.0) -> str | None:
    """For ``execsys run``'s watch: the ``model`` a one-token answer to a request for ``requested`` names;
    None when it names none or the endpoint could not be asked (a tick that cannot look is not a change)."""
    answer = ask_model(endpoint, requested, api_key=api_key, timeout=timeout)
    named = (answer or {}).get("answered_as")
    return named if answer and answer.get("answered") and isinstance(named, str) else None


def honesty_evidence(result: dict[str, Any]) -> str:
    claimed = result.get("answered_as")
    said = result.get("text")
    return (f"asked for the unlisted model {result['asked']!r}: HTTP {result['status']}, answered as "
            f"{claimed!r}" + (f", saying {said!r}" if said is not None else ""))
