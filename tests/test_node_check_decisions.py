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
    pytest.param({"mode": "npd", "path": "X"}, lambda o: o.path == "X", id="a-relative-one-letter-path"),
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
    pytest.param({"PATH": "X"}, {"PATH": "/proc/bin"}, None, "X", "the declaration's [environment] variables",
                 id="a-declared-one-letter-path"),
    pytest.param({}, {"PATH": "X"}, None, "X", "this process's environment", id="a-one-letter-process-path"),
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
    pytest.param(b"PATH=::\n", None, None, True, id="colons-only-path-cannot-check"),
    pytest.param(b"PATH=X\n", None, "X", False, id="a-one-letter-path-is-a-path"),
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


# -- what the evidence, the refusals and the report say -----------------------------------------------------

@pytest.mark.parametrize(("path", "text"), [
    pytest.param("/a:/b", "environment: S; PATH from P: /a:/b", id="path-shown"),
    pytest.param("", "environment: S; PATH from P: (empty)", id="no-path-says-empty"),
])
def test_the_environment_evidence(path, text) -> None:
    from execsys.doctor.node_checks.check import InspectedEnvironment

    env = InspectedEnvironment({"PATH": path} if path else {}, "S", "P")
    assert (env.path, env.evidence()) == (path, text)


@pytest.mark.parametrize(("kwargs", "message"), [
    pytest.param({"mode": "nagios"}, "unknown --node-check mode 'nagios' (known: npd, slurm, slurm-prolog, nhc)",
                 id="unknown-mode"),
    pytest.param({"mode": "nhc", "drain": True},
                 "--drain applies only to --node-check slurm (a Prolog's exit code drains already)", id="drain"),
    pytest.param({"mode": "npd", "path": ": :"}, "--path is empty: a node check never inspects an empty PATH",
                 id="blank-path"),
    pytest.param({"mode": "npd", "env_from": "pid:x"}, "--env-from 'pid:x': pid:N needs a process id", id="pid-x"),
    pytest.param({"mode": "npd", "env_from": "pid:0"}, "--env-from 'pid:0': pid:N needs a process id", id="pid-0"),
    pytest.param({"mode": "npd", "env_from": ""}, "--env-from is empty: give FILE or pid:N", id="empty-env-from"),
    pytest.param({"mode": "npd", "timeout": 8.0},
                 "--timeout 8: a node check must end within 40 s (Slurm kills it at 60 s); use at most 7",
                 id="timeout-8"),
])
def test_the_refusal_a_user_reads(kwargs, message) -> None:
    with pytest.raises(UsageError) as caught:
        NodeCheckOptions.from_sources(None, None, **kwargs)
    assert str(caught.value) == message


@pytest.mark.parametrize(("budget", "most"), [(40.0, 7.0), (41.0, 8.0), (43.0, 8.0), (44.0, 9.0), (18.0, 0.5),
                                             (20.0, 1.0)])
def test_the_largest_timeout_offered(budget, most) -> None:
    from execsys.doctor.node_checks.check import _max_timeout

    assert _max_timeout(budget) == most


def test_a_node_check_hashes_only_where_a_digest_decides_and_keeps_the_declared_environment() -> None:
    from execsys.doctor.node_checks.check import DRAIN_TIMEOUT_S

    opts = NodeCheckOptions.from_sources(None, None, mode="slurm", drain=None, node_name="n1", timeout=2.0)
    assert (opts.drain, opts.doctor.evidence_digests, opts.doctor.shell_aliases) == (False, False, False)
    assert (opts.node_name, opts.host_name, opts.path, opts.env_from) == ("n1", "n1", None, None)
    assert opts.doctor_deadline() == 2.0 * 3 + 5.0 + 2.0
    assert (DRAIN_TIMEOUT_S, BUDGET_S, LINE_LIMIT) == (10.0, 40.0, 80)


def test_without_a_node_name_the_machine_s_own_name_is_used(monkeypatch) -> None:
    import os

    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    opts = NodeCheckOptions.from_sources(None, None, mode="npd")
    assert opts.node_name is None
    assert opts.host_name == os.uname().nodename


