"""execsys.observe.listener: the process listening on a local endpoint's port, scanned once per pass."""

from __future__ import annotations

import os
import socket

from execsys.observe.listener import listener, listening_pid, local_port
from execsys.observe.passmemo import observation_pass


def _listening_socket() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def test_the_local_listener_is_found_and_a_remote_endpoint_has_none():
    sock, port = _listening_socket()
    try:
        assert listening_pid(f"http://127.0.0.1:{port}/v1") == os.getpid()
        assert listener(f"http://localhost:{port}/v1")["pid"] == os.getpid()
        # the same port number on another machine is not this process
        assert listening_pid(f"http://gpu-17.example.invalid:{port}/v1") is None
        assert listener(f"http://gpu-17.example.invalid:{port}/v1") == {}
    finally:
        sock.close()
    assert listening_pid(f"http://127.0.0.1:{port}/v1") is None


def test_one_pass_shares_one_scan_and_the_next_pass_sees_the_change():
    sock, port = _listening_socket()
    endpoint = f"http://127.0.0.1:{port}"
    with observation_pass():
        assert listening_pid(endpoint) == os.getpid()
        sock.close()
        assert listening_pid(endpoint) == os.getpid(), "a pass asks the socket table once"
    with observation_pass():
        assert listening_pid(endpoint) is None


def test_ports_default_by_scheme_and_a_bad_port_is_no_port():
    assert local_port("http://127.0.0.1/v1") == 80
    assert local_port("https://localhost/v1") == 443
    assert local_port("127.0.0.1:8000") == 8000
    assert local_port("http://127.0.0.1:notaport/v1") is None
    assert local_port(None) is None
