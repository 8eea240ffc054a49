"""What `compare` says of two results, in-process: causal or descriptive, the reasons, the axes
crossed, the paired figures and interval, the sentence a user reads and the comparison record kept
in the ledger -- from real lock files, result files and ledger records. The figures are counted by
hand from the outcomes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from execsys.compare import Result, compare, crossed_axes, load_result
from execsys.errors import InputError, UsageError
from execsys.ledger import Ledger
from execsys.scope import IdentityRef
from tests.fixtures.compare_records import BASE, OUT_A, OUT_B, lm_eval_output, probe, write_lock, write_result


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
    assert more.reasons == ["you named runtime; what moved: runtime, hardware"]
    assert more.statement == (f"Descriptive only: A ({a.ref}) 0.750 over 12 cases, B ({b.ref}) 0.250 over 12 "
                              "cases. No causal claim: you named runtime; what moved: runtime, hardware.")
    assert compare(a, b, ledger, ["budget"], record=False).reasons == [
        "you named budget; what moved: runtime, hardware"]
    assert compare(a, b, ledger, record=False).reasons == [
        "no intervention declared (give --intervention COMPONENT); moved: runtime, hardware"]
    same = compare(a, a, ledger, record=False)
    assert same.reasons == ["no intervention declared (give --intervention COMPONENT); no component moved"]
    assert compare(a, a, ledger, ["runtime"], record=False).reasons == ["you named runtime; what moved: nothing"]
    assert compare(a, b, ledger, ["runtime", "hardware"], record=False).label == "causal"
    assert compare(a, b, ledger, ["hardware", "runtime"], record=False).label == "causal"  # a set, not a sequence
    # a bundle of which only a part moved is not what moved either
    runtime_only = load_result(str(write_result(tmp_path / "c.json", locks["runtime"][0], OUT_B)), ledger)
    assert compare(a, runtime_only, ledger, ["runtime", "hardware"], record=False).reasons == [
        "you named runtime, hardware; what moved: runtime"]
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


def test_machines_and_load_are_crossed_when_they_differ(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A, session=None, host="gpu1",
                                     concurrency=1)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["base"][0], OUT_B, session=None, host="gpu2",
                                     concurrency=8)), ledger)
    assert (a.host, b.concurrency) == ("gpu1", 8)
    assert compare(a, b, ledger, record=False).crossed == ["restart", "hosts", "concurrency"]


def test_machines_are_crossed_only_when_a_named_one_differs() -> None:
    from execsys.compare import crossed_axes
    from execsys.scope import IdentityRef

    def result(session: str | None, host: str | None) -> Result:
        return Result("r", IdentityRef("i"), {}, session=session, host=host)

    assert crossed_axes(result("s1", "gpu1"), result("s2", "gpu1")) == ["restart"]
    assert crossed_axes(result("s1", "gpu1"), result("s2", None)) == ["restart", "hosts"]
    assert crossed_axes(result("s1", None), result("s2", "gpu1")) == ["restart", "hosts"]
    assert crossed_axes(result("s1", None), result("s2", "")) == ["restart"]
    for named in ("gpu1", "XXXX", " "):  # whatever the one named machine is called, it is not the unnamed one
        assert crossed_axes(result("s1", None), result("s2", named)) == ["restart", "hosts"], named
        assert crossed_axes(result("s1", named), result("s2", None)) == ["restart", "hosts"], named
    assert crossed_axes(result("s1", "gpu1"), result("s1", "gpu2")) == []


ID = "a" * 64


def _arms(a_right: set[int], b_right: set[int], n: int = 20, **common) -> tuple[Result, Result]:
    ident = IdentityRef(ID)
    a = Result("A", ident, {f"c{i}": i in a_right for i in range(n)}, **common)
    b = Result("B", ident, {f"c{i}": i in b_right for i in range(n)}, **common)
    return a, b


def test_crossed_axes_name_what_separates_two_results() -> None:
    ident = IdentityRef(ID)

    def res(session, host=None, concurrency=None):
        return Result("r", ident, {}, session=session, host=host, concurrency=concurrency)

    assert crossed_axes(res("s1"), res("s1")) == []
    assert crossed_axes(res("s1"), res("s2")) == ["restart"]
    assert crossed_axes(res(None), res(None)) == ["restart"]  # no session named: not known to be one
    assert crossed_axes(res("s1", "gpu1"), res("s2", "gpu2")) == ["restart", "hosts"]
    assert crossed_axes(res("s1", "gpu1"), res("s1", "gpu2")) == []
    assert crossed_axes(res("s1", concurrency=1), res("s1", concurrency=16)) == ["concurrency"]
    assert crossed_axes(res("s1", concurrency=1), res("s1", concurrency=None)) == []


def test_the_arms_of_one_paired_run_are_a_paired_control(ledger: Ledger, locks) -> None:
    outcomes = {f"q{i}": {"A": {"correct": OUT_A[f"q{i}"]}, "B": {"correct": OUT_B[f"q{i}"]}} for i in range(12)}
    outcomes["q12"] = {"A": {"correct": True}, "B": {"error": "timeout"}}
    base = locks["base"][1]
    run = ledger.append("plan-run", {"arms": {"A": {"host": "gpu1", "identity": base},
                                              "B": {"host": "gpu2", "identity": base}}, "outcomes": outcomes,
                                     "checks": [{"name": "order", "passed": True}]}, identity=base)
    a, b = load_result(f"{run}:A", ledger), load_result(f"{run}:B", ledger)
    assert (len(a.outcomes), len(b.outcomes), a.host, b.host, a.paired_run) == (13, 12, "gpu1", "gpu2", run)
    assert (a.identity.id, a.unobserved) == (base, None)
    result = compare(a, b, ledger, record=False)
    assert result.paired_control and result.crossed == [] and result.label == "causal"
    assert result.moved == [] and result.reasons == []
    assert result.paired is not None and result.paired["only_in_a"] == 1
    assert result.statement.startswith("Causal, inside one contemporaneous paired run: switching from "
                                       f"{run}:A to {run}:B moved the rate by -0.500 ")
    assert compare(a, b, ledger, ["budget"], record=False).reasons == ["you named budget; what moved: nothing"]
    # one identity for both arms, as plan runs recorded before arms.<ARM>.identity: what moved is unknown
    one = ledger.append("plan-run", {"arms": {"A": {"host": "gpu1"}, "B": {"host": "gpu2"}}, "outcomes": outcomes,
                                     "checks": [{"name": "order", "passed": True}]}, identity=base)
    blind = compare(load_result(f"{one}:A", ledger), load_result(f"{one}:B", ledger), ledger, ["budget"],
                    record=False)
    assert (blind.label, blind.moved) == ("descriptive", None)
    assert blind.reasons == [f"the arms' identities were not observed ({one} records one identity for both arms): "
                             "what moved between them is unknown"]
    failed = ledger.append("plan-run", {"arms": {"A": {"identity": base}, "B": {"identity": base}},
                                        "outcomes": outcomes,
                                        "checks": [{"name": "window", "passed": False, "detail": "arms 3 h apart"}]})
    broken = compare(load_result(f"{failed}:A", ledger), load_result(f"{failed}:B", ledger), ledger, record=False)
    assert broken.label == "descriptive"
    assert broken.reasons == ["the paired run's check failed (window: arms 3 h apart)"]
    with pytest.raises(InputError, match=f"^{run}:C: name one arm of the paired run as {run}:ARM \\(arms: A, B\\)$"):
        load_result(f"{run}:C", ledger)


def test_a_paired_comparison_reports_the_interval_of_b_minus_a(tmp_path: Path) -> None:
    """A right and B wrong on 1 case, the reverse on 5, of 20: B - A = +0.20. The interval is the
    Agresti-Min interval of A - B (stats golden values), negated: it must lean the way the effect does."""
    both = set(range(11))
    a, b = _arms(both | {11}, both | {12, 13, 14, 15, 16}, paired_run="plan-run-1")
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        # no intervention named: the arms share one identity, so the claim is the switch from A to B
        result = compare(a, b, ledger, record=False)
    paired = result.paired
    assert paired is not None
    assert (paired["n"], paired["b"], paired["c"]) == (20, 1, 5)
    assert paired["rate_a"] == pytest.approx(12 / 20) and paired["rate_b"] == pytest.approx(16 / 20)
    assert paired["difference"] == pytest.approx(0.20)
    assert paired["ci95"] == pytest.approx([-0.041309582009998985, 0.40494594564636266], abs=1e-12)
    assert paired["mcnemar_p"] == pytest.approx(14 / 64)  # 2 * P[X <= 1], X ~ Bin(6, 1/2)
    assert result.label == "causal" and result.paired_control
    assert ("moved the rate by +0.200 (B - A, 95% CI -0.041 to +0.405; discordant 1 vs 5, "
            "exact McNemar p = 0.2188, n = 20 paired cases)") in result.statement
    assert "A (A) 0.600 over 20 cases, B (B) 0.800 over 20 cases" in result.statement


def test_a_paired_run_whose_arm_errored_on_every_case_shares_no_case(ledger: Ledger) -> None:
    outcomes = {f"q{i}": {"A": {"correct": True}, "B": {"error": "timeout"}} for i in range(3)}
    ident = "c" * 64
    run = ledger.append("plan-run", {"arms": {"A": {"identity": ident}, "B": {"identity": ident}},
                                     "outcomes": outcomes, "checks": []})
    result = compare(load_result(f"{run}:A", ledger), load_result(f"{run}:B", ledger), ledger, record=False)
    assert result.paired is not None and (result.paired["n"], result.paired["only_in_a"]) == (0, 3)
    assert result.statement == (
        "Causal, inside one contemporaneous paired run: the two arms differ only in what the paired run set them "
        f"apart by. A ({run}:A) and B ({run}:B): outcomes agree on 0/0 shared cases.")


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


def test_answers_rather_than_scores_are_compared_by_agreement(tmp_path: Path) -> None:
    ident = IdentityRef(ID)
    a = Result("A", ident, {"c1": "42", "c2": "7", "c3": "x", "only-a": "1"}, paired_run="r")
    b = Result("B", ident, {"c1": "42", "c2": "8", "c3": "x"}, paired_run="r")
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        result = compare(a, b, ledger, record=False)
    assert result.paired == {"kind": "agreement", "n": 3, "agree": 2, "agreement_rate": pytest.approx(2 / 3)}
    assert "outcomes agree on 2/3 shared cases" in result.statement


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


def test_lists_in_the_reasons_and_the_sentence_are_comma_separated(tmp_path: Path, locks, ledger: Ledger) -> None:
    three = tmp_path / "three.lock.json"
    write_lock(three, **{**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}, "hardware": {"host": "gpu2"},
                         "model": {"name": "m2"}})
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["both"][0], OUT_B)), ledger)
    c = load_result(str(write_result(tmp_path / "c.json", three, OUT_B)), ledger)
    assert compare(a, b, ledger, ["budget", "tools"], record=False).reasons == [
        "you named budget, tools; what moved: runtime, hardware"]
    assert compare(a, c, ledger, ["runtime"], record=False).reasons == [
        "you named runtime; what moved: model, runtime, hardware"]
    assert compare(a, a, ledger, ["runtime", "budget"], record=False).reasons == [
        "you named runtime, budget; what moved: nothing"]
    both = compare(a, b, ledger, ["runtime", "hardware"], record=False)
    assert both.statement.startswith("Causal, inside one session: changing runtime, hardware moved the rate by -0.500 ")
    descriptive = compare(a, c, ledger, ["budget"], record=False)
    assert descriptive.statement == (
        f"Descriptive only: A ({a.ref}) 0.750 over 12 cases, B ({c.ref}) 0.250 over 12 cases. No causal claim: you "
        "named budget; what moved: model, runtime, hardware.")
    assert compare(a, c, ledger, record=False).statement.endswith(
        "No causal claim: no intervention declared (give --intervention COMPONENT); moved: model, runtime, hardware.")


def test_every_reason_is_in_the_sentence_and_every_changed_component_in_the_effect(tmp_path: Path, locks,
                                                                                   ledger: Ledger) -> None:
    (base_lock, base), (both_lock, both) = locks["base"], locks["both"]
    a = load_result(str(write_result(tmp_path / "a.json", base_lock, {"c1": "42", "c2": "x"}, session="s1")), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", both_lock, {"c1": "42", "c2": "y"}, session="s2")), ledger)
    descriptive = compare(a, b, ledger, ["runtime"], record=False)
    assert descriptive.statement == (
        f"Descriptive only: A ({a.ref}) and B ({b.ref}): outcomes agree on 1/2 shared cases. No causal claim: you "
        f"named runtime; what moved: runtime, hardware; different sessions and restart was never probed under "
        f"identity {base[:12]}; different sessions and restart was never probed under identity {both[:12]}.")
    same_session = load_result(str(write_result(tmp_path / "c.json", both_lock, {"c1": "42", "c2": "y"})), ledger)
    a_first = load_result(str(write_result(tmp_path / "d.json", base_lock, {"c1": "42", "c2": "x"})), ledger)
    causal = compare(a_first, same_session, ledger, ["runtime", "hardware"], record=False)
    assert causal.statement.startswith(
        "Causal, inside one session: changing runtime, hardware is the only difference between the two runs. ")


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


def test_an_arm_whose_identity_was_not_observed_is_named_by_its_side() -> None:
    from execsys.compare import moved_between

    def arm(unobserved: str | None) -> Result:
        return Result("r", IdentityRef(ID), {"c1": True}, unobserved=unobserved)

    unknown = "what moved is unknown"
    assert moved_between(arm("p1 saw none"), arm(None)) == (
        None, {}, [f"arm A's identity was not observed (p1 saw none): {unknown}"])
    assert moved_between(arm(None), arm("p1 saw none")) == (
        None, {}, [f"arm B's identity was not observed (p1 saw none): {unknown}"])
    assert moved_between(arm("no version"), arm("no host")) == (
        None, {}, [f"arm A's identity was not observed (no version): {unknown}",
                   f"arm B's identity was not observed (no host): {unknown}"])
    assert moved_between(arm("p1 records one"), arm("p1 records one")) == (
        None, {}, ["the arms' identities were not observed (p1 records one): what moved between them is unknown"])


def test_what_moved_is_derived_only_when_both_identities_have_components(tmp_path: Path, locks,
                                                                          ledger: Ledger) -> None:
    from execsys.compare import moved_between
    from execsys.identity import load_identity_ref

    loaded = load_identity_ref(str(locks["base"][0]), ledger)
    with_components = Result("p", IdentityRef(loaded.id, dict(loaded.components), "p", loaded), {"c1": True})
    hollow = dataclasses.replace(loaded, components={})
    no_components = Result("h", IdentityRef("b" * 64, {}, "h", hollow), {"c1": True})
    bare = Result("u", IdentityRef("c" * 64), {"c1": True})
    for a, b, named in ((bare, with_components, "u"), (with_components, bare, "u"),
                        (no_components, with_components, "h"), (with_components, no_components, "h")):
        assert moved_between(a, b) == (
            None, {}, [f"the components that moved cannot be named: {named} has no pinned identity record"]), (a.ref, b.ref)
