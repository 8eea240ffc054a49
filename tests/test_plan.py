"""`execsys plan`: pre-registered counterbalanced schedules, tamper detection, executed-log checks,
a paired run against two real llama.cpp servers, and remote placement over the loopback sshd."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.ledger import Ledger
from execsys.plan import new_plan, paired_stats
from execsys.stats import mcnemar_exact
from tests.fixtures.fake_http import JsonHandler, LoopbackServer
from tests.fixtures.llama import LlamaServer, make_tiny_gguf

# ------------------------------------------------------------------ schedule


@pytest.mark.parametrize("design", ["abba", "random"])
@pytest.mark.parametrize("n", list(range(1, 14)))
def test_counterbalance_for_odd_and_even_n(design: str, n: int) -> None:
    for seed in range(6):
        plan = new_plan(["A", "B"], [f"c{i}" for i in range(n)], design, seed)
        counts = plan.first_counts()
        assert counts["A"] + counts["B"] == n
        if n % 2 == 0:
            assert counts["A"] == counts["B"] == n // 2
        else:
            assert abs(counts["A"] - counts["B"]) == 1
        assert sorted(e["case"] for e in plan.order) == sorted(f"c{i}" for i in range(n))


def test_abba_pattern_follows_the_shuffled_order() -> None:
    plan = new_plan(["A", "B"], [f"c{i}" for i in range(8)], "abba", 11)
    firsts = [e["first"] for e in plan.order]
    x, y = firsts[0], firsts[1]
    assert x != y
    assert firsts == [x, y, y, x, x, y, y, x]


def test_same_inputs_same_plan_and_seed_changes_it() -> None:
    ids = [f"c{i}" for i in range(10)]
    one = new_plan(["A", "B"], ids, "abba", 5)
    two = new_plan(["A", "B"], ids, "abba", 5)
    assert one.to_json() == two.to_json()
    other = new_plan(["A", "B"], ids, "abba", 6)
    assert other.order != one.order and other.digest != one.digest


def test_digest_covers_everything_but_registered_at() -> None:
    plan = new_plan(["A", "B"], ["x", "y", "z"], "abba", 1, {"A": "gpu1"})
    plan.registered_at = "2026-01-01T00:00:00Z"
    assert plan.compute_digest() == plan.digest
    body = plan.to_json()
    body.pop("registered_at")
    body.pop("digest")
    assert content_id(body) == plan.digest
    plan.placement = {"A": "gpu2"}
    assert plan.compute_digest() != plan.digest


def write_cases(path: Path, n: int, expected: dict[str, str] | None = None) -> Path:
    rows = []
    for i in range(n):
        row = {"id": f"c{i}", "prompt": f"Item {i} says", "max_tokens": 8,
               "expected": (expected or {}).get(f"c{i}", "nothing")}
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_plan_new_registers_before_anything_runs(cli, tmp_path, ledger_path) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 7)
    out = tmp_path / "plan.json"
    result = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--design", "abba", "--seed", "3",
                 "--out", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    assert plan["schema"] == "execsys.plan/1"
    assert set(plan) >= {"arms", "order", "design", "seed", "placement", "digest", "registered_at"}
    assert plan["arms"] == ["A", "B"] and plan["design"] == "abba" and plan["seed"] == 3
    assert len(plan["order"]) == 7 and all(set(e) == {"case", "first"} for e in plan["order"])
    with Ledger.open(ledger_path) as ledger:
        records = ledger.find(kind="plan")
    assert len(records) == 1 and records[0].body["digest"] == plan["digest"]
    assert records[0].body["registered_at"] == plan["registered_at"]
    # registering the same inputs again gives byte-identical output and no second record
    again = tmp_path / "again.json"
    cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--seed", "3", "--out", str(again))
    assert again.read_bytes() == out.read_bytes()
    with Ledger.open(ledger_path) as ledger:
        assert ledger.count(kind="plan") == 1
    assert cli("plan", "check", str(out)).returncode == 0
    listed = cli("ledger", "list", "--kind", "plan", "--json").json()
    assert listed[0]["summary"] == "A vs B, 7 cases, design abba, seed 3"


@pytest.mark.parametrize("edit", ["order", "seed", "placement", "arms"])
def test_a_plan_edited_after_registration_is_rejected(cli, tmp_path, ledger_path, edit: str) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 6)
    out = tmp_path / "plan.json"
    cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--seed", "1", "--out", str(out))
    plan = json.loads(out.read_text())
    if edit == "order":
        plan["order"][0]["first"] = "B" if plan["order"][0]["first"] == "A" else "A"
    elif edit == "seed":
        plan["seed"] = 2
    elif edit == "placement":
        plan["placement"] = {"A": "somewhere-else"}
    else:
        plan["arms"] = ["A", "C"]
    out.write_text(json.dumps(plan))
    result = cli("plan", "check", str(out))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert "edited after registration" in result.stderr or "unknown arm" in result.stderr
    run = cli("plan", "run", str(out), "--arm", "A=http://127.0.0.1:9/v1", "--arm", "B=http://127.0.0.1:9/v1")
    assert run.returncode == 2


@pytest.mark.parametrize(("field", "value"), [("order", "c1"), ("order", [1, 2]), ("arms", None),
                                              ("digest", 5), ("placement", [1]), ("seed", ...)])
def test_a_hand_mangled_plan_names_the_field(cli, tmp_path, ledger_path, field: str, value) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    out = tmp_path / "plan.json"
    cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(out))
    plan = json.loads(out.read_text())
    if value is ...:
        del plan[field]
    else:
        plan[field] = value
    out.write_text(json.dumps(plan))
    result = cli("plan", "check", str(out))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"malformed plan: field '{field}'" in result.stderr and "object is not" not in result.stderr


def test_an_unwritable_executed_log_is_an_input_error(cli, tmp_path, ledger_path) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 2)
    out = tmp_path / "plan.json"
    cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(out))
    (tmp_path / "logdir").mkdir()
    result = cli("plan", "run", str(out), "--arm", "A=http://127.0.0.1:9/v1", "--arm", "B=http://127.0.0.1:9/v1",
                 "--log", str(tmp_path / "logdir"), "--timeout", "2")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "cannot write the executed log" in result.stderr


def test_check_rejects_cases_edited_after_registration(cli, tmp_path, ledger_path) -> None:
    # 'plan run' refuses an edited cases file; 'plan check' must not call the same plan clean
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    out = tmp_path / "plan.json"
    cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(out))
    assert cli("plan", "check", str(out)).returncode == 0
    original = cases.read_text()
    cases.write_text(original.replace('"expected"', '"expected_was"', 1))
    result = cli("plan", "check", str(out))
    assert result.returncode == 2 and "changed since the plan was registered" in result.stderr
    cases.write_text(original)
    assert cli("plan", "check", str(out)).returncode == 0


def test_an_output_name_that_looks_like_markup(cli, tmp_path, ledger_path) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 2)
    result = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", "p[/x].json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrote p[/x].json" in result.stdout and (tmp_path / "p[/x].json").exists()


def test_an_unregistered_plan_is_rejected(cli, tmp_path) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    out = tmp_path / "plan.json"
    cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(out),
        env={"EXECSYS_LEDGER": str(tmp_path / "first.sqlite3")})
    result = cli("plan", "check", str(out), env={"EXECSYS_LEDGER": str(tmp_path / "other.sqlite3")})
    assert result.returncode == 2 and "not registered" in result.stderr


def test_unknown_arms_are_input_errors(cli, tmp_path) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    bad_place = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--placement", "C=gpu1")
    assert bad_place.returncode == 2 and "unknown arm 'C'" in bad_place.stderr
    out = tmp_path / "plan.json"
    cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(out))
    bad_run = cli("plan", "run", str(out), "--arm", "A=http://127.0.0.1:9/v1", "--arm", "C=http://127.0.0.1:9/v1")
    assert bad_run.returncode == 2 and "unknown arm 'C'" in bad_run.stderr
    same = cli("plan", "new", "--arms", "A", "A", "--cases", str(cases))
    assert same.returncode == 2


# ------------------------------------------------------------------ McNemar arithmetic


def test_paired_stats_exact_mcnemar_by_hand() -> None:
    pairs = [(True, False)] * 7 + [(False, True)] * 1 + [(True, True)] * 2 + [(False, False)] * 2
    stats = paired_stats(pairs)
    assert (stats.n, stats.b, stats.c, stats.both_right, stats.both_wrong) == (12, 7, 1, 2, 2)
    # two-sided exact: 2 * P[X <= 1], X ~ Binomial(8, 1/2) = 2 * (1 + 8) / 256
    assert stats.mcnemar_p == pytest.approx(18 / 256)
    assert stats.difference == pytest.approx(6 / 12)
    assert stats.rate_a == pytest.approx(9 / 12) and stats.rate_b == pytest.approx(3 / 12)
    assert stats.ci95[0] < stats.difference < stats.ci95[1]


# ------------------------------------------------------------------ real llama.cpp servers


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    """Two real llama.cpp servers on loopback serving models of different seeds: the two arms."""
    root = tmp_path_factory.mktemp("arms")
    servers = []
    try:
        for seed in (1, 2):
            servers.append(LlamaServer(make_tiny_gguf(root / f"seed{seed}.gguf", seed=seed)).start())
        yield servers
    finally:
        for server in servers:
            server.stop()


def _texts(server: LlamaServer, cases: Path) -> dict[str, str]:
    from execsys.probes.cases import load_cases
    from execsys.probes.client import EndpointClient

    with EndpointClient(server.base_url, timeout=60) as client:
        model = client.resolve_model(None)
        return {c.id: client.complete(c, {"temperature": 0, "model": model}).text.strip() for c in load_cases(cases)}


def _paired_run(cli, tmp_path, two_servers, *, placement: list[str] = (), extra: list[str] = (), cwd=None):
    first = write_cases(tmp_path / "probe.jsonl", 10)
    texts_a, texts_b = _texts(two_servers[0], first), _texts(two_servers[1], first)
    # Expected answers: arm A's text on even cases, arm B's on odd ones, so discordant pairs exist.
    expected = {f"c{i}": (texts_a if i % 2 == 0 else texts_b)[f"c{i}"] for i in range(10)}
    cases = write_cases(tmp_path / "cases.jsonl", 10, expected)
    plan_path = tmp_path / "plan.json"
    args = ["plan", "new", "--arms", "A", "B", "--cases", str(cases), "--seed", "4", "--out", str(plan_path)]
    for item in placement:
        args += ["--placement", item]
    assert cli(*args, cwd=cwd).returncode == 0
    log = tmp_path / "executed.jsonl"
    runs = 1
    while log.exists():  # a later run of the plan in one test: execsys never overwrites an executed log
        runs += 1
        log = tmp_path / f"executed-{runs}.jsonl"
    result = cli("plan", "run", str(plan_path), "--arm", f"A={two_servers[0].base_url}",
                 "--arm", f"B={two_servers[1].base_url}", "--log", str(log), "--json", *extra, cwd=cwd)
    return plan_path, log, result


def test_paired_run_against_two_real_llama_servers(cli, tmp_path, ledger_path, two_servers) -> None:
    plan_path, log, result = _paired_run(cli, tmp_path, two_servers)
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert data["schema"] == "execsys.plan-run/2" and data["label"] == "causal"
    assert all(check["passed"] for check in data["checks"])
    # hand computation from the recorded per-case outcomes
    outcomes = data["outcomes"]
    assert len(outcomes) == 10
    b = sum(1 for o in outcomes.values() if o["A"]["correct"] and not o["B"]["correct"])
    c = sum(1 for o in outcomes.values() if o["B"]["correct"] and not o["A"]["correct"])
    k = b + c
    assert k >= 1  # the arms disagree somewhere, so the test exercises the discordant arithmetic
    hand_p = min(1.0, 2 * sum(math.comb(k, i) for i in range(min(b, c) + 1)) / 2**k)
    assert data["paired"]["b"] == b and data["paired"]["c"] == c
    assert data["paired"]["mcnemar_p"] == pytest.approx(hand_p)
    assert data["paired"]["mcnemar_p"] == pytest.approx(mcnemar_exact(b, c))
    assert data["paired"]["difference"] == pytest.approx((b - c) / 10)
    # each arm's recorded outcome is exactly what its server says for that prompt
    for case, arms in outcomes.items():
        assert arms["A"]["correct"] == (arms["A"]["outcome"] == json.loads(
            (tmp_path / "cases.jsonl").read_text().splitlines()[int(case[1:])])["expected"])
    # the executed order is the registered one, and the plan was registered first
    plan = json.loads(plan_path.read_text())
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    ran = [(e["case"], e["arm"]) for e in events if e["event"] == "case"]
    registered = []
    for entry in plan["order"]:
        other = "B" if entry["first"] == "A" else "A"
        registered += [(entry["case"], entry["first"]), (entry["case"], other)]
    assert ran == registered
    assert plan["registered_at"] < events[0]["at"]
    with Ledger.open(ledger_path) as ledger:
        runs = ledger.find(kind="plan-run")
    assert len(runs) == 1 and runs[0].parent == f"plan-{plan['digest'][:24]}"
    assert "McNemar" in data["statement"] and "causal" in data["statement"]
    checked = cli("plan", "check", str(plan_path), "--executed", str(log), "--json")
    assert checked.returncode == 0 and checked.json()["violations"] == []


def _rewrite(log: Path, mutate) -> Path:
    lines = log.read_text().splitlines()
    header, events = lines[0], [json.loads(line) for line in lines[1:]]
    events = mutate(events)
    out = log.with_name("tampered-" + log.name)
    out.write_text("\n".join([header] + [json.dumps(e) for e in events]) + "\n")
    return out


def test_executed_log_violations(cli, tmp_path, ledger_path, two_servers) -> None:
    plan_path, log, result = _paired_run(cli, tmp_path, two_servers)
    assert result.returncode == 0

    def swap_first_case(events):
        idx = [i for i, e in enumerate(events) if e["event"] == "case"][:2]
        events[idx[0]], events[idx[1]] = events[idx[1]], events[idx[0]]
        return events

    def restart_between_arms(events):
        idx = [i for i, e in enumerate(events) if e["event"] == "case"][0]
        events.insert(idx + 1, {"event": "restart", "arm": events[idx]["arm"], "at": events[idx]["at"]})
        return events

    def outside_window(events):
        last = [e for e in events if e["event"] == "case"][-1]
        last["at"] = "2099-01-01T00:00:00.000Z"
        return events

    def wrong_placement(events):
        for e in events:
            if e["event"] == "placement" and e["arm"] == "B":
                e["host"] = "rented-box"
        return events

    for mutate, check, needle in [
        (swap_first_case, "order", "registered case"),
        (restart_between_arms, "no-restart", "between the arms of case"),
        (outside_window, "window", "outside the window"),
        (wrong_placement, "placement", "ran on rented-box"),
    ]:
        tampered = _rewrite(log, mutate)
        res = cli("plan", "check", str(plan_path), "--executed", str(tampered), "--json")
        assert res.returncode == 1, (check, res.stderr)
        failed = {c["name"]: c["detail"] for c in res.json()["checks"] if not c["passed"]}
        assert check in failed and needle in failed[check], (check, failed)

    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("this is not a log\n")
    bad = cli("plan", "check", str(plan_path), "--executed", str(garbage))
    assert bad.returncode == 2 and "not JSON" in bad.stderr
    wrong_schema = tmp_path / "wrong.jsonl"
    wrong_schema.write_text(json.dumps({"schema": "something/1"}) + "\n")
    assert cli("plan", "check", str(plan_path), "--executed", str(wrong_schema)).returncode == 2


def _lock_with_artifact(path: Path, artifact: Path, digest: str) -> None:
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["artifact"]["observed"] = {"path": str(artifact), "digest": digest}
    path.write_text(json.dumps({"schema": "execsys.identity/1", "id": content_id(components),
                                "recorded_at": "2026-11-30T00:00:00Z", "declaration": {},
                                "components": components, "notes": []}))


def test_remote_placement_checks_over_loopback_sshd(cli, tmp_path, ledger_path, two_servers, ssh_config_env) -> None:
    from execsys.digest import digest_path

    artifact = two_servers[0].model_path
    good = digest_path(artifact).digest
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "execsys.toml").write_text(
        '[placement]\nallowed = ["tier-1"]\nhosts = { "execsys-test" = "tier-1", "rented" = "tier-3" }\n'
    )
    # (b) over SSH: the remote digest command agrees with the local one
    remote = cli("digest", str(artifact), "--host", ssh_config_env.dest, "--json")
    assert remote.returncode == 0, remote.stderr
    assert good in remote.stdout

    lock = workdir / "execsys.lock.json"
    _lock_with_artifact(lock, artifact, good)
    plan_path, log, result = _paired_run(cli, workdir, two_servers, placement=[f"A={ssh_config_env.dest}"],
                                         extra=["--lock", str(lock)], cwd=workdir)
    assert result.returncode == 0, result.stderr
    data = result.json()
    placed = data["placement"][0]
    assert placed["arm"] == "A" and placed["host"] == ssh_config_env.dest
    assert [c["name"] for c in placed["checks"]] == ["a-registered", "b-digest", "c-host-identity", "d-admissible"]
    assert all(c["passed"] for c in placed["checks"]), placed["checks"]
    assert placed["digest"]["digest"] == good
    assert placed["hardware"]  # (c) the remote host identity is recorded
    assert data["label"] == "causal"

    # a lock pinning other bytes: (b) fails as an integrity defect and the claim is descriptive
    _lock_with_artifact(lock, artifact, "0" * 64)
    _plan, _log, bad = _paired_run(cli, workdir, two_servers, placement=[f"A={ssh_config_env.dest}"],
                                   extra=["--lock", str(lock)], cwd=workdir)
    assert bad.returncode == 1
    checks = {c["name"]: c for c in bad.json()["placement"][0]["checks"]}
    assert not checks["b-digest"]["passed"] and "integrity defect" in checks["b-digest"]["detail"]
    assert bad.json()["label"] == "descriptive"

    # a host outside the residency policy: (d) fails
    (workdir / "execsys.toml").write_text('[placement]\nallowed = ["tier-1"]\nhosts = { "execsys-test" = "tier-3" }\n')
    _lock_with_artifact(lock, artifact, good)
    _plan, _log, inadmissible = _paired_run(cli, workdir, two_servers, placement=[f"A={ssh_config_env.dest}"],
                                            extra=["--lock", str(lock)], cwd=workdir)
    assert inadmissible.returncode == 1
    checks = {c["name"]: c for c in inadmissible.json()["placement"][0]["checks"]}
    assert not checks["d-admissible"]["passed"] and "tier-3" in checks["d-admissible"]["detail"]


def test_run_api_cancel_and_identity_mismatch(tmp_path, ledger_path, two_servers) -> None:
    """The API the TUI uses: typed events for every step; cancel stops the window (descriptive)."""
    import threading

    from execsys.plan import (
        ArmAnswered,
        CaseSent,
        CheckResult,
        PairScored,
        PlacementChecked,
        PlanRunOptions,
        WindowClosed,
        WindowOpened,
        load_plan,
        register_plan,
        run_plan,
    )

    cases = write_cases(tmp_path / "cases.jsonl", 6)
    with Ledger.open(ledger_path) as ledger:
        plan = register_plan(new_plan(["A", "B"], cases, "abba", 2, identity="f" * 64), ledger)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan.to_json()))
    plan = load_plan(plan_path)
    cancel = threading.Event()
    seen: list[object] = []

    def on_event(event: object) -> None:
        seen.append(event)
        if sum(isinstance(e, ArmAnswered) for e in seen) == 2:
            cancel.set()

    lock = _identity("e" * 64)
    options = PlanRunOptions.from_sources(None, lock, plan=plan, ledger=ledger_path,
                                          endpoints={"A": two_servers[0].base_url, "B": two_servers[1].base_url})
    run = run_plan(options, on_event=on_event, cancel=cancel)
    kinds = [type(e) for e in seen]
    assert kinds[:3] == [PlacementChecked, PlacementChecked, WindowOpened]
    assert kinds[3:8] == [CaseSent, ArmAnswered, CaseSent, ArmAnswered, PairScored]
    assert kinds[8] is WindowClosed and seen[8].cancelled
    assert all(k is CheckResult for k in kinds[9:])
    assert [e.check for e in seen[9:]] == run.checks
    first, second = seen[4], seen[6]
    assert (first.position, second.position) == ("first", "second") and first.case_id == second.case_id
    assert first.arm == plan.order[0]["first"] and (first.step, second.step, first.total) == (1, 2, 12)
    pair = seen[7]
    assert pair.n == 1 and pair.correct == {first.arm: first.correct, second.arm: second.correct}
    assert run.cancelled and run.stats.n == 1 and run.label == "descriptive"
    failed = {c.name for c in run.checks if not c.passed}
    assert {"complete", "pinned-identity", "order"} <= failed
    assert run.record and run.to_json()["schema"] == "execsys.plan-run/2"
    # the plan has an identity, so the run counts toward it and needs no reason
    assert run.to_json()["identity"] == "f" * 64 and run.to_json()["identity_reason"] is None


def _identity(identity_id: str):
    from execsys.identity import Identity

    return Identity(id=identity_id, recorded_at="2026-11-30T00:00:00Z", components={})


def test_relative_cases_path_resolves_from_the_plan_directory(cli, tmp_path, ledger_path, two_servers) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_cases(project / "cases.jsonl", 4)
    assert cli("plan", "new", "--arms", "A", "B", "--cases", "cases.jsonl", "--out", "plan.json",
               cwd=project).returncode == 0
    result = cli("plan", "run", str(project / "plan.json"), "--arm", f"A={two_servers[0].base_url}",
                 "--arm", f"B={two_servers[1].base_url}", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.json()["paired"]["n"] == 4
    assert (project / "plan.json.executed.jsonl").exists()


def test_sampling_settings_as_arms(cli, tmp_path, ledger_path, two_servers) -> None:
    """One server, two sampling settings: the arm parameters are sent and recorded per arm."""
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    plan_path = tmp_path / "plan.json"
    cli("plan", "new", "--arms", "greedy", "hot", "--cases", str(cases), "--out", str(plan_path))
    url = two_servers[0].base_url
    result = cli("plan", "run", str(plan_path), "--arm", f"greedy={url}", "--arm", f"hot={url}",
                 "--arm-params", 'hot={"temperature": 1.5, "seed": 7}', "--json")
    assert result.returncode == 0, result.stderr
    arms = result.json()["arms"]
    assert arms["greedy"]["params"]["temperature"] == 0
    assert arms["hot"]["params"] == {"temperature": 1.5, "max_tokens": 32, "seed": 7}
    bad = cli("plan", "run", str(plan_path), "--arm", f"greedy={url}", "--arm", f"hot={url}",
              "--arm-params", "cold={}")
    assert bad.returncode == 2 and "unknown arm 'cold'" in bad.stderr


class RecordingProxy(LoopbackServer):
    """A loopback HTTP proxy in front of a real server that keeps the JSON body of every POST:
    what was actually sent, as opposed to what the run says it sent."""

    def __init__(self, target_base_url: str) -> None:
        from urllib.error import HTTPError
        from urllib.request import Request, urlopen

        self.bodies: list[dict] = []
        target = target_base_url.rstrip("/")
        target_root = target[: -len("/v1")] if target.endswith("/v1") else target
        proxy = self

        class Handler(JsonHandler):
            def _forward(self, body: bytes | None) -> None:
                request = Request(target_root + self.path, data=body, method=self.command,
                                  headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
                try:
                    with urlopen(request, timeout=60) as response:
                        status, payload = response.status, response.read()
                except HTTPError as exc:
                    status, payload = exc.code, exc.read()
                self.send_bytes(payload, status)

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.bodies.append(json.loads(body))
                self._forward(body)

        super().__init__(Handler)
        self.base_url = self.url()


def test_arm_parameters_are_sent_not_only_recorded(cli, tmp_path, ledger_path, two_servers) -> None:
    """Each arm's requests, observed at the wire, carry that arm's parameters and no other's."""
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    plan_path = tmp_path / "plan.json"
    assert cli("plan", "new", "--arms", "greedy", "hot", "--cases", str(cases), "--out", str(plan_path)).returncode == 0
    with RecordingProxy(two_servers[0].base_url) as greedy, RecordingProxy(two_servers[0].base_url) as hot:
        result = cli("plan", "run", str(plan_path), "--arm", f"greedy={greedy.base_url}", "--arm", f"hot={hot.base_url}",
                     "--params", '{"top_k": 3}', "--arm-params", 'hot={"temperature": 1.5, "seed": 7}', "--json")
    assert result.returncode == 0, result.stderr
    assert len(greedy.bodies) == len(hot.bodies) == 4
    prompts = {f"Item {i} says" for i in range(4)}
    assert {body["prompt"] for body in greedy.bodies} == prompts == {body["prompt"] for body in hot.bodies}
    for body in greedy.bodies:
        assert body["temperature"] == 0 and body["top_k"] == 3 and "seed" not in body
    for body in hot.bodies:
        assert body["temperature"] == 1.5 and body["seed"] == 7 and body["top_k"] == 3
    # a case's own max_tokens (8) wins over the arms' default (32), on the wire
    assert {body["max_tokens"] for body in greedy.bodies + hot.bodies} == {8}
    arms = result.json()["arms"]
    assert arms["hot"]["params"] == {"temperature": 1.5, "max_tokens": 32, "seed": 7, "top_k": 3}
    assert arms["greedy"]["params"] == {"temperature": 0, "max_tokens": 32, "top_k": 3}


