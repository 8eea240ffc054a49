"""Why did the score change? Two results, the evidence execsys holds about them, and one verdict.

"Same command, different score" is answered from what is already recorded, nothing re-run:

1. **what moved**: the components that differ between the two identities (:func:`execsys.compare.moved_between`,
   the ``diff`` rule), or why that cannot be said ("no identity recorded for A": the rest is descriptive);
2. **the flips**: the per-case outcomes paired by case id: right->wrong, wrong->right, the exact McNemar p
   and the paired difference B - A with its 95% interval (the plan's arithmetic, :mod:`execsys.stats`);
3. **the noise floor**: for each axis that separates A from B (two passes of one probe: that probe's axis;
   one session or one paired run: session; different sessions: restart; other host: hosts; other load:
   concurrency), the agreement :func:`execsys.scope.compute_scope` measured for both identities, and how
   many flips that agreement alone predicts over the paired cases (:func:`noise_floor`). An axis never
   probed, or licensed only "unverified", is unmeasured: never assumed quiet;
4. **the margins**: where both results are passes of probe records that kept logprobs, the margin at each
   flip's first divergent token (:func:`execsys.probes.margin.margin_at`); where both are lm-eval results
   of a loglikelihood task, the gap between the best two choices on each side: near-tie or decisive;
5. **the verdict**: ``within-measured-noise`` | ``attributable`` (exactly one component moved and the flips
   are beyond the noise: more than its interval, or lopsided) | ``not-attributable`` (beyond noise, but
   several components moved, or none that the identities record: with the smallest paired plans that
   separate them) | ``unmeasured`` (the
   noise floor is unknown: with the one probe that would measure it).

The noise arithmetic. An axis measured at agreement m/N predicts a disagreement rate d = 1 - m/N per case,
so over n paired cases ``expected_flips = n * d``. Its binomial interval (the 2.5% and 97.5% quantiles
of Binomial(n, d)) treats d as exact; the interval the verdict uses also carries the rate's own
uncertainty -- agreement 20/20 is not a disagreement rate of zero, only one below about 0.1 -- as the
predictive count: d ~ Beta(N - m + 1/2, m + 1/2) (Jeffreys), flips ~ BetaBinomial(n, d). Several axes
crossed at once compound (a case agrees only if it agrees across each): d = 1 - prod(agreement). Where the two identities differ, each axis takes
the lower of their two agreements: the noisier system sets the floor. The flips are beyond the noise
when there are more of them than the interval's upper end -- or when they go one way: two runs of one
system score alike on average, so noise flips right->wrong and wrong->right with equal odds, and an
exact McNemar p below 0.05 is a score change however few the flips.
"""

from __future__ import annotations

import math
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.errors import InputError, UsageError
from execsys.ledger import Ledger
from execsys.operation import Event, OnEvent, emit

if TYPE_CHECKING:
    from execsys.compare import Result
    from execsys.declaration import Declaration
    from execsys.identity import Identity
    from execsys.scope import ScopeReport

SCHEMA = "execsys.explain/1"

WITHIN = "within-measured-noise"
ATTRIBUTABLE = "attributable"
NOT_ATTRIBUTABLE = "not-attributable"
UNMEASURED = "unmeasured"
VERDICTS = (WITHIN, ATTRIBUTABLE, NOT_ATTRIBUTABLE, UNMEASURED)

LOPSIDED_P = 0.05  # below this exact McNemar p, the flips' split is not the even one noise makes

MEASURED = "measured"
UNVERIFIED = "unverified"  # licensed, but the restart/redeploy could not be confirmed: counts as unmeasured
NOT_PROBED = "unmeasured"


# ------------------------------------------------------------------ the arithmetic
@dataclass(frozen=True)
class NoiseFloor:
    """Flips the measured agreement alone predicts over ``cases`` paired cases, with 95% intervals."""

    agreement: float
    cases: int
    expected_flips: float
    interval: tuple[int, int]  # the predictive interval: the count's spread and the rate's uncertainty
    binomial_interval: tuple[int, int]  # the count's spread alone, as if the agreement were exact

    def exceeded_by(self, flips: int) -> bool:
        return flips > self.interval[1]


