"""Each arm of a plan run counts only for the system it observed (``arms.<ARM>.system_check``, identity).

Against real llama.cpp servers: two arms under one lock whose second server runs other flags -- that
arm differs, gets ``identity: null`` and a reason, one line on stderr as it is seen, and ``compare
RUN:A RUN:B --intervention budget`` is descriptive, naming why; two arms pinned separately
(``--arm-lock``) -- each gets its own lock's id and ``compare`` derives what moved from the two
identities; an arm whose engine was restarted into other flags between the pin and the run differs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.llama import LlamaServer, wait_ready

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.integration

CHANGED_FLAGS = ["--n_batch", "7"]
ARM_A_DIFFERS = "arm A: the engine answering this plan is not the pinned system: runtime argv +--n_batch 7"


def write_cases(path: Path, n: int = 4) -> Path:
    path.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"Item {i} says", "max_tokens": 4,
                                        "expected": "nothing"}) + "\n" for i in range(n)))
    return path


def pin(cli, directory: Path, endpoint: str, name: str = "execsys") -> str:
    """A declaration ``<name>.toml`` serving ``endpoint`` with llama-cpp-python, pinned to ``<name>.lock.json``
    beside it (and in the ledger): its identity id."""
    directory.mkdir(exist_ok=True)
    config, lock = directory / f"{name}.toml", directory / f"{name}.lock.json"
    config.write_text(f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{endpoint}"\n')
    pinned = cli("pin", "--config", str(config), "--lock", str(lock), "--json", cwd=directory, timeout=180)
    assert pinned.returncode == 0, pinned.stderr
    return json.loads(lock.read_text())["id"]


def register(cli, tmp_path: Path, project: Path) -> Path:
    cases = write_cases(tmp_path / "cases.jsonl")
    plan = tmp_path / "plan.json"
    made = cli("plan", "new", "--arms", "A", "B", "--cases", str(cases), "--config", str(project / "execsys.toml"),
               "--out", str(plan), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return plan


def run_plan(cli, tmp_path: Path, plan: Path, project: Path, a: str, b: str, *extra: str):
    result = cli("plan", "run", str(plan), "--arm", f"A={a}", "--arm", f"B={b}",
                 "--config", str(project / "execsys.toml"), "--json", *extra, cwd=tmp_path, timeout=300)
    assert result.returncode in (0, 1), result.stderr
    return result


@pytest.fixture
def tiny_server(tiny_gguf):
    servers: list[LlamaServer] = []

    def start(*extra_args: str) -> LlamaServer:
        servers.append(LlamaServer(tiny_gguf, extra_args=extra_args).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_an_arm_on_another_engine_under_one_lock_counts_toward_no_identity(cli, tmp_path, ledger_path,
                                                                           tiny_server) -> None:
    a, b = tiny_server(), tiny_server(*CHANGED_FLAGS)
    project = tmp_path / "project"
    identity = pin(cli, project, a.base_url)
    plan = register(cli, tmp_path, project)
    result = run_plan(cli, tmp_path, plan, project, a.base_url, b.base_url)
    data = result.json()
    assert data["schema"] == "execsys.plan-run/2"
    arm_a, arm_b = data["arms"]["A"], data["arms"]["B"]
    # arm A is the pinned system: observed at the start and end of the window, it matches and counts
    assert arm_a["system_check"]["verdict"] == "matches-lock", arm_a["system_check"]
    assert arm_a["identity"] == identity and arm_a["identity_reason"] is None
    assert arm_a["system_check"]["at_start"]["runtime.process.pid"] == a.pid
    assert [o["at"] for o in arm_a["system_check"]["observations"]] == ["start", "end"]
    # arm B answered from an engine started with other flags: it differs and counts toward no identity
    check = arm_b["system_check"]
    assert check["verdict"] == "differs" and check["lock"] == identity
    assert check["at_start"]["runtime.process.pid"] == b.pid and check["at_end"] is not None
    argv = [d for d in check["differences"] if d["component"] == "runtime.process.argv"]
    assert argv and "--n_batch" in argv[0]["observed"] and "--n_batch" not in argv[0]["pinned"]
    assert arm_b["identity"] is None
    assert check["sentence"] in arm_b["identity_reason"] and identity[:12] in arm_b["identity_reason"]
    assert "arm B counts toward no identity" in arm_b["identity_reason"]
    # said once, on one line of stderr, as it was seen (its port differs too: another process)
    [line] = [line for line in result.stderr.splitlines() if "not the pinned system" in line]
    assert line.startswith("arm B: the engine answering this plan is not the pinned system: runtime argv ")
    assert line.endswith("+--n_batch 7"), line

    # the label "budget" is not believed: what moved between the arms is unknown, and compare says why
    compared = cli("compare", f"{data['record']}:A", f"{data['record']}:B", "--intervention", "budget", "--json")
    assert compared.returncode == 1, compared.stderr
    verdict = compared.json()
    assert verdict["label"] == "descriptive" and "Causal" not in verdict["statement"]
    assert any(r.startswith("arm B's identity was not observed") and "not the pinned system" in r
               for r in verdict["reasons"]), verdict["reasons"]
    assert verdict["moved"] is None

    # without --json: one line per arm says what its system was and what it counts toward
    text = cli("plan", "run", str(plan), "--arm", f"A={a.base_url}", "--arm", f"B={b.base_url}",
               "--config", str(project / "execsys.toml"), cwd=tmp_path, timeout=300)
    lines = {line.split()[2]: line for line in text.stdout.splitlines() if line[2:].startswith("system ")}
    assert lines["A"].startswith("✓ system A") and f"matches-lock: identity {identity[:12]}" in lines["A"]
    assert lines["B"].startswith("✗ system B") and "differs: the engine answering this plan" in lines["B"]


def test_arms_pinned_separately_compare_by_their_own_identities(cli, tmp_path, ledger_path, tiny_server) -> None:
    a, b = tiny_server(), tiny_server(*CHANGED_FLAGS)
    # two pinned systems, declared side by side (the harness's observation names the declaration's directory)
    project = tmp_path / "project"
    id_a, id_b = pin(cli, project, a.base_url), pin(cli, project, b.base_url, name="b")
    assert id_a != id_b
    plan = register(cli, tmp_path, project)
    locks = ["--arm-lock", f"A={project / 'execsys.lock.json'}", "--arm-lock", f"B={project / 'b.lock.json'}"]
    result = run_plan(cli, tmp_path, plan, project, a.base_url, b.base_url, *locks)
    assert "not the pinned system" not in result.stderr
    data = result.json()
    for arm, ident in (("A", id_a), ("B", id_b)):
        own = data["arms"][arm]
        assert own["system_check"]["verdict"] == "matches-lock", (arm, own["system_check"])
        assert own["system_check"]["lock"] == ident and own["identity"] == ident
        assert own["system_check"]["lock_file"] == str(project / ("execsys" if arm == "A" else "b")) + ".lock.json"

    # what moved is derived from the two identities, not from the label
    wrong = cli("compare", f"{data['record']}:A", f"{data['record']}:B", "--intervention", "budget", "--json")
    assert wrong.returncode == 1, wrong.stderr
    verdict = wrong.json()
    assert verdict["label"] == "descriptive" and verdict["moved"] == ["runtime"], verdict["moved"]
    assert "you named budget; what moved: runtime" in verdict["reasons"]
    right = cli("compare", f"{data['record']}:A", f"{data['record']}:B", "--intervention", "runtime", "--json")
    assert right.returncode == 0 and right.json()["label"] == "causal", right.json()["reasons"]
    assert "Causal, inside one contemporaneous paired run: changing runtime" in right.json()["statement"]

    # a named arm lock that is not there: one line, exit 2, nothing run
    missing = cli("plan", "run", str(plan), "--arm", f"A={a.base_url}", "--arm", f"B={b.base_url}",
                  "--arm-lock", f"B={tmp_path / 'nowhere.lock.json'}", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [missing.stderr.strip()]
    assert "no such lock file" in missing.stderr
    unknown = cli("plan", "run", str(plan), "--arm", f"A={a.base_url}", "--arm", f"B={b.base_url}",
                  "--arm-lock", f"C={project / 'b.lock.json'}", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown arm 'C'" in unknown.stderr


def test_an_arm_restarted_into_other_flags_since_its_pin_differs(cli, tmp_path, ledger_path, restart_script,
                                                                 tiny_server) -> None:
    moved = restart_script(restart_extra_args=CHANGED_FLAGS)
    steady = tiny_server()
    id_a = pin(cli, tmp_path / "a", moved.base_url)
    id_b = pin(cli, tmp_path / "b", steady.base_url)
    plan = register(cli, tmp_path, tmp_path / "a")
    # the operator restarts arm A's engine into other flags; its lock still says the old ones
    subprocess.run(moved.command, shell=True, check=True, timeout=60)
    assert wait_ready(moved.base_url, 60)
    result = run_plan(cli, tmp_path, plan, tmp_path / "a", moved.base_url, steady.base_url,
                      "--arm-lock", f"B={tmp_path / 'b' / 'execsys.lock.json'}")
    data = result.json()
    arm_a, arm_b = data["arms"]["A"], data["arms"]["B"]
    assert arm_a["system_check"]["verdict"] == "differs" and arm_a["identity"] is None
    assert arm_a["system_check"]["sentence"] == ARM_A_DIFFERS.removeprefix("arm A: ")
    assert id_a[:12] in arm_a["identity_reason"]
    assert arm_b["system_check"]["verdict"] == "matches-lock" and arm_b["identity"] == id_b
    lines = [line for line in result.stderr.splitlines() if "not the pinned system" in line]
    assert lines == [ARM_A_DIFFERS], result.stderr
    # the executed log holds every observation, as it happened
    log = Path(data["log"]).read_text().splitlines()[1:]
    systems = [json.loads(row) for row in log if json.loads(row)["event"] == "system"]
    assert [(e["arm"], e["when"], e["verdict"]) for e in systems] == [
        ("A", "start", "differs"), ("B", "start", "matches-lock"), ("A", "end", "differs"), ("B", "end", "matches-lock")]


def test_an_engine_restarted_into_other_flags_between_the_arms_makes_the_run_descriptive(
        cli, tmp_path, ledger_path, restart_script) -> None:
    """The engine restarts (other flags, same models) after the first arm's first answer, inside the
    window: each arm matched its lock at the start and not at the end, so it counts toward no identity,
    and the no-restart check fails on the serving process that changed -- no causal claim."""
    from execsys.plan import ArmAnswered, ArmSystemDiffers, PlanRunOptions, load_plan, run_plan
    from execsys.sources import load_sources

    server = restart_script(restart_extra_args=CHANGED_FLAGS)
    project = tmp_path / "project"
    identity = pin(cli, project, server.base_url)
    plan_path = register(cli, tmp_path, project)
    before = server.pid
    sources = load_sources(project / "execsys.toml")
    options = PlanRunOptions.from_sources(sources.declaration, sources.lock, plan=load_plan(plan_path),
                                          endpoints={"A": server.base_url, "B": server.base_url},
                                          arm_params={"B": {"seed": 3}}, plan_path=plan_path, ledger=ledger_path)
    seen: list[object] = []

    def on_event(event: object) -> None:
        seen.append(event)
        if isinstance(event, ArmAnswered) and sum(isinstance(e, ArmAnswered) for e in seen) == 1:
            subprocess.run(server.command, shell=True, check=True, timeout=60)
            assert wait_ready(server.base_url, 60)

    run = run_plan(options, on_event=on_event)
    assert server.pid != before
    data = run.to_json()
    for arm in ("A", "B"):
        check = data["arms"][arm]["system_check"]
        assert [o["verdict"] for o in check["observations"]] == ["matches-lock", "differs"], check
        assert check["verdict"] == "differs" and check["at_start"]["runtime.process.pid"] == before
        assert check["at_end"]["runtime.process.pid"] == server.pid
        assert data["arms"][arm]["identity"] is None and identity[:12] in data["arms"][arm]["identity_reason"]
    told = [e for e in seen if isinstance(e, ArmSystemDiffers)]
    assert [(e.arm, e.at) for e in told] == [("A", "end"), ("B", "end")]
    assert told[0].message == ARM_A_DIFFERS
    failed = {c.name: c.detail for c in run.checks if not c.passed}
    assert "no-restart" in failed and "arm A's serving process changed inside the window" in failed["no-restart"]
    assert run.label == "descriptive"
    # the executed log alone says so too
    checked = cli("plan", "check", str(plan_path), "--executed", str(run.log), "--json", cwd=tmp_path)
    assert checked.returncode == 1
    assert any(v.startswith("no-restart: ") and "serving process changed" in v for v in checked.json()["violations"])
