"""Helpers shared by the TUI tests: a project directory, waiting for workers, reading widgets as text."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.text import Text


async def settle(pilot, predicate: Callable[[], bool], timeout: float = 120.0) -> None:
    """Wait for the app's workers until ``predicate()`` holds (work may start after a refresh)."""
    app = pilot.app
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    from textual.worker import WorkerCancelled, WorkerFailed

    while True:
        # a failure the app reports (a notification; tests check that); a cancelled worker was superseded
        # by a newer one of its exclusive group (a new selection): the predicate says when the work is done
        with contextlib.suppress(WorkerFailed, WorkerCancelled):
            await app.workers.wait_for_complete()
        await pilot.pause()
        if predicate():
            return
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        await asyncio.sleep(0.05)


def text_of(widget) -> str:
    """What a Static (or any widget with ``content``) shows, as plain text."""
    content = getattr(widget, "content", None)
    if content is None:
        content = widget.render()
    if isinstance(content, Text):
        return content.plain
    if isinstance(content, str):
        return content
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None, legacy_windows=False).print(content)
    return buffer.getvalue()


def write_cases(path: Path, prompts: list[tuple[str, str]], max_tokens: int = 8) -> Path:
    import json

    path.write_text("".join(json.dumps({"id": cid, "prompt": p, "max_tokens": max_tokens}) + "\n"
                            for cid, p in prompts))
    return path


async def while_running(pilot, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``predicate`` while workers are still running (for conditions met mid-way through a run)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        await pilot.pause(0.05)


def header_state(app) -> str:
    """The header's state line: which step, and whether the doctor's gate is open."""
    from textual.widgets import Static

    return text_of(app.screen.query_one("#state-line", Static))
