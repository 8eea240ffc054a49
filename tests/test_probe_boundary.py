"""The probe's operation boundary, as a user meets it on the real CLI against a real llama.cpp server:
options from their sources (flags > execsys.toml > the lock beside the declaration), one line and
``identity: null`` with its reason when no lock is found, refused inputs (a key given as a variable
name, a timeout that is no timeout), redacted progress lines, and typed events carrying what a face
shows (the TUI draws from them alone)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from execsys.declaration import parse
from execsys.errors import UsageError
from execsys.ledger import Ledger
from execsys.sources import Sources

from .test_probe_arithmetic import write_lock

pytest.importorskip("llama_cpp")

NO_IDENTITY = "no pinned identity (looked for {}): this probe will not count toward any scope"


def write_prompts(path: Path, n: int = 4, max_tokens: int = 8) -> Path:
    with path.open("w") as handle:
        for i in range(n):
            handle.write(json.dumps({"id": f"c{i:02d}", "prompt": f"Case {i}: what is {i}+{i}?",
                                     "max_tokens": max_tokens}) + "\n")
    return path


def records(ledger_path: Path, kind: str) -> list:
    if not ledger_path.exists():
        return []
    with Ledger.open(ledger_path) as ledger:
        return list(ledger.iter(kind=kind))


# -- the lock: beside the declaration, or said to be missing ------------------------------------------


def test_the_lock_beside_a_named_declaration_ties_the_probe_to_its_identity(cli, tmp_path, llama_server,
                                                                           ledger_path):
    # `execsys pin --config eval/execsys.toml` writes eval/execsys.lock.json; a probe run from the
    # repository root with the same --config must speak for that identity, and take its budget.
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "execsys.toml").write_text(f'[runtime]\nendpoint = "{llama_server.base_url}"\n')
    identity = write_lock(tmp_path / "eval" / "execsys.lock.json", {"temperature": 0, "seed": 5})
    write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "session", "--config", "eval/execsys.toml", "--cases", "cases.jsonl", "--json",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = result.json()
    assert record["identity"] == identity and record["identity_reason"] is None
    assert record["decoding"] == {"temperature": 0, "seed": 5}  # the lock's budget
    assert record["target"]["endpoints"] == [llama_server.base_url]  # [runtime] endpoint
    assert "no pinned identity" not in result.stderr
    [probe] = records(ledger_path, "probe")
    assert probe.identity == identity  # what scope counts


def test_no_lock_is_one_line_and_a_recorded_reason(cli, tmp_path, llama_server):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "execsys.toml").write_text("")
    write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", "cases.jsonl", "--json",
                 "--config", "eval/execsys.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    line = NO_IDENTITY.format(Path("eval") / "execsys.lock.json")
    assert result.stderr.splitlines().count(line) == 1
    record = result.json()
    assert record["identity"] is None and record["identity_reason"] == line


def test_a_named_lock_that_does_not_exist_is_exit_2(cli, tmp_path, llama_server, ledger_path):
    write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", "cases.jsonl",
                 "--lock", "missing.lock.json", cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("execsys probe: error: missing.lock.json: no such lock file")
    assert records(ledger_path, "probe-run") == []


def test_flags_win_over_the_declaration_and_zero_is_a_value_not_a_default():
    from execsys.probes.runner import ProbeOptions

    decl = parse('[probe]\ncases = "declared.jsonl"\ntimeout = 30\n[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n'
                 'restart = "systemctl restart vllm"\nready_timeout = 40\n')
    options = ProbeOptions.from_sources(Sources.of(decl), axis="restart", timeout=5.0)
    assert (options.cases, options.timeout, options.ready_timeout) == ("declared.jsonl", 5.0, 40.0)
    assert options.endpoints == ["http://127.0.0.1:9/v1"] and options.restart == "systemctl restart vllm"
    assert options.identity is None and options.identity_reason.startswith("no pinned identity")
    with pytest.raises(UsageError, match="--timeout must be a number of seconds greater than 0"):
        ProbeOptions.from_sources(Sources.of(decl), axis="session", timeout=0.0)
    with pytest.raises(UsageError, match="unknown axis"):
        ProbeOptions.from_sources(Sources.of(decl), axis="sideways")


def test_declared_cases_resolve_beside_the_declaration_and_the_flag_where_it_was_typed(tmp_path, monkeypatch):
    """One rule for every path in execsys.toml: `[probe] cases` is beside the file, as the grader's are."""
    from execsys.probes.runner import ProbeOptions

    monkeypatch.chdir(tmp_path)
    decl = parse('[probe]\ncases = "declared.jsonl"\n', tmp_path / "eval" / "execsys.toml")
    options = ProbeOptions.from_sources(Sources.of(decl), axis="session", endpoints=["http://127.0.0.1:9/v1"])
    assert options.cases == str(tmp_path / "eval" / "declared.jsonl")
    typed = ProbeOptions.from_sources(Sources.of(decl), axis="session", endpoints=["http://127.0.0.1:9/v1"],
                                      cases="mine.jsonl")
    assert typed.cases == "mine.jsonl"
    absolute = parse(f'[probe]\ncases = "{tmp_path}/abs.jsonl"\n', tmp_path / "eval" / "execsys.toml")
    assert ProbeOptions.from_sources(Sources.of(absolute), axis="session",
                                     endpoints=["http://127.0.0.1:9/v1"]).cases == f"{tmp_path}/abs.jsonl"


