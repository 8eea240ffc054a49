"""`execsys explain A B` on the real vLLM (the CPU build, tests/fixtures/vllm.py): an A/A pair and a planted cause.

The session's one vLLM server serves both tests (a start costs about 50 s idle, minutes under load), so
nothing here restarts it: the noise floor is the session agreement, measured by real session probes
under each pinned system. The A/A pair is two passes of one session probe of one pinned system (vLLM at
temperature 0 repeats itself within a session, tests/test_vllm_probes.py): within measured noise. The
planted cause is a ``max_tokens`` change, run as one paired AB/BA plan on that server with each arm under
its own pinned lock (``--arm-lock``): the two identities differ in the budget alone, the shorter budget
truncates every answer longer than 4 tokens, and explain names the budget, beyond the session noise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.explain import noise_floor
from execsys.ledger import Ledger

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(1800)]

N = 12


def write_cases(path: Path, *, max_tokens: int | None, expected: dict[str, str] | None = None) -> Path:
    with path.open("w") as handle:
        for i in range(N):
            case: dict = {"id": f"c{i:02d}", "prompt": f"Case {i}: what is {i}+{i}?"}
            if max_tokens is not None:
                case["max_tokens"] = max_tokens
            if expected is not None:
                case["expected"] = expected[case["id"]]
            handle.write(json.dumps(case) + "\n")
    return path


def pin(cli, project: Path, server, name: str, max_tokens: int) -> tuple[Path, str]:
    """``<name>.toml`` declaring the served model, vLLM at ``server`` and the budget, pinned to ``<name>.lock.json``."""
    project.mkdir(exist_ok=True)
    config, lock = project / f"{name}.toml", project / f"{name}.lock.json"
    config.write_text(f'[artifact]\npath = "{server.model}"\n[runtime]\nengine = "vllm"\nendpoint = "{server.base_url}"\n'
                      f"[budget]\nmax_tokens = {max_tokens}\ntemperature = 0\n")
    pinned = cli("pin", "--config", str(config), "--lock", str(lock), "--json", cwd=project, timeout=600)
    assert pinned.returncode == 0, pinned.stderr
    return lock, json.loads(lock.read_text())["id"]


def session_probe(cli, project: Path, server, lock: Path, cases: Path) -> dict:
    probe = cli("probe", "session", "--endpoint", server.base_url, "--cases", str(cases), "--lock", str(lock),
                "--json", cwd=project, timeout=900)
    assert probe.returncode in (0, 1), probe.stderr
    return probe.json()


def test_an_a_a_pair_on_vllm_is_within_measured_noise(cli, tmp_path, vllm_server, ledger_path) -> None:
    project = tmp_path / "project"
    lock, identity = pin(cli, project, vllm_server, "execsys", 16)
    record = session_probe(cli, project, vllm_server, lock, write_cases(project / "cases.jsonl", max_tokens=16))
    assert record["identity"] == identity and record["m"] == record["n"] == N, record["sentence"]
    result = cli("explain", f"{record['id']}:0", f"{record['id']}:1", "--json")
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert data["verdict"] == "within-measured-noise" and data["moved"] == []
    assert data["axes"] == ["session"] and data["flips"]["flips"] == 0 and data["flips"]["n"] == N
    session = data["noise"]["session"]
    assert (session["status"], session["m"], session["n"]) == ("measured", N, N)
    assert session["interval"] == list(noise_floor([(N, N)], N).interval)
    assert "not distinguishable from run-to-run noise" in data["sentence"]


def test_a_planted_max_tokens_change_on_vllm_is_attributable_to_the_budget(cli, tmp_path, vllm_server,
                                                                          ledger_path) -> None:
    project = tmp_path / "project"
    budgets = {"A": 16, "B": 4}
    locks, identities, probes = {}, {}, {}
    for arm, max_tokens in budgets.items():
        locks[arm], identities[arm] = pin(cli, project, vllm_server, arm.lower(), max_tokens)
        probes[arm] = session_probe(cli, project, vllm_server, locks[arm],
                                    write_cases(project / f"cases-{max_tokens}.jsonl", max_tokens=max_tokens))
        assert probes[arm]["identity"] == identities[arm], probes[arm].get("identity_reason")
    assert identities["A"] != identities["B"]
    # the expected answer of each case: what the 16-token system answered in its probe
    with Ledger.open(ledger_path) as ledger:
        expected = {row.body["case"]: row.body["text"].strip()
                    for row in ledger.find(kind="probe-case", parent=probes["A"]["run"]) if row.body["pass"] == 0}
    assert len(expected) == N
    cases = write_cases(project / "plan-cases.jsonl", max_tokens=None, expected=expected)
    plan = project / "plan.json"
    made = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--out", str(plan), cwd=project)
    assert made.returncode == 0, made.stderr
    ran = cli("plan", "run", str(plan), "--arm", f"A={vllm_server.base_url}", "--arm", f"B={vllm_server.base_url}",
              "--arm-params", 'A={"max_tokens": 16}', "--arm-params", 'B={"max_tokens": 4}',
              "--arm-lock", f"A={locks['A']}", "--arm-lock", f"B={locks['B']}", "--json", cwd=project, timeout=900)
    assert ran.returncode in (0, 1), ran.stderr
    run = ran.json()
    assert {arm: run["arms"][arm]["identity"] for arm in budgets} == identities, run["arms"]
    record = run["record"]

    result = cli("explain", f"{record}:A", f"{record}:B", "--json")
    assert result.returncode == 1, result.stderr
    data = result.json()
    assert data["moved"] == ["budget"] and data["axes"] == ["session"]
    flips = data["flips"]
    with Ledger.open(ledger_path) as ledger:
        outcomes = ledger.get(record).body["outcomes"]
    cut = sorted(c for c, arms in outcomes.items() if arms["A"]["correct"] and not arms["B"]["correct"])
    # arm A answers as its probe did (vLLM at temperature 0); the 4-token budget cuts the longer answers short
    assert all(arms["A"]["correct"] for arms in outcomes.values()), outcomes
    assert (flips["n"], flips["wrong_to_right"], sorted(flips["flipped"])) == (N, 0, cut) and len(cut) >= N // 2
    session = data["noise"]["session"]
    noisier = min((probes[arm] for arm in budgets), key=lambda r: (r["m"] / r["n"], r["n"]))
    assert (session["status"], session["m"], session["n"]) == ("measured", noisier["m"], noisier["n"])
    assert flips["flips"] > session["interval"][1]
    assert data["verdict"] == "attributable", data["sentence"]
    assert "attributable to budget, the one component that moved" in data["sentence"]