def noise_floor(measures: list[tuple[int, int]], cases: int) -> NoiseFloor:
    """The noise floor of ``cases`` paired cases under the axes measured as ``(m, N)`` agreements.

    ``d = 1 - prod(m/N)``, expected ``cases * d``. ``binomial_interval``: the 2.5% and 97.5% quantiles
    of Binomial(cases, d). ``interval`` (what the verdict uses): the same quantiles of the count the
    measurement predicts, each agreement's rate taken as uncertain -- Jeffreys posterior
    Beta(m + 1/2, N - m + 1/2) -- so the disagreement rate is Beta-distributed (exactly, for one axis;
    matched in mean and variance for a product of several) and the count BetaBinomial."""
    from execsys.stats import beta_binomial_quantile, binomial_quantile

    if not measures or any(n <= 0 or not 0 <= m <= n for m, n in measures):
        raise ValueError("each measure is m agreeing of N > 0")
    agreement = math.prod(m / n for m, n in measures)
    d = 1 - agreement
    # moments of the product of the agreements (independent Beta posteriors), then of d = 1 - product
    mean = math.prod((m + 0.5) / (n + 1) for m, n in measures)
    second = math.prod((m + 0.5) * (m + 1.5) / ((n + 1) * (n + 2)) for m, n in measures)
    mu, var = 1 - mean, max(second - mean * mean, 1e-300)
    common = mu * (1 - mu) / var - 1
    alpha, beta = mu * common, (1 - mu) * common
    interval = (beta_binomial_quantile(0.025, cases, alpha, beta), beta_binomial_quantile(0.975, cases, alpha, beta))
    binomial = (binomial_quantile(0.025, cases, d), binomial_quantile(0.975, cases, d))
    return NoiseFloor(agreement, cases, cases * d, interval, binomial)


def cases_to_exclude_zero(b: int, c: int, n: int, limit: int = 10**7) -> int | None:
    """The smallest number of paired cases at which the paired difference's 95% interval
    (:func:`execsys.stats.paired_difference_ci`) excludes 0, if the discordance rates stay b/n and c/n.
    None when the observed difference is zero: no number of cases separates it from nothing."""
    from execsys.stats import paired_difference_ci

    if n <= 0 or b == c:
        return None
    rate_b, rate_c = b / n, c / n

    def excludes(k: int) -> bool:
        ci = paired_difference_ci(rate_b * k, rate_c * k, k)  # type: ignore[arg-type]
        return ci is not None and (ci[0] > 0 or ci[1] < 0)

    high = 1
    while not excludes(high):
        high *= 2
        if high > limit:
            return None
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        if excludes(mid):
            high = mid
        else:
            low = mid
    return high


# ------------------------------------------------------------------ the operation
@dataclass(frozen=True)
class ExplainOptions:
    """The two results to explain (anything ``compare`` accepts), from which ledger; with ``rerun``, the two
    systems' endpoints to send the flipped cases and a sample of the agreeing ones to again."""

    a: str
    b: str
    ledger: str | Path | None = None  # None: $EXECSYS_LEDGER, else the user data directory
    tie_margin: float | None = None  # nats; None: the probe's default
    rerun: dict[str, str] | None = None  # {"A": URL, "B": URL}
    cases: str | None = None  # the cases the results were made from (default: the probe's or the plan's)
    sample: int | None = None  # agreeing cases to send again (default: as many as flipped, at least 10)
    seed: int = 0

    @classmethod
    def from_sources(cls, declaration: Declaration | None = None, lock: Identity | None = None, *,
                     a: str | None = None, b: str | None = None, ledger: str | Path | None = None,
                     tie_margin: float | None = None, rerun: dict[str, str] | None = None,
                     cases: str | None = None, sample: int | None = None, seed: int | None = None) -> ExplainOptions:
        """``a`` and ``b`` are required; ``rerun`` names exactly the arms A and B. The declaration and the
        lock hold no explain settings: the two results carry their own identities."""
        for name, value in (("A", a), ("B", b)):
            if value is None or not str(value).strip():
                raise UsageError(f"result {name} is empty: give a result file, a run id or RECORD:ARM")
        if tie_margin is not None and not tie_margin > 0:
            raise UsageError(f"--tie-margin must be greater than 0: {tie_margin}")
        if rerun is not None and set(rerun) != {"A", "B"}:
            raise UsageError("--rerun takes both systems: --rerun A=URL --rerun B=URL")
        if sample is not None and sample < 0:
            raise UsageError(f"--sample must be 0 or more: {sample}")
        if rerun is None and (cases is not None or sample is not None):
            raise UsageError("--cases and --sample are for --rerun")
        return cls(a=str(a), b=str(b), ledger=ledger, tie_margin=tie_margin, rerun=dict(rerun) if rerun else None,
                   cases=cases, sample=sample, seed=int(seed or 0))


@dataclass(frozen=True)
class ResultsLoaded(Event):
    a: str
    b: str
    cases_a: int
    cases_b: int


