"""`execsys explain A B`: the noise-floor arithmetic by hand, the verdict each body of evidence earns,
and end to end against the real llama.cpp server: an A/A pair, and planted single causes (an ``--n_batch``
change, an artifact swap, a ``max_tokens`` change, a grader change), two causes at once, ``--rerun``.
The same on the real vLLM is in tests/test_vllm_explain.py; the timings in benchmarks/bench_explain.py."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from execsys.compare import load_result
from execsys.errors import InputError, UsageError
from execsys.explain import (
    ATTRIBUTABLE,
    NOT_ATTRIBUTABLE,
    UNMEASURED,
    WITHIN,
    ExplainOptions,
    cases_to_exclude_zero,
    explain,
    noise_floor,
    run_explain,
)
from execsys.ledger import Ledger
from execsys.stats import beta_binomial_quantile, binomial_quantile, paired_difference_ci
from tests.fixtures.compare_records import BASE, OUT_A, OUT_B, lm_eval_output, write_lock, write_result


# ------------------------------------------------------------------ the arithmetic, by hand
def _quantile(q: Fraction, pmf) -> int:
    total = Fraction(0)
    k = 0
    while True:
        total += pmf(k)
        if total >= q:
            return k
        k += 1


def _binomial(n: int, p: Fraction):
    return lambda k: math.comb(n, k) * p**k * (1 - p) ** (n - k)


def _rising(x: Fraction, k: int) -> Fraction:
    out = Fraction(1)
    for i in range(k):
        out *= x + i
    return out


def _beta_binomial(n: int, alpha: Fraction, beta: Fraction):
    # exact: C(n, k) (alpha)_k (beta)_(n-k) / (alpha + beta)_n with rising factorials
    return lambda k: math.comb(n, k) * _rising(alpha, k) * _rising(beta, n - k) / _rising(alpha + beta, n)


@pytest.mark.parametrize(("n", "p", "q"), [(12, Fraction(1, 25), Fraction(39, 40)), (450, Fraction(1, 25), Fraction(1, 40)),
                                           (450, Fraction(1, 25), Fraction(39, 40)), (20, Fraction(1, 5), Fraction(39, 40))])
def test_binomial_quantile_is_the_exact_one(n: int, p: Fraction, q: Fraction) -> None:
    assert binomial_quantile(float(q), n, float(p)) == _quantile(q, _binomial(n, p))


@pytest.mark.parametrize(("n", "m", "big_n"), [(12, 20, 20), (450, 192, 200), (20, 16, 20), (60, 60, 60)])
def test_beta_binomial_quantile_is_the_exact_one(n: int, m: int, big_n: int) -> None:
    alpha, beta = Fraction(2 * (big_n - m) + 1, 2), Fraction(2 * m + 1, 2)  # Jeffreys: the disagreement rate
    for q in (Fraction(1, 40), Fraction(39, 40)):
        assert beta_binomial_quantile(float(q), n, float(alpha), float(beta)) == _quantile(q, _beta_binomial(n, alpha, beta))


@pytest.mark.parametrize(("measures", "cases", "expected", "interval", "binomial"), [
    # agreement 20/20 over 12 cases: the rate is not known to be 0, only small: up to 2 flips are noise
    ([(20, 20)], 12, 0.0, (0, 2), (0, 0)),
    ([(20, 20)], 60, 0.0, (0, 8), (0, 0)),
    ([(60, 60)], 60, 0.0, (0, 3), (0, 0)),
    # the example: restart agreement 0.96 (n = 200) over 450 cases predicts 18
    ([(192, 200)], 450, 18.0, (7, 36), (10, 27)),
    ([(16, 20)], 20, 4.0, (0, 10), (1, 8)),
    # two axes crossed at once: 1 - 0.96 * 0.95
    ([(192, 200), (95, 100)], 450, 39.6, (20, 71), (28, 52)),
])
def test_noise_floor_golden_values(measures, cases, expected, interval, binomial) -> None:
    floor = noise_floor(measures, cases)
    assert floor.expected_flips == pytest.approx(expected)
    assert floor.expected_flips == pytest.approx(cases * (1 - math.prod(m / n for m, n in measures)))
    assert floor.interval == interval and floor.binomial_interval == binomial
    assert not floor.exceeded_by(interval[1]) and floor.exceeded_by(interval[1] + 1)


def test_one_axis_noise_floor_is_the_exact_jeffreys_prediction() -> None:
    floor = noise_floor([(192, 200)], 450)
    exact = _beta_binomial(450, Fraction(17, 2), Fraction(385, 2))
    assert floor.interval == (_quantile(Fraction(1, 40), exact), _quantile(Fraction(39, 40), exact))
    assert floor.binomial_interval == (_quantile(Fraction(1, 40), _binomial(450, Fraction(1, 25))),
                                       _quantile(Fraction(39, 40), _binomial(450, Fraction(1, 25))))


def test_a_noise_floor_needs_measures() -> None:
    with pytest.raises(ValueError):
        noise_floor([], 10)
    with pytest.raises(ValueError):
        noise_floor([(3, 0)], 10)


def test_cases_needed_for_the_interval_to_exclude_zero() -> None:
    # b = 7, c = 1 over 12: the paired interval excludes 0 first at 9 cases with those rates
    assert cases_to_exclude_zero(7, 1, 12) == 9 == cases_to_exclude_zero(1, 7, 12)
    low, high = paired_difference_ci(7 / 12 * 9, 1 / 12 * 9, 9)  # type: ignore[arg-type, misc]
    assert low > 0
    low8, _ = paired_difference_ci(7 / 12 * 8, 1 / 12 * 8, 8)  # type: ignore[arg-type, misc]
    assert low8 <= 0
    assert cases_to_exclude_zero(12, 0, 60) == 21
    assert cases_to_exclude_zero(3, 3, 12) is None  # a zero difference: no n separates it


# ------------------------------------------------------------------ the verdict, from recorded evidence
@pytest.fixture
def ledger(tmp_path: Path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as opened:
        yield opened


@pytest.fixture
def systems(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    out = {}
    for name, declared in {
        "base": BASE,
        "runtime": {**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}},
        "both": {**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}, "hardware": {"host": "gpu2"}},
    }.items():
        path = tmp_path / f"{name}.lock.json"
        out[name] = (path, write_lock(path, **declared))
    return out


def _probe(ledger: Ledger, identity: str, axis: str, m: int, n: int, **body) -> str:
    return ledger.append("probe", {"schema": "execsys.probe/2", "axis": axis, "identity": identity, "m": m, "n": n,
                                   "agreement_rate": m / n, **body}, identity=identity)


def _explain(tmp_path: Path, ledger: Ledger, a_system: Path, b_system: Path, out_a=OUT_A, out_b=OUT_B, **extra):
    a = write_result(tmp_path / "a.json", a_system, out_a, **extra.get("a", {}))
    b = write_result(tmp_path / "b.json", b_system, out_b, **extra.get("b", {}))
    return explain(load_result(str(a), ledger), load_result(str(b), ledger), ledger)


def test_one_component_beyond_measured_noise_is_attributable(tmp_path, ledger, systems) -> None:
    for _path, ident in systems.values():
        _probe(ledger, ident, "session", 20, 20)
    report = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0])
    assert report.verdict == ATTRIBUTABLE and report.exit_code == 1
    assert report.moved == ["runtime"] and report.axes == ["session"]
    flips = report.flips
    assert (flips["right_to_wrong"], flips["wrong_to_right"], flips["n"], flips["flips"]) == (7, 1, 12, 8)
    assert flips["mcnemar_p"] == pytest.approx(2 * (1 + 8) / 2**8)
    assert flips["difference"] == pytest.approx(-6 / 12)
    low, high = paired_difference_ci(7, 1, 12)  # type: ignore[misc]
    assert flips["ci95"] == pytest.approx([-high, -low])
    session = report.noise["session"]
    assert (session["status"], session["agreement"], session["n"], session["cases"]) == ("measured", 1.0, 20, 12)
    assert session["expected_flips"] == 0.0 and session["interval"] == [0, 2]
    assert "attributable to runtime, the one component that moved" in report.sentence
    data = report.to_json()
    assert set(data) >= {"verdict", "sentence", "moved", "flips", "noise", "margins", "proposal"}
    assert data["proposal"] is None and data["margins"] is None


def test_flips_inside_the_measured_noise_are_within_it(tmp_path, ledger, systems) -> None:
    # session agreement 14/20 predicts up to 8 flips over 12 cases: 8 flips are noise
    for _path, ident in systems.values():
        _probe(ledger, ident, "session", 14, 20)
    report = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0])
    assert report.verdict == WITHIN and report.exit_code == 0
    assert report.noise["session"]["expected_flips"] == pytest.approx(12 * 0.3)
    assert report.noise["session"]["interval"] == [0, 8]
    assert "not distinguishable from run-to-run noise" in report.sentence


def test_flips_that_go_one_way_are_beyond_noise_however_few(tmp_path, ledger, systems) -> None:
    # 14/20 over 40 cases allows many flips, but noise flips go either way: 12 right->wrong and none back is
    # a score change (exact McNemar p = 2 / 2**12)
    for _path, ident in systems.values():
        _probe(ledger, ident, "session", 14, 20)
    out_a = {f"q{i}": i < 20 for i in range(40)}
    out_b = {f"q{i}": i < 8 for i in range(40)}
    report = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0], out_a, out_b)
    total = report.noise_total
    assert total is not None and report.flips["flips"] == 12 and total["interval"][1] >= 12
    assert not total["exceeded"] and total["lopsided"] and report.flips["mcnemar_p"] == pytest.approx(2 / 2**12)
    assert report.verdict == ATTRIBUTABLE and "the flips go one way" in report.sentence
    # the same count split evenly is noise
    even_b = {f"q{i}": (i < 14 or 20 <= i < 26) for i in range(40)}
    even = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0], out_a, even_b)
    assert even.flips["flips"] == 12 and even.flips["right_to_wrong"] == 6 and even.verdict == WITHIN


def test_the_noisier_identity_sets_the_floor(tmp_path, ledger, systems) -> None:
    _probe(ledger, systems["base"][1], "session", 20, 20)
    _probe(ledger, systems["runtime"][1], "session", 14, 20)
    report = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0])
    assert report.noise["session"]["agreement"] == pytest.approx(0.7) and report.verdict == WITHIN


def test_several_components_moved_proposes_the_plans_that_separate_them(tmp_path, ledger, systems) -> None:
    for _path, ident in systems.values():
        _probe(ledger, ident, "session", 20, 20)
    report = _explain(tmp_path, ledger, systems["base"][0], systems["both"][0])
    assert report.verdict == NOT_ATTRIBUTABLE and report.exit_code == 1
    assert set(report.moved or []) == {"runtime", "hardware"}
    proposal = report.proposal
    assert proposal is not None and proposal["kind"] == "plan"
    assert {p["varies"] for p in proposal["plans"]} == {"runtime", "hardware"}
    for plan in proposal["plans"]:
        assert plan["cases"] == 9  # cases_to_exclude_zero(7, 1, 12)
        assert plan["command"] == f"execsys plan new --arms A A-with-{plan['varies']} --cases CASES --design abba"
    assert "2 components moved" in report.sentence


def test_a_caveat_on_a_result_keeps_one_moved_component_from_being_attributed(tmp_path, ledger, systems) -> None:
    for _path, ident in systems.values():
        _probe(ledger, ident, "session", 20, 20)
    a = load_result(str(write_result(tmp_path / "a.json", systems["base"][0], OUT_A)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", systems["runtime"][0], OUT_B)), ledger)
    assert explain(a, b, ledger).verdict == ATTRIBUTABLE
    b.caveats.append("run run-20261201T101010-0000000d for {side} drifted: its result is not attributable to one system")
    report = explain(a, b, ledger)
    assert report.verdict == NOT_ATTRIBUTABLE and report.moved == ["runtime"]
    assert "were it not that run run-20261201T101010-0000000d for B drifted" in report.sentence
    assert report.caveats == ["run run-20261201T101010-0000000d for B drifted: its result is not attributable to one "
                              "system"]


def test_an_axis_never_probed_is_unmeasured_with_the_probe_that_measures_it(tmp_path, ledger, systems) -> None:
    _probe(ledger, systems["base"][1], "session", 20, 20)  # B's identity was never probed
    report = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0])
    assert report.verdict == UNMEASURED and report.exit_code == 1
    assert report.noise["session"]["status"] == "unmeasured" and report.noise_total is None
    assert report.noise["session"]["identities"][systems["base"][1]]["status"] == "measured"
    proposal = report.proposal
    assert proposal is not None and proposal["kind"] == "probe" and proposal["axis"] == "session"
    assert proposal["identity"] == systems["runtime"][1]
    assert proposal["command"].startswith("execsys probe session --endpoint URL --cases CASES --lock ")
    assert str(systems["runtime"][0]) in proposal["command"]


def test_different_sessions_are_separated_by_a_restart_and_other_hosts_by_hosts(tmp_path, ledger, systems) -> None:
    for _path, ident in systems.values():
        _probe(ledger, ident, "session", 20, 20)
    report = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0],
                      a={"session": "monday", "host": "gpu1"}, b={"session": "tuesday", "host": "gpu2"})
    assert report.axes == ["restart", "hosts"] and report.verdict == UNMEASURED
    assert report.proposal is not None and report.proposal["axis"] == "restart"
    assert "--restart CMD" in report.proposal["command"]
    for _path, ident in systems.values():
        _probe(ledger, ident, "restart", 20, 20, evidence={"verdict": "observed"})
        _probe(ledger, ident, "hosts", 20, 20)
    both = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0],
                    a={"session": "monday", "host": "gpu1"}, b={"session": "tuesday", "host": "gpu2"})
    assert both.verdict == ATTRIBUTABLE
    total = both.noise_total
    assert total is not None and total["axes"] == ["restart", "hosts"]
    assert total["interval"] == list(noise_floor([(20, 20), (20, 20)], 12).interval)


def test_a_licence_marked_unverified_counts_as_unmeasured(tmp_path, ledger, systems) -> None:
    for _path, ident in systems.values():
        _probe(ledger, ident, "restart", 20, 20, evidence={"verdict": "unverified", "sentence": "remote endpoint"})
    report = _explain(tmp_path, ledger, systems["base"][0], systems["runtime"][0],
                      a={"session": "monday"}, b={"session": "tuesday"})
    assert report.noise["restart"]["status"] == "unverified"
    assert report.verdict == UNMEASURED and "licensed only unverified" in report.sentence


def test_the_same_system_beyond_noise_is_not_attributable_to_anything_recorded(tmp_path, ledger, systems) -> None:
    _probe(ledger, systems["base"][1], "session", 20, 20)
    report = _explain(tmp_path, ledger, systems["base"][0], systems["base"][0])
    assert report.moved == [] and report.verdict == NOT_ATTRIBUTABLE
    assert "no component the identities record moved" in report.sentence
    assert report.proposal is not None and report.proposal["plans"][0]["command"].startswith(
        "execsys plan new --arms A B")


def test_no_identity_recorded_is_descriptive(tmp_path, ledger) -> None:
    result = lm_eval_output(tmp_path / "out")
    a = load_result(str(result), ledger)
    report = explain(a, a, ledger)
    assert report.moved is None and report.moved_reason == "no identity recorded for A"
    assert report.verdict == UNMEASURED and report.flips["flips"] == 0


def test_two_passes_of_one_probe_are_separated_by_its_axis(ledger, systems) -> None:
    ident = systems["base"][1]
    cases = [{"id": f"c{i}", "passes": [{"digest": f"d{i}", "outcome": str(i)},
                                        {"digest": f"d{i}", "outcome": str(i if i else 9)}]} for i in range(6)]
    record = _probe(ledger, ident, "restart", 5, 6, cases=cases, evidence={"verdict": "observed"})
    report = explain(load_result(f"{record}:0", ledger), load_result(f"{record}:1", ledger), ledger)
    assert report.axes == ["restart"] and report.moved == []
    assert report.flips["flips"] == 1 and report.flips["right_to_wrong"] is None  # answers, not scores
    assert report.verdict == WITHIN
    # a re-run scores each case again: answers without a right or wrong cannot say a flip reproduced
    rerun = ExplainOptions.from_sources(None, None, a=f"{record}:0", b=f"{record}:1", ledger=ledger.path,
                                        rerun={"A": "http://127.0.0.1:9/v1", "B": "http://127.0.0.1:9/v1"})
    with pytest.raises(UsageError, match="--rerun needs results scored right or wrong"):
        run_explain(rerun)


def test_the_arms_of_one_paired_run_are_separated_by_the_session_alone(ledger, systems) -> None:
    (_base_path, base), (_runtime_path, runtime) = systems["base"], systems["runtime"]
    for _path, ident in systems.values():
        ledger.append("identity", json.loads(_path.read_text()), identity=ident)
        _probe(ledger, ident, "session", 20, 20)
    outcomes = {f"q{i}": {"A": {"correct": OUT_A[f"q{i}"], "error": None},
                          "B": {"correct": OUT_B[f"q{i}"], "error": None}} for i in range(12)}
    run = ledger.append("plan-run", {"schema": "execsys.plan-run/1", "outcomes": outcomes, "checks": [],
                                     "arms": {"A": {"host": "local", "identity": base},
                                              "B": {"host": "local", "identity": runtime}}})
    report = explain(load_result(f"{run}:A", ledger), load_result(f"{run}:B", ledger), ledger)
    assert report.axes == ["session"] and report.moved == ["runtime"] and report.verdict == ATTRIBUTABLE
    # a plan run that recorded one identity for both arms never observed what its arms differ in
    blind = ledger.append("plan-run", {"schema": "execsys.plan-run/1", "outcomes": outcomes, "checks": [],
                                       "identity": base, "arms": {"A": {"host": "local"}, "B": {"host": "local"}}},
                          identity=base)
    unobserved = explain(load_result(f"{blind}:A", ledger), load_result(f"{blind}:B", ledger), ledger)
    assert unobserved.moved is None and "not observed" in (unobserved.moved_reason or "")
    assert unobserved.verdict == NOT_ATTRIBUTABLE and "what moved cannot be named" in unobserved.sentence


def test_margins_of_flips_in_lm_eval_choice_loglikelihoods(tmp_path, ledger) -> None:
    """lm-eval's multiple-choice samples keep one loglikelihood per choice: a flip whose two best choices
    were within the tie margin on both sides is a near-tie, one far apart a decisive flip."""
    first = lm_eval_output(tmp_path / "shape")
    line = json.loads(next(iter(first.parent.glob("samples_*.jsonl"))).read_text().splitlines()[0])

    def samples(rows: list[tuple[bool, list[float]]]) -> str:
        return "".join(json.dumps({**line, "doc_id": i, "exact_match": float(right),
                                   "filtered_resps": [[str(v), "False"] for v in choices]}) + "\n"
                       for i, (right, choices) in enumerate(rows))

    a = lm_eval_output(tmp_path / "a", samples=samples([(True, [-1.00, -1.02]), (True, [-0.5, -3.5]),
                                                        (False, [-2.0, -1.0])]))
    b = lm_eval_output(tmp_path / "b", samples=samples([(False, [-1.01, -1.00]), (False, [-3.0, -0.5]),
                                                        (False, [-2.0, -1.0])]))
    report = explain(load_result(str(a), ledger), load_result(str(b), ledger), ledger)
    margins = report.margins
    assert margins is not None and (margins["near_ties"], margins["decisive"], margins["unknown"]) == (1, 1, 0)
    by_case = {c["case"]: c for c in margins["cases"]}
    assert by_case["tiny_qa/0"]["verdict"] == "near-tie" and by_case["tiny_qa/0"]["margin"] == pytest.approx(0.02)
    assert by_case["tiny_qa/1"]["verdict"] == "not a near-tie" and by_case["tiny_qa/1"]["margin"] == pytest.approx(3.0)
    assert "1 of them at near-ties" in report.sentence
    # generated-text samples (the suite's real lm-eval run) have no choices: no margins to report
    plain = load_result(str(first), ledger)
    assert explain(plain, plain, ledger).margins is None


def test_options_and_bad_input(tmp_path, ledger) -> None:
    with pytest.raises(UsageError, match="result A is empty"):
        ExplainOptions.from_sources(None, None, a=" ", b="x")
    with pytest.raises(UsageError, match="tie-margin"):
        ExplainOptions.from_sources(None, None, a="a", b="b", tie_margin=0)
    with pytest.raises(UsageError, match="--rerun A=URL --rerun B=URL"):
        ExplainOptions.from_sources(None, None, a="a", b="b", rerun={"A": "http://x/v1", "C": "http://y/v1"})
    with pytest.raises(UsageError, match="--cases and --sample are for --rerun"):
        ExplainOptions.from_sources(None, None, a="a", b="b", cases="cases.jsonl")
    options = ExplainOptions.from_sources(None, None, a=str(tmp_path / "nope.json"), b="x", ledger=ledger.path)
    with pytest.raises(InputError, match="neither a result file nor a ledger record"):
        run_explain(options)


def test_the_cli_exit_codes_and_json(cli, tmp_path, ledger_path, systems) -> None:
    a = write_result(tmp_path / "a.json", systems["base"][0], OUT_A)
    b = write_result(tmp_path / "b.json", systems["runtime"][0], OUT_B)
    unmeasured = cli("explain", str(a), str(b), "--json")
    assert unmeasured.returncode == 1, unmeasured.stderr
    assert unmeasured.json()["verdict"] == "unmeasured"
    with Ledger.open(ledger_path) as ledger:
        for _path, ident in systems.values():
            _probe(ledger, ident, "session", 20, 20)
    data = cli("explain", str(a), str(b), "--json").json()
    assert data["verdict"] == "attributable" and data["moved"] == ["runtime"]
    assert data["flips"]["right_to_wrong"] == 7 and data["noise"]["session"]["interval"] == [0, 2]
    same = cli("explain", str(a), str(a))
    assert same.returncode == 0 and "within-measured-noise" in same.stdout
    other = tmp_path / "other-ledger.sqlite3"
    elsewhere = cli("explain", str(a), str(b), "--ledger", str(other), "--json")
    assert elsewhere.returncode == 1 and elsewhere.json()["verdict"] == "unmeasured"
    bad = cli("explain", str(a), str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "neither a result file nor a ledger record" in bad.stderr
    no_cases = cli("explain", str(a), str(b), "--rerun", "A=http://127.0.0.1:9/v1", "--rerun", "B=http://127.0.0.1:9/v1")
    assert no_cases.returncode == 2 and "give --cases FILE" in no_cases.stderr
    disjoint = write_result(tmp_path / "c.json", systems["runtime"][0], {"other": True})
    none_shared = cli("explain", str(a), str(disjoint))
    assert none_shared.returncode == 2 and "share no case id" in none_shared.stderr
    top = cli("--help").stdout
    assert "explain" in top and "execsys explain A B" in top
    helped = cli("explain", "--help")
    assert helped.returncode == 0 and "example" in helped.stdout and "execsys explain " in helped.stdout


def test_two_lm_eval_results_of_10000_samples_are_paired_sample_by_sample(tmp_path, ledger) -> None:
    """The issue's performance case, checked for what it answers (its time and memory are measured in
    benchmarks/bench_explain.py, beside loading the same files with json): two lm-eval results of
    10,000 samples each, every sample paired by its document, each flip counted in its direction."""
    import random

    rng = random.Random(7)
    first = lm_eval_output(tmp_path / "a")
    line = json.loads(next(iter(first.parent.glob("samples_*.jsonl"))).read_text().splitlines()[0])
    right_a = [rng.random() < 0.7 for _ in range(10_000)]
    right_b = [r if rng.random() < 0.98 else not r for r in right_a]

    def samples(rights: list[bool]) -> str:
        return "".join(json.dumps({**line, "doc_id": i, "exact_match": float(r)}) + "\n" for i, r in enumerate(rights))

    a = lm_eval_output(tmp_path / "a", samples=samples(right_a))
    b = lm_eval_output(tmp_path / "b", samples=samples(right_b))
    report = run_explain(ExplainOptions.from_sources(None, None, a=str(a), b=str(b), ledger=ledger.path))
    worse = [f"tiny_qa/{i}" for i, (x, y) in enumerate(zip(right_a, right_b, strict=True)) if x and not y]
    better = [f"tiny_qa/{i}" for i, (x, y) in enumerate(zip(right_a, right_b, strict=True)) if y and not x]
    flips = report.flips
    assert (flips["n"], flips["only_in_a"], flips["only_in_b"]) == (10_000, 0, 0)
    assert (flips["right_to_wrong"], flips["wrong_to_right"]) == (len(worse), len(better))
    assert sorted(flips["flipped"]) == sorted(worse + better) and flips["flips"] == len(worse) + len(better)
    assert flips["difference"] == pytest.approx((len(better) - len(worse)) / 10_000)
    low, high = paired_difference_ci(len(worse), len(better), 10_000)  # type: ignore[misc]
    assert flips["ci95"] == pytest.approx([-high, -low])


# ------------------------------------------------------------------ end to end, real llama.cpp
def _cases(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"c{i:02d}", "prompt": f"Case {i}: what is {i}+{i}?", "max_tokens": 24})
                            + "\n" for i in range(n)))
    return path


def _pin(cli, directory: Path, endpoint: str) -> Path:
    directory.mkdir(exist_ok=True)
    (directory / "execsys.toml").write_text(f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{endpoint}"\n')
    pinned = cli("pin", "--json", cwd=directory, timeout=180)
    assert pinned.returncode == 0, pinned.stderr
    return directory / "execsys.lock.json"


def test_an_a_a_pair_on_llama_cpp_is_within_measured_noise(cli, tmp_path, llama_server, ledger_path) -> None:
    """Two passes of one session probe of the same pinned system: the session agreement that probe
    measured (1.0 on llama.cpp at temperature 0) licenses them, and explain says noise."""
    lock = _pin(cli, tmp_path / "project", llama_server.base_url)
    cases = _cases(tmp_path / "cases.jsonl", 12)
    probe = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", str(cases), "--lock", str(lock),
                "--json", timeout=300)
    assert probe.returncode == 0, probe.stderr
    record = probe.json()
    assert record["identity"] == json.loads(lock.read_text())["id"] and record["m"] == record["n"] == 12
    result = cli("explain", f"{record['id']}:0", f"{record['id']}:1", "--json")
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert data["verdict"] == "within-measured-noise" and data["moved"] == []
    assert data["axes"] == ["session"] and data["flips"]["flips"] == 0
    session = data["noise"]["session"]
    assert (session["status"], session["agreement"], session["n"]) == ("measured", 1.0, 12)
    assert "not distinguishable from run-to-run noise" in data["sentence"]


def test_an_a_a_pair_without_a_probe_of_its_identity_is_unmeasured(cli, tmp_path, llama_server, ledger_path) -> None:
    """The same two passes from a probe taken without a lock count toward no identity: nothing measured
    the noise, so explain does not assume it quiet and names the probe to run."""
    cases = _cases(tmp_path / "cases.jsonl", 6)
    probe = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", str(cases), "--json", timeout=300)
    assert probe.returncode == 0, probe.stderr
    record = probe.json()
    assert record["identity"] is None
    result = cli("explain", f"{record['id']}:0", f"{record['id']}:1", "--json")
    assert result.returncode == 1, result.stderr
    data = result.json()
    assert data["verdict"] == "unmeasured" and data["noise"]["session"]["status"] == "unmeasured"
    assert data["proposal"]["kind"] == "probe" and data["proposal"]["command"].startswith("execsys probe session ")
    assert data["proposal"]["command"].endswith("--lock execsys.lock.json")
    assert "no identity is pinned for" in data["sentence"]
    human = cli("explain", f"{record['id']}:0", f"{record['id']}:1")
    assert human.returncode == 1 and "unmeasured" in human.stdout


SMALL_BATCH = ["--n_batch", "8", "--n_ubatch", "8"]


def _declared_lock(path: Path, ledger_path: Path, **declared) -> Path:
    """A lock declaring the system, recorded in the ledger as ``execsys pin`` records it (an ``identity``
    record), so that what moved between two probes' identities can be derived."""
    ident = write_lock(path, **declared)
    with Ledger.open(ledger_path) as ledger:
        ledger.append("identity", json.loads(path.read_text()), identity=ident)
    return path


