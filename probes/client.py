"""Clients for the two probe targets: an OpenAI-compatible endpoint and a harness command.

Both expose ``complete(case, params) -> Completion`` and never raise for a failing target:
a failure after the retries is a ``Completion`` with ``error`` set, which the engine records
as an errored case (excluded from n, never counted as agreement or disagreement).

Public API (also used by the plan work for paired runs)::

    from execsys.probes.client import EndpointClient, CommandClient, Completion
    client = EndpointClient("http://127.0.0.1:8000/v1", api_key_env="OPENAI_API_KEY")
    model = client.resolve_model(None)          # the one model listed, or InputError naming them
    c = client.complete(case, {"temperature": 0, "max_tokens": 32, "model": model})
    c.text, c.tokens, c.error, c.system_fingerprint, c.model, c.finish_reason, c.attempts

Robustness: every request has a timeout and an overall deadline (an endless, trickling body
is cut off), the body is read up to ``max_body`` bytes (a huge body is an error, not an
out-of-memory), and 5xx/429, timeouts, connection resets, invalid JSON and truncated bodies
are retried with exponential backoff up to ``retries`` times. The API key is read from the
named environment variable at request time, registered with the redactor and never stored.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple

import httpx

from execsys.errors import InputError
from execsys.redact import redact_url, register_secret

from .cases import Case

DEFAULT_TIMEOUT = 120.0
DEFAULT_RETRIES = 3
DEFAULT_MAX_BODY = 8 << 20  # 8 MiB: far above any completion, far below trouble


@dataclass
class Completion:
    """One answer from a target. ``error`` set means no usable output after the retries."""

    text: str | None
    tokens: list[str] | None = None
    error: str | None = None
    system_fingerprint: str | None = None
    model: str | None = None
    finish_reason: str | None = None
    attempts: int = 1
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    unreachable: bool = False  # the last attempt could not even connect (the endpoint may be gone)
    # per generated token: [[token, logprob], ...] the engine's top-K there, best first (None: not asked
    # for, or the engine gave none); chosen_logprobs: the logprob of the token actually generated
    top_logprobs: list[list[list[Any]]] | None = None
    chosen_logprobs: list[float | None] | None = None
    logprobs_unsupported: bool = False  # logprobs were asked for and the engine gave none (or refused them)

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text, "tokens": self.tokens, "error": self.error,
            "system_fingerprint": self.system_fingerprint, "model": self.model,
            "finish_reason": self.finish_reason, "attempts": self.attempts,
            "elapsed_s": round(self.elapsed_s, 4),
        }


class _Retryable(Exception):
    """A failure worth another attempt (the server may answer next time)."""


class _Unreachable(_Retryable):
    """No connection could be made: nothing is listening, or the host is gone."""


class _Fatal(Exception):
    """A failure that another attempt will not fix (4xx, a request the server rejects)."""


class EndpointClient:
    """OpenAI-compatible client over httpx. Thread-safe: one pooled ``httpx.Client`` shared by workers."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key_env: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.25,
        max_body: int = DEFAULT_MAX_BODY,
        max_connections: int = 64,
        want_tokens: bool = False,
        logprobs: int = 0,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"--endpoint {base_url!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_body = max_body
        self.want_tokens = want_tokens
        self.logprobs = max(0, logprobs)  # top-K logprobs per token to ask for (0: none)
        self.logprobs_refused = False  # the engine rejected a request asking for them: stop asking
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), limits=limits)
        self._lock = threading.Lock()

    # -- identity of the target ---------------------------------------------
    @property
    def display(self) -> str:
        return redact_url(self.base_url)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if key:
                register_secret(key)
                headers["Authorization"] = f"Bearer {key}"
        return headers

    def list_models(self) -> list[str]:
        """Model ids from ``/v1/models``; InputError naming the endpoint when it cannot be read."""
        try:
            data = self._get_json(self.base_url + "/models", attempts=2)
        except (_Retryable, _Fatal) as exc:
            raise InputError(f"endpoint {self.display}: cannot list models ({exc})") from None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise InputError(f"endpoint {self.display}: /models did not return an OpenAI model list")
        return [str(item.get("id")) for item in items if isinstance(item, dict) and item.get("id") is not None]

    def resolve_model(self, requested: str | None) -> str:
        """``requested`` when given, else the one model the endpoint lists (an error naming them if several)."""
        models = self.list_models()
        if requested:
            return requested
        if len(models) == 1:
            return models[0]
        if not models:
            raise InputError(f"endpoint {self.display} lists no models: give --model NAME")
        raise InputError(f"endpoint {self.display} lists {len(models)} models ({', '.join(models)}): choose one with --model")

    def observe(self) -> dict[str, Any]:
        """What the endpoint says about itself: model ids and, where exposed, the server's version."""
        info: dict[str, Any] = {"endpoint": self.display}
        try:
            info["models"] = sorted(self.list_models())
        except InputError as exc:
            info["models"] = None
            info["error"] = str(exc)
        root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        try:
            data = self._get_json(root + "/openapi.json", attempts=1)
            api = data.get("info", {}) if isinstance(data, dict) else {}
            info["server"] = {"title": api.get("title"), "version": api.get("version")}
        except (_Retryable, _Fatal):
            info["server"] = None
        return info

    # -- requests --------------------------------------------------------------
    def request_body(self, case: Case, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The path and JSON body for one case: what the probe sends, exactly (benchmarks reuse it)."""
        body: dict[str, Any] = {k: v for k, v in params.items() if v is not None}
        if case.max_tokens is not None:
            body["max_tokens"] = case.max_tokens
        body.update(case.params)
        body["stream"] = False
        top_k = 0 if self.logprobs_refused else self.logprobs
        # The two OpenAI shapes, which vLLM, SGLang and llama.cpp's servers all follow: chat takes
        # logprobs=true plus top_logprobs=K, completions takes logprobs=K (an int).
        if case.messages is not None:
            body["messages"] = case.messages
            if self.want_tokens or top_k:
                body.setdefault("logprobs", True)
            if top_k:
                body.setdefault("top_logprobs", top_k)
            return "/chat/completions", body
        body["prompt"] = case.prompt
        if top_k:
            body.setdefault("logprobs", top_k)
        elif self.want_tokens:
            body.setdefault("logprobs", 1)
        return "/completions", body

    def complete(self, case: Case, params: dict[str, Any]) -> Completion:
        asked = bool(self.logprobs) and not self.logprobs_refused
        path, body = self.request_body(case, params)
        completion = self.post(path, body)
        if asked and completion.error and completion.error.startswith("HTTP 4"):
            # An engine that rejects logprobs is recorded as not supporting them, never as an error: the
            # same request without them is sent, and only if that one is answered are they given up.
            self.logprobs_refused = True
            path, body = self.request_body(case, params)
            plain = self.post(path, body)
            if plain.error:
                self.logprobs_refused = False  # refused for another reason: the first answer stands
            else:
                completion = plain
                completion.logprobs_unsupported = True
        elif asked and completion.ok and completion.top_logprobs is None or self.logprobs_refused and self.logprobs:
            completion.logprobs_unsupported = True
        return completion

    def post(self, path: str, body: dict[str, Any]) -> Completion:
        start = time.monotonic()
        last_error = "no attempt made"
        attempts = 0
        unreachable = False
        for attempt in range(self.retries + 1):
            attempts = attempt + 1
            try:
                data = self._post_json(self.base_url + path, body)
                completion = parse_completion(data, top_k=body.get("logprobs") if path == "/completions" else 0)
                completion.attempts = attempts
                completion.elapsed_s = time.monotonic() - start
                return completion
            except _Fatal as exc:
                last_error = str(exc)
                break
            except _Retryable as exc:
                last_error = str(exc)
                unreachable = isinstance(exc, _Unreachable)
                if attempt < self.retries:
                    time.sleep(self.backoff * (2**attempt) * (0.5 + random.random()))
        return Completion(None, error=last_error, attempts=attempts, elapsed_s=time.monotonic() - start,
                          unreachable=unreachable)

    def _post_json(self, url: str, body: dict[str, Any]) -> Any:
        return self._request("POST", url, body)

    def _get_json(self, url: str, attempts: int = 1) -> Any:
        last: Exception | None = None
        for attempt in range(attempts):
            try:
                return self._request("GET", url, None)
            except _Retryable as exc:
                last = exc
                if attempt + 1 < attempts:
                    time.sleep(self.backoff)
        assert last is not None
        raise last

    def _request(self, method: str, url: str, body: dict[str, Any] | None) -> Any:
        deadline = time.monotonic() + self.timeout
        try:
            with self._http.stream(method, url, json=body, headers=self._headers()) as response:
                status = response.status_code
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > self.max_body:
                        raise _Retryable(f"response body over {self.max_body} bytes (cut off)")
                    if time.monotonic() > deadline:
                        raise _Retryable(f"response still arriving after {self.timeout:g}s (cut off)")
                    chunks.append(chunk)
                raw = b"".join(chunks)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _Unreachable(f"cannot connect ({_short(exc)})") from None
        except httpx.TimeoutException:
            raise _Retryable(f"no answer within {self.timeout:g}s") from None
        except httpx.RemoteProtocolError as exc:
            raise _Retryable(f"connection broken mid-response ({_short(exc)})") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"cannot connect ({_short(exc)})") from None
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}: {_snippet(raw)}")
        if status >= 400:
            raise _Fatal(f"HTTP {status}: {_snippet(raw)}")
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _Retryable(f"invalid JSON in the response ({len(raw)} bytes)") from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EndpointClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:160] or type(exc).__name__


def _snippet(raw: bytes) -> str:
    text = raw[:300].decode("utf-8", "replace")
    try:
        data = json.loads(raw)
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            text = str(data["error"].get("message", text))
        elif isinstance(data, dict) and "detail" in data:
            text = str(data["detail"])
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return " ".join(text.split())[:200]


def parse_completion(data: Any, *, top_k: Any = 0) -> Completion:
    """One response body as a :class:`Completion`: an OpenAI completions or chat answer (vLLM, SGLang,
    llama-server, llama-cpp-python), or llama-server's native ``/completion`` answer. A body that is
    none of them raises the retryable error the request loop records. ``top_k``: the K a completions
    request asked for (see :func:`parse_logprobs`)."""
    if not isinstance(data, dict):
        raise _Retryable("response is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        if isinstance(data.get("error"), (dict, str)):
            raise _Retryable(f"endpoint error: {_snippet(json.dumps(data).encode())}")
        if isinstance(data.get("content"), str) and ("stop_type" in data or "stop" in data):
            return _parse_llama_native(data)
        raise _Retryable("response has no choices")
    choice = choices[0]
    if isinstance(choice.get("message"), dict):
        text = choice["message"].get("content")
        if text is None:
            text = ""
    else:
        text = choice.get("text")
    parsed = parse_logprobs(choice.get("logprobs"), top_k=top_k if type(top_k) is int else 0)
    if not isinstance(text, str):
        raise _Retryable("response choice has no text")
    fingerprint = data.get("system_fingerprint")
    return Completion(
        text,
        tokens=parsed.tokens,
        system_fingerprint=str(fingerprint) if fingerprint else None,
        model=str(data["model"]) if data.get("model") is not None else None,
        finish_reason=choice.get("finish_reason"),
        top_logprobs=parsed.top,
        chosen_logprobs=parsed.chosen,
    )


def _parse_llama_native(data: dict[str, Any]) -> Completion:
    """llama-server's own ``/completion`` answer: ``content``, ``stop_type`` and, with ``n_probs``,
    ``completion_probabilities``."""
    parsed = parse_logprobs(data.get("completion_probabilities"))
    stop = data.get("stop_type")  # older servers: stopped_eos / stopped_word / stopped_limit instead
    if stop is None:
        stop = next((kind for kind in ("eos", "word", "limit") if data.get(f"stopped_{kind}")), None)
    return Completion(
        data["content"],
        tokens=parsed.tokens,
        model=str(data["model"]) if data.get("model") is not None else None,
        finish_reason={"eos": "stop", "word": "stop", "limit": "length"}.get(str(stop)),
        top_logprobs=parsed.top,
        chosen_logprobs=parsed.chosen,
    )


_by_logprob = itemgetter(1)  # sort key of a [token, logprob] pair (C-level: it runs K times a token)


class ParsedLogprobs(NamedTuple):
    """What one answer's logprobs say: tokens, per-token top-K ``[[token, logprob], ...]`` best first,
    and the chosen token's logprob (``top`` None: no usable top-K came back). ``values`` names what the
    engine's numbers were: ``"logprobs"`` (natural-log probabilities, the model's own distribution
    before sampling), ``"probabilities"`` (turned into their natural log here) or ``"post-sampling"``
    (probabilities after the sampler chain: at temperature 0 the chosen token's is 1 and every other
    token's 0, so no margin can be read from them and ``top`` is None)."""

    tokens: list[str] | None
    top: list[list[list[Any]]] | None
    chosen: list[float | None] | None
    values: str = "logprobs"


_NONE = ParsedLogprobs(None, None, None)


def parse_logprobs(logprobs: Any, *, top_k: int = 0) -> ParsedLogprobs:
    """Read the logprobs of one answer in any of the shapes the engines give (each checked against the
    engine's source; the recorded shapes are in tests/test_probe_logprob_shapes.py):

    - the completions shape ``{"tokens", "token_logprobs", "top_logprobs": [{token: logprob} | None],
      "text_offset"}``: vLLM and SGLang on /v1/completions, and llama-cpp-python's server;
    - the chat shape ``{"content": [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]}``:
      vLLM and SGLang on /v1/chat/completions, and llama.cpp's llama-server on both of its OpenAI
      endpoints (with an extra ``id`` per entry);
    - llama-server's native ``/completion`` ``completion_probabilities``: a list of the chat shape's
      entries, or with ``post_sampling_probs`` the same entries keyed ``prob`` / ``top_probs``, or (older
      servers) ``[{"content": token, "probs": [{"tok_str", "prob"}]}]``.

    A value of -9999.0 (vLLM's stand-in for -inf) or float-lowest (llama-server's) is kept as it is: a
    token the model all but ruled out. The numbers are read as they come: vLLM's ``--logprobs-mode``
    (default ``raw_logprobs``) can put logits or post-processing values in the same fields, and a
    gap between two tokens of one distribution is the same in logits as in logprobs (the softmax
    normaliser cancels), so only the ``processed_*`` modes change what a margin means.

    The completions shape keys each step's top-K by the token's decoded text, so distinct tokens that
    decode to one text (the lone bytes of a multi-byte character: vLLM decodes each to ``""``) are
    merged by the engine into one key holding the last one's logprob (vLLM 0.32,
    ``_create_completion_logprobs``; measured on the real server: 5 asked, 4 keys, the ``""`` key
    holding the 5th token's logprob while the 2nd, 0.004 nats below the 1st, was gone). vLLM, SGLang
    and llama-cpp-python list at least K tokens, so a step with fewer than ``top_k`` keys (the K asked
    for) one of which is a lone byte's text (``""``, or one holding U+FFFD as other decoders write it)
    was merged: its top-K is unknown (``[]``), since a margin read from it could be wrong either way.
    Fewer keys of whole texts are read as they come (an engine that lists fewer than asked)."""
    if isinstance(logprobs, dict):
        content = logprobs.get("content")
        if isinstance(content, list):
            return _parse_entries(content)
        if "tokens" in logprobs or "top_logprobs" in logprobs:
            return _parse_completions_shape(logprobs, top_k)
        return _NONE
    if isinstance(logprobs, list):
        return _parse_entries(logprobs)
    return _NONE


def _parse_completions_shape(logprobs: dict[str, Any], top_k: int = 0) -> ParsedLogprobs:
    tokens_raw = logprobs.get("tokens")
    tokens = [str(t) for t in tokens_raw] if isinstance(tokens_raw, list) else None
    top_raw = logprobs.get("top_logprobs")
    if not isinstance(top_raw, list):
        return ParsedLogprobs(tokens, None, None)
    top: list[list[list[Any]]] = []
    found = False
    for alternatives in top_raw:
        if type(alternatives) is not dict or not alternatives:  # None: a step without logprobs (vLLM)
            top.append([])
            continue
        if len(alternatives) < top_k and any(not k or "\ufffd" in k for k in alternatives):
            top.append([])  # lone bytes merged under one text: given, but unknown (the docstring)
            found = True
            continue
        # JSON object keys are strings already; bool is excluded by the exact type test.
        pairs = [[k, float(v)] for k, v in alternatives.items() if type(v) is float or type(v) is int]
        pairs.sort(key=_by_logprob, reverse=True)  # stable: equal logprobs keep the engine's order
        top.append(pairs)
        found = found or bool(pairs)
    if not found:
        return ParsedLogprobs(tokens, None, None)
    chosen_raw = logprobs.get("token_logprobs")
    chosen: list[float | None] = ([float(v) if type(v) is float or type(v) is int else None for v in chosen_raw]
                                  if isinstance(chosen_raw, list) else [None] * len(top))
    return ParsedLogprobs(tokens, top, chosen)


def _parse_entries(entries: list[Any]) -> ParsedLogprobs:
    """The per-token entries of the chat shape and of llama-server's ``completion_probabilities``."""
    rows = [e for e in entries if type(e) is dict]
    if not rows:
        return ParsedLogprobs([], None, None)
    first = rows[0]
    if "probs" in first and "content" in first:  # llama-server before the logprob/top_logprobs keys
        return _parse_old_llama_entries(rows)
    if "logprob" not in first and "prob" in first:
        # post_sampling_probs: probabilities after the sampler chain (top-k, top-p, temperature): not
        # the model's distribution, and degenerate at temperature 0; the tokens are still read.
        return ParsedLogprobs([str(e.get("token", "")) for e in rows], None, None, "post-sampling")
    tokens: list[str] = []
    chosen: list[float | None] = []
    top: list[list[list[Any]]] = []
    found = False
    for entry in rows:
        tokens.append(str(entry.get("token", "")))
        value = entry.get("logprob")
        chosen.append(float(value) if type(value) is float or type(value) is int else None)
        alternatives = entry.get("top_logprobs")
        pairs: list[list[Any]] = []
        if type(alternatives) is list:
            for a in alternatives:
                if type(a) is dict:
                    lp = a.get("logprob")
                    if type(lp) is float or type(lp) is int:
                        pairs.append([str(a.get("token", "")), float(lp)])
            pairs.sort(key=_by_logprob, reverse=True)
            found = found or bool(pairs)
        top.append(pairs)
    return ParsedLogprobs(tokens, top, chosen) if found else ParsedLogprobs(tokens, None, None)


def _ln(p: Any) -> float | None:
    """A probability as a logprob; 0 as llama-server writes a logprob of 0 (float-lowest, never -inf)."""
    if type(p) is not float and type(p) is not int:
        return None
    return math.log(p) if p > 0 else _FLOAT_LOWEST


_FLOAT_LOWEST = -3.4028234663852886e38


def _parse_old_llama_entries(rows: list[dict[str, Any]]) -> ParsedLogprobs:
    """``[{"content": token, "probs": [{"tok_str", "prob"}]}]``: probabilities, read as their log."""
    tokens: list[str] = []
    chosen: list[float | None] = []
    top: list[list[list[Any]]] = []
    for entry in rows:
        token = str(entry.get("content", ""))
        pairs: list[list[Any]] = []
        probs = entry.get("probs")
        for a in probs if isinstance(probs, list) else []:
            if type(a) is dict and (lp := _ln(a.get("prob"))) is not None:
                pairs.append([str(a.get("tok_str", "")), lp])
        pairs.sort(key=_by_logprob, reverse=True)
        tokens.append(token)
        chosen.append(next((lp for t, lp in pairs if t == token), None))
        top.append(pairs)
    if not any(top):
        return ParsedLogprobs(tokens, None, None)
    return ParsedLogprobs(tokens, top, chosen, "probabilities")


class CommandClient:
    """A harness or agent command: one case as JSON on stdin, its output on stdout.

    The case is sent as in the cases file with ``params`` replaced by the decoding parameters
    the probe would send to an endpoint. A non-zero exit or a timeout is an error (after retries).
    """

    def __init__(self, command: str, *, timeout: float = DEFAULT_TIMEOUT, retries: int = 1,
                 max_body: int = DEFAULT_MAX_BODY, cwd: str | None = None):
        if not command.strip():
            raise InputError("--command is empty")
        self.command = command
        self.timeout = timeout
        self.retries = max(0, retries)
        self.max_body = max_body
        self.cwd = cwd

    @property
    def display(self) -> str:
        from execsys.redact import redact_text

        return redact_text(self.command)

    def resolve_model(self, requested: str | None) -> str | None:
        return requested

    def observe(self) -> dict[str, Any]:
        return {"command": self.display}

    def complete(self, case: Case, params: dict[str, Any]) -> Completion:
        from execsys.proc import run

        payload = case.to_json()
        payload.pop("expected", None)
        merged = {k: v for k, v in params.items() if v is not None}
        if case.max_tokens is not None:
            merged["max_tokens"] = case.max_tokens
        merged.update(case.params)
        payload["params"] = merged
        data = (json.dumps(payload, ensure_ascii=False) + "\n").encode()
        start = time.monotonic()
        error = "no attempt made"
        for attempt in range(self.retries + 1):
            result = run(["sh", "-c", self.command], timeout=self.timeout, input=data, cwd=self.cwd,
                         max_output=self.max_body)
            if result.ok and not result.truncated:
                return Completion(result.stdout.decode("utf-8", "replace"), attempts=attempt + 1,
                                  elapsed_s=time.monotonic() - start)
            if result.truncated:
                error = f"command output over {self.max_body} bytes"
            elif result.timed_out:
                error = f"command gave no answer within {self.timeout:g}s"
            elif result.error:
                error = f"command could not run ({result.error})"
            else:
                tail = result.text("stderr").strip().splitlines()
                error = f"command exited {result.returncode}" + (f": {tail[-1][:200]}" if tail else "")
        return Completion(None, error=error, attempts=self.retries + 1, elapsed_s=time.monotonic() - start)

    def close(self) -> None:
        pass