@dataclass(frozen=True)
class Explained(Event):
    verdict: str
    sentence: str


@dataclass
class ExplainReport:
    a: dict[str, Any]
    b: dict[str, Any]
    moved: list[str] | None
    moved_reason: str | None
    changes: dict[str, Any]
    flips: dict[str, Any]
    axes: list[str]
    noise: dict[str, dict[str, Any]]
    noise_total: dict[str, Any] | None
    margins: dict[str, Any] | None
    verdict: str
    sentence: str
    proposal: dict[str, Any] | None
    caveats: list[str] = field(default_factory=list)
    rerun: dict[str, Any] | None = None  # --rerun: the paired re-run of the flips and a sample

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == WITHIN else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "verdict": self.verdict, "sentence": self.sentence, "a": self.a, "b": self.b,
            "moved": self.moved, "moved_reason": self.moved_reason, "changes": self.changes, "flips": self.flips,
            "axes": self.axes, "noise": self.noise, "noise_total": self.noise_total, "margins": self.margins,
            "proposal": self.proposal, "caveats": self.caveats, "rerun": self.rerun,
        }


def report_lines(report: ExplainReport) -> list[tuple[str, str]]:
    """The report as the faces show it, one ``(kind, plain text)`` per line, in order: ``moved``, ``flips``,
    one ``noise`` per separating axis, ``margins``, each ``caveat``, the ``verdict`` (``VERDICT: sentence``),
    the ``rerun`` sentence, one ``plan`` per proposed paired plan. The CLI prints them and the TUI's Scope
    step draws them: one wording in one place."""
    lines: list[tuple[str, str]] = []
    moved = (", ".join(report.moved) or "nothing") if report.moved is not None else f"unknown ({report.moved_reason})"
    lines.append(("moved", f"moved: {moved}"))
    flips = report.flips
    line = f"flips: {flips['flips']} of {flips['n']} paired cases"
    if flips["scored"]:
        line += f" ({flips['right_to_wrong']} right\u2192wrong, {flips['wrong_to_right']} wrong\u2192right)"
    lines.append(("flips", line))
    for axis in report.axes:
        entry = report.noise[axis]
        if entry["status"] == MEASURED:
            low, high = entry["interval"]
            lines.append(("noise", f"noise, {axis}: agreement {entry['agreement']:.2f} ({entry['m']}/{entry['n']}) "
                                   f"predicts {entry['expected_flips']:.1f} flips ({low}\u2013{high})"))
        else:
            lines.append(("noise", f"noise, {axis}: {entry['status']}"))
    if report.margins:
        margins = report.margins
        lines.append(("margins", f"margins: {margins['near_ties']} near-tie, {margins['decisive']} decisive, "
                                 f"{margins['unknown']} without logprobs"))
    lines.extend(("caveat", f"caveat: {caveat}") for caveat in report.caveats)
    lines.append(("verdict", f"{report.verdict}: {report.sentence}"))
    if report.rerun:
        lines.append(("rerun", str(report.rerun["sentence"])))
    if report.proposal and report.proposal.get("kind") == "plan":
        for plan in report.proposal["plans"]:
            cases = f" (about {plan['cases']} cases)" if plan.get("cases") else ""
            lines.append(("plan", f"  varies {plan['varies']}: {plan['command']}{cases}"))
    return lines


def run_explain(options: ExplainOptions, on_event: OnEvent | None = None,
                cancel: threading.Event | None = None) -> ExplainReport:
    """Explain the difference between ``options.a`` and ``options.b`` from the ledger's evidence; with
    ``options.rerun``, send the flips and a sample of the agreeing cases to both systems again."""
    from execsys.compare import load_result

    with Ledger.open(options.ledger) as ledger:
        a = load_result(options.a, ledger)
        b = load_result(options.b, ledger)
        emit(on_event, ResultsLoaded(a.ref, b.ref, len(a.outcomes), len(b.outcomes)))
        report = explain(a, b, ledger, tie_margin=options.tie_margin)
        rerun = _prepare_rerun(options, a, b, report, ledger) if options.rerun else None
        ledger_path = ledger.path
    if rerun is not None:
        report.rerun = _run_rerun(options, rerun, report, ledger_path, on_event, cancel)
    emit(on_event, Explained(report.verdict, report.sentence))
    return report


