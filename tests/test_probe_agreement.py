"""The agreement fold (probes/agreement.py) against hand counts: what the record and the sentence say.

The runner, `probe merge` and the TUI all fold through this module, so each assert is on a field of the
probe record or its sentence, with the figure counted by hand from the slots given.
"""

from __future__ import annotations

import pytest
from execsys.probes.agreement import AgreementFold, Slot, Tally, judge, sentence

A, B, C = Slot("d-a", "42", None), Slot("d-b", "42", None), Slot("d-c", "7", None)
FAILED = Slot(None, None, "HTTP 500")


def test_a_case_agrees_when_every_pass_gave_the_same_bytes() -> None:
    verdict = judge([A, A, A])
    assert (verdict.agree, verdict.output_agree, verdict.outcome_agree) == (True, True, None)
    assert (verdict.distinct, verdict.first_differing, verdict.errored) == (1, None, False)


def test_the_first_differing_pass_and_the_distinct_outputs_are_counted_against_pass_zero() -> None:
    verdict = judge([A, A, B, C, A])
    assert (verdict.agree, verdict.distinct, verdict.first_differing) == (False, 3, 2)
    assert judge([A, B]).first_differing == 1
    assert judge([B, A, A]).first_differing == 1  # pass 0 is the reference, not the majority


def test_a_case_is_excluded_when_any_pass_errored_had_no_output_or_did_not_run() -> None:
    for slots in ([A, FAILED], [FAILED, A], [A, None], [None, A], [A, Slot(None, "42", None)],
                  [Slot("d-a", "42", "timeout"), A], []):
        verdict = judge(slots)
        assert verdict.errored and verdict.agree is None, slots
    assert not judge([A]).errored


def test_the_outcome_level_compares_extracted_answers() -> None:
    # A and B: other bytes, the same answer; C: another answer
    assert judge([A, B], outcomes=True).outcome_agree is True
    assert judge([A, B], level="outcome", outcomes=True).agree is True
    assert judge([A, B], level="output", outcomes=True).agree is False
    assert judge([A, C], level="outcome", outcomes=True).agree is False
    assert judge([A, A, C], outcomes=True).outcome_agree is False
    assert judge([A, B]).outcome_agree is None  # no extractor ran: the outcome level is unknown


def fold_of(cases: dict[str, list[Slot | None]], **kwargs) -> tuple[AgreementFold, list[dict]]:
    fold = AgreementFold(**kwargs)
    return fold, [fold.add(case_id, slots).to_json() for case_id, slots in cases.items()]


CASES: dict[str, list[Slot | None]] = {
    "c1": [A, A], "c2": [A, B], "c3": [A, FAILED], "c4": [C, C], "c5": [B, C], "c6": [None, A], "c7": [B, B],
}


def test_the_record_of_a_fold_by_hand() -> None:
    # compared: c1 c2 c4 c5 c7 (n = 5); same bytes: c1 c4 c7 (m = 3); errored: c3 c6
    fold, cases = fold_of(CASES, divergence=lambda case_id, k: {"pass": k, "case": case_id})
    assert (fold.m, fold.n, fold.errored) == (3, 5, 2)
    assert fold.flipped == ["c2", "c5"] and fold.errored_cases == ["c3", "c6"]
    assert fold.rate() == pytest.approx(0.6) and not fold.holds
    assert fold.ci95() == pytest.approx([0.2307, 0.8824], abs=5e-5)  # Wilson 3/5, by hand
    assert cases[1] == {"id": "c2", "passes": [A.to_json(), B.to_json()], "agree": False, "outcome_agree": None,
                        "distinct": 2, "first_divergence": {"pass": 1, "case": "c2"}}
    assert cases[0]["first_divergence"] is None and cases[0]["distinct"] == 1 and cases[0]["agree"] is True
    assert cases[2] == {"id": "c3", "passes": [A.to_json(), {"digest": None, "outcome": None, "error": "HTTP 500"}],
                        "agree": None, "outcome_agree": None, "distinct": None, "first_divergence": None}
    assert cases[5]["passes"] == [None, A.to_json()]
    assert fold.compare_json(None) == {
        "level": "output", "output": {"m": 3, "n": 5, "rate": pytest.approx(0.6), "ci95": fold.ci95()},
        "outcome": None}


