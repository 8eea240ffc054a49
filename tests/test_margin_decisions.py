"""The near-tie verdict at a flip's first divergent token, as tables: the margin at, just below and just
above ``--tie-margin``, the larger of the two passes' gaps, a lower bound never called a near-tie, and
the split summary's counts and sentence.

Logprobs are binary fractions (-1.0, -1.25, ...) so a gap equals the margin exactly: the row "at
the margin" tests ``<=``, not floating-point noise.
"""

from __future__ import annotations

import json

import pytest
from execsys.probes.margin import (
    DEFAULT_TIE_MARGIN,
    NEAR_TIE,
    NOT_NEAR_TIE,
    PassTokens,
    margin_at,
    nats,
    pack_logprobs,
    split_sentence,
    split_summary,
    unpack_logprobs,
)


def passes(gap_a: float, gap_b: float, *, base: float = -1.0) -> tuple[PassTokens, PassTokens]:
    """Pass A chose x over y by ``gap_a`` nats, pass B chose y over x by ``gap_b``; both see both."""
    a = PassTokens(["x"], [[["x", base], ["y", base - gap_a]]])
    b = PassTokens(["y"], [[["y", base], ["x", base - gap_b]]])
    return a, b


@pytest.mark.parametrize(("gap_a", "gap_b", "tie_margin", "verdict", "margin"), [
    pytest.param(0.25, 0.25, 0.25, NEAR_TIE, 0.25, id="at-the-margin-is-a-near-tie"),
    pytest.param(0.25, 0.25, 0.2499, NOT_NEAR_TIE, 0.25, id="just-above-the-margin-is-not"),
    pytest.param(0.25, 0.25, 0.2501, NEAR_TIE, 0.25, id="just-below-the-margin-is"),
    pytest.param(0.0, 0.0, 0.0, NEAR_TIE, 0.0, id="an-exact-tie-at-margin-0"),
    pytest.param(0.0625, 0.5, 0.25, NOT_NEAR_TIE, 0.5, id="the-larger-gap-decides-b"),
    pytest.param(0.5, 0.0625, 0.25, NOT_NEAR_TIE, 0.5, id="the-larger-gap-decides-a"),
    pytest.param(0.125, 0.25, 0.25, NEAR_TIE, 0.25, id="both-within"),
])
def test_near_tie_at_the_boundary(gap_a, gap_b, tie_margin, verdict, margin) -> None:
    a, b = passes(gap_a, gap_b)
    got = margin_at(a, b, 0, tie_margin=tie_margin)
    assert got is not None
    assert (got["verdict"], got["margin"], got["bound"], got["tie_margin"]) == (verdict, margin, "exact", tie_margin)
    assert (got["margin_a"], got["margin_b"]) == (gap_a, gap_b)
    assert (got["token"], got["token_a"], got["token_b"]) == (0, "x", "y")


@pytest.mark.parametrize(("other_logprob", "verdict"), [
    pytest.param(-0.1, NEAR_TIE, id="default-margin-0.1-at"),
    pytest.param(-0.125, NOT_NEAR_TIE, id="default-margin-0.1-above"),
    pytest.param(-0.0625, NEAR_TIE, id="default-margin-0.1-below"),
])
def test_the_default_tie_margin_is_0_1_nats(other_logprob, verdict) -> None:
    assert DEFAULT_TIE_MARGIN == 0.1
    a = PassTokens(["x"], [[["x", 0.0], ["y", other_logprob]]])
    b = PassTokens(["y"], [[["y", 0.0], ["x", other_logprob]]])
    assert margin_at(a, b, 0)["verdict"] == verdict


def test_a_token_outside_the_top_k_is_a_lower_bound_never_a_near_tie() -> None:
    a = PassTokens(["x"], [[["x", -1.0], ["z", -1.0625]]])  # y is not in A's top-K
    b = PassTokens(["y"], [[["y", -1.0], ["x", -1.0625]]])
    got = margin_at(a, b, 0, tie_margin=1.0)
    assert (got["margin_a"], got["margin_b"], got["bound"], got["verdict"]) == (0.0625, 0.0625, "at least", NOT_NEAR_TIE)