def explain(a: Result, b: Result, ledger: Ledger, *, tie_margin: float | None = None) -> ExplainReport:
    """The five sections and the verdict for two loaded results."""
    from execsys.compare import moved_between, paired_figures
    from execsys.scope import compute_scope

    moved, changes, reasons = moved_between(a, b)
    caveats = [c.replace("{side}", side) for side, r in (("A", a), ("B", b)) for c in r.caveats]
    unrecorded = [c for c in caveats if c.startswith("no identity recorded for")]
    if unrecorded:  # two unrecorded results share no identity, even when they are the same file
        moved, changes = None, {}
    moved_reason = (unrecorded[0] if unrecorded else "; ".join(reasons)) if moved is None else None

    flips = _flips(a, b, paired_figures(a, b))
    if not flips["n"]:
        raise InputError(f"{a.ref} and {b.ref} share no case id: there is nothing to pair")

    axes = separating_axes(a, b, ledger)
    scopes: dict[str, ScopeReport] = {}
    for result in (a, b):
        if result.identity.id not in scopes:
            scopes[result.identity.id] = compute_scope(ledger, result.identity.id)
    noise = {axis: _axis_noise(axis, scopes, flips["n"]) for axis in axes}
    measured = [noise[axis] for axis in axes if noise[axis]["status"] == MEASURED]
    total = None
    if len(measured) == len(axes):
        floor = noise_floor([(entry["m"], entry["n"]) for entry in measured], flips["n"])
        total = {"axes": axes, "agreement": floor.agreement, "expected_flips": floor.expected_flips,
                 "interval": list(floor.interval), "binomial_interval": list(floor.binomial_interval),
                 "exceeded": floor.exceeded_by(flips["flips"])}
        # noise flips go either way with equal odds: a lopsided split is beyond it however few the flips
        total["lopsided"] = bool(flips["scored"] and flips["mcnemar_p"] < LOPSIDED_P)
        total["beyond"] = total["exceeded"] or total["lopsided"]

    margins = _margins(a, b, flips["flipped"], ledger, tie_margin)
    verdict, sentence, proposal = _verdict(a, b, moved, moved_reason, flips, axes, noise, total, margins)
    doubts = [c for c in caveats if c not in unrecorded]
    if verdict == ATTRIBUTABLE and doubts:
        # what moved came from identities a caveat puts in doubt (a result changed since its run, a sidecar
        # nobody recorded, a drifted run): the one component is not established
        verdict = NOT_ATTRIBUTABLE
        sentence = sentence.rstrip(".") + f", were it not that {doubts[0]}: not attributable."
    return ExplainReport(a.to_json(), b.to_json(), moved, moved_reason, changes, flips, axes, noise, total,
                         margins, verdict, sentence, proposal, caveats)


# ------------------------------------------------------------------ sections
def _flips(a: Result, b: Result, paired: dict[str, Any] | None) -> dict[str, Any]:
    """The flips section: counts both ways (None when outcomes are answers, not scores), the paired figures."""
    common = [case for case in a.outcomes if case in b.outcomes]
    flipped = [case for case in common if a.outcomes[case] != b.outcomes[case]]
    scored = paired is not None and paired.get("kind") == "paired"
    if scored:
        ba, bb = a.binary() or {}, b.binary() or {}
        flipped = [case for case in common if ba[case] != bb[case]]
    return {
        "n": len(common), "flips": len(flipped),
        "right_to_wrong": paired["b"] if scored and paired else None,
        "wrong_to_right": paired["c"] if scored and paired else None,
        "mcnemar_p": paired["mcnemar_p"] if scored and paired else None,
        "difference": paired["difference"] if scored and paired else None,
        "ci95": paired["ci95"] if scored and paired else None,
        "scored": scored, "flipped": flipped,
        "only_in_a": len(a.outcomes) - len(common), "only_in_b": len(b.outcomes) - len(common),
    }


def _probe_pass(result: Result, ledger: Ledger) -> tuple[Any, int] | None:
    """(probe ledger record, pass index) when ``result`` is one pass of a probe record."""
    record_ref, _, part = result.ref.partition(":")
    if not record_ref.startswith("probe-") or Path(result.ref).is_file():
        return None
    try:
        record = ledger.get(record_ref)
    except InputError:
        return None
    if record.kind != "probe":
        return None
    try:
        return record, int(part or 0)
    except ValueError:
        return None


