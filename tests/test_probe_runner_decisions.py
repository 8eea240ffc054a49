"""The probe runner's decisions as tables, in process, against the flip endpoint (issue 26).

Every probe here runs :func:`execsys.probes.runner.run_probe` in this process against
:class:`tests.fixtures.llama.FlipEndpoint` (stdlib HTTP on loopback), whose answers are written in
the prompt: ``[flip]`` answers differently from the second call on, ``[flipnum]`` changes the text but
keeps the last number, ``[err500xK]`` fails the first K calls. So m/n, the flipped set, the errored
cases, the licence the sentence grants, resume and retry are pinned exactly, in milliseconds.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from execsys.probes import runner
from execsys.probes.axes import AXES, Axis, PassSchedule
from execsys.probes.cases import Case, pass_indices
from execsys.probes.client import Completion
from execsys.probes.events import CaseDone, Note, PassFinished, PassStarted, ProbeFinished, RunOpened
from execsys.probes.runner import ProbeAborted, ProbeInterrupted, ProbeOptions, run_probe

from execsys.errors import InputError
from execsys.ledger import Ledger
from tests.fixtures.llama import FlipEndpoint


@pytest.fixture(autouse=True)
def quick_system_look(monkeypatch):
    """The serving runtime's look (probes.system, tested on its own) answered at once: unverified, or
    what a test sets in ``looks`` -- so the runner's handling of it is what these tests pin."""
    from execsys.probes import system

    looks: list[dict] = []

    def observe(self, target, declared_runtime, label, at):
        entry = {"pass": label, "at": at, "time": "t", "observed": {"runtime.endpoint.url": declared_runtime.get(
            "endpoint")}, "differences": [], "unobserved": [], "reason": "stub", "verdict": system.UNVERIFIED}
        if looks:
            entry.update(looks.pop(0))
        return entry

    monkeypatch.setattr(system.SystemObserver, "observe", observe)
    return looks


@pytest.fixture(scope="module")
def endpoint():
    with FlipEndpoint() as served:
        yield served


def make_cases(n: int, marks: dict[int, str] | None = None, tag: str = "") -> list[Case]:
    marks = marks or {}
    return [Case(id=f"c{i}", prompt=f"q{tag} {i}{marks.get(i, '')}", max_tokens=4) for i in range(n)]


def options_for(endpoint, tmp_path: Path, cases: list[Case], **kw) -> ProbeOptions:
    given = {"axis": "session", "endpoints": [endpoint.base_url], "case_list": cases, "retries": 0,
             "timeout": 5.0, "ledger": tmp_path / "ledger.sqlite", "logprobs": 0}
    given.update(kw)
    return ProbeOptions(**given)


def probe(endpoint, tmp_path, cases, events=None, cancel=None, **kw):
    return run_probe(options_for(endpoint, tmp_path, cases, **kw),
                     on_event=events.append if events is not None else None, cancel=cancel)


# -- a session probe: the numbers, the sentence, the licence ------------------------------------

def test_session_probe_counts_the_flips_and_grants_no_licence(endpoint, tmp_path):
    events: list = []
    cases = make_cases(6, {1: " [flip]", 4: " [flip]"}, tag="s1")
    record = probe(endpoint, tmp_path, cases, events)
    assert (record.m, record.n, record.errored) == (4, 6, 0)
    assert sorted(record.flipped) == ["c1", "c4"]
    assert record.axis == "session" and record.repeats == 2 and record.tar_n == 2
    assert record.scope["boundary"] == "within one session"
    assert record.scope["holds"] is False and record.scope["level"] == "output"
    assert record.scope["engine_changed"] is False and record.scope["evidence"] is None
    assert record.scope["statement"] == ("unstable within one session: even one server session does not repeat "
                                         "itself: compare score distributions, not single runs")
    assert record.sentence.startswith("session agreement 4/6 = 0.67 (95% CI ")
    assert record.sentence.endswith(" — " + record.scope["statement"])
    assert record.logprobs == {"status": "off", "k": 0, "tie_margin": record.logprobs["tie_margin"]}
    assert record.target["kind"] == "endpoint" and record.target["command"] is None
    assert record.target["endpoints"] == [endpoint.base_url] and record.target["models"] == ["fake"]
    a, b = record.passes
    assert (a["index"], a["label"], a["order"], a["order_seed"], a["source"]) == (0, "A", "file", None, "send")
    assert (b["index"], b["label"], b["order"], b["order_seed"], b["source"]) == (1, "B", "shuffled", 0, "send")
    for p in (a, b):
        assert (p["completed"], p["errored"], p["model"], p["models"]) == (6, 0, "fake", ["fake"])
        assert p["system_fingerprints"] == ["fp_fake_1"] and p["target"] == endpoint.base_url
        assert set(p["window"]) == {"start", "end", "start_unix", "end_unix"}
        assert p["window"]["start_unix"] <= p["window"]["end_unix"]
        assert "fillers" not in p and "model_mismatch" not in p

    assert events[0] == RunOpened(record.run, False)
    assert events[1] == PassStarted(0, "A", 6, 0, record.run)
    done = [e for e in events if isinstance(e, CaseDone)]
    assert [e.done for e in done] == [1, 2, 3, 4, 5, 6] * 2 and {e.total for e in done} == {6}
    assert all(e.agrees is None and not e.excluded for e in done[:6])
    assert {e.case_id for e in done[6:] if e.agrees is False} == {"c1", "c4"}
    assert [e.agreement.n for e in done[6:]] == [1, 2, 3, 4, 5, 6]
    finished = [e for e in events if isinstance(e, PassFinished)]
    assert [(f.pass_index, f.label, f.completed, f.errored) for f in finished] == [(0, "A", 6, 0), (1, "B", 6, 0)]
    assert (finished[1].agreement.m, finished[1].agreement.n) == (4, 6)
    assert events[-1] == ProbeFinished(record)
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        run = ledger.get(record.run)
        assert run.kind == "probe-run" and run.body["schema"] == "execsys.probe-run/1"
        params = run.body["parameters"]
        assert params["axis"] == "session" and params["target_kind"] == "endpoint"
        assert params["targets"] == [endpoint.base_url] and params["models"] == ["fake"]
        assert params["cases_file"] is None and params["extract"] is None and params["repeats"] == 2
        row = ledger.child(record.run, "1:c1").body
        assert (row["pass"], row["case"], row["error"], row["attempts"]) == (1, "c1", None, 1)
        assert row["text"] == FlipEndpoint.answer("qs1 1 [flip]", 2)
        assert row["model"] == "fake" and row["system_fingerprint"] == "fp_fake_1" and row["finish_reason"] == "stop"
        assert row["in_flight_with"] == 0 and row["after_twin"] is False
        assert ledger.child(record.run, "final").id == record.id


