"""model-name-honesty: the declared endpoint answers a model name it does not serve.

Several engines answer every request with whatever model is resident, whatever name the request
gives, and echo the requested name back in the response (llama-cpp-python's server, sglang#10065,
FastFlowLM#716, mlx-serve#257). A typo in a harness's model name, or a config written for another
deployment, then silently evaluates the wrong model, and nothing in the response says so. The
doctor asks the declared ``[runtime] endpoint`` which models it lists (``GET /v1/models``), then
sends one cheap request (``max_tokens`` 1) for a name it does not list: an engine that answers
it is a warning (a typo will not be caught by the engine), one that refuses it (vLLM's 404) is ok.

Read-only apart from that one-token request; both requests are bounded (a per-read timeout, an
overall deadline and a body cap). Standard library only (``http.client``), as every hazard module:
it also runs on remote hosts that have nothing but python3.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any
from urllib.parse import urlsplit

from execsys.doctor.model import Finding, HazardResult, fold

from execsys.redact import redact_url

ID = "model-name-honesty"
TITLE = "Model names the endpoint answers"
FINDINGS = ("answers-any-name",)

# the same words (and the same unlisted name) as ``pin``'s warning (execsys.observe.served), which this
# module cannot import: the remote bundle carries only the doctor and the standard library
ANSWERS_ANY_NAME = ("any model name is answered by the resident model: a typo in a harness's model name "
                    "silently evaluates another model")
UNLISTED_MODEL_NAME = "execsys-unlisted-model-name-check"

FIX = ("Check the model name every harness sends against the endpoint's /v1/models before trusting a result "
       "(`execsys probe` records the name each response gives), or serve through an engine that refuses "
       "unknown names (vLLM answers 404); for llama-cpp-python give --model_alias and keep harness configs "
       "in the declaration.")

BODY_LIMIT = 1 << 20  # a model list or a one-token answer is far smaller


class _Unanswered(Exception):
    """The endpoint did not answer within the time or size allowed, or could not be reached."""


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Unanswered("no time left")
    return left


def _request(endpoint: str, method: str, path: str, body: dict[str, Any] | None, *, deadline: float,
             api_key: str | None) -> tuple[int, bytes]:
    """(status, body) of one request, read before ``deadline`` (monotonic) and within ``BODY_LIMIT`` bytes:
    every socket wait is bounded by the time left, so a server trickling its answer cannot outlast it."""
    import http.client  # here: it pulls in ssl and email, and most node checks declare no endpoint
    import socket

    parts = urlsplit(endpoint)
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    timeout = _left(deadline)
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    payload = None
    if body is not None:
        payload = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    connection = connection_type(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        connection.request(method, parts.path.rstrip("/") + path, body=payload, headers=headers)
        response = connection.getresponse()
        chunks: list[bytes] = []
        size = 0
        while True:
            if connection.sock is not None:
                connection.sock.settimeout(_left(deadline))
            chunk = response.read1(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > BODY_LIMIT:
                raise _Unanswered(f"{path} answered more than {BODY_LIMIT >> 20} MiB")
            chunks.append(chunk)
        return response.status, b"".join(chunks)
    except socket.timeout:  # noqa: UP041 - an alias of TimeoutError only from 3.10; remotes may run 3.9
        raise _Unanswered(f"{path}: no answer in the time allowed") from None
    except (OSError, http.client.HTTPException) as exc:
        raise _Unanswered(f"{path}: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}") from None
    finally:
        connection.close()


def _message(raw: bytes) -> str:
    """What an error body says, briefly (OpenAI's ``error.message``, FastAPI's ``detail``, vLLM's ``message``)."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return " ".join(raw[:160].decode("utf-8", "replace").split())
    if isinstance(data, dict):
        error = data.get("error")
        for said in (error.get("message") if isinstance(error, dict) else error, data.get("message"), data.get("detail")):
            if isinstance(said, str) and said:
                return " ".join(said.split())[:160]
    return " ".join(raw[:160].decode("utf-8", "replace").split())


def _base(endpoint: str) -> str:
    """The OpenAI API base: a declared ``http://host:port`` is served under ``/v1``."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path if path else '/v1'}"


def check(ctx) -> HazardResult:
    declared = getattr(ctx.options, "endpoint", None)
    if not declared:
        return HazardResult(ID, "skip", "no endpoint declared ([runtime] endpoint)", [], "")
    endpoint = _base(str(declared))
    shown = redact_url(endpoint)
    key_env = getattr(ctx.options, "api_key_env", None)
    api_key = os.environ.get(key_env) if key_env else None
    # one budget for both requests: a cold engine's first token takes longer than a --version, and the
    # whole check stays inside the runner's deadline for a hazard (3 x timeout + 5 s)
    budget = min(max(2 * ctx.timeout, 5.0), 3 * ctx.timeout + 3.0)
    deadline = time.monotonic() + budget
    try:
        status, raw = _request(endpoint, "GET", "/models", None, deadline=deadline, api_key=api_key)
    except _Unanswered as exc:
        return HazardResult(ID, "skip", f"endpoint {shown} did not answer ({exc})", [], "")
    listed: list[str] = []
    if status == 200:
        try:
            items = json.loads(raw).get("data") or []
            listed = [str(item["id"]) for item in items if isinstance(item, dict) and item.get("id") is not None]
        except (ValueError, AttributeError, TypeError, UnicodeDecodeError):
            listed = []
    if status in (401, 403):
        return HazardResult(ID, "skip", f"endpoint {shown} refused the model list (HTTP {status}): declare "
                                        "[runtime] api_key_env", [], "")
    if not listed:
        return HazardResult(ID, "skip", f"endpoint {shown} lists no models (GET /models: HTTP {status})", [], "")
    name = UNLISTED_MODEL_NAME
    while name in listed:
        name += "-x"
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0}
    try:
        status, raw = _request(endpoint, "POST", "/chat/completions", body, deadline=deadline, api_key=api_key)
    except _Unanswered as exc:
        return HazardResult(ID, "skip", f"endpoint {shown} did not answer a one-token request ({exc})", [], "")
    lists = f"{shown} lists: {', '.join(listed[:8])}" + (" …" if len(listed) > 8 else "")
    if status == 200:
        claimed: Any = None
        said: str | None = None
        try:
            data = json.loads(raw)
            claimed = data.get("model")
            said = str(data["choices"][0]["message"].get("content") or "")[:80]
        except (ValueError, AttributeError, TypeError, IndexError, KeyError, UnicodeDecodeError):
            pass
        evidence = (f"asked for the unlisted model {name!r}: HTTP 200, answered as {claimed!r}"
                    + (f", saying {said!r}" if said is not None else ""))
        finding = Finding("warn", ANSWERS_ANY_NAME, f"{ID}/answers-any-name")
        return fold(ID, [finding], ok="", fix=FIX, evidence=[evidence, lists], accept=ctx.accept)
    if status in (401, 403) or status >= 500:
        return HazardResult(ID, "skip", f"endpoint {shown} could not be asked (HTTP {status}: {_message(raw)})",
                            [lists], "")
    return fold(ID, [], ok=f"{shown} refuses a model name it does not serve (HTTP {status})",
                fix=FIX, evidence=[f"asked for the unlisted model {name!r}: HTTP {status}: {_message(raw)}", lists],
                accept=ctx.accept)