# ------------------------------------------------------------------ --config and --lock


def _pinned_lock(path: Path) -> str:
    """A lock file for a fixed set of components; returns its identity id."""
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["model"]["declared"] = {"name": "tiny"}
    identity_id = content_id(components)
    path.write_text(json.dumps({"schema": "execsys.identity/1", "id": identity_id,
                                "recorded_at": "2026-11-30T00:00:00Z", "declaration": {},
                                "components": components, "notes": []}))
    return identity_id


def test_plan_new_finds_the_lock_beside_the_declaration(cli, tmp_path, ledger_path) -> None:
    project = tmp_path / "eval"
    project.mkdir()
    (project / "execsys.toml").write_text("")
    identity_id = _pinned_lock(project / "execsys.lock.json")
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    # run from the parent directory: the lock is found beside --config, not in the cwd
    made = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--config", str(project / "execsys.toml"),
               "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.json()["identity"] == identity_id and "identity_reason" not in made.json()
    assert "no pinned identity" not in made.stderr
    with Ledger.open(ledger_path) as ledger:
        assert ledger.find(kind="plan")[0].identity == identity_id
    # the same identity given as an id the ledger knows is not a file: still accepted
    with Ledger.open(ledger_path) as ledger:
        ledger.append("identity", json.loads((project / "execsys.lock.json").read_text()), identity=identity_id)
    by_id = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--lock", identity_id[:16], "--json",
                cwd=tmp_path)
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.json()["identity"] == identity_id