def _restart_probes(cli, tmp_path: Path, ledger_path: Path, restart_script, systems) -> list[dict[str, Any]]:
    """Per system ``(name, model file, server flags, declared components)``: a restartable llama.cpp
    server, its declared lock, and a restart probe of 40 cases under that lock; the probe records (their JSON)."""
    cases = _cases(tmp_path / "cases.jsonl", 40)
    records = []
    for name, model, flags, declared in systems:
        server = restart_script(model, extra_args=flags)
        lock = _declared_lock(tmp_path / f"{name}.lock.json", ledger_path, **declared)
        probe = cli("probe", "restart", "--endpoint", server.base_url, "--cases", str(cases), "--lock", str(lock),
                    "--restart", server.command, "--ready-timeout", "60", "--json", timeout=300)
        assert probe.stdout, probe.stderr
        record = probe.json()
        assert record["identity"] == json.loads(lock.read_text())["id"], probe.stderr
        assert record["n"] == 40 and record["evidence"]["verdict"] == "observed", record["evidence"]
        records.append(record)
    return records


def test_a_planted_artifact_swap_is_attributable_to_the_artifact(cli, tmp_path, tiny_gguf, restart_script,
                                                                 ledger_path) -> None:
    """The same server and flags, another model file: each system is stable across a restart (llama.cpp at
    temperature 0), so the restart agreement predicts almost no flips; the swap flips nearly every
    case, and the one component that moved is the artifact."""
    from tests.fixtures.llama import make_tiny_gguf

    other = make_tiny_gguf(tmp_path / "other.gguf", seed=1)
    runtime = {"engine": "llama-cpp-python"}
    records = _restart_probes(cli, tmp_path, ledger_path, restart_script, [
        ("seed0", tiny_gguf, (), {"runtime": runtime, "artifact": {"path": "tiny.gguf", "seed": 0}}),
        ("seed1", other, (), {"runtime": runtime, "artifact": {"path": "tiny.gguf", "seed": 1}}),
    ])
    assert all(r["m"] == r["n"] for r in records)
    result = cli("explain", f"{records[0]['id']}:1", f"{records[1]['id']}:1", "--json")
    assert result.returncode == 1, result.stderr
    data = result.json()
    assert data["moved"] == ["artifact"] and data["axes"] == ["restart"]
    restart = data["noise"]["restart"]
    assert (restart["status"], restart["agreement"], restart["n"], restart["cases"]) == ("measured", 1.0, 40, 40)
    assert restart["interval"] == list(noise_floor([(40, 40)], 40).interval)
    assert data["flips"]["flips"] > restart["interval"][1]
    assert data["verdict"] == "attributable" and "attributable to artifact" in data["sentence"]
    # the probes kept logprobs: each flip's margin at its first divergent token is accounted for
    margins = data["margins"]
    assert margins is not None and {c["case"] for c in margins["cases"]} == set(data["flips"]["flipped"])
    assert margins["near_ties"] + margins["decisive"] + margins["unknown"] == data["flips"]["flips"]