def test_the_outcome_headline_counts_answers_and_keeps_both_levels() -> None:
    # outcomes: c1 42/42, c2 42/42, c4 7/7, c5 42/7, c7 42/42 -> 4 of 5 at the outcome level, 3 of 5 by bytes
    fold, cases = fold_of(CASES, level="outcome", outcomes=True)
    assert (fold.m, fold.n, fold.m_output, fold.m_outcome) == (4, 5, 3, 4)
    assert fold.flipped == ["c5"]
    assert cases[1]["agree"] is True and cases[1]["outcome_agree"] is True
    compare = fold.compare_json(r"regex:(\d+)")
    assert compare["level"] == "outcome"
    assert (compare["output"]["m"], compare["output"]["n"]) == (3, 5)
    assert compare["outcome"] == {"m": 4, "n": 5, "rate": pytest.approx(0.8), "ci95": pytest.approx(
        [0.3755, 0.9638], abs=5e-5), "extract": r"regex:(\d+)"}
    assert fold.tally() == Tally(4, 5, 2)
    assert sentence("session", "outcome", fold, "stable", nothing="-") == (
        "session outcome agreement 4/5 = 0.80 (95% CI 0.38\u20130.96) \u2014 stable (2 errored cases excluded from n)")


def test_a_running_tally_keeps_counts_but_no_ids() -> None:
    fold, _ = fold_of(CASES, keep_ids=False)
    assert fold.tally() == Tally(3, 5, 2)
    assert fold.flipped == [] and fold.errored_cases == []
    assert fold.tally().text() == "3/5 = 0.60 (95% CI 0.23\u20130.88)"
    assert fold.tally().rate == pytest.approx(0.6)
    assert Tally().rate is None and Tally().text() == "0/0"


def test_every_case_agreeing_holds_and_nothing_compared_does_not() -> None:
    fold, _ = fold_of({"c1": [A, A], "c2": [C, C], "c3": [A, FAILED]})
    assert fold.holds and (fold.m, fold.n) == (2, 2)
    assert fold.compare_json(None)["output"]["ci95"] == pytest.approx([0.3424, 1.0], abs=5e-5)
    empty, _ = fold_of({"c1": [A, FAILED]})
    assert not empty.holds and empty.n == 0 and empty.errored == 1
    assert empty.rate() is None and empty.ci95() is None
    assert empty.level_json(0) == {"m": 0, "n": 0, "rate": None, "ci95": None}
    assert sentence("restart", "output", empty, "x", nothing="no case completed on every pass") == (
        "restart agreement: no case completed on every pass (1 errored case excluded from n)")


def test_a_divergence_is_located_only_for_a_case_whose_output_differs() -> None:
    asked: list[tuple[str, int]] = []
    fold = AgreementFold(level="outcome", outcomes=True,
                         divergence=lambda case_id, k: asked.append((case_id, k)) or {"pass": k})
    same_answer = fold.add("c2", [A, A, B])  # agrees at the outcome level, yet its bytes moved on pass 2
    assert same_answer.agree is True and same_answer.first_divergence == {"pass": 2}
    assert fold.add("c1", [A, A]).first_divergence is None
    assert asked == [("c2", 2)]


def test_the_sentence_states_the_rate_then_the_statement() -> None:
    fold, _ = fold_of({"c1": [A, A], "c2": [A, B], "c3": [C, C]})
    assert sentence("restart", "output", fold, "unstable across restarts", nothing="-") == (
        "restart agreement 2/3 = 0.67 (95% CI 0.21\u20130.94) \u2014 unstable across restarts")
    assert sentence("hosts", "output", fold.tally(), "same everywhere", nothing="-").startswith(
        "hosts agreement 2/3 = 0.67")
