"""The arithmetic every agreement rate and paired comparison rests on, against hand computations."""

from __future__ import annotations

import math

from execsys.stats import mcnemar_exact, paired_difference_ci, wilson


def test_wilson_matches_the_worked_example() -> None:
    low, high = wilson(12, 20)
    assert math.isclose(low, 0.3866, abs_tol=5e-5) and math.isclose(high, 0.7812, abs_tol=5e-5)


def test_wilson_bounds_are_exact_at_the_edges() -> None:
    # A perfect 10/10 must print "1.00", not 0.9999999999999999, in every record and sentence.
    assert wilson(10, 10)[1] == 1.0
    assert wilson(0, 10)[0] == 0.0
    assert wilson(0, 0) is None
    low, high = wilson(10, 10)
    assert math.isclose(low, 0.7225, abs_tol=5e-5)


def test_exact_mcnemar_by_hand() -> None:
    # b=7, c=1: 2 * P[X <= 1], X ~ Bin(8, 1/2) = 2 * (1 + 8) / 256 = 18/256
    assert mcnemar_exact(7, 1) == 18 / 256
    assert mcnemar_exact(1, 7) == 18 / 256
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0


def test_paired_difference_interval_contains_the_estimate() -> None:
    low, high = paired_difference_ci(7, 1, 20)
    assert low < (7 - 1) / 20 < high
    assert paired_difference_ci(0, 0, 0) is None