def test_a_planted_n_batch_change_on_the_near_tie_model_is_judged_against_its_own_noise(
        cli, tmp_path, tie_gguf, restart_script, ledger_path) -> None:
    """The near-tie model served with default flags and with ``--n_batch 8 --n_ubatch 8``, each declared and
    probed across a restart of its own. Measured here first (2026-12-03, CPU): the small-batch server
    does not repeat itself across a restart (30 of 40 agreed), so the batch change's flips are judged
    against that floor: the runtime is what moved, and the verdict follows the numbers."""
    records = _restart_probes(cli, tmp_path, ledger_path, restart_script, [
        ("default", tie_gguf, (), {"runtime": {"engine": "llama-cpp-python", "flags": []}}),
        ("small", tie_gguf, SMALL_BATCH, {"runtime": {"engine": "llama-cpp-python", "flags": SMALL_BATCH}}),
    ])
    result = cli("explain", f"{records[0]['id']}:1", f"{records[1]['id']}:1", "--json")
    data = result.json()
    assert data["moved"] == ["runtime"] and data["axes"] == ["restart"]
    restart = data["noise"]["restart"]
    noisier = min(records, key=lambda r: (r["m"] / r["n"], r["n"]))
    assert (restart["status"], restart["m"], restart["n"]) == ("measured", noisier["m"], noisier["n"])
    assert restart["interval"] == list(noise_floor([(noisier["m"], noisier["n"])], data["flips"]["n"]).interval)
    beyond = data["flips"]["flips"] > restart["interval"][1]
    assert data["verdict"] == ("attributable" if beyond else "within-measured-noise"), data["sentence"]
    assert result.returncode == (1 if beyond else 0)


