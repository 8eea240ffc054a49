"""`compare` in-process (execsys/compare.py): the label, the reasons and the sentence a user reads, from
real lock files, result files and ledger records.

Written for mutants that survived scripts/mutation.sh (test_compare.py drives `execsys compare` in
subprocesses, where a mutant cannot be seen). The figures are counted by hand from the outcomes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.compare import Result, compare, load_result
from execsys.errors import InputError, UsageError
from execsys.identity import SCHEMA
from execsys.ledger import Ledger

# A right on q0-q6 and q10-q11; B right on q7 and q10-q11: b = 7, c = 1, n = 12.
OUT_A = {f"q{i}": i < 7 or i >= 10 for i in range(12)}
OUT_B = {f"q{i}": i == 7 or i >= 10 for i in range(12)}
BASE = {"hardware": {"host": "gpu1"}, "runtime": {"engine": "vllm", "version": "0.10.0"}, "model": {"name": "m"}}


def write_lock(path: Path, **declared) -> str:
    components = {name: {"declared": dict(declared.get(name, {})), "observed": {}} for name in COMPONENTS}
    data = {"schema": SCHEMA, "id": content_id(components), "recorded_at": "2026-11-30T00:00:00Z",
            "declaration": {}, "components": components, "notes": []}
    path.write_text(json.dumps(data))
    return data["id"]


def write_result(path: Path, lock: Path, outcomes: dict, session: str | None = "s1", **extra) -> Path:
    data = {"schema": "execsys.result/1", "identity": lock.name, "outcomes": outcomes, **extra}
    if session is not None:
        data["session"] = session
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def ledger(tmp_path: Path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as opened:
        yield opened


@pytest.fixture
def locks(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    out = {}
    for name, declared in {
        "base": BASE,
        "runtime": {**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}},
        "both": {**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}, "hardware": {"host": "gpu2"}},
    }.items():
        path = tmp_path / f"{name}.lock.json"
        out[name] = (path, write_lock(path, **declared))
    return out


def probe(ledger: Ledger, identity: str, axis: str, m: int, n: int) -> None:
    ledger.append("probe", {"axis": axis, "identity": identity, "m": m, "n": n}, identity=identity)


def test_one_moved_component_in_one_session_is_causal(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["runtime"][0], OUT_B)), ledger)
    assert a.identity.id == locks["base"][1] and a.session == "s1" and a.concurrency is None
    result = compare(a, b, ledger, ["runtime"])
    assert (result.label, result.moved, result.reasons, result.crossed) == ("causal", ["runtime"], [], [])
    assert result.changes["runtime"] == [{"field": "declared.version", "old": "0.10.0", "new": "0.11.0"}]
    p = result.paired
    assert p is not None
    assert (p["kind"], p["n"], p["b"], p["c"], p["only_in_a"], p["only_in_b"]) == ("paired", 12, 7, 1, 0, 0)
    assert (p["rate_a"], p["rate_b"], p["difference"]) == (pytest.approx(9 / 12), pytest.approx(3 / 12),
                                                           pytest.approx(-0.5))
    assert p["mcnemar_p"] == pytest.approx(18 / 256)  # 2 * (1 + 8) / 2^8
    low, high = p["ci95"]
    assert low < -0.5 < high < 0  # B - A: the effect of moving to B, with its sign
    assert result.statement == (
        f"Causal, inside one session: changing runtime moved the rate by -0.500 (B - A, 95% CI {low:+.3f} to "
        f"{high:+.3f}; discordant 7 vs 1, exact McNemar p = 0.07031, n = 12 paired cases). "
        f"A ({a.ref}) 0.750 over 12 cases, B ({b.ref}) 0.250 over 12 cases.")
    assert result.record is not None
    stored = ledger.get(result.record)
    assert stored.kind == "comparison" and stored.identity == locks["base"][1]
    assert stored.body["identities"] == sorted([locks["base"][1], locks["runtime"][1]])
    assert stored.body["a"] == {"ref": a.ref, "identity": a.identity.id, "session": "s1", "host": None,
                                "concurrency": None, "n": 12, "rate": 0.75, "run": None}


def test_what_makes_a_comparison_descriptive(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["both"][0], OUT_B)), ledger)
    more = compare(a, b, ledger, ["runtime"], record=False)
    assert more.label == "descriptive" and more.moved == ["runtime", "hardware"]
    assert more.reasons == ["more than the declared intervention moved: hardware"]
    assert more.statement == (f"Descriptive only: A ({a.ref}) 0.750 over 12 cases, B ({b.ref}) 0.250 over 12 "
                              "cases. No causal claim: more than the declared intervention moved: hardware.")
    assert compare(a, b, ledger, ["budget"], record=False).reasons == [
        "the declared intervention (budget) did not move; runtime, hardware moved instead"]
    assert compare(a, b, ledger, record=False).reasons == [
        "no intervention declared (give --intervention COMPONENT); moved: runtime, hardware"]
    same = compare(a, a, ledger, record=False)
    assert same.reasons == ["no intervention declared (give --intervention COMPONENT); no component moved"]
    assert compare(a, a, ledger, ["runtime"], record=False).reasons == [
        "the declared intervention (runtime) did not move"]
    assert compare(a, b, ledger, ["runtime", "hardware"], record=False).label == "causal"
    with pytest.raises(UsageError, match=r"^--intervention 'vibes': not a component \(one of model, artifact, "):
        compare(a, b, ledger, ["vibes"], record=False)


def test_different_sessions_need_a_licensed_restart(tmp_path: Path, locks, ledger: Ledger) -> None:
    base, runtime = locks["base"], locks["runtime"]
    a = load_result(str(write_result(tmp_path / "a.json", base[0], OUT_A, session="s1")), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", runtime[0], OUT_B, session="s2")), ledger)
    unmeasured = compare(a, b, ledger, ["runtime"], record=False)
    assert unmeasured.crossed == ["restart"] and unmeasured.label == "descriptive"
    assert unmeasured.reasons == [f"different sessions and restart was never probed under identity {base[1][:12]}",
                                  f"different sessions and restart was never probed under identity {runtime[1][:12]}"]
    probe(ledger, base[1], "restart", 20, 20)
    probe(ledger, runtime[1], "restart", 20, 20)
    licensed = compare(a, b, ledger, ["runtime"], record=False)
    assert licensed.label == "causal"
    assert licensed.statement.startswith("Causal, across restart (licensed at agreement 1.0): changing runtime ")
    probe(ledger, runtime[1], "restart", 2, 10)
    unstable = compare(a, b, ledger, ["runtime"], record=False)
    assert unstable.reasons == [f"different sessions and restart is unstable under identity {runtime[1][:12]} "
                                "(restart agreement 22/30 = 0.73, 95% CI 0.56-0.86)"]


def test_machines_and_load_are_crossed_when_they_differ(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A, session=None, host="gpu1",
                                     concurrency=1)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["base"][0], OUT_B, session=None, host="gpu2",
                                     concurrency=8)), ledger)
    assert (a.host, b.concurrency) == ("gpu1", 8)
    assert compare(a, b, ledger, record=False).crossed == ["restart", "hosts", "concurrency"]


def test_answers_are_compared_by_agreement(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], {"c1": "42", "c2": 1, "c3": "x"})),
                    ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["base"][0], {"c1": "42", "c2": 1, "c4": "y"})),
                    ledger)
    assert a.binary() is None
    result = compare(a, b, ledger, record=False)
    assert result.paired == {"kind": "agreement", "n": 2, "agree": 2, "agreement_rate": 1.0}
    assert result.statement.startswith(f"Descriptive only: A ({a.ref}) and B ({b.ref}): outcomes agree on 2/2 "
                                       "shared cases. No causal claim: ")


def test_outcomes_as_right_or_wrong() -> None:
    from execsys.scope import IdentityRef

    ident = IdentityRef("i")
    assert Result("r", ident, {"a": True, "b": 0, "c": 1.0, "d": {"correct": False}}).binary() == {
        "a": True, "b": False, "c": True, "d": False}
    assert Result("r", ident, {"a": 2}).binary() is None
    assert Result("r", ident, {"a": {"correct": 1}}).binary() is None
    assert Result("r", ident, {"a": True, "b": False, "c": False, "d": True}).to_json()["rate"] == 0.5
    assert Result("r", ident, {"a": "text"}).to_json()["rate"] is None


def test_the_arms_of_one_paired_run_are_a_paired_control(ledger: Ledger, locks) -> None:
    outcomes = {f"q{i}": {"A": {"correct": OUT_A[f"q{i}"]}, "B": {"correct": OUT_B[f"q{i}"]}} for i in range(12)}
    outcomes["q12"] = {"A": {"correct": True}, "B": {"error": "timeout"}}
    run = ledger.append("plan-run", {"arms": {"A": {"host": "gpu1"}, "B": {"host": "gpu2"}}, "outcomes": outcomes,
                                     "checks": [{"name": "order", "passed": True}]}, identity=locks["base"][1])
    a, b = load_result(f"{run}:A", ledger), load_result(f"{run}:B", ledger)
    assert (len(a.outcomes), len(b.outcomes), a.host, b.host, a.paired_run) == (13, 12, "gpu1", "gpu2", run)
    result = compare(a, b, ledger, record=False)
    assert result.paired_control and result.crossed == [] and result.label == "causal"
    assert result.paired is not None and result.paired["only_in_a"] == 1
    assert result.statement.startswith("Causal, inside one contemporaneous paired run: switching from "
                                       f"{run}:A to {run}:B moved the rate by -0.500 ")
    failed = ledger.append("plan-run", {"arms": {"A": {}, "B": {}}, "outcomes": outcomes,
                                        "checks": [{"name": "window", "passed": False, "detail": "arms 3 h apart"}]})
    broken = compare(load_result(f"{failed}:A", ledger), load_result(f"{failed}:B", ledger), ledger, record=False)
    assert broken.label == "descriptive"
    assert broken.reasons == ["the paired run's check failed (window: arms 3 h apart)"]
    with pytest.raises(InputError, match=f"^{run}:C: name one arm of the paired run as {run}:ARM \\(arms: A, B\\)$"):
        load_result(f"{run}:C", ledger)


def test_a_probe_pass_is_a_result(ledger: Ledger, locks) -> None:
    cases = [{"id": "c1", "passes": [{"digest": "d1", "outcome": "7"}, {"digest": "d2", "outcome": "8"}]},
             {"id": "c2", "passes": [{"digest": "d3", "outcome": None}, {"error": "HTTP 500"}]}]
    record = ledger.append("probe", {"axis": "session", "m": 0, "n": 1, "cases": cases}, identity=locks["base"][1])
    first, second = load_result(f"{record}:0", ledger), load_result(f"{record}:1", ledger)
    assert first.outcomes == {"c1": "7", "c2": "d3"} and first.session == f"{record}:pass0"
    assert second.outcomes == {"c1": "8"}
    assert load_result(record, ledger).outcomes == first.outcomes
    with pytest.raises(InputError, match=f"^{record}:x: name a pass of the probe as {record}:0, :1, ...$"):
        load_result(f"{record}:x", ledger)


def test_bad_references_are_one_line(tmp_path: Path, ledger: Ledger, locks) -> None:
    def problem(ref: str) -> str:
        with pytest.raises(InputError) as caught:
            load_result(ref, ledger)
        return str(caught.value)

    assert problem("nothing-here") == "nothing-here: neither a result file nor a ledger record"
    doctor = ledger.append("doctor", {})
    assert problem(doctor) == f"{doctor}: ledger record {doctor} is a doctor record, not a result"
    lock = locks["base"][0]
    for body, needle in (([1], "a result file is a JSON object (execsys.result/1)"),
                         ({"schema": "x/1", "identity": "i", "outcomes": {"a": 1}}, "schema 'x/1' is not execsys.result/1"),
                         ({"outcomes": {"a": 1}}, "'identity' (a lock path, ledger id or identity id) is required"),
                         ({"identity": lock.name, "outcomes": {}}, "'outcomes' must be a non-empty object"),
                         ({"identity": lock.name, "outcomes": {"a": 1}, "concurrency": True},
                          "'concurrency' must be an integer")):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(body))
        assert problem(str(path)).startswith(f"{path}: {needle}"), body
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    assert problem(str(path)).startswith(f"{path}: not a readable JSON result file (")


# -- results harnesses wrote: a real lm-eval run's results_*.json and the samples_*.jsonl beside it ----------
# (tests/data/grader: lm-eval 0.4 against the suite's llama.cpp server, task tiny_qa, six documents, every
# exact_match 0.0). The sidecars are written in the shape `execsys run` and `execsys attach` write them.
LM_EVAL = Path(__file__).parent / "data" / "grader"
LM_EVAL_STAMP = "2026-12-01T13-39-34.056034"
TINY_QA = {f"tiny_qa/{doc}": 0.0 for doc in range(6)}


def lm_eval_output(where: Path, *, embedded: dict | None = None, samples: str | None = None,
                   extra_tasks: tuple[str, ...] = ()) -> Path:
    """The real run's two files copied into ``where`` as lm-eval left them under --output_path; ``embedded``
    is what ``--metadata '{"execsys": ...}'`` puts in the task's config, ``samples`` replaces the samples
    file's text ("" for an empty file), ``extra_tasks`` adds tasks run without --log_samples."""
    where.mkdir(parents=True, exist_ok=True)
    data = json.loads((LM_EVAL / f"results_{LM_EVAL_STAMP}.json").read_text())
    if embedded is not None:
        data["configs"]["tiny_qa"]["metadata"]["execsys"] = embedded
    for task in extra_tasks:
        data["configs"][task] = {**data["configs"]["tiny_qa"], "task": task}
    results = where / f"results_{LM_EVAL_STAMP}.json"
    results.write_text(json.dumps(data))
    lines = (LM_EVAL / f"samples_tiny_qa_{LM_EVAL_STAMP}.jsonl").read_text()
    (where / f"samples_tiny_qa_{LM_EVAL_STAMP}.jsonl").write_text(lines if samples is None else samples)
    return results


