"""The probe axes' decisions as tables, in process (issue 26): which passes each axis runs, what it
refuses, the sentence and licence it words, and whether the event it measures (a restart, a
redeploy) was seen to happen. The restart hook runs real ``sh -c`` commands and polls a loopback
endpoint (:mod:`tests.fixtures.fake_http`); the serving process it looks at is given by the test.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from execsys.probes.axes import AXES, Axis, PassSchedule, letters
from execsys.probes.axes import restart as restart_axis
from execsys.probes.axes.restart import _brief, _describe, restart_evidence, runtime_changes, wait_ready
from execsys.probes.runner import ProbeAborted, ProbeOptions, RunContext
from execsys.probes.store import ProbeRunStore

from execsys.errors import UsageError
from execsys.ledger import Ledger
from execsys.proc import ProcResult
from tests.fixtures.fake_http import JsonHandler, LoopbackServer

URL = "http://127.0.0.1:9/v1"


def opts(axis: str = "session", **kw) -> ProbeOptions:
    given = {"axis": axis, "endpoints": [URL], "case_list": []}
    given.update(kw)
    return ProbeOptions(**given)


# -- the registry and the phrases --------------------------------------------------------------

def test_registry_names_every_axis_once():
    assert list(AXES) == ["session", "restart", "concurrency", "hosts", "redeploy"]
    assert all(axis.name == name for name, axis in AXES.items())


@pytest.mark.parametrize(("name", "across", "advice", "stable", "baseline", "at_once"), [
    ("session", "within one session",
     "even one server session does not repeat itself: compare score distributions, not single runs",
     "repeated runs on one server agree", False, False),
    ("restart", "across restarts", "scope comparisons to one session",
     "results carry across restarts of this engine", False, False),
    ("concurrency", "between serial and concurrent load", "scope comparisons to runs at the same load and batch size",
     "load does not change outputs", False, False),
    ("hosts", "across hosts", "scope comparisons to one host (same hardware and drivers)",
     "outputs carry across these hosts", False, True),
    ("redeploy", "across redeploys", "scope comparisons to one deployment: re-run the baseline after every redeploy",
     "this deployment reproduces the baseline", True, False),
], ids=["session", "restart", "concurrency", "two-endpoints", "redeploy"])
def test_each_axis_words_its_boundary_and_licence(name, across, advice, stable, baseline, at_once):
    axis = AXES[name]
    assert (axis.across, axis.advice, axis.stable_advice) == (across, advice, stable)
    assert (axis.uses_baseline, axis.simultaneous) == (baseline, at_once)
    assert axis.summary
    assert axis.statement(across, 4, True, None) == f"stable {across} for these 4 cases: {stable}"
    assert axis.statement(across, 4, False, None) == f"unstable {across}: {advice}"


def test_summaries_for_help():
    assert AXES["session"].summary == ("the same cases twice within one server session, the second pass in a "
                                       "seeded different order")
    assert AXES["restart"].summary == "pass A, the restart command (--restart CMD or runtime.restart), readiness, pass B"
    assert AXES["concurrency"].summary == ("pass A alone at concurrency 1, pass B with the cases under K-way "
                                           "concurrent load (--load K)")
    assert AXES["hosts"].summary == ("the same cases against two or more endpoints (repeat --endpoint), one pass "
                                     "per host")
    assert AXES["redeploy"].summary == "a fresh pass compared against a stored baseline record (--baseline RECORD_ID)"


def test_statement_branches_in_precedence():
    axis = AXES["session"]
    assert axis.statement("B", 0, True, "engine moved") == "no case completed on every pass: nothing is known B"
    assert axis.statement("B", 3, True, "engine moved") == "engine moved: this measures an engine change, not B"
    assert axis.statement("B", None, True, None) == "stable B for these cases: repeated runs on one server agree"
    assert axis.statement("B", 1, False, "") == f"unstable B: {axis.advice}"


def test_pass_schedule_json_names_order_and_source():
    assert PassSchedule(1, "B", target=2, concurrency=3, load=4, shuffled=True).to_json() == {
        "index": 1, "label": "B", "target": 2, "concurrency": 3, "load": 4, "order": "shuffled", "source": "send"}
    assert PassSchedule(0, "baseline", source="baseline").to_json() == {
        "index": 0, "label": "baseline", "target": 0, "concurrency": 1, "load": 0, "order": "file",
        "source": "baseline"}


def test_letters_name_passes():
    assert [letters(i) for i in (0, 1, 25, 26, 27)] == ["A", "B", "Z", "P27", "P28"]


def test_base_axis_hooks_do_nothing_by_default():
    base = Axis()
    base.across = "somewhere"
    assert base.boundary() == "somewhere" and base.boundary(opts()) == "somewhere"
    assert base.evidence(None, [], None) is None  # type: ignore[arg-type]
    assert base.fingerprint_notes([{"system_fingerprints": []}], None) == []
    base.validate(opts())
    base.before_pass(None, PassSchedule(0, "A"))  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError):
        base.schedule(opts())


# -- schedules -----------------------------------------------------------------------------

def js(schedules):
    return [(s.index, s.label, s.target, s.concurrency, s.load, s.shuffled, s.source) for s in schedules]


def test_schedules_per_axis():
    assert js(AXES["session"].schedule(opts(repeats=3, concurrency=2))) == [
        (0, "A", 0, 2, 0, False, "send"), (1, "B", 0, 2, 0, True, "send"), (2, "C", 0, 2, 0, True, "send")]
    assert js(AXES["restart"].schedule(opts("restart", repeats=3, concurrency=2, restart="true"))) == [
        (0, "A", 0, 2, 0, False, "send"), (1, "B", 0, 2, 0, False, "send"), (2, "C", 0, 2, 0, False, "send")]
    assert js(AXES["concurrency"].schedule(opts("concurrency", repeats=3, load=4, concurrency=9))) == [
        (0, "A", 0, 1, 0, False, "send"), (1, "B", 0, 4, 4, False, "send"), (2, "C", 0, 4, 4, False, "send")]
    assert js(AXES["concurrency"].schedule(opts("concurrency"))) == [
        (0, "A", 0, 1, 0, False, "send"), (1, "B", 0, 2, 2, False, "send")]
    assert js(AXES["hosts"].schedule(opts("hosts", endpoints=[URL, URL, URL], concurrency=3))) == [
        (0, "host 1", 0, 3, 0, False, "send"), (1, "host 2", 1, 3, 0, False, "send"),
        (2, "host 3", 2, 3, 0, False, "send")]
    assert js(AXES["redeploy"].schedule(opts("redeploy", repeats=3, concurrency=2, baseline="b"))) == [
        (0, "baseline", 0, 1, 0, False, "baseline"), (1, "B", 0, 2, 0, False, "send"), (2, "C", 0, 2, 0, False, "send")]


def test_concurrency_boundary_names_the_load():
    axis = AXES["concurrency"]
    assert axis.boundary(opts("concurrency", load=5)) == "between concurrency 1 and load 5"
    assert axis.boundary() == "between serial and concurrent load"


# -- what each axis refuses ------------------------------------------------------------------

@pytest.mark.parametrize(("axis", "given", "message"), [
    ("session", {"endpoints": [URL, URL]}, "the session axis takes one --endpoint (several endpoints: use the hosts axis)"),
    ("restart", {}, "the restart axis needs a restart command: --restart CMD or runtime.restart in execsys.toml"),
    ("restart", {"restart": "true", "endpoints": [URL, URL]}, "the restart axis takes one --endpoint"),
    ("concurrency", {"load": 2, "endpoints": [URL, URL]}, "the concurrency axis takes one --endpoint"),
    ("concurrency", {}, "the concurrency axis needs --load K (requests in flight during pass B, K >= 2)"),
    ("concurrency", {"load": 1}, "--load must be at least 2 (pass A already runs at concurrency 1)"),
    ("hosts", {"command": "cat", "endpoints": [URL, URL]},
     "the hosts axis compares endpoints: give --endpoint once per host"),
    ("hosts", {}, "the hosts axis needs two or more --endpoint URLs (one per host)"),
    ("hosts", {"endpoints": [URL, URL], "repeats_given": True},
     "the hosts axis runs one pass per endpoint; --repeats does not apply"),
    ("redeploy", {}, "the redeploy axis needs --baseline RECORD_ID (a probe record from the ledger)"),
    ("redeploy", {"baseline": "b", "endpoints": [URL, URL]}, "the redeploy axis takes one --endpoint"),
], ids=["session-one-url", "restart-no-command", "restart-one-url", "concurrency-one-url", "concurrency-no-load",
        "concurrency-load-1", "endpoints-not-command", "endpoints-one", "endpoints-repeats", "redeploy-no-baseline",
        "redeploy-one-url"])
def test_axis_refusals(axis, given, message):
    with pytest.raises(UsageError) as info:
        AXES[axis].validate(opts(axis, **given))
    assert str(info.value) == message


@pytest.mark.parametrize(("axis", "given"), [
    ("session", {}), ("restart", {"restart": "true"}), ("concurrency", {"load": 2}),
    ("hosts", {"endpoints": [URL, URL]}), ("redeploy", {"baseline": "b"}),
], ids=["session", "restart", "concurrency", "endpoints", "redeploy"])
def test_axis_accepts_what_it_needs(axis, given):
    AXES[axis].validate(opts(axis, **given))


# -- a run context with a serving process the test controls -----------------------------------

class Context(RunContext):
    """A real RunContext whose runtime looks are scripted: ``looks`` (observe) and ``processes``
    (serving_process) are popped in order."""

    def __init__(self, tmp_path, options, *, looks=(), processes=()):
        self._ledger = Ledger.open(tmp_path / "ledger.sqlite")
        self.events: list = []
        client = SimpleNamespace(base_url=options.endpoints[0] if options.endpoints else "", display="target")
        super().__init__(options, ProbeRunStore(self._ledger, "run-1"), [client], threading.Event(),
                         self.events.append)
        self.looks = list(looks)
        self.processes = list(processes)

    def observe(self, index):
        assert index == 0, index  # the schedule's target, never another
        return self.looks.pop(0) if self.looks else {"models": ["m"]}

    def serving_process(self, index):
        assert index == 0, index
        return self.processes.pop(0) if self.processes else (None, "not served from this machine")


@pytest.fixture
def context(tmp_path):
    made = []

    def make(options, **kw):
        where = tmp_path / f"ctx{len(made)}"
        where.mkdir()
        ctx = Context(where, options, **kw)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx._ledger.close()


P1 = {"pid": 10, "started_at": 100.0}
P2 = {"pid": 11, "started_at": 200.0}


def test_restart_before_pass_a_observes_once(context):
    ctx = context(opts("restart", restart="exit 9"))
    axis = AXES["restart"]
    axis.before_pass(ctx, PassSchedule(0, "A"))
    ctx.looks = [{"models": ["other"]}]
    axis.before_pass(ctx, PassSchedule(0, "A"))
    assert ctx.steps == {"observe:0": {"runtime": {"models": ["m"]}}}


def test_restart_already_done_or_pass_begun_is_not_repeated(context):
    ctx = context(opts("restart", restart="exit 9"))
    axis = AXES["restart"]
    ctx.steps["restart:1"] = {"done": True}
    axis.before_pass(ctx, PassSchedule(1, "B"))  # would abort: exit 9
    ctx.steps.clear()
    ctx.pass_counts[1] = 1
    axis.before_pass(ctx, PassSchedule(1, "B"))
    assert ctx.steps == {} and ctx.events == []


def test_a_failing_restart_command_aborts_naming_its_exit_and_last_line(context):
    ctx = context(opts("restart", restart="echo first >&2; echo 'last words --token s3cr3t' >&2; exit 3"))
    ctx.pass_counts[0] = 4
    with pytest.raises(ProbeAborted) as info:
        AXES["restart"].before_pass(ctx, PassSchedule(1, "B"))
    assert str(info.value).startswith("restart command failed (exit 3: last words --token ")
    assert str(info.value).endswith("); the 4 case results already taken are kept in run run-1: fix it and "
                                    "continue with --resume run-1")
    [said] = ctx.events
    assert said.message.startswith("restarting the server before pass B: echo first")
    assert "restart:1" not in ctx.steps


def test_a_restart_observed_is_recorded_with_both_processes(context):
    ctx = context(opts("restart", restart="true", ready="true", ready_timeout=5.0),
                  looks=[{"models": ["m"], "server": {"version": "1"}}, {"models": ["m"], "server": {"version": "1"}}],
                  processes=[(P1, None), (P2, None)])
    began = time.monotonic()
    AXES["restart"].before_pass(ctx, PassSchedule(1, "B"))
    took = time.monotonic() - began
    step = ctx.steps["restart:1"]
    assert (step["command"], step["changed"], step["process_before"], step["process_after"]) == ("true", [], P1, P2)
    # seconds since the command started, to the millisecond: never a clock reading, never more than the hook took
    assert isinstance(step["restart_s"], float) and isinstance(step["ready_s"], float)
    assert step["restart_s"] == round(step["restart_s"], 3) and step["ready_s"] == round(step["ready_s"], 3)
    assert step["ready_s"] <= took + 0.001
    assert step["before"] == step["after"] == {"models": ["m"], "server": {"version": "1"}}
    assert step["process_unobservable"] is None
    assert 0 <= step["restart_s"] <= step["ready_s"]
    assert ctx.engine_change is None and ctx.notes == []
    evidence = AXES["restart"].evidence(ctx, [PassSchedule(0, "A"), PassSchedule(1, "B")], None)
    assert evidence["verdict"] == "observed" and evidence["event"] == "restart" and len(evidence["restarts"]) == 1
    assert evidence["sentence"] == ("restart observed before pass B: pid 10, started 1970-01-01T00:01:40Z -> "
                                    "pid 11, started 1970-01-01T00:03:20Z")
    with Ledger.open(ctx.ledger.path) as ledger:
        assert ledger.child("run-1", "restart:1").body["process_after"] == P2


def test_a_restart_that_restarted_nothing_is_said_and_an_engine_change_is_named(context):
    ctx = context(opts("restart", restart="true", ready="true", ready_timeout=5.0),
                  looks=[{"models": ["m"], "server": {"version": "1"}}, {"models": ["m"], "server": {"version": "2"}}],
                  processes=[(P1, None), (dict(P1), "x")])
    AXES["restart"].before_pass(ctx, PassSchedule(1, "B"))
    step = ctx.steps["restart:1"]
    assert step["changed"] == ["server version: 1 -> 2"] and step["process_unobservable"] == "x"
    assert ctx.engine_change == "the engine changed across the restart (server version: 1 -> 2)"
    assert ctx.notes == [
        "the engine changed across the restart (server version: 1 -> 2): disagreement is not a restart effect",
        "no restart observed: the serving process before pass B (pid 10, started 1970-01-01T00:01:40Z) is the one "
        "that served the pass before: the restart command restarted nothing"]


def test_two_engine_changes_are_named_together_and_readiness_asks_the_target(context):
    with LoopbackServer(Ready) as server:
        Ready.status["code"], Ready.paths[:] = 200, []
        ctx = context(opts("restart", restart="true", endpoints=[server.url()], ready_timeout=5.0),
                      looks=[{"models": ["m"], "server": {"version": "1"}}, {"models": ["n"], "server": {"version": "2"}}],
                      processes=[(P1, None), (P2, None)])
        AXES["restart"].before_pass(ctx, PassSchedule(1, "B"))
        assert Ready.paths == ["/v1/models"]
    assert ctx.engine_change == "the engine changed across the restart (model list: m -> n; server version: 1 -> 2)"


def test_a_server_never_ready_aborts_with_what_the_ready_check_said(context):
    ctx = context(opts("restart", restart="true", ready="exit 1", ready_timeout=0.3))
    with pytest.raises(ProbeAborted) as info:
        AXES["restart"].before_pass(ctx, PassSchedule(1, "B"))
    assert str(info.value).startswith("the server did not become ready within 0.3s after the restart "
                                      "(ready command: exit 1)")


def test_cancelled_while_waiting_records_no_restart(context):
    ctx = context(opts("restart", restart="true", ready="exit 1", ready_timeout=30.0))
    ctx.cancel.set()
    AXES["restart"].before_pass(ctx, PassSchedule(1, "B"))
    assert "restart:1" not in ctx.steps


def test_restart_evidence_per_step():
    unseen = restart_evidence({"process_before": P1, "process_after": None}, "B")
    assert unseen["verdict"] == "unverified" and unseen["pass"] == "B"
    assert unseen["sentence"] == ("restart unverified: the serving process could not be observed (this restart was "
                                  "recorded before execsys looked at the process)")
    why = restart_evidence({"process_before": None, "process_after": P2, "process_unobservable": "remote"}, "C")
    assert why["sentence"] == "restart unverified: the serving process could not be observed (remote)"
    same = restart_evidence({"process_before": P1, "process_after": {"pid": 10, "started_at": 100.0}}, "B")
    assert same["verdict"] == "not-observed" and (same["before"], same["after"]) == (P1, P1)
    moved_start = restart_evidence({"process_before": P1, "process_after": {"pid": 10, "started_at": 101.0}}, "B")
    assert moved_start["verdict"] == "observed"


def test_restart_evidence_takes_the_worst_restart(context):
    ctx = context(opts("restart", restart="true"))
    schedules = [PassSchedule(i, letters(i)) for i in range(4)]
    none = AXES["restart"].evidence(ctx, schedules, None)
    assert none == {"event": "restart", "verdict": "unverified",
                    "sentence": "restart unverified: no restart was recorded in this run", "restarts": []}
    ctx.steps["restart:0"] = {"process_before": P1, "process_after": P1}  # pass A is never after a restart
    ctx.steps["restart:1"] = {"process_before": P1, "process_after": P2}
    ctx.steps["restart:2"] = {"process_before": None, "process_after": P2, "process_unobservable": "remote"}
    ctx.steps["restart:3"] = {"process_before": P2, "process_after": P2}
    worst = AXES["restart"].evidence(ctx, schedules, None)
    assert worst["verdict"] == "not-observed" and len(worst["restarts"]) == 3 and worst["event"] == "restart"
    assert worst["sentence"].startswith("no restart observed: the serving process before pass D")
    del ctx.steps["restart:3"]
    unverified = AXES["restart"].evidence(ctx, schedules, None)
    assert (unverified["event"], unverified["verdict"]) == ("restart", "unverified")
    assert unverified["sentence"] == "restart unverified: the serving process could not be observed (remote)"
    del ctx.steps["restart:2"]
    ctx.steps["restart:3"] = {"process_before": P2, "process_after": P1}
    last = AXES["restart"].evidence(ctx, schedules, None)
    assert last["verdict"] == "observed" and last["sentence"].startswith("restart observed before pass D")


def test_restart_axis_calls_a_moved_fingerprint_an_engine_change_once(context):
    ctx = context(opts("restart", restart="true"))
    AXES["restart"].served_changed(ctx, "fingerprint moved")
    AXES["restart"].served_changed(ctx, "model moved")
    AXES["restart"].served_changed(ctx, "model moved")
    assert ctx.engine_change == "fingerprint moved"
    assert ctx.notes == ["fingerprint moved: disagreement is not a restart effect", "model moved"]
    other = context(opts())
    AXES["session"].served_changed(other, "model moved")
    AXES["session"].served_changed(other, "model moved")
    assert other.notes == ["model moved"] and other.engine_change is None


# -- the restart command, readiness, and what moved ---------------------------------------------

def test_describe_a_command_result():
    assert _describe(ProcResult(["sh"], None, error="No such file")) == "could not run: No such file"
    assert _describe(ProcResult(["sh"], None, timed_out=True, duration_s=4.6)) == "no exit within 5s"
    assert _describe(ProcResult(["sh"], 2, stdout=b"out1\nout2\n", stderr=b"")) == "exit 2: out2"
    assert _describe(ProcResult(["sh"], 2, stdout=b"out", stderr=b"err1\nerr2  \n")) == "exit 2: err2"
    assert _describe(ProcResult(["sh"], 1, stdout=b"  \n")) == "exit 1"
    assert _describe(ProcResult(["sh"], 1, stderr=b"x" * 300)) == "exit 1: " + "x" * 200


def test_run_restart_runs_the_command_in_a_shell_within_its_timeout():
    result = restart_axis.run_restart("echo $((2 + 3)); exit 4", 5.0)
    assert (result.returncode, result.text().strip()) == (4, "5")
    slow = restart_axis.run_restart("exec sleep 1", 0.3)  # stopped at its timeout, not proc.run's default 5 s
    assert slow.timed_out and not slow.ok


class Ready(JsonHandler):
    status = {"code": 200}
    paths: list[str] = []

    def do_GET(self) -> None:
        Ready.paths.append(self.path)
        self.send_json({"data": []}, Ready.status["code"])


def wctx(url: str = "", cancel: bool = False):
    ctx = SimpleNamespace(target_url=lambda target: {0: url}[target], cancel=threading.Event())
    if cancel:
        ctx.cancel.set()
    return ctx


def test_wait_ready_by_url_default_and_command():
    assert wait_ready(wctx(), 0, None, 5.0) == (True, "a command target is ready when the restart command has "
                                                      "exited 0")
    with LoopbackServer(Ready) as server:
        Ready.status["code"], Ready.paths[:] = 200, []
        url = server.url()
        assert wait_ready(wctx(url), 0, None, 5.0) == (True, f"{url}/models answered 200")
        assert Ready.paths == ["/v1/models"]
        assert wait_ready(wctx(), 0, server.url("/health"), 5.0) == (True, f"{server.url('/health')} answered 200")
        Ready.status["code"] = 299
        assert wait_ready(wctx(), 0, server.url("/h"), 5.0)[0] is True
        Ready.status["code"] = 503
        assert wait_ready(wctx(), 0, server.url("/h"), 0.3) == (False, f"{server.url('/h')} answered 503")
        Ready.status["code"] = 300
        assert wait_ready(wctx(), 0, server.url("/h"), 0.3)[0] is False
        Ready.status["code"] = 199
        assert wait_ready(wctx(), 0, server.url("/h"), 0.3)[0] is False
    gone = "http://127.0.0.1:9/ready"
    assert wait_ready(wctx(), 0, gone, 0.3) == (False, f"{gone}: ConnectError")
    secure = "https://127.0.0.1:9/ready"  # polled as a URL, never run as a command
    assert wait_ready(wctx(), 0, secure, 0.3) == (False, f"{secure}: ConnectError")
    assert wait_ready(wctx(), 0, "true", 5.0) == (True, "ready command exited 0")
    assert wait_ready(wctx(), 0, "echo no; exit 2", 0.3) == (False, "ready command: exit 2: no")
    assert wait_ready(wctx(cancel=True), 0, "true", 5.0) == (False, "cancelled")
    assert wait_ready(wctx(), 0, "true", 0.0) == (False, "not polled yet")


def test_a_ready_command_is_stopped_after_a_second_even_when_the_deadline_is_sooner():
    # at most the time left, but at least 1 s: a 1.5 s command never finishes in time
    ready, detail = wait_ready(wctx(), 0, "exec sleep 1.5", 0.3)
    assert ready is False and detail.startswith("ready command: no exit within ")


def test_runtime_changes_in_words():
    assert runtime_changes({}, {}) == []
    assert runtime_changes({"models": ["a"], "server": "1"}, {"models": ["a"], "server": "1"}) == []
    assert runtime_changes({"models": ["a"]}, {"models": ["a", "b"]}) == ["model list: a -> a b"]
    assert runtime_changes({"server": None}, {"server": "2"}) == []
    assert runtime_changes({"server": {"version": "1"}}, {"server": {"version": "2"}}) == ["server version: 1 -> 2"]
    before = {"runtime": {"process_argv": ["-m", "x", "--a"], "engine": "llama", "build_info": "b1"}}
    after = {"runtime": {"process_argv": ["-m", "x", "--b"], "engine": "llama", "build_info": "b2"}}
    assert runtime_changes(before, after) == ["build info: b1 -> b2", "process argv: ---a +--b"]
    assert runtime_changes({"runtime": {"process_argv": ["a", "b"]}}, {"runtime": {"process_argv": ["b", "a"]}}) == [
        "process argv: reordered"]
    assert runtime_changes({"runtime": {"numerics_env": ["X=1"]}}, {"runtime": {"numerics_env": ["X=1", "Y=2"]}}) == [
        "numerics env: +Y=2"]


def test_brief_values():
    assert _brief({"version": 3, "x": 1}) == "3"
    assert _brief({"x": 1}) == "{'x': 1}"
    assert _brief(["a", 2]) == "a 2"
    assert _brief("x" * 160) == "x" * 160
    assert _brief("x" * 161) == "x" * 157 + "..."


# -- redeploy: evidence and the fingerprint note ------------------------------------------------

def baseline(check, schema="execsys.probe/1"):
    return SimpleNamespace(id="rec-1", system_check=check, schema=schema)


def proc_obs(p):
    return {"runtime.process.pid": p["pid"], "runtime.process.started_at": p["started_at"]}


REDEPLOY = [PassSchedule(0, "baseline", source="baseline"), PassSchedule(1, "B")]


def test_redeploy_evidence(context):
    axis = AXES["redeploy"]
    ctx = context(opts("redeploy", baseline="rec-1"), processes=[(None, "not served from this machine")])
    assert axis.evidence(ctx, REDEPLOY, None) is None
    bare = axis.evidence(ctx, REDEPLOY, baseline(None))
    assert bare["verdict"] == "unverified" and bare["event"] == "redeploy" and bare["baseline"] == "rec-1"
    assert bare["sentence"] == ("redeploy unverified: the baseline rec-1 (execsys.probe/1) carries no observation of "
                                "its serving process")
    blind = axis.evidence(ctx, REDEPLOY, baseline({"at_start": {}}))
    assert blind["sentence"] == "redeploy unverified: the baseline rec-1 could not observe its serving process"
    looked = baseline({"at_start": proc_obs(P1)})
    unseen = axis.evidence(ctx, REDEPLOY, looked)
    assert unseen["verdict"] == "unverified" and unseen["before"] == P1 and unseen["after"] is None
    assert unseen["sentence"] == ("redeploy unverified: the serving process could not be observed (not served from "
                                  "this machine)")
    ctx.steps["system:1:start"] = {"observed": proc_obs(P1)}
    same = axis.evidence(ctx, REDEPLOY, looked)
    assert same["verdict"] == "not-observed"
    assert same["sentence"] == ("no redeploy observed: the serving process (pid 10, started 1970-01-01T00:01:40Z) is "
                                "the one baseline rec-1 measured")
    ctx.steps["system:1:start"] = {"observed": proc_obs({"pid": 10, "started_at": 150.0})}
    assert axis.evidence(ctx, REDEPLOY, looked)["verdict"] == "observed"
    ctx.steps["system:1:start"] = {"observed": proc_obs(P2)}
    moved = axis.evidence(ctx, REDEPLOY, looked)
    assert moved["verdict"] == "observed" and moved["after"] == P2
    assert moved["sentence"] == ("redeploy observed: pid 10, started 1970-01-01T00:01:40Z -> pid 11, started "
                                 "1970-01-01T00:03:20Z")
    nothing_sent = axis.evidence(ctx, REDEPLOY[:1], looked)
    assert nothing_sent["sentence"] == "redeploy unverified: the serving process could not be observed (nothing was sent)"


def test_redeploy_fingerprint_notes():
    axis = AXES["redeploy"]
    base = baseline(None)
    assert axis.fingerprint_notes([{"system_fingerprints": []}], None) == []
    assert axis.fingerprint_notes([], base) == []
    assert axis.fingerprint_notes([{"system_fingerprints": []}, {"system_fingerprints": []}], base) == [
        "system_fingerprint: the engine reports none (a change of backend would not show there)"]
    assert axis.fingerprint_notes([{"system_fingerprints": ["a", "b"]}, {"system_fingerprints": ["x"]},
                                   {"system_fingerprints": ["a", "b"]}], base) == [
        "system_fingerprint unchanged: a, b"]
    assert axis.fingerprint_notes([{"system_fingerprints": ["a"]}, {"system_fingerprints": ["b"]}], base) == []
    assert axis.fingerprint_notes([{"system_fingerprints": []}, {"system_fingerprints": ["b"]}], base) == []
