"""Engine-native introspection: what each serving engine says about itself, through its own endpoints.

The generic runtime observation (``/v1/models``, ``/version``, the process argv) cannot tell which
weights an engine holds in memory, at which context length, with which parallelism or attention
backend: every engine answers that only in its own dialect (llama.cpp's ``/props``, vLLM's
``/v1/models`` ``root``, SGLang's ``/get_server_info``, Ollama's ``/api/show``). One module per
engine reads its dialect into a :class:`NativeObservation`; this registry picks the module for the
declared engine and runs it over one bounded HTTP client. Unknown engines get no native
observation (``None``): today's generic observation stands alone.

Every request has a timeout and a size cap; an endpoint that is missing, refuses, times out or
answers something that is not JSON is recorded as absent -- never an error, because which
endpoints an engine enables is its operator's choice (llama.cpp's ``/slots`` is off by default).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from execsys.redact import redact_text

# An engine's self-description is small; anything larger is not what we asked for.
MAX_RESPONSE_BYTES = 1 << 20


@dataclass
class NativeObservation:
    """What one engine said about itself.

    ``identity`` goes inside the identity id (model path, context length, parallelism, backends);
    ``volatile`` stays outside it (uptime, queue depth, free KV blocks: they move while nothing
    about the system does). ``model_path`` is the weights the engine says it loaded, with
    ``model_path_source`` naming the endpoint or flag that said so.
    """

    engine: str
    identity: dict[str, Any] = field(default_factory=dict)
    volatile: dict[str, Any] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)  # endpoint -> why (status, timeout, not JSON)
    model_path: str | None = None
    model_path_source: str | None = None

    def to_identity_json(self) -> dict[str, Any]:
        """The part inside the id: the absence of an endpoint is a fact, its reason (a timeout?) may flap."""
        return {"engine": self.engine, **self.identity, "model_path": self.model_path,
                "model_path_source": self.model_path_source, "read": sorted(set(self.read)),
                "absent": sorted(self.absent)}

    def to_volatile_json(self) -> dict[str, Any]:
        return {**self.volatile, "absent_because": dict(sorted(self.absent.items()))}


class EngineClient:
    """GET/POST JSON from one server root with a per-request timeout and a size cap; failures are absences."""

    def __init__(self, root: str, *, api_key: str | None = None, timeout: float = 5.0,
                 max_bytes: int = MAX_RESPONSE_BYTES):
        from execsys.observe.http import observation_client

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.root = root.rstrip("/")
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._client = observation_client(self.root, timeout=timeout, headers=headers)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, into: NativeObservation, *, budget: float | None = None) -> Any:
        """``budget``: this answer's own deadline, for an endpoint known to compute its first answer slowly."""
        return self._request("GET", path, into, None, budget=budget)

    def post(self, path: str, into: NativeObservation, body: dict[str, Any]) -> Any:
        return self._request("POST", path, into, body)

    def get_text(self, path: str, into: NativeObservation) -> str | None:
        """A text answer (Prometheus' exposition format, ``/metrics``), or None with the reason in ``absent``."""
        return self._request("GET", path, into, None, as_text=True)

    def _request(self, method: str, path: str, into: NativeObservation, body: dict[str, Any] | None,
                 *, as_text: bool = False, budget: float | None = None) -> Any:
        """The decoded JSON, or None with ``into.absent[path]`` saying why. The runtime observation's bounded
        request (an overall deadline per answer, not only per read) does the reading."""
        import httpx

        from execsys.observe.http import Unanswered, fetch_bounded

        where = path.split("?", 1)[0]  # recorded by endpoint, without its query
        try:
            answer = fetch_bounded(self._client, method, self.root + path, budget=budget or self.timeout,
                                   json_body=body, read_timeout=budget)
        except httpx.TimeoutException:
            into.absent[where] = "no answer within the timeout"
            return None
        except Unanswered as exc:
            into.absent[where] = str(exc)
            return None
        except httpx.HTTPError as exc:
            into.absent[where] = redact_text(f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}")
            return None
        if answer.status != 200:
            into.absent[where] = f"HTTP {answer.status}"
            return None
        if len(answer.body) > self.max_bytes:
            into.absent[where] = f"answer larger than {self.max_bytes} bytes"
            return None
        if as_text:
            into.read.append(where)
            return answer.body.decode("utf-8", "replace")
        try:
            data = answer.json()
        except ValueError:
            into.absent[where] = "not JSON"
            return None
        into.read.append(where)
        return data