def test_every_case_agreeing_is_stable_and_licenses_the_session(endpoint, tmp_path):
    record = probe(endpoint, tmp_path, make_cases(3, tag="s2"))
    assert (record.m, record.n, record.flipped) == (3, 3, [])
    assert record.scope["holds"] is True
    assert record.scope["statement"] == "stable within one session for these 3 cases: repeated runs on one server agree"
    assert record.sentence == ("session agreement 3/3 = 1.00 (95% CI 0.44–1.00) — stable within one session for "
                               "these 3 cases: repeated runs on one server agree")


def test_errored_cases_are_counted_apart_and_excluded_from_n(endpoint, tmp_path):
    events: list = []
    record = probe(endpoint, tmp_path, make_cases(4, {2: " [error]"}, tag="e1"), events)
    assert (record.m, record.n, record.errored, record.errored_cases) == (3, 3, 1, ["c2"])
    assert record.sentence.endswith("(1 errored case excluded from n)")
    assert [(p["completed"], p["errored"]) for p in record.passes] == [(3, 1), (3, 1)]
    finished = [e for e in events if isinstance(e, PassFinished)]
    assert [(f.completed, f.errored) for f in finished] == [(3, 1), (3, 1)]
    [bad] = [e for e in events if isinstance(e, CaseDone) and e.pass_index == 1 and e.case_id == "c2"]
    assert bad.excluded is True and bad.agrees is None and bad.error and bad.digest is None


def test_two_errored_cases_are_plural(endpoint, tmp_path):
    record = probe(endpoint, tmp_path, make_cases(3, {0: " [error]", 1: " [error]"}, tag="e2"))
    assert record.sentence.endswith("(2 errored cases excluded from n)")


def test_no_case_completing_says_nothing_is_known(endpoint, tmp_path):
    record = probe(endpoint, tmp_path, make_cases(2, {0: " [error]", 1: " [error]"}, tag="e3"))
    assert (record.m, record.n) == (0, 0) and record.scope["holds"] is None
    assert record.sentence.startswith("session agreement: no case completed on every pass")


def test_outcome_level_counts_a_changed_text_with_the_same_number_as_agreeing(endpoint, tmp_path):
    cases = make_cases(4, {0: " [flipnum]", 1: " [flip]"}, tag="o1")
    record = probe(endpoint, tmp_path, cases, compare="outcome", extract="last-number")
    assert (record.m, record.n, record.flipped) == (3, 4, ["c1"])
    assert record.sentence.startswith("session outcome agreement 3/4")
    assert record.tarr == 0.5 and record.tara == 0.75
    plain = probe(endpoint, tmp_path / "b", make_cases(2, tag="o2"))
    assert plain.tara is None and plain.tarr == 1.0


# -- resume, cancel, retry ---------------------------------------------------------------------

def test_a_cancelled_probe_resumes_without_sending_a_case_twice(tmp_path):
    cancel = threading.Event()

    def on_event(event) -> None:
        if isinstance(event, CaseDone) and event.pass_index == 0 and event.done == 3:
            cancel.set()

    cases = make_cases(8, {5: " [flip]"}, tag="r1")
    with FlipEndpoint() as endpoint:
        options = options_for(endpoint, tmp_path, cases)
        with pytest.raises(ProbeInterrupted) as info:
            run_probe(options, on_event=on_event, cancel=cancel)
        stopped = info.value
        assert stopped.total == 16 and 3 <= stopped.saved < 16
        assert str(stopped) == f"interrupted: {stopped.saved} of 16 case results saved in run {stopped.run_id}"
        sent = endpoint.total_calls
        assert sent == stopped.saved
        events: list = []
        record = run_probe(options_for(endpoint, tmp_path, cases, resume=True), on_event=events.append)
        assert record.run == stopped.run_id and (record.m, record.n, record.flipped) == (7, 8, ["c5"])
        assert endpoint.total_calls == 16  # nothing lost, nothing sent twice
        assert Note(f"resuming run {stopped.run_id}") in events and RunOpened(stopped.run_id, True) in events
        started = [e for e in events if isinstance(e, PassStarted)]
        assert started[0].done == stopped.saved
        # the finished run asked again: the stored record, nothing sent
        again = run_probe(options_for(endpoint, tmp_path, cases, resume=stopped.run_id))
        assert again.id == record.id and endpoint.total_calls == 16
        # --resume with nothing unfinished: a new probe, said so
        events.clear()
        fresh = run_probe(options_for(endpoint, tmp_path, cases, resume=True), on_event=events.append)
        assert fresh.run != record.run
        assert Note("nothing unfinished to resume with these parameters: starting a new probe") in events
        assert RunOpened(fresh.run, False) in events


def test_resume_refuses_other_parameters_and_other_records(endpoint, tmp_path):
    cases = make_cases(2, tag="r2")
    record = probe(endpoint, tmp_path, cases)
    with pytest.raises(InputError) as info:
        probe(endpoint, tmp_path, cases, resume=record.run, repeats=3, order_seed=4)
    assert str(info.value) == (f"--resume {record.run}: that run was started with different parameters "
                               "(order_seed, repeats); repeat its exact command line, or drop --resume to start "
                               "a new probe")
    with pytest.raises(InputError) as info:
        probe(endpoint, tmp_path, cases, resume=record.id)
    assert str(info.value) == f"--resume {record.id}: record {record.id} is a probe, not a probe-run"


