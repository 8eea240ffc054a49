"""One way to open an HTTP client for observing a server: bounded, blind to proxy variables, and with
TLS set up only when the URL uses it.

httpx builds an SSL context and loads the whole CA bundle for every ``Client`` it opens -- 0.1 to 0.5 s
of CPU each, paid even for a plain ``http://`` loopback endpoint. One pin opens five or six clients
(models, engine introspection, the served-name check, the applied template, the judge) and
``execsys run`` observes twice, so that cost alone was most of the wrapper's own time. Redirects are
never followed here, so an ``http://`` URL cannot reach TLS and needs no context at all; ``https://``
URLs share one verified context per process.
"""

from __future__ import annotations

import functools
import ssl
from typing import TYPE_CHECKING

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