def test_the_chosen_logprob_wins_over_the_top_k_entry_and_a_gap_is_never_negative() -> None:
    a = PassTokens(["x"], [[["x", -1.0], ["y", -1.5]]], chosen=[-1.25])
    b = PassTokens(["y"], [[["y", -2.0], ["x", -1.0]]])  # y listed below x in B: clamped to 0
    got = margin_at(a, b, 0, tie_margin=0.25)
    assert (got["margin_a"], got["margin_b"], got["verdict"]) == (0.25, 0.0, NEAR_TIE)


def test_one_side_without_its_own_logprob_is_judged_by_the_other() -> None:
    a = PassTokens(["x"], [[["q", -1.0], ["y", -1.5]]])  # x is in neither A's top-K nor chosen
    b = PassTokens(["y"], [[["y", -1.0], ["x", -1.125]]])
    got = margin_at(a, b, 0, tie_margin=0.125)
    assert (got["margin_a"], got["margin_b"], got["margin"], got["bound"], got["verdict"]) == (
        None, 0.125, 0.125, "exact", NEAR_TIE)


@pytest.mark.parametrize(("a", "b", "index"), [
    pytest.param(PassTokens(["x"], [[["x", -1.0]]]), PassTokens(["y"], [[["y", -1.0]]]), None, id="no-divergence"),
    pytest.param(PassTokens(None, [[["x", -1.0]]]), PassTokens(["y"], [[["y", -1.0]]]), 0, id="no-tokens-a"),
    pytest.param(PassTokens(["x"], None), PassTokens(["y"], [[["y", -1.0]]]), 0, id="no-top-a"),
    pytest.param(PassTokens(["x"], [[["x", -1.0]]]), PassTokens(["y"], None), 0, id="no-top-b"),
    pytest.param(PassTokens(["x"], [[["x", -1.0]]]), PassTokens(["x", "y"], [[["x", -1.0]], [["y", -1.0]]]), 1,
                 id="a-is-a-prefix-of-b"),
    pytest.param(PassTokens(["x", "y"], [[["x", -1.0]]]), PassTokens(["x", "z"], [[["x", -1.0]], []]), 1,
                 id="top-shorter-than-tokens"),
    pytest.param(PassTokens(["x"], [[]]), PassTokens(["y"], [[]]), 0, id="no-logprob-either-side"),
])
def test_a_margin_that_cannot_be_told_is_none(a, b, index) -> None:
    assert margin_at(a, b, index) is None


def test_pack_and_unpack_round_trip_and_old_and_damaged_rows() -> None:
    packed = pack_logprobs(["x"], [-1.0], [[["x", -1.0], ["y", -1.25]]])
    got = unpack_logprobs({"logprobs": packed})
    assert (list(got.tokens), got.chosen, got.top) == (["x"], [-1.0], [[["x", -1.0], ["y", -1.25]]])
    kept = unpack_logprobs({"logprobs": packed, "tokens": ["kept"]})
    assert list(kept.tokens) == ["kept"]  # --tokens wins for the token list
    old = unpack_logprobs({"logprobs": {"tokens": json.dumps([["x"], [["x", "y"]]]), "chosen": [-1.0],
                                        "top": [[-1.0, -1.25]]}})
    assert (old.chosen, old.top) == ([-1.0], [[["x", -1.0], ["y", -1.25]]])
    damaged = unpack_logprobs({"logprobs": {"tokens": "<redacted>"}, "tokens": ["t"]})
    assert (damaged.tokens, damaged.top, damaged.chosen) == (["t"], None, None)
    assert unpack_logprobs({"tokens": ["t"]}) == PassTokens(["t"], None, None)


def _m(verdict: str, margin: float, bound: str = "exact") -> dict:
    return {"verdict": verdict, "margin": margin, "bound": bound}


