"""The executed log (``execsys.plan-log/1``): what a plan run did, one JSON line per event.

It is the evidence ``plan check --executed`` judges, so it is written as things happen and
flushed line by line -- a run that crashes half-way still leaves what it did -- into a file that
did not exist before (an earlier run's log is evidence too: it is never overwritten), and read
back strictly: a line that is not an event is an input error naming the line, never a guess.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from execsys.errors import InputError
from execsys.fsutil import RECORD_FILE_LIMIT, read_bounded
from execsys.ledger import now_iso

LOG_SCHEMA = "execsys.plan-log/1"


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class ExecutedLog:
    """Appends events to the log file (none when ``path`` is None) and keeps them for the checks."""

    def __init__(self, path: str | os.PathLike[str] | None, header: dict[str, Any]):
        self.events: list[dict[str, Any]] = []
        self.header = header
        self._fh: IO[str] | None = None
        if path:
            # a new file only: O_EXCL never opens an earlier run's log (or the plan) to truncate it, never
            # follows a symlink planted at the name, and never blocks on a FIFO there
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                raise InputError(f"{path}: already exists: execsys never overwrites an executed log; "
                                 "give --log a new file") from None
            except OSError as exc:
                reason = "is a directory" if Path(path).is_dir() else (exc.strerror or str(exc))
                raise InputError(f"{path}: cannot write the executed log ({reason})") from None
            self._fh = os.fdopen(fd, "w", encoding="utf-8")
        self._write(header)

    def _write(self, row: dict[str, Any]) -> None:
        if self._fh:
            from execsys.redact import scrub

            self._fh.write(json.dumps(scrub(row), ensure_ascii=False, sort_keys=True) + "\n")
            self._fh.flush()

    def event(self, name: str, **data: Any) -> dict[str, Any]:
        row = {"event": name, "at": now_iso(), **data}
        self.events.append(row)
        self._write(row)
        return row

    def close(self) -> None:
        if self._fh:
            self._fh.close()


def read_log(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Header and events of an executed log (``execsys.plan-log/1`` JSON Lines)."""
    try:
        lines = read_bounded(path, RECORD_FILE_LIMIT, "executed log").decode("utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"executed log {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"executed log {path}: cannot read ({exc})") from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise InputError(f"executed log {path} line {number}: not JSON (expected {LOG_SCHEMA} JSON Lines)") from None
        if not isinstance(row, dict):
            raise InputError(f"executed log {path} line {number}: expected a JSON object")
        rows.append(row)
    if not rows or rows[0].get("schema") != LOG_SCHEMA:
        raise InputError(f"executed log {path}: not an {LOG_SCHEMA} log (its first line must name the schema)")
    header, events = rows[0], rows[1:]
    for number, event in enumerate(events, 2):
        if not isinstance(event.get("event"), str) or not isinstance(event.get("at"), str):
            raise InputError(f"executed log {path} line {number}: every event needs 'event' and 'at'")
        try:
            parse_time(event["at"])
        except ValueError:
            raise InputError(f"executed log {path} line {number}: 'at' is not an ISO 8601 time") from None
        if event["event"] == "case" and not (isinstance(event.get("case"), str) and isinstance(event.get("arm"), str)):
            raise InputError(f"executed log {path} line {number}: a case event needs 'case' and 'arm'")
    return header, events