def test_two_causes_planted_at_once_are_not_attributable_and_the_plans_separate_them(
        cli, tmp_path, tiny_gguf, restart_script, ledger_path) -> None:
    """Another model file and a smaller batch at once: the flips are beyond the noise, but two components
    moved, so explain names neither and proposes one paired plan per component."""
    from tests.fixtures.llama import make_tiny_gguf

    other = make_tiny_gguf(tmp_path / "other.gguf", seed=1)
    records = _restart_probes(cli, tmp_path, ledger_path, restart_script, [
        ("base", tiny_gguf, (), {"runtime": {"engine": "llama-cpp-python", "flags": []},
                                 "artifact": {"path": "tiny.gguf", "seed": 0}}),
        ("both", other, SMALL_BATCH, {"runtime": {"engine": "llama-cpp-python", "flags": SMALL_BATCH},
                                      "artifact": {"path": "tiny.gguf", "seed": 1}}),
    ])
    result = cli("explain", f"{records[0]['id']}:1", f"{records[1]['id']}:1", "--json")
    assert result.returncode == 1, result.stderr
    data = result.json()
    assert sorted(data["moved"]) == ["artifact", "runtime"] and data["noise"]["restart"]["status"] == "measured"
    assert data["flips"]["flips"] > data["noise"]["restart"]["interval"][1]
    assert data["verdict"] == "not-attributable" and "2 components moved" in data["sentence"]
    plans = data["proposal"]["plans"]
    assert sorted(p["varies"] for p in plans) == ["artifact", "runtime"]
    assert all(p["command"].startswith("execsys plan new --arms A A-with-") and "--design abba" in p["command"]
               for p in plans)
    human = cli("explain", f"{records[0]['id']}:1", f"{records[1]['id']}:1")
    assert "not-attributable" in human.stdout and "varies artifact" in human.stdout