def sidecar(result: Path, run_id: str, identity: str | None, lock: Path | str | None = None, **extra) -> dict:
    body = {"schema": "execsys.run/1", "id": run_id, "verdict": "clean", "drifted": False,
            "identity": {"id": identity, "lock": str(lock) if lock else None, "how": "pinned"} if identity else None,
            "results": [{"path": str(result), "harness": "lm-eval"}], **extra}
    result.with_name(result.name + ".execsys.json").write_text(json.dumps(dict(body, result=body["results"][0])))
    return body


def known(ledger: Ledger, lock: Path) -> dict:
    """The lock's identity recorded in the ledger, as `execsys pin` records it."""
    data = json.loads(lock.read_text())
    ledger.append("identity", data, identity=data["id"])
    return data["components"]


@pytest.fixture
def no_default_ledger(tmp_path: Path, monkeypatch):
    """An empty ledger where execsys would open its default one: an identity must be found in the ledger given."""
    monkeypatch.setenv("EXECSYS_LEDGER", str(tmp_path / "default-ledger.sqlite3"))


def test_an_lm_eval_result_without_identity_is_compared_descriptively(tmp_path: Path, ledger: Ledger) -> None:
    from execsys.scope import IdentityRef

    first, second = lm_eval_output(tmp_path / "a"), lm_eval_output(tmp_path / "b")
    a, b = load_result(str(first), ledger), load_result(str(second), ledger)
    assert a.outcomes == TINY_QA and a.ref == str(first) and (a.session, a.run) == (None, None)
    assert a.identity == IdentityRef(f"unrecorded:{first}", {}, str(first))
    assert a.caveats == ["no identity recorded for {side}"]
    result = compare(a, b, ledger, ["runtime"], record=False)
    assert result.moved is None and result.label == "descriptive"
    assert result.reasons == [f"the components that moved cannot be named: {first} has no pinned identity record, "
                              f"{second} has no pinned identity record",
                              "no identity recorded for A", "no identity recorded for B",
                              # an identity is shown by its first 12 characters, here "unrecorded:/" for both
                              "different sessions and restart was never probed under identity unrecorded:/",
                              "different sessions and restart was never probed under identity unrecorded:/"]
    assert result.statement.startswith(f"Descriptive only: A ({first}) 0.000 over 6 cases, B ({second}) 0.000 over "
                                       "6 cases. No causal claim: the components that moved cannot be named: ")
    assert result.to_json()["a"] == {"ref": str(first), "identity": f"unrecorded:{first}", "session": None,
                                     "host": None, "concurrency": None, "n": 6, "rate": 0.0, "run": None}


