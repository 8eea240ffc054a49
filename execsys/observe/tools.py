"""Observe the tools component: what each declared MCP server offers, as the agent would read it.

Agents choose and call tools from their names, descriptions and input schemas, so an edited
description is a changed execution system even when no code moved. For each ``[tools] mcp``
entry (``{name, command = [...]}`` over stdio, or ``{name, url}`` over streamable HTTP) this
connects through the official ``mcp`` SDK (the optional extra ``execsys[mcp]``) with a timeout,
calls ``tools/list`` and records the server's reported name and version and, per tool, the
BLAKE3 of its description and of its canonical schema. ``[tools] packages`` are observed as
installed versions; declared tool names (``enabled``) that no server offers become a note.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from execsys.errors import InputError
from execsys.redact import redact_argv, redact_url

MCP_TIMEOUT_S = 20.0
MISSING_SDK = "[tools] mcp needs the MCP SDK: install it with pip install 'execsys[mcp]'"


def _digest(value: Any) -> str:
    from execsys.canonical import content_id

    return content_id(value)


def tool_record(tool: dict[str, Any]) -> dict[str, Any]:
    """One tool as listed (wire spelling): its name and BLAKE3s of its description and canonical schema."""
    schema = {key: tool.get(key) for key in ("inputSchema", "outputSchema", "annotations", "title")
              if tool.get(key) is not None}
    return {"name": str(tool.get("name")), "description_blake3": _digest(tool.get("description") or ""),
            "schema_blake3": _digest(schema)}


def _check_server(entry: Any, index: int) -> dict[str, Any]:
    where = f"[tools] mcp[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise InputError(f"{where}: each MCP server needs a name: {{name, command = [...]}} or {{name, url}}")
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise InputError(f"{where} ({entry['name']}): give exactly one of command = [...] or url")
    if command is not None and (not isinstance(command, list) or not command
                                or not all(isinstance(w, str) for w in command)):
        raise InputError(f"{where} ({entry['name']}): command must be a non-empty list of strings")
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise InputError(f"{where} ({entry['name']}): url must be an http(s) URL")
    return entry


async def _list_tools(entry: dict[str, Any], base_dir: Path | None, timeout: float) -> tuple[dict[str, Any], list]:
    import anyio
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    with anyio.fail_after(timeout), open(os.devnull, "w") as devnull:
        if entry.get("command"):
            words = list(entry["command"])
            params = StdioServerParameters(command=words[0], args=words[1:],
                                           cwd=str(base_dir) if base_dir is not None else None)
            server: Any = stdio_client(params, errlog=devnull)  # its log lines are not ours to print
        else:
            server = str(entry["url"])
        async with Client(server, read_timeout_seconds=timeout, cache=None) as client:
            info = client.server_info
            tools: list[Any] = []
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
    server_info = info.model_dump(by_alias=True, mode="json", exclude_none=True) if info is not None else {}
    return server_info, [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools]


def observe_server(entry: dict[str, Any], base_dir: Path | None, timeout: float = MCP_TIMEOUT_S) -> dict[str, Any]:
    """One server: transport, its reported name and version, its tools (sorted by name). Raises InputError."""
    import anyio

    record: dict[str, Any] = {"name": entry["name"]}
    if entry.get("command"):
        record.update(transport="stdio", command=redact_argv([str(w) for w in entry["command"]]))
    else:
        record.update(transport="streamable-http", url=redact_url(str(entry["url"])))
    try:
        info, tools = anyio.run(_list_tools, entry, base_dir, timeout)
    except TimeoutError:
        raise InputError(f"MCP server {entry['name']!r}: no tools/list answer within {timeout:g}s") from None
    except Exception as exc:  # noqa: BLE001 - any transport/protocol failure is one line naming the server
        raise InputError(f"MCP server {entry['name']!r}: cannot list its tools ({_one_line(exc)})") from None
    record["server"] = {"name": info.get("name"), "version": info.get("version")}
    record["tools"] = sorted((tool_record(t) for t in tools), key=lambda t: t["name"])
    return record


def _one_line(exc: BaseException) -> str:
    from execsys.redact import redact_text

    inner = exc
    while getattr(inner, "exceptions", None):  # an anyio task group's ExceptionGroup: the first cause
        inner = inner.exceptions[0]  # type: ignore[attr-defined]
    return redact_text(" ".join(f"{type(inner).__name__}: {inner}".split()))[:200]


def observe_tools(declared: dict[str, Any], *, base_dir: Path | None, harness_interpreter: str | None = None,
                  require_servers: bool = True) -> dict[str, Any]:
    """``servers`` (each MCP server's tools), ``packages``; nothing when neither is declared.

    A server that does not answer raises InputError when ``require_servers`` (pin), else it is
    listed under ``unreachable`` (verify: the component is then unverifiable, not changed)."""
    observed: dict[str, Any] = {}
    servers = declared.get("mcp") or []
    if servers:
        entries = [_check_server(entry, i) for i, entry in enumerate(servers)]
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise InputError(MISSING_SDK) from None
        observed["servers"] = []
        for entry in entries:
            try:
                observed["servers"].append(observe_server(entry, base_dir))
            except InputError as exc:
                if require_servers:
                    raise
                observed.setdefault("unreachable", []).append(f"{entry['name']} ({exc})")
    if declared.get("packages"):
        from execsys.observe.grader import default_interpreter, observe_packages

        observed["packages"] = observe_packages(list(declared["packages"]),
                                                harness_interpreter or default_interpreter())
    return observed


def tools_not_offered(declared: dict[str, Any], observed: dict[str, Any]) -> list[str]:
    """Declared tool names (``[tools] enabled``) that no observed server offers."""
    if not observed.get("servers"):
        return []
    offered = {t["name"] for s in observed["servers"] for t in s.get("tools") or []}
    return [str(n) for n in declared.get("enabled") or [] if str(n) not in offered]


def change_summary(changes: list[dict[str, Any]], observed: dict[str, Any] | None = None) -> str | None:
    """``tool search: description changed`` from verify's field changes (tool lists are indexed)."""
    import re

    parts: list[str] = []
    for change in changes:
        field = str(change.get("field") or "")
        match = re.match(r"observed\.servers\[(\d+)\]\.tools\[(\d+)\]\.(description|schema)_blake3$", field)
        if match:
            server, tool = int(match.group(1)), int(match.group(2))
            try:
                label = (observed or {})["servers"][server]["tools"][tool]["name"]
            except (KeyError, IndexError, TypeError):
                label = f"#{tool + 1} of server #{server + 1}"
            parts.append(f"tool {label}: {match.group(3)} changed")
        elif re.match(r"observed\.servers\[\d+\]\.tools\[\d+\]\.name$", field):
            parts.append(f"tool {change.get('old')} → {change.get('new')}")
        elif re.match(r"observed\.servers\[\d+\]\.server\.version$", field):
            parts.append(f"server version {change.get('old')} → {change.get('new')}")
    return "; ".join(dict.fromkeys(parts)) or None
