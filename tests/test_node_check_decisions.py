"""The node-check modes as tables: each mode's exit code, log line and drain for ``ok``/``fail``/``unknown``;
the worst-finding verdict (``--strict`` included); the 80-byte line at, below and above its limit;
the flags that are refused; and which environment (and PATH) is inspected.

The modes' outcomes and the verdict are pure functions of a constructed doctor report; the
environment is chosen from real env files in a temp directory (tests/test_node_check.py and
tests/test_slurm.py run the modes as processes, under a real slurmd).
"""

from __future__ import annotations

import pytest
from execsys.doctor.model import HazardResult, HostReport
from execsys.doctor.node_checks import registry
from execsys.doctor.node_checks.check import (
    BUDGET_S,
    DEFAULT_PATH,
    LINE_LIMIT,
    CannotCheck,
    NodeCheckOptions,
    Verdict,
    fit_line,
    inspected_environment,
    unknown_report,
    verdict,
)

from execsys.errors import UsageError

# -- each mode's outcome -----------------------------------------------------------------------------

OUTCOMES = [
    # (mode, level, drain requested) -> (exit, logged, drain)
    ("npd", "ok", False, 0, False, False), ("npd", "fail", False, 1, False, False),
    ("npd", "unknown", False, 2, False, False),
    ("slurm", "ok", True, 0, False, False), ("slurm", "fail", False, 1, False, False),
    ("slurm", "fail", True, 1, False, True), ("slurm", "unknown", True, 2, True, False),
    ("slurm-prolog", "ok", False, 0, False, False), ("slurm-prolog", "fail", False, 1, False, False),
    ("slurm-prolog", "unknown", False, 0, True, False),
    ("nhc", "ok", False, 0, False, False), ("nhc", "fail", False, 1, False, False),
    ("nhc", "unknown", False, 2, True, False),
]


@pytest.mark.parametrize(("mode", "level", "drain_requested", "exit_code", "logged", "drain"), [
    pytest.param(*row, id=f"{row[0]}-{row[1]}{'-drain' if row[2] else ''}") for row in OUTCOMES])
def test_mode_outcome(mode, level, drain_requested, exit_code, logged, drain) -> None:
    outcome = registry.load(mode).outcome(Verdict(level, f"{level}: line"), drain_requested=drain_requested)
    assert (outcome.exit_code, outcome.log is not None, outcome.drain) == (exit_code, logged, drain)
    assert outcome.line == f"{level}: line"


def test_the_prolog_logs_that_it_let_the_job_run() -> None:
    outcome = registry.load("slurm-prolog").outcome(Verdict("unknown", "unknown: x"))
    assert outcome.log == "execsys prolog: could not check, letting the job run: unknown: x"


def test_every_mode_is_listed_once_in_order() -> None:
    assert registry.IDS == ("npd", "slurm", "slurm-prolog", "nhc")
    with pytest.raises(KeyError, match="unknown node-check mode"):
        registry.get("nagios")


@pytest.mark.parametrize(("mode", "exit_code"), [("npd", 2), ("slurm", 2), ("slurm-prolog", 0), ("nhc", 2)])
def test_a_check_that_could_not_run_is_decided_by_the_mode(mode, exit_code) -> None:
    report = unknown_report(mode, "PATH is empty")
    assert (report.exit_code, report.status, report.line) == (exit_code, "unknown", "unknown: PATH is empty")
    assert report.drain is None


# -- the verdict: the worst finding -----------------------------------------------------------------------

def host(*statuses: str, error: str | None = None) -> HostReport:
    return HostReport("gpu-1", {}, [HazardResult(f"h{i}", s, f"summary {i}") for i, s in enumerate(statuses)],
                      error=error)


@pytest.mark.parametrize(("statuses", "error", "strict", "level", "line", "hazard"), [
    pytest.param(("ok", "ok"), None, False, "ok", "ok: 2 hazards clear on gpu-1", None, id="all-ok"),
    pytest.param(("ok", "skip"), None, False, "ok", "ok: 2 hazards clear on gpu-1", None, id="skip-is-clear"),
    pytest.param(("ok", "warn"), None, False, "ok", "ok: 2 hazards clear on gpu-1 (1 warn)", None, id="warn-is-ok"),
    pytest.param(("ok", "warn"), None, True, "fail", "warn h1: summary 1", "h1", id="warn-fails-under-strict"),
    pytest.param(("fail",), None, False, "fail", "fail h0: summary 0", "h0", id="one-fail"),
    pytest.param(("ok", "fail", "fail", "fail"), None, False, "fail", "fail h1: summary 1 (+2 more)", "h1",
                 id="the-first-fail-and-how-many-more"),
    pytest.param(("warn", "fail"), None, True, "fail", "fail h1: summary 1 (+1 more)", "h1",
                 id="strict-a-fail-before-the-warnings"),
    pytest.param(("error", "fail"), None, False, "fail", "fail h1: summary 1", "h1", id="fail-outranks-error"),
    pytest.param(("ok", "error"), None, False, "unknown", "unknown h1: summary 1", "h1", id="error-is-unknown"),
    pytest.param(("warn", "error"), None, True, "fail", "warn h0: summary 0", "h0", id="strict-warn-outranks-error"),
    pytest.param(("ok",), "ssh: no route", False, "unknown", "unknown: ssh: no route", None,
                 id="an-uninspected-node-is-unknown"),
])
def test_verdict(statuses, error, strict, level, line, hazard) -> None:
    v = verdict(host(*statuses, error=error), strict, "gpu-1")
    assert (v.level, v.line, v.hazard) == (level, line, hazard)


