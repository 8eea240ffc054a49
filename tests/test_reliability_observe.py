"""Observation requests are bounded overall: a trickling endpoint does not hang `pin`.

A real loopback HTTP server (stdlib, threaded) answers /v1/models normally and
trickles /version, /openapi.json and /props a byte a second -- each read is within
httpx's per-read timeout, so only an overall deadline stops it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fixtures.fake_http import JsonHandler, LoopbackServer


def _server(trickle: set[str], huge: set[str] | None = None) -> LoopbackServer:
    huge = huge or set()

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = json.dumps({"data": [{"id": "m"}]} if self.path == "/v1/models" else {"version": "9.9"}).encode()
            body = body.ljust(400)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            if self.path in huge:
                self.send_header("content-length", str(1 << 30))
                self.end_headers()
                block = b" " * (1 << 20)
                try:
                    for _ in range(1 << 10):
                        self.wfile.write(block)
                except OSError:
                    return
                return
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            try:
                if self.path in trickle:
                    for byte in body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(1.0)
                else:
                    self.wfile.write(body)
            except OSError:
                return

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

    return LoopbackServer(Handler)


def _declaration(tmp_path: Path, port: int) -> Path:
    config = tmp_path / "execsys.toml"
    config.write_text(f'[runtime]\nendpoint = "http://127.0.0.1:{port}/v1"\nready_timeout = 2\n')
    return config


@pytest.mark.timeout(90)
def test_pin_is_not_hung_by_endpoints_that_trickle(cli, tmp_path: Path, ledger_path: Path) -> None:
    server = _server({"/version", "/openapi.json", "/props"})
    try:
        config = _declaration(tmp_path, server.port)
        start = time.monotonic()
        result = cli("pin", "--json", "--config", str(config), "--out", str(tmp_path / "lock.json"), cwd=tmp_path,
                     timeout=80)
        elapsed = time.monotonic() - start
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    endpoint = result.json()["components"]["runtime"]["observed"]["endpoint"]
    assert endpoint["models"] == ["m"]
    assert endpoint["server_version"] is None  # cut off at the deadline, recorded as absent
    assert elapsed < 60  # three 400-byte trickles would take 20 minutes


@pytest.mark.timeout(90)
def test_a_trickling_models_list_is_a_clear_error(cli, tmp_path: Path, ledger_path: Path) -> None:
    server = _server({"/v1/models"})
    try:
        config = _declaration(tmp_path, server.port)
        result = cli("pin", "--config", str(config), "--out", str(tmp_path / "lock.json"), cwd=tmp_path, timeout=80)
    finally:
        server.close()
    assert result.returncode == 2, result.stderr
    assert "/v1/models did not finish answering" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "lock.json").exists()


@pytest.mark.timeout(90)
def test_a_huge_answer_is_cut_at_the_size_cap(tmp_path: Path) -> None:
    from execsys.observe.runtime import observe_endpoint

    server = _server(set(), huge={"/openapi.json"})
    try:
        observed = observe_endpoint(f"http://127.0.0.1:{server.port}/v1", timeout=20)
    finally:
        server.close()
    assert observed["models"] == ["m"] and observed["openapi"] is None