# -- refused inputs: one line, exit 2, nothing recorded ---------------------------------------------


@pytest.mark.parametrize("value", ["nan", "-5", "0", "inf"])
def test_a_timeout_that_is_no_timeout_is_refused(cli, tmp_path, llama_server, ledger_path, value):
    write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", "cases.jsonl",
                 f"--timeout={value}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("execsys probe: error: --timeout must be a number of seconds greater than 0")
    assert records(ledger_path, "probe-run") == []


KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8" * 3


@pytest.mark.parametrize("value", [KEY, "hf_" + "abcdefghijklmnopqrstuvwxyz12345678", "ghp_" + "x9" * 18,
                                   "MY KEY", "1ST_KEY", "A" * 80])
def test_api_key_env_must_name_a_variable_and_never_is_recorded(cli, tmp_path, llama_server, ledger_path, value):
    write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", "cases.jsonl",
                 "--api-key-env", value, "--json", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("execsys probe: error: --api-key-env") and "nothing was recorded" in line
    assert value not in result.stderr and result.stdout == ""
    assert records(ledger_path, "probe-run") == [] and records(ledger_path, "probe-case") == []


def test_an_unset_api_key_variable_is_a_warning_and_the_probe_runs(cli, tmp_path, llama_server, monkeypatch):
    monkeypatch.delenv("EXECSYS_TEST_UNSET_KEY", raising=False)
    write_prompts(tmp_path / "cases.jsonl")
    result = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", "cases.jsonl",
                 "--api-key-env", "EXECSYS_TEST_UNSET_KEY", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warning = ("--api-key-env EXECSYS_TEST_UNSET_KEY: that variable is not set, so requests go out without "
               "an API key")
    assert result.stderr.splitlines().count(warning) == 1
    assert result.json()["target"]["api_key_env"] == "EXECSYS_TEST_UNSET_KEY"


# -- every printed line is redacted ---------------------------------------------------------------


def test_the_restart_command_is_printed_redacted(cli, tmp_path, llama_server):
    write_prompts(tmp_path / "cases.jsonl", n=2)
    token = "ghs_" + "S3cr3tT0k3nV4lu3" * 2
    bearer = "Zm9vYmFyYmF6cXV4cXV1eA"
    restart = f"true --token {token} -H 'Authorization: Bearer {bearer}'"
    result = cli("probe", "restart", "--endpoint", llama_server.base_url, "--cases", "cases.jsonl",
                 "--restart", restart, "--json", cwd=tmp_path)
    # `true` restarts nothing: a finding (exit 1), said in a line of its own; the command stays redacted
    assert result.returncode == 1, result.stderr
    assert result.json()["evidence"]["verdict"] == "not-observed"
    [line] = [x for x in result.stderr.splitlines() if x.startswith("restarting the server before pass B: ")]
    assert "true --token <redacted>" in line
    assert token not in result.stderr and bearer not in result.stderr
    assert token not in result.stdout and bearer not in result.stdout


