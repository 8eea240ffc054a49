"""Which local process serves an endpoint, as decision tables: which hosts are this machine, which port an
endpoint means, which argv is which engine, and how the listening engines are turned into endpoints
(the doctor's process list and socket table are planted: ``sysinfo`` is replaced for the call).
In-process, milliseconds."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
from execsys.doctor import sysinfo

from execsys.observe import listener
from execsys.observe.passmemo import observation_pass


@pytest.mark.parametrize(("host", "local"), [
    ("localhost", True), ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("0.0.0.0", True),
    ("::", True), (None, False), ("", False), ("192.0.2.1", False), ("gpu-17.example.invalid", False),
    ("128.0.0.1", False), ("x127.0.0.1", False),
], ids=lambda value: None if isinstance(value, bool) else str(value).replace("localhost", "loopback"))
def test_which_names_are_this_machine(host: str | None, local: bool) -> None:
    assert listener.is_local_host(host) is local


def test_this_machine_s_own_name_is_local() -> None:
    assert listener.is_local_host(socket.gethostname()) is True


def test_a_name_that_cannot_be_resolved_is_not_local(monkeypatch: pytest.MonkeyPatch) -> None:
    def unresolvable(*args: Any) -> Any:
        raise OSError("no name")

    monkeypatch.setattr(socket, "gethostname", unresolvable)
    assert listener.is_local_host("some-name") is False


@pytest.mark.parametrize(("endpoint", "port"), [
    ("http://127.0.0.1:8000/v1", 8000), ("http://localhost/v1", 80), ("https://localhost/v1", 443),
    ("localhost:9000", 9000), ("127.0.0.1", 80), ("http://127.0.0.1:99999/v1", None),
    ("http://192.0.2.1:8000/v1", None), ("", None), (None, None),
], ids=lambda value: f"c{value}".replace("localhost", "loopback") if isinstance(value, str) else None)
def test_the_port_an_endpoint_means_here(endpoint: str | None, port: int | None) -> None:
    assert listener.local_port(endpoint) == port


def test_the_listening_pid_is_this_process_for_its_own_socket_and_none_for_a_free_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert listener._scan(port) is None  # bound, not listening
        sock.listen()
        assert listener._scan(port) == os.getpid()
        assert listener.listening_pid(f"http://127.0.0.1:{port}") == os.getpid()
        found = listener.listener(f"http://127.0.0.1:{port}")
        import psutil

        assert found == {"pid": os.getpid(), "started_at": round(psutil.Process().create_time(), 2)}
    assert listener.listening_pid(None) is None
    assert listener.listener(None) == {}


def test_a_listener_that_vanished_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    monkeypatch.setattr(listener, "listening_pid", lambda endpoint: 2 ** 22 + 7)  # no such pid
    assert listener.listener("http://127.0.0.1:1") == {}
    monkeypatch.setattr(psutil, "net_connections", lambda kind: (_ for _ in ()).throw(psutil.AccessDenied()))
    assert listener._scan(1) is None


def test_the_scan_is_shared_within_a_pass() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with observation_pass():
            assert listener.listening_pid(f"http://127.0.0.1:{port}") == os.getpid()
            sock.close()
            assert listener.listening_pid(f"http://localhost:{port}/v1") == os.getpid()


@pytest.mark.parametrize(("argv", "expected"), [
    (["python", "-m", "vllm.entrypoints.openai.api_server"], ("vllm", "vllm.entrypoints")),
    (["python", "-m", "vllm.entrypoints"], ("vllm", "vllm.entrypoints")),
    (["python", "-X", "dev", "vllm.entrypoints.x"], ("vllm", "vllm.entrypoints")),            # fourth word
    (["python", "-X", "dev", "-m", "vllm.entrypoints.x"], None),                              # past the fourth
    (["python", "-m", "vllm.entrypointsx"], None),
    (["python", "-m", "sglang.launch_server"], ("sglang", "sglang.launch_server")),
    (["python", "-m", "llama_cpp.server", "--model", "m"], ("llama-cpp-python", "llama_cpp.server")),
    (["/usr/bin/vllm", "serve", "m"], ("vllm", "vllm serve")),
    (["python", "/usr/bin/sglang", "serve"], ("sglang", "sglang serve")),
    (["python", "x", "vllm", "serve"], None),                 # a third word is not the program
    (["vllm", "bench"], None),
    (["vllm"], None),
    (["/opt/llama-server", "-m", "m"], ("llama.cpp", "llama-server")),
    (["env", "llama-server"], ("llama.cpp", "llama-server")),
    (["a", "b", "llama-server"], None),
    (["ollama", "serve"], ("ollama", "ollama serve")),
    (["/usr/bin/ollama", "runner", "--port", "1"], None),     # its runners listen on ports of their own
    (["ollama"], None),
    ([], None),
])
def test_which_argv_is_which_engine(argv: list[str], expected: tuple[str, str] | None) -> None:
    assert listener.engine_of_argv(argv) == expected


def _proc(pid: int, cmdline: list[str], created: float | None) -> sysinfo.ProcessInfo:
    return sysinfo.ProcessInfo(pid=pid, name=os.path.basename(cmdline[0]), cmdline=cmdline, create_time=created)


def _lst(port: int, address: str, pids: list[int], family: str = "IPv4") -> sysinfo.Listener:
    return sysinfo.Listener(family=family, address=address, port=port, inode=port, uid=0, pids=pids)


def test_the_listening_engines_oldest_first_each_by_its_lowest_port(monkeypatch: pytest.MonkeyPatch) -> None:
    processes = [
        _proc(30, ["llama-server", "-m", "/m.gguf", "--api-key", "sk-listener-secret-123456"], 300.0),
        _proc(10, ["/venv/bin/vllm", "serve", "m"], 100.0),
        _proc(11, ["/venv/bin/vllm", "serve", "m"], 110.0),      # a forked worker holding its parent's socket
        _proc(20, ["bash"], 50.0),                                # not an engine
        _proc(40, ["ollama", "serve"], None),                     # no start time: counted as the oldest
    ]
    table = [
        _lst(8000, "::", [10, 11], "IPv6"), _lst(8000, "0.0.0.0", [10, 11]),
        _lst(9000, "10.1.2.3", [30]), _lst(11434, "127.0.0.5", [40]), _lst(7000, "0.0.0.0", [20]),
    ]
    monkeypatch.setattr(sysinfo, "engine_processes", lambda: processes)
    monkeypatch.setattr(sysinfo, "listeners", lambda: (table, 0))
    found = listener.engine_listeners()
    assert [(e["engine"], e["pid"], e["port"], e["address"], e["root"], e["endpoint"], e["process"])
            for e in found] == [
        ("ollama", 40, 11434, "127.0.0.5", "http://127.0.0.1:11434", "http://127.0.0.1:11434/v1", "ollama serve"),
        ("vllm", 10, 8000, "0.0.0.0", "http://127.0.0.1:8000", "http://127.0.0.1:8000/v1", "vllm serve"),
        ("llama.cpp", 30, 9000, "10.1.2.3", "http://10.1.2.3:9000", "http://10.1.2.3:9000/v1", "llama-server"),
    ]
    assert found[1]["argv"] == ["/venv/bin/vllm", "serve", "m"]
    assert "sk-listener-secret-123456" not in str(found[2]["argv"]) and "--api-key" in found[2]["argv"]


@pytest.mark.parametrize(("address", "host"), [
    ("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1"), ("::ffff:0.0.0.0", "127.0.0.1"), ("127.0.0.1", "127.0.0.1"),
    ("::1", "127.0.0.1"), ("fe80::1", "[fe80::1]"), ("192.0.2.7", "192.0.2.7"),
])
def test_a_listener_is_reached_by_loopback_or_its_one_address(monkeypatch: pytest.MonkeyPatch, address: str,
                                                              host: str) -> None:
    monkeypatch.setattr(sysinfo, "engine_processes", lambda: [_proc(5, ["ollama", "serve"], 1.0)])
    monkeypatch.setattr(sysinfo, "listeners", lambda: ([_lst(11434, address, [5])], 0))
    assert listener.engine_listeners()[0]["root"] == f"http://{host}:11434"


def test_no_engine_process_asks_no_socket_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysinfo, "engine_processes", lambda: [_proc(5, ["bash"], 1.0)])
    monkeypatch.setattr(sysinfo, "listeners", lambda: (_ for _ in ()).throw(AssertionError("asked")))
    assert listener.engine_listeners() == []


def test_an_engine_that_listens_nowhere_is_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysinfo, "engine_processes", lambda: [_proc(5, ["ollama", "serve"], 1.0)])
    monkeypatch.setattr(sysinfo, "listeners", lambda: ([_lst(80, "0.0.0.0", [6])], 0))
    assert listener.engine_listeners() == []


def test_a_listener_at_the_same_port_on_two_families_sorts_ipv4_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysinfo, "engine_processes", lambda: [_proc(5, ["ollama", "serve"], 1.0)])
    monkeypatch.setattr(sysinfo, "listeners",
                        lambda: ([_lst(80, "fe80::2", [5], "IPv6"), _lst(80, "192.0.2.9", [5], "IPv4")], 0))
    assert listener.engine_listeners()[0]["address"] == "192.0.2.9"
