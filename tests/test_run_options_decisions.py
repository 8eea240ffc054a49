"""What ``execsys run`` was asked to do (execsys/run/options.py), as tables: each flag's default, each
value refused before anything runs with the sentence a user reads, the job's identity read from the
environment, and where the lock of a run inside a job comes from."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from execsys.errors import InputError, UsageError
from execsys.proc import MAX_WAIT_S
from execsys.redact import scrub
from execsys.run import options as options_module
from execsys.run.options import (
    DEFAULT_WATCH_S,
    GATES,
    JOB_IDENTITY_ENV,
    JOB_LOCK_ENV,
    JobIdentity,
    RunOptions,
    load_run_sources,
    signing_key,
)
from execsys.run.shard import Shard
from execsys.sources import load_sources


@pytest.fixture
def sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "EXECSYS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return load_sources(None, None, ledger=tmp_path / "ledger.sqlite3")


def make(sources, **overrides) -> RunOptions:
    overrides.setdefault("command", [sys.executable, "-c", "pass"])
    return RunOptions.from_sources(sources, **overrides)


def test_the_defaults(sources, tmp_path) -> None:
    options = make(sources)
    assert options.command == [sys.executable, "-c", "pass"]
    assert (options.gate, options.override, options.repin, options.watch_s) == ("fail", None, False, DEFAULT_WATCH_S)
    assert DEFAULT_WATCH_S == 30.0 and GATES == ("fail", "warn", "off")
    assert (options.results, options.sidecar_dir, options.cwd) == ([], None, tmp_path)
    assert (options.child_stdout_to_stderr, options.grace_s, options.job) == (False, 10.0, None)
    assert (options.sign_key, options.signer, options.shard) == (None, None, None)
    assert options.ledger == tmp_path / "ledger.sqlite3"
    assert options.lock is None and options.lock_path == tmp_path / "execsys.lock.json"
    assert options.lock_path.is_absolute()


def test_what_is_given_is_kept(sources, tmp_path) -> None:
    (tmp_path / "side").mkdir()
    (tmp_path / "out").mkdir()
    job = JobIdentity(tmp_path / "l", "id")
    options = make(sources, gate="warn", override="  known stray ", repin=True, watch_s=0, results=["out/a.json"],
                   sidecar_dir="side", cwd=".", child_stdout_to_stderr=True, grace_s=2, job=job, shard="1/4@g",
                   environ={})
    assert (options.gate, options.override, options.repin, options.watch_s) == ("warn", "known stray", True, 0.0)
    assert options.results == ["out/a.json"] and options.sidecar_dir == tmp_path / "side"
    assert options.cwd == tmp_path and options.cwd.is_absolute()
    assert (options.child_stdout_to_stderr, options.grace_s, options.job) == (True, 2.0, job)
    assert options.shard == Shard(1, 4, "flag", "g")
    assert isinstance(options.watch_s, float) and isinstance(options.grace_s, float)


def test_the_shard_is_read_from_the_process_environment_unless_one_is_given(sources, monkeypatch) -> None:
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    assert make(sources).shard == Shard(3, None, "kubernetes", None)
    assert make(sources, environ={}).shard is None
    assert make(sources, environ={"SLURM_ARRAY_TASK_ID": "2"}).shard == Shard(2, None, "slurm", None, "2")


@pytest.mark.parametrize(("overrides", "error", "message"), [
    pytest.param({"command": []}, UsageError, "no harness command: give it after '--', e.g. execsys run -- lm_eval "
                                              "--model ...", id="no-command"),
    pytest.param({"command": None}, UsageError, "no harness command", id="none-command"),
    pytest.param({"command": ["no-such-harness-xyz"]}, InputError,
                 "harness command not found: 'no-such-harness-xyz' (not on PATH, or not executable)",
                 id="not-on-path"),
    pytest.param({"command": ["./missing.sh"]}, InputError, "harness command not found: './missing.sh'",
                 id="relative-missing"),
    pytest.param({"gate": "strict"}, UsageError, "--gate 'strict': one of fail, warn, off (fail is the default)",
                 id="bad-gate"),
    pytest.param({"override": "  "}, UsageError,
                 "--override needs a reason: --override 'engine restarted by ops, port checked'", id="blank-override"),
    pytest.param({"override": ""}, UsageError, "--override needs a reason", id="empty-override"),
    pytest.param({"watch_s": -1}, UsageError,
                 f"--watch -1: seconds between observations, 0 (off) to {MAX_WAIT_S:g}", id="negative-watch"),
    pytest.param({"watch_s": -0.001}, UsageError, "--watch -0.001:", id="just-below-0"),
    pytest.param({"watch_s": MAX_WAIT_S + 1}, UsageError, f"--watch {MAX_WAIT_S + 1}:", id="just-above-max"),
    pytest.param({"watch_s": float("inf")}, UsageError, "--watch inf:", id="inf-watch"),
    pytest.param({"results": [" "]}, UsageError, "--result needs a path or a glob", id="blank-result"),
    pytest.param({"results": ["nodir/a.json"]}, InputError, "--result nodir/a.json: directory {tmp}/nodir does "
                                                           "not exist", id="result-dir-missing"),
    pytest.param({"results": ["nodir/sub/*.json"]}, InputError,
                 "--result nodir/sub/*.json: directory {tmp}/nodir/sub does not exist", id="glob-dir-missing"),
    pytest.param({"sidecar_dir": "nowhere"}, InputError, "--sidecar-dir {tmp}/nowhere: no such directory",
                 id="sidecar-dir-missing"),
    pytest.param({"sign_key": " "}, UsageError, "--sign-key needs a key file (an Ed25519 or ECDSA PEM private key)",
                 id="blank-sign-key"),
    pytest.param({"shard": "4/4"}, UsageError, "--shard 4/4: K must be 0 to 3", id="bad-shard"),
    pytest.param({"zeta": 1, "alpha": 2}, TypeError, "unknown run option(s): alpha, zeta", id="unknown-options"),
])
def test_refused_before_anything_runs(sources, tmp_path, overrides, error, message) -> None:
    with pytest.raises(error) as caught:
        make(sources, **overrides)
    assert str(caught.value).startswith(message.format(tmp=tmp_path))
    assert not (tmp_path / "execsys.lock.json").exists()


@pytest.mark.parametrize("watch", [0, 0.0, MAX_WAIT_S, 1e-9])
def test_watch_at_its_bounds_is_taken(sources, watch) -> None:
    assert make(sources, watch_s=watch).watch_s == float(watch)


def test_a_relative_harness_must_be_executable_in_the_working_directory(sources, tmp_path) -> None:
    script = tmp_path / "eval.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(InputError, match="harness command not found: './eval.sh'"):
        make(sources, command=["./eval.sh"])
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert make(sources, command=["./eval.sh", "x"]).command == ["./eval.sh", "x"]
    sub = tmp_path / "sub"
    sub.mkdir()
    with pytest.raises(InputError):  # looked for where the harness runs, not where execsys was started
        make(sources, command=["./eval.sh"], cwd=str(sub))


def test_a_harness_found_on_path(sources, tmp_path, monkeypatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "my-harness"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    assert make(sources, command=["my-harness"]).command == ["my-harness"]


@pytest.mark.parametrize("pattern", ["a.json", "*.json", "out/**/*.json", "~/x.json"])
def test_result_patterns_whose_directory_exists_are_taken(sources, tmp_path, monkeypatch, pattern) -> None:
    (tmp_path / "out").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert make(sources, results=[pattern]).results == [pattern]


def test_an_absolute_result_and_a_path_under_home(sources, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(InputError, match=f"directory {tmp_path}/home does not exist"):
        make(sources, results=["~/x.json"])
    with pytest.raises(InputError, match="directory /no/such/dir does not exist"):
        make(sources, results=["/no/such/dir/x.json"])


def test_a_result_glob_that_never_finishes_is_refused(sources, tmp_path, monkeypatch) -> None:
    seen = []
    monkeypatch.setattr("execsys.run.results.check_pattern_finishes",
                        lambda path: seen.append(path) or (_ for _ in ()).throw(InputError("still matching")))
    with pytest.raises(InputError, match="still matching"):
        make(sources, results=["**/*.json"])
    assert seen == [str(tmp_path / "**/*.json")]


def test_a_lock_path_that_cannot_be_written_is_said_before_the_run(sources, tmp_path) -> None:
    import dataclasses

    (tmp_path / "taken").mkdir()  # a directory where the lock would go
    with pytest.raises(InputError) as caught:
        make(dataclasses.replace(sources, lock_path=tmp_path / "taken"))
    assert str(caught.value) == (f"{tmp_path / 'taken'}: is a directory, not a regular file: refusing to replace it "
                                 "(cannot write the lock there)")


def test_until_magic() -> None:
    assert options_module._until_magic(("/", "a", "b*", "c")) == ["/", "a"]
    assert options_module._until_magic(("a", "b")) == ["a", "b"]
    assert options_module._until_magic(("[x]",)) == []


# -- signing_key ----------------------------------------------------------------------------------------

class _Declaration:
    def __init__(self, key=None) -> None:
        self.key = key

    def get(self, table, name):
        assert (table, name) == ("receipts", "key")
        return self.key


def test_signing_key_none_is_unsigned() -> None:
    assert signing_key(None, _Declaration()) == (None, None)  # type: ignore[arg-type]


def test_signing_key_flag_over_declaration(tmp_path, monkeypatch) -> None:
    loaded = []
    monkeypatch.setattr("execsys.receipt.load_signer", lambda path: loaded.append(path) or "SIGNER")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert signing_key("~/k.pem", _Declaration("/decl.pem")) == (tmp_path / "k.pem", "SIGNER")  # type: ignore[arg-type]
    assert signing_key(None, _Declaration("/decl.pem")) == (Path("/decl.pem"), "SIGNER")  # type: ignore[arg-type]
    assert loaded == [tmp_path / "k.pem", Path("/decl.pem")]
    with pytest.raises(UsageError, match="--sign-key needs a key file"):
        signing_key(None, _Declaration(""))  # type: ignore[arg-type]


# -- the job's identity, from the environment -------------------------------------------------------------

@pytest.mark.parametrize(("environ", "job"), [
    pytest.param({}, None, id="nothing"),
    pytest.param({JOB_LOCK_ENV: "  "}, None, id="blank-lock"),
    pytest.param({JOB_IDENTITY_ENV: "abc"}, None, id="identity-without-lock"),
    pytest.param({JOB_LOCK_ENV: "/n/lock.json"}, JobIdentity(Path("/n/lock.json"), None), id="lock-only"),
    pytest.param({JOB_LOCK_ENV: " /n/lock.json ", JOB_IDENTITY_ENV: " abc "}, JobIdentity(Path("/n/lock.json"), "abc"),
                 id="both-stripped"),
    pytest.param({JOB_LOCK_ENV: "/n/l", JOB_IDENTITY_ENV: " "}, JobIdentity(Path("/n/l"), None), id="blank-identity"),
])
def test_job_identity_from_environment(environ, job) -> None:
    assert JobIdentity.from_environment(environ) == job


def test_job_lock_under_home_is_expanded(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert JobIdentity.from_environment({JOB_LOCK_ENV: "~/l.json"}) == JobIdentity(tmp_path / "l.json", None)


def _pinned_lock(tmp_path: Path, declaration_text: str) -> tuple[Path, str]:
    """A real lock pinned from a declaration in tmp_path/node, returned with its id."""
    from execsys.identity import pin

    node = tmp_path / "node"
    node.mkdir()
    config = node / "execsys.toml"
    config.write_text(declaration_text)
    (node / "env").write_text("OMP_NUM_THREADS=1\n")
    sources = load_sources(str(config), None)
    identity = pin(sources.declaration)
    lock = node / "execsys.lock.json"
    lock.write_text(json.dumps(scrub(identity.to_json())))
    return lock, identity.id


def test_run_sources_without_a_job(sources, tmp_path) -> None:
    got, job = load_run_sources(None, None, {}, ledger=tmp_path / "x.sqlite3")
    assert job is None and got.lock is None and got.lock_path == Path("execsys.lock.json")
    assert got.ledger_path == tmp_path / "x.sqlite3"
    # --lock wins over the job's environment
    lock, identity_id = _pinned_lock(tmp_path, "")
    got, job = load_run_sources(None, str(lock), {JOB_LOCK_ENV: "/nowhere/l.json"})
    assert job is None and got.lock_path == lock and got.lock is not None and got.lock.id == identity_id


def test_run_sources_a_job_lock_that_is_gone_is_refused(sources) -> None:
    with pytest.raises(InputError) as caught:
        load_run_sources(None, None, {JOB_LOCK_ENV: "/nowhere/lock.json"})
    assert str(caught.value) == ("EXECSYS_LOCK=/nowhere/lock.json (exported into this job by a TaskProlog or an "
                                 "enclosing execsys run) does not exist: pin the node again, or give --lock FILE")


def test_run_sources_a_job_lock_brings_its_declaration(sources, tmp_path) -> None:
    lock, identity_id = _pinned_lock(tmp_path, '[runtime]\nenv_file = "env"\n')
    got, job = load_run_sources(None, None, {JOB_LOCK_ENV: str(lock), JOB_IDENTITY_ENV: identity_id})
    assert job == JobIdentity(lock, identity_id)
    assert got.lock is not None and got.lock.id == identity_id and got.lock_path == lock
    assert got.declaration.get("runtime", "env_file") == "env"  # the node's declaration, not an empty one
    # a declaration here (./execsys.toml) is the run's own: it wins over the lock's
    (tmp_path / "execsys.toml").write_text('[runtime]\nenv_file = "mine"\n')
    got, _ = load_run_sources(None, None, {JOB_LOCK_ENV: str(lock)})
    assert got.declaration.get("runtime", "env_file") == "mine"
    os.unlink(tmp_path / "execsys.toml")
    # so does one named with --config
    other = tmp_path / "other.toml"
    other.write_text('[runtime]\nenv_file = "other"\n')
    got, _ = load_run_sources(str(other), None, {JOB_LOCK_ENV: str(lock)})
    assert got.declaration.get("runtime", "env_file") == "other"


def test_no_command_given_at_all_is_a_usage_error(sources) -> None:
    with pytest.raises(UsageError, match="no harness command"):
        RunOptions.from_sources(sources)