def test_an_lm_eval_result_with_nothing_per_case_is_one_line(tmp_path: Path, ledger: Ledger) -> None:
    def problem(results: Path) -> str:
        with pytest.raises(InputError) as caught:
            load_result(str(results), ledger)
        return str(caught.value)

    empty = lm_eval_output(tmp_path / "empty", samples="")
    assert problem(empty) == f"{empty}: no per-case outcomes to compare"
    unlogged = lm_eval_output(tmp_path / "unlogged", extra_tasks=("tiny_qb",))
    for samples in unlogged.parent.glob("samples_*.jsonl"):
        samples.unlink()
    assert problem(unlogged) == (
        f"{unlogged}: no per-case outcomes to compare (no samples_tiny_qa_*.jsonl beside {unlogged.name} (run lm-eval "
        f"with --log_samples); no samples_tiny_qb_*.jsonl beside {unlogged.name} (run lm-eval with --log_samples))")
    # a task logged and one not: the logged one's cases are compared
    assert load_result(str(lm_eval_output(tmp_path / "half", extra_tasks=("tiny_qb",))), ledger).outcomes == TINY_QA


def test_the_identity_lm_eval_kept_in_its_own_results_makes_the_comparison_causal(
        tmp_path: Path, locks, ledger: Ledger, no_default_ledger) -> None:
    (base_lock, base), (runtime_lock, runtime) = locks["base"], locks["runtime"]
    components = known(ledger, base_lock)
    known(ledger, runtime_lock)
    first = lm_eval_output(tmp_path / "a", embedded={"identity": base, "run": "run-20261201T101010-0000000a"})
    second = lm_eval_output(tmp_path / "b", embedded={"identity": runtime, "run": "run-20261201T111111-0000000b"})
    a, b = load_result(str(first), ledger), load_result(str(second), ledger)
    assert (a.identity.id, a.identity.components, a.caveats) == (base, components, [])
    assert (a.session, a.run) == ("run-20261201T101010-0000000a", "run-20261201T101010-0000000a")
    probe(ledger, base, "restart", 20, 20)
    probe(ledger, runtime, "restart", 20, 20)
    result = compare(a, b, ledger, ["runtime"], record=False)
    assert (result.label, result.moved, result.crossed, result.reasons) == ("causal", ["runtime"], ["restart"], [])
    assert result.statement == (
        "Causal, across restart (licensed at agreement 1.0): changing runtime moved the rate by +0.000 (B - A, 95% CI "
        f"{result.paired['ci95'][0]:+.3f} to {result.paired['ci95'][1]:+.3f}; discordant 0 vs 0, exact McNemar p = 1, "
        f"n = 6 paired cases). A ({first}) 0.000 over 6 cases, B ({second}) 0.000 over 6 cases.")


