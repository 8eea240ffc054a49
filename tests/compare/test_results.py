"""What a result named to `compare` is, in-process: a result file, a probe pass, an arm of a paired
run, a harness's own output (lm-eval's results and samples) or a run or attach record -- its
outcomes, and the identity, session and caveats it carries from the lock, the sidecar execsys
wrote beside it or the ledger; and a reference that names no result refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.compare import Result, compare, load_result
from execsys.errors import InputError
from execsys.ledger import Ledger
from tests.fixtures.compare_records import (
    LM_EVAL_STAMP,
    OUT_A,
    OUT_B,
    lm_eval_output,
    probe,
    write_result,
)


def test_outcomes_as_right_or_wrong() -> None:
    from execsys.scope import IdentityRef

    ident = IdentityRef("i")
    assert Result("r", ident, {"a": True, "b": 0, "c": 1.0, "d": {"correct": False}}).binary() == {
        "a": True, "b": False, "c": True, "d": False}
    assert Result("r", ident, {"a": 2}).binary() is None
    assert Result("r", ident, {"a": {"correct": 1}}).binary() is None
    assert Result("r", ident, {"a": True, "b": False, "c": False, "d": True}).to_json()["rate"] == 0.5
    assert Result("r", ident, {"a": "text"}).to_json()["rate"] is None


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


# The sidecars below are written in the shape `execsys run` and `execsys attach` write them.
TINY_QA = {f"tiny_qa/{doc}": 0.0 for doc in range(6)}


def sidecar(result: Path, run_id: str, identity: str | None, lock: Path | str | None = None,
            ledger: Ledger | None = None, **extra) -> dict:
    """The sidecar `execsys run` (or attach) writes beside ``result``, with the file's BLAKE3; recorded in
    ``ledger`` as the run it names when one is given (a sidecar naming a run nobody recorded is not vouched for)."""
    import blake3

    entry = {"path": str(result), "blake3": blake3.blake3(result.read_bytes()).hexdigest(), "harness": "lm-eval"}
    body = {"schema": "execsys.run/1", "id": run_id, "verdict": "clean", "drifted": False,
            "identity": {"id": identity, "lock": str(lock) if lock else None, "how": "pinned"} if identity else None,
            "results": [entry], **extra}
    result.with_name(result.name + ".execsys.json").write_text(json.dumps(dict(body, result=entry)))
    if ledger is not None:
        ledger.append(run_id.split("-", 1)[0], body, identity=identity, record_id=run_id)
    return body


def never_recorded(side: str, result: Path, run_id: str) -> str:
    return f"the sidecar of {side}'s result {result} names {run_id}, which the ledger never recorded: nothing vouches for it"


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
    sidecar(results, "run-20261201T121212-0000000c", runtime, runtime_lock, ledger)
    a = load_result(str(results), ledger)
    assert (a.identity.id, a.identity.source, a.session, a.run) == (
        runtime, str(runtime_lock), "run-20261201T121212-0000000c", "run-20261201T121212-0000000c")
    assert a.identity.identity is not None and a.identity.host() == "gpu1" and a.caveats == []
    # with no identity in the run's record, lm-eval's own identity is used, and the sidecar's run
    sidecar(results, "run-20261201T121212-0000000e", None, None, ledger)
    assert (load_result(str(results), ledger).identity.id, load_result(str(results), ledger).session) == (
        base, "run-20261201T121212-0000000e")


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
    sidecar(clean, "run-20261201T101010-0000000a", base, base_lock, ledger)
    attached = lm_eval_output(tmp_path / "attached")
    sidecar(attached, "attach-20261201T101010-0000000b", base, base_lock, ledger, schema="execsys.attach/1",
            attached_after=True, drifted=True)
    drifted = lm_eval_output(tmp_path / "drifted")
    sidecar(drifted, "run-20261201T101010-0000000d", base, base_lock, ledger, drifted=True)
    a, b, d = (load_result(str(p), ledger) for p in (clean, attached, drifted))
    assert b.caveats == ["identity recorded after the run for {side} (attached): descriptive only"]
    unprobed = f"different sessions and restart was never probed under identity {base[:12]}"
    undeclared = "no intervention declared (give --intervention COMPONENT); no component moved"
    assert compare(a, b, ledger, record=False).reasons == [
        "identity recorded after the run for B (attached): descriptive only", undeclared, unprobed]
    assert compare(d, a, ledger, record=False).reasons == [
        "run run-20261201T101010-0000000d for A drifted: its result is not attributable to one system", undeclared,
        unprobed]


def test_a_sidecar_is_checked_against_the_ledger_and_the_files_it_describes(tmp_path: Path, locks,
                                                                            ledger: Ledger) -> None:
    import blake3

    (base_lock, base), (_, runtime) = locks["base"], locks["runtime"]
    results = lm_eval_output(tmp_path / "out")
    samples = results.with_name(f"samples_tiny_qa_{LM_EVAL_STAMP}.jsonl")
    # a run nobody recorded: the sidecar names its identity, and nothing vouches for it
    sidecar(results, "run-20261201T121212-00000001", base, base_lock)
    got = load_result(str(results), ledger)
    assert (got.identity.id, got.run) == (base, "run-20261201T121212-00000001")
    assert got.caveats == [never_recorded("{side}", results, "run-20261201T121212-00000001")]
    # a recorded run: the ledger's record says what it ran under, whatever the sidecar says now
    body = sidecar(results, "run-20261201T121212-00000002", base, base_lock, ledger)
    forged = dict(body, identity={"id": runtime, "lock": None}, result=body["results"][0])
    results.with_name(results.name + ".execsys.json").write_text(json.dumps(forged))
    got = load_result(str(results), ledger)
    assert (got.identity.id, got.caveats) == (base, [])
    # the run recorded the samples file too: the outcomes come from it, so it is re-checked
    entry = {"path": str(samples), "blake3": blake3.blake3(samples.read_bytes()).hexdigest(), "harness": "lm-eval"}
    body = dict(body, id="run-20261201T121212-00000003", results=[body["results"][0], entry])
    ledger.append("run", body, identity=base, record_id=body["id"])
    results.with_name(results.name + ".execsys.json").write_text(json.dumps(dict(body, result=body["results"][0])))
    assert load_result(str(results), ledger).caveats == []
    samples.write_text(samples.read_text().replace('"exact_match": 0.0', '"exact_match": 1.0'))
    now = blake3.blake3(samples.read_bytes()).hexdigest()
    edited = load_result(str(results), ledger)
    assert edited.caveats == [f"{{side}}'s result {samples} changed after run-20261201T121212-00000003 recorded it "
                              f"(BLAKE3 {entry['blake3'][:16]} then, {now[:16]} now): it is not what the run produced"]
    assert set(edited.outcomes.values()) == {1.0}
    assert compare(edited, load_result(str(results), ledger), ledger, record=False).reasons[:2] == [
        edited.caveats[0].replace("{side}", "A"), edited.caveats[0].replace("{side}", "B")]
    # the results file edited and its sidecar rewritten to match: the ledger still has the digest of the run
    results.write_text(results.read_text().replace('"tiny_qa"', '"tiny_qa" '))
    fresh = blake3.blake3(results.read_bytes()).hexdigest()
    rewritten = dict(body, result=dict(body["results"][0], blake3=fresh))
    results.with_name(results.name + ".execsys.json").write_text(json.dumps(rewritten))
    assert load_result(str(results), ledger).caveats[0] == (
        f"the sidecar of {{side}}'s result {results} does not match what run-20261201T121212-00000003 recorded in "
        "the ledger")
    # a sidecar without a digest cannot be re-checked, and says so
    del rewritten["result"]["blake3"]
    results.with_name(results.name + ".execsys.json").write_text(json.dumps(dict(rewritten, id="run-x")))
    assert load_result(str(results), ledger).caveats[:2] == [
        never_recorded("{side}", results, "run-x"),
        f"run-x recorded no BLAKE3 for {{side}}'s result {results}: it cannot be re-checked"]


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
    import blake3

    from execsys.ledger import new_id

    record_id = new_id(kind)
    body = {"schema": f"execsys.{kind}/1", "id": record_id, "drifted": False,
            "identity": {"id": identity, "lock": str(lock) if lock else None} if identity else None,
            "results": [{"path": str(path), "harness": harness, "blake3": blake3.blake3(path.read_bytes()).hexdigest()}
                        for path, harness in results], **extra}
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


def test_a_plan_arm_names_its_own_identity_or_why_it_has_none(locks, ledger: Ledger, no_default_ledger) -> None:
    (base_lock, base), (runtime_lock, runtime) = locks["base"], locks["runtime"]
    known(ledger, base_lock)
    components = known(ledger, runtime_lock)
    outcomes = {f"q{i}": {"A": {"correct": OUT_A[f"q{i}"]}, "B": {"correct": OUT_B[f"q{i}"]}} for i in range(3)}
    own = {"identity": runtime}
    # (arm A as the run recorded it, the identity it compares by, why that is not its own)
    for arm, ident, unobserved in (
            ({"identity": runtime}, runtime, None),
            ({"identity": {"id": runtime, "lock": None}}, runtime, None),
            (None, base, "{run} records one identity for both arms"),
            ({"identity": None}, base, "{run} observed no identity for arm A"),
            ({"identity": 5}, base, "{run} observed no identity for arm A"),
            ({"identity": ""}, base, "{run} observed no identity for arm A"),
            ({"identity": None, "identity_reason": "the server reported no version"}, base,
             "the server reported no version"),
            ({"identity": None, "identity_reason": ""}, base, "{run} observed no identity for arm A"),
            ({"identity": None, "identity_reason": 5}, base, "{run} observed no identity for arm A")):
        run = ledger.append("plan-run", {"arms": {"A": arm, "B": own}, "outcomes": outcomes}, identity=base)
        got = load_result(f"{run}:A", ledger)
        assert (got.identity.id, got.unobserved) == (
            ident, unobserved.format(run=run) if unobserved else None), arm
        if ident == runtime:
            assert got.identity.components == components, arm
        assert len(got.outcomes) == 3 and got.host is None, arm


def test_what_a_sidecar_claims_is_quoted_and_checked_as_it_is(tmp_path: Path, locks, ledger: Ledger) -> None:
    (base_lock, base) = locks["base"]
    results = lm_eval_output(tmp_path / "out")
    body = sidecar(results, "run-20261201T121212-00000001", base, base_lock)
    beside = results.with_name(results.name + ".execsys.json")
    ledger.append("doctor", {}, record_id="run-20261201T121212-0000dead")  # a run id the ledger gave no run
    long_id = "run-" + "x" * 200

    def caveats(**claims) -> list[str]:
        beside.write_text(json.dumps({**body, "result": body["results"][0], **claims}))
        got = load_result(str(results), ledger)
        assert got.identity.id == base, claims
        return got.caveats

    no_digest = f"run-20261201T121212-00000001 recorded no BLAKE3 for {{side}}'s result {results}: it cannot be re-checked"
    # (what the sidecar claims, what the comparison says of it)
    for claims, said in (
            ({"id": "run-1  spaced\nout"}, [never_recorded("{side}", results, "run-1 spaced out")]),
            ({"id": long_id}, [never_recorded("{side}", results, long_id[:120])]),
            ({"id": 5}, [never_recorded("{side}", results, "5")]),
            ({"id": "run-20261201T121212-0000dead"}, [never_recorded("{side}", results, "run-20261201T121212-0000dead")]),
            ({"result": "oops"}, [never_recorded("{side}", results, "run-20261201T121212-00000001"), no_digest]),
            ({"result": {**body["results"][0], "blake3": ""}},
             [never_recorded("{side}", results, "run-20261201T121212-00000001"), no_digest]),
            ({"result": {**body["results"][0], "blake3": 5}},
             [never_recorded("{side}", results, "run-20261201T121212-00000001"), no_digest])):
        assert caveats(**claims) == said, claims


def test_a_result_moved_since_its_run_is_found_by_its_name_and_digest(tmp_path: Path, locks, ledger: Ledger) -> None:
    import blake3

    (base_lock, base) = locks["base"]
    results = lm_eval_output(tmp_path / "now")
    digest = blake3.blake3(results.read_bytes()).hexdigest()
    # the run recorded it elsewhere, beside another result of the same name
    there = {"path": str(tmp_path / "then" / results.name), "blake3": digest, "harness": "lm-eval"}
    other = {"path": str(tmp_path / "other" / results.name), "blake3": "f" * 64, "harness": "lm-eval"}
    for n, (entries, said) in enumerate((
            ([other, there], []), ([there, other], []), ([there], []),
            ([other], [f"the sidecar of {{side}}'s result {results} does not match what {{run}} recorded in the ledger"]))):
        run_id = f"run-20261201T121212-0000007{n}"
        body = {"schema": "execsys.run/1", "id": run_id, "drifted": False,
                "identity": {"id": base, "lock": str(base_lock)}, "results": entries}
        ledger.append("run", body, identity=base, record_id=run_id)
        results.with_name(results.name + ".execsys.json").write_text(json.dumps(dict(body, result=there)))
        got = load_result(str(results), ledger)
        assert (got.run, got.caveats) == (run_id, [c.replace("{run}", run_id) for c in said]), entries


def test_a_run_tells_its_results_of_one_name_apart_by_their_paths(tmp_path: Path, locks, ledger: Ledger) -> None:
    base = locks["base"][1]
    first, second = lm_eval_output(tmp_path / "a"), lm_eval_output(tmp_path / "b")
    assert first.name == second.name
    run = run_record(ledger, "run", [(first, "lm-eval"), (second, "lm-eval")], base)
    second.write_text(second.read_text().replace('"tiny_qa"', '"tiny_qa" '))
    assert load_result(f"{run}:{first}", ledger).caveats == []
    changed = load_result(f"{run}:{second}", ledger).caveats
    assert len(changed) == 1 and changed[0].startswith(f"{{side}}'s result {second} changed after {run} recorded it")


def test_a_run_names_its_result_by_the_name_of_the_path_it_recorded(tmp_path: Path, locks, ledger: Ledger) -> None:
    base = locks["base"][1]
    results = lm_eval_output(tmp_path / "out")
    run = run_record(ledger, "run", [(results, "lm-eval")], base)
    body = ledger.get(run).body
    slashed = dict(body, id="run-20261201T121212-0000000f", results=[dict(body["results"][0], path=f"{results}/")])
    ledger.append("run", slashed, identity=base, record_id=slashed["id"])
    got = load_result(f"{slashed['id']}:{results.name}", ledger)
    assert (got.ref, got.run, got.caveats, got.outcomes) == (f"{slashed['id']}:{results.name}", slashed["id"], [], TINY_QA)


def test_a_plain_result_file_is_checked_against_its_run(tmp_path: Path, locks, ledger: Ledger) -> None:
    (base_lock, base) = locks["base"]
    plain = write_result(tmp_path / "plain.json", base_lock, OUT_A, session="s9")
    run = run_record(ledger, "run", [(plain, "other")], base)
    assert load_result(run, ledger).caveats == []
    # through its sidecar: a run nobody recorded, then the recorded one
    body = sidecar(plain, "run-20261201T121212-00000011", base, base_lock)
    got = load_result(str(plain), ledger)
    assert (got.run, got.session, got.caveats) == (
        "run-20261201T121212-00000011", "s9", [never_recorded("{side}", plain, "run-20261201T121212-00000011")])
    ledger.append("run", body, identity=base, record_id=body["id"])
    got = load_result(str(plain), ledger)
    assert (got.run, got.caveats) == ("run-20261201T121212-00000011", [])
    # edited since: named by its run or through its sidecar, it is not what the run produced
    plain.write_text(plain.read_text() + "\n")
    for ref, run_id in ((run, run), (str(plain), "run-20261201T121212-00000011")):
        changed = load_result(ref, ledger).caveats
        assert len(changed) == 1 and changed[0].startswith(f"{{side}}'s result {plain} changed after {run_id} recorded it"), ref
