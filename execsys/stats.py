"""Small, exact statistics for agreement rates and paired comparisons (standard library only)."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054
RANGE_DASH = "\u2013"  # the one dash between an interval's bounds, in every rendering


def wilson(m: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for m successes in n trials; None when n == 0."""
    if n <= 0:
        return None
    p = m / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At m == 0 or m == n the bound is exactly 0 or 1; floating point would give 0.9999999999999999.
    low = 0.0 if m == 0 else max(0.0, centre - half)
    high = 1.0 if m == n else min(1.0, centre + half)
    return (low, high)


def wilson_rate(p: float, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval around an exact observed rate ``p`` (not rounded to some m/n) over n trials."""
    if n <= 0:
        return None
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def wilson_width(p: float, n: int, z: float = Z95) -> float:
    """How wide the Wilson interval around rate ``p`` is at n trials."""
    bounds = wilson_rate(p, n, z)
    return 1.0 if bounds is None else bounds[1] - bounds[0]


def cases_for_width(expect: float, width: float, z: float = Z95, limit: int = 10**9) -> int:
    """The smallest n at which the 95% Wilson interval around an observed rate ``expect`` is at most
    ``width`` wide. The width falls as n grows, so a doubling search then bisection finds it."""
    if wilson_width(expect, 1, z) <= width:
        return 1
    high = 2
    while wilson_width(expect, high, z) > width:
        high *= 2
        if high > limit:
            raise ValueError(f"no n up to {limit} gives a width of {width}")
    low = high // 2  # too wide at low, narrow enough at high
    while high - low > 1:
        mid = (low + high) // 2
        if wilson_width(expect, mid, z) <= width:
            high = mid
        else:
            low = mid
    return high


def rate_with_ci(m: int, n: int, ci: Sequence[float] | None = None) -> str:
    """``12/20 = 0.60 (95% CI 0.39\u20130.78)``: an agreement rate as every face prints it.

    ``ci`` is the recorded interval when there is one (else the Wilson interval of m/n); with
    n == 0 there is no rate to state, only ``0/0``."""
    if n <= 0:
        return f"{m}/{n}"
    bounds = tuple(ci) if ci else wilson(m, n)
    assert bounds is not None
    return f"{m}/{n} = {m / n:.2f} (95% CI {bounds[0]:.2f}{RANGE_DASH}{bounds[1]:.2f})"


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value on discordant pairs b (A right, B wrong) and c (A wrong, B right).

    Under H0 each discordant pair is A-favouring with probability 1/2: p = min(1, 2 * P[X <= min(b, c)]),
    X ~ Binomial(b + c, 1/2). With no discordant pairs there is no evidence either way: p = 1.
    """
    k = b + c
    if k == 0:
        return 1.0
    tail = sum(math.comb(k, i) for i in range(min(b, c) + 1)) / 2**k
    return min(1.0, 2 * tail)


def paired_difference_ci(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """95% interval for the paired difference in success rates (A - B) = (b - c) / n.

    Uses the Wald interval for matched pairs with the Agresti-Min adjustment (add 1/2 to each cell),
    which keeps coverage reasonable for small n and zero cells.
    """
    if n <= 0:
        return None
    b_adj, c_adj, n_adj = b + 0.5, c + 0.5, n + 2.0
    diff = (b_adj - c_adj) / n_adj
    var = ((b_adj + c_adj) - (b_adj - c_adj) ** 2 / n_adj) / n_adj**2
    half = z * math.sqrt(max(var, 0.0))
    return (max(-1.0, diff - half), min(1.0, diff + half))


def binomial_quantile(q: float, n: int, p: float) -> int:
    """The smallest k with P[X <= k] >= q for X ~ Binomial(n, p): the ``q`` quantile of a count.

    Each probability comes from ``lgamma`` in log space, so n in the tens of thousands never
    overflows; the sum stops at the quantile (a few terms for the small rates noise floors have)."""
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    log_p, log_q = math.log(p), math.log1p(-p)

    def pmf(k: int) -> float:
        return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p
                        + (n - k) * log_q)

    total = 0.0
    for k in range(n + 1):
        total += pmf(k)
        if total >= q - 1e-12:  # summation error must not push an exact quantile one count higher
            return k
    return n


def beta_binomial_quantile(q: float, n: int, alpha: float, beta: float) -> int:
    """The smallest k with P[X <= k] >= q for X ~ BetaBinomial(n, alpha, beta): a count of n trials whose
    rate is itself uncertain, Beta(alpha, beta) -- what a rate measured on a finite sample predicts.

    Computed in log space (``lgamma``) like :func:`binomial_quantile`."""
    if n <= 0:
        return 0
    if not (alpha > 0 and beta > 0):
        raise ValueError("alpha and beta must be greater than 0")
    log_norm = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)

    def pmf(k: int) -> float:
        return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                        + math.lgamma(k + alpha) + math.lgamma(n - k + beta) - math.lgamma(n + alpha + beta)
                        - log_norm)

    total = 0.0
    for k in range(n + 1):
        total += pmf(k)
        if total >= q - 1e-12:
            return k
    return n