def test_retry_errored_sends_only_the_errored_cases_again(tmp_path):
    cases = make_cases(3, {1: " [err500x1]"}, tag="r3")
    with FlipEndpoint() as endpoint:
        first = probe(endpoint, tmp_path, cases)
        assert (first.m, first.n, first.errored_cases) == (2, 2, ["c1"])
        assert endpoint.total_calls == 6
        events: list = []
        retried = probe(endpoint, tmp_path, cases, events, resume=first.run, retry_errored=True)
        assert endpoint.total_calls == 7  # c1 on pass A only
        assert (retried.m, retried.n, retried.errored) == (3, 3, 0) and retried.run == first.run
        assert [(p["completed"], p["errored"]) for p in retried.passes] == [(3, 0), (3, 0)]
        with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
            assert ledger.child(first.run, "0:c1#retry1").body["error"] is None
            assert ledger.child(first.run, "0:c1").body["error"]
            assert ledger.child(first.run, "final#retry1").id == retried.id
        # nothing errored any more: asking again hands back the retried record
        again = probe(endpoint, tmp_path, cases, resume=first.run, retry_errored=True)
        assert again.id == retried.id and endpoint.total_calls == 7


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_endpoint_gone_stops_after_five_refused_connections_and_records_none(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.EndpointClient, "resolve_model", lambda self, requested: requested)
    url = f"http://127.0.0.1:{free_port()}/v1"
    cases = make_cases(7, tag="u1")
    options = ProbeOptions(axis="session", endpoints=[url], case_list=cases, retries=0, timeout=2.0,
                           ledger=tmp_path / "ledger.sqlite", logprobs=0, model="m")
    with pytest.raises(ProbeAborted) as info:
        run_probe(options)
    assert str(info.value) == "endpoint unreachable since case c0: stopped; --resume continues"
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        assert ledger.count(kind="probe-case", parent=info.value.run_id) == 0


def test_exactly_the_streak_of_refused_connections_stops_the_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.EndpointClient, "resolve_model", lambda self, requested: requested)
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert runner.UNREACHABLE_STREAK == 5
    options = ProbeOptions(axis="session", endpoints=[url], case_list=make_cases(5, tag="u3"), retries=0,
                           timeout=2.0, ledger=tmp_path / "ledger.sqlite", logprobs=0, model="m")
    with pytest.raises(ProbeAborted, match="endpoint unreachable since case c0"):
        run_probe(options)


def test_fewer_refused_connections_than_the_streak_are_recorded_as_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.EndpointClient, "resolve_model", lambda self, requested: requested)
    url = f"http://127.0.0.1:{free_port()}/v1"
    options = ProbeOptions(axis="session", endpoints=[url], case_list=make_cases(4, tag="u2"), retries=0,
                           timeout=2.0, ledger=tmp_path / "ledger.sqlite", logprobs=0, model="m")
    record = run_probe(options)
    assert (record.n, record.errored) == (0, 4)
    assert [(p["completed"], p["errored"]) for p in record.passes] == [(0, 4), (0, 4)]


# -- other axes through the runner -----------------------------------------------------------

def test_load_pass_sends_fillers_and_says_the_load(endpoint, tmp_path):
    record = probe(endpoint, tmp_path, make_cases(4, tag="l1"), axis="concurrency", load=2)
    a, b = record.passes
    assert (a["concurrency"], a["load"]) == (1, 0) and "fillers" not in a
    assert (b["concurrency"], b["load"]) == (2, 2) and b["fillers"] >= 0
    assert record.scope["boundary"] == "between concurrency 1 and load 2"
    assert (record.m, record.n) == (4, 4)


def test_two_endpoints_compared_at_one_instant(tmp_path):
    with FlipEndpoint(host_salt=0) as one, FlipEndpoint(host_salt=3) as two:
        cases = make_cases(3, {0: " [host]"}, tag="h1")
        options = ProbeOptions(axis="hosts", endpoints=[one.base_url, two.base_url], case_list=cases, retries=0,
                               timeout=5.0, ledger=tmp_path / "ledger.sqlite", logprobs=0)
        record = run_probe(options)
    assert (record.m, record.n, record.flipped) == (2, 3, ["c0"])
    assert [p["target"] for p in record.passes] == [one.base_url, two.base_url]
    assert [p["label"] for p in record.passes] == ["host 1", "host 2"]
    assert record.target["endpoints"] == [one.base_url, two.base_url]


def test_redeploy_against_a_baseline_record(endpoint, tmp_path):
    cases = make_cases(3, {2: " [flip]"}, tag="d1")
    base = probe(endpoint, tmp_path, cases)
    record = probe(endpoint, tmp_path, cases, axis="redeploy", baseline=base.id)
    assert record.passes[0]["source"] == "baseline" and record.passes[0]["target"] == f"baseline {base.id}"
    assert record.passes[0]["model"] is None
    assert record.baseline["id"] == base.id and record.baseline["run"] == base.run
    assert (record.m, record.n, record.flipped) == (2, 3, ["c2"])  # the baseline's first pass vs a fresh pass
    with pytest.raises(InputError, match="is a probe-run, not a probe record"):
        probe(endpoint, tmp_path, cases, axis="redeploy", baseline=base.run)
    with pytest.raises(InputError, match=f"--baseline {base.id} has none of these cases"):
        probe(endpoint, tmp_path, make_cases(2, tag="zz")[1:], axis="redeploy", baseline=base.id,
              case_list=[Case(id="other", prompt="x")])


# -- until-width ---------------------------------------------------------------------------------

