"""`execsys scope`: the comparability licence stated from real ledger records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.ledger import Ledger
from execsys.scope import AXES, audit, compute_scope, contract_markdown


def write_lock(path: Path, **declared) -> str:
    """A real execsys.identity/1 lock file (id = content id of the components)."""
    components = {name: {"declared": dict(declared.get(name, {})), "observed": {}} for name in COMPONENTS}
    data = {"schema": "execsys.identity/1", "id": content_id(components), "recorded_at": "2026-11-30T00:00:00Z",
            "declaration": {}, "components": components, "notes": []}
    path.write_text(json.dumps(data))
    return data["id"]


def add_probe(ledger_path: Path, identity: str | None, axis: str, m: int, n: int) -> str:
    from execsys.stats import wilson

    with Ledger.open(ledger_path) as ledger:
        return ledger.append("probe", {
            "schema": "execsys.probe/1", "axis": axis, "identity": identity, "n": n, "m": m,
            "agreement_rate": m / n, "ci95": list(wilson(m, n)), "scope": {},
        }, identity=identity)


@pytest.fixture
def lock(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "execsys.lock.json"
    return path, write_lock(path, hardware={"host": "gpu1"}, runtime={"engine": "vllm"})


def test_no_probes_licenses_nothing(cli, lock) -> None:
    path, ident = lock
    result = cli("scope", "--lock", str(path), "--json")
    assert result.returncode == 0  # nothing unstable was found; nothing is licensed either
    data = result.json()
    assert data["schema"] == "execsys.scope/1"
    assert data["identity"] == ident
    assert data["licensed"] == [] and data["unstable"] == [] and data["measured"] == {}
    assert data["unmeasured"] == list(AXES)
    assert data["needs_paired_control"] == list(AXES)
    assert "no comparability is licensed" in data["statement"]
    assert "probably" not in data["statement"]


def test_a_stable_session_probe_licenses_one_session_on_the_host(cli, lock, ledger_path) -> None:
    path, ident = lock
    record = add_probe(ledger_path, ident, "session", 20, 20)
    result = cli("scope", "--lock", str(path), "--json")
    assert result.returncode == 0
    data = result.json()
    assert data["licensed"] == ["session"]
    assert data["unmeasured"] == ["restart", "concurrency", "hosts", "redeploy"]
    assert data["measured"]["session"]["m"] == 20 and data["measured"]["session"]["n"] == 20
    assert data["measured"]["session"]["agreement_rate"] == 1.0
    assert data["measured"]["session"]["record"] == record
    low, high = data["measured"]["session"]["ci95"]
    assert 0.83 < low < 0.84 and high == 1.0
    assert "comparable within one session on host gpu1" in data["statement"]
    assert "session agreement 20/20 = 1.00" in data["statement"]
    assert "Not licensed (never probed under this identity): restart, concurrency, hosts, redeploy" in data["statement"]


def test_an_unstable_restart_probe_requires_a_paired_control(cli, lock, ledger_path) -> None:
    path, ident = lock
    add_probe(ledger_path, ident, "session", 20, 20)
    add_probe(ledger_path, ident, "restart", 12, 20)
    result = cli("scope", "--lock", str(path), "--json")
    assert result.returncode == 1  # an unstable axis is a finding
    data = result.json()
    assert data["unstable"] == ["restart"]
    assert data["licensed"] == ["session"]
    assert "restart" in data["needs_paired_control"]
    assert data["measured"]["restart"]["agreement_rate"] == 0.6
    assert ("causal claims crossing restart need a contemporaneous paired control "
            "(restart agreement 12/20 = 0.60") in data["statement"].lower()
    human = cli("scope", "--lock", str(path))
    assert "12/20 = 0.60" in human.stdout and "unstable" in human.stdout


def test_an_unstable_session_caps_the_licence_even_if_a_wider_axis_agreed(ledger_path, lock) -> None:
    _path, ident = lock
    add_probe(ledger_path, ident, "session", 18, 20)
    add_probe(ledger_path, ident, "restart", 20, 20)
    with Ledger.open(ledger_path) as ledger:
        report = compute_scope(ledger, ident)
    assert report.licence is None
    assert report.unstable == ["session"] and report.licensed == ["restart"]


def test_probes_under_another_identity_do_not_count(cli, lock, ledger_path, tmp_path) -> None:
    path, ident = lock
    other = write_lock(tmp_path / "other.lock.json", hardware={"host": "gpu2"})
    add_probe(ledger_path, other, "session", 20, 20)
    add_probe(ledger_path, other, "restart", 3, 20)
    add_probe(ledger_path, None, "hosts", 20, 20)
    data = cli("scope", "--lock", str(path), "--json").json()
    assert data["measured"] == {} and data["licensed"] == [] and data["unstable"] == []
    assert data["ignored"]["records"] == 3
    assert other in data["ignored"]["identities"]
    assert "3 probe records under 2 other identities do not count" in data["statement"]
    # the other identity sees its own probes
    theirs = cli("scope", "--identity", other, "--json")
    assert theirs.returncode == 1 and theirs.json()["unstable"] == ["restart"]


def test_repeated_probes_of_one_axis_pool(ledger_path, lock) -> None:
    _path, ident = lock
    add_probe(ledger_path, ident, "session", 20, 20)
    add_probe(ledger_path, ident, "session", 19, 20)
    with Ledger.open(ledger_path) as ledger:
        report = compute_scope(ledger, ident)
    assert report.measured["session"].m == 39 and report.measured["session"].n == 40
    assert report.unstable == ["session"]
    assert len(report.measured["session"].records) == 2


def test_contract_section_is_written(cli, lock, ledger_path, tmp_path) -> None:
    path, ident = lock
    add_probe(ledger_path, ident, "session", 20, 20)
    add_probe(ledger_path, ident, "restart", 12, 20)
    contract = tmp_path / "contract.md"
    result = cli("scope", "--lock", str(path), "--contract", str(contract))
    assert result.returncode == 1
    text = contract.read_text()
    assert text.startswith("## Comparability")
    assert ident in text
    assert "| restart | 0.60 | 12/20 |" in text
    assert "| hosts | - | - | - | not probed: unlicensed | - |" in text
    assert "crossing **restart**: unstable (12/20 = 0.60" in text
    assert "| runtime | engine=vllm |" in text


def test_contract_keeps_the_rest_of_an_existing_contract(cli, lock, ledger_path, tmp_path) -> None:
    # --contract names the experiment contract; only its comparability section is execsys's to write
    path, ident = lock
    add_probe(ledger_path, ident, "session", 20, 20)
    contract = tmp_path / "contract.md"
    contract.write_text("# Contract\n\n## Hypothesis\nA beats B.\n\n## Comparability\nstale text\n\n"
                        "### stale subsection\n\n## Analysis\nMcNemar on discordant pairs.\n")
    assert cli("scope", "--lock", str(path), "--contract", str(contract)).returncode == 0
    assert cli("scope", "--lock", str(path), "--contract", str(contract)).returncode == 0  # idempotent
    text = contract.read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## Hypothesis", "## Comparability", "## Analysis"]
    assert "A beats B." in text and "McNemar on discordant pairs." in text
    assert "stale" not in text and ident in text
    appended = tmp_path / "plain.md"
    appended.write_text("# Contract\n\n## Hypothesis\nH.\n")
    cli("scope", "--lock", str(path), "--contract", str(appended))
    assert appended.read_text().startswith("# Contract\n\n## Hypothesis\nH.\n\n## Comparability\n")


@pytest.mark.parametrize("where", ["dir", "binary", "missing-parent"])
def test_unwritable_contract_is_one_line_exit_2(cli, lock, tmp_path, where: str) -> None:
    path, _ident = lock
    target = {"dir": tmp_path, "binary": tmp_path / "bin.md", "missing-parent": Path("/proc/no/such/c.md")}[where]
    if where == "binary":
        target.write_bytes(b"\xff\xfe\x00")
    result = cli("scope", "--lock", str(path), "--contract", str(target))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "internal error" not in result.stderr
    if where == "binary":
        assert target.read_bytes() == b"\xff\xfe\x00"


def test_audit_flags_comparisons_crossing_an_axis_found_unstable(cli, lock, ledger_path) -> None:
    _path, ident = lock
    with Ledger.open(ledger_path) as ledger:
        crossing = ledger.append("comparison", {"schema": "execsys.comparison/1", "identities": [ident],
                                                "crossed": ["restart"], "label": "causal"}, identity=ident)
        inside = ledger.append("comparison", {"schema": "execsys.comparison/1", "identities": [ident],
                                              "crossed": [], "label": "causal"}, identity=ident)
    before = cli("scope", "--audit", "--json")
    assert before.returncode == 0 and before.json()["flagged"] == 0
    add_probe(ledger_path, ident, "restart", 12, 20)
    after = cli("scope", "--audit", "--json")
    assert after.returncode == 1
    data = after.json()
    flagged = {c["comparison"]: c for c in data["comparisons"]}
    assert flagged[crossing]["verdict"] == "needs re-evaluation or a paired control"
    assert flagged[crossing]["unstable_now"] == ["restart"]
    assert flagged[inside]["verdict"] == "ok"
    human = cli("scope", "--audit")
    assert "needs re-evaluation or a paired control" in human.stdout and "12/20 = 0.60" in human.stdout


def test_audit_unit(ledger_path, lock) -> None:
    _path, ident = lock
    add_probe(ledger_path, ident, "hosts", 1, 2)
    with Ledger.open(ledger_path) as ledger:
        ledger.append("comparison", {"identities": [ident], "crossed": ["hosts"], "label": "descriptive",
                                     "paired_control": True}, identity=ident)
        report = audit(ledger)
    assert report.checked == 1 and report.flagged == []  # a paired control is not affected


def test_identity_errors_are_exit_2(cli, tmp_path) -> None:
    missing = cli("scope", "--lock", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "no such lock file" in missing.stderr
    nothing = cli("scope", cwd=tmp_path)
    assert nothing.returncode == 2 and "--lock" in nothing.stderr
    bogus = cli("scope", "--identity", "zz")
    assert bogus.returncode == 2 and len(bogus.stderr.strip().splitlines()) == 1


def test_compute_scope_api_for_the_tui(ledger_path, lock) -> None:
    _path, ident = lock
    add_probe(ledger_path, ident, "session", 5, 5)
    with Ledger.open(ledger_path) as ledger:
        report = compute_scope(ledger, ident)
    data = report.to_json()
    for key in ("identity", "licensed", "unstable", "unmeasured", "measured", "needs_paired_control", "statement"):
        assert key in data
    assert "## Comparability" in contract_markdown(report, None)


def test_real_probe_then_scope(cli, lock, tmp_path, llama_server) -> None:
    """End to end: a session probe against a real llama.cpp server, then the scope it licenses."""
    path, ident = lock
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"Item {i}:", "max_tokens": 8}) + "\n"
                             for i in range(6)))
    probe = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", str(cases),
                "--lock", str(path), "--json")
    assert probe.returncode in (0, 1), probe.stderr
    record = probe.json()
    data = cli("scope", "--lock", str(path), "--json").json()
    session = data["measured"]["session"]
    assert (session["m"], session["n"]) == (record["m"], record["n"])
    assert ("session" in data["licensed"]) == (record["m"] == record["n"])
    assert ("session" in data["unstable"]) == (record["m"] != record["n"])



def test_probes_of_two_case_sets_are_not_pooled(cli, lock, tmp_path, llama_server) -> None:
    """Two session probes against the real llama.cpp server with different cases: scope counts the
    newest, and lists the other as not pooled, naming its cases."""
    path, _ident = lock
    records = []
    for name, count in (("first.jsonl", 3), ("second.jsonl", 4)):
        cases = tmp_path / name
        cases.write_text("".join(json.dumps({"id": f"{name}-{i}", "prompt": f"Item {i}:", "max_tokens": 4}) + "\n"
                                 for i in range(count)))
        probe = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", str(cases),
                    "--lock", str(path), "--json")
        assert probe.returncode in (0, 1), probe.stderr
        records.append(probe.json())
    first, second = records
    data = cli("scope", "--lock", str(path), "--json").json()
    session = data["measured"]["session"]
    assert (session["records"], session["n"]) == ([second["id"]], second["n"])
    assert [e["record"] for e in data["excluded"]] == [first["id"]]
    assert data["excluded"][0]["reason"] == (
        f"probed another case set: first.jsonl (cases digest {first['cases_digest'][:12]}), not second.jsonl "
        f"(cases digest {second['cases_digest'][:12]}): not pooled with {second['id']}, the newest session probe")
    human = cli("scope", "--lock", str(path))
    assert f"not counted  {first['id']}: probed another case set: first.jsonl" in human.stdout


def test_the_contract_names_what_serves_from_a_real_pin(cli, tmp_path, llama_server) -> None:
    """`execsys pin` against the real llama.cpp server, then `scope --contract`: the runtime row names the
    engine and its version, the endpoint, the served model and digest -- not the restart command alone --
    and no cell is cut inside a word."""
    restart = ("sh -c 'kill $(cat server.pid) && python -m llama_cpp.server --model "
               f"{llama_server.model_path} --model_alias tiny --n_ctx 256 --port 8000 --host 127.0.0.1'")
    (tmp_path / "execsys.toml").write_text(
        f'[artifact]\npath = "{llama_server.model_path}"\n[runtime]\nengine = "llama-cpp-python"\n'
        f'endpoint = "{llama_server.base_url}"\nrestart = "{restart}"\n')
    pinned = cli("pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    runtime = pinned.json()["components"]["runtime"]["observed"]
    contract = tmp_path / "contract.md"
    assert cli("scope", "--contract", str(contract), cwd=tmp_path).returncode == 0
    rows = {line.split(" | ")[0][2:]: line.split(" | ", 1)[1][:-2] for line in contract.read_text().splitlines()
            if line.startswith("| ") and " | " in line}
    facts = (f"engine=llama-cpp-python {runtime['engine']['version']}, endpoint={llama_server.base_url}, "
             f"served model={llama_server.alias}, served digest={runtime['served']['digest']} (the pinned artifact), "
             "restart=")
    assert rows["runtime"].startswith(facts)
    assert rows["runtime"].endswith(" …") and len(rows["runtime"]) <= 242
    assert (facts + restart).startswith(rows["runtime"][:-2] + " ")  # the restart command ends at a whole word
    for name in ("artifact", "hardware"):  # every other cell whole, or ended at a whole word
        assert not rows[name].endswith("…") or rows[name][-2] == " ", rows[name]

def test_a_probe_that_saw_the_engine_change_does_not_measure_the_axis(ledger_path, lock) -> None:
    _path, ident = lock
    with Ledger.open(ledger_path) as ledger:
        rid = ledger.append("probe", {"schema": "execsys.probe/1", "axis": "restart", "identity": ident, "m": 3,
                                      "n": 20, "scope": {"engine_changed": True}}, identity=ident)
        report = compute_scope(ledger, ident)
    assert "restart" in report.unmeasured and report.unstable == []
    assert report.excluded[0]["record"] == rid
    assert "engine change" in report.statement


def test_the_lock_beside_the_declaration_is_the_default(cli, ledger_path, tmp_path) -> None:
    """`execsys pin --config eval/execsys.toml` writes eval/execsys.lock.json: scope run from the
    repository root with the same --config speaks for that identity."""
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "execsys.toml").write_text('[runtime]\nengine = "vllm"\n')
    ident = write_lock(tmp_path / "eval" / "execsys.lock.json", hardware={"host": "gpu1"})
    add_probe(ledger_path, ident, "session", 5, 5)
    data = cli("scope", "--config", "eval/execsys.toml", "--json", cwd=tmp_path).json()
    assert data["identity"] == ident and data["licensed"] == ["session"]
    # the same through $EXECSYS_CONFIG
    via_env = cli("scope", "--json", cwd=tmp_path, env={"EXECSYS_CONFIG": "eval/execsys.toml"})
    assert via_env.json()["identity"] == ident


def test_no_lock_names_where_it_looked(cli, tmp_path) -> None:
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "execsys.toml").write_text("")
    result = cli("scope", "--config", "eval/execsys.toml", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no pinned identity (looked for eval/execsys.lock.json)" in lines[0]
    both = cli("scope", "--lock", "x.lock.json", "--identity", "abc", cwd=tmp_path)
    assert both.returncode == 2 and "not both" in both.stderr


def test_a_record_carrying_an_identity_resolves_to_it(cli, ledger_path, lock) -> None:
    """A probe record id (or a bare id the ledger knows only from probes) names the identity probed."""
    _path, ident = lock
    probe_id = add_probe(ledger_path, ident, "restart", 4, 4)
    for ref in (probe_id, ident, ident[:10]):
        data = cli("scope", "--identity", ref, "--json").json()
        assert data["identity"] == ident and data["licensed"] == ["restart"], ref
    # a complete id nothing was recorded under licenses nothing; a short unknown string is an error
    unseen = cli("scope", "--identity", "e" * 64, "--json")
    assert unseen.returncode == 0 and unseen.json()["licensed"] == []
    assert cli("scope", "--identity", "e" * 10).returncode == 2


def test_run_scope_is_the_engine_the_command_calls(ledger_path, lock) -> None:
    from execsys.errors import UsageError
    from execsys.identity import load_lock
    from execsys.scope import IdentityResolved, ScopeOptions, run_audit, run_scope

    path, ident = lock
    add_probe(ledger_path, ident, "session", 3, 4)
    events: list = []
    options = ScopeOptions.from_sources(None, load_lock(path))
    report = run_scope(options, events.append)
    assert events == [IdentityResolved(ident, str(path), True)]
    assert report.unstable == ["session"] and report.host == "gpu1"
    assert report.ref is not None and report.ref.components["hardware"]["declared"] == {"host": "gpu1"}
    assert "| hardware | host=gpu1 |" in contract_markdown(report, report.ref)
    assert run_audit(ScopeOptions.from_sources(None, None, audit=True)).checked == 0
    with pytest.raises(UsageError, match=r"no pinned identity \(looked for eval/execsys.lock.json\)"):
        ScopeOptions.from_sources(None, None, lock_path=Path("eval/execsys.lock.json"))
