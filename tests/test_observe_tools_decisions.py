"""The tools and workflow observers as decision tables (issue 26): each MCP server entry's checks and
their exact messages, a tool's digests, a real stdio MCP server listed in-process (and one that never
answers, and one that cannot start), tools declared but not offered, verify's change summary, and the
workflow's package versions and config digests -- planted dist-info directories, real files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from execsys.canonical import content_id
from execsys.digest import digest_path
from execsys.errors import InputError
from execsys.observe.tools import (
    MISSING_SDK,
    _check_server,
    _one_line,
    change_summary,
    observe_server,
    observe_tools,
    tool_record,
    tools_not_offered,
)
from execsys.observe.workflow import _config_digest, observe_workflow

# -- one tool ---------------------------------------------------------------------------------------


def test_a_tool_is_its_name_and_the_digests_of_what_the_agent_reads() -> None:
    tool = {"name": "search", "description": "Search.", "inputSchema": {"type": "object"},
            "outputSchema": {"type": "string"}, "annotations": {"readOnlyHint": True}, "title": "Search",
            "icons": ["ignored"], "meta": None}
    assert tool_record(tool) == {
        "name": "search", "description_blake3": content_id("Search."),
        "schema_blake3": content_id({"inputSchema": {"type": "object"}, "outputSchema": {"type": "string"},
                                     "annotations": {"readOnlyHint": True}, "title": "Search"})}


def test_a_bare_tool_has_empty_description_and_schema() -> None:
    assert tool_record({"name": 7, "description": None, "inputSchema": None}) == {
        "name": "7", "description_blake3": content_id(""), "schema_blake3": content_id({})}
    assert tool_record({})["name"] == "None"


def test_every_schema_part_moves_the_schema_digest() -> None:
    base = {"name": "t", "inputSchema": {"a": 1}}
    digests = {tool_record(base)["schema_blake3"]}
    for key, value in (("outputSchema", {"b": 1}), ("annotations", {"c": 1}), ("title", "T")):
        digests.add(tool_record({**base, key: value})["schema_blake3"])
    assert len(digests) == 4
    assert tool_record({**base, "description": "x"})["schema_blake3"] == tool_record(base)["schema_blake3"]


# -- the server entries ------------------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "message"), [
    ("srv", "[tools] mcp[0]: each MCP server needs a name: {name, command = [...]} or {name, url}"),
    ({"command": ["x"]}, "[tools] mcp[0]: each MCP server needs a name: {name, command = [...]} or {name, url}"),
    ({"name": "", "url": "http://x"}, "[tools] mcp[0]: each MCP server needs a name: {name, command = [...]} or {name, url}"),
    ({"name": 3, "url": "http://x"}, "[tools] mcp[0]: each MCP server needs a name: {name, command = [...]} or {name, url}"),
    ({"name": "s"}, "[tools] mcp[0] (s): give exactly one of command = [...] or url"),
    ({"name": "s", "command": ["x"], "url": "http://x"}, "[tools] mcp[0] (s): give exactly one of command = [...] or url"),
    ({"name": "s", "command": "x"}, "[tools] mcp[0] (s): command must be a non-empty list of strings"),
    ({"name": "s", "command": []}, "[tools] mcp[0] (s): command must be a non-empty list of strings"),
    ({"name": "s", "command": ["x", 1]}, "[tools] mcp[0] (s): command must be a non-empty list of strings"),
    ({"name": "s", "url": "ftp://x"}, "[tools] mcp[0] (s): url must be an http(s) URL"),
    ({"name": "s", "url": 5}, "[tools] mcp[0] (s): url must be an http(s) URL"),
    ({"name": "s", "url": "HTTP://x"}, "[tools] mcp[0] (s): url must be an http(s) URL"),
])
def test_a_bad_server_entry_is_refused_by_its_place(entry: Any, message: str) -> None:
    with pytest.raises(InputError) as caught:
        _check_server(entry, 0)
    assert str(caught.value) == message


@pytest.mark.parametrize("entry", [{"name": "s", "command": ["x"]}, {"name": "s", "url": "http://h/mcp"},
                                   {"name": "s", "url": "https://h/mcp"}, {"name": "s", "command": ["x", "-y"],
                                                                           "url": None}])
def test_a_good_server_entry_passes_as_it_is(entry: dict) -> None:
    assert _check_server(entry, 4) is entry


def test_the_place_is_the_entry_s_index() -> None:
    with pytest.raises(InputError, match=r"^\[tools\] mcp\[1\] \(b\): "):
        observe_tools({"mcp": [{"name": "a", "url": "http://x"}, {"name": "b"}]}, base_dir=None)


# -- real stdio servers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sdk() -> None:
    pytest.importorskip("mcp", reason="the MCP SDK comes with the test extra (pip install -e '.[test]')")


SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer(name="demo-tools", version="1.4.0")

@server.tool(description="Search the corpus.")
def search(query: str) -> str:
    return query

@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b

server.run()
'''


@pytest.fixture(scope="module")
def listed(sdk: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    project = tmp_path_factory.mktemp("mcp")
    (project / "server.py").write_text(SERVER)
    entry = {"name": "local", "command": [sys.executable, "server.py", "--api-key", "sk-hidden-value"]}
    return project, observe_server(entry, project)


def test_a_stdio_server_is_listed_sorted_with_its_name_and_version(listed: tuple[Path, dict]) -> None:
    _project, record = listed
    assert record["name"] == "local" and record["transport"] == "stdio"
    assert record["command"] == [sys.executable, "server.py", "--api-key", "<redacted>"]
    assert record["server"] == {"name": "demo-tools", "version": "1.4.0"}
    assert [t["name"] for t in record["tools"]] == ["add", "search"]
    assert record["tools"][1]["description_blake3"] == content_id("Search the corpus.")
    assert "url" not in record


def test_a_server_that_never_answers_times_out_in_its_own_words(sdk: None, tmp_path: Path) -> None:
    entry = {"name": "mute", "command": [sys.executable, "-c", "import time; time.sleep(30)"]}
    with pytest.raises(InputError) as caught:
        observe_server(entry, tmp_path, timeout=0.5)
    assert str(caught.value) == "MCP server 'mute': no tools/list answer within 0.5s"


def test_a_server_that_cannot_start_is_one_line(sdk: None, tmp_path: Path) -> None:
    entry = {"name": "gone", "command": [str(tmp_path / "no-such-server")]}
    with pytest.raises(InputError) as caught:
        observe_server(entry, tmp_path, timeout=10)
    message = str(caught.value)
    assert message.startswith("MCP server 'gone': cannot list its tools (") and message.endswith(")")
    assert "\n" not in message


def test_an_http_server_that_refuses_is_recorded_at_verify(sdk: None, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    declared = {"mcp": [{"name": "web", "url": f"http://u:pw@127.0.0.1:{port}/mcp"}]}
    with pytest.raises(InputError, match=r"^MCP server 'web': cannot list its tools \(ConnectError"):
        observe_tools(declared, base_dir=tmp_path)
    observed = observe_tools(declared, base_dir=tmp_path, require_servers=False)
    assert observed["servers"] == []
    assert len(observed["unreachable"]) == 1
    assert observed["unreachable"][0].startswith("web (MCP server 'web': cannot list its tools (ConnectError")


def test_without_the_sdk_mcp_is_refused_and_packages_still_read(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(InputError) as caught:
        observe_tools({"mcp": [{"name": "s", "url": "http://x"}]}, base_dir=tmp_path)
    assert str(caught.value) == MISSING_SDK == "[tools] mcp needs the MCP SDK: install it with pip install 'execsys[mcp]'"
    assert observe_tools({"mcp": []}, base_dir=tmp_path) == {}


# -- one line of an exception -----------------------------------------------------------------------------


class Group(Exception):
    """An exception group as anyio raises one (``exceptions``), on every Python the project supports."""

    def __init__(self, message: str, exceptions: list[BaseException]) -> None:
        super().__init__(message)
        self.exceptions = exceptions


def test_one_line_of_a_nested_group_is_its_first_cause() -> None:
    inner = Group("outer", [Group("mid", [ValueError("first\n  cause"), KeyError("x")])])
    assert _one_line(inner) == "ValueError: first cause"
    assert _one_line(RuntimeError("a" * 300)) == ("RuntimeError: " + "a" * 300)[:200]
    assert "hunter2" not in _one_line(OSError("https://u:hunter2@h/x refused"))


# -- packages and what is offered ---------------------------------------------------------------------------


def fake_python(tmp_path: Path, dists: dict[str, str]) -> Path:
    site = tmp_path / "site"
    for name, version in dists.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
    script = tmp_path / "py" / "python3"
    script.parent.mkdir()
    info = {"executable": str(script), "version": "3.12", "prefix": "/p", "base_prefix": "/p", "path": [str(site)]}
    script.write_text(f"#!/bin/sh\necho '{json.dumps(info)}'\n")
    script.chmod(0o755)
    return script


def test_tool_packages_are_read_from_the_harness_s_interpreter(tmp_path: Path) -> None:
    interp = fake_python(tmp_path, {"langchain_core": "0.3.1"})
    assert observe_tools({"packages": ["langchain-core"]}, base_dir=tmp_path, harness_interpreter=str(interp)) == {
        "packages": {"interpreter": str(interp), "versions": {"langchain-core": "0.3.1"}}}
    assert observe_tools({}, base_dir=tmp_path) == {}


def test_tool_packages_without_a_harness_interpreter_read_path_s_python3(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    interp = fake_python(tmp_path, {"smolagents": "1.2"})
    monkeypatch.setenv("PATH", str(interp.parent))
    assert observe_tools({"packages": ["smolagents"]}, base_dir=tmp_path)["packages"]["versions"] == {"smolagents": "1.2"}


@pytest.mark.parametrize(("enabled", "observed", "missing"), [
    (["a", "b", "c"], {"servers": [{"tools": [{"name": "a"}]}, {"tools": [{"name": "c"}]}]}, ["b"]),
    (["b", "a", 3], {"servers": [{"tools": []}, {}]}, ["b", "a", "3"]),
    (["a"], {"servers": []}, []),  # no server observed: nothing to say
    (["a"], {}, []),
    (None, {"servers": [{"tools": [{"name": "a"}]}]}, []),
    ([5], {"servers": [{"tools": [{"name": "5"}]}]}, []),
])
def test_tools_declared_but_not_offered(enabled: list | None, observed: dict, missing: list) -> None:
    assert tools_not_offered({"enabled": enabled}, observed) == missing


# -- verify's summary -----------------------------------------------------------------------------------


OBSERVED = {"servers": [{"tools": [{"name": "add"}, {"name": "search"}]}]}


@pytest.mark.parametrize(("changes", "observed", "summary"), [
    ([], OBSERVED, None),
    ([{"field": "observed.servers[0].tools[1].description_blake3"}], OBSERVED, "tool search: description changed"),
    ([{"field": "observed.servers[0].tools[0].schema_blake3"}], OBSERVED, "tool add: schema changed"),
    ([{"field": "observed.servers[0].tools[5].schema_blake3"}], OBSERVED, "tool #6 of server #1: schema changed"),
    ([{"field": "observed.servers[2].tools[0].schema_blake3"}], OBSERVED, "tool #1 of server #3: schema changed"),
    ([{"field": "observed.servers[0].tools[0].schema_blake3"}], None, "tool #1 of server #1: schema changed"),
    ([{"field": "observed.servers[0].tools[0].schema_blake3"}], {"servers": None},
     "tool #1 of server #1: schema changed"),
    ([{"field": "observed.servers[0].tools[0].schema_blake3x"}], OBSERVED, None),
    ([{"field": "xobserved.servers[0].tools[0].schema_blake3"}], OBSERVED, None),
    ([{"field": "observed.servers[0].tools[0].name", "old": "add", "new": "plus"}], OBSERVED, "tool add → plus"),
    ([{"field": "observed.servers[0].tools[0].names"}], OBSERVED, None),
    ([{"field": "observed.servers[1].server.version", "old": "1.0", "new": "1.1"}], OBSERVED,
     "server version 1.0 → 1.1"),
    ([{"field": "observed.servers[1].server.version2"}], OBSERVED, None),
    ([{"field": "observed.servers[0].tools[1].description_blake3"},
      {"field": "observed.servers[0].tools[1].description_blake3"},
      {"field": "observed.servers[0].server.version", "old": 1, "new": 2}, {"field": None}, {}], OBSERVED,
     "tool search: description changed; server version 1 → 2"),
])
def test_tools_change_summary(changes: list, observed: dict | None, summary: str | None) -> None:
    assert change_summary(changes, observed) == summary


# -- the workflow ---------------------------------------------------------------------------------------


def test_workflow_config_files_are_digested_beside_the_declaration(tmp_path: Path) -> None:
    (tmp_path / "graph.yaml").write_text("nodes: []\n")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "a.txt").write_text("a")
    observed = observe_workflow({"config": ["graph.yaml", "prompts", "gone.yaml"]}, base_dir=tmp_path)
    assert observed == {"config": [
        {"path": str(tmp_path / "graph.yaml"), "digest": digest_path(tmp_path / "graph.yaml").digest},
        {"path": str(tmp_path / "prompts"), "digest": digest_path(tmp_path / "prompts").digest},
        {"path": str(tmp_path / "gone.yaml"), "digest": None, "note": "not found on this machine"}]}


def test_a_workflow_config_that_cannot_be_hashed_is_a_note(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "dangling").symlink_to(tmp_path / "nowhere")
    got = _config_digest("cfg", tmp_path)
    assert got["path"] == str(tmp_path / "cfg") and got["digest"] is None
    assert "dangling symlink" in got["note"]


def test_without_a_base_a_workflow_config_is_the_cwd_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("x")
    assert _config_digest("c.yaml", None) == {"path": str(tmp_path / "c.yaml"),
                                              "digest": digest_path(tmp_path / "c.yaml").digest}


def test_workflow_packages_and_nothing_declared(tmp_path: Path) -> None:
    interp = fake_python(tmp_path, {"langgraph": "0.2.0"})
    assert observe_workflow({"packages": ["LangGraph", "dspy"]}, base_dir=tmp_path,
                            harness_interpreter=str(interp)) == {
        "packages": {"interpreter": str(interp), "versions": {"LangGraph": "0.2.0", "dspy": None}}}
    assert observe_workflow({}, base_dir=tmp_path) == {}
    assert observe_workflow({"packages": [], "config": []}, base_dir=tmp_path) == {}


def test_workflow_packages_without_a_harness_interpreter_read_path_s_python3(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    interp = fake_python(tmp_path, {"dspy": "2.5"})
    monkeypatch.setenv("PATH", str(interp.parent))
    assert observe_workflow({"packages": ["dspy"]}, base_dir=tmp_path)["packages"]["versions"] == {"dspy": "2.5"}