def test_an_embedded_identity_nobody_recorded_is_named_but_has_no_components(tmp_path: Path, ledger: Ledger,
                                                                              no_default_ledger) -> None:
    from execsys.scope import IdentityRef

    short = load_result(str(lm_eval_output(tmp_path / "a", embedded={"identity": "deadbeef0123"})), ledger)
    assert short.identity == IdentityRef("deadbeef0123", {}, "deadbeef0123")
    assert (short.caveats, short.session, short.run) == ([], None, None)
    complete = "ab" * 32
    whole = load_result(str(lm_eval_output(tmp_path / "b", embedded={"identity": complete, "run": None})), ledger)
    assert whole.identity == IdentityRef(complete, {}, complete) and whole.caveats == []
    result = compare(short, whole, ledger, record=False)
    assert result.moved is None and result.reasons[0] == (
        f"the components that moved cannot be named: {short.ref} has no pinned identity record, {whole.ref} has no "
        "pinned identity record")


def test_the_sidecar_execsys_wrote_beside_a_result_names_its_identity_and_run(
        tmp_path: Path, locks, ledger: Ledger, no_default_ledger) -> None:
    base, (runtime_lock, runtime) = locks["base"][1], locks["runtime"]
    # lm-eval kept the identity it was started with; the sidecar (written after the run) is the word that counts
    results = lm_eval_output(tmp_path / "out", embedded={"identity": base, "run": "run-20261201T101010-0000000a"})
    sidecar(results, "run-20261201T121212-0000000c", runtime, runtime_lock)
    a = load_result(str(results), ledger)
    assert (a.identity.id, a.identity.source, a.session, a.run) == (
        runtime, str(runtime_lock), "run-20261201T121212-0000000c", "run-20261201T121212-0000000c")
    assert a.identity.identity is not None and a.identity.host() == "gpu1" and a.caveats == []
    # with only the run id in the sidecar, lm-eval's own identity is used, and the sidecar's run
    sidecar(results, "run-20261201T121212-0000000c", None)
    assert (load_result(str(results), ledger).identity.id, load_result(str(results), ledger).session) == (
        base, "run-20261201T121212-0000000c")