# -- the events carry what a face shows -----------------------------------------------------------


def test_events_carry_texts_agreement_and_the_run_id(tmp_path, llama_server, ledger_path):
    from execsys.probes.events import CaseDone, Note, PassFinished, PassStarted, ProbeFinished, RunOpened
    from execsys.probes.runner import ProbeOptions, run_probe

    cases = write_prompts(tmp_path / "cases.jsonl", n=3)
    events: list = []
    lock = tmp_path / "execsys.lock.json"
    options = ProbeOptions.from_sources(Sources.of(parse(""), lock_file=lock), axis="session",
                                        endpoints=[llama_server.base_url], cases=str(cases), ledger=ledger_path)
    record = run_probe(options, on_event=events.append, cancel=threading.Event())
    kinds = [type(e) for e in events]
    assert kinds[0] is Note and events[0].message == NO_IDENTITY.format(lock)
    assert kinds[1] is RunOpened and events[1] == RunOpened(record.run, resumed=False)
    assert kinds[-1] is ProbeFinished and events[-1].record is record
    assert kinds.count(PassStarted) == 2 and kinds.count(PassFinished) == 2
    done = [e for e in events if isinstance(e, CaseDone)]
    assert len(done) == 6
    with Ledger.open(ledger_path) as ledger:
        for event in done:
            row = ledger.child(record.run, f"{event.pass_index}:{event.case_id}")
            assert (event.text, event.digest) == (row.body["text"], row.body["digest"])
    assert all(e.agrees is None for e in done if e.pass_index == 0)  # nothing to compare with yet
    assert all(e.agrees is True for e in done if e.pass_index == 1)  # measured: llama.cpp repeats itself
    assert [e.agreement.n for e in done if e.pass_index == 1] == [1, 2, 3]
    finished_b = [e for e in events if isinstance(e, PassFinished)][1]
    assert (finished_b.agreement.m, finished_b.agreement.n) == (record.m, record.n) == (3, 3)
    assert finished_b.agreement.text() == "3/3 = 1.00 (95% CI 0.44–1.00)"
    # resuming the finished run opens it as resumed and hands back the stored record
    events.clear()
    options.resume = record.run
    again = run_probe(options, on_event=events.append)
    assert again.id == record.id and RunOpened(record.run, resumed=True) in events


@pytest.mark.parametrize(("flags", "message"), [
    ({"retries": -1}, "--retries must be 0 or more"),
    ({"concurrency": 1_000_000_000}, "--concurrency and --load are at most 1024 requests in flight"),
    ({"concurrency": 1025}, "--concurrency and --load are at most 1024 requests in flight"),
    ({"axis": "concurrency", "load": 1025}, "--concurrency and --load are at most 1024 requests in flight"),
], ids=["negative-retries", "a-billion-in-flight", "just-over", "load-just-over"])
def test_numbers_that_cannot_be_a_probe_are_refused_before_anything_runs(flags, message):
    from execsys.probes.runner import ProbeOptions

    decl = parse('[probe]\ncases = "c.jsonl"\n')
    given = {"axis": "session", "endpoints": ["http://127.0.0.1:9/v1"], **flags}
    with pytest.raises(UsageError, match=re.escape(message)):
        ProbeOptions.from_sources(Sources.of(decl), **given)
    limit = {key: (0 if key == "retries" else 1024) for key in flags if key != "axis"}
    ProbeOptions.from_sources(Sources.of(decl), **{**given, **limit})  # the boundary itself is fine