def separating_axes(a: Result, b: Result, ledger: Ledger) -> list[str]:
    """The probe axes whose noise separates A from B.

    Two passes of one probe are separated by that probe's axis; two arms of one paired run, or two
    results of one session, by the session's own noise; otherwise by what
    :func:`execsys.compare.crossed_axes` says was crossed (different sessions: a restart; other hosts;
    other load), with the session's noise underneath when no wider boundary was crossed."""
    from execsys.compare import crossed_axes
    from execsys.scope import AXES, CHAIN

    pass_a, pass_b = _probe_pass(a, ledger), _probe_pass(b, ledger)
    if pass_a and pass_b and pass_a[0].id == pass_b[0].id and pass_a[1] != pass_b[1]:
        axis = pass_a[0].body.get("axis")
        if axis in AXES:
            return [str(axis)]
    if a.paired_run and a.paired_run == b.paired_run:
        return ["session"]
    crossed = crossed_axes(a, b)
    if not any(axis in CHAIN for axis in crossed):
        crossed = ["session", *crossed]
    return crossed


def _axis_noise(axis: str, scopes: dict[str, ScopeReport], cases: int) -> dict[str, Any]:
    """One axis of the noise floor: each identity's measure, and the floor of the noisier one."""
    per_identity: dict[str, dict[str, Any]] = {}
    picked = None
    for ident, scope in scopes.items():
        measure = scope.measured.get(axis)
        if measure is None or measure.n <= 0:
            per_identity[ident] = {"status": NOT_PROBED}
            continue
        status = UNVERIFIED if axis in scope.unverified else MEASURED
        per_identity[ident] = {"status": status, "m": measure.m, "n": measure.n,
                               "agreement": measure.m / measure.n, "records": measure.records}
        if status == MEASURED and (picked is None or (measure.m / measure.n, measure.n)
                                   < (picked.m / picked.n, picked.n)):
            picked = measure
    statuses = {entry["status"] for entry in per_identity.values()}
    status = NOT_PROBED if NOT_PROBED in statuses else UNVERIFIED if UNVERIFIED in statuses else MEASURED
    entry: dict[str, Any] = {"status": status, "identities": per_identity, "agreement": None, "m": None,
                             "n": None, "cases": cases, "expected_flips": None, "interval": None,
                             "binomial_interval": None}
    if status == MEASURED and picked is not None:
        floor = noise_floor([(picked.m, picked.n)], cases)
        entry.update(agreement=floor.agreement, m=picked.m, n=picked.n, expected_flips=floor.expected_flips,
                     interval=list(floor.interval), binomial_interval=list(floor.binomial_interval))
    return entry


def _margins(a: Result, b: Result, flipped: list[str], ledger: Ledger,
             tie_margin: float | None) -> dict[str, Any] | None:
    """Each flip's margin at its first divergent token, where both results are probe passes whose
    per-case rows kept logprobs; None when neither side has any."""
    from execsys.probes.compare import divergence_between
    from execsys.probes.margin import DEFAULT_TIE_MARGIN, margin_at, split_summary, unpack_logprobs
    from execsys.probes.store import case_row

    margin = tie_margin if tie_margin is not None else DEFAULT_TIE_MARGIN
    pass_a, pass_b = _probe_pass(a, ledger), _probe_pass(b, ledger)
    if pass_a is None or pass_b is None:
        return _choice_margins(a, b, flipped, margin)
    run_a, run_b = pass_a[0].body.get("run"), pass_b[0].body.get("run")
    if not run_a or not run_b:
        return None
    cases: list[dict[str, Any]] = []
    pairs: list[tuple[str, dict[str, Any] | None]] = []
    for case_id in flipped:
        row_a, _ = case_row(ledger, str(run_a), pass_a[1], case_id)
        row_b, _ = case_row(ledger, str(run_b), pass_b[1], case_id)
        body_a = row_a.body if row_a is not None else {}
        body_b = row_b.body if row_b is not None else {}
        tokens_a, tokens_b = unpack_logprobs(body_a), unpack_logprobs(body_b)
        where = divergence_between(
            (body_a.get("text"), list(tokens_a.tokens) if tokens_a.tokens is not None else None),
            (body_b.get("text"), list(tokens_b.tokens) if tokens_b.tokens is not None else None), 1)
        found = margin_at(tokens_a, tokens_b, where.get("token"), tie_margin=margin)
        pairs.append((case_id, found))
        cases.append({"case": case_id, "token": where.get("token"),
                      "verdict": found["verdict"] if found else None,
                      "margin": found["margin"] if found else None, "bound": found["bound"] if found else None})
    summary = split_summary(pairs)
    if not summary["near_ties"] and not summary["not_near_ties"]:
        return None
    return {"tie_margin": margin, "near_ties": summary["near_ties"], "decisive": summary["not_near_ties"],
            "unknown": summary["unknown"], "median_near_tie_margin": summary["median_near_tie_margin"],
            "cases": cases, "source": "probe logprobs at the first divergent token"}


