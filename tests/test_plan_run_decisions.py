"""``plan run`` as tables, in process: how its options are layered and refused (endpoints, parameters,
timeout, cases, log, lock), which log file it writes (never an earlier one), the sentence it ends with,
and a whole run against fake endpoints -- the registered order, both arms per case, the pairs counted,
a failed request seen as a restart, the label causal only when every check held, the record in the
ledger.

The endpoints are fakes with :class:`execsys.probes.client.EndpointClient`'s interface and the serving
runtime is faked as in tests/test_plan_system_decisions.py, so every run takes milliseconds;
tests/test_plan.py and tests/test_plan_arms.py run real llama.cpp servers.
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import execsys.probes.client
import pytest
from execsys.probes.client import Completion

import execsys.identity.serving
from execsys.errors import InputError, UsageError
from execsys.identity import Identity
from execsys.ledger import Ledger
from execsys.plan import run as plan_run
from execsys.plan.checks import Check
from execsys.plan.log import LOG_SCHEMA, read_log
from execsys.plan.paired import paired_stats
from execsys.plan.placement import PlacementReport
from execsys.plan.run import (
    DEFAULT_PARAMS,
    RUN_SCHEMA,
    ArmAnswered,
    CaseSent,
    CheckResult,
    NoPinnedIdentity,
    PairScored,
    PlacementChecked,
    PlanRunOptions,
    RestartSeen,
    WindowClosed,
    WindowOpened,
    check_sendable,
    lock_artifact,
    next_free_log,
    plan_statement,
    run_plan,
)
from execsys.plan.schedule import NO_PLAN_IDENTITY, new_plan, register_plan, unpinned_reason

URL_A, URL_B = "http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"


def write_cases(path: Path, n: int = 4, *, expected: str | None = "yes", without: tuple[str, ...] = ()) -> Path:
    rows = []
    for i in range(n):
        row: dict = {"id": f"c{i}", "prompt": f"Item {i}", "max_tokens": 4}
        if expected is not None and f"c{i}" not in without:
            row["expected"] = expected
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def lock(lock_id: str = "L" * 64, *, artifact: dict | None = None, budget: dict | None = None) -> Identity:
    return Identity(id=lock_id, recorded_at="2026-01-01T00:00:00Z",
                    components={"artifact": artifact or {}, "budget": {"declared": budget or {}, "observed": {}}})


@dataclass
class Declaration:
    tables: dict = field(default_factory=dict)


# -- the pinned artifact -------------------------------------------------------------------------------

@pytest.mark.parametrize(("artifact", "found"), [
    pytest.param({}, (None, None), id="none"),
    pytest.param({"path": "/top", "digest": "d1"}, ("/top", "d1"), id="top-level"),
    pytest.param({"observed": {"path": "/obs", "digest": "d2"}, "declared": {"path": "/dec", "digest": "d3"}},
                 ("/obs", "d2"), id="observed-before-declared"),
    pytest.param({"declared": {"path": "/dec", "digest": "d3"}}, ("/dec", "d3"), id="declared"),
    pytest.param({"path": "/top", "observed": {"path": "/obs", "digest": "d2"}}, ("/top", "d2"),
                 id="each-key-from-the-first-that-has-it"),
    pytest.param({"path": 7, "digest": None, "observed": {"path": "/obs", "digest": "d2"}}, ("/obs", "d2"),
                 id="only-strings-count"),
    pytest.param({"observed": "not-a-table", "declared": {"digest": "d3"}}, (None, "d3"), id="a-table-not-a-dict"),
])
def test_lock_artifact(artifact, found) -> None:
    assert lock_artifact(Identity(id="x", recorded_at="", components={"artifact": artifact})) == found


def test_lock_artifact_without_the_component() -> None:
    assert lock_artifact(Identity(id="x", recorded_at="", components={})) == (None, None)


# -- parameters a request cannot carry -----------------------------------------------------------------

@pytest.mark.parametrize(("params", "arm_params", "message"), [
    pytest.param({"temperature": math.nan}, None, "--params: temperature is NaN or infinite", id="nan"),
    pytest.param({"a": {"b": [1, math.inf]}}, None, "--params: a.b[1] is NaN or infinite", id="nested-path"),
    pytest.param(None, {"B": {"top_p": -math.inf}}, "--arm-params B: top_p is NaN or infinite", id="an-arm-s"),
    pytest.param({"x": [[math.nan]]}, None, "--params: x[0][0] is NaN or infinite", id="list-in-list"),
])
def test_non_finite_parameters_are_refused(params, arm_params, message) -> None:
    with pytest.raises(UsageError) as err:
        check_sendable(params, arm_params)
    assert str(err.value) == f"{message}, which a request cannot carry (JSON has no such number)"


def test_finite_parameters_pass() -> None:
    check_sendable({"temperature": 0.5, "stop": ["\n"], "n": 1, "s": "nan", "b": True}, {"A": {"x": {"y": 1e308}}})
    check_sendable(None, None)


def test_the_path_of_the_first_non_finite_value() -> None:
    assert plan_run._non_finite_at(math.nan) == "the value"
    assert plan_run._non_finite_at({"a": 1.0, "b": {"c": math.inf}}) == "b.c"
    assert plan_run._non_finite_at([0, [1, math.nan]]) == "[1][1]"
    assert plan_run._non_finite_at({"a": [1.0], "b": "x"}) is None
    assert plan_run._non_finite_at({"a": math.nan, "b": math.inf}) == "a"


# -- the executed log's name ---------------------------------------------------------------------------

def test_next_free_log(tmp_path) -> None:
    default = tmp_path / "plan.json.executed.jsonl"
    assert next_free_log(default) == default
    default.write_text("")
    assert next_free_log(default) == tmp_path / "plan.json.executed-2.jsonl"
    (tmp_path / "plan.json.executed-2.jsonl").write_text("")
    assert next_free_log(default) == tmp_path / "plan.json.executed-3.jsonl"
    (tmp_path / "plan.json.executed-3.jsonl").symlink_to(tmp_path / "nowhere")
    assert next_free_log(default) == tmp_path / "plan.json.executed-4.jsonl"


def test_a_new_log_name_is_taken(tmp_path) -> None:
    log = tmp_path / "new.jsonl"
    assert plan_run._new_log(log, None, tmp_path / "cases.jsonl") == log


def test_a_log_that_is_the_plan_or_the_cases_is_refused(tmp_path) -> None:
    plan, cases = tmp_path / "plan.json", tmp_path / "cases.jsonl"
    plan.write_text("{}")
    cases.write_text("")
    with pytest.raises(UsageError) as err:
        plan_run._new_log(plan, plan, cases)
    assert str(err.value) == (f"--log {plan}: cannot write the executed log (that is the plan file itself; "
                              "give the log a name of its own)")
    with pytest.raises(UsageError) as other:
        plan_run._new_log(cases, plan, cases)
    assert str(other.value) == (f"--log {cases}: cannot write the executed log (that is the cases file itself; "
                                "give the log a name of its own)")


def test_an_existing_log_is_refused(tmp_path) -> None:
    log = tmp_path / "old.jsonl"
    log.write_text("earlier\n")
    with pytest.raises(UsageError) as err:
        plan_run._new_log(log, None, tmp_path / "cases.jsonl")
    assert str(err.value) == (f"--log {log}: cannot write the executed log (it already exists, an earlier run's "
                              "log?; execsys never overwrites one: give a new file)")
    assert log.read_text() == "earlier\n"


def test_a_symlink_or_directory_as_the_log_is_refused(tmp_path) -> None:
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError) as err:
        plan_run._new_log(link, None, tmp_path / "cases.jsonl")
    assert str(err.value) == f"--log {link}: cannot write the executed log (is a symlink, not a new file)"
    (tmp_path / "dir").mkdir()
    with pytest.raises(UsageError) as directory:
        plan_run._new_log(tmp_path / "dir", None, tmp_path / "cases.jsonl")
    assert str(directory.value) == f"--log {tmp_path / 'dir'}: cannot write the executed log (is a directory, not a new file)"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UsageError) as fifo:
        plan_run._new_log(tmp_path / "fifo", None, tmp_path / "cases.jsonl")
    assert str(fifo.value) == (f"--log {tmp_path / 'fifo'}: cannot write the executed log (is a FIFO (named pipe), "
                               "not a new file)")


def test_a_log_under_a_file_is_refused_with_the_os_reason(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError) as err:
        plan_run._new_log(tmp_path / "file" / "log.jsonl", None, tmp_path / "cases.jsonl")
    assert str(err.value) == f"--log {tmp_path / 'file' / 'log.jsonl'}: cannot write the executed log (Not a directory)"


# -- the options ---------------------------------------------------------------------------------------

@pytest.fixture
def made(tmp_path):
    """A plan over a 4-case file, written to plan.json and registered in a fresh ledger."""
    cases = write_cases(tmp_path / "cases.jsonl")
    plan = new_plan(["A", "B"], cases, "abba", 1)
    ledger_path = tmp_path / "ledger.sqlite3"
    with Ledger.open(ledger_path) as ledger:
        register_plan(plan, ledger)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan.to_json()))
    return type("Made", (), {"plan": plan, "cases": cases, "path": plan_path, "ledger": ledger_path})


def options(made, declaration=None, the_lock=None, **flags) -> PlanRunOptions:
    flags.setdefault("endpoints", {"A": URL_A, "B": URL_B})
    return PlanRunOptions.from_sources(declaration, the_lock, plan=made.plan, **flags)


def test_the_defaults(made) -> None:
    got = options(made)
    assert got.params == {"temperature": 0, "max_tokens": 32}
    assert DEFAULT_PARAMS == {"temperature": 0, "max_tokens": 32}
    assert (got.timeout, got.cases_path, got.log_path, got.extract, got.api_key_env) == (
        120.0, made.cases, None, None, None)
    assert (got.artifact_path, got.expected_digest, got.placement_table, got.lock_identity, got.ledger) == (
        None, None, {}, None, None)
    assert got.identity_reason == unpinned_reason(None)
    assert got.endpoints == {"A": URL_A, "B": URL_B} and got.arm_params == {}
    assert set(got.arm_systems) == {"A", "B"} and got.arm_systems["A"].lock_id is None


def test_the_parameters_are_layered(made) -> None:
    declared = Declaration({"budget": {"max_tokens": 8, "seed": 3}})
    got = options(made, declared, params={"top_p": 0.9, "max_tokens": 16}, arm_params={"B": {"temperature": 0.7}})
    assert got.params == {"temperature": 0, "max_tokens": 16, "seed": 3, "top_p": 0.9}
    assert got.arm_request_params("A") == {"temperature": 0, "max_tokens": 16, "seed": 3, "top_p": 0.9}
    assert got.arm_request_params("B") == {"temperature": 0.7, "max_tokens": 16, "seed": 3, "top_p": 0.9}
    locked = options(made, declared, lock(budget={"max_tokens": 5}))
    assert locked.params["max_tokens"] == 5 and "seed" not in locked.params  # the lock's budget, not the table's


def test_every_arm_needs_an_endpoint(made) -> None:
    with pytest.raises(UsageError) as err:
        options(made, endpoints={"B": URL_B})
    assert str(err.value) == "no endpoint for arm(s) A: give --arm A=URL"
    with pytest.raises(UsageError) as both:
        options(made, endpoints={})
    assert str(both.value) == "no endpoint for arm(s) A, B: give --arm A=URL"


def test_an_endpoint_for_an_arm_the_plan_lacks(made) -> None:
    with pytest.raises(InputError) as err:
        options(made, endpoints={"A": URL_A, "B": URL_B, "C": "http://c"})
    assert str(err.value) == "--arm 'C=http://c': unknown arm 'C' (the plan's arms: A, B)"


def test_arm_params_and_locks_for_unknown_arms_are_usage_errors(made) -> None:
    with pytest.raises(UsageError) as err:
        options(made, arm_params={"C": {}})
    assert str(err.value) == "--arm-params: unknown arm 'C' (arms: A, B)"
    with pytest.raises(UsageError) as locked:
        options(made, arm_locks={"C": lock()})
    assert str(locked.value) == "--arm-lock: unknown arm 'C' (arms: A, B)"


def test_parameters_that_are_not_objects(made) -> None:
    with pytest.raises(UsageError) as err:
        options(made, arm_params={"A": [1]})
    assert str(err.value) == "--arm-params A: expected a JSON object"
    with pytest.raises(UsageError) as params:
        options(made, params=[1])
    assert str(params.value) == "--params: expected a JSON object"
    with pytest.raises(UsageError, match="--params: temperature is NaN"):
        options(made, params={"temperature": math.nan})
    with pytest.raises(UsageError, match="--arm-params B: top_p is NaN"):
        options(made, arm_params={"B": {"top_p": math.nan}})
    with pytest.raises(UsageError) as lock_file:
        options(made, arm_locks={"B": ""})
    assert str(lock_file.value) == "--arm-lock B=: give the lock file of arm B"


@pytest.mark.parametrize("timeout", [0, -1, 2_000_000.5, math.inf, math.nan])
def test_a_timeout_out_of_range(made, timeout) -> None:
    with pytest.raises(UsageError) as err:
        options(made, timeout=timeout)
    assert str(err.value) == f"--timeout {timeout}: expected a number of seconds above 0, at most 2000000"


@pytest.mark.parametrize("timeout", [0.001, 5, 2_000_000])
def test_a_timeout_in_range(made, timeout) -> None:
    got = options(made, timeout=timeout)
    assert got.timeout == float(timeout) and isinstance(got.timeout, float)


def test_a_bad_extractor_is_refused_before_anything_runs(made) -> None:
    with pytest.raises(UsageError, match="--extract"):
        options(made, extract="nope")
    assert options(made, extract="last-number").extract == "last-number"


def test_the_cases_file(made, tmp_path) -> None:
    assert options(made, cases="other.jsonl").cases_path == Path("other.jsonl")
    ids = new_plan(["A", "B"], ["x", "y"])
    with pytest.raises(UsageError) as err:
        PlanRunOptions.from_sources(None, None, plan=ids, endpoints={"A": URL_A, "B": URL_B})
    assert str(err.value) == "the plan was made from case ids, not a cases file: give --cases FILE"


def test_a_relative_cases_file_is_found_from_the_plan_s_directory(made, tmp_path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    plan = new_plan(["A", "B"], ["x"])
    plan.cases = {"file": "cases.jsonl"}
    got = PlanRunOptions.from_sources(None, None, plan=plan, endpoints={"A": URL_A, "B": URL_B},
                                      plan_path=made.path)
    assert got.cases_path == tmp_path / "cases.jsonl"


def test_the_log_beside_the_plan_and_never_an_earlier_one(made, tmp_path) -> None:
    assert options(made, plan_path=made.path).log_path == Path(f"{made.path}.executed.jsonl")
    Path(f"{made.path}.executed.jsonl").write_text("")
    assert options(made, plan_path=made.path).log_path == tmp_path / "plan.json.executed-2.jsonl"
    assert options(made, plan_path=made.path, log=tmp_path / "mine.jsonl").log_path == tmp_path / "mine.jsonl"
    with pytest.raises(UsageError, match="it already exists"):
        options(made, log=f"{made.path}.executed.jsonl")
    with pytest.raises(UsageError, match="the plan file itself"):
        options(made, plan_path=made.path, log=made.path)
    with pytest.raises(UsageError, match="the cases file itself"):
        options(made, log=made.cases)
    assert options(made, log="").log_path is None


def test_the_lock_gives_the_identity_and_the_artifact(made) -> None:
    the_lock = lock(artifact={"observed": {"path": "/m.gguf", "digest": "d" * 64}})
    got = options(made, None, the_lock)
    assert (got.lock_identity, got.artifact_path, got.expected_digest) == ("L" * 64, "/m.gguf", "d" * 64)
    assert options(made, None, the_lock, artifact="/other.gguf").artifact_path == "/other.gguf"
    assert got.arm_systems["B"].lock_id == "L" * 64


def test_why_the_run_counts_toward_no_scope(made) -> None:
    assert options(made, lock_path="x.lock.json").identity_reason == unpinned_reason("x.lock.json")
    assert options(made, None, lock()).identity_reason == NO_PLAN_IDENTITY  # a lock now pins no earlier plan
    pinned = new_plan(["A", "B"], made.cases, identity="L" * 64)
    got = PlanRunOptions.from_sources(None, None, plan=pinned, endpoints={"A": URL_A, "B": URL_B})
    assert got.identity_reason is None


def test_the_declaration_s_placement_and_the_rest(made, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    got = options(made, Declaration({"placement": {"allowed": ["eu"]}, "runtime": {"engine": "vllm"}}),
                  api_key_env="KEY", ledger="~/l.sqlite3", arm_locks={"B": lock("O" * 64)})
    assert got.placement_table == {"allowed": ["eu"]}
    assert (got.api_key_env, got.ledger) == ("KEY", tmp_path / "l.sqlite3")
    assert got.arm_systems["A"].declared_runtime == {"engine": "vllm"}
    assert (got.arm_systems["A"].lock_id, got.arm_systems["B"].lock_id) == (None, "O" * 64)


# -- the sentence a run ends with ----------------------------------------------------------------------

PLAN = new_plan(["A", "B"], ["x"])
PASSED = [Check("order", True, ""), Check("window", True, "")]


def test_nothing_to_compare() -> None:
    assert plan_statement(PLAN, paired_stats([]), PASSED, True) == (
        "No case produced an answer from both arms: nothing to compare.")


def test_a_causal_statement() -> None:
    stats = paired_stats([(True, False)] * 3 + [(True, True)] * 5 + [(False, True)] + [(False, False)])
    figures = (f"A 0.800 vs B 0.600 over 10 paired cases; difference A-B +0.200 "
               f"(95% CI {stats.ci95[0]:+.3f} to {stats.ci95[1]:+.3f}); discordant pairs 3 (A only) and 1 (B only), "
               f"exact McNemar p = {stats.mcnemar_p:.4g}")
    assert plan_statement(PLAN, stats, PASSED, True) == (
        "Contemporaneous paired control held (order, placement, window and identity checks all passed): "
        f"the paired difference is a causal estimate of A against B. {figures}.")


def test_a_descriptive_statement_names_the_failed_checks() -> None:
    stats = paired_stats([(False, True)] * 2)
    checks = [Check("order", False, ""), Check("window", True, ""), Check("no-restart", False, "")]
    statement = plan_statement(PLAN, stats, checks, False)
    assert statement.startswith("Descriptive only: the order, no-restart check(s) failed, so no causal claim is "
                                "made. A 0.000 vs B 1.000 over 2 paired cases; difference A-B -1.000 (")
    assert statement.endswith(f"discordant pairs 0 (A only) and 2 (B only), exact McNemar p = {stats.mcnemar_p:.4g}.")


def test_no_interval() -> None:
    from execsys.plan.paired import PairedStats

    stats = PairedStats(1, 0, 0, 1, 0, 1.0, 1.0, 0.0, None, 1.0)
    assert "(no interval)" in plan_statement(PLAN, stats, PASSED, True)


# -- a whole run against fake endpoints ----------------------------------------------------------------

@dataclass
class Script:
    """What each fake endpoint answers: ``answers[(arm_url, case_id)]`` a Completion (default: "yes")."""

    answers: dict = field(default_factory=dict)
    observe: dict = field(default_factory=dict)  # url -> list of observe() answers, one per call
    requests: list = field(default_factory=list)  # (url, case id, params)
    facts: dict = field(default_factory=dict)  # url -> what a look at its serving runtime answers
    looks: list = field(default_factory=list)  # the declared runtimes looked at
    closed: list = field(default_factory=list)


def port(url: str) -> str:
    return url.rsplit(":", 1)[1].split("/")[0]


@pytest.fixture
def endpoints(monkeypatch):
    script = Script()

    class FakeClient:
        def __init__(self, url, timeout=None, api_key_env=None):
            self.url, self.timeout, self.api_key_env = url, timeout, api_key_env

        @property
        def display(self):
            return f"shown:{self.url}"

        def resolve_model(self, model):
            assert model is None
            return f"model-{port(self.url)}"

        def observe(self):
            seen = script.observe.get(self.url)
            if seen:
                return seen.pop(0) if len(seen) > 1 else seen[0]
            return {"models": ["m"], "server": "srv", "ignored": 1}

        def complete(self, case, request):
            script.requests.append((self.url, case.id, dict(request)))
            return script.answers.get((self.url, case.id), Completion("  yes  ", model="m", system_fingerprint="fp"))

        def close(self):
            script.closed.append(self.url)

    class Serving:
        def __init__(self, *, completions=True):
            pass

        def __call__(self, declared):
            script.looks.append(declared)
            return dict(script.facts.get(declared["endpoint"], {"runtime.process.pid": 1,
                                                                "runtime.process.started_at": 1.0}))

    monkeypatch.setattr(execsys.probes.client, "EndpointClient", FakeClient)
    monkeypatch.setattr(execsys.identity.serving, "ServingObserver", Serving)
    return script


def execute(made, *, events=None, cancel=None, the_lock=None, **flags):
    flags.setdefault("ledger", made.ledger)
    got = run_plan(options(made, None, the_lock, **flags), (events.append if events is not None else None), cancel)
    return got


def test_a_clean_run_follows_the_registered_order_and_is_causal(made, endpoints, tmp_path) -> None:
    events: list = []
    log = tmp_path / "run.jsonl"
    result = execute(made, events=events, log=log, params={"max_tokens": 4}, arm_params={"B": {"temperature": 1}})
    sequence = made.plan.expected_sequence()
    urls = {"A": URL_A, "B": URL_B}
    assert [(url, case) for url, case, _ in endpoints.requests] == [(urls[arm], case) for case, arm in sequence]
    assert endpoints.requests[0][2]["model"] == f"model-{port(urls[sequence[0][1]])}"
    by_url = {url: params for url, _, params in endpoints.requests}
    assert by_url[URL_A] == {"temperature": 0, "max_tokens": 4, "model": "model-9001"}
    assert by_url[URL_B] == {"temperature": 1, "max_tokens": 4, "model": "model-9002"}
    assert sorted(endpoints.closed) == [URL_A, URL_B]

    assert result.label == "causal" and result.cancelled is False
    assert all(c.passed for c in result.checks)
    assert (result.stats.n, result.stats.b, result.stats.c, result.stats.both_right) == (4, 0, 0, 4)
    assert result.statement.startswith("Contemporaneous paired control held")
    assert result.log == str(log)
    assert result.arms["A"]["endpoint"] == f"shown:{URL_A}" and result.arms["A"]["model"] == "model-9001"
    assert (result.arms["A"]["host"], result.arms["A"]["correct"], result.arms["A"]["rate"]) == ("local", 4, 1.0)
    assert result.arms["B"]["params"] == {"temperature": 1, "max_tokens": 4}
    assert result.arms["B"]["rate"] == 1.0
    assert result.outcomes["c0"]["A"] == {"text": "  yes  ", "outcome": "yes", "correct": True, "error": None,
                                          "first": made.plan.order[[e["case"] for e in made.plan.order].index("c0")]
                                          ["first"] == "A"}

    kinds = [type(e).__name__ for e in events]
    assert kinds[:2] == ["PlacementChecked", "PlacementChecked"]
    assert kinds[2] == "NoPinnedIdentity" and kinds[3] == "WindowOpened"
    assert kinds.count("CaseSent") == kinds.count("ArmAnswered") == 8 and kinds.count("PairScored") == 4
    assert kinds[-len(result.checks) - 1] == "WindowClosed"
    opened = next(e for e in events if isinstance(e, WindowOpened))
    assert (opened.at, opened.cases) == (result.started_at, 4)
    assert next(e for e in events if isinstance(e, NoPinnedIdentity)).reason == unpinned_reason(None)
    sent = [e for e in events if isinstance(e, CaseSent)]
    assert [(e.step, e.total) for e in sent] == [(i, 8) for i in range(1, 9)]
    assert [e.position for e in sent] == ["first", "second"] * 4
    assert [e.params for e in sent] == [params for _, _, params in endpoints.requests]
    assert [(e.case_id, e.arm) for e in sent] == sequence
    answered = [e for e in events if isinstance(e, ArmAnswered)]
    assert all(e.outcome == "yes" and e.correct and e.error is None for e in answered)
    assert [(e.step, e.total, e.case_id, e.arm, e.position) for e in answered] == [
        (e.step, e.total, e.case_id, e.arm, e.position) for e in sent]
    assert next(e for e in events if isinstance(e, WindowClosed)).at == result.finished_at
    scored = [e for e in events if isinstance(e, PairScored)]
    assert [e.n for e in scored] == [1, 2, 3, 4] and not any(e.errored for e in scored)
    assert [e.first for e in scored] == [e["first"] for e in made.plan.order]
    assert [e for e in events if isinstance(e, PlacementChecked)] == [
        PlacementChecked("A", "local", ()), PlacementChecked("B", "local", ())]
    assert [e.check for e in events if isinstance(e, CheckResult)] == result.checks
    assert next(e for e in events if isinstance(e, WindowClosed)).cancelled is False

    header, logged = read_log(log)
    assert header == {"schema": LOG_SCHEMA, "plan": made.plan.digest, "plan_record": made.plan.record_id,
                      "arms": {"A": f"shown:{URL_A}", "B": f"shown:{URL_B}"}}
    names = [e["event"] for e in logged]
    assert names[:4] == ["placement", "placement", "endpoint", "endpoint"]
    assert names[4:7] == ["system", "system", "window-start"]
    assert names[-5:] == ["endpoint", "endpoint", "system", "system", "window-end"]
    assert logged[2]["observed"] == {"models": ["m"], "server": "srv"}
    assert [{k: v for k, v in e.items() if k != "at"} for e in logged[:4]] == [
        {"event": "placement", "arm": "A", "host": "local", "checks": []},
        {"event": "placement", "arm": "B", "host": "local", "checks": []},
        {"event": "endpoint", "arm": "A", "observed": {"models": ["m"], "server": "srv"}},
        {"event": "endpoint", "arm": "B", "observed": {"models": ["m"], "server": "srv"}}]
    cases = [e for e in logged if e["event"] == "case"]
    assert {(e["outcome"], e["correct"], e["error"]) for e in cases} == {("yes", True, None)}
    assert [(e["event"], e["arm"]) for e in logged[-5:-3]] == [("endpoint", "A"), ("endpoint", "B")]
    assert [o["at"] for o in result.arms["A"]["system_check"]["observations"]] == ["start", "end"]
    assert [(e["case"], e["arm"], e["position"]) for e in cases] == [
        (c, a, p) for (c, a), p in zip(sequence, ["first", "second"] * 4, strict=True)]

    with Ledger.open(made.ledger) as ledger:
        record = ledger.get(result.record)
    assert (record.kind, record.parent) == ("plan-run", made.plan.record_id)
    assert record.body == {
        "schema": "execsys.plan-run/2", "plan": made.plan.digest, "plan_record": made.plan.record_id, "record": None,
        "arms": result.arms, "design": "abba", "identity": None, "identity_reason": unpinned_reason(None),
        "paired": result.stats.to_json(), "checks": [c.to_json() for c in result.checks], "placement": [],
        "label": "causal", "statement": result.statement, "started_at": result.started_at,
        "finished_at": result.finished_at, "log": str(log), "cancelled": False, "outcomes": result.outcomes}
    assert result.started_at == logged[6]["at"] and result.finished_at == logged[-1]["at"]
    assert result.to_json() == {**record.body, "record": result.record}
    body = result.to_json()
    assert body["schema"] == RUN_SCHEMA == "execsys.plan-run/2"
    assert (body["plan"], body["label"], body["design"], body["identity"]) == (made.plan.digest, "causal", "abba", None)
    assert body["identity_reason"] == unpinned_reason(None)
    assert record.body["paired"] == result.stats.to_json()


def test_the_pairs_are_counted_from_the_plan_s_first_arm(made, endpoints) -> None:
    wrong = Completion("no", model="m")
    endpoints.answers.update({(URL_B, "c0"): wrong, (URL_B, "c1"): wrong, (URL_A, "c2"): wrong,
                              (URL_A, "c3"): wrong, (URL_B, "c3"): wrong})
    events: list = []
    result = execute(made, events=events)
    assert (result.stats.n, result.stats.b, result.stats.c, result.stats.both_right, result.stats.both_wrong) == (
        4, 2, 1, 0, 1)
    assert (result.arms["A"]["correct"], result.arms["B"]["correct"]) == (2, 1)
    assert (result.arms["A"]["rate"], result.arms["B"]["rate"]) == (0.5, 0.25)
    final = [e for e in events if isinstance(e, PairScored)][-1]
    assert (final.n, final.b, final.c) == (4, 2, 1)
    by_case = {e.case_id: e for e in events if isinstance(e, PairScored)}
    assert by_case["c3"].correct == {"A": False, "B": False}
    assert by_case["c0"].correct == {"A": True, "B": False}


def test_a_failed_request_is_a_restart_and_excludes_the_pair(made, endpoints, tmp_path) -> None:
    endpoints.answers[(URL_B, "c2")] = Completion("partial", error="HTTP 503", model="m")
    events: list = []
    result = execute(made, events=events, log=tmp_path / "log.jsonl")
    assert result.stats.n == 3
    assert result.outcomes["c2"]["B"] == {"text": None, "outcome": None, "correct": False, "error": "HTTP 503",
                                          "first": result.outcomes["c2"]["B"]["first"]}
    assert [e.error for e in events if isinstance(e, ArmAnswered) and e.case_id == "c2" and e.arm == "B"] == [
        "HTTP 503"]
    restarts = [e for e in events if isinstance(e, RestartSeen)]
    assert restarts == [RestartSeen("B", "the endpoint failed mid-window (HTTP 503)")]
    assert [e.errored for e in events if isinstance(e, PairScored) and e.case_id == "c2"] == [True]
    assert result.label == "descriptive"
    failed = {c.name for c in result.checks if not c.passed}
    assert failed == {"window", "no-restart"}
    assert result.statement.startswith("Descriptive only: the window, no-restart check(s) failed")
    _, logged = read_log(tmp_path / "log.jsonl")
    assert [(e["arm"], e["reason"]) for e in logged if e["event"] == "restart"] == [
        ("B", "the endpoint failed mid-window (HTTP 503)")]


def test_a_failed_request_of_the_plan_s_first_arm_excludes_the_pair_too(made, endpoints) -> None:
    endpoints.answers[(URL_A, "c1")] = Completion(None, error="timed out")
    events: list = []
    result = execute(made, events=events)
    assert result.stats.n == 3
    assert [e.errored for e in events if isinstance(e, PairScored)] == [
        e["case"] == "c1" for e in made.plan.order]
    assert [e.n for e in events if isinstance(e, PairScored)][-1] == 3


def test_a_fingerprint_that_moved_is_a_restart(made, endpoints) -> None:
    endpoints.answers[(URL_A, "c1")] = Completion("yes", model="m", system_fingerprint="fp-other")
    events: list = []
    result = execute(made, events=events)
    assert [e for e in events if isinstance(e, RestartSeen)] == [
        RestartSeen("A", "system_fingerprint changed inside the window: ['fp', 'fp-other']")]
    assert result.label == "descriptive"


def test_an_endpoint_that_answers_as_another_server_fails_identity(made, endpoints) -> None:
    endpoints.observe[URL_B] = [{"models": ["m"], "server": "v1"}, {"models": ["m"], "server": "v2"}]
    result = execute(made)
    assert [c.name for c in result.checks if not c.passed] == ["identity"]
    assert result.label == "descriptive"


def test_the_extractor_scores_the_answer(made, endpoints) -> None:
    endpoints.answers[(URL_A, "c0")] = Completion("the answer is: yes!", model="m")
    result = execute(made, extract="regex:(yes)")
    assert result.outcomes["c0"]["A"]["outcome"] == "yes" and result.outcomes["c0"]["A"]["correct"] is True
    assert result.outcomes["c1"]["A"]["outcome"] == "yes"


def test_a_cancelled_run_stops_and_is_descriptive(made, endpoints) -> None:
    cancel = threading.Event()
    cancel.set()
    events: list = []
    result = execute(made, events=events, cancel=cancel)
    assert endpoints.requests == []
    assert result.cancelled is True and result.label == "descriptive"
    assert any(c.name == "complete" and not c.passed for c in result.checks)
    assert next(e for e in events if isinstance(e, WindowClosed)).cancelled is True
    assert result.statement == "No case produced an answer from both arms: nothing to compare."
    assert result.to_json()["cancelled"] is True


def test_a_run_pinned_to_its_lock_says_nothing_of_a_missing_identity(made, endpoints, tmp_path) -> None:
    plan = new_plan(["A", "B"], made.cases, identity="L" * 64)
    with Ledger.open(made.ledger) as ledger:
        register_plan(plan, ledger)
    events: list = []
    got = PlanRunOptions.from_sources(None, lock(), plan=plan, endpoints={"A": URL_A, "B": URL_B},
                                      ledger=made.ledger)
    result = run_plan(got, events.append)
    assert not any(isinstance(e, NoPinnedIdentity) for e in events)
    assert any(c.name == "pinned-identity" and c.passed for c in result.checks)
    with Ledger.open(made.ledger) as ledger:
        assert ledger.get(result.record).identity == "L" * 64
    assert result.to_json()["identity"] == "L" * 64


def test_an_unregistered_plan_is_refused_before_any_request(made, endpoints, tmp_path) -> None:
    plan = new_plan(["A", "B"], made.cases, seed=99)
    got = PlanRunOptions.from_sources(None, None, plan=plan, endpoints={"A": URL_A, "B": URL_B}, ledger=made.ledger)
    with pytest.raises(InputError, match="is not registered"):
        run_plan(got)
    assert endpoints.requests == []


def test_a_case_without_an_expected_answer_is_refused(made, endpoints, tmp_path) -> None:
    cases = write_cases(tmp_path / "partial.jsonl", without=("c2",))
    plan = new_plan(["A", "B"], cases)
    with Ledger.open(made.ledger) as ledger:
        register_plan(plan, ledger)
    got = PlanRunOptions.from_sources(None, None, plan=plan, endpoints={"A": URL_A, "B": URL_B}, ledger=made.ledger)
    with pytest.raises(InputError) as err:
        run_plan(got)
    assert str(err.value) == 'case c2 has no "expected" answer: a paired comparison needs one per case'
    assert endpoints.requests == []


def test_a_far_arm_is_checked_before_the_first_case(made, endpoints, monkeypatch) -> None:
    plan = new_plan(["A", "B"], made.cases, placement={"B": "gpu1", "A": "localhost"})
    with Ledger.open(made.ledger) as ledger:
        register_plan(plan, ledger)
    calls: list = []

    def check_placement(arm, host, **kwargs):
        calls.append((arm, host, kwargs, len(endpoints.requests)))
        return PlacementReport(arm, host, [Check("d-admissible", False, "not allowed")], {"gpus": []}, {"ok": True})

    monkeypatch.setattr(plan_run, "check_placement", check_placement)
    events: list = []
    the_lock = lock(artifact={"path": "/m.gguf", "digest": "d" * 64})
    got = PlanRunOptions.from_sources(Declaration({"placement": {"allowed": ["eu"]}}), the_lock, plan=plan,
                                      endpoints={"A": URL_A, "B": URL_B}, ledger=made.ledger, timeout=30,
                                      log=made.path.parent / "placed.jsonl")
    result = run_plan(got, events.append)
    _, logged = read_log(got.log_path) if got.log_path else (None, [])
    [(arm, host, kwargs, sent)] = calls
    assert (arm, host, sent) == ("B", "gpu1", 0)
    assert kwargs == {"registered_at": plan.registered_at, "artifact_path": "/m.gguf", "expected_digest": "d" * 64,
                      "placement_table": {"allowed": ["eu"]}, "timeout": 60.0}
    placed = [e for e in events if isinstance(e, PlacementChecked)]
    assert placed == [PlacementChecked("A", "localhost", ()),
                      PlacementChecked("B", "gpu1", (Check("d-admissible", False, "not allowed"),), {"gpus": []},
                                       {"ok": True})]
    assert [{k: v for k, v in e.items() if k != "at"} for e in logged[:2]] == [
        {"event": "placement", "arm": "A", "host": "localhost", "checks": []},
        {"event": "placement", "arm": "B", "host": "gpu1",
         "checks": [{"name": "d-admissible", "passed": False, "detail": "not allowed"}],
         "hardware": {"gpus": []}, "digest": {"ok": True}}]
    assert [p.arm for p in result.placement] == ["B"]
    assert result.arms["B"]["host"] == "gpu1" and result.arms["A"]["host"] == "localhost"
    assert [c.name for c in result.checks if not c.passed] == ["placement"]
    body = result.to_json()
    assert body["placement"] == [result.placement[0].to_json()]


def test_a_long_timeout_is_given_to_the_placement_checks(made, endpoints, monkeypatch) -> None:
    plan = new_plan(["A", "B"], made.cases, placement={"B": "gpu1"})
    with Ledger.open(made.ledger) as ledger:
        register_plan(plan, ledger)
    timeouts: list = []
    monkeypatch.setattr(plan_run, "check_placement",
                        lambda arm, host, **kw: timeouts.append(kw["timeout"]) or PlacementReport(arm, host, []))
    run_plan(PlanRunOptions.from_sources(None, None, plan=plan, endpoints={"A": URL_A, "B": URL_B},
                                         ledger=made.ledger, timeout=300))
    assert timeouts == [300.0]


def test_the_client_is_built_with_the_timeout_and_key(made, endpoints, monkeypatch) -> None:
    built: list = []
    real = execsys.probes.client.EndpointClient

    def spy(url, timeout=None, api_key_env=None):
        built.append((url, timeout, api_key_env))
        return real(url, timeout=timeout, api_key_env=api_key_env)

    monkeypatch.setattr(execsys.probes.client, "EndpointClient", spy)
    execute(made, timeout=7, api_key_env="KEY")
    assert sorted(built) == [(URL_A, 7.0, "KEY"), (URL_B, 7.0, "KEY")]


def test_without_a_log_path_nothing_is_written(made, endpoints, tmp_path) -> None:
    before = set(os.listdir(tmp_path))
    result = execute(made)
    assert result.log is None
    assert set(os.listdir(tmp_path)) == before


PINNED_RUNTIME = {"engine": {"version": "0.3.1"}, "endpoint": {"models": ["m"]},
                  "process": {"argv": ["server", "--model", "tiny.gguf"]}}
MATCHING = {"runtime.engine.version": "0.3.1", "runtime.endpoint.models": ["m"],
            "runtime.process.argv": ["server", "--model", "tiny.gguf"], "runtime.process.pid": 42,
            "runtime.process.started_at": 1700000000.0}


def test_each_arm_s_system_is_looked_at_logged_and_a_differing_one_told(made, endpoints, tmp_path) -> None:
    the_lock = Identity(id="L" * 64, recorded_at="", components={
        "runtime": {"observed": PINNED_RUNTIME, "declared": {"endpoint": URL_A, "engine": "llama-cpp-python"}}})
    endpoints.facts = {URL_A: MATCHING, URL_B: {**MATCHING, "runtime.process.argv": ["server", "--n_batch", "7"]}}
    events: list = []
    log = tmp_path / "log.jsonl"
    result = execute(made, events=events, log=log, the_lock=the_lock, api_key_env="KEY")
    differs = [e for e in events if type(e).__name__ == "ArmSystemDiffers"]
    assert [(e.arm, e.at) for e in differs] == [("B", "start")]  # the same difference at the end: not told again
    assert differs[0].message.startswith("arm B: the engine answering this plan is not the pinned system: ")
    assert {look["api_key_env"] for look in endpoints.looks} == {"KEY"}
    assert next(e for e in events if isinstance(e, NoPinnedIdentity)).reason == NO_PLAN_IDENTITY
    _, logged = read_log(log)
    systems = [e for e in logged if e["event"] == "system"]
    assert [(e["arm"], e["when"], e["verdict"], e["process"]) for e in systems] == [
        ("A", "start", "matches-lock", {"pid": 42, "started_at": 1700000000.0}),
        ("B", "start", "differs", {"pid": 42, "started_at": 1700000000.0}),
        ("A", "end", "matches-lock", {"pid": 42, "started_at": 1700000000.0}),
        ("B", "end", "differs", {"pid": 42, "started_at": 1700000000.0})]
    assert systems[0]["differences"] == [] and systems[0]["reason"] is None
    assert [d["component"] for d in systems[1]["differences"]] == ["runtime.process.argv"]
    assert (result.arms["A"]["identity"], result.arms["B"]["identity"]) == ("L" * 64, None)


def test_an_unobservable_arm_logs_why(made, endpoints, tmp_path) -> None:
    endpoints.facts = {URL_A: {"runtime.endpoint.error": "refused"}}
    log = tmp_path / "log.jsonl"
    execute(made, log=log)
    _, logged = read_log(log)
    first = next(e for e in logged if e["event"] == "system" and e["arm"] == "A")
    assert (first["verdict"], first["reason"], first["process"]) == (
        "unverified", "the endpoint did not answer: refused", None)


def test_options_built_by_hand_judge_each_arm_against_no_lock(made, endpoints) -> None:
    bare = PlanRunOptions(plan=made.plan, endpoints={"A": URL_A, "B": URL_B}, cases_path=made.cases,
                          ledger=made.ledger)
    result = run_plan(bare)
    assert result.arms["A"]["identity_reason"] == "no pinned identity for arm A: it counts toward no identity"
    assert result.arms["B"]["system_check"]["verdict"] == "unverified"


def test_the_extractor_is_given_the_run_s_timeout(made, endpoints, monkeypatch) -> None:
    import execsys.probes.compare

    given: list = []
    real = execsys.probes.compare.parse_extractor
    monkeypatch.setattr(execsys.probes.compare, "parse_extractor",
                        lambda spec, timeout=None: given.append((spec, timeout)) or real(spec, timeout))
    execute(made, extract="last-number", timeout=7)
    assert given[-1] == ("last-number", 7.0)


@pytest.mark.parametrize(("answer", "pinned_fingerprint", "differs"), [
    pytest.param(Completion("yes", model="other", system_fingerprint="fp"), None, True, id="another-model-answered"),
    pytest.param(Completion("yes", model="m", system_fingerprint="fp"), "fp0", True, id="another-fingerprint"),
    pytest.param(Completion("yes", model="m", system_fingerprint="fp"), "fp", False, id="as-pinned"),
    pytest.param(Completion("late", error="HTTP 500", model="other"), None, False,
                 id="a-failed-request-s-model-is-not-counted"),
])
def test_what_an_arm_s_responses_say_is_held_to_its_lock(made, endpoints, answer, pinned_fingerprint,
                                                         differs) -> None:
    endpoint = {"models": ["m"], **({"system_fingerprint": pinned_fingerprint} if pinned_fingerprint else {})}
    the_lock = Identity(id="L" * 64, recorded_at="", components={
        "runtime": {"observed": {**PINNED_RUNTIME, "endpoint": endpoint}, "declared": {"endpoint": URL_A}}})
    endpoints.facts = {URL_A: MATCHING, URL_B: MATCHING}
    endpoints.answers[(URL_A, "c0")] = answer
    result = execute(made, the_lock=the_lock)
    assert result.arms["A"]["system_check"]["verdict"] == ("differs" if differs else "matches-lock")
    assert result.arms["A"]["identity"] == (None if differs else "L" * 64)
    # B's responses carry the same fingerprint: held to the same pin
    assert result.arms["B"]["identity"] == (None if pinned_fingerprint == "fp0" else "L" * 64)