def test_until_width_stops_at_the_first_round_narrow_enough(endpoint, tmp_path):
    from execsys.stats import cases_for_width

    first = cases_for_width(1.0, 0.5)
    record = probe(endpoint, tmp_path, make_cases(first + 15, tag="w1"), until_width=0.5)
    assert record.n == first
    assert record.stopped["reason"] == "width" and record.stopped["early"] is True
    assert record.stopped["until_width"] == 0.5 and record.stopped["width"] <= 0.5
    never = probe(endpoint, tmp_path / "b", make_cases(4, tag="w2"), until_width=0.01, max_n=3)
    assert never.n == 3 and never.stopped["reason"] == "max-n" and never.stopped["early"] is False
    plain = probe(endpoint, tmp_path / "c", make_cases(3, tag="w3"), until_width=0.01)
    assert plain.stopped["reason"] == "cases" and plain.stopped["max_n"] is None


# -- the small rules, called directly ----------------------------------------------------------

@pytest.mark.parametrize(("requested", "answered", "other"), [
    ("m", "m", False), ("m", "x", True), (None, "x", False), ("m", None, False), ("", "x", False), ("m", "", False),
])
def test_answered_as_other_model(requested, answered, other):
    assert runner._answered_as_other(requested, answered) is other


def test_other_model_note_names_every_answer_and_counts():
    note = runner._other_model_note("B", "m", {"y": 2, "x": 1}, 5)
    assert note == "pass B: 3 of 5 responses named another model than the 'm' requested: 'x' (1), 'y' (2)"


def test_engine_facts_leave_out_pids_and_the_program_name():
    facts = runner._engine_facts({"engine": "llama.cpp", "endpoint": {"server_version": "1", "build_info": "b",
                                                                       "system_fingerprint": "fp"},
                                  "process": {"argv": ["python", "-m", "x"], "exe": "/bin/py", "pid": 7,
                                              "numerics_env": {"A": "1"}}})
    assert facts == {"engine": "llama.cpp", "server_version": "1", "build_info": "b", "system_fingerprint": "fp",
                     "process_argv": ["-m", "x"], "process_exe": "/bin/py", "numerics_env": {"A": "1"}}
    assert runner._engine_facts({"process": {"argv": ["only"]}})["process_argv"] is None
    assert runner._engine_facts({})["process_argv"] is None


def test_declared_runtime_of_a_command_target_is_the_declared_endpoint():
    options = ProbeOptions(axis="session", command="cat", case_list=[], api_key_env="KEY",
                           declared_runtime={"endpoint": "http://e/v1", "engine": "vllm", "process": ""})
    assert runner._declared_runtime(options, "") == {"endpoint": "http://e/v1", "api_key_env": "KEY", "engine": "vllm"}
    assert runner._declared_runtime(options, "http://t/v1")["endpoint"] == "http://t/v1"


def test_request_key_makes_twins_of_the_same_prompt_or_messages():
    assert runner._request_key(Case("a", prompt="p")) == runner._request_key(Case("b", prompt="p"))
    messages = [{"role": "user", "content": "p"}]
    assert runner._request_key(Case("a", messages=messages)) == repr(messages)


def test_iso_is_utc_with_milliseconds():
    assert runner._iso(0.25) == "1970-01-01T00:00:00.250Z"


def test_baseline_results_take_each_case_first_pass():
    from execsys.probes.record import CaseResult, ProbeRecord

    record = ProbeRecord.__new__(ProbeRecord)
    record.passes = [{"system_fingerprints": ["fp1"], "models": ["m1"]}]
    record.cases = [CaseResult(id="b", passes=[], agree=None),
                    CaseResult(id="a", passes=[{"digest": "d", "outcome": "7", "error": None}, {"digest": "e"}],
                               agree=False),
                    CaseResult(id="c", passes=[{"digest": None, "outcome": None, "error": "HTTP 500"}], agree=None)]
    results = runner._baseline_results(record)
    assert list(results) == ["a", "c"]
    assert (results["a"].digest, results["a"].outcome, results["a"].fingerprint, results["a"].model) == \
        ("d", "7", "fp1", "m1")
    assert results["a"].error is None and results["c"].error == "HTTP 500"
    record.passes = []
    bare = runner._baseline_results(record)
    assert (bare["a"].fingerprint, bare["a"].model) == (None, None)


class _Vowel(Axis):
    name = "alpha"


def _context(tmp_path, axis=None):
    from execsys.probes.store import ProbeRunStore

    ledger = Ledger.open(tmp_path / "ledger.sqlite")
    options = ProbeOptions(axis="session", endpoints=["http://127.0.0.1:9/v1"], case_list=[])
    store = ProbeRunStore(ledger, "run-1")
    events: list = []
    return runner.RunContext(options, store, [], threading.Event(), events.append, axis), events, ledger


def test_engine_changed_says_a_or_an_by_the_axis_name(tmp_path):
    ctx, events, ledger = _context(tmp_path, _Vowel())
    ctx.engine_changed("engine moved")
    ctx.axis = AXES["session"]
    ctx.engine_changed("again")
    ledger.close()
    assert ctx.notes == ["engine moved: disagreement is not an alpha effect",
                         "again: disagreement is not a session effect"]
    assert ctx.engine_change == "again" and events == [Note(n) for n in ctx.notes]


def test_abort_names_the_run_and_what_was_kept(tmp_path):
    ctx, _, ledger = _context(tmp_path)
    ctx.pass_counts.update({0: 3, 1: 2})
    with pytest.raises(ProbeAborted) as info:
        ctx.abort("restart command failed (exit 1)")
    ledger.close()
    assert str(info.value) == ("restart command failed (exit 1); the 5 case results already taken are kept in run "
                               "run-1: fix it and continue with --resume run-1")
    assert info.value.run_id == "run-1"


def test_notes_are_redacted_and_kept_once(tmp_path):
    ctx, events, ledger = _context(tmp_path)
    ctx.note_once("token sk-abcdefghijklmnopqrstuvwx leaked")
    ctx.note_once("token sk-abcdefghijklmnopqrstuvwx leaked")
    ctx.note_event("said, not kept")
    ledger.close()
    assert len(ctx.notes) == 1 and "sk-abcdefghijklmnopqrstuvwx" not in ctx.notes[0]
    assert len(events) == 2 and events[1] == Note("said, not kept")
    assert ctx.pass_has_results(0) is False
    ctx.pass_counts[0] = 1
    assert ctx.pass_has_results(0) is True


