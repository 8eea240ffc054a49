"""execsys.observe.listener: the process listening on a local endpoint's port, scanned once per pass."""

from __future__ import annotations

import os
import socket

import pytest

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


def test_init_beside_a_real_llama_cpp_server_prefills_it(cli, tmp_path, llama_server):
    """The doctor's discovery finds the suite's real llama.cpp server (llama-cpp-python) with its argv;
    init pre-fills engine, endpoint, process and the weights from its --model. The machine may be shared:
    the declaration names the first engine listening here, which may be another's."""
    import sys

    from execsys.observe.listener import engine_listeners

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    listening = engine_listeners()
    ours = [entry for entry in listening if entry["pid"] == llama_server.pid]
    assert [(e["engine"], e["process"], e["endpoint"]) for e in ours] == [
        ("llama-cpp-python", "llama_cpp.server", llama_server.base_url)]
    assert "--model" in ours[0]["argv"]
    result = cli("init", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    runtime = tomllib.loads((tmp_path / "execsys.toml").read_text())["runtime"]
    first = listening[0]
    assert (runtime["engine"], runtime["endpoint"], runtime["process"]) == (
        first["engine"], first["endpoint"], first["process"])
    if first["pid"] == llama_server.pid:
        artifact = tomllib.loads((tmp_path / "execsys.toml").read_text())["artifact"]
        assert artifact["path"] == str(llama_server.model_path)


@pytest.mark.integration
def test_init_names_a_relative_model_by_the_serving_process_s_directory(tmp_path, tiny_gguf, monkeypatch):
    """A server started as ``--model tiny.gguf`` from the model's directory reports a relative path:
    init pre-fills it as that process's directory names it (an absolute path that exists), never
    relative to the new declaration, where the first pin would not find it. (In process, with the
    discovery narrowed to this server: the machine may have other engines listening.)"""
    import os
    import shutil
    import signal
    import subprocess

    from execsys import scaffold
    from execsys.observe import listener
    from tests.fixtures.llama import free_port, server_argv, wait_ready
    from tests.fixtures.markers import starts_real_service

    starts_real_service("a llama.cpp server")
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(tiny_gguf, served / "tiny.gguf")
    port = free_port()
    proc = subprocess.Popen(server_argv("tiny.gguf", port), cwd=served, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_ready(f"http://127.0.0.1:{port}/v1", 120, proc)
        everything = listener.engine_listeners
        monkeypatch.setattr(listener, "engine_listeners",
                            lambda *a, **k: [e for e in everything(*a, **k) if e["pid"] == proc.pid])
        found: dict = {}
        scaffold._from_listener(found)
        assert found["endpoint"] == f"http://127.0.0.1:{port}/v1"
        assert found["artifact"] == str(served / "tiny.gguf")
        # the same server seen from a directory where the name means nothing: no path rather than a wrong one
        assert scaffold._served_path("tiny.gguf", None) is None
        assert scaffold._served_path("org/not-here", proc.pid) is None
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_watch_tick_reads_the_socket_table_once(monkeypatch):
    """A serving observer's tick (the run watch, each probe pass) finds the listener with one scan, on the
    first tick of a process too; a tick after the process closed its socket scans again and sees it gone."""
    from execsys.identity.serving import ServingObserver
    from execsys.observe import listener as listener_module
    from tests.fixtures.fake_http import JsonHandler, LoopbackServer

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self.send_json({"object": "list", "data": [{"id": "m", "object": "model"}]})
            else:
                self.send_json({"detail": "Not Found"}, 404)

    scans: list[int] = []
    real_scan = listener_module._scan

    def counted(port: int):
        scans.append(port)
        return real_scan(port)

    monkeypatch.setattr(listener_module, "_scan", counted)
    observer = ServingObserver(completions=False)
    with LoopbackServer(Handler) as server:
        declared = {"endpoint": server.url()}
        first = observer(declared)
        assert first["runtime.process.pid"] == os.getpid() and first["runtime.endpoint.models"] == ["m"]
        assert len(scans) == 1, scans
        assert observer(declared)["runtime.process.pid"] == os.getpid()
        assert len(scans) == 2, scans
    assert "runtime.process.pid" not in observer(declared) and len(scans) == 3
