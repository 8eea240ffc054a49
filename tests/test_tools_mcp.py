"""`[tools] mcp`: real MCP servers (the official SDK) over stdio and streamable HTTP on loopback, listed and digested.

A changed tool description is a changed execution system: agents read descriptions.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from execsys import trust

pytest.importorskip("mcp", reason="the MCP SDK comes with the test extra (pip install -e '.[test]')")

SERVER = '''
import pathlib, sys
from mcp.server.mcpserver import MCPServer

here = pathlib.Path(__file__).parent
server = MCPServer(name="demo-tools", version="1.4.0")

@server.tool(description=(here / "search_description.txt").read_text().strip())
def search(query: str) -> str:
    return "results for " + query

@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b

if len(sys.argv) > 2 and sys.argv[1] == "--http":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
else:
    server.run()
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "server.py").write_text(SERVER)
    (project / "search_description.txt").write_text("Search the corpus for documents matching a query.\n")
    return project


@pytest.fixture
def http_server(project: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(project / "server.py"), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_stdio_and_http_servers_listed_digested_and_a_description_edit_moves_the_identity(
        cli, project: Path, http_server: str) -> None:
    (project / "execsys.toml").write_text(f"""
[tools]
enabled = ["search", "add", "browse"]
packages = ["mcp"]
mcp = [{{ name = "local", command = ["{sys.executable}", "server.py"] }},
       {{ name = "remote", url = "{http_server}" }}]
""")
    trust.trust(project / "execsys.toml")  # the test's own declaration: its author trusts it
    # no harness command declared: packages are read from the python3 a bare command would run
    path_env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    pinned = cli("pin", "--json", cwd=project, timeout=180, env=path_env)
    assert pinned.returncode == 0, pinned.stderr
    lock = pinned.json()
    tools = lock["components"]["tools"]["observed"]
    local, remote = tools["servers"]
    assert (local["transport"], remote["transport"]) == ("stdio", "streamable-http")
    assert local["server"] == remote["server"] == {"name": "demo-tools", "version": "1.4.0"}
    assert [t["name"] for t in local["tools"]] == ["add", "search"]
    assert local["tools"] == remote["tools"]  # the same server code over two transports: the same tools
    assert len(local["tools"][1]["description_blake3"]) == 64
    from importlib import metadata

    assert tools["packages"]["versions"] == {"mcp": metadata.version("mcp")}
    assert "declared tools that no MCP server offers: browse" in lock["notes"]

    assert cli("verify", cwd=project, timeout=180, env=path_env).returncode == 0
    (project / "search_description.txt").write_text("Search the web and follow every link you find.\n")
    moved = cli("verify", cwd=project, timeout=180, env=path_env)
    assert moved.returncode == 1
    assert "tools: changed (tool search: description changed)" in moved.stdout
    assert "new-identity" in moved.stdout


def test_unreachable_server_is_one_line_at_pin(cli, project: Path) -> None:
    (project / "execsys.toml").write_text(f'[tools]\nmcp = [{{ name = "gone", url = "http://127.0.0.1:{_free_port()}/mcp" }}]\n')
    result = cli("pin", cwd=project)
    assert result.returncode == 2
    assert "MCP server 'gone': cannot list its tools (ConnectError" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_missing_sdk_names_the_extra(cli, project: Path, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no mcp here')\n")
    (project / "execsys.toml").write_text('[tools]\nmcp = [{ name = "x", command = ["true"] }]\n')
    trust.trust(project / "execsys.toml")  # the test's own declaration: its author trusts it
    result = cli("pin", cwd=project, env={"PYTHONPATH": str(shadow.parent)})
    assert result.returncode == 2
    assert "pip install 'execsys[mcp]'" in result.stderr and result.stderr.count("\n") == 1


def test_server_gone_at_verify_is_unverifiable_not_changed(cli, project: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(project / "server.py"), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        (project / "execsys.toml").write_text(f'[tools]\nmcp = [{{ name = "remote", url = "http://127.0.0.1:{port}/mcp" }}]\n')
        assert cli("pin", cwd=project, timeout=180).returncode == 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    report = cli("verify", "--json", cwd=project, timeout=180)
    assert report.returncode == 1
    tools = report.json()["components"]["tools"]
    assert tools["status"] == "unverifiable" and tools["changes"] == []
    assert tools["reason"].startswith("MCP server(s) did not answer: remote (MCP server 'remote': cannot list its tools")