def test_a_client_that_raises_is_an_errored_case_not_a_lost_one(endpoint, tmp_path, monkeypatch):
    from execsys.probes.client import EndpointClient

    real = EndpointClient.complete

    def complete(self, case, params):
        if case.id == "c1":
            raise RuntimeError("client bug")
        return real(self, case, params)

    monkeypatch.setattr(EndpointClient, "complete", complete)
    record = probe(endpoint, tmp_path, make_cases(2, tag="x1"))
    assert record.errored_cases == ["c1"]
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        assert ledger.child(record.run, "0:c1").body["error"] == "RuntimeError: client bug"


def test_pass_schedule_json_names_order_and_source():
    assert PassSchedule(1, "B", shuffled=True).to_json() == {
        "index": 1, "label": "B", "target": 0, "concurrency": 1, "load": 0, "order": "shuffled", "source": "send"}


def test_completion_without_text_is_not_ok():
    assert not Completion(None).ok and Completion("").ok and not Completion("x", error="e").ok


# -- what the record says beside the rate ----------------------------------------------------

DIFFERENCE = {"component": "runtime.engine.version", "pinned": "1", "observed": "2"}


def test_a_system_that_differs_from_the_lock_is_said_once_and_counts_toward_no_identity(
        endpoint, tmp_path, quick_system_look):
    from execsys.probes.events import SystemDiffers

    quick_system_look.extend([{"verdict": "differs", "differences": [DIFFERENCE], "reason": None}] * 2)
    events: list = []
    record = probe(endpoint, tmp_path, make_cases(2, tag="y1"), events, identity="0123456789abcdef0123")
    said = [e for e in events if isinstance(e, SystemDiffers)]
    assert len(said) == 1 and (said[0].pass_index, said[0].at) == (0, "start")
    assert said[0].message == "the engine answering this probe is not the pinned system: runtime engine version 1 -> 2"
    assert record.system_check["verdict"] == "differs" and record.scope["system"] == "differs"
    assert record.identity is None
    assert record.identity_reason == (f"{record.system_check['sentence']} (identity 0123456789ab was pinned): this "
                                      "probe counts toward no identity")
    assert said[0].message in record.notes
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        assert ledger.child(record.run, "system:0:start").body["verdict"] == "differs"
        assert ledger.child(record.run, "system:1:end").body["target"] == 0


def test_a_system_that_differs_without_a_lock_keeps_the_reason_it_had(endpoint, tmp_path, quick_system_look):
    quick_system_look.extend([{"verdict": "differs", "differences": [DIFFERENCE], "reason": None}])
    record = probe(endpoint, tmp_path, make_cases(1, tag="y2"), identity_reason="no lock here")
    assert record.identity is None and record.identity_reason == "no lock here"
    assert record.system_check["verdict"] == "differs"


def test_an_unverified_look_leaves_the_identity(endpoint, tmp_path):
    record = probe(endpoint, tmp_path, make_cases(1, tag="y3"), identity="0123456789abcdef0123")
    assert record.identity == "0123456789abcdef0123" and record.identity_reason is None
    assert record.system_check["verdict"] == "unverified" and record.scope["system"] == "unverified"
    assert [o["at"] for o in record.system_check["observations"]] == ["start", "end", "start", "end"]


def test_a_response_naming_another_model_is_said_once_per_pass_and_counted(endpoint, tmp_path, monkeypatch):
    import dataclasses

    from execsys.probes.events import ServedModelDiffers

    real = runner.EndpointClient.complete

    def complete(self, case, params):
        done = real(self, case, params)
        return dataclasses.replace(done, model="other") if case.id in ("c1", "c2") else done

    monkeypatch.setattr(runner.EndpointClient, "complete", complete)
    events: list = []
    record = probe(endpoint, tmp_path, make_cases(3, tag="m1"), events)
    said = [e for e in events if isinstance(e, ServedModelDiffers)]
    assert [(e.pass_index, e.requested, e.answered) for e in said] == [(0, "fake", "other"), (1, "fake", "other")]
    assert said[0].message == f"pass A: case {said[0].case_id} was answered as model 'other', not the 'fake' requested"
    a = record.passes[0]
    assert a["models"] == ["fake", "other"]
    assert a["model_mismatch"] == {"requested": "fake", "answered": {"other": 2}, "cases": 2}
    assert ("pass A: 2 of 3 responses named another model than the 'fake' requested: 'other' (2)") in record.notes
    assert ("pass B: 2 of 3 responses named another model than the 'fake' requested: 'other' (2)") in record.notes


def test_a_fingerprint_moving_between_passes_is_noted_beside_the_rate(endpoint, tmp_path, monkeypatch):
    import dataclasses

    real = runner.EndpointClient.complete
    seen: dict = {}

    def complete(self, case, params):
        done = real(self, case, params)
        seen[case.id] = seen.get(case.id, 0) + 1
        return dataclasses.replace(done, system_fingerprint="fp_b") if seen[case.id] > 1 else done

    monkeypatch.setattr(runner.EndpointClient, "complete", complete)
    record = probe(endpoint, tmp_path, make_cases(2, tag="f1"))
    assert record.notes == ["system_fingerprint changed between pass A and pass B: fp_fake_1 -> fp_b"]
    assert record.engine_changed is False and record.scope["statement"].startswith("stable")


def test_twins_and_requests_in_flight_are_recorded_per_case(endpoint, tmp_path):
    cases = [Case("a", prompt="twin t1"), Case("b", prompt="twin t1"), Case("c", prompt="other t1")]
    record = probe(endpoint, tmp_path, cases)
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        rows = {c: ledger.child(record.run, f"0:{c}").body for c in "abc"}
    assert [rows[c]["after_twin"] for c in "abc"] == [False, True, False]
    assert {rows[c]["in_flight_with"] for c in "abc"} == {0}