def _choice_margins(a: Result, b: Result, flipped: list[str], tie_margin: float) -> dict[str, Any] | None:
    """Each flip's margin where both results are lm-eval results of a loglikelihood (multiple-choice) task:
    the gap between the best choice and the runner-up on each side; a near-tie when both are at most
    ``tie_margin`` nats. None when neither side has such a gap for any flip."""
    from execsys.harnesses.lm_eval import RESULTS_NAME, choice_gaps
    from execsys.probes.margin import NEAR_TIE, NOT_NEAR_TIE

    paths = [Path(r.ref) for r in (a, b)]
    if not flipped or not all(p.is_file() and RESULTS_NAME.match(p.name) for p in paths):
        return None
    gaps_a, gaps_b = choice_gaps(paths[0], flipped), choice_gaps(paths[1], flipped)
    if not gaps_a and not gaps_b:
        return None
    cases: list[dict[str, Any]] = []
    near: list[float] = []
    for case_id in flipped:
        gap_a, gap_b = gaps_a.get(case_id), gaps_b.get(case_id)
        if gap_a is None or gap_b is None:
            cases.append({"case": case_id, "token": None, "verdict": None, "margin": None, "bound": None})
            continue
        value = max(gap_a, gap_b)  # a near-tie only when both runs saw the two choices practically tied
        verdict = NEAR_TIE if value <= tie_margin else NOT_NEAR_TIE
        if verdict == NEAR_TIE:
            near.append(value)
        cases.append({"case": case_id, "token": None, "verdict": verdict, "margin": value, "bound": "exact",
                      "margin_a": gap_a, "margin_b": gap_b})
    known = [c for c in cases if c["verdict"] is not None]
    return {"tie_margin": tie_margin, "near_ties": len(near), "decisive": len(known) - len(near),
            "unknown": len(cases) - len(known),
            "median_near_tie_margin": statistics.median(near) if near else None, "cases": cases,
            "source": "lm-eval choice loglikelihoods"}


# ------------------------------------------------------------------ --rerun
@dataclass(frozen=True)
class _Rerun:
    plan: Any  # the registered execsys.plan/1
    cases_path: Path
    flipped: list[str]
    agreeing: list[str]
    original: dict[str, tuple[bool, bool]]  # case -> (A right, B right) in the results explained


def _source_cases(options: ExplainOptions, a: Result, b: Result, ledger: Ledger) -> Path:
    """The cases the two results were made from: ``--cases``, else a probe's cases file, else the
    cases file the paired run's plan registered."""
    if options.cases is not None:
        return Path(options.cases)
    for result in (a, b):
        found = _probe_pass(result, ledger)
        if found is not None and found[0].body.get("cases_file"):
            return Path(str(found[0].body["cases_file"]))
        if result.paired_run:
            try:
                run = ledger.get(result.paired_run)
                plan = ledger.get(str(run.parent)) if run.parent else None
            except InputError:
                plan = None
            file = ((plan.body.get("cases") or {}).get("file") if plan is not None else None)
            if file:
                return Path(str(file))
    raise UsageError("--rerun needs the cases these results were made from (prompt and expected answer "
                     "per case id): give --cases FILE")


def _prepare_rerun(options: ExplainOptions, a: Result, b: Result, report: ExplainReport, ledger: Ledger) -> _Rerun:
    """The flipped cases and a seeded sample of the agreeing ones, as a registered AB/BA plan."""
    import json
    import random

    from execsys.plan.schedule import new_plan, register_plan
    from execsys.probes.cases import load_cases

    if not report.flips["scored"]:
        raise UsageError("--rerun needs results scored right or wrong per case (these are answers): the "
                         "paired re-run counts a flip as reproduced when both systems score it as before")
    ba, bb = a.binary() or {}, b.binary() or {}
    source = _source_cases(options, a, b, ledger)
    by_id = {case.id: case for case in load_cases(source)}
    flipped = [c for c in report.flips["flipped"] if c in by_id]
    agreeing_all = [c for c in a.outcomes if c in b.outcomes and c not in set(report.flips["flipped"]) and c in by_id]
    missing = [c for c in report.flips["flipped"] if c not in by_id]
    if missing:
        raise InputError(f"{source}: has no case {missing[0]!r} of the flips: not the cases these results were made from")
    want = options.sample if options.sample is not None else max(10, len(flipped))
    agreeing = sorted(random.Random(f"execsys-explain:{options.seed}").sample(agreeing_all,
                                                                              min(want, len(agreeing_all))))
    chosen = [by_id[c] for c in flipped + agreeing]
    no_expected = [c.id for c in chosen if c.expected is None]
    if no_expected:
        raise InputError(f"{source}: case {no_expected[0]} has no \"expected\" answer: the re-run scores each case")
    where = Path(ledger.path).parent / "explain"
    where.mkdir(parents=True, exist_ok=True)
    from execsys.ledger import new_id

    cases_path = where / f"{new_id('rerun')}.cases.jsonl"
    cases_path.write_text("".join(json.dumps(c.to_json(), ensure_ascii=False) + "\n" for c in chosen),
                          encoding="utf-8")
    plan = register_plan(new_plan(["A", "B"], cases_path, "abba", options.seed,
                                  identity_reason="an explain re-run: its arms are the two systems explained"), ledger)
    original = {c: (ba[c], bb[c]) for c in flipped + agreeing}
    return _Rerun(plan, cases_path, flipped, agreeing, original)