def test_a_planted_max_tokens_change_is_attributable_to_the_budget(cli, tmp_path, tiny_gguf, restart_script,
                                                                  ledger_path) -> None:
    """One server, two declared budgets: the cases sent with max_tokens 24, then with 4. Each is stable
    across a restart; the shorter budget truncates every longer answer, and the budget is what moved."""
    server = restart_script(tiny_gguf)
    records = []
    for name, max_tokens in (("long", 24), ("short", 4)):
        cases = tmp_path / f"{name}.jsonl"
        cases.write_text("".join(json.dumps({"id": f"c{i:02d}", "prompt": f"Case {i}: what is {i}+{i}?",
                                             "max_tokens": max_tokens}) + "\n" for i in range(20)))
        lock = _declared_lock(tmp_path / f"{name}.lock.json", ledger_path,
                              runtime={"engine": "llama-cpp-python"}, budget={"max_tokens": max_tokens})
        probe = cli("probe", "restart", "--endpoint", server.base_url, "--cases", str(cases), "--lock", str(lock),
                    "--restart", server.command, "--ready-timeout", "60", "--json", timeout=300)
        assert probe.stdout, probe.stderr
        record = probe.json()
        assert record["m"] == record["n"] == 20 and record["evidence"]["verdict"] == "observed"
        records.append(record)
    data = cli("explain", f"{records[0]['id']}:0", f"{records[1]['id']}:0", "--json").json()
    assert data["moved"] == ["budget"] and data["verdict"] == "attributable", data["sentence"]
    assert data["flips"]["flips"] > data["noise"]["restart"]["interval"][1]