def test_logprobs_from_the_engine_give_the_near_tie_split(tmp_path):
    from tests.test_probe_forensics import LogprobEndpoint

    cases = [Case("c0", prompt="q [gap:0.003]"), Case("c1", prompt="q [gap:3.9]"), Case("c2", prompt="steady")]
    with LogprobEndpoint() as served:
        record = run_probe(ProbeOptions(axis="session", endpoints=[served.base_url], case_list=cases, retries=0,
                                        timeout=5.0, ledger=tmp_path / "ledger.sqlite", want_tokens=True))
    assert (record.m, record.n) == (1, 3)
    lp = record.logprobs
    assert (lp["status"], lp["k"], lp["tie_margin"], lp["flips"], lp["near_ties"], lp["not_near_ties"]) == \
        ("ok", 5, 0.1, 2, 1, 1)
    assert record.sentence.endswith(". 2 flips: 1 at near-tie (median margin 0.003), 1 not a near-tie (c1, 3.9 nats)")
    [c0] = [c for c in record.cases if c.id == "c0"]
    margin = c0.first_divergence["logprobs"]
    assert margin["verdict"] == "near-tie" and margin["token"] == 2
    assert c0.first_divergence["sent"] == [{"pass": 0, "after_twin": False, "in_flight_with": 0},
                                           {"pass": 1, "after_twin": False, "in_flight_with": 0}]
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        row = ledger.child(record.run, "0:c0").body
    assert row["tokens"] == ["The", " answer", " 4"] and "logprobs" in row


def test_logprobs_asked_and_none_given_are_unsupported(endpoint, tmp_path):
    record = probe(endpoint, tmp_path, make_cases(2, {0: " [flip]"}, tag="lp1"), logprobs=5)
    assert record.logprobs == {"status": "unsupported", "k": 5, "tie_margin": record.logprobs["tie_margin"]}
    assert "flips:" not in record.sentence


def test_a_large_probe_keeps_its_case_results_in_the_ledger(endpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "CASES_INLINE_LIMIT", 2)
    record = probe(endpoint, tmp_path, make_cases(3, {1: " [flip]"}, tag="big"))
    assert record.cases_in_ledger is True and (record.m, record.n) == (2, 3)
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        assert ledger.count(kind="probe-result", parent=record.run) == 3
    assert [c.id for c in record.cases] == ["c0", "c1", "c2"] and [c.agree for c in record.cases] == [True, False, True]


def test_baseline_of_another_identity_is_refused(endpoint, tmp_path):
    cases = make_cases(2, tag="d2")
    base = probe(endpoint, tmp_path, cases, identity="aaaaaaaaaaaaaaaa1")
    with pytest.raises(InputError) as info:
        probe(endpoint, tmp_path, cases, axis="redeploy", baseline=base.id, identity="bbbbbbbbbbbbbbbb2")
    assert str(info.value) == (f"--baseline {base.id} was taken under identity aaaaaaaaaaaa, this lock is "
                               "bbbbbbbbbbbb: a redeploy compares the same declared identity (see 'execsys diff')")
    same = probe(endpoint, tmp_path, cases, axis="redeploy", baseline=base.id, identity="aaaaaaaaaaaaaaaa1")
    assert same.baseline["identity"] == "aaaaaaaaaaaaaaaa1" and same.identity == "aaaaaaaaaaaaaaaa1"
    assert same.passes[0]["completed"] == 2 and same.passes[0]["system_fingerprints"] == ["fp_fake_1"]


def test_resume_true_takes_the_newest_unfinished_run(tmp_path):
    cancel = threading.Event()

    def stop_at_two(event) -> None:
        if isinstance(event, CaseDone) and event.done == 2:
            cancel.set()

    cases = make_cases(6, tag="r5")
    with FlipEndpoint() as served:
        with pytest.raises(ProbeInterrupted) as older:
            run_probe(options_for(served, tmp_path, cases), on_event=stop_at_two, cancel=cancel)
        cancel.clear()
        with pytest.raises(ProbeInterrupted) as newer:
            run_probe(options_for(served, tmp_path, cases), on_event=stop_at_two, cancel=cancel)
        record = run_probe(options_for(served, tmp_path, cases, resume=True))
        assert record.run == newer.value.run_id != older.value.run_id


def test_command_target_record_and_clients(tmp_path):
    options = ProbeOptions(axis="session", command="cat", case_list=[], retries=5, timeout=3.0)
    [client] = runner._clients(options)
    assert isinstance(client, runner.CommandClient)
    endpoint_opts = ProbeOptions(axis="session", endpoints=["http://a/v1", "http://b/v1"], case_list=[], concurrency=9)
    assert [c.base_url for c in runner._clients(endpoint_opts)] == ["http://a/v1", "http://b/v1"]


def test_case_body_without_a_run_is_empty(tmp_path):
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        assert runner._case_body(ledger, None, 0, "c") == {}
        assert runner._case_body(ledger, "run-x", 0, "c") == {}


# -- until-width: where inside a round it stops ------------------------------------------------

def _width(m: int, n: int) -> float:
    from execsys.stats import wilson

    low, high = wilson(m, n)
    return high - low


def test_until_width_stops_inside_a_round_at_the_exact_width_skipping_errored_cases(endpoint, tmp_path):
    # in the seeded order: ok, flip, errored, then ok: the width of 5/6 is reached at the 7th case, inside
    # the second round
    order = pass_indices(15, 0, 1)
    cases = make_cases(15, {order[1]: " [flip]", order[2]: " [error]"}, tag="w4")
    record = probe(endpoint, tmp_path, cases, until_width=_width(5, 6))
    assert (record.m, record.n, record.errored) == (5, 6, 1)
    assert record.stopped["reason"] == "width" and record.stopped["early"] is True
    assert record.stopped["width"] == _width(5, 6)


