"""The observation client's bounds as decision tables (issue 26), against real loopback servers: the
size cap at, below and above its limit, the overall deadline over a trickling answer, the per-request
read timeout, redirects never followed, proxy variables ignored, TLS only for https."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest

from execsys.observe import http as http_mod
from execsys.observe.http import (
    OBSERVE_BODY_LIMIT,
    BoundedAnswer,
    Unanswered,
    fetch_bounded,
    observation_client,
    tls_for,
)
from tests.fixtures.fake_http import JsonHandler, LoopbackServer


class Server:
    def __init__(self) -> None:
        self.body = b'{"ok": true}'
        self.chunks: list[bytes] | None = None
        self.pause = 0.0
        self.first_byte_delay = 0.0
        self.status = 200
        self.content_type: str | None = "application/json"
        self.location: str | None = None
        self.seen: list[tuple[str, str, dict, bytes]] = []
        server = self

        class Handler(JsonHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.seen.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
                time.sleep(server.first_byte_delay)
                self.send_response(server.status)
                if server.content_type is not None:
                    self.send_header("Content-Type", server.content_type)
                if server.location:
                    self.send_header("Location", server.location)
                if server.chunks is None:
                    self.send_header("Content-Length", str(len(server.body)))
                    self.end_headers()
                    self.wfile.write(server.body)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in server.chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    time.sleep(server.pause)
                self.wfile.write(b"0\r\n\r\n")

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

        self.loop = LoopbackServer(Handler)
        self.url = self.loop.url("")


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.loop.close()


def fetch(server: Server, path: str = "/x", **kw) -> BoundedAnswer:
    timeout = kw.pop("timeout", 5.0)
    with observation_client(server.url, timeout=timeout, headers=kw.pop("headers", None)) as client:
        return fetch_bounded(client, kw.pop("method", "GET"), server.url + path, budget=kw.pop("budget", 5.0), **kw)


def test_an_answer_is_read_whole_with_its_status_and_type(server: Server) -> None:
    answer = fetch(server)
    assert (answer.status, answer.content_type, answer.body) == (200, "application/json", b'{"ok": true}')
    assert answer.json() == {"ok": True}


def test_a_missing_content_type_is_empty(server: Server) -> None:
    server.content_type = None
    server.status = 503
    answer = fetch(server)
    assert answer.content_type == "" and answer.status == 503


def test_a_json_body_is_posted(server: Server) -> None:
    fetch(server, "/v1/chat", method="POST", json_body={"a": [1]})
    method, path, _headers, body = server.seen[0]
    assert (method, path, json.loads(body)) == ("POST", "/v1/chat", {"a": [1]})


def test_the_client_sends_its_headers(server: Server) -> None:
    fetch(server, headers={"Authorization": "Bearer t"})
    assert server.seen[0][2]["Authorization"] == "Bearer t"
    fetch(server)
    assert "Authorization" not in server.seen[1][2]


def test_the_size_cap_is_8_mib() -> None:
    assert OBSERVE_BODY_LIMIT == 8 * 1024 * 1024


@pytest.mark.parametrize(("size", "refused"), [(OBSERVE_BODY_LIMIT - 1, False), (OBSERVE_BODY_LIMIT, False),
                                               (OBSERVE_BODY_LIMIT + 1, True)])
def test_an_answer_past_the_size_cap_is_unanswered(server: Server, size: int, refused: bool) -> None:
    server.body = b"x" * size
    if refused:
        with pytest.raises(Unanswered, match="^answered more than 8 MiB$"):
            fetch(server)
    else:
        assert len(fetch(server).body) == size


def test_the_cap_counts_the_whole_body_across_chunks(server: Server) -> None:
    half = OBSERVE_BODY_LIMIT // 2
    server.chunks = [b"a" * half, b"b" * half]
    assert len(fetch(server).body) == OBSERVE_BODY_LIMIT
    server.chunks = [b"a" * half, b"b" * half, b"c"]
    with pytest.raises(Unanswered, match="more than 8 MiB"):
        fetch(server)


def test_a_trickling_answer_past_the_deadline_is_unanswered(server: Server) -> None:
    server.chunks = [b"x"] * 40
    server.pause = 0.05
    with pytest.raises(Unanswered, match=r"^did not finish answering within 0s$"):
        fetch(server, budget=0.3)
    server.chunks = [b"x"] * 3
    server.pause = 0.0
    assert fetch(server, budget=0.3).body == b"xxx"


def test_the_deadline_is_said_in_whole_seconds(server: Server) -> None:
    server.chunks = [b"x"] * 100
    server.pause = 0.05
    with pytest.raises(Unanswered, match=r"^did not finish answering within 2s$"):
        fetch(server, budget=1.6)


def test_a_read_timeout_replaces_the_client_s_for_one_request(server: Server) -> None:
    server.first_byte_delay = 0.4
    with pytest.raises(httpx.ReadTimeout):
        fetch(server, timeout=0.1)
    assert fetch(server, timeout=0.1, read_timeout=3.0).status == 200
    with pytest.raises(httpx.ReadTimeout):
        fetch(server, timeout=3.0, read_timeout=0.1)


def test_redirects_are_never_followed(server: Server) -> None:
    server.status = 302
    server.location = "/elsewhere"
    answer = fetch(server)
    assert answer.status == 302 and [s[1] for s in server.seen] == ["/x"]


def test_proxy_variables_are_ignored(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert fetch(server).status == 200


@pytest.mark.parametrize(("url", "tls"), [("https://h/v1", True), ("HTTPS://h", True), ("http://h/v1", False),
                                          ("h/https://", False), ("", False)])
def test_tls_only_for_https(url: str, tls: bool) -> None:
    got = tls_for(url)
    if tls:
        assert isinstance(got, ssl.SSLContext) and got.verify_mode == ssl.CERT_REQUIRED and got.check_hostname
    else:
        assert got is False


def test_one_verified_context_per_process() -> None:
    assert tls_for("https://a") is tls_for("https://b") is http_mod._verified_context()


def test_the_client_is_bounded_and_blind(server: Server) -> None:
    with observation_client("http://127.0.0.1/", timeout=2.5, headers={"X-A": "1"}) as client:
        assert client.timeout == httpx.Timeout(2.5)
        assert client.follow_redirects is False and client.trust_env is False
        assert client.headers["X-A"] == "1"
    with observation_client("http://127.0.0.1/", timeout=1.0) as client:
        assert "X-A" not in client.headers