def test_a_lock_re_pinned_since_the_run_is_not_taken_for_its_identity(tmp_path: Path, locks, ledger: Ledger,
                                                                      no_default_ledger) -> None:
    (base_lock, _), (runtime_lock, runtime) = locks["base"], locks["runtime"]
    results = lm_eval_output(tmp_path / "out")
    sidecar(results, "run-20261201T121212-0000000c", runtime, base_lock)  # base_lock now holds another identity
    unknown = load_result(str(results), ledger).identity
    assert (unknown.id, unknown.components, unknown.identity) == (runtime, {}, None)
    components = known(ledger, runtime_lock)
    recorded = load_result(str(results), ledger).identity
    assert (recorded.id, recorded.components) == (runtime, components) and recorded.source != str(base_lock)
    for lock in (tmp_path / "gone.lock.json", tmp_path / "broken.lock.json"):
        (tmp_path / "broken.lock.json").write_text("{not json")
        sidecar(results, "run-20261201T121212-0000000c", runtime, lock)
        assert load_result(str(results), ledger).identity.components == components, lock


def test_what_a_sidecar_says_about_the_run_makes_the_comparison_descriptive(tmp_path: Path, locks,
                                                                           ledger: Ledger) -> None:
    (base_lock, base) = locks["base"]
    clean = lm_eval_output(tmp_path / "clean")
    sidecar(clean, "run-20261201T101010-0000000a", base, base_lock)
    attached = lm_eval_output(tmp_path / "attached")
    sidecar(attached, "attach-20261201T101010-0000000b", base, base_lock, schema="execsys.attach/1",
            attached_after=True, drifted=True)
    drifted = lm_eval_output(tmp_path / "drifted")
    sidecar(drifted, "run-20261201T101010-0000000d", base, base_lock, drifted=True)
    a, b, d = (load_result(str(p), ledger) for p in (clean, attached, drifted))
    assert b.caveats == ["identity recorded after the run for {side} (attached): descriptive only"]
    unprobed = f"different sessions and restart was never probed under identity {base[:12]}"
    undeclared = "no intervention declared (give --intervention COMPONENT); no component moved"
    assert compare(a, b, ledger, record=False).reasons == [
        "identity recorded after the run for B (attached): descriptive only", undeclared, unprobed]
    assert compare(d, a, ledger, record=False).reasons == [
        "run run-20261201T101010-0000000d for A drifted: its result is not attributable to one system", undeclared,
        unprobed]


def test_a_sidecar_that_is_not_a_run_record_is_ignored(tmp_path: Path, locks, ledger: Ledger) -> None:
    base = locks["base"][1]
    results = lm_eval_output(tmp_path / "out", embedded={"identity": base, "run": "run-20261201T101010-0000000a"})
    for text in ("{not json", "[1, 2]"):
        results.with_name(results.name + ".execsys.json").write_text(text)
        a = load_result(str(results), ledger)
        assert (a.identity.id, a.session, a.caveats) == (base, "run-20261201T101010-0000000a", []), text


def run_record(ledger: Ledger, kind: str, results: list[tuple[Path, str]], identity: str | None,
               lock: Path | None = None, **extra) -> str:
    """A run (or attach) record as `execsys run` appends it: the results it found, the identity it ran under."""
    from execsys.ledger import new_id

    record_id = new_id(kind)
    body = {"schema": f"execsys.{kind}/1", "id": record_id, "drifted": False,
            "identity": {"id": identity, "lock": str(lock) if lock else None} if identity else None,
            "results": [{"path": str(path), "harness": harness} for path, harness in results], **extra}
    return ledger.append(kind, body, identity=identity, record_id=record_id)