def test_until_width_judges_at_the_probe_level(endpoint, tmp_path):
    # every other case changes its text but keeps its number: agreeing outcomes, differing outputs
    order = pass_indices(16, 0, 1)
    cases = make_cases(16, {order[i]: " [flipnum]" for i in range(1, 16, 2)}, tag="w5")
    record = probe(endpoint, tmp_path, cases, until_width=0.6, compare="outcome", extract="last-number")
    assert (record.m, record.n) == (3, 3) and record.stopped["reason"] == "width"


def test_until_width_against_a_baseline_compares_with_its_first_pass(endpoint, tmp_path):
    cases = make_cases(12, tag="w6")
    base = probe(endpoint, tmp_path, cases)
    record = probe(endpoint, tmp_path, cases, axis="redeploy", baseline=base.id, until_width=0.5)
    assert (record.m, record.n) == (4, 4) and record.stopped["reason"] == "width"


def test_a_large_baseline_is_read_back_from_the_ledger(endpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "CASES_INLINE_LIMIT", 2)
    cases = make_cases(3, {0: " [flip]"}, tag="d3")
    base = probe(endpoint, tmp_path, cases)
    record = probe(endpoint, tmp_path, cases, axis="redeploy", baseline=base.id)
    assert (record.m, record.n, record.flipped) == (2, 3, ["c0"])


# -- the run context's looks at the target -----------------------------------------------------

def test_record_step_keeps_the_step_in_the_ledger_and_in_memory(tmp_path):
    ctx, _, ledger = _context(tmp_path)
    ctx.record_step("restart:1", {"command": "true"})
    assert ctx.step("restart:1") == {"command": "true"} and ctx.step("restart:2") is None
    assert ledger.child("run-1", "restart:1").body["command"] == "true"
    ledger.close()


def test_observe_reports_the_runtime_facts_or_why_not(endpoint, tmp_path, monkeypatch):
    import execsys.identity

    asked: list = []

    def observed(declared, require_endpoint=True):
        asked.append((declared, require_endpoint))
        return {"engine": "llama.cpp", "endpoint": {"server_version": "7"}, "process": {"argv": ["srv", "-m", "x"]}}

    monkeypatch.setattr(execsys.identity, "observe_runtime", observed)
    options = ProbeOptions(axis="session", endpoints=[endpoint.base_url], case_list=[], api_key_env="K",
                           declared_runtime={"engine": "llama.cpp"})
    [client] = runner._clients(options)
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        ctx = runner.RunContext(options, runner.ProbeRunStore(ledger, "r"), [client], threading.Event(), print)
        info = ctx.observe(0)
        assert info["models"] == ["fake"] and info["endpoint"] == endpoint.base_url
        assert info["runtime"] == {"engine": "llama.cpp", "server_version": "7", "build_info": None,
                                   "system_fingerprint": None, "process_argv": ["-m", "x"], "process_exe": None,
                                   "numerics_env": None}
        assert asked == [({"endpoint": endpoint.base_url, "api_key_env": "K", "engine": "llama.cpp"}, False)]

        def fails(declared, require_endpoint=True):
            raise RuntimeError("no look")

        monkeypatch.setattr(execsys.identity, "observe_runtime", fails)
        info = ctx.observe(0)
        assert info["runtime_error"] == "RuntimeError: no look" and "runtime" not in info
    client.close()


def test_system_runtime_takes_the_engine_and_process_the_lock_pinned(tmp_path):
    options = ProbeOptions(axis="session", endpoints=["http://127.0.0.1:9/v1"], case_list=[],
                           declared_runtime={"engine": "vllm", "process": "vllm serve"},
                           pinned_declared_runtime={"engine": "llama.cpp", "process": ""})
    client = SimpleNamespace(base_url="http://127.0.0.1:9/v1", display="t")
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        ctx = runner.RunContext(options, runner.ProbeRunStore(ledger, "r"), [client], threading.Event(), print)
        assert ctx.system_runtime(0) == {"endpoint": "http://127.0.0.1:9/v1", "engine": "llama.cpp",
                                         "process": "vllm serve"}
        assert ctx.target_url(0) == "http://127.0.0.1:9/v1"


def test_serving_process_is_found_only_where_it_can_be_seen(endpoint, tmp_path):
    import os

    def ctx_for(url, command=None):
        options = ProbeOptions(axis="session", endpoints=[url] if url else [], command=command, case_list=[])
        client = SimpleNamespace(base_url=url, display="t")
        return runner.RunContext(options, runner.ProbeRunStore(ledger, "r"), [client], threading.Event(), print)

    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        assert ctx_for("", command="cat").serving_process(0) == (None, "no endpoint to find its serving process by")
        assert ctx_for("http://192.0.2.7:8000/v1").serving_process(0) == (
            None, "http://192.0.2.7:8000/v1 is not served from this machine: its process is not observable here")
        gone = f"http://127.0.0.1:{free_port()}/v1"
        assert ctx_for(gone).serving_process(0) == (None, f"no process visible here listens on {gone}'s port")
        facts, why = ctx_for(endpoint.base_url).serving_process(0)
        assert why is None and facts["pid"] == os.getpid()


def test_merge_records_combines_per_endpoint_records_or_says_why_not(endpoint, tmp_path):
    from execsys.errors import UsageError

    record = probe(endpoint, tmp_path, make_cases(1, tag="g1"))
    with Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        with pytest.raises(UsageError, match="needs two or more probe record ids"):
            runner.merge_records(ledger, [record.id])
        with pytest.raises(InputError) as info:
            runner.merge_records(ledger, [record.id, record.id])
    assert str(info.value).startswith(f"record {record.id} has no identity")


# -- the first divergence, from hand-written rows ------------------------------------------------