def test_plan_new_without_a_lock_says_so_once(cli, tmp_path, ledger_path) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    made = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    lines = [line for line in made.stderr.splitlines() if "no pinned identity" in line]
    assert lines == ["warning: no pinned identity (looked for execsys.lock.json): this plan will not count "
                     "toward any scope"]
    data = made.json()
    assert data["identity"] is None
    assert data["identity_reason"] == "no pinned identity (looked for execsys.lock.json): this plan will not " \
                                      "count toward any scope"


def test_a_named_lock_that_does_not_exist_is_exit_2(cli, tmp_path, ledger_path) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 4)
    missing = tmp_path / "nowhere" / "execsys.lock.json"
    made = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--lock", str(missing))
    assert made.returncode == 2
    assert made.stderr.strip().splitlines() == [made.stderr.strip()] and "no such lock file" in made.stderr
    plan_path = tmp_path / "plan.json"
    assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(plan_path)).returncode == 0
    for action in (["run", str(plan_path), "--arm", "A=http://127.0.0.1:9/v1", "--arm", "B=http://127.0.0.1:9/v1"],
                   ["check", str(plan_path)]):
        result = cli("plan", *action, "--lock", str(missing))
        assert result.returncode == 2 and "no such lock file" in result.stderr, (action, result.stderr)
        assert "Traceback" not in result.stderr
    with Ledger.open(ledger_path) as ledger:
        assert ledger.count(kind="plan-run") == 0
    named_config = cli("plan", "check", str(plan_path), "--config", str(tmp_path / "absent.toml"))
    assert named_config.returncode == 2


