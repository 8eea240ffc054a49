"""Tests written for mutants that survived scripts/mutation.sh: each pins an answer the core gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys.compare import Result, compare, crossed_axes
from execsys.ledger import Ledger
from execsys.scope import IdentityRef

ID = "a" * 64


def _arms(a_right: set[int], b_right: set[int], n: int = 20, **common) -> tuple[Result, Result]:
    ident = IdentityRef(ID)
    a = Result("A", ident, {f"c{i}": i in a_right for i in range(n)}, **common)
    b = Result("B", ident, {f"c{i}": i in b_right for i in range(n)}, **common)
    return a, b


def test_a_paired_comparison_reports_the_interval_of_b_minus_a(tmp_path: Path) -> None:
    """A right and B wrong on 1 case, the reverse on 5, of 20: B - A = +0.20. The interval is the
    Agresti-Min interval of A - B (stats golden values), negated: it must lean the way the effect does."""
    both = set(range(11))
    a, b = _arms(both | {11}, both | {12, 13, 14, 15, 16}, paired_run="plan-run-1")
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        result = compare(a, b, ledger, ["runtime"], record=False)
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


def test_answers_rather_than_scores_are_compared_by_agreement(tmp_path: Path) -> None:
    ident = IdentityRef(ID)
    a = Result("A", ident, {"c1": "42", "c2": "7", "c3": "x", "only-a": "1"}, paired_run="r")
    b = Result("B", ident, {"c1": "42", "c2": "8", "c3": "x"}, paired_run="r")
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        result = compare(a, b, ledger, record=False)
    assert result.paired == {"kind": "agreement", "n": 3, "agree": 2, "agreement_rate": pytest.approx(2 / 3)}
    assert "outcomes agree on 2/3 shared cases" in result.statement


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