def _rows(tmp_path, rows: dict[tuple[str, int], dict]):
    from execsys.probes.store import ProbeRunStore, case_key

    ledger = Ledger.open(tmp_path / "ledger.sqlite")
    runs: dict[str, str] = {}
    for (run, pass_index), body in rows.items():
        if run not in runs:
            runs[run] = ledger.append("probe-run", {"schema": "x"})
        ledger.append("probe-case", {"pass": pass_index, "case": "c", **body}, parent=runs[run],
                      key=case_key(pass_index, "c"))
    return ledger, runs, ProbeRunStore(ledger, runs.get("run", "none"))


def test_divergence_names_where_and_how_each_side_was_sent(tmp_path):
    ledger, runs, store = _rows(tmp_path, {
        ("run", 0): {"text": "abc", "after_twin": True, "logprobs_unsupported": True},
        ("run", 1): {"text": "abd", "in_flight_with": 3},
    })
    schedules = [PassSchedule(0, "A"), PassSchedule(1, "B")]
    found = runner._divergence(store, None, schedules, "c", 1)
    ledger.close()
    assert (found["pass"], found["char"], found["logprobs"]) == (1, 2, "unsupported")
    assert found["sent"] == [{"pass": 0, "after_twin": True, "in_flight_with": 0},
                             {"pass": 1, "after_twin": False, "in_flight_with": 3}]


def test_divergence_unsupported_on_the_later_side_and_rows_without_send_conditions(tmp_path):
    ledger, runs, store = _rows(tmp_path, {("run", 0): {"text": "abc"},
                                           ("run", 1): {"text": "abd", "logprobs_unsupported": True}})
    found = runner._divergence(store, None, [PassSchedule(0, "A"), PassSchedule(1, "B")], "c", 1)
    ledger.close()
    assert found["logprobs"] == "unsupported" and "sent" not in found


def test_divergence_against_a_baseline_reads_the_baseline_run(tmp_path):
    ledger, runs, store = _rows(tmp_path, {("base", 0): {"text": "xyz", "in_flight_with": 1},
                                           ("run", 1): {"text": "xyw"}, ("run", 0): {"text": "other"}})
    schedules = [PassSchedule(0, "baseline", source="baseline"), PassSchedule(1, "B")]
    found = runner._divergence(store, SimpleNamespace(run=runs["base"]), schedules, "c", 1)
    none = runner._divergence(store, None, schedules, "c", 1)
    ledger.close()
    assert found["char"] == 2 and found["sent"] == [{"pass": 0, "after_twin": False, "in_flight_with": 1}]
    assert none["char"] is None  # no baseline run: nothing to compare with


def test_divergence_judges_the_margin_at_the_probe_tie_margin(tmp_path):
    from execsys.probes.margin import pack_logprobs

    a = pack_logprobs(["x"], [-1.0], [[["x", -1.0], ["y", -1.25]]])
    b = pack_logprobs(["y"], [-1.0], [[["y", -1.0], ["x", -1.25]]])
    ledger, runs, store = _rows(tmp_path, {("run", 0): {"text": "x", "logprobs": a},
                                           ("run", 1): {"text": "y", "logprobs": b}})
    schedules = [PassSchedule(0, "A"), PassSchedule(1, "B")]
    wide = runner._divergence(store, None, schedules, "c", 1, tie_margin=0.25)
    narrow = runner._divergence(store, None, schedules, "c", 1)
    ledger.close()
    assert wide["logprobs"]["verdict"] == "near-tie" and narrow["logprobs"]["verdict"] == "not a near-tie"


def test_a_case_missing_from_the_baseline_is_errored_not_compared(endpoint, tmp_path):
    base = probe(endpoint, tmp_path, make_cases(2, tag="d4"))
    events: list = []
    record = probe(endpoint, tmp_path, make_cases(3, tag="d4"), events, axis="redeploy", baseline=base.id)
    assert (record.m, record.n, record.errored_cases) == (2, 2, ["c2"])
    assert [(p["completed"], p["errored"]) for p in record.passes] == [(2, 1), (3, 0)]  # the baseline lacks c2
    judged = {e.case_id: e.agrees for e in events if isinstance(e, CaseDone) and e.pass_index == 1}
    assert judged == {"c0": True, "c1": True, "c2": None}


def test_each_answer_is_judged_as_it_arrives_at_the_probe_level(endpoint, tmp_path):
    events: list = []
    probe(endpoint, tmp_path, make_cases(2, {0: " [flipnum]", 1: " [flip]"}, tag="o3"), events, compare="outcome",
          extract="last-number")
    judged = {e.case_id: e.agrees for e in events if isinstance(e, CaseDone) and e.pass_index == 1}
    assert judged == {"c0": True, "c1": False}


def test_a_resumed_pass_keeps_the_window_of_the_session_that_first_sent(tmp_path):
    import time

    cancel = threading.Event()
    when: list = []

    def on_event(event) -> None:
        if isinstance(event, CaseDone) and event.pass_index == 0 and event.done == 2:
            when.append(time.time())
            cancel.set()

    cases = make_cases(6, tag="r6")
    with FlipEndpoint() as served:
        with pytest.raises(ProbeInterrupted):
            run_probe(options_for(served, tmp_path, cases), on_event=on_event, cancel=cancel)
        record = run_probe(options_for(served, tmp_path, cases, resume=True))
    assert record.passes[0]["window"]["start_unix"] < when[0] < record.passes[1]["window"]["start_unix"]


def test_until_width_at_the_outcome_level_counts_changed_outcomes(endpoint, tmp_path):
    # a flip that changes the number disagrees at the outcome level too: the width of 2/3 is not 0.6
    order = pass_indices(16, 0, 1)
    cases = make_cases(16, {order[0]: " [flip]"}, tag="w7")
    record = probe(endpoint, tmp_path, cases, until_width=0.6, compare="outcome", extract="last-number")
    assert (record.m, record.n) == (4, 5) and record.stopped["reason"] == "width"


def test_errored_cases_with_logprobs_asked_are_not_logprobs_that_came_back(endpoint, tmp_path):
    record = probe(endpoint, tmp_path, make_cases(2, {0: " [error]", 1: " [error]"}, tag="lp2"), logprobs=5)
    assert record.logprobs["status"] == "unsupported"