def test_plan_run_and_check_use_the_lock_beside_the_declaration(cli, tmp_path, ledger_path, two_servers) -> None:
    project = tmp_path / "eval"
    project.mkdir()
    config = project / "execsys.toml"
    config.write_text("")
    lock = project / "execsys.lock.json"
    _pinned_lock(lock)
    cases = write_cases(tmp_path / "cases.jsonl", 2)
    plan_path = tmp_path / "plan.json"
    assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--config", str(config),
               "--out", str(plan_path), cwd=tmp_path).returncode == 0
    arms = ["--arm", f"A={two_servers[0].base_url}", "--arm", f"B={two_servers[1].base_url}"]
    held = cli("plan", "run", str(plan_path), *arms, "--config", str(config), "--json", cwd=tmp_path)
    assert held.returncode == 0, held.stderr
    checks = {c["name"]: c for c in held.json()["checks"]}
    assert checks["pinned-identity"]["passed"]
    assert "no pinned identity" not in held.stderr

    # the system moved: re-pinned beside the declaration, the plan's identity no longer holds
    components = json.loads(lock.read_text())["components"]
    components["model"]["declared"] = {"name": "other"}
    lock.write_text(json.dumps({"schema": "execsys.identity/1", "id": content_id(components),
                                "recorded_at": "2026-11-30T00:00:00Z", "declaration": {},
                                "components": components, "notes": []}))
    moved = cli("plan", "run", str(plan_path), *arms, "--config", str(config), "--json", cwd=tmp_path)
    assert moved.returncode == 1
    assert not {c["name"]: c for c in moved.json()["checks"]}["pinned-identity"]["passed"]
    assert moved.json()["label"] == "descriptive"
    checked = cli("plan", "check", str(plan_path), "--config", str(config), "--json", cwd=tmp_path)
    assert checked.returncode == 1
    assert checked.json()["violations"][0].startswith("pinned-identity: the plan was registered for identity")
    # from a directory with no lock, nothing is compared: the plan check is clean
    assert cli("plan", "check", str(plan_path), cwd=tmp_path).returncode == 0