def test_a_run_id_names_its_result(tmp_path: Path, locks, ledger: Ledger, no_default_ledger) -> None:
    (base_lock, base), (runtime_lock, runtime) = locks["base"], locks["runtime"]
    components = known(ledger, base_lock)
    results = lm_eval_output(tmp_path / "out" / "tiny")
    samples = results.with_name(f"samples_tiny_qa_{LM_EVAL_STAMP}.jsonl")
    run = run_record(ledger, "run", [(results, "lm-eval"), (samples, "lm-eval")], base)
    # attached later under another identity: the run's own record still says what the run ran under
    sidecar(results, "attach-20261201T101010-0000000b", runtime, runtime_lock, attached_after=True)
    assert load_result(str(results), ledger).identity.id == runtime
    for ref in (run, f"{run}:{results.name}", f"{run}:{results}", f"{run}:tiny/{results.name}"):
        got = load_result(ref, ledger)
        assert (got.ref, got.identity.id, got.identity.components, got.session, got.run, got.caveats) == (
            ref, base, components, run, run, []), ref
        assert got.outcomes == TINY_QA
    with pytest.raises(InputError, match="a samples file; compare the results_"):
        load_result(f"{run}:{samples.name}", ledger)
    with pytest.raises(InputError) as caught:
        load_result(f"{run}:nothing.json", ledger)
    assert str(caught.value) == (f"{run}:nothing.json: name one result of the run as {run}:PATH (its results: "
                                 f"{results}, {samples})")
    results.unlink()
    with pytest.raises(InputError) as caught:
        load_result(run, ledger)
    assert str(caught.value) == f"{run}: the run's result {results} is no longer there"


def test_an_attach_record_and_a_plain_result_file_of_a_run(tmp_path: Path, locks, ledger: Ledger,
                                                           no_default_ledger) -> None:
    (base_lock, base) = locks["base"]
    components = known(ledger, base_lock)
    results = lm_eval_output(tmp_path / "out")
    attach = run_record(ledger, "attach", [(results, "lm-eval")], base, base_lock, attached_after=True)
    got = load_result(attach, ledger)
    assert (got.ref, got.identity.id, got.identity.source, got.session) == (attach, base, str(base_lock), attach)
    assert got.caveats == ["identity recorded after the run for {side} (attached): descriptive only"]
    # another harness's execsys.result/1 file, its identity given by id: the run names it
    plain = write_result(tmp_path / "plain.json", base_lock, OUT_A, session="s9")
    plain.write_text(json.dumps({**json.loads(plain.read_text()), "identity": base}))
    run = run_record(ledger, "run", [(plain, "other")], base)
    got = load_result(run, ledger)
    assert (got.ref, got.session, got.run, got.identity.components, got.outcomes) == (run, run, run, components, OUT_A)


def test_a_run_reference_that_names_no_result_is_one_line(tmp_path: Path, ledger: Ledger) -> None:
    def problem(ref: str) -> str:
        with pytest.raises(InputError) as caught:
            load_result(ref, ledger)
        return str(caught.value)

    assert problem("run-20261201T000000-00000000") == "run-20261201T000000-00000000: no such run in the ledger"
    imposter = ledger.append("doctor", {}, record_id="run-20261201T000000-0000dead")
    assert problem(imposter) == f"{imposter}: ledger record {imposter} is a doctor record, not a run"
    empty = run_record(ledger, "run", [], None)
    assert problem(empty) == f"{empty}: name one result of the run as {empty}:PATH (its results: none)"


def test_the_comparison_record_holds_every_field(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["runtime"][0], OUT_B)), ledger)
    assert (a.ref, b.ref) == (str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    result = compare(a, b, ledger, ["runtime"])
    assert set(result.scopes) == {locks["base"][1], locks["runtime"][1]}
    assert all(scope.identity == ident and scope.licence is None for ident, scope in result.scopes.items())
    assert result.record is not None and ledger.get(result.record).body == {
        "schema": "execsys.comparison/1", "record": None, "a": a.to_json(), "b": b.to_json(),
        "identities": sorted([locks["base"][1], locks["runtime"][1]]), "moved": ["runtime"],
        "changes": {"runtime": [{"field": "declared.version", "old": "0.10.0", "new": "0.11.0"}]},
        "intervention": ["runtime"], "crossed": [], "label": "causal", "reasons": [], "statement": result.statement,
        "paired": result.paired, "paired_control": False}
    assert result.to_json() == {**ledger.get(result.record).body, "record": result.record}


def test_lists_in_the_reasons_and_the_sentence_are_comma_separated(tmp_path: Path, locks, ledger: Ledger) -> None:
    three = tmp_path / "three.lock.json"
    write_lock(three, **{**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}, "hardware": {"host": "gpu2"},
                         "model": {"name": "m2"}})
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["both"][0], OUT_B)), ledger)
    c = load_result(str(write_result(tmp_path / "c.json", three, OUT_B)), ledger)
    assert compare(a, b, ledger, ["budget", "tools"], record=False).reasons == [
        "the declared intervention (budget, tools) did not move; runtime, hardware moved instead"]
    assert compare(a, c, ledger, ["runtime"], record=False).reasons == [
        "more than the declared intervention moved: model, hardware"]
    assert compare(a, a, ledger, ["runtime", "budget"], record=False).reasons == [
        "the declared intervention (runtime, budget) did not move"]
    both = compare(a, b, ledger, ["runtime", "hardware"], record=False)
    assert both.statement.startswith("Causal, inside one session: changing runtime, hardware moved the rate by -0.500 ")
    descriptive = compare(a, c, ledger, ["budget"], record=False)
    assert descriptive.statement == (
        f"Descriptive only: A ({a.ref}) 0.750 over 12 cases, B ({c.ref}) 0.250 over 12 cases. No causal claim: the "
        "declared intervention (budget) did not move; model, runtime, hardware moved instead.")
    assert compare(a, c, ledger, record=False).statement.endswith(
        "No causal claim: no intervention declared (give --intervention COMPONENT); moved: model, runtime, hardware.")