def test_the_parsed_env_from() -> None:
    from execsys.doctor.node_checks.check import _parse_env_from

    assert _parse_env_from("pid:42") == ("pid", 42)
    assert _parse_env_from("/etc/serving.env") == ("file", "/etc/serving.env")
    assert _parse_env_from("pidfile") == ("file", "pidfile")


def test_fit_line_redacts_and_escapes_what_it_passes_on() -> None:
    line = fit_line("bad --api-key sk-live-123456789abcdef\x1b[31m red")
    assert "sk-live-123456789abcdef" not in line and "\x1b" not in line
    assert line.startswith("bad --api-key ") and line.endswith("red")
    assert fit_line("ab  " + "c" * 80) == "ab " + "c" * 74 + "..."  # 80 bytes, no trailing space before the dots
    assert fit_line("abcd efgh", 8) == "abcd..."  # the cut's trailing space is dropped


def test_the_report_as_json(tmp_path) -> None:
    from execsys.doctor.node_checks.check import NodeCheckReport

    h = HostReport("n", {"name": "n"}, [HazardResult("clock-skew", "ok", "fine")])
    report = NodeCheckReport("slurm", 1, "fail x", "fail", "clock-skew",
                             {"source": "--env-from /e", "path": "/bin"}, h, "logged", {"node": "n"})
    data = report.to_json()
    assert data["schema"] == "execsys.node-check/1"
    assert {k: data[k] for k in ("mode", "exit_code", "status", "line", "hazard", "environment", "log", "drain")} \
        == {"mode": "slurm", "exit_code": 1, "status": "fail", "line": "fail x", "hazard": "clock-skew",
            "environment": {"source": "--env-from /e", "path": "/bin"}, "log": "logged", "drain": {"node": "n"}}
    assert data["doctor"]["hazards"][0]["id"] == "clock-skew"
    bare = NodeCheckReport("npd", 2, "unknown: x", "unknown", None, {"password": "hunter2"}).to_json()
    assert bare["doctor"] is None and bare["drain"] is None and bare["log"] is None
    assert "hunter2" not in str(bare)


@pytest.mark.parametrize(("mode", "exit_code", "log"), [
    ("npd", 2, None), ("slurm", 2, "unknown: gone"), ("nhc", 2, "unknown: gone"),
    ("slurm-prolog", 0, "execsys prolog: could not check, letting the job run: unknown: gone"),
])
def test_the_could_not_check_report(mode, exit_code, log) -> None:
    report = unknown_report(mode, "gone", {"source": "s"})
    assert (report.mode, report.exit_code, report.line, report.status, report.hazard, report.log) == \
        (mode, exit_code, "unknown: gone", "unknown", None, log)
    assert (report.environment, report.host, report.drain) == ({"source": "s"}, None, None)
    assert unknown_report(mode, "gone").environment == {}


# -- the verdict's line -----------------------------------------------------------------------------------

def test_the_verdict_fits_head_body_and_more_in_80_bytes_of_multibyte_text() -> None:
    report = HostReport("n", {}, [HazardResult("h", "fail", "é" * 100), HazardResult("g", "fail", "x")])
    v = verdict(report, False, "n")
    head, more = "fail h: ", " (+1 more)"
    assert v.line == head + fit_line("é" * 100, LINE_LIMIT - len(head) - len(more)) + more
    assert len(v.line.encode()) in (LINE_LIMIT, LINE_LIMIT - 1)


def test_a_warning_id_with_a_multibyte_head_is_counted_in_bytes() -> None:
    report = HostReport("n", {}, [HazardResult("ü" * 10, "fail", "a" * 100)])
    v = verdict(report, False, "n")
    assert len(v.line.encode()) == LINE_LIMIT
    assert v.line == "fail " + "ü" * 10 + ": " + "a" * (LINE_LIMIT - 27 - 3) + "..."


