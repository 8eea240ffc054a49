"""`execsys compare A B`: what moved between two results, and when a causal sentence is allowed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.ledger import Ledger


def write_lock(path: Path, **declared) -> str:
    components = {name: {"declared": dict(declared.get(name, {})), "observed": {}} for name in COMPONENTS}
    data = {"schema": "execsys.identity/1", "id": content_id(components), "recorded_at": "2026-11-30T00:00:00Z",
            "declaration": {}, "components": components, "notes": []}
    path.write_text(json.dumps(data))
    return data["id"]


def write_result(path: Path, lock: str, outcomes: dict[str, bool], session: str | None = "s1", **extra) -> Path:
    data = {"schema": "execsys.result/1", "identity": lock, "outcomes": outcomes, **extra}
    if session is not None:
        data["session"] = session
    path.write_text(json.dumps(data))
    return path


def add_probe(ledger_path: Path, identity: str, axis: str, m: int, n: int) -> None:
    with Ledger.open(ledger_path) as ledger:
        ledger.append("probe", {"schema": "execsys.probe/1", "axis": axis, "identity": identity, "m": m, "n": n,
                                "agreement_rate": m / n}, identity=identity)


# A right on 0-6 and 10-11; B right on 7 and 10-11: b = 7, c = 1, n = 12.
OUT_A = {f"q{i}": i < 7 or i >= 10 for i in range(12)}
OUT_B = {f"q{i}": i == 7 or i >= 10 for i in range(12)}


@pytest.fixture
def locks(tmp_path: Path) -> dict[str, tuple[str, str]]:
    base = {"hardware": {"host": "gpu1"}, "runtime": {"engine": "vllm", "version": "0.10.0"}, "model": {"name": "m"}}
    paths = {}
    for name, declared in {
        "base": base,
        "runtime": {**base, "runtime": {"engine": "vllm", "version": "0.11.0"}},
        "runtime+hardware": {**base, "runtime": {"engine": "vllm", "version": "0.11.0"}, "hardware": {"host": "gpu2"}},
    }.items():
        path = tmp_path / f"{name}.lock.json"
        paths[name] = (str(path), write_lock(path, **declared))
    return paths


def test_one_moved_component_in_one_session_is_causal(cli, tmp_path, locks, ledger_path) -> None:
    a = write_result(tmp_path / "a.json", locks["base"][0], OUT_A)
    b = write_result(tmp_path / "b.json", locks["runtime"][0], OUT_B)
    result = cli("compare", str(a), str(b), "--intervention", "runtime", "--json")
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert data["schema"] == "execsys.comparison/1"
    assert data["moved"] == ["runtime"] and data["label"] == "causal" and data["crossed"] == []
    paired = data["paired"]
    assert (paired["n"], paired["b"], paired["c"]) == (12, 7, 1)
    hand_p = 2 * (math.comb(8, 0) + math.comb(8, 1)) / 2**8
    assert paired["mcnemar_p"] == pytest.approx(hand_p)
    assert paired["difference"] == pytest.approx((1 - 7) / 12)
    assert data["statement"].startswith("Causal")
    assert "changing runtime" in data["statement"]
    with Ledger.open(ledger_path) as ledger:
        recorded = ledger.find(kind="comparison")
    assert [r.id for r in recorded] == [data["record"]]
    assert recorded[0].body["label"] == "causal"


def test_more_than_the_intervention_moved_is_descriptive(cli, tmp_path, locks) -> None:
    a = write_result(tmp_path / "a.json", locks["base"][0], OUT_A)
    b = write_result(tmp_path / "b.json", locks["runtime+hardware"][0], OUT_B)
    result = cli("compare", str(a), str(b), "--intervention", "runtime", "--json")
    assert result.returncode == 1
    data = result.json()
    assert data["label"] == "descriptive"
    assert set(data["moved"]) == {"runtime", "hardware"}
    assert any("more than the declared intervention moved: hardware" in r for r in data["reasons"])
    statement = data["statement"]
    assert statement.startswith("Descriptive only")
    assert "0.750" in statement and "0.250" in statement  # both numbers reported
    assert "caus" not in statement.split("No causal claim")[0].lower()
    assert "moved the rate" not in statement
    human = cli("compare", str(a), str(b), "--intervention", "runtime")
    assert "descriptive" in human.stdout and "hardware" in human.stdout
    # declaring a component that did not move is not "more than" it: the sentence says what happened
    wrong = cli("compare", str(a), str(b), "--intervention", "budget", "--json").json()
    assert wrong["label"] == "descriptive"
    assert "the declared intervention (budget) did not move; runtime, hardware moved instead" in wrong["reasons"]


def test_no_declared_intervention_is_descriptive(cli, tmp_path, locks) -> None:
    a = write_result(tmp_path / "a.json", locks["base"][0], OUT_A)
    b = write_result(tmp_path / "b.json", locks["runtime"][0], OUT_B)
    data = cli("compare", str(a), str(b), "--json").json()
    assert data["label"] == "descriptive" and "no intervention declared" in data["reasons"][0]


def test_different_sessions_need_a_licensed_restart(cli, tmp_path, locks, ledger_path) -> None:
    a = write_result(tmp_path / "a.json", locks["base"][0], OUT_A, session="monday")
    b = write_result(tmp_path / "b.json", locks["runtime"][0], OUT_B, session="tuesday")
    unmeasured = cli("compare", str(a), str(b), "--intervention", "runtime", "--json").json()
    assert unmeasured["label"] == "descriptive" and unmeasured["crossed"] == ["restart"]
    assert any("restart was never probed" in r for r in unmeasured["reasons"])

    for _name, (_path, ident) in locks.items():
        add_probe(ledger_path, ident, "restart", 20, 20)
    licensed = cli("compare", str(a), str(b), "--intervention", "runtime", "--json")
    assert licensed.returncode == 0 and licensed.json()["label"] == "causal"
    assert "across restart" in licensed.json()["statement"]

    # later the restart axis turns out unstable: the causal comparison needs re-evaluation
    add_probe(ledger_path, locks["base"][1], "restart", 12, 20)
    unstable = cli("compare", str(a), str(b), "--intervention", "runtime", "--json").json()
    assert unstable["label"] == "descriptive"
    assert any("restart is unstable" in r and "32/40 = 0.80" in r for r in unstable["reasons"])
    audit = cli("scope", "--audit", "--json")
    assert audit.returncode == 1
    flagged = {c["comparison"]: c["verdict"] for c in audit.json()["comparisons"]}
    assert flagged[licensed.json()["record"]] == "needs re-evaluation or a paired control"


def test_hosts_crossed_when_hosts_differ(cli, tmp_path, locks) -> None:
    a = write_result(tmp_path / "a.json", locks["base"][0], OUT_A, session="x", host="gpu1")
    b = write_result(tmp_path / "b.json", locks["runtime"][0], OUT_B, session="y", host="gpu2")
    data = cli("compare", str(a), str(b), "--intervention", "runtime", "--json").json()
    assert data["crossed"] == ["restart", "hosts"] and data["label"] == "descriptive"


def test_arms_of_one_paired_run(cli, ledger_path) -> None:
    outcomes = {f"q{i}": {"A": {"correct": OUT_A[f"q{i}"], "error": None},
                          "B": {"correct": OUT_B[f"q{i}"], "error": None}} for i in range(12)}
    with Ledger.open(ledger_path) as ledger:
        rid = ledger.append("plan-run", {"schema": "execsys.plan-run/1", "arms": {"A": {"host": "local"},
                                         "B": {"host": "local"}}, "outcomes": outcomes, "label": "causal",
                                         "checks": [{"name": "order", "passed": True, "detail": ""}]})
    data = cli("compare", f"{rid}:A", f"{rid}:B", "--json").json()
    assert data["label"] == "causal" and data["paired_control"] is True
    assert "one contemporaneous paired run" in data["statement"]
    assert (data["paired"]["b"], data["paired"]["c"]) == (7, 1)
    missing_arm = cli("compare", f"{rid}:A", f"{rid}", "--json")
    assert missing_arm.returncode == 2 and "ARM" in missing_arm.stderr


@pytest.mark.parametrize(
    ("content", "needle"),
    [("not json", "not a readable JSON result"),
     (json.dumps({"outcomes": {"a": True}}), "'identity'"),
     (json.dumps({"identity": "x.lock.json", "outcomes": {}}), "'outcomes'"),
     (json.dumps([1, 2]), "JSON object")],
)
def test_bad_result_files_are_exit_2(cli, tmp_path, locks, content: str, needle: str) -> None:
    good = write_result(tmp_path / "good.json", locks["base"][0], OUT_A)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = cli("compare", str(good), str(bad))
    assert result.returncode == 2 and needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    nothing = cli("compare", str(good), str(tmp_path / "absent.json"))
    assert nothing.returncode == 2


def test_unknown_intervention_component(cli, tmp_path, locks) -> None:
    a = write_result(tmp_path / "a.json", locks["base"][0], OUT_A)
    result = cli("compare", str(a), str(a), "--intervention", "vibes")
    assert result.returncode == 2 and "not a component" in result.stderr