def test_a_long_summary_keeps_the_line_and_its_more_within_80_bytes() -> None:
    report = HostReport("n", {}, [HazardResult("port-collisions", "fail", "é" * 200),
                                  HazardResult("clock-skew", "fail", "x")])
    v = verdict(report, False, "n")
    assert v.line.startswith("fail port-collisions: é") and v.line.endswith("... (+1 more)")
    assert len(v.line.encode()) <= LINE_LIMIT


@pytest.mark.parametrize(("text", "line"), [
    pytest.param("a" * 80, "a" * 80, id="80-bytes-kept"),
    pytest.param("a" * 81, "a" * 77 + "...", id="81-bytes-cut-to-80"),
    pytest.param("a" * 79, "a" * 79, id="79-bytes-kept"),
    pytest.param("é" * 40, "é" * 40, id="80-bytes-of-two-byte-characters-kept"),
    pytest.param("é" * 41, "é" * 38 + "...", id="a-character-is-never-split"),
    pytest.param("two\nlines  and\ttabs", "two lines and tabs", id="whitespace-collapsed-to-one-line"),
])
def test_fit_line(text, line) -> None:
    assert fit_line(text) == line
    assert len(fit_line(text).encode()) <= LINE_LIMIT


def test_fit_line_to_another_limit() -> None:
    assert fit_line("abcdef", 5) == "ab..."
    assert fit_line("abcde", 5) == "abcde"


# -- the flags -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "needle"), [
    pytest.param({"mode": "nagios"}, "unknown --node-check mode", id="unknown-mode"),
    pytest.param({"mode": "npd", "drain": True}, "--drain applies only", id="drain-outside-slurm"),
    pytest.param({"mode": "slurm-prolog", "drain": True}, "--drain applies only", id="drain-in-the-prolog"),
    pytest.param({"mode": "npd", "path": ""}, "--path is empty", id="empty-path"),
    pytest.param({"mode": "npd", "path": ":::"}, "--path is empty", id="colons-only-path"),
    pytest.param({"mode": "npd", "env_from": "pid:0"}, "pid:N needs a process id", id="pid-0"),
    pytest.param({"mode": "npd", "env_from": "pid:-3"}, "pid:N needs a process id", id="negative-pid"),
    pytest.param({"mode": "npd", "env_from": "pid:abc"}, "pid:N needs a process id", id="pid-not-a-number"),
    pytest.param({"mode": "npd", "env_from": " "}, "--env-from is empty", id="blank-env-from"),
    pytest.param({"mode": "npd", "timeout": 7.7}, "must end within 40 s", id="timeout-over-the-budget"),
])
def test_refused_flags(kwargs, needle) -> None:
    with pytest.raises(UsageError, match=needle.replace("-", r"\-")):
        NodeCheckOptions.from_sources(None, None, **kwargs)


@pytest.mark.parametrize(("kwargs", "check"), [
    pytest.param({"mode": "slurm", "drain": True}, lambda o: o.drain is True, id="drain-in-slurm"),
    pytest.param({"mode": "npd", "drain": False}, lambda o: o.drain is False, id="no-drain-anywhere"),
    pytest.param({"mode": "npd", "env_from": "pid:1"}, lambda o: o.env_from == "pid:1", id="pid-1"),
    pytest.param({"mode": "npd", "timeout": 7.0}, lambda o: o.doctor.timeout == 7.0, id="timeout-7-fits"),
    pytest.param({"mode": "npd", "timeout": 23 / 3}, lambda o: o.doctor_deadline() + 10.0 == BUDGET_S,
                 id="timeout-exactly-at-the-budget-fits"),
    pytest.param({"mode": "npd"}, lambda o: o.doctor.timeout == 3.0 and o.budget_s == 40.0, id="defaults"),
    pytest.param({"mode": "npd"}, lambda o: not o.doctor.shell_aliases and o.doctor.hosts == [],
                 id="no-aliases-this-node-only"),
])
def test_accepted_flags(kwargs, check) -> None:
    assert check(NodeCheckOptions.from_sources(None, None, **kwargs))


