"""One way to open an HTTP client for observing a server: bounded, blind to proxy variables, and with
TLS set up only when the URL uses it.

httpx builds an SSL context and loads the whole CA bundle for every ``Client`` it opens -- 0.1 to 0.5 s
of CPU each, paid even for a plain ``http://`` loopback endpoint. One pin opens five or six clients
(models, engine introspection, the served-name check, the applied template, the judge) and
``execsys run`` observes twice, so that cost alone was most of the wrapper's own time. Redirects are
never followed here, so an ``http://`` URL cannot reach TLS and needs no context at all; ``https://``
URLs share one verified context per process.

Also :func:`fetch_bounded`, the one way an observation reads an answer: an overall deadline and a size
cap, not only httpx's per-read timeouts.
"""

from __future__ import annotations

import functools
import json
import ssl
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx


@functools.cache
def _verified_context() -> ssl.SSLContext:
    import httpx

    return httpx.create_ssl_context()


def tls_for(url: str) -> ssl.SSLContext | bool:
    """The ``verify=`` for a client that talks only to ``url``'s origin without following redirects."""
    return _verified_context() if url.lower().startswith("https:") else False


def observation_client(url: str, *, timeout: float, headers: dict[str, str] | None = None) -> httpx.Client:
    """An httpx client for observing the server at ``url``: per-read ``timeout``, no redirects, no
    proxies or credentials picked up from the environment."""
    import httpx

    return httpx.Client(timeout=httpx.Timeout(timeout), headers=headers or {}, follow_redirects=False,
                        trust_env=False, verify=tls_for(url))


# The largest answer an observation reads: vLLM's /openapi.json is a few hundred KiB.
OBSERVE_BODY_LIMIT = 8 << 20


class Unanswered(Exception):
    """An observation request that ran past its deadline or its size cap."""


class BoundedAnswer:
    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        self.status = status
        self.content_type = content_type
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def fetch_bounded(client: Any, method: str, url: str, *, budget: float, json_body: Any = None,
                  read_timeout: float | None = None) -> BoundedAnswer:
    """One request, read to the end within ``budget`` seconds overall and OBSERVE_BODY_LIMIT bytes
    (httpx's timeouts bound each read, not the whole body). Raises Unanswered past either.
    ``read_timeout`` replaces the client's per-read timeout for this request."""
    deadline = time.monotonic() + budget
    extra: dict[str, Any] = {}
    if read_timeout is not None:
        import httpx

        extra["timeout"] = httpx.Timeout(read_timeout)
    with client.stream(method, url, json=json_body, **extra) as response:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > OBSERVE_BODY_LIMIT:
                raise Unanswered(f"answered more than {OBSERVE_BODY_LIMIT >> 20} MiB")
            if time.monotonic() > deadline:
                raise Unanswered(f"did not finish answering within {budget:.0f}s")
        return BoundedAnswer(response.status_code, response.headers.get("content-type", ""), b"".join(chunks))