def test_plan_run_without_any_identity_says_so(cli, tmp_path, ledger_path, two_servers) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", 2)
    plan_path = tmp_path / "plan.json"
    assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(plan_path),
               cwd=tmp_path).returncode == 0
    result = cli("plan", "run", str(plan_path), "--arm", f"A={two_servers[0].base_url}",
                 "--arm", f"B={two_servers[1].base_url}", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    reason = "no pinned identity (looked for execsys.lock.json): this plan will not count toward any scope"
    assert [line for line in result.stderr.splitlines() if "no pinned identity" in line] == [f"warning: {reason}"]
    assert result.json()["identity"] is None and result.json()["identity_reason"] == reason
    # a lock pinned after registration does not adopt the plan: it still counts toward no scope, and says why
    _pinned_lock(tmp_path / "execsys.lock.json")
    later = cli("plan", "run", str(plan_path), "--arm", f"A={two_servers[0].base_url}",
                "--arm", f"B={two_servers[1].base_url}", "--json", cwd=tmp_path)
    assert later.returncode == 0, later.stderr
    assert later.json()["identity"] is None
    assert later.json()["identity_reason"].startswith("the plan was registered without a pinned identity")
    assert "registered without a pinned identity" in later.stderr


def test_plan_run_reads_the_placement_policy_from_the_named_declaration(cli, tmp_path, ledger_path,
                                                                          two_servers, monkeypatch) -> None:
    """[placement] comes from --config, not from whatever execsys.toml is in the cwd. The host is
    an ssh alias for a closed loopback port: (b) and (c) fail fast, (d) is judged from the policy."""
    from tests.fixtures.llama import free_port

    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host closed-box\n  HostName 127.0.0.1\n  Port {free_port()}\n")
    monkeypatch.setenv("EXECSYS_SSH_CONFIG", str(ssh_config))
    project = tmp_path / "eval"
    project.mkdir()
    config = project / "execsys.toml"
    config.write_text('[placement]\nallowed = ["tier-1"]\nhosts = { "closed-box" = "tier-1" }\n')
    (tmp_path / "execsys.toml").write_text('[placement]\nallowed = ["tier-9"]\n')  # the cwd's: must be ignored
    cases = write_cases(tmp_path / "cases.jsonl", 2)
    plan_path = tmp_path / "plan.json"
    assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--placement", "A=closed-box",
               "--out", str(plan_path), cwd=tmp_path).returncode == 0
    result = cli("plan", "run", str(plan_path), "--arm", f"A={two_servers[0].base_url}",
                 "--arm", f"B={two_servers[1].base_url}", "--config", str(config), "--json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    checks = {c["name"]: c for c in result.json()["placement"][0]["checks"]}
    assert checks["d-admissible"]["passed"], checks["d-admissible"]
    assert "closed-box is tier-1" in checks["d-admissible"]["detail"]
    assert not checks["c-host-identity"]["passed"]


@pytest.mark.timeout(120)
def test_an_executed_log_is_never_overwritten_nor_the_plan_truncated(cli, tmp_path, ledger_path) -> None:
    """A second run keeps the first run's log (the default name moves on to -2); a --log that names
    the plan, its cases, an earlier log or a FIFO is refused, one line, exit 2, the file untouched."""
    import os
    import stat

    from tests.fixtures.llama import FlipEndpoint

    cases = write_cases(tmp_path / "cases.jsonl", 3)
    plan_path = tmp_path / "plan.json"
    assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(plan_path)).returncode == 0
    plan_bytes, cases_bytes = plan_path.read_bytes(), cases.read_bytes()
    with FlipEndpoint() as endpoint:
        arms = ["--arm", f"A={endpoint.base_url}", "--arm", f"B={endpoint.base_url}", "--timeout", "10"]
        first = cli("plan", "run", str(plan_path), *arms, "--json")
        assert first.returncode == 0, first.stderr
        first_log = tmp_path / "plan.json.executed.jsonl"
        assert first.json()["log"] == str(first_log)
        first_bytes = first_log.read_bytes()
        second = cli("plan", "run", str(plan_path), *arms, "--json")
        assert second.returncode == 0, second.stderr
        assert second.json()["log"] == str(tmp_path / "plan.json.executed-2.jsonl")
        assert first_log.read_bytes() == first_bytes  # the first run's evidence is still there
        assert cli("plan", "check", str(plan_path), "--executed", str(first_log)).returncode == 0

        fifo = tmp_path / "log.fifo"
        os.mkfifo(fifo)
        for log, words in ((plan_path, "that is the plan file itself"), (cases, "that is the cases file itself"),
                           (first_log, "already exists"), (fifo, "is a FIFO")):
            refused = cli("plan", "run", str(plan_path), *arms, "--log", str(log), timeout=30)
            assert refused.returncode == 2, (log, refused.stderr)
            [line] = refused.stderr.strip().splitlines()
            assert str(log) in line and words in line and "cannot write the executed log" in line, line
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert plan_path.read_bytes() == plan_bytes and cases.read_bytes() == cases_bytes
    assert first_log.read_bytes() == first_bytes
    with Ledger.open(ledger_path) as ledger:
        assert ledger.count(kind="plan-run") == 2  # the refused runs recorded nothing