def test_a_licensed_restart_and_machine_boundary_are_both_named(tmp_path: Path, locks, ledger: Ledger) -> None:
    (base_lock, base), (runtime_lock, runtime) = locks["base"], locks["runtime"]
    a = load_result(str(write_result(tmp_path / "a.json", base_lock, OUT_A, session="s1", host="gpu1")), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", runtime_lock, OUT_B, session="s2", host="gpu2")), ledger)
    for ident in (base, runtime):
        probe(ledger, ident, "restart", 10, 10)
        probe(ledger, ident, "hosts", 10, 10)
    result = compare(a, b, ledger, ["runtime"], record=False)
    assert result.label == "causal" and result.statement.startswith(
        "Causal, across restart, hosts (licensed at agreement 1.0): changing runtime moved the rate by -0.500 ")


def test_machines_are_crossed_only_when_a_named_one_differs() -> None:
    from execsys.compare import crossed_axes
    from execsys.scope import IdentityRef

    def result(session: str | None, host: str | None) -> Result:
        return Result("r", IdentityRef("i"), {}, session=session, host=host)

    assert crossed_axes(result("s1", "gpu1"), result("s2", "gpu1")) == ["restart"]
    assert crossed_axes(result("s1", "gpu1"), result("s2", None)) == ["restart", "hosts"]
    assert crossed_axes(result("s1", None), result("s2", "gpu1")) == ["restart", "hosts"]
    assert crossed_axes(result("s1", None), result("s2", "")) == ["restart"]
    assert crossed_axes(result("s1", "gpu1"), result("s1", "gpu2")) == []


def test_a_scored_result_against_answers_and_results_that_share_no_case(tmp_path: Path, locks,
                                                                         ledger: Ledger) -> None:
    (base_lock, _), (runtime_lock, _) = locks["base"], locks["runtime"]
    scored = load_result(str(write_result(tmp_path / "a.json", base_lock, {"c1": True, "c2": False})), ledger)
    answers = load_result(str(write_result(tmp_path / "b.json", runtime_lock, {"c1": "42", "c2": False})), ledger)
    mixed = compare(scored, answers, ledger, ["runtime"], record=False)
    assert mixed.paired == {"kind": "agreement", "n": 2, "agree": 1, "agreement_rate": 0.5}
    assert mixed.statement == (f"Causal, inside one session: changing runtime is the only difference between the two "
                               f"runs. A ({scored.ref}) and B ({answers.ref}): outcomes agree on 1/2 shared cases.")
    elsewhere = load_result(str(write_result(tmp_path / "c.json", runtime_lock, {"d1": "x"})), ledger)
    assert compare(answers, elsewhere, ledger, record=False).paired == {
        "kind": "agreement", "n": 0, "agree": 0, "agreement_rate": None}
    disjoint = load_result(str(write_result(tmp_path / "d.json", runtime_lock, {"d1": True, "d2": True})), ledger)
    apart = compare(scored, disjoint, ledger, ["runtime"], record=False)
    assert apart.paired == {"kind": "paired", "n": 0, "b": 0, "c": 0, "rate_a": None, "rate_b": None,
                            "difference": None, "ci95": None, "mcnemar_p": 1.0, "only_in_a": 2, "only_in_b": 2}
    assert apart.statement == (f"Causal, inside one session: changing runtime is the only difference between the two "
                               f"runs. A ({scored.ref}) 0.500 over 2 cases, B ({disjoint.ref}) 1.000 over 2 cases.")


def test_one_side_without_a_pinned_identity_is_named_alone(tmp_path: Path, locks, ledger: Ledger) -> None:
    pinned = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A)), ledger)
    unrecorded = load_result(str(lm_eval_output(tmp_path / "lm")), ledger)
    result = compare(pinned, unrecorded, ledger, ["runtime"], record=False)
    assert (result.moved, result.changes) == (None, {})
    assert result.reasons[0] == f"the components that moved cannot be named: {unrecorded.ref} has no pinned identity record"
    # the same identity known by its id alone: nothing moved
    short = [load_result(str(lm_eval_output(tmp_path / side, embedded={"identity": "deadbeef0123"})), ledger)
             for side in ("x", "y")]
    same = compare(*short, ledger, record=False)
    assert (same.moved, same.changes) == ([], {})
    assert same.reasons[0] == "no intervention declared (give --intervention COMPONENT); no component moved"