@pytest.mark.parametrize(("flips", "counts", "median", "sentence"), [
    pytest.param([], (0, 0, 0, 0), None, None, id="no-flips-no-sentence"),
    pytest.param([("c1", None)], (1, 0, 0, 1), None, None, id="only-unknown-no-sentence"),
    pytest.param([("c1", _m(NEAR_TIE, 0.003))], (1, 1, 0, 0), 0.003,
                 "1 flip: 1 at near-tie (median margin 0.003)", id="one-near-tie-singular"),
    pytest.param([("c1", _m(NEAR_TIE, 0.001)), ("c2", _m(NEAR_TIE, 0.003)), ("c3", _m(NEAR_TIE, 0.005))],
                 (3, 3, 0, 0), 0.003, "3 flips: 3 at near-ties (median margin 0.003)", id="median-of-three"),
    pytest.param([("c1", _m(NEAR_TIE, 0.002)), ("c14", _m(NOT_NEAR_TIE, 3.9)), ("c2", None)], (3, 1, 1, 1), 0.002,
                 "3 flips: 1 at near-tie (median margin 0.002), 1 not a near-tie (c14, 3.9 nats), "
                 "1 without logprobs at the divergence", id="mixed"),
    pytest.param([("c9", _m(NOT_NEAR_TIE, 0.05, "at least"))], (1, 0, 1, 0), None,
                 "1 flip: 1 not a near-tie (c9, ≥0.05 nats)", id="lower-bound-marked"),
    pytest.param([(f"c{i}", _m(NOT_NEAR_TIE, 1.0)) for i in range(4)], (4, 0, 4, 0), None,
                 "4 flips: 4 not a near-tie (c0, 1 nats; c1, 1 nats; c2, 1 nats; 1 more)", id="three-named-then-more"),
    pytest.param([(f"c{i}", _m(NOT_NEAR_TIE, 1.0)) for i in range(3)], (3, 0, 3, 0), None,
                 "3 flips: 3 not a near-tie (c0, 1 nats; c1, 1 nats; c2, 1 nats)", id="exactly-three-named"),
])
def test_split_summary_and_sentence(flips, counts, median, sentence) -> None:
    summary = split_summary(flips)
    assert (summary["flips"], summary["near_ties"], summary["not_near_ties"], summary["unknown"]) == counts
    assert summary["median_near_tie_margin"] == median
    assert split_sentence(summary) == sentence


@pytest.mark.parametrize(("value", "text"), [(0.003, "0.003"), (0.0015, "0.0015"), (3.94, "3.9"), (0.12345, "0.12")])
def test_nats_two_significant_digits(value, text) -> None:
    assert nats(value) == text


# -- the packed form, the read-back, and the edges of margin_at (rows written against mutation survivors) --

def test_pack_keeps_non_ascii_tokens_and_writes_compactly() -> None:
    packed = pack_logprobs(["é"], [-0.5], [[["é", -0.5], ["e", -2.0]]])
    assert packed == {"tokens": '[["é"],[["é","e"]]]', "values": "[[-0.5],[[-0.5,-2.0]]]"}


def test_unpack_without_packed_tokens_reads_the_numbers_alone() -> None:
    got = unpack_logprobs({"tokens": ["x"], "logprobs": {"values": "[[-0.5], []]"}})
    assert (got.tokens, got.top, got.chosen) == (["x"], [], [-0.5])


def test_unpack_pairs_what_it_can_when_lengths_differ() -> None:
    packed = {"tokens": json.dumps([["a", "b"], [["a", "b"], ["c"]]]), "values": json.dumps([[-0.5], [[-0.5]]])}
    got = unpack_logprobs({"logprobs": packed})
    assert (got.tokens, got.top, got.chosen) == (["a", "b"], [[["a", -0.5]]], [-0.5])


def test_a_token_listed_twice_counts_at_its_likeliest_and_is_a_lower_bound() -> None:
    a = PassTokens(["x"], [[["x", -1.0], ["y", -1.0625], ["y", -3.0]]])
    b = PassTokens(["y"], [[["y", -1.0], ["x", -1.0625]]])
    m = margin_at(a, b, 0, tie_margin=0.25)
    assert (m["margin_a"], m["bound"], m["verdict"]) == (0.0625, "at least", NOT_NEAR_TIE)
    b_twice = PassTokens(["y"], [[["y", -1.0], ["x", -1.0625], ["x", -4.0]]])
    a_once = PassTokens(["x"], [[["x", -1.0], ["y", -1.0625]]])
    m = margin_at(a_once, b_twice, 0, tie_margin=0.25)
    assert (m["margin_b"], m["bound"]) == (0.0625, "at least")