@pytest.mark.parametrize(("statuses", "error", "line", "hazard"), [
    pytest.param(("error", "error"), None, "unknown h0: summary 0", "h0", id="the-first-error"),
    pytest.param(("ok", "error"), "died", "unknown h1: summary 1", "h1", id="an-error-row-before-the-node-s"),
    pytest.param(("warn", "warn"), "died", "unknown: died", None, id="the-node-s-error"),
])
def test_unknown_lines(statuses, error, line, hazard) -> None:
    v = verdict(host(*statuses, error=error), False, "gpu-1")
    assert (v.level, v.line, v.hazard) == ("unknown", line, hazard)


def test_the_ok_line_counts_warnings_and_names_the_node() -> None:
    v = verdict(host("warn", "warn", "ok"), False, "gpu-9")
    assert v == Verdict("ok", "ok: 3 hazards clear on gpu-9 (2 warn)", None)
    assert verdict(host("fail", "warn"), True, "x").line == "fail h0: summary 0 (+1 more)"


# -- the environment: from a process, a file, and back --------------------------------------------------------

@pytest.fixture(scope="module")
def serving():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={"PATH": "/srv/engine/bin", "ENGINE_KEY": "v1"})
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_env_from_a_pid_inspects_that_process_s_environment(serving) -> None:
    env = inspected_environment(options(env_from=f"pid:{serving.pid}"), process_env={"PATH": "/proc/bin"})
    assert (env.path, env.variables["ENGINE_KEY"]) == ("/srv/engine/bin", "v1")
    assert env.source == env.path_source == f"--env-from pid:{serving.pid}"


def test_env_from_a_gone_pid_cannot_check(serving) -> None:
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(CannotCheck, match=rf"^cannot read --env-from pid:{gone.pid}: "):
        inspected_environment(options(env_from=f"pid:{gone.pid}"), process_env={"PATH": "/bin"})


def test_an_env_from_directory_says_why(tmp_path) -> None:
    with pytest.raises(CannotCheck) as caught:
        inspected_environment(options(env_from=str(tmp_path)), process_env={"PATH": "/bin"})
    assert str(caught.value).startswith(f"cannot read --env-from {tmp_path}: ") or "--env-from file" in str(caught.value)


def test_a_fifo_env_from_is_refused_not_waited_on(tmp_path) -> None:
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(CannotCheck) as caught:
        inspected_environment(options(env_from=str(fifo)), process_env={"PATH": "/bin"})
    assert str(caught.value).startswith("--env-from file ") and "fifo" in str(caught.value)


def test_an_env_file_that_is_not_utf8_cannot_check(tmp_path) -> None:
    env_file = tmp_path / "env"
    env_file.write_bytes(b"PATH=/bin\nA=\xff\xfe\n")
    with pytest.raises(CannotCheck, match=rf"^cannot read --env-from {env_file}: "):
        inspected_environment(options(env_from=str(env_file)), process_env={"PATH": "/bin"})


def test_the_cannot_check_line_names_where_the_empty_path_came_from(tmp_path) -> None:
    env_file = tmp_path / "env"
    env_file.write_bytes(b"A=1\n")
    with pytest.raises(CannotCheck) as caught:
        inspected_environment(options(env_from=str(env_file)), process_env={"PATH": "/bin"})
    assert str(caught.value) == f"PATH is empty in --env-from {env_file}; give --path or --env-from"


def test_the_declared_variables_are_kept_and_the_process_is_not_changed() -> None:
    process = {"PATH": "/proc/bin", "HOME": "/root"}
    env = inspected_environment(options(declared={"VIRTUAL_ENV": "/venv", "HOME": "/h"}), process_env=process)
    assert env.variables == {"PATH": "/proc/bin", "HOME": "/h", "VIRTUAL_ENV": "/venv"}
    assert process == {"PATH": "/proc/bin", "HOME": "/root"}


