"""The executed log as tables, in process: what is written (header first, one sorted, scrubbed JSON line
per event, flushed as it happens), what is never opened (an earlier log, a symlink, a directory), and
what reading it back refuses, naming the line.

A user notices each row: a second run that truncates the first run's evidence, a log a crash left
empty, a timestamp that is not a time accepted as one, an error that points at the wrong line.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from execsys.errors import InputError
from execsys.plan.log import LOG_SCHEMA, ExecutedLog, parse_time, read_log

HEADER = {"schema": LOG_SCHEMA, "plan": "d" * 64}


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_schema() -> None:
    assert LOG_SCHEMA == "execsys.plan-log/1"


@pytest.mark.parametrize(("text", "moment"), [
    pytest.param("2026-11-30T10:00:00.000Z", datetime(2026, 11, 30, 10, tzinfo=timezone.utc), id="zulu"),
    pytest.param("2026-11-30T10:00:00+00:00", datetime(2026, 11, 30, 10, tzinfo=timezone.utc), id="offset"),
    pytest.param("2026-11-30T12:00:00+02:00", datetime(2026, 11, 30, 10, tzinfo=timezone.utc), id="another-zone"),
])
def test_parse_time(text, moment) -> None:
    assert parse_time(text) == moment
    assert parse_time(text).utcoffset() is not None


def test_parse_time_refuses_what_is_not_a_time() -> None:
    with pytest.raises(ValueError):
        parse_time("yesterday")


# -- writing -------------------------------------------------------------------------------------------

def test_the_header_then_each_event_is_on_disk_as_it_happens(tmp_path) -> None:
    path = tmp_path / "run.executed.jsonl"
    log = ExecutedLog(path, dict(HEADER))
    assert lines(path) == [HEADER]  # flushed before anything else happens
    row = log.event("case", case="c1", arm="A", outcome="ü")
    assert set(row) == {"event", "at", "case", "arm", "outcome"} and row["event"] == "case"
    before = datetime.now(timezone.utc)
    assert abs(parse_time(row["at"]) - before) < timedelta(minutes=5)
    assert lines(path) == [HEADER, row]  # flushed without close
    assert "ü" in path.read_text(encoding="utf-8")  # not escaped to \\u00fc
    log.event("window-end")
    log.close()
    assert [r.get("event") for r in lines(path)] == [None, "case", "window-end"]
    assert log.events == [row, lines(path)[2]]
    assert log.header == HEADER


def test_each_line_has_sorted_keys(tmp_path) -> None:
    path = tmp_path / "log.jsonl"
    log = ExecutedLog(path, {"schema": LOG_SCHEMA, "b": 1, "a": 2})
    log.event("z", y=1, b=2)
    log.close()
    for line in path.read_text().splitlines():
        keys = list(json.loads(line))
        assert keys == sorted(keys)


def test_secrets_are_scrubbed_from_the_file_but_kept_in_memory(tmp_path) -> None:
    path = tmp_path / "log.jsonl"
    log = ExecutedLog(path, dict(HEADER))
    row = log.event("endpoint", api_key="sk-live-abcdefghijklmnopqrstuvwxyz012345")
    log.close()
    assert "sk-live-abcdefghijklmnopqrstuvwxyz012345" not in path.read_text()
    assert row["api_key"] == "sk-live-abcdefghijklmnopqrstuvwxyz012345"


def test_without_a_path_nothing_is_written_and_events_are_kept(tmp_path) -> None:
    log = ExecutedLog(None, dict(HEADER))
    log.event("window-start")
    log.close()
    assert [e["event"] for e in log.events] == ["window-start"]
    assert list(tmp_path.iterdir()) == []
    empty = ExecutedLog("", dict(HEADER))
    empty.event("x")
    empty.close()
    assert list(tmp_path.iterdir()) == []


def test_an_earlier_log_is_never_overwritten(tmp_path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("earlier evidence\n")
    with pytest.raises(InputError) as err:
        ExecutedLog(path, dict(HEADER))
    assert str(err.value) == (f"{path}: already exists: execsys never overwrites an executed log; "
                              "give --log a new file")
    assert path.read_text() == "earlier evidence\n"


def test_a_symlink_at_the_name_is_not_followed(tmp_path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("the plan\n")
    link = tmp_path / "log.jsonl"
    link.symlink_to(target)
    with pytest.raises(InputError):
        ExecutedLog(link, dict(HEADER))
    assert target.read_text() == "the plan\n"
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError):
        ExecutedLog(dangling, dict(HEADER))
    assert not (tmp_path / "nowhere").exists()


def test_a_directory_or_a_missing_parent_is_one_line(tmp_path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(InputError) as err:
        ExecutedLog(tmp_path / "dir", dict(HEADER))
    assert str(err.value) in (f"{tmp_path / 'dir'}: already exists: execsys never overwrites an executed log; "
                              "give --log a new file",)
    with pytest.raises(InputError) as missing:
        ExecutedLog(tmp_path / "no" / "log.jsonl", dict(HEADER))
    assert str(missing.value) == (f"{tmp_path / 'no' / 'log.jsonl'}: cannot write the executed log "
                                  f"({os.strerror(2)})")


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o000])
def test_the_new_file_is_a_plain_one_under_the_umask(tmp_path, umask) -> None:
    path = tmp_path / "log.jsonl"
    old = os.umask(umask)
    try:
        ExecutedLog(path, dict(HEADER)).close()
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # never executable


# -- reading back --------------------------------------------------------------------------------------

def write(path, *rows, raw: str | None = None):
    text = raw if raw is not None else "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")
    return path


EVENT = {"event": "window-start", "at": "2026-11-30T10:00:00.000Z"}
CASE = {"event": "case", "at": "2026-11-30T10:00:01.000Z", "case": "c1", "arm": "A"}


def test_a_log_reads_back_header_and_events(tmp_path) -> None:
    path = write(tmp_path / "log.jsonl", HEADER, EVENT, "", "   ", CASE)
    assert read_log(path) == (HEADER, [EVENT, CASE])


def test_a_written_log_reads_back(tmp_path) -> None:
    path = tmp_path / "log.jsonl"
    log = ExecutedLog(path, dict(HEADER))
    log.event("case", case="c1", arm="A")
    log.close()
    header, events = read_log(path)
    assert header == HEADER and events == log.events


def test_a_missing_log(tmp_path) -> None:
    with pytest.raises(InputError) as err:
        read_log(tmp_path / "none.jsonl")
    assert str(err.value) == f"executed log {tmp_path / 'none.jsonl'}: no such file"


def test_a_log_that_is_not_text(tmp_path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\xff\xfe\n")
    with pytest.raises(InputError, match=r"^executed log .*log\.jsonl: cannot read \("):
        read_log(path)
    with pytest.raises(InputError) as directory:
        read_log(tmp_path)
    assert str(directory.value) == f"executed log {tmp_path}: is a directory, not a regular file"


@pytest.mark.parametrize(("rows", "message"), [
    pytest.param([HEADER, "{nope"], "line 2: not JSON (expected execsys.plan-log/1 JSON Lines)", id="not-json"),
    pytest.param([HEADER, EVENT, "[1, 2]"], "line 3: expected a JSON object", id="a-list"),
    pytest.param([HEADER, "", "7"], "line 3: expected a JSON object", id="numbered-with-blank-lines"),
    pytest.param([HEADER, {"at": EVENT["at"]}], "line 2: every event needs 'event' and 'at'", id="no-event"),
    pytest.param([HEADER, {"event": "x"}], "line 2: every event needs 'event' and 'at'", id="no-at"),
    pytest.param([HEADER, {"event": 1, "at": EVENT["at"]}], "line 2: every event needs 'event' and 'at'",
                 id="event-not-a-string"),
    pytest.param([HEADER, EVENT, {"event": "x", "at": 5}], "line 3: every event needs 'event' and 'at'",
                 id="at-not-a-string"),
    pytest.param([HEADER, EVENT, {"event": "x", "at": "noon"}], "line 3: 'at' is not an ISO 8601 time",
                 id="at-not-a-time"),
    pytest.param([HEADER, {**CASE, "case": None}], "line 2: a case event needs 'case' and 'arm'", id="case-no-id"),
    pytest.param([HEADER, {**CASE, "arm": 1}], "line 2: a case event needs 'case' and 'arm'", id="case-arm-number"),
])
def test_a_bad_line_is_named(tmp_path, rows, message) -> None:
    path = write(tmp_path / "log.jsonl", *rows)
    with pytest.raises(InputError) as err:
        read_log(path)
    assert str(err.value) == f"executed log {path} {message}"


def test_an_event_line_after_blank_ones_is_numbered_by_its_position(tmp_path) -> None:
    # the events' numbers count from the header's line 1 (blank lines are skipped before numbering)
    path = write(tmp_path / "log.jsonl", HEADER, EVENT, {"event": "x", "at": "later"})
    with pytest.raises(InputError, match=r"line 3: 'at'"):
        read_log(path)


@pytest.mark.parametrize("rows", [
    pytest.param([], id="empty"),
    pytest.param(["", " "], id="only-blank-lines"),
    pytest.param([EVENT], id="no-header"),
    pytest.param([{"schema": "execsys.plan-log/2"}], id="another-schema"),
])
def test_not_a_log(tmp_path, rows) -> None:
    path = write(tmp_path / "log.jsonl", *rows)
    with pytest.raises(InputError) as err:
        read_log(path)
    assert str(err.value) == (f"executed log {path}: not an execsys.plan-log/1 log "
                              "(its first line must name the schema)")


def test_a_header_alone_is_a_log_with_no_events(tmp_path) -> None:
    assert read_log(write(tmp_path / "log.jsonl", HEADER)) == (HEADER, [])


def test_a_non_case_event_needs_no_case_or_arm(tmp_path) -> None:
    restart = {"event": "restart", "at": EVENT["at"], "arm": 3}
    assert read_log(write(tmp_path / "log.jsonl", HEADER, restart))[1] == [restart]