@pytest.mark.parametrize(("len_a", "len_b", "top_a", "top_b"), [
    pytest.param(1, 2, 2, 2, id="a-ended-at-the-index"), pytest.param(2, 1, 2, 2, id="b-ended-at-the-index"),
    pytest.param(2, 2, 1, 2, id="a-has-no-top-there"), pytest.param(2, 2, 2, 1, id="b-has-no-top-there"),
])
def test_an_index_past_either_side_has_no_margin(len_a, len_b, top_a, top_b) -> None:
    row = [["x", -1.0], ["y", -1.5]]
    a = PassTokens(["x"] * len_a, [row] * top_a)
    b = PassTokens(["y"] * len_b, [row] * top_b)
    assert margin_at(a, b, 1) is None


def test_a_chosen_list_shorter_than_the_index_falls_back_to_the_top_k() -> None:
    row_a, row_b = [["x", -1.0], ["y", -1.5]], [["y", -1.0], ["x", -1.25]]
    a = PassTokens(["x", "x"], [row_a, row_a], chosen=[-1.0])
    b = PassTokens(["y", "y"], [row_b, row_b], chosen=[-1.0])
    m = margin_at(a, b, 1)
    assert (m["margin_a"], m["margin_b"]) == (0.5, 0.25)


def test_each_side_s_own_chosen_logprob_is_used() -> None:
    a = PassTokens(["x"], [[["x", -1.0], ["y", -1.5]]], chosen=[-1.25])
    b = PassTokens(["y"], [[["y", -1.0], ["x", -1.5]]], chosen=[-1.125])
    m = margin_at(a, b, 0, tie_margin=1.0)
    assert (m["margin_a"], m["margin_b"], m["margin"]) == (0.25, 0.375, 0.375)
    assert m["top_a"] == [["x", -1.0], ["y", -1.5]] and m["top_b"] == [["y", -1.0], ["x", -1.5]]
    assert (m["token"], m["token_a"], m["token_b"], m["tie_margin"]) == (0, "x", "y", 1.0)


def test_a_lower_bound_on_b_alone_is_not_exact() -> None:
    a = PassTokens(["x"], [[["x", -1.0], ["y", -1.0625]]])
    b = PassTokens(["y"], [[["y", -1.0], ["z", -1.0625]]])  # x is not in B's top-K
    m = margin_at(a, b, 0, tie_margin=0.25)
    assert (m["bound"], m["verdict"]) == ("at least", NOT_NEAR_TIE)


@pytest.mark.parametrize(("divergence", "labels", "phrases"), [
    pytest.param({"sent": [{"pass": 1, "after_twin": True}]}, ["A", "B"], ["pass B sent after its twin"], id="after-twin"),
    pytest.param({"sent": [{"pass": 0, "in_flight_with": 3}]}, ["A", "B"], ["pass A in flight with 3 others"],
                 id="in-flight-plural"),
    pytest.param({"sent": [{"pass": 1, "in_flight_with": 1}]}, ["A", "B"], ["pass B in flight with 1 other"],
                 id="in-flight-one"),
    pytest.param({"sent": [{"pass": 1, "after_twin": True, "in_flight_with": 2}]}, ["A", "B"],
                 ["pass B sent after its twin", "pass B in flight with 2 others"], id="both"),
    pytest.param({"sent": [{"pass": 2, "after_twin": True}]}, ["A", "B"], ["pass 2 sent after its twin"],
                 id="no-label-the-number"),
    pytest.param({"sent": [{"pass": 1, "after_twin": True}]}, ["A", ""], ["pass 1 sent after its twin"],
                 id="empty-label-the-number"),
    pytest.param({"sent": [{"after_twin": True, "in_flight_with": 0}]}, ["A"], ["pass A sent after its twin"],
                 id="pass-defaults-to-0-and-none-in-flight"),
    pytest.param({"sent": None}, ["A"], [], id="nothing-sent"),
    pytest.param({}, ["A"], [], id="no-sent-field"),
])
def test_sent_phrases(divergence, labels, phrases) -> None:
    from execsys.probes.margin import sent_phrases

    assert sent_phrases(divergence, labels) == phrases