def test_the_inspected_environment_is_the_process_s_only_for_the_check() -> None:
    import os

    from execsys.doctor.node_checks.check import _environment

    before = dict(os.environ)
    with _environment({"PATH": "/x", "ONLY_HERE": "1"}):
        assert dict(os.environ) == {"PATH": "/x", "ONLY_HERE": "1"}
    assert dict(os.environ) == before
    with pytest.raises(RuntimeError), _environment({"PATH": "/y"}):
        raise RuntimeError
    assert dict(os.environ) == before


# -- the drain: a real scontrol stand-in on PATH -------------------------------------------------------------

def scontrol(tmp_path, body: str) -> str:
    import os

    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "scontrol"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    (tmp_path / "argv").write_text("")
    return str(bindir) + os.pathsep


def test_the_drain_runs_scontrol_with_the_reason(tmp_path, monkeypatch) -> None:
    from execsys.doctor.node_checks.check import drain_node

    bindir = scontrol(tmp_path, f'printf "%s\\n" "$@" > {tmp_path}/argv; echo "  updated "; echo warn >&2; exit 3')
    monkeypatch.setenv("PATH", bindir + "/nonexistent")
    drained = drain_node("gpu-17", "fail clock-skew: 612 s ahead")
    exe = str(tmp_path / "bin" / "scontrol")
    assert drained == {"node": "gpu-17", "returncode": 3, "output": "updated \nwarn",
                       "argv": [exe, "update", "NodeName=gpu-17", "State=DRAIN",
                                "Reason=execsys: fail clock-skew: 612 s ahead"]}
    assert (tmp_path / "argv").read_text().splitlines() == drained["argv"][1:]


def test_a_hanging_scontrol_is_bounded(tmp_path, monkeypatch) -> None:
    from execsys.doctor.node_checks.check import drain_node

    monkeypatch.setenv("PATH", scontrol(tmp_path, "exec sleep 30"))
    drained = drain_node("n", "x", timeout=0.25)
    argv = [str(tmp_path / "bin" / "scontrol"), "update", "NodeName=n", "State=DRAIN", "Reason=execsys: x"]
    assert drained == {"node": "n", "argv": argv, "returncode": None, "output": "scontrol did not answer in 0.25 s"}


def test_an_scontrol_that_cannot_start_says_so(tmp_path, monkeypatch) -> None:
    from execsys.doctor.node_checks.check import drain_node

    bindir = scontrol(tmp_path, "")
    (tmp_path / "bin" / "scontrol").write_text("#!/nonexistent/interpreter\n")
    monkeypatch.setenv("PATH", bindir)
    drained = drain_node("n", "x")
    argv = [str(tmp_path / "bin" / "scontrol"), "update", "NodeName=n", "State=DRAIN", "Reason=execsys: x"]
    assert drained == {"node": "n", "argv": argv, "returncode": None,
                       "output": "cannot run scontrol: No such file or directory"}


def test_the_drain_passes_the_process_environment_and_the_searched_path(tmp_path, monkeypatch) -> None:
    from execsys.doctor.node_checks.check import drain_node

    bindir = scontrol(tmp_path, 'echo "$SLURM_CONF|$PATH"')
    monkeypatch.setenv("PATH", bindir)
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/x.conf")
    assert drain_node("n", "x")["output"] == f"/etc/slurm/x.conf|{bindir}:{DEFAULT_PATH}"


# -- one whole node check, in-process ------------------------------------------------------------------------

def node_check(mode: str, **kwargs):
    return NodeCheckOptions.from_sources(None, None, mode=mode, only=["binary-aliasing"], timeout=1.0, **kwargs)


