"""`execsys compare A B`: what moved between two results, and when a causal sentence is allowed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.ledger import Ledger
from tests.fixtures.compare_records import LM_EVAL, LM_EVAL_STAMP


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
    assert data["reasons"] == [f"you named runtime; what moved: {', '.join(data['moved'])}"]
    statement = data["statement"]
    assert statement.startswith("Descriptive only")
    assert "0.750" in statement and "0.250" in statement  # both numbers reported
    assert "caus" not in statement.split("No causal claim")[0].lower()
    assert "moved the rate" not in statement
    human = cli("compare", str(a), str(b), "--intervention", "runtime")
    assert "descriptive" in human.stdout and "hardware" in human.stdout
    # declaring a component that did not move: the sentence says what happened
    wrong = cli("compare", str(a), str(b), "--intervention", "budget", "--json").json()
    assert wrong["label"] == "descriptive"
    assert f"you named budget; what moved: {', '.join(wrong['moved'])}" in wrong["reasons"]


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
    ident = "c" * 64  # each arm's own system observed, and the same one (the arms differ in their requests)
    with Ledger.open(ledger_path) as ledger:
        rid = ledger.append("plan-run", {"schema": "execsys.plan-run/1", "arms": {
                                         "A": {"host": "local", "identity": ident},
                                         "B": {"host": "local", "identity": ident}}, "outcomes": outcomes,
                                         "label": "causal",
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


def record_locks(ledger_path: Path, *paths: str) -> None:
    """The locks' identities in the ledger, as `execsys pin` records them."""
    with Ledger.open(ledger_path) as ledger:
        for path in paths:
            data = json.loads(Path(path).read_text())
            ledger.append("identity", data, identity=data["id"])


def test_the_intervention_is_causal_only_when_it_is_exactly_what_moved(cli, tmp_path, locks) -> None:
    a = write_result(tmp_path / "a.json", locks["base"][0], OUT_A)
    b = write_result(tmp_path / "b.json", locks["runtime"][0], OUT_B)
    right = cli("compare", str(a), str(b), "--intervention", "runtime", "--json")
    assert right.returncode == 0 and right.json()["label"] == "causal"
    for named, reason in ((["budget"], "you named budget; what moved: runtime"),
                          (["runtime", "budget"], "you named runtime, budget; what moved: runtime")):
        flags = [arg for name in named for arg in ("--intervention", name)]
        wrong = cli("compare", str(a), str(b), *flags, "--json")
        assert wrong.returncode == 1 and wrong.json()["label"] == "descriptive"
        assert wrong.json()["reasons"] == [reason]
        assert "moved the rate" not in wrong.json()["statement"]
    human = cli("compare", str(a), str(b), "--intervention", "budget")
    assert "you named budget; what moved: runtime" in human.stdout


def _plan_run(ledger_path: Path, arms: dict) -> str:
    outcomes = {f"q{i}": {"A": {"correct": OUT_A[f"q{i}"], "error": None},
                          "B": {"correct": OUT_B[f"q{i}"], "error": None}} for i in range(12)}
    with Ledger.open(ledger_path) as ledger:
        return ledger.append("plan-run", {"schema": "execsys.plan-run/1", "arms": arms, "outcomes": outcomes,
                                          "label": "causal", "identity": None,
                                          "checks": [{"name": "order", "passed": True, "detail": ""}]})