@pytest.mark.parametrize(("given", "environ", "expected"), [
    pytest.param("n-given", {"SLURMD_NODENAME": "n-env"}, "n-given", id="the-flag-wins"),
    pytest.param(None, {"SLURMD_NODENAME": "n-env"}, "n-env", id="slurmd-s-name"),
    pytest.param(None, {"SLURMD_NODENAME": ""}, None, id="empty-is-none"),
])
def test_node_name(monkeypatch, given, environ, expected) -> None:
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    assert NodeCheckOptions.from_sources(None, None, mode="slurm", node_name=given).node_name == expected


# -- the environment inspected -------------------------------------------------------------------------

def options(**kwargs) -> NodeCheckOptions:
    opts = NodeCheckOptions.from_sources(None, None, mode="npd", **{k: v for k, v in kwargs.items()
                                                                    if k in ("path", "env_from")})
    opts.declared_env = kwargs.get("declared", {})
    return opts


@pytest.mark.parametrize(("declared", "process", "path", "expected_path", "path_source"), [
    pytest.param({}, {"PATH": "/proc/bin"}, None, "/proc/bin", "this process's environment", id="process-path"),
    pytest.param({"PATH": "/decl/bin"}, {"PATH": "/proc/bin"}, None, "/decl/bin",
                 "the declaration's [environment] variables", id="declared-beats-process"),
    pytest.param({"PATH": ":"}, {"PATH": "/proc/bin"}, None, "/proc/bin", "this process's environment",
                 id="declared-colon-only-is-no-path"),
    pytest.param({}, {}, None, DEFAULT_PATH, "the default PATH (none was given: daemons pass no PATH)",
                 id="daemon-without-path-gets-the-default"),
    pytest.param({}, {"PATH": "::"}, None, DEFAULT_PATH, "the default PATH (none was given: daemons pass no PATH)",
                 id="colons-only-process-path-gets-the-default"),
    pytest.param({"PATH": "/decl/bin"}, {"PATH": "/proc/bin"}, "/flag/bin", "/flag/bin", "--path",
                 id="the-flag-beats-all"),
])
def test_inspected_path(declared, process, path, expected_path, path_source) -> None:
    env = inspected_environment(options(declared=declared, path=path), process_env=process)
    assert (env.path, env.path_source) == (expected_path, path_source)


@pytest.mark.parametrize(("declared", "source"), [
    pytest.param({}, "this process's environment", id="process"),
    pytest.param({"A": "1"}, "the declaration's [environment] variables over this process's environment",
                 id="declared-over-process"),
])
def test_inspected_source(declared, source) -> None:
    env = inspected_environment(options(declared=declared), process_env={"PATH": "/bin", "A": "0"})
    assert env.source == source
    assert env.variables["A"] == declared.get("A", "0")


@pytest.mark.parametrize(("content", "path", "expected", "cannot"), [
    pytest.param(b"PATH=/srv/bin\nA=1\n", None, "/srv/bin", False, id="env-file-path"),
    pytest.param(b"PATH=/srv/bin\0A=1\0", None, "/srv/bin", False, id="nul-separated-environ-copy"),
    pytest.param(b"A=1\n", None, None, True, id="env-file-without-path-cannot-check"),
    pytest.param(b"A=1\n", "/flag/bin", "/flag/bin", False, id="path-flag-fills-the-env-file"),
    pytest.param(b"PATH=\n", None, None, True, id="empty-path-cannot-check"),
])
def test_env_from_file(tmp_path, content, path, expected, cannot) -> None:
    env_file = tmp_path / "env"
    env_file.write_bytes(content)
    opts = options(env_from=str(env_file), path=path)
    if cannot:
        with pytest.raises(CannotCheck, match="PATH is empty"):
            inspected_environment(opts, process_env={"PATH": "/proc/bin"})
        return
    env = inspected_environment(opts, process_env={"PATH": "/proc/bin"})
    assert env.path == expected
    assert env.source == f"--env-from {env_file}"
    assert "/proc/bin" not in env.variables.values()  # the process's own environment is not mixed in


def test_an_unreadable_env_from_cannot_check(tmp_path) -> None:
    with pytest.raises(CannotCheck, match="cannot read --env-from"):
        inspected_environment(options(env_from=str(tmp_path / "missing")), process_env={"PATH": "/bin"})