def test_a_failing_check_drains_with_its_line(tmp_path, monkeypatch) -> None:
    from execsys.doctor.node_checks.check import HazardChecked, NodeCheckStarted, NodeDrained, run_node_check

    bindir = scontrol(tmp_path, f'printf "%s\\n" "$@" > {tmp_path}/argv')
    monkeypatch.setenv("PATH", bindir)
    events = []
    opts = node_check("slurm", drain=True, node_name="gpu-3", commands=["execsys-no-such-tool"],
                      path=str(tmp_path / "empty"))
    report = run_node_check(opts, on_event=events.append)
    line = "fail binary-aliasing: execsys-no-such-tool: not found on PATH"
    assert (report.exit_code, report.status, report.hazard, report.line) == (1, "fail", "binary-aliasing", line)
    assert report.drain is not None and report.drain["returncode"] == 0
    assert (tmp_path / "argv").read_text().splitlines()[-1] == f"Reason=execsys: {line}"
    assert report.environment == {"source": "this process's environment", "path_source": "--path",
                                  "path": str(tmp_path / "empty")}
    assert report.host is not None and report.host.host["name"] == "gpu-3"
    assert report.host.host["environment"] == f"environment: this process's environment; PATH from --path: " \
                                              f"{tmp_path / 'empty'}"
    kinds = [type(e) for e in events]
    assert kinds == [NodeCheckStarted, HazardChecked, NodeDrained]
    assert events[0].mode == "slurm" and events[0].environment == report.host.host["environment"]
    assert events[1].result.id == "binary-aliasing"
    assert (events[2].node, events[2].argv[-1], events[2].returncode, events[2].output) == \
        ("gpu-3", f"Reason=execsys: {line}", 0, "")


def test_a_failing_check_without_a_node_name_cannot_drain(tmp_path, monkeypatch) -> None:
    from execsys.doctor.node_checks.check import NodeDrained, run_node_check

    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    events = []
    report = run_node_check(node_check("slurm", drain=True, commands=["execsys-no-such-tool"]),
                            on_event=events.append)
    assert report.exit_code == 1
    assert report.drain == {"node": None, "argv": [], "returncode": None,
                            "output": "SLURMD_NODENAME is not set: cannot name the node to drain"}
    assert isinstance(events[-1], NodeDrained) and events[-1].node == "" and events[-1].argv == ()


@pytest.mark.parametrize(("mode", "drain", "exit_code"), [("slurm", False, 1), ("npd", False, 1),
                                                          ("slurm-prolog", False, 1), ("nhc", False, 1)])
def test_a_failing_check_drains_only_when_asked(mode, drain, exit_code) -> None:
    from execsys.doctor.node_checks.check import run_node_check

    report = run_node_check(node_check(mode, drain=drain, node_name="n", commands=["execsys-no-such-tool"]))
    assert (report.exit_code, report.drain, report.log) == (exit_code, None, None)


def test_a_clean_check_is_ok_and_inspects_the_given_path(tmp_path) -> None:
    from execsys.doctor.node_checks.check import run_node_check

    tool = tmp_path / "execsys-tool"
    tool.write_text("#!/bin/sh\necho 1.0\n")
    tool.chmod(0o755)
    report = run_node_check(node_check("npd", node_name="gpu-5", path=str(tmp_path), commands=["execsys-tool"]))
    assert (report.exit_code, report.status, report.line, report.hazard) == \
        (0, "ok", "ok: 1 hazards clear on gpu-5", None)
    assert report.host is not None and f"execsys-tool [1] {tool}" in "\n".join(report.host.hazards[0].evidence)


def test_a_check_whose_path_is_empty_is_decided_unknown_without_running(tmp_path) -> None:
    from execsys.doctor.node_checks.check import run_node_check

    env_file = tmp_path / "env"
    env_file.write_bytes(b"A=1\n")
    events = []
    report = run_node_check(node_check("slurm-prolog", env_from=str(env_file)), on_event=events.append)
    assert (report.exit_code, report.status, report.host) == (0, "unknown", None)
    assert report.line == fit_line(f"unknown: PATH is empty in --env-from {env_file}; give --path or --env-from")
    assert events == []