def test_plan_arms_compare_by_their_own_identities(cli, tmp_path, locks, ledger_path) -> None:
    base_path, base = locks["base"]
    artifact_path = tmp_path / "artifact.lock.json"
    artifact = write_lock(artifact_path, **{"hardware": {"host": "gpu1"}, "runtime": {"engine": "vllm",
                          "version": "0.10.0"}, "model": {"name": "m"}, "artifact": {"digest": "blake3:other"}})
    record_locks(ledger_path, base_path, str(artifact_path))
    # a plan run that recorded one identity for both arms: what moved between the arms was never observed
    one = _plan_run(ledger_path, {"A": {"host": "local"}, "B": {"host": "local"}})
    with Ledger.open(ledger_path) as ledger:
        one_identity = ledger.append("plan-run", {**ledger.get(one).body, "identity": base}, identity=base)
    for run in (one, one_identity):
        blind = cli("compare", f"{run}:A", f"{run}:B", "--intervention", "budget")
        assert blind.returncode == 1, blind.stderr
        assert "moved: unknown" in blind.stdout and "Causal" not in blind.stdout
        data = cli("compare", f"{run}:A", f"{run}:B", "--intervention", "budget", "--json").json()
        assert data["label"] == "descriptive" and data["moved"] is None
        assert any("the arms' identities were not observed" in r for r in data["reasons"]), data["reasons"]
    # each arm's own system observed (arms.<A>.identity): what moved is derived from the two
    observed = _plan_run(ledger_path, {"A": {"host": "local", "identity": base},
                                       "B": {"host": "local", "identity": artifact}})
    wrong = cli("compare", f"{observed}:A", f"{observed}:B", "--intervention", "budget", "--json")
    assert wrong.returncode == 1 and wrong.json()["moved"] == ["artifact"]
    assert wrong.json()["reasons"] == ["you named budget; what moved: artifact"]
    right = cli("compare", f"{observed}:A", f"{observed}:B", "--intervention", "artifact", "--json")
    assert right.returncode == 0, right.json()["reasons"]
    assert right.json()["label"] == "causal" and right.json()["paired_control"] is True
    assert "changing artifact moved the rate by -0.500" in right.json()["statement"]
    # an arm whose system could not be observed says why
    half = _plan_run(ledger_path, {"A": {"identity": base}, "B": {"identity": None,
                                                                  "identity_reason": "the engine was restarted"}})
    data = cli("compare", f"{half}:A", f"{half}:B", "--intervention", "artifact", "--json").json()
    assert data["label"] == "descriptive" and data["moved"] is None
    assert any("arm B's identity was not observed (the engine was restarted)" in r for r in data["reasons"])


def test_sidecars_naming_a_run_the_ledger_never_recorded_are_not_causal(cli, tmp_path, locks, ledger_path) -> None:
    """Hand-written sidecars, digests and all, beside two real lm-eval outputs: a run id is a claim."""
    import blake3

    record_locks(ledger_path, locks["base"][0], locks["runtime"][0])
    refs = []
    for side, lock in (("a", "base"), ("b", "runtime")):
        where = tmp_path / side
        where.mkdir()
        for name in (f"results_{LM_EVAL_STAMP}.json", f"samples_tiny_qa_{LM_EVAL_STAMP}.jsonl"):
            (where / name).write_bytes((LM_EVAL / name).read_bytes())
        results = where / f"results_{LM_EVAL_STAMP}.json"
        entry = {"path": str(results), "blake3": blake3.blake3(results.read_bytes()).hexdigest(), "harness": "lm-eval"}
        run_id = f"run-20261201T10101{len(refs)}-0000000{len(refs)}"
        body = {"schema": "execsys.run/1", "id": run_id, "verdict": "clean", "drifted": False,
                "identity": {"id": locks[lock][1], "lock": locks[lock][0], "how": "verified"},
                "results": [entry], "result": entry}
        results.with_name(results.name + ".execsys.json").write_text(json.dumps(body))
        add_probe(ledger_path, locks[lock][1], "restart", 20, 20)
        refs.append(str(results))
    compared = cli("compare", *refs, "--intervention", "runtime", "--json")
    assert compared.returncode == 1, compared.stderr
    data = compared.json()
    assert data["label"] == "descriptive" and data["moved"] == ["runtime"]
    for side, ref in zip("AB", refs, strict=True):
        assert any(r.startswith(f"the sidecar of {side}'s result {ref} names run-2026") and
                   "which the ledger never recorded" in r for r in data["reasons"]), data["reasons"]
