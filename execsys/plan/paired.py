"""The paired difference of two arms over the same cases, with the exact McNemar test.

Each case gives a pair (arm A right?, arm B right?). Only the discordant pairs carry evidence of a
difference: ``b`` (A right, B wrong) and ``c`` (A wrong, B right). The arithmetic itself is in
:mod:`execsys.stats` (exact McNemar, Agresti-Min interval); this module folds pairs into it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from execsys.stats import mcnemar_exact, paired_difference_ci


@dataclass(frozen=True)
class PairedStats:
    n: int
    b: int  # first arm right, second wrong
    c: int  # first arm wrong, second right
    both_right: int
    both_wrong: int
    rate_a: float | None
    rate_b: float | None
    difference: float | None
    ci95: tuple[float, float] | None
    mcnemar_p: float

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "b": self.b, "c": self.c, "both_right": self.both_right, "both_wrong": self.both_wrong,
                "rate_a": self.rate_a, "rate_b": self.rate_b, "difference": self.difference,
                "ci95": list(self.ci95) if self.ci95 else None, "mcnemar_p": self.mcnemar_p}


def paired_stats(pairs: Sequence[tuple[bool, bool]]) -> PairedStats:
    """Paired difference (A - B) with the exact McNemar test on the discordant pairs."""
    n = len(pairs)
    b = sum(1 for a, bb in pairs if a and not bb)
    c = sum(1 for a, bb in pairs if bb and not a)
    both_right = sum(1 for a, bb in pairs if a and bb)
    both_wrong = n - b - c - both_right
    rate_a = (b + both_right) / n if n else None
    rate_b = (c + both_right) / n if n else None
    return PairedStats(n, b, c, both_right, both_wrong, rate_a, rate_b,
                       (b - c) / n if n else None, paired_difference_ci(b, c, n), mcnemar_exact(b, c))


def is_correct(outcome: str | None, expected: Any) -> bool:
    """An outcome scores against the case's expected answer (any of a list), whitespace aside."""
    if outcome is None or expected is None:
        return False
    if isinstance(expected, list):
        return any(is_correct(outcome, e) for e in expected)
    return outcome.strip() == str(expected).strip()