def test_results_named_by_a_ledger_record_carry_its_identity(tmp_path: Path, locks, ledger: Ledger,
                                                             no_default_ledger) -> None:
    from execsys.scope import IdentityRef

    base_lock, base = locks["base"]
    components = known(ledger, base_lock)
    outcomes = {f"q{i}": {"A": {"correct": OUT_A[f"q{i}"]}, "B": {"correct": OUT_B[f"q{i}"]}} for i in range(3)}
    by_body = ledger.append("plan-run", {"arms": {"A": {}, "B": {}}, "outcomes": outcomes, "identity": base})
    arm = load_result(f"{by_body}:A", ledger)
    assert (arm.ref, arm.identity.id, arm.identity.components, arm.session) == (f"{by_body}:A", base, components, by_body)
    by_record = ledger.append("plan-run", {"arms": {"A": {}, "B": {}}, "outcomes": outcomes}, identity=base)
    assert load_result(f"{by_record}:B", ledger).identity.components == components
    unpinned = ledger.append("plan-run", {"arms": {"A": {}, "B": {}}, "outcomes": outcomes})
    assert load_result(f"{unpinned}:A", ledger).identity == IdentityRef(f"unpinned:{unpinned}", {}, f"unpinned:{unpinned}")
    cases = [{"id": "c1", "passes": [{"digest": "d1", "outcome": "7"}, {"digest": "d2", "outcome": "8"}]}]
    record = ledger.append("probe", {"axis": "session", "m": 1, "n": 1, "cases": cases}, identity=base)
    second = load_result(f"{record}:1", ledger)
    assert (second.ref, second.identity.id, second.identity.components, second.outcomes) == (
        f"{record}:1", base, components, {"c1": "8"})
    assert load_result(f"{record}:2", ledger).outcomes == {}  # past the last pass: nothing to compare
    # a result file naming its identity by id, known from the ledger
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"identity": base, "session": "s1", "outcomes": {"c1": True}}))
    got = load_result(str(plain), ledger)
    assert (got.ref, got.identity.id, got.identity.components) == (str(plain), base, components)


def test_a_result_file_that_is_not_one_is_one_line(tmp_path: Path, ledger: Ledger) -> None:
    def problem(path: Path) -> str:
        with pytest.raises(InputError) as caught:
            load_result(str(path), ledger)
        return str(caught.value)

    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"identity": 5, "outcomes": {"a": 1}}))
    assert problem(odd) == f"{odd}: 'identity' (a lock path, ledger id or identity id) is required"
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate((256 << 20) + 1)  # sparse: nothing is written
    assert problem(huge) == f"result file {huge}: {(256 << 20) + 1} bytes, more than a result file may have (256 MiB)"


def test_a_paired_run_whose_arm_errored_on_every_case_shares_no_case(ledger: Ledger) -> None:
    outcomes = {f"q{i}": {"A": {"correct": True}, "B": {"error": "timeout"}} for i in range(3)}
    run = ledger.append("plan-run", {"arms": {"A": {}, "B": {}}, "outcomes": outcomes, "checks": []})
    result = compare(load_result(f"{run}:A", ledger), load_result(f"{run}:B", ledger), ledger, record=False)
    assert result.paired is not None and (result.paired["n"], result.paired["only_in_a"]) == (0, 3)
    assert result.statement == (
        "Causal, inside one contemporaneous paired run: the two arms differ only in what the paired run set them "
        f"apart by. A ({run}:A) and B ({run}:B): outcomes agree on 0/0 shared cases.")


def test_a_large_probe_pass_is_read_from_its_result_rows(ledger: Ledger) -> None:
    run = ledger.append("probe-run", {"schema": "execsys.probe-run/1", "parameters": {"axis": "session"}})
    ledger.append_many("probe-result", [
        ({"id": "c1", "passes": [{"digest": "d1", "outcome": "7"}, {"digest": "d2", "outcome": "8"}]}, run, "c1"),
        ({"id": "c2", "passes": [{"digest": "d3", "outcome": "5"}, {"error": "HTTP 500"}]}, run, "c2"),
    ])
    record = ledger.append("probe", {"axis": "session", "m": 1, "n": 2, "errored": 0, "cases_in_ledger": True,
                                     "run": run})
    assert load_result(f"{record}:1", ledger).outcomes == {"c1": "8"}
    assert load_result(f"{record}:0", ledger).outcomes == {"c1": "7", "c2": "5"}


def test_every_reason_is_in_the_sentence_and_every_changed_component_in_the_effect(tmp_path: Path, locks,
                                                                                   ledger: Ledger) -> None:
    (base_lock, base), (both_lock, both) = locks["base"], locks["both"]
    a = load_result(str(write_result(tmp_path / "a.json", base_lock, {"c1": "42", "c2": "x"}, session="s1")), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", both_lock, {"c1": "42", "c2": "y"}, session="s2")), ledger)
    descriptive = compare(a, b, ledger, ["runtime"], record=False)
    assert descriptive.statement == (
        f"Descriptive only: A ({a.ref}) and B ({b.ref}): outcomes agree on 1/2 shared cases. No causal claim: more "
        f"than the declared intervention moved: hardware; different sessions and restart was never probed under "
        f"identity {base[:12]}; different sessions and restart was never probed under identity {both[:12]}.")
    same_session = load_result(str(write_result(tmp_path / "c.json", both_lock, {"c1": "42", "c2": "y"})), ledger)
    a_first = load_result(str(write_result(tmp_path / "d.json", base_lock, {"c1": "42", "c2": "x"})), ledger)
    causal = compare(a_first, same_session, ledger, ["runtime", "hardware"], record=False)
    assert causal.statement.startswith(
        "Causal, inside one session: changing runtime, hardware is the only difference between the two runs. ")