# -- argv ----------------------------------------------------------------------------------------


def argv_options(argv: Sequence[str], names: Sequence[str], *, switches: Sequence[str] = ()) -> dict[str, Any]:
    """``--name value`` / ``--name=value`` for ``names`` (the last one wins, as argparse does) and bare
    ``switches`` as True, keyed by the flag as spelled in ``names``/``switches``. A name followed by another
    flag is a bare switch too (llama.cpp's ``-fa`` took no value before it took on/off/auto)."""
    wanted = set(names)
    flags = set(switches)
    found: dict[str, Any] = {}
    args = list(argv)
    for index, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if eq and key in wanted:
            found[key] = value
        elif arg in wanted and index + 1 < len(args) and not _is_flag(args[index + 1]):
            found[arg] = args[index + 1]
        elif arg in wanted or arg in flags:
            found[arg] = True
    return found


def argv_values(argv: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """:func:`argv_options` for flags that take a value (a weights path): one given bare, with no value,
    names nothing and is left out, where argv_options reports it as a switch (True)."""
    return {flag: value for flag, value in argv_options(argv, names).items() if isinstance(value, str)}


def _is_flag(word: str) -> bool:
    return word.startswith("-") and not re.match(r"^-\d", word)


def process_argv(process: dict[str, Any] | None) -> list[str]:
    argv = (process or {}).get("argv")
    return [str(a) for a in argv] if isinstance(argv, list) else []


def models_list(data: Any) -> list[dict[str, Any]]:
    """The ``data`` entries of an OpenAI ``/v1/models`` answer."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return []
    return [m for m in data["data"] if isinstance(m, dict)]


def pick(data: Any, keys: Sequence[str]) -> dict[str, Any]:
    """The scalar (or list-of-scalar) values of ``keys`` that ``data`` has."""
    if not isinstance(data, dict):
        return {}
    out: dict[str, Any] = {}
    for key in keys:
        value = data.get(key)
        if isinstance(value, (str, int, float, bool)) or (
                isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value)):
            out[key] = value
    return out


# -- the registry ----------------------------------------------------------------------------------

def _registry() -> dict[str, ModuleType]:
    from execsys.observe.engines import llama_cpp, llama_cpp_python, ollama, sglang, vllm

    return {module.ENGINE: module for module in (llama_cpp, llama_cpp_python, vllm, sglang, ollama)}


def known_engines() -> list[str]:
    return sorted(_registry())


def introspect(engine: str | None, root: str, *, process: dict[str, Any] | None = None,
               api_key: str | None = None, timeout: float = 5.0,
               system_fingerprint: str | None = None) -> NativeObservation | None:
    """The declared engine's own account of itself at ``root`` (scheme://host:port), or None for an
    engine without a module here. ``system_fingerprint`` (from a response the runtime observation
    already asked for) is read by an engine module that knows how its engine spells it."""
    from execsys.observe.vocabulary import canonical_engine

    module = _registry().get(canonical_engine(engine) or "")
    if module is None:
        return None
    with EngineClient(root, api_key=api_key, timeout=timeout) as client:
        observation: NativeObservation = module.introspect(client, process)
    reader = getattr(module, "read_fingerprint", None)
    if reader is not None and system_fingerprint:
        observation.identity["fingerprint"] = reader(system_fingerprint)
    return observation


def blake3_text(text: str) -> str:
    import blake3

    return blake3.blake3(text.encode("utf-8")).hexdigest()


def int_or_none(value: Any) -> int | None:
    with contextlib.suppress(TypeError, ValueError):
        return int(value)
    return None
