"""The one agreement fold: each case's result on every pass -> m, n, interval, flipped, errored, divergences.

A probe's figure is "m of n cases agreed", and every face states it: the runner while cases
arrive (a running tally per pass) and in the final record, ``probe merge`` over records taken on
separate hosts, and the TUI as it draws. They must never disagree about what counts, so the rule
lives here once:

* a case that errored (or is missing, or has no output) on any pass is excluded from n and
  counted as errored;
* it agrees at the ``output`` level when every pass gave the same bytes (one digest), at the
  ``outcome`` level when every pass gave the same extracted outcome;
* the headline level (``compare``) decides whether it is flipped;
* the first divergence is located against pass 0, on the first pass whose output differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from execsys.stats import rate_with_ci, wilson

from .record import CaseResult


@dataclass(frozen=True, slots=True)
class Slot:
    """One case's result on one pass, as the ledger keeps it."""

    digest: str | None
    outcome: str | None
    error: str | None

    @property
    def usable(self) -> bool:
        return self.error is None and self.digest is not None

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "outcome": self.outcome, "error": self.error}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one case says about agreement. ``agree`` is None when the case is excluded (errored)."""

    agree: bool | None
    output_agree: bool | None = None
    outcome_agree: bool | None = None
    distinct: int | None = None
    first_differing: int | None = None  # the first pass whose output differs from pass 0's

    @property
    def errored(self) -> bool:
        return self.agree is None


EXCLUDED = Verdict(None)


def judge(slots: Sequence[Slot | None], *, level: str = "output", outcomes: bool = False) -> Verdict:
    """The verdict of one case over ``slots`` (one per pass). ``outcomes``: an extractor ran, so the
    outcome level is known; ``level`` is the headline (``output`` or ``outcome``)."""
    if not slots or any(slot is None or not slot.usable for slot in slots):
        return EXCLUDED
    digests = [slot.digest for slot in slots if slot is not None]
    distinct = len(set(digests))
    output_agree = distinct == 1
    outcome_agree = len({slot.outcome for slot in slots if slot is not None}) == 1 if outcomes else None
    first = None if output_agree else next(i for i, d in enumerate(digests) if d != digests[0])
    headline = output_agree if level == "output" else bool(outcome_agree)
    return Verdict(headline, output_agree, outcome_agree, distinct, first)


@dataclass(frozen=True, slots=True)
class Tally:
    """A running agreement: m of n compared cases agreed; ``errored`` were excluded."""

    m: int = 0
    n: int = 0
    errored: int = 0

    @property
    def rate(self) -> float | None:
        return self.m / self.n if self.n else None

    def text(self) -> str:
        """``m/n = r (95% CI a–b)``, the one way a rate is written."""
        return rate_with_ci(self.m, self.n)


Divergence = Callable[[str, int], "dict[str, Any] | None"]
"""(case id, index of the pass that differs) -> the first-divergence dict, reading the texts."""


class AgreementFold:
    """Folds cases one at a time (memory: the flipped and errored ids only, or with ``keep_ids=False``,
    for a running tally over a pass of any size, just the counts)."""

    def __init__(self, *, level: str = "output", outcomes: bool = False, divergence: Divergence | None = None,
                 keep_ids: bool = True):
        self.level = level
        self.keep_ids = keep_ids
        self._errored = 0
        self.outcomes = outcomes
        self.divergence = divergence
        self.n = 0
        self.m_output = 0
        self.m_outcome = 0
        self.flipped: list[str] = []
        self.errored_cases: list[str] = []

    def add(self, case_id: str, slots: Sequence[Slot | None]) -> CaseResult:
        """Fold one case in; its :class:`~execsys.probes.record.CaseResult` for the record."""
        verdict = judge(slots, level=self.level, outcomes=self.outcomes)
        passes = [slot.to_json() if slot is not None else None for slot in slots]
        return self.add_verdict(case_id, verdict, passes)

    def add_verdict(self, case_id: str, verdict: Verdict, passes: list[Any] | None = None) -> CaseResult:
        if verdict.errored:
            self._errored += 1
            if self.keep_ids:
                self.errored_cases.append(case_id)
            return CaseResult(case_id, passes or [], None)
        self.n += 1
        self.m_output += bool(verdict.output_agree)
        self.m_outcome += bool(verdict.outcome_agree)
        if not verdict.agree and self.keep_ids:
            self.flipped.append(case_id)
        divergence = None
        if verdict.first_differing is not None and self.divergence is not None:
            divergence = self.divergence(case_id, verdict.first_differing)
        return CaseResult(case_id, passes or [], verdict.agree, verdict.outcome_agree, verdict.distinct, divergence)

    @property
    def m(self) -> int:
        """Agreeing cases at the headline level."""
        return self.m_output if self.level == "output" else self.m_outcome

    @property
    def errored(self) -> int:
        return self._errored

    @property
    def holds(self) -> bool:
        return self.n > 0 and self.m == self.n

    def ci95(self) -> list[float] | None:
        ci = wilson(self.m, self.n)
        return list(ci) if ci else None

    def rate(self) -> float | None:
        return self.m / self.n if self.n else None

    def tally(self) -> Tally:
        return Tally(self.m, self.n, self.errored)

    def level_json(self, m: int) -> dict[str, Any]:
        ci = wilson(m, self.n)
        return {"m": m, "n": self.n, "rate": (m / self.n) if self.n else None, "ci95": list(ci) if ci else None}

    def compare_json(self, extract_spec: str | None) -> dict[str, Any]:
        """The record's ``compare`` object: both levels (outcome only with an extractor)."""
        compare: dict[str, Any] = {"level": self.level, "output": self.level_json(self.m_output), "outcome": None}
        if self.outcomes:
            compare["outcome"] = {**self.level_json(self.m_outcome), "extract": extract_spec}
        return compare


def sentence(axis: str, level: str, fold: AgreementFold | Tally, statement: str, *, nothing: str) -> str:
    """The record's one sentence: ``restart agreement 12/20 = 0.60 (95% CI 0.39–0.78) — <statement>``,
    with the errored cases said after it. ``nothing`` is what to say when no case completed."""
    head = f"{axis} agreement" if level == "output" else f"{axis} outcome agreement"
    text = f"{head}: {nothing}" if fold.n == 0 else f"{head} {rate_with_ci(fold.m, fold.n)} — {statement}"
    errored = fold.errored
    if errored:
        text += f" ({errored} errored case{'s' if errored != 1 else ''} excluded from n)"
    return text