# two graders of one answer: exact match, and a prefix match (lm-eval's exact_match beside a regex filter)
STRICT_GRADER = "import json, sys\ncase = json.load(sys.stdin)\nprint(int(case['output'].strip() == case['expected']))\n"
LENIENT_GRADER = ("import json, sys\ncase = json.load(sys.stdin)\n"
                  "print(int(case['output'].strip().startswith(case['expected'])))\n")


def _grade(script: Path, case: dict[str, Any]) -> bool:
    """One grading by a grader command: the case as JSON on stdin, ``1`` or ``0`` on stdout."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(script)], input=json.dumps(case), capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.strip() == "1"


def test_a_planted_grader_change_is_attributable_to_the_grader(cli, tmp_path, restart_script, ledger_path) -> None:
    """One llama.cpp server and one set of cases, two declared graders: exact match and prefix match.
    Each system is probed across a restart of the real server (stable at temperature 0); the answers the
    probes recorded are graded by each system's own grader command, and the graded results explained:
    the model's answers did not move, the grader did, and it turns the even cases (expected: the answer's
    first three characters) from wrong to right, beyond the restart noise."""
    server = restart_script()
    graders = {"strict": STRICT_GRADER, "lenient": LENIENT_GRADER}
    records, results = {}, {}
    cases = _cases(tmp_path / "cases.jsonl", 20)
    for name, source in graders.items():
        script = tmp_path / f"{name}.py"
        script.write_text(source)
        lock = _declared_lock(tmp_path / f"{name}.lock.json", ledger_path, runtime={"engine": "llama-cpp-python"},
                              grader={"command": f"python {script.name}"})
        probe = cli("probe", "restart", "--endpoint", server.base_url, "--cases", str(cases), "--lock", str(lock),
                    "--restart", server.command, "--ready-timeout", "60", "--json", timeout=300)
        assert probe.stdout, probe.stderr
        record = probe.json()
        assert record["m"] == record["n"] == 20 and record["evidence"]["verdict"] == "observed", record["evidence"]
        records[name] = record
        with Ledger.open(ledger_path) as ledger:
            answers = {row.body["case"]: row.body["text"] for row in ledger.find(kind="probe-case", parent=record["run"])
                       if row.body["pass"] == 0}
        assert len(answers) == 20 and all(len(text.strip()) > 3 for text in answers.values()), answers
        if name == "strict":  # one answer key for both: the whole answer on odd cases, its first 3 characters on even
            expected = {case: text.strip()[:3] if int(case[1:]) % 2 == 0 else text.strip()
                        for case, text in answers.items()}
        outcomes = {case: _grade(script, {"id": case, "prompt": "", "output": text, "expected": expected[case]})
                    for case, text in answers.items()}
        result = tmp_path / f"{name}.result.json"
        result.write_text(json.dumps({"schema": "execsys.result/1", "identity": lock.name, "outcomes": outcomes,
                                      "session": record["id"]}))
        results[name] = result
    # the same server and cases: both probes' answers are the same answers (only the grading differs)
    result = cli("explain", str(results["strict"]), str(results["lenient"]), "--json")
    assert result.returncode == 1, result.stderr
    data = result.json()
    assert data["moved"] == ["grader"] and data["axes"] == ["restart"]
    flips = data["flips"]
    assert (flips["right_to_wrong"], flips["wrong_to_right"], flips["n"]) == (0, 10, 20)
    assert sorted(flips["flipped"]) == [f"c{i:02d}" for i in range(0, 20, 2)]
    restart = data["noise"]["restart"]
    assert (restart["status"], restart["m"], restart["n"]) == ("measured", 20, 20)
    assert restart["interval"] == list(noise_floor([(20, 20)], 20).interval) and flips["flips"] > restart["interval"][1]
    assert data["verdict"] == "attributable" and "attributable to grader, the one component that moved" in data["sentence"]


def test_rerun_sends_the_flips_again_and_they_reproduce_on_a_deterministic_pair(cli, tmp_path, tiny_gguf,
                                                                                ledger_path) -> None:
    """A paired run of two real llama.cpp servers (two model files) flips half its cases; --rerun sends those
    flips and a sample of the agreeing cases to both again in a registered AB/BA window, and at temperature 0
    every flip comes back as it was: a system effect, not noise."""
    from execsys.probes.cases import load_cases
    from execsys.probes.client import EndpointClient

    from tests.fixtures.llama import make_tiny_gguf, start_llama_server

    other = make_tiny_gguf(tmp_path / "other.gguf", seed=1)
    probe_cases = tmp_path / "probe.jsonl"
    probe_cases.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"Item {i} says", "max_tokens": 8}) + "\n"
                                   for i in range(16)))
    with start_llama_server(tiny_gguf) as first, start_llama_server(other) as second:
        texts = []
        for server in (first, second):
            with EndpointClient(server.base_url, timeout=60) as client:
                model = client.resolve_model(None)
                texts.append({c.id: (client.complete(c, {"temperature": 0, "model": model}).text or "").strip()
                              for c in load_cases(probe_cases)})
        # A's answer is the expected one on even cases, B's on odd ones: the two arms flip on all of them
        cases = tmp_path / "cases.jsonl"
        cases.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"Item {i} says", "max_tokens": 8,
                                             "expected": texts[i % 2][f"c{i}"]}) + "\n" for i in range(16)))
        plan = tmp_path / "plan.json"
        assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(plan)).returncode == 0
        ran = cli("plan", "run", str(plan), "--arm", f"A={first.base_url}", "--arm", f"B={second.base_url}",
                  "--json", timeout=300)
        assert ran.returncode in (0, 1), ran.stderr
        record = ran.json()["record"]
        plain = cli("explain", f"{record}:A", f"{record}:B", "--json").json()
        flips = plain["flips"]["flips"]
        assert flips >= 8 and plain["rerun"] is None
        result = cli("explain", f"{record}:A", f"{record}:B", "--rerun", f"A={first.base_url}",
                     "--rerun", f"B={second.base_url}", "--sample", "4", "--json", timeout=300)
    assert result.returncode == 1, result.stderr
    data = result.json()
    rerun = data["rerun"]
    assert (rerun["flipped"], rerun["reproduced"], rerun["agreeing"], rerun["newly_flipped"]) == (
        flips, flips, min(4, 16 - flips), 0)
    assert rerun["finding"] == "most flips reproduce: a system effect"
    with Ledger.open(ledger_path) as ledger:
        again = ledger.get(rerun["record"])
    assert again.kind == "plan-run" and len(again.body["outcomes"]) == flips + rerun["agreeing"]
    assert data["verdict"] == plain["verdict"]  # the re-run is evidence beside the verdict, not a new one
    bad = cli("explain", f"{record}:A", f"{record}:B", "--rerun", f"A={first.base_url}")
    assert bad.returncode == 2 and "--rerun A=URL --rerun B=URL" in bad.stderr