def _run_rerun(options: ExplainOptions, rerun: _Rerun, report: ExplainReport, ledger_path: Path,
               on_event: OnEvent | None, cancel: threading.Event | None) -> dict[str, Any]:
    """Run the plan against both systems in one window; a flip reproduces when both score it as before."""
    from execsys.plan.run import PlanRunOptions, run_plan

    plan_options = PlanRunOptions.from_sources(None, None, plan=rerun.plan, endpoints=options.rerun or {},
                                               cases=rerun.cases_path, ledger=ledger_path)
    run = run_plan(plan_options, on_event, cancel)
    scored = {case: (arms["A"]["correct"], arms["B"]["correct"]) for case, arms in run.outcomes.items()
              if "A" in arms and "B" in arms and not arms["A"].get("error") and not arms["B"].get("error")}
    flipped = [c for c in rerun.flipped if c in scored]
    reproduced = [c for c in flipped if scored[c] == rerun.original[c]]
    agreeing = [c for c in rerun.agreeing if c in scored]
    newly = [c for c in agreeing if scored[c][0] != scored[c][1]]
    if not flipped:
        finding = "no flipped case was scored again"
    elif 2 * len(reproduced) > len(flipped):
        finding = "most flips reproduce: a system effect"
    else:
        finding = "most flips do not reproduce: run-to-run noise"
    sentence = (f"Re-run in one AB/BA window ({run.record}): {len(reproduced)} of {len(flipped)} flips reproduced, "
                f"{len(newly)} of {len(agreeing)} agreeing cases flipped; {finding}.")
    return {"record": run.record, "cases": str(rerun.cases_path), "flipped": len(flipped),
            "reproduced": len(reproduced), "reproduced_cases": reproduced, "agreeing": len(agreeing),
            "newly_flipped": len(newly), "paired": run.stats.to_json(), "cancelled": run.cancelled,
            "finding": finding, "sentence": sentence}


# ------------------------------------------------------------------ the verdict
def _figure(entry: dict[str, Any]) -> str:
    return f"{entry['agreement']:.2f} ({entry['m']}/{entry['n']})"


def _predicts(total: dict[str, Any], noise: dict[str, dict[str, Any]], axes: list[str]) -> str:
    named = ", ".join(f"{axis} agreement {_figure(noise[axis])}" for axis in axes)
    low, high = total["interval"]
    return f"{named} predicts {total['expected_flips']:.1f} (95% interval {low}\u2013{high})"


def _flip_text(flips: dict[str, Any]) -> str:
    text = f"{flips['flips']} flip{'s' if flips['flips'] != 1 else ''} over {flips['n']} paired cases"
    if flips["scored"]:
        ci = flips["ci95"]
        text += (f" ({flips['right_to_wrong']} right\u2192wrong, {flips['wrong_to_right']} wrong\u2192right; "
                 f"B \u2212 A {flips['difference']:+.3f}, 95% CI {ci[0]:+.3f} to {ci[1]:+.3f}, "
                 f"McNemar p = {flips['mcnemar_p']:.3g})")
    return text