def test_the_inspected_venv_is_the_one_checked(tmp_path) -> None:
    from execsys.doctor.node_checks.check import run_node_check

    env_file = tmp_path / "env"
    env_file.write_bytes(f"PATH={tmp_path}\nVIRTUAL_ENV={tmp_path}/serving-venv\n".encode())
    opts = NodeCheckOptions.from_sources(None, None, mode="npd", only=["baked-paths"], timeout=1.0,
                                         env_from=str(env_file))
    assert opts.doctor.venvs is None
    report = run_node_check(opts)
    assert report.environment["path"] == str(tmp_path)
    assert (report.exit_code, report.hazard) == (1, "baked-paths")
    assert report.host is not None
    assert report.host.hazards[0].summary == f"{tmp_path}/serving-venv: virtual environment does not exist"
    env_file.write_bytes(f"PATH={tmp_path}\n".encode())
    again = run_node_check(opts)  # no venv inspected: never this process's own
    assert again.host is not None
    assert again.host.hazards[0].summary == "no virtual environment active and no --venv/--path given"


def test_slurm_drains_only_when_asked_by_default() -> None:
    slurm = registry.load("slurm")
    assert slurm.outcome(Verdict("fail", "fail x")).drain is False
    assert slurm.outcome(Verdict("fail", "fail x"), True).drain is True


# -- the TaskProlog lines ----------------------------------------------------------------------------------

def test_the_task_prolog_exports_the_identity_and_the_absolute_lock(tmp_path, monkeypatch) -> None:
    from execsys.doctor.node_checks.slurm_prolog import task_prolog_exports

    monkeypatch.chdir(tmp_path)
    assert task_prolog_exports("sha256:abc", "execsys.lock") == [
        "export EXECSYS_IDENTITY=sha256:abc", f"export EXECSYS_LOCK={tmp_path}/execsys.lock"]
    assert task_prolog_exports("id with space", tmp_path / "a b.lock") == [
        "export EXECSYS_IDENTITY=id with space", f"export EXECSYS_LOCK={tmp_path}/a b.lock"]


@pytest.mark.parametrize(("identity", "lock", "message"), [
    pytest.param("a\nexport X=1", "/l", "EXECSYS_IDENTITY: cannot export 'a\\nexport X=1' through a TaskProlog line",
                 id="newline-in-the-identity"),
    pytest.param("", "/l", "EXECSYS_IDENTITY: cannot export '' through a TaskProlog line", id="empty-identity"),
    pytest.param("id", "/l\n", "EXECSYS_LOCK: cannot export '/l\\n' through a TaskProlog line",
                 id="newline-in-the-lock"),
    pytest.param("id", "", "EXECSYS_LOCK: cannot export '' through a TaskProlog line", id="empty-lock"),
])
def test_the_task_prolog_refuses_what_one_line_cannot_carry(identity, lock, message) -> None:
    from execsys.doctor.node_checks.slurm_prolog import task_prolog_exports

    with pytest.raises(ValueError) as caught:
        task_prolog_exports(identity, lock)
    assert str(caught.value) == message


def test_a_cancelled_check_is_unknown_never_ok_or_fail() -> None:
    import threading

    from execsys.doctor.node_checks.check import run_node_check

    cancel = threading.Event()
    cancel.set()
    report = run_node_check(node_check("slurm", commands=["execsys-no-such-tool"]), cancel=cancel)
    assert (report.mode, report.exit_code, report.status, report.hazard) == ("slurm", 2, "unknown", "binary-aliasing")
    assert report.line == report.log == "unknown binary-aliasing: the check cancelled; abandoned"


def test_strict_makes_a_whole_check_fail_on_a_warning(tmp_path) -> None:
    from execsys.doctor.node_checks.check import run_node_check

    program = "#!/bin/sh\necho {}\n"
    for d, text in (("a", "one"), ("b", "two")):
        (tmp_path / d).mkdir()
        (tmp_path / d / "execsys-tool").write_text(program.format(text))
        (tmp_path / d / "execsys-tool").chmod(0o755)
    path = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    lenient = run_node_check(node_check("npd", path=path, commands=["execsys-tool"], node_name="g"))
    assert (lenient.exit_code, lenient.line) == (0, "ok: 1 hazards clear on g (1 warn)")
    strict = run_node_check(node_check("npd", path=path, commands=["execsys-tool"], strict=True))
    assert (strict.exit_code, strict.line) == (1, "warn binary-aliasing: execsys-tool: 2 different programs on PATH")
