"""`compare` in-process (execsys/compare.py): the label, the reasons and the sentence a user reads, from
real lock files, result files and ledger records.

Written for mutants that survived scripts/mutation.sh (test_compare.py drives `execsys compare` in
subprocesses, where a mutant cannot be seen). The figures are counted by hand from the outcomes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.compare import Result, compare, load_result
from execsys.errors import InputError, UsageError
from execsys.identity import SCHEMA
from execsys.ledger import Ledger

# A right on q0-q6 and q10-q11; B right on q7 and q10-q11: b = 7, c = 1, n = 12.
OUT_A = {f"q{i}": i < 7 or i >= 10 for i in range(12)}
OUT_B = {f"q{i}": i == 7 or i >= 10 for i in range(12)}
BASE = {"hardware": {"host": "gpu1"}, "runtime": {"engine": "vllm", "version": "0.10.0"}, "model": {"name": "m"}}


def write_lock(path: Path, **declared) -> str:
    components = {name: {"declared": dict(declared.get(name, {})), "observed": {}} for name in COMPONENTS}
    data = {"schema": SCHEMA, "id": content_id(components), "recorded_at": "2026-11-30T00:00:00Z",
            "declaration": {}, "components": components, "notes": []}
    path.write_text(json.dumps(data))
    return data["id"]


def write_result(path: Path, lock: Path, outcomes: dict, session: str | None = "s1", **extra) -> Path:
    data = {"schema": "execsys.result/1", "identity": lock.name, "outcomes": outcomes, **extra}
    if session is not None:
        data["session"] = session
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def ledger(tmp_path: Path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as opened:
        yield opened


@pytest.fixture
def locks(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    out = {}
    for name, declared in {
        "base": BASE,
        "runtime": {**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}},
        "both": {**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}, "hardware": {"host": "gpu2"}},
    }.items():
        path = tmp_path / f"{name}.lock.json"
        out[name] = (path, write_lock(path, **declared))
    return out


def probe(ledger: Ledger, identity: str, axis: str, m: int, n: int) -> None:
    ledger.append("probe", {"axis": axis, "identity": identity, "m": m, "n": n}, identity=identity)


def test_one_moved_component_in_one_session_is_causal(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["runtime"][0], OUT_B)), ledger)
    assert a.identity.id == locks["base"][1] and a.session == "s1" and a.concurrency is None
    result = compare(a, b, ledger, ["runtime"])
    assert (result.label, result.moved, result.reasons, result.crossed) == ("causal", ["runtime"], [], [])
    assert result.changes["runtime"] == [{"field": "declared.version", "old": "0.10.0", "new": "0.11.0"}]
    p = result.paired
    assert p is not None
    assert (p["kind"], p["n"], p["b"], p["c"], p["only_in_a"], p["only_in_b"]) == ("paired", 12, 7, 1, 0, 0)
    assert (p["rate_a"], p["rate_b"], p["difference"]) == (pytest.approx(9 / 12), pytest.approx(3 / 12),
                                                           pytest.approx(-0.5))
    assert p["mcnemar_p"] == pytest.approx(18 / 256)  # 2 * (1 + 8) / 2^8
    low, high = p["ci95"]
    assert low < -0.5 < high < 0  # B - A: the effect of moving to B, with its sign
    assert result.statement == (
        f"Causal, inside one session: changing runtime moved the rate by -0.500 (B - A, 95% CI {low:+.3f} to "
        f"{high:+.3f}; discordant 7 vs 1, exact McNemar p = 0.07031, n = 12 paired cases). "
        f"A ({a.ref}) 0.750 over 12 cases, B ({b.ref}) 0.250 over 12 cases.")
    assert result.record is not None
    stored = ledger.get(result.record)
    assert stored.kind == "comparison" and stored.identity == locks["base"][1]
    assert stored.body["identities"] == sorted([locks["base"][1], locks["runtime"][1]])
    assert stored.body["a"] == {"ref": a.ref, "identity": a.identity.id, "session": "s1", "host": None,
                                "concurrency": None, "n": 12, "rate": 0.75, "run": None}


def test_what_makes_a_comparison_descriptive(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["both"][0], OUT_B)), ledger)
    more = compare(a, b, ledger, ["runtime"], record=False)
    assert more.label == "descriptive" and more.moved == ["runtime", "hardware"]
    assert more.reasons == ["more than the declared intervention moved: hardware"]
    assert more.statement == (f"Descriptive only: A ({a.ref}) 0.750 over 12 cases, B ({b.ref}) 0.250 over 12 "
                              "cases. No causal claim: more than the declared intervention moved: hardware.")
    assert compare(a, b, ledger, ["budget"], record=False).reasons == [
        "the declared intervention (budget) did not move; runtime, hardware moved instead"]
    assert compare(a, b, ledger, record=False).reasons == [
        "no intervention declared (give --intervention COMPONENT); moved: runtime, hardware"]
    same = compare(a, a, ledger, record=False)
    assert same.reasons == ["no intervention declared (give --intervention COMPONENT); no component moved"]
    assert compare(a, a, ledger, ["runtime"], record=False).reasons == [
        "the declared intervention (runtime) did not move"]
    assert compare(a, b, ledger, ["runtime", "hardware"], record=False).label == "causal"
    with pytest.raises(UsageError, match=r"^--intervention 'vibes': not a component \(one of model, artifact, "):
        compare(a, b, ledger, ["vibes"], record=False)


def test_different_sessions_need_a_licensed_restart(tmp_path: Path, locks, ledger: Ledger) -> None:
    base, runtime = locks["base"], locks["runtime"]
    a = load_result(str(write_result(tmp_path / "a.json", base[0], OUT_A, session="s1")), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", runtime[0], OUT_B, session="s2")), ledger)
    unmeasured = compare(a, b, ledger, ["runtime"], record=False)
    assert unmeasured.crossed == ["restart"] and unmeasured.label == "descriptive"
    assert unmeasured.reasons == [f"different sessions and restart was never probed under identity {base[1][:12]}",
                                  f"different sessions and restart was never probed under identity {runtime[1][:12]}"]
    probe(ledger, base[1], "restart", 20, 20)
    probe(ledger, runtime[1], "restart", 20, 20)
    licensed = compare(a, b, ledger, ["runtime"], record=False)
    assert licensed.label == "causal"
    assert licensed.statement.startswith("Causal, across restart (licensed at agreement 1.0): changing runtime ")
    probe(ledger, runtime[1], "restart", 2, 10)
    unstable = compare(a, b, ledger, ["runtime"], record=False)
    assert unstable.reasons == [f"different sessions and restart is unstable under identity {runtime[1][:12]} "
                                "(restart agreement 22/30 = 0.73, 95% CI 0.56-0.86)"]


def test_machines_and_load_are_crossed_when_they_differ(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], OUT_A, session=None, host="gpu1",
                                     concurrency=1)), ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["base"][0], OUT_B, session=None, host="gpu2",
                                     concurrency=8)), ledger)
    assert (a.host, b.concurrency) == ("gpu1", 8)
    assert compare(a, b, ledger, record=False).crossed == ["restart", "hosts", "concurrency"]


def test_answers_are_compared_by_agreement(tmp_path: Path, locks, ledger: Ledger) -> None:
    a = load_result(str(write_result(tmp_path / "a.json", locks["base"][0], {"c1": "42", "c2": 1, "c3": "x"})),
                    ledger)
    b = load_result(str(write_result(tmp_path / "b.json", locks["base"][0], {"c1": "42", "c2": 1, "c4": "y"})),
                    ledger)
    assert a.binary() is None
    result = compare(a, b, ledger, record=False)
    assert result.paired == {"kind": "agreement", "n": 2, "agree": 2, "agreement_rate": 1.0}
    assert result.statement.startswith(f"Descriptive only: A ({a.ref}) and B ({b.ref}): outcomes agree on 2/2 "
                                       "shared cases. No causal claim: ")


def test_outcomes_as_right_or_wrong() -> None:
    from execsys.scope import IdentityRef

    ident = IdentityRef("i")
    assert Result("r", ident, {"a": True, "b": 0, "c": 1.0, "d": {"correct": False}}).binary() == {
        "a": True, "b": False, "c": True, "d": False}
    assert Result("r", ident, {"a": 2}).binary() is None
    assert Result("r", ident, {"a": {"correct": 1}}).binary() is None
    assert Result("r", ident, {"a": True, "b": False, "c": False, "d": True}).to_json()["rate"] == 0.5
    assert Result("r", ident, {"a": "text"}).to_json()["rate"] is None


def test_the_arms_of_one_paired_run_are_a_paired_control(ledger: Ledger, locks) -> None:
    outcomes = {f"q{i}": {"A": {"correct": OUT_A[f"q{i}"]}, "B": {"correct": OUT_B[f"q{i}"]}} for i in range(12)}
    outcomes["q12"] = {"A": {"correct": True}, "B": {"error": "timeout"}}
    run = ledger.append("plan-run", {"arms": {"A": {"host": "gpu1"}, "B": {"host": "gpu2"}}, "outcomes": outcomes,
                                     "checks": [{"name": "order", "passed": True}]}, identity=locks["base"][1])
    a, b = load_result(f"{run}:A", ledger), load_result(f"{run}:B", ledger)
    assert (len(a.outcomes), len(b.outcomes), a.host, b.host, a.paired_run) == (13, 12, "gpu1", "gpu2", run)
    result = compare(a, b, ledger, record=False)
    assert result.paired_control and result.crossed == [] and result.label == "causal"
    assert result.paired is not None and result.paired["only_in_a"] == 1
    assert result.statement.startswith("Causal, inside one contemporaneous paired run: switching from "
                                       f"{run}:A to {run}:B moved the rate by -0.500 ")
    failed = ledger.append("plan-run", {"arms": {"A": {}, "B": {}}, "outcomes": outcomes,
                                        "checks": [{"name": "window", "passed": False, "detail": "arms 3 h apart"}]})
    broken = compare(load_result(f"{failed}:A", ledger), load_result(f"{failed}:B", ledger), ledger, record=False)
    assert broken.label == "descriptive"
    assert broken.reasons == ["the paired run's check failed (window: arms 3 h apart)"]
    with pytest.raises(InputError, match=f"^{run}:C: name one arm of the paired run as {run}:ARM \\(arms: A, B\\)$"):
        load_result(f"{run}:C", ledger)


def test_a_probe_pass_is_a_result(ledger: Ledger, locks) -> None:
    cases = [{"id": "c1", "passes": [{"digest": "d1", "outcome": "7"}, {"digest": "d2", "outcome": "8"}]},
             {"id": "c2", "passes": [{"digest": "d3", "outcome": None}, {"error": "HTTP 500"}]}]
    record = ledger.append("probe", {"axis": "session", "m": 0, "n": 1, "cases": cases}, identity=locks["base"][1])
    first, second = load_result(f"{record}:0", ledger), load_result(f"{record}:1", ledger)
    assert first.outcomes == {"c1": "7", "c2": "d3"} and first.session == f"{record}:pass0"
    assert second.outcomes == {"c1": "8"}
    assert load_result(record, ledger).outcomes == first.outcomes
    with pytest.raises(InputError, match=f"^{record}:x: name a pass of the probe as {record}:0, :1, ...$"):
        load_result(f"{record}:x", ledger)


def test_bad_references_are_one_line(tmp_path: Path, ledger: Ledger, locks) -> None:
    def problem(ref: str) -> str:
        with pytest.raises(InputError) as caught:
            load_result(ref, ledger)
        return str(caught.value)

    assert problem("nothing-here") == "nothing-here: neither a result file nor a ledger record"
    doctor = ledger.append("doctor", {})
    assert problem(doctor) == f"{doctor}: ledger record {doctor} is a doctor record, not a result"
    lock = locks["base"][0]
    for body, needle in (([1], "a result file is a JSON object (execsys.result/1)"),
                         ({"schema": "x/1", "identity": "i", "outcomes": {"a": 1}}, "schema 'x/1' is not execsys.result/1"),
                         ({"outcomes": {"a": 1}}, "'identity' (a lock path, ledger id or identity id) is required"),
                         ({"identity": lock.name, "outcomes": {}}, "'outcomes' must be a non-empty object"),
                         ({"identity": lock.name, "outcomes": {"a": 1}, "concurrency": True},
                          "'concurrency' must be an integer")):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(body))
        assert problem(str(path)).startswith(f"{path}: {needle}"), body
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    assert problem(str(path)).startswith(f"{path}: not a readable JSON result file (")