def _cases_without_max_tokens(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"Item {i} says", "expected": "nothing"}) + "\n"
                            for i in range(n)))
    return path


def test_plan_run_sends_the_declared_budget_as_probes_do(cli, tmp_path, ledger_path, two_servers) -> None:
    """``[budget]`` (the lock's, else the declaration's) is what both arms send, as a probe under the same
    lock would; temperature 0 and max_tokens 32 are only defaults for what the budget leaves out, and
    --params / --arm-params still win."""
    from execsys.probes.options import ProbeOptions, declared_budget

    from execsys.sources import load_sources

    project = tmp_path / "eval"
    project.mkdir()
    config = project / "execsys.toml"
    config.write_text("[budget]\nmax_tokens = 16\nseed = 1234\n")
    cases = _cases_without_max_tokens(tmp_path / "cases.jsonl", 2)
    plan_path = tmp_path / "plan.json"
    assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--config", str(config),
               "--out", str(plan_path), cwd=tmp_path).returncode == 0
    url = two_servers[0].base_url
    with RecordingProxy(url) as a, RecordingProxy(url) as b:
        result = cli("plan", "run", str(plan_path), "--arm", f"A={a.base_url}", "--arm", f"B={b.base_url}",
                     "--arm-params", 'B={"seed": 7}', "--config", str(config), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(a.bodies) == len(b.bodies) == 2
    for body in a.bodies:
        assert (body["max_tokens"], body["seed"], body["temperature"]) == (16, 1234, 0)
    for body in b.bodies:
        assert (body["max_tokens"], body["seed"]) == (16, 7)  # the arm's own parameter wins
    arms = result.json()["arms"]
    assert arms["A"]["params"] == {"temperature": 0, "max_tokens": 16, "seed": 1234}
    assert arms["B"]["params"] == {"temperature": 0, "max_tokens": 16, "seed": 7}
    # the very parameters a probe under the same declaration would send
    sources = load_sources(config)
    probe = ProbeOptions.from_sources(sources, axis="session", endpoints=[url], cases=str(cases))
    assert probe.decoding == arms["A"]["params"]

    # a lock that declares a budget: the lock's wins over the declaration's (what was pinned is sent)
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["budget"]["declared"] = {"max_tokens": 12, "seed": 5, "temperature": 0.5}
    (project / "execsys.lock.json").write_text(json.dumps({
        "schema": "execsys.identity/1", "id": content_id(components), "recorded_at": "2026-11-30T00:00:00Z",
        "declaration": {}, "components": components, "notes": []}))
    sources = load_sources(config)
    assert declared_budget(sources.declaration, sources.lock) == {"max_tokens": 12, "seed": 5, "temperature": 0.5}
    with RecordingProxy(url) as a, RecordingProxy(url) as b:
        locked = cli("plan", "run", str(plan_path), "--arm", f"A={a.base_url}", "--arm", f"B={b.base_url}",
                     "--params", '{"max_tokens": 9}', "--config", str(config), "--json", cwd=tmp_path)
    assert locked.returncode in (0, 1), locked.stderr
    assert {(x["max_tokens"], x["seed"], x["temperature"]) for x in a.bodies + b.bodies} == {(9, 5, 0.5)}
    assert locked.json()["arms"]["A"]["params"] == {"temperature": 0.5, "max_tokens": 9, "seed": 5}


def test_plan_run_progress_names_its_columns_once(cli, tmp_path, ledger_path) -> None:
    from tests.fixtures.llama import FlipEndpoint

    cases = write_cases(tmp_path / "cases.jsonl", 3)
    assert cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(tmp_path / "plan.json"),
               cwd=tmp_path).returncode == 0
    endpoint = FlipEndpoint().start()
    try:
        ran = cli("plan", "run", "plan.json", "--arm", f"A={endpoint.base_url}", "--arm", f"B={endpoint.base_url}",
                  cwd=tmp_path)
    finally:
        endpoint.stop()
    assert ran.returncode in (0, 1), ran.stderr
    lines = ran.stderr.splitlines()
    answers = [i for i, line in enumerate(lines) if line.rstrip().endswith(("✓", "·"))]
    assert len(answers) == 6, ran.stderr  # 3 cases, both arms
    header = lines[answers[0] - 1]
    assert header.split() == ["case", "arm", "order", "correct", "(✓", "yes,", "·", "no)"], ran.stderr
    assert sum(line == header for line in lines) == 1
    # each column under its name: the mark where "correct" starts
    for i in answers:
        assert lines[i].index(lines[i].split()[0]) == header.index("case")
        assert len(lines[i].rstrip()) - 1 == header.index("correct"), (lines[i], header)
