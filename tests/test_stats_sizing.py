"""The sizing arithmetic (`probe size`, `--until-width`) and the printed rate, pinned by values a user sees.

The widths are recomputed here from the Wilson formula written out independently, and n is found by a
linear scan, so a wrong doubling or bisection step in `cases_for_width` gives another n than the scan
does.
"""

from __future__ import annotations

import json
import math

import pytest

from execsys.stats import cases_for_width, rate_with_ci, wilson, wilson_rate, wilson_width

Z = 1.959963984540054


def width_by_hand(p: float, n: int, z: float = Z) -> float:
    """The Wilson interval around rate p at n trials, clipped to [0, 1], as its width."""
    a = 1 + z**2 / n
    mid = (p + z**2 / (2 * n)) / a
    half = z / a * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return min(1.0, mid + half) - max(0.0, mid - half)


def smallest_n_by_scan(expect: float, width: float, z: float = Z) -> int:
    n = 1
    while width_by_hand(expect, n, z) > width:
        n += 1
    return n


def test_a_rate_of_zero_has_a_lower_bound_of_exactly_zero_at_every_n() -> None:
    # At n = 3 (and 356 other n below 2000) the formula gives 5.6e-17, not 0: the record would say so
    for n in range(1, 60):
        interval = wilson(0, n)
        assert interval is not None and interval[0] == 0.0, n
        full = wilson(n, n)
        assert full is not None and full[1] == 1.0, n


@pytest.mark.parametrize(("expect", "width", "n"), [
    (0.95, 0.10, 83),    # docs/concepts/licences.md's `probe size --expect 0.95 --width 0.10`
    (0.5, 0.2, 93),
    (0.8, 0.15, 108),
    (1.0, 0.1, 35),      # `--until-width` starts from expect 1.0
    (1.0, 0.5, 4),
    (0.9, 0.05, 557),
    (0.99, 0.02, 454),
])
def test_probe_size_gives_the_smallest_n_whose_interval_is_narrow_enough(expect: float, width: float,
                                                                          n: int) -> None:
    assert smallest_n_by_scan(expect, width) == n  # the literal is the scan's, checked here
    got = cases_for_width(expect, width)
    # as `probe size` prints it and as its JSON carries it: a count, never 83.0
    assert f"{got} cases" == f"{n} cases"
    assert json.dumps({"n": got}) == json.dumps({"n": n})
    assert wilson_width(expect, n) <= width < wilson_width(expect, n - 1)


@pytest.mark.parametrize("n", [1, 2, 8, 12, 64, 100, 383])
def test_a_width_met_exactly_at_n_gives_n(n: int) -> None:
    """"At most W wide": an interval exactly W wide is narrow enough, at a doubling step (8, 64) and at a
    bisection midpoint (12) alike."""
    assert cases_for_width(0.5, wilson_width(0.5, n)) == n


def test_another_confidence_level_sizes_with_its_own_z() -> None:
    z99 = 2.5758293035489004
    assert cases_for_width(0.95, 0.10, z=z99) == smallest_n_by_scan(0.95, 0.10, z99) == 144
    assert wilson_width(0.6, 20, z99) == pytest.approx(width_by_hand(0.6, 20, z99), abs=1e-15)
    # one trial is narrow enough at 95% for this width, not at 99%
    assert width_by_hand(0.5, 1) < 0.9 < width_by_hand(0.5, 1, z99)
    assert cases_for_width(0.5, 0.9, z=z99) == smallest_n_by_scan(0.5, 0.9, z99) > 1


@pytest.mark.parametrize(("expect", "width"), [
    (0.5, 0.05), (0.7, 0.3), (0.3, 0.11), (0.99, 0.5), (0.6, 0.101), (0.95, 0.2), (1.0, 0.02),
])
def test_the_search_agrees_with_a_linear_scan(expect: float, width: float) -> None:
    assert cases_for_width(expect, width) == smallest_n_by_scan(expect, width)


def test_a_width_one_trial_already_meets_is_one_case() -> None:
    one = width_by_hand(0.5, 1)
    assert 0.8 < one < 0.9
    assert cases_for_width(0.5, 1.0) == 1
    assert cases_for_width(0.5, one) == 1
    assert cases_for_width(0.5, one - 1e-9) == 2


def test_an_unreachable_width_names_the_limit() -> None:
    with pytest.raises(ValueError, match="no n up to 1000 gives a width of 0.001"):
        cases_for_width(0.5, 0.001, limit=1000)
    assert cases_for_width(0.5, 0.1, limit=1000) == smallest_n_by_scan(0.5, 0.1)  # 381, inside the limit
    # "up to" includes the limit itself: 1024 is the last doubling step, and n is found below it
    assert cases_for_width(0.5, 0.0615, limit=1024) == smallest_n_by_scan(0.5, 0.0615) > 512


def test_the_interval_around_an_exact_rate_and_its_width() -> None:
    # Newcombe (1998) Table I example (a) again, from the rate rather than from m
    low, high = wilson_rate(81 / 263, 263)  # type: ignore[misc]
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    assert wilson_rate(0.5, 0) is None
    assert wilson_width(0.5, 0) == 1.0
    assert wilson_width(0.6, 20) == pytest.approx(width_by_hand(0.6, 20), abs=1e-15)
    assert wilson_width(0.6, 20) == pytest.approx(0.7812 - 0.3866, abs=1e-4)
    # bounds stay inside [0, 1] where the formula's rounding would step outside
    for p in (0.0, 1.0):
        for n in range(1, 60):
            low, high = wilson_rate(p, n)  # type: ignore[misc]
            assert 0.0 <= low < high <= 1.0


def test_the_rate_as_every_face_prints_it() -> None:
    assert rate_with_ci(12, 20) == "12/20 = 0.60 (95% CI 0.39\u20130.78)"
    assert rate_with_ci(20, 20, [0.84, 1.0]) == "20/20 = 1.00 (95% CI 0.84\u20131.00)"
    assert rate_with_ci(20, 20, ()) == "20/20 = 1.00 (95% CI 0.84\u20131.00)"  # no recorded interval: Wilson's
    # a recorded interval (a merged record's) is printed as recorded, not recomputed from m/n
    assert rate_with_ci(1, 3, [0.10, 0.50]) == "1/3 = 0.33 (95% CI 0.10\u20130.50)"
    assert rate_with_ci(1, 1) == "1/1 = 1.00 (95% CI 0.21\u20131.00)"
    assert rate_with_ci(0, 0) == "0/0"
    assert rate_with_ci(0, 0, [0.0, 1.0]) == "0/0"