def _verdict(a: Result, b: Result, moved: list[str] | None, moved_reason: str | None, flips: dict[str, Any],
             axes: list[str], noise: dict[str, dict[str, Any]], total: dict[str, Any] | None,
             margins: dict[str, Any] | None) -> tuple[str, str, dict[str, Any] | None]:
    head = _flip_text(flips)
    if margins and margins["near_ties"]:
        head += (f", {margins['near_ties']} of them at near-ties (≤ {margins['tie_margin']:g} nats: "
                 "float reordering can explain those)")
    if total is None:
        axis = next(x for x in axes if noise[x]["status"] != MEASURED)
        lacking = [i for i, e in noise[axis]["identities"].items() if e["status"] != MEASURED]
        result = a if a.identity.id in lacking else b
        status = noise[axis]["identities"][result.identity.id]["status"]
        proposal = _probe_proposal(axis, result, flips["n"])
        if not _pinned_id(result):
            where = (f"no identity is pinned for {result.ref}, so no probe counts toward it (pin the system, "
                     "then probe under its lock)")
        else:
            why = "licensed only unverified (the event was not confirmed)" if status == UNVERIFIED else "never probed"
            where = f"{axis} was {why} under identity {result.identity.id[:12]}"
        sentence = (f"{head}; {where}: the noise floor is unknown, so the difference cannot be told from "
                    f"run-to-run noise yet; measure it with '{proposal['command']}'.")
        return UNMEASURED, sentence, proposal
    predicted = _predicts(total, noise, axes)
    if not total["beyond"]:
        return WITHIN, f"{head}; {predicted}: not distinguishable from run-to-run noise.", None
    if not total["exceeded"]:
        predicted += (f", but the flips go one way (McNemar p = {flips['mcnemar_p']:.3g}) and noise flips go "
                      "either way")
    if moved is None:
        return NOT_ATTRIBUTABLE, (f"{head}; {predicted}: beyond measured noise, but what moved cannot be named "
                                  f"({moved_reason}): record both systems' identities (execsys run or execsys "
                                  "attach) and explain again."), None
    if not moved:
        proposal = _plan_proposal(a, b, ["(nothing the identities record)"], flips)
        return NOT_ATTRIBUTABLE, (f"{head}; {predicted}: beyond measured noise, yet no component the identities "
                                  "record moved: something unrecorded differs; a paired run of the two systems "
                                  f"would show it ('{proposal['plans'][0]['command']}')."), proposal
    if len(moved) == 1:
        return ATTRIBUTABLE, (f"{head}; {predicted}: beyond measured noise, attributable to {moved[0]}, the one "
                              "component that moved."), None
    proposal = _plan_proposal(a, b, moved, flips)
    return NOT_ATTRIBUTABLE, (f"{head}; {predicted}: beyond measured noise, but {len(moved)} components moved "
                              f"({', '.join(moved)}): {len(proposal['plans'])} paired plans, each varying one, "
                              "would separate them."), proposal


def _pinned_id(result: Result) -> bool:
    """Whether the result names a pinned identity (not a probe's or a harness file's stand-in id)."""
    return not result.identity.id.startswith(("unpinned:", "unrecorded:"))


def _lock_hint(result: Result) -> str:
    source = result.identity.source
    if source and source.endswith(".json"):
        return source
    if not _pinned_id(result):
        return "execsys.lock.json"  # what `execsys pin` writes
    return f"LOCK_OF_{result.identity.id[:12]}"


def _probe_proposal(axis: str, result: Result, cases: int) -> dict[str, Any]:
    """The one probe that measures ``axis`` for ``result``'s identity."""
    import shlex

    extra = {"restart": " --restart CMD", "concurrency": " --load K", "hosts": " --endpoint URL2",
             "redeploy": " --baseline RECORD_ID"}.get(axis, "")
    command = (f"execsys probe {axis} --endpoint URL{extra} --cases CASES --lock {shlex.quote(_lock_hint(result))}")
    return {"kind": "probe", "axis": axis, "identity": result.identity.id, "command": command,
            "cases": cases, "why": f"{axis} agreement under this identity is what predicts the flips"}


def _plan_proposal(a: Result, b: Result, moved: list[str], flips: dict[str, Any]) -> dict[str, Any]:
    """Per moved component, one paired AB/BA plan: arm A is system A, arm ``A-with-C`` is A with only C moved
    to B's setting; the cases needed for the interval to exclude zero if that component carries the whole
    observed difference."""
    needed = (cases_to_exclude_zero(flips["right_to_wrong"], flips["wrong_to_right"], flips["n"])
              if flips["scored"] else None)
    plans = []
    for component in moved:
        arm = "B" if component.startswith("(") else f"A-with-{component}"
        plans.append({
            "varies": component, "arms": {"A": f"system A ({a.ref})",
                                          arm: (f"system A with {component} as in B ({b.ref})"
                                                if arm != "B" else f"system B ({b.ref})")},
            "cases": needed,
            "command": f"execsys plan new --arms A {arm} --cases CASES --design abba",
        })
    return {"kind": "plan", "plans": plans,
            "cases_why": ("the smallest n at which the paired 95% interval excludes zero at the observed "
                          "discordance rates" if needed else "outcomes are answers, not scores: size by "
                          "'execsys probe size'" if not flips["scored"] else "the observed difference is zero")}
