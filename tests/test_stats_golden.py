"""Golden values and properties for the arithmetic every verdict rests on (execsys.stats).

The literals are published or hand-computed, never produced by the function under test:
Wilson intervals from Newcombe (1998), "Two-sided confidence intervals for the single proportion",
Statistics in Medicine 17:857-872, Table I (method 3); exact McNemar p-values from the binomial
sums written out; the Agresti-Min paired interval from its formula evaluated by hand.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from execsys.stats import mcnemar_exact, paired_difference_ci, wilson


@pytest.mark.parametrize(("m", "n", "low", "high"), [
    (81, 263, 0.2553, 0.3662),   # Newcombe Table I, example (a)
    (15, 148, 0.0624, 0.1605),   # example (b)
    (0, 20, 0.0, 0.1611),        # example (c)
    (1, 29, 0.0061, 0.1718),     # example (d)
])
def test_wilson_matches_newcombe_table_one(m: int, n: int, low: float, high: float) -> None:
    got = wilson(m, n)
    assert got is not None
    assert round(got[0], 4) == low
    assert round(got[1], 4) == high


def test_wilson_is_exact_at_the_ends_and_undefined_at_zero_n() -> None:
    assert wilson(0, 20) is not None and wilson(0, 20)[0] == 0.0  # type: ignore[index]
    assert wilson(20, 20) is not None and wilson(20, 20)[1] == 1.0  # type: ignore[index]
    assert wilson(0, 0) is None


@pytest.mark.parametrize(("b", "c", "p"), [
    (1, 9, 22 / 1024),       # 2 * (C(10,0) + C(10,1)) / 2^10
    (0, 5, 2 / 32),          # 2 * C(5,0) / 2^5
    (9, 1, 22 / 1024),       # symmetric in b and c
    (3, 3, 1.0),             # 2 * 42/64 > 1: capped
    (0, 0, 1.0),             # no discordant pairs: no evidence either way
    (2, 8, 2 * (1 + 10 + 45) / 1024),
])
def test_mcnemar_exact_matches_the_binomial_sums(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, abs=1e-15)


def test_agresti_min_paired_interval_by_hand() -> None:
    # b=5, c=1, n=20: cells +1/2 -> b'=5.5, c'=1.5, n'=22; d = 4/22; var = (7 - 16/22) / 22^2
    got = paired_difference_ci(5, 1, 20)
    assert got is not None
    d = 4 / 22
    half = 1.959963984540054 * math.sqrt((7 - 16 / 22) / 22**2)
    assert got == pytest.approx((d - half, d + half), abs=1e-12)
    assert round(got[0], 4) == -0.0413 and round(got[1], 4) == 0.4049
    # the interval has the sign of A - B: A better gives a positive centre, B better a negative one
    assert paired_difference_ci(1, 5, 20) == pytest.approx((-got[1], -got[0]), abs=1e-12)


@given(st.integers(min_value=1, max_value=5000).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))))
def test_wilson_bounds_contain_the_rate(mn: tuple[int, int]) -> None:
    m, n = mn
    interval = wilson(m, n)
    assert interval is not None
    low, high = interval
    assert 0.0 <= low <= m / n <= high <= 1.0
    assert (low == 0.0) == (m == 0)
    assert (high == 1.0) == (m == n)


@given(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=400))
def test_mcnemar_is_a_probability_and_symmetric(b: int, c: int) -> None:
    p = mcnemar_exact(b, c)
    assert 0.0 < p <= 1.0
    assert p == mcnemar_exact(c, b)
    if b == c:
        assert p == 1.0


@given(st.integers(min_value=1, max_value=500).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.integers(min_value=0, max_value=n), st.just(n))
).filter(lambda t: t[0] + t[1] <= t[2]))
def test_paired_interval_is_inside_minus_one_one_and_flips_with_the_arms(bcn: tuple[int, int, int]) -> None:
    b, c, n = bcn
    interval = paired_difference_ci(b, c, n)
    assert interval is not None
    low, high = interval
    assert -1.0 <= low <= high <= 1.0
    mirrored = paired_difference_ci(c, b, n)
    assert mirrored is not None
    assert mirrored == pytest.approx((-high, -low), abs=1e-12)
