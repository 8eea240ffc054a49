"""Which system each arm of a plan run measured, as tables, in process: what runtime an arm's look is
built from, which lock each arm is judged against, the line said when an arm is not its pinned system
(once per difference), and each arm's ``identity`` -- its lock's id only when it matched, else null with
the reason a user reads.

The serving runtime is faked (``ServingObserver`` answers the flattened facts given per endpoint), so
each verdict is decided here in milliseconds; tests/test_plan_arms.py runs real llama.cpp servers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

import execsys.identity.serving
from execsys.errors import UsageError
from execsys.identity import Identity
from execsys.plan import system
from execsys.plan.system import ArmObserver, ArmSystem, arm_lock, arm_systems

URL_A, URL_B = "http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"
PINNED_RUNTIME = {"engine": {"version": "0.3.1"}, "endpoint": {"models": ["tiny"], "system_fingerprint": "fp1"},
                  "process": {"argv": ["server", "--model", "tiny.gguf"]}}
PINNED_DECLARED = {"engine": "llama-cpp-python", "endpoint": URL_A, "process": "llama_cpp.server"}
MATCHING = {"runtime.engine.version": "0.3.1", "runtime.endpoint.models": ["tiny"],
            "runtime.endpoint.system_fingerprint": "fp1", "runtime.process.argv": ["server", "--model", "tiny.gguf"],
            "runtime.process.pid": 42, "runtime.process.started_at": 1700000000.0}
DIFFERING = {**MATCHING, "runtime.process.argv": ["server", "--model", "tiny.gguf", "--n_batch", "7"]}
DIFFERS_LINE = "arm B: the engine answering this plan is not the pinned system: runtime argv +--n_batch 7"


def lock(lock_id: str = "L" * 64, runtime: dict | None = None, declared: dict | None = None) -> Identity:
    return Identity(id=lock_id, recorded_at="2026-01-01T00:00:00Z",
                    components={"runtime": {"observed": PINNED_RUNTIME if runtime is None else runtime,
                                            "declared": PINNED_DECLARED if declared is None else declared}})


@dataclass
class Declaration:
    tables: dict = field(default_factory=dict)


@pytest.fixture
def serving(monkeypatch):
    """``serving.facts[endpoint]``: what a look at that endpoint answers (an exception is raised);
    ``serving.looks``: the declared runtimes looked at."""

    class Serving:
        facts: dict = {}
        looks: list = []

        def __init__(self, *, completions: bool = True) -> None:
            assert completions is False  # a plan's own responses name the model: no completion of our own

        def __call__(self, declared_runtime):
            Serving.looks.append(declared_runtime)
            answer = Serving.facts[declared_runtime["endpoint"]]
            if isinstance(answer, Exception):
                raise answer
            return dict(answer)

    Serving.facts, Serving.looks = {URL_A: MATCHING, URL_B: MATCHING}, []
    monkeypatch.setattr(execsys.identity.serving, "ServingObserver", Serving)
    return Serving


def observer(systems: dict[str, ArmSystem]) -> ArmObserver:
    return ArmObserver(systems)


def both(identity: Identity | None = None, **own: tuple[Identity, str | None]) -> dict[str, ArmSystem]:
    return arm_systems(None, identity, ["A", "B"], own or None)


# -- the runtime an arm's look is built from -----------------------------------------------------------

def test_the_runtime_is_the_arm_s_endpoint_with_the_pinned_engine_and_process() -> None:
    arm = ArmSystem(lock_id="L", pinned_declared_runtime={"engine": "vllm", "process": "vllm serve", "endpoint": "x"},
                    declared_runtime={"engine": "llama", "process": "p", "env_file": ".env"})
    assert arm.runtime(URL_B, "KEY") == {"engine": "vllm", "process": "vllm serve", "env_file": ".env",
                                         "endpoint": URL_B, "api_key_env": "KEY"}


def test_the_declared_engine_stands_where_the_lock_pins_none() -> None:
    arm = ArmSystem(lock_id="L", pinned_declared_runtime={"engine": "", "process": None},
                    declared_runtime={"engine": "llama", "process": "p"})
    assert arm.runtime(URL_A, None) == {"engine": "llama", "process": "p", "endpoint": URL_A}


def test_empty_values_are_left_out() -> None:
    arm = ArmSystem(lock_id=None, declared_runtime={"engine": "", "process": None, "env_file": ".env"})
    assert arm.runtime(URL_A, "") == {"env_file": ".env", "endpoint": URL_A}
    assert ArmSystem(lock_id=None).runtime(URL_A, None) == {"endpoint": URL_A}


# -- which lock each arm is judged against -------------------------------------------------------------

def test_every_arm_takes_the_run_s_lock_without_its_own() -> None:
    run_lock = lock()
    systems = arm_systems(Declaration({"runtime": {"engine": "llama", "endpoint": "ignored", "process": "p",
                                                   "env_file": ".env", "api_key_env": "X"}}),
                          run_lock, ("A", "B"))
    assert list(systems) == ["A", "B"]
    for arm in systems.values():
        assert arm == ArmSystem(lock_id="L" * 64, lock_path=None, pinned_runtime=PINNED_RUNTIME,
                                pinned_declared_runtime=PINNED_DECLARED,
                                declared_runtime={"engine": "llama", "process": "p", "env_file": ".env"})
    assert systems["A"].pinned_runtime is not PINNED_RUNTIME  # a copy


def test_an_arm_s_own_lock_wins() -> None:
    own = lock("O" * 64, runtime={"engine": {"version": "9"}})
    systems = arm_systems(None, lock(), ["A", "B"], {"B": (own, "b.lock.json")})
    assert (systems["A"].lock_id, systems["A"].lock_path) == ("L" * 64, None)
    assert (systems["B"].lock_id, systems["B"].lock_path) == ("O" * 64, "b.lock.json")
    assert systems["B"].pinned_runtime == {"engine": {"version": "9"}}
    assert systems["B"].declared_runtime == {}


def test_no_lock_at_all() -> None:
    systems = arm_systems(None, None, ["A", "B"])
    assert systems["A"] == ArmSystem(lock_id=None, lock_path=None, pinned_runtime=None,
                                     pinned_declared_runtime=None, declared_runtime={})
    assert arm_systems(Declaration({}), None, ["A"])["A"].declared_runtime == {}
    assert arm_systems(Declaration({"runtime": None}), None, ["A"])["A"].declared_runtime == {}


def test_arm_lock_of_an_identity_has_no_file() -> None:
    identity = lock()
    assert arm_lock("A", identity) == (identity, None)


@pytest.mark.parametrize("value", ["", "  "])
def test_arm_lock_without_a_file_is_a_usage_error(value) -> None:
    with pytest.raises(UsageError) as err:
        arm_lock("B", value)
    assert str(err.value) == "--arm-lock B=: give the lock file of arm B"


def test_arm_lock_reads_the_file_as_every_named_lock(monkeypatch) -> None:
    identity = lock()
    read: list = []
    monkeypatch.setattr("execsys.sources.read_lock", lambda path: read.append(path) or identity)
    assert arm_lock("B", "b.lock.json") == (identity, "b.lock.json")
    assert read == ["b.lock.json"]


# -- the looks and the line said -----------------------------------------------------------------------

def test_every_arm_is_looked_at_and_kept_in_arm_order(serving) -> None:
    arms = observer(both(lock()))
    seen = arms.observe_all({"B": URL_B, "A": URL_A}, "KEY", "start")
    assert [(arm, entry["at"], entry["pass"], entry["verdict"], line) for arm, entry, line in seen] == [
        ("A", "start", "A", "matches-lock", None), ("B", "start", "B", "matches-lock", None)]
    assert sorted(look["endpoint"] for look in serving.looks) == [URL_A, URL_B]
    assert all(look["api_key_env"] == "KEY" for look in serving.looks)
    assert {arm: len(entries) for arm, entries in arms.entries.items()} == {"A": 1, "B": 1}


def test_the_looks_run_in_threads_named_for_the_plan(serving, monkeypatch) -> None:
    import threading

    names: list = []
    look = serving.__call__
    monkeypatch.setattr(serving, "__call__", lambda self, declared: names.append(
        threading.current_thread().name) or look(self, declared))
    observer(both(lock())).observe_all({"A": URL_A, "B": URL_B}, None, "start")
    assert len(names) == 2 and all(name.startswith("plan-arm-system") for name in names)


def test_a_differing_arm_is_said_once_per_difference(serving) -> None:
    serving.facts[URL_B] = DIFFERING
    arms = observer(both(lock()))
    start = arms.observe_all({"A": URL_A, "B": URL_B}, None, "start")
    assert [line for _, _, line in start] == [None, DIFFERS_LINE]
    end = arms.observe_all({"A": URL_A, "B": URL_B}, None, "end")
    assert [line for _, _, line in end] == [None, None]  # the same difference again: not said twice
    assert len(arms.entries["B"]) == 2
    serving.facts[URL_B] = {**DIFFERING, "runtime.engine.version": "0.3.2"}
    later = arms.observe_all({"A": URL_A, "B": URL_B}, None, "end")
    assert later[1][2] == ("arm B: the engine answering this plan is not the pinned system: "
                           "runtime engine version 0.3.1 -> 0.3.2; runtime argv +--n_batch 7")


def test_the_line_is_redacted(serving) -> None:
    secret = "sk-live-abcdefghijklmnopqrstuvwxyz0123"
    serving.facts[URL_B] = {**MATCHING, "runtime.process.argv": ["server", "--api-key", secret]}
    [_, (_, _, line)] = observer(both(lock())).observe_all({"A": URL_A, "B": URL_B}, None, "start")
    assert line is not None and line.startswith("arm B: the engine answering this plan is not the pinned system")
    assert secret not in line


def test_an_unverified_arm_says_nothing(serving) -> None:
    serving.facts[URL_B] = RuntimeError("refused")
    seen = observer(both(lock())).observe_all({"A": URL_A, "B": URL_B}, None, "start")
    assert [(entry["verdict"], line) for _, entry, line in seen] == [("matches-lock", None), ("unverified", None)]


# -- each arm's judgement ------------------------------------------------------------------------------

def judged(systems, facts=None, *, models=("tiny",), fingerprints=("fp1",), serving=None):
    arms = observer(systems)
    if facts:
        serving.facts.update(facts)
    arms.observe_all({"A": URL_A, "B": URL_B}, None, "start")
    arms.observe_all({"A": URL_A, "B": URL_B}, None, "end")
    return {arm: arms.judge(arm, models=list(models), fingerprints=list(fingerprints)) for arm in ("A", "B")}


def test_an_arm_that_matched_its_lock_counts_toward_it(serving) -> None:
    result = judged(both(lock()), serving=serving)["A"]
    assert (result["identity"], result["identity_reason"]) == ("L" * 64, None)
    assert result["system_check"]["verdict"] == "matches-lock"
    assert "lock_file" not in result["system_check"]
    assert [o["at"] for o in result["system_check"]["observations"]] == ["start", "end"]


def test_an_arm_that_differs_counts_toward_no_identity(serving) -> None:
    result = judged(both(lock()), {URL_B: DIFFERING}, serving=serving)
    assert result["A"]["identity"] == "L" * 64
    assert result["B"]["identity"] is None
    assert result["B"]["identity_reason"] == (
        "the engine answering this plan is not the pinned system: runtime argv +--n_batch 7 "
        "(identity LLLLLLLLLLLL was pinned): arm B counts toward no identity")


def test_an_arm_answered_by_a_model_its_lock_does_not_list_differs(serving) -> None:
    result = judged(both(lock()), models=("other",), serving=serving)["A"]
    assert result["system_check"]["verdict"] == "differs"
    assert result["identity"] is None
    assert result["identity_reason"] == (
        "the engine answering this plan is not the pinned system: runtime answered model tiny -> other "
        "(identity LLLLLLLLLLLL was pinned): arm A counts toward no identity")
    assert result["system_check"]["differences"] == [
        {"component": "runtime.endpoint.answered_model", "pinned": ["tiny"], "observed": "other", "pass": "A",
         "at": "responses"}]
    assert result["system_check"]["lock"] == "L" * 64


def test_an_arm_whose_responses_carry_another_fingerprint_differs(serving) -> None:
    result = judged(both(lock()), fingerprints=("fp2",), serving=serving)["B"]
    assert result["system_check"]["verdict"] == "differs" and result["identity"] is None


def test_responses_are_not_held_to_a_lock_that_pins_no_runtime(serving) -> None:
    unpinned = lock(declared={"engine": "llama"})  # no endpoint or process pinned: nothing comparable
    result = judged(both(unpinned), models=("other",), fingerprints=("fp9",), serving=serving)["A"]
    assert result["system_check"]["verdict"] == "unverified"
    assert result["identity"] is None
    assert result["identity_reason"] == (
        "arm A's system could not be checked against identity LLLLLLLLLLLL (the lock pins no serving runtime "
        "(no [runtime] endpoint or process)): it counts toward no identity")


def test_an_arm_without_a_lock(serving) -> None:
    result = judged(both(None), serving=serving)["B"]
    assert result["identity"] is None
    assert result["identity_reason"] == "no pinned identity for arm B: it counts toward no identity"
    assert result["system_check"]["verdict"] == "unverified"


def test_an_arm_that_could_not_be_looked_at(serving) -> None:
    result = judged(both(lock()), {URL_A: RuntimeError("refused")}, serving=serving)["A"]
    assert result["identity"] is None
    assert result["identity_reason"] == (
        "arm A's system could not be checked against identity LLLLLLLLLLLL (could not observe the runtime "
        "(RuntimeError: refused)): it counts toward no identity")


def test_an_arm_s_own_lock_file_is_named_in_its_check(serving) -> None:
    result = judged(both(lock(), B=(lock("O" * 64), "b.lock.json")), serving=serving)
    assert result["B"]["system_check"]["lock_file"] == "b.lock.json"
    assert result["B"]["identity"] == "O" * 64
    assert "lock_file" not in result["A"]["system_check"]


def test_the_subject_is_this_plan() -> None:
    assert system.SUBJECT == "this plan"
