"""The comparability licence (execsys/scope.py) in-process: the verdict per axis, the statement, the
contract section and the audit, from real probe and comparison records in a real SQLite ledger.

In-process, so that scripts/mutation.sh's runs see them (test_scope.py drives most of this through
`execsys scope` subprocesses, which import the unmutated checkout). Each statement below is the exact
sentence a user reads, written out by hand from the records seeded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from execsys.errors import InputError, UsageError
from execsys.ledger import Ledger
from execsys.scope import (
    AXES,
    IdentityRef,
    ScopeOptions,
    audit,
    compute_scope,
    contract_markdown,
    merge_contract,
    resolve_identity,
    run_audit,
    run_scope,
)

ID = "1" * 64
OTHER = "2" * 64


def probe(ledger: Ledger, axis: str, m: int, n: int, identity: str | None = ID, **scope) -> str:
    """A probe record as the runner writes it: a restart or redeploy probe that saw its event happen."""
    body = {"schema": "execsys.probe/2", "axis": axis, "identity": identity, "n": n, "m": m, "scope": scope,
            "system_check": {"verdict": "unverified", "lock": identity}}
    if axis in ("restart", "redeploy"):
        body["evidence"] = {"event": axis, "verdict": "observed", "sentence": f"{axis} observed"}
    return ledger.append("probe", body, identity=identity)


@pytest.fixture
def ledger(tmp_path: Path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as opened:
        yield opened


def test_nothing_probed_licenses_nothing(ledger: Ledger) -> None:
    report = compute_scope(ledger, ID)
    assert (report.licensed, report.unstable, report.measured, report.licence) == ([], [], {}, None)
    assert report.unmeasured == list(AXES) and report.needs_paired_control == list(AXES)
    assert report.statement == (
        "Identity 111111111111: no comparability is licensed: no boundary has been probed under this identity. "
        "Not licensed (never probed under this identity): session, restart, concurrency, hosts, redeploy.")


def test_a_stable_restart_licenses_restarts_on_the_pinned_machine(ledger: Ledger) -> None:
    first = probe(ledger, "restart", 20, 20)
    second = probe(ledger, "restart", 10, 10, host="gpu7")
    probe(ledger, "session", 5, 5)
    report = compute_scope(ledger, ID)
    assert report.host == "gpu7"  # from the probe's scope, as the lock named none
    restart = report.measured["restart"]
    assert (restart.m, restart.n, restart.record, restart.records) == (30, 30, second, [first, second])
    assert restart.figure() == "30/30 = 1.00, 95% CI 0.89-1.00"
    assert report.licensed == ["session", "restart"] and report.licence == "restart"
    assert report.needs_paired_control == ["concurrency", "hosts", "redeploy"]
    assert report.statement == (
        "Identity 111111111111: comparable across server restarts on host gpu7 (restart agreement "
        "30/30 = 1.00, 95% CI 0.89-1.00). Not licensed (never probed under this identity): concurrency, hosts, "
        "redeploy.")
    data = report.to_json()
    assert data["measured"]["restart"] == {"m": 30, "n": 30, "agreement_rate": 1.0,
                                           "ci95": [pytest.approx(0.8865, abs=5e-5), 1.0],
                                           "record": second, "records": [first, second]}
    assert data["licence"] == "restart" and data["host"] == "gpu7" and data["excluded"] == []
    assert (data["schema"], data["identity"], data["statement"], data["grader"]) == (
        "execsys.scope/1", ID, report.statement, None)
    assert (data["licensed"], data["unstable"], data["unmeasured"], data["needs_paired_control"]) == (
        ["session", "restart"], [], ["concurrency", "hosts", "redeploy"], ["concurrency", "hosts", "redeploy"])
    assert data["ignored"]["reason"] == ("probes taken under a different identity do not count: a boundary "
                                         "belongs to one pinned identity")
    assert data["ignored"]["records"] == 0 and data["ignored"]["identities"] == []


def test_an_unstable_axis_caps_the_licence_and_needs_a_paired_control(ledger: Ledger) -> None:
    probe(ledger, "session", 12, 20)
    probe(ledger, "restart", 20, 20)  # wider, stable: still not licensed past the unstable session
    probe(ledger, "concurrency", 9, 10)
    report = compute_scope(ledger, ID, host="gpu1")
    assert report.licensed == ["restart"] and report.unstable == ["session", "concurrency"]
    assert report.licence is None
    assert report.statement == (
        "Identity 111111111111: no comparability is licensed: no boundary was measured with agreement 1.0. "
        "Causal claims crossing session need a contemporaneous paired control (session agreement "
        "12/20 = 0.60, 95% CI 0.39-0.78). "
        "Causal claims crossing concurrency need a contemporaneous paired control (concurrency agreement "
        "9/10 = 0.90, 95% CI 0.60-0.98). "
        "Not licensed (never probed under this identity): hosts, redeploy.")


@pytest.mark.parametrize(("concurrency", "extra"), [
    ((10, 10), ", also under concurrent load"),
    ((3, 10), ", with requests sent one at a time"),
    (None, ""),
])
def test_the_licence_says_how_requests_were_sent(ledger: Ledger, concurrency, extra: str) -> None:
    probe(ledger, "session", 8, 8)
    if concurrency:
        probe(ledger, "concurrency", *concurrency)
    report = compute_scope(ledger, ID)
    assert report.statement.startswith(
        f"Identity 111111111111: comparable within one session{extra} (session agreement 8/8 = 1.00, 95% CI 0.68-1.00).")


def test_the_widest_stable_boundary_of_the_chain_is_the_licence(ledger: Ledger) -> None:
    for axis in ("session", "restart", "hosts", "redeploy"):
        probe(ledger, axis, 4, 4)
    report = compute_scope(ledger, ID, host="h")
    assert report.licence == "redeploy"
    assert report.statement.startswith("Identity 111111111111: comparable across redeploys (redeploy agreement 4/4")
    probe(ledger, "hosts", 1, 2)
    capped = compute_scope(ledger, ID, host="h")
    assert capped.licence == "restart" and capped.unstable == ["hosts"]
    assert capped.statement.startswith("Identity 111111111111: comparable across server restarts on host h ")


def test_probes_of_other_identities_and_of_engine_changes_do_not_count(ledger: Ledger) -> None:
    probe(ledger, "session", 10, 10)
    o1 = probe(ledger, "session", 1, 10, identity=OTHER)
    o2 = probe(ledger, "restart", 1, 10, identity=OTHER)
    none = probe(ledger, "restart", 0, 10, identity=None)
    changed = probe(ledger, "restart", 2, 10, engine_changed=True)
    probe(ledger, "sideways", 1, 10)  # not an axis
    probe(ledger, "restart", 11, 10)  # m > n: not a figure
    probe(ledger, "restart", 0, 0)  # nothing compared
    report = compute_scope(ledger, ID)
    assert report.licensed == ["session"] and report.unstable == [] and "restart" not in report.measured
    assert report.other_identities == {OTHER: [o1, o2], "none (probe taken without a pinned identity)": [none]}
    assert report.ignored_probes == 3
    assert report.excluded == [{"record": changed, "reason": "restart probe saw the engine change between passes: "
                                "it measured the engine change, not the axis"}]
    assert report.statement.endswith(
        "3 probe records under 2 other identities do not count: a boundary belongs to one pinned identity. "
        "1 probe record of this identity measured an engine change rather than its axis and did not count.")
    data = report.to_json()
    assert data["ignored"]["records"] == 3
    assert data["ignored"]["identities"] == sorted([OTHER, "none (probe taken without a pinned identity)"])


def test_one_other_record_and_two_exclusions_are_counted_in_words(ledger: Ledger) -> None:
    probe(ledger, "session", 10, 10)
    probe(ledger, "session", 1, 10, identity=OTHER)
    probe(ledger, "restart", 2, 10, engine_changed=True)
    probe(ledger, "hosts", 2, 10, engine_changed=True)
    statement = compute_scope(ledger, ID).statement
    assert ("1 probe record under 1 other identity does not count: a boundary belongs to one pinned identity. "
            "2 probe records of this identity measured an engine change rather than its axis and did not count."
            ) in statement


def test_the_grader_boundary_is_stated_beside_the_axes(ledger: Ledger) -> None:
    probe(ledger, "session", 5, 5)
    g1 = probe(ledger, "grader", 7, 10)
    g2 = probe(ledger, "grader", 10, 10)
    probe(ledger, "grader", 0, 4, identity=OTHER)
    report = compute_scope(ledger, ID)
    assert report.grader is not None
    assert report.grader["m"] == 17 and report.grader["n"] == 20 and report.grader["records"] == [g1, g2]
    assert report.grader["ci95"] == pytest.approx([0.6396, 0.9476], abs=5e-5)
    assert report.grader["sentence"] == "verdicts agree 17/20 (0.85) across repeats: a 15-point difference is within grader noise"
    assert report.statement.endswith(" Grader: verdicts agree 17/20 (0.85) across repeats: a 15-point difference "
                                     "is within grader noise.")
    clean = Ledger.open(ledger.path.parent / "clean.sqlite3")
    with clean:
        probe(clean, "grader", 6, 6)
        assert compute_scope(clean, ID).grader["sentence"] == (  # type: ignore[index]
            "verdicts agree 6/6 (1.00) across repeats: score differences are not grader flips at this n")
        probe(clean, "grader", 0, 0, identity=OTHER)
        assert compute_scope(clean, OTHER).grader is None


def test_the_contract_section_states_every_axis(ledger: Ledger) -> None:
    restart = probe(ledger, "restart", 3, 5)
    session = probe(ledger, "session", 5, 5)
    report = compute_scope(ledger, ID, host="gpu1")
    ref = IdentityRef(ID, {"model": {"declared": {"name": "llama", "revision": "abc", "extra": {"x": 1}}},
                           "runtime": {"declared": {}, "observed": {}}, "hardware": {"host": "a|b"}})
    text = contract_markdown(report, ref)
    assert text.startswith(f"## Comparability\n\n- Identity: `{ID}`\n- Scope computed: ")
    assert f"### Scope statement\n\n{report.statement}\n" in text
    assert "| model | name=llama, revision=abc |" in text
    assert "| artifact | (not declared) |" in text
    assert "| hardware | host=a\\|b |" in text
    assert "| runtime | (not declared) |" in text
    assert f"| session | 1.00 | 5/5 | 0.57-1.00 | licensed | `{session}` |" in text
    assert f"| restart | 0.60 | 3/5 | 0.23-0.88 | unstable: paired control required | `{restart}` |" in text
    assert "| hosts | - | - | - | not probed: unlicensed | - |" in text
    assert ("- Any causal claim crossing **restart**: unstable (3/5 = 0.60, 95% CI 0.23-0.88). Run both arms inside "
            "one window (`execsys plan new ... --design abba`) or report the comparison as descriptive.") in text
    assert "- Any causal claim crossing **hosts**: never probed under this identity." in text
    assert "None: every probe axis" not in text and "other identities" not in text
    assert text.endswith("\n") and not text.endswith("\n\n")
    bare = contract_markdown(report)
    assert "### Pinned components" not in bare


def test_a_contract_with_every_axis_licensed_needs_no_paired_control(ledger: Ledger) -> None:
    for axis in AXES:
        probe(ledger, axis, 2, 2)
    probe(ledger, "session", 1, 2, identity=OTHER)
    report = compute_scope(ledger, ID)
    text = contract_markdown(report, None)
    assert "\n- None: every probe axis was measured with agreement 1.0 under this identity.\n" in text
    assert "Probe records under other identities (1) were not counted." in text


def test_merging_replaces_only_the_comparability_section() -> None:
    section = "## Comparability\n\nnew\n"
    assert merge_contract("", section) == section
    assert merge_contract("  \n", section) == section
    assert merge_contract("# Plan\n\nkeep\n", section) == "# Plan\n\nkeep\n\n" + section
    old = "# Plan\n\nintro\n## Comparability\n\nold\n### sub\nold too\n## Results\n\nkept\n"
    assert merge_contract(old, section) == "# Plan\n\nintro\n## Comparability\n\nnew\n\n## Results\n\nkept\n"
    at_end = "# Plan\n## Comparability\nold\n"
    assert merge_contract(at_end, section) == "# Plan\n## Comparability\n\nnew\n"
    top = "## Comparability\nold\n# Next\nkept\n"
    assert merge_contract(top, section) == "## Comparability\n\nnew\n\n# Next\nkept\n"


def comparison(ledger: Ledger, identities: list[str], crossed: list[str], *, paired: bool = False, **extra) -> str:
    body = {"identities": identities, "crossed": crossed, "label": "causal", "paired_control": paired, **extra}
    return ledger.append("comparison", body, identity=identities[0] if identities else None)


def test_the_audit_flags_what_crossed_an_axis_since_found_unstable(ledger: Ledger) -> None:
    flagged = comparison(ledger, [ID], ["restart", "hosts", "bogus"])
    paired = comparison(ledger, [ID], ["restart"], paired=True)
    fine = comparison(ledger, [OTHER], ["restart"], a={"run": "run-1"}, b={"run": "run-2"})
    probe(ledger, "restart", 12, 20)
    probe(ledger, "restart", 20, 20, identity=OTHER)
    report = audit(ledger)
    assert report.checked == 3 and [f.comparison for f in report.flagged] == [flagged]
    first = report.findings[0]
    assert (first.crossed, first.unstable_now, first.unmeasured_now) == (["restart", "hosts"], ["restart"], ["hosts"])
    assert first.statement == (f"Comparison {flagged} (causal) crossed restart, since found unstable (restart "
                               "agreement 12/20 = 0.60, 95% CI 0.39-0.78): needs re-evaluation or a paired control.")
    assert report.findings[1].verdict == "ok"
    assert report.findings[1].statement == f"Comparison {paired}: a contemporaneous paired control; unaffected."
    assert report.findings[2].statement == (f"Comparison {fine}: crossed no axis now known to be unstable. "
                                            "(between runs run-1 and run-2)")
    assert report.findings[2].runs == ["run-1", "run-2"]
    data = report.to_json()
    assert (data["schema"], data["checked"], data["flagged"]) == ("execsys.scope-audit/1", 3, 1)
    assert data["comparisons"][2] == {
        "comparison": fine, "recorded_at": ledger.get(fine).created_at, "label": "causal", "crossed": ["restart"],
        "unstable_now": [], "unmeasured_now": [], "verdict": "ok", "statement": report.findings[2].statement,
        "runs": ["run-1", "run-2"]}
    assert data["comparisons"][0]["unmeasured_now"] == ["hosts"] and data["comparisons"][0]["crossed"] == [
        "restart", "hosts"]
    assert data["comparisons"][0]["verdict"] == "needs re-evaluation or a paired control"
    only_other = audit(ledger, OTHER)
    assert only_other.checked == 1 and only_other.flagged == []


def test_an_axis_unstable_under_either_identity_flags_the_comparison(ledger: Ledger) -> None:
    both = comparison(ledger, [ID, OTHER], ["session"])
    probe(ledger, "session", 10, 10)
    probe(ledger, "session", 4, 10, identity=OTHER)
    finding = audit(ledger).findings[0]
    assert finding.comparison == both and finding.unstable_now == ["session"] and finding.unmeasured_now == []
    assert "(session agreement 4/10 = 0.40, 95% CI 0.17-0.69)" in finding.statement


def test_the_machine_of_an_identity_is_read_from_its_hardware() -> None:
    assert IdentityRef(ID, {"hardware": {"host": "a"}}).host() == "a"
    assert IdentityRef(ID, {"hardware": {"declared": {"hostname": "b"}, "observed": {"host": "c"}}}).host() == "b"
    assert IdentityRef(ID, {"hardware": {"declared": {"host": ""}, "observed": {"hostname": "c"}}}).host() == "c"
    assert IdentityRef(ID, {"hardware": {"declared": {"host": 5}}}).host() is None
    assert IdentityRef(ID, {}).host() is None


def test_scope_options_refuse_what_cannot_be_scoped(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="^--identity is empty: give an identity id, a ledger record id or a lock file$"):
        ScopeOptions.from_sources(identity="  ")
    with pytest.raises(UsageError, match=r"^no pinned identity \(looked for eval/execsys.lock.json\): give --lock "):
        ScopeOptions.from_sources(lock_path=Path("eval/execsys.lock.json"))
    with pytest.raises(UsageError, match=r"looked for execsys.lock.json\)"):
        ScopeOptions.from_sources()
    assert ScopeOptions.from_sources(audit=True).audit is True
    assert ScopeOptions.from_sources(identity=ID).identity == ID


def test_run_scope_speaks_for_a_complete_id_nothing_was_recorded_under(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger.open(path) as opened:
        probe(opened, "session", 3, 3)
    events: list = []
    report = run_scope(ScopeOptions.from_sources(identity=ID, ledger=path), on_event=events.append)
    assert report.licensed == ["session"] and report.ref is not None and report.ref.id == ID
    assert [(e.identity, e.source, e.components_known) for e in events] == [(ID, report.ref.source, False)]
    assert ID in report.ref.source
    empty = run_scope(ScopeOptions.from_sources(identity=OTHER, ledger=path))
    assert empty.measured == {} and empty.identity == OTHER
    with Ledger.open(path) as opened:
        with pytest.raises(InputError):
            resolve_identity("abc123", opened)  # a short string must be found, not taken as an id
        assert resolve_identity(ID, opened).id == ID
    audited = run_audit(ScopeOptions.from_sources(audit=True, ledger=path), on_event=events.append)
    assert audited.checked == 0 and len(events) == 1  # no identity given: nothing resolved


def write_lock(path: Path, declared: dict, observed: dict) -> str:
    from execsys import COMPONENTS
    from execsys.canonical import content_id
    from execsys.identity import SCHEMA

    components = {name: {"declared": declared.get(name, {}), "observed": observed.get(name, {})} for name in COMPONENTS}
    ident = content_id(components)
    path.write_text(json.dumps({"schema": SCHEMA, "id": ident, "recorded_at": "2026-12-01T00:00:00Z",
                                "declaration": {}, "components": components, "notes": []}))
    return ident


def test_the_whole_contract_section_of_a_pinned_identity(tmp_path: Path) -> None:
    from execsys.identity import load_lock

    lock = tmp_path / "execsys.lock.json"
    ident = write_lock(lock, declared={
        "model": {"name": "llama", "revision": "abc", "extra": {"x": 1}, "note": ""},
        "runtime": {"engine": "vllm", "version": "0.9.0"},
        "hardware": {"host": "a|b"},
        "harness": {"zeta": {"a": 1}, "argv": ["lm_eval", "--tasks", "x"]},  # nothing flat: its JSON, keys sorted
        "context_policy": {"template": "t" * 200},
        "retrieval": {"indexes": ["i" * 150]},
    }, observed={"runtime": {"version": "0.10.0", "python": "3.11"}, "tools": {"notes": "line1\nline2"}})
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        session = probe(ledger, "session", 5, 5, identity=ident)
        restart = probe(ledger, "restart", 3, 5, identity=ident)
        probe(ledger, "grader", 2, 5, identity=ident)
        probe(ledger, "session", 1, 2, identity=OTHER)
        report = compute_scope(ledger, ident, host="gpu1")
    assert report.grader is not None and report.grader["agreement_rate"] == 0.4
    text = contract_markdown(report, load_lock(lock))
    computed = re.search(r"^- Scope computed: (\S+) by execsys from the ledger's probe records$", text, re.M)
    assert computed is not None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", computed.group(1))
    control = "Run both arms inside one window (`execsys plan new ... --design abba`) or report the comparison as descriptive."
    assert text == "\n".join([
        "## Comparability",
        "",
        f"- Identity: `{ident}`",
        f"- Scope computed: {computed.group(1)} by execsys from the ledger's probe records",
        "",
        "### Scope statement",
        "",
        report.statement,
        "",
        "### Pinned components",
        "",
        "| component | pinned as |",
        "|---|---|",
        "| model | name=llama, revision=abc |",
        "| artifact | (not declared) |",
        "| runtime | engine=vllm, version=0.10.0, python=3.11 |",  # the observed version over the declared
        "| hardware | host=a\\|b |",
        '| harness | {"argv": ["lm_eval", "--tasks", "x"], "zeta": {"a": 1}} |',
        "| context_policy | template=" + "t" * 200 + " |",  # one word longer than a cell: whole, never cut
        '| retrieval | {"indexes": ["' + "i" * 150 + '"]} |',
        "| tools | notes=line1 line2 |",
        "| workflow | (not declared) |",
        "| budget | (not declared) |",
        "| grader | (not declared) |",
        "| environment | (not declared) |",
        "",
        "### Boundaries measured",
        "",
        "| axis | agreement | m/n | 95% CI | verdict | record |",
        "|---|---|---|---|---|---|",
        f"| session | 1.00 | 5/5 | 0.57-1.00 | licensed | `{session}` |",
        f"| restart | 0.60 | 3/5 | 0.23-0.88 | unstable: paired control required | `{restart}` |",
        "| concurrency | - | - | - | not probed: unlicensed | - |",
        "| hosts | - | - | - | not probed: unlicensed | - |",
        "| redeploy | - | - | - | not probed: unlicensed | - |",
        "",
        "Grader: verdicts agree 2/5 (0.40) across repeats: a 60-point difference is within grader noise "
        "(`execsys probe grader`).",
        "",
        "### Claims that need a contemporaneous paired control",
        "",
        f"- Any causal claim crossing **restart**: unstable (3/5 = 0.60, 95% CI 0.23-0.88). {control}",
        f"- Any causal claim crossing **concurrency**: never probed under this identity. {control}",
        f"- Any causal claim crossing **hosts**: never probed under this identity. {control}",
        f"- Any causal claim crossing **redeploy**: never probed under this identity. {control}",
        "",
        "Probe records under other identities (1) were not counted.",
    ]) + "\n"
    # components known only as observed, or as a bare value, are summarised as well
    table = contract_markdown(report, IdentityRef(ident, {"model": {"observed": {"name": "m"}}, "grader": "judge " * 50}))
    # too long for a cell: it ends at the last whole word that fits (240 characters), and says so
    assert "\n| model | name=m |\n" in table and f"\n| grader | {' '.join(['judge'] * 40)} … |\n" in table
    assert "### Pinned components" not in contract_markdown(report, "an identity without components")


def test_scope_and_audit_resolve_a_record_in_the_ledger_they_were_given(tmp_path: Path, monkeypatch) -> None:
    from execsys.identity import load_lock
    from execsys.scope import IdentityResolved

    monkeypatch.setenv("EXECSYS_LEDGER", str(tmp_path / "default.sqlite3"))  # empty: found only in the one given
    lock = tmp_path / "execsys.lock.json"
    ident = write_lock(lock, {"hardware": {"host": "gpu3"}}, {})
    path = tmp_path / "ledger.sqlite3"
    with Ledger.open(path) as ledger:
        pinned = ledger.append("identity", json.loads(lock.read_text()), identity=ident)
        probe(ledger, "session", 4, 4, identity=ident)
        mine = comparison(ledger, [ident], ["restart"])
        comparison(ledger, [OTHER], ["restart"])
        by_id = resolve_identity(ident, ledger)
        assert (by_id.id, by_id.source, by_id.host()) == (ident, f"ledger record {pinned}", "gpu3")
        assert by_id.identity is not None and by_id.identity.id == ident
        from_lock = resolve_identity(str(lock), ledger)
        assert (from_lock.source, from_lock.identity.id if from_lock.identity else None) == (str(lock), ident)
        unknown = "3" * 64  # complete, and nothing recorded under it
        assert resolve_identity(unknown, ledger) == IdentityRef(unknown, {}, unknown)
    events: list = []
    report = run_scope(ScopeOptions.from_sources(identity=mine, ledger=path), on_event=events.append)
    assert (report.identity, report.host, report.licensed) == (ident, "gpu3", ["session"])
    assert events == [IdentityResolved(ident, f"ledger record {pinned}", True)]
    events.clear()
    audited = run_audit(ScopeOptions.from_sources(identity=mine, audit=True, ledger=path), on_event=events.append)
    assert audited.checked == 1 and [f.comparison for f in audited.findings] == [mine]
    assert events == [IdentityResolved(ident, f"ledger record {pinned}", True)]
    assert run_audit(ScopeOptions.from_sources(audit=True, ledger=path)).checked == 2
    pinned_lock = load_lock(lock)
    from_options = run_scope(ScopeOptions.from_sources(lock=pinned_lock, ledger=path))
    assert from_options.ref is not None and from_options.ref.identity is pinned_lock
    assert (from_options.ref.id, from_options.ref.source, from_options.host) == (ident, str(lock), "gpu3")
    with pytest.raises(UsageError) as caught:
        run_scope(ScopeOptions(ledger=path))
    assert str(caught.value) == "scope needs an identity: give --lock FILE or --identity ID"


def test_scope_options_layer_the_identity_over_the_lock(tmp_path: Path) -> None:
    from execsys.identity import load_lock

    lock = tmp_path / "execsys.lock.json"
    write_lock(lock, {}, {})
    pinned = load_lock(lock)
    assert ScopeOptions.from_sources(lock=pinned, identity=ID) == ScopeOptions(identity=ID, lock=None)
    assert ScopeOptions.from_sources(lock=pinned, ledger="l.sqlite3") == ScopeOptions(lock=pinned, ledger="l.sqlite3")
    with pytest.raises(UsageError) as caught:
        ScopeOptions.from_sources(lock_path=Path("eval/execsys.lock.json"))
    assert str(caught.value) == ("no pinned identity (looked for eval/execsys.lock.json): give --lock FILE or "
                                 "--identity ID, or pin one with 'execsys pin'")


def test_a_measure_without_a_rate_or_interval_reads_as_such() -> None:
    from execsys.scope import AxisMeasure

    empty = AxisMeasure("session", 0, 0, None, None, "probe-1", ["probe-1"])
    assert empty.figure() == "0/0 = n/a" and not empty.stable
    assert empty.to_json() == {"m": 0, "n": 0, "agreement_rate": None, "ci95": None, "record": "probe-1",
                               "records": ["probe-1"]}
    assert AxisMeasure("session", 3, 4, 0.75, (0.3, 0.95), "p", ["p"]).figure() == "3/4 = 0.75, 95% CI 0.30-0.95"


def test_a_resumed_probe_counts_once_as_its_newest_record(ledger: Ledger) -> None:
    run = ledger.append("probe-run", {"schema": "execsys.probe-run/1", "parameters": {"axis": "restart"}})
    body = {"schema": "execsys.probe/1", "axis": "restart", "identity": ID, "scope": {}}
    ledger.append("probe", {**body, "m": 3, "n": 5}, identity=ID, parent=run, key="final")
    probe(ledger, "grader", 1, 1)  # not a boundary axis: skipped, and what follows still counts
    plain = probe(ledger, "restart", 2, 2)
    retried = ledger.append("probe", {**body, "m": 4, "n": 5}, identity=ID, parent=run, key="final~retry1")
    # an interrupted further retry left a case row under the run, and no newer record
    ledger.append("probe-case", {"case": "c1", "pass": 0}, parent=run, key="0:c1")
    restart = compute_scope(ledger, ID).measured["restart"]
    assert (restart.axis, restart.m, restart.n, restart.records, restart.record) == (
        "restart", 6, 7, [retried, plain], plain)


def test_whose_probe_it_is_comes_from_the_record_or_its_body(ledger: Ledger) -> None:
    by_body = ledger.append("probe", {"axis": "session", "m": 2, "n": 2, "identity": {"id": ID}})
    by_record = ledger.append("probe", {"axis": "session", "m": 3, "n": 3}, identity=ID)  # no scope, no body id
    empty = probe(ledger, "session", 0, 0)  # every case errored: listed, counts nothing
    ledger.append("probe", {"axis": "grader", "m": 1, "n": 2, "identity": ID})  # the grader's, by its body
    report = compute_scope(ledger, ID)
    assert report.measured["session"].records == [by_body, by_record, empty]
    assert (report.measured["session"].m, report.measured["session"].n) == (5, 5)
    assert report.grader is not None and (report.grader["m"], report.grader["n"]) == (1, 2)
    assert report.statement == (
        "Identity 111111111111: comparable within one session (session agreement 5/5 = 1.00, 95% CI 0.57-1.00). "
        "Not licensed (never probed under this identity): restart, concurrency, hosts, redeploy. "
        "Grader: verdicts agree 1/2 (0.50) across repeats: a 50-point difference is within grader noise.")


def test_an_axis_that_measured_nothing_leaves_the_wider_ones_measured(ledger: Ledger) -> None:
    probe(ledger, "session", 0, 0)
    probe(ledger, "restart", 3, 3)
    report = compute_scope(ledger, ID)
    assert list(report.measured) == ["restart"] and report.licence == "restart"
    assert report.unmeasured == ["session", "concurrency", "hosts", "redeploy"]


def test_the_audit_names_every_unstable_axis_and_an_unlabelled_comparison(ledger: Ledger) -> None:
    body = {"identities": [ID, OTHER], "crossed": ["session", "restart"], "paired_control": False}
    unlabelled = ledger.append("comparison", body, identity=ID)
    probe(ledger, "session", 1, 2)
    probe(ledger, "restart", 2, 4)
    probe(ledger, "session", 3, 4, identity=OTHER)
    finding = audit(ledger).findings[0]
    assert (finding.label, finding.unstable_now, finding.unmeasured_now) == ("", ["session", "restart"], [])
    assert finding.statement == (
        f"Comparison {unlabelled} (unlabelled) crossed session, restart, since found unstable (session agreement "
        "1/2 = 0.50, 95% CI 0.09-0.91; session agreement 3/4 = 0.75, 95% CI 0.30-0.95; restart agreement "
        "2/4 = 0.50, 95% CI 0.15-0.85): needs re-evaluation or a paired control.")


def test_merging_keeps_the_text_around_the_section_as_written() -> None:
    # two trailing spaces are a Markdown line break; a closing "X" is text, not a newline
    assert merge_contract("# Plan\nends with a break  \n", "## Comparability\n\nnew\n") == (
        "# Plan\nends with a break  \n\n## Comparability\n\nnew\n")
    assert merge_contract("# Plan\nsee appendix X\n", "## Comparability\n") == (
        "# Plan\nsee appendix X\n\n## Comparability\n")
    assert merge_contract("# Plan\n## Comparability\n## Results\nkept\n", "## Comparability\n\nnew  \n") == (
        "# Plan\n## Comparability\n\nnew  \n\n## Results\nkept\n")
    assert merge_contract("## Comparability\nold\n## Next\n", "## Comparability\nsee X\n") == (
        "## Comparability\nsee X\n\n## Next\n")


def test_a_probe_of_another_system_under_this_lock_is_ignored_with_its_reason(ledger: Ledger) -> None:
    probe(ledger, "session", 4, 4)
    sentence = "the engine answering this probe is not the pinned system: runtime argv +--n_batch 7"
    other = ledger.append("probe", {"schema": "execsys.probe/2", "axis": "session", "identity": None, "m": 9,
                                    "n": 9, "system_check": {"verdict": "differs", "lock": ID,
                                                             "sentence": sentence}})
    elsewhere = ledger.append("probe", {"schema": "execsys.probe/2", "axis": "hosts", "identity": None, "m": 1,
                                        "n": 1, "system_check": {"verdict": "differs", "lock": OTHER}})
    report = compute_scope(ledger, ID)
    assert report.another_system == [{"record": other, "axis": "session", "reason": sentence}]
    assert report.measured["session"].n == 4 and "hosts" not in report.measured
    assert report.other_identities == {"none (probe taken without a pinned identity)": [elsewhere]}
    assert report.statement.endswith(" 1 probe record taken under this lock measured another system (the engine "
                                     "answering was not the pinned one) and did not count.")
    assert report.to_json()["ignored"]["another_system"] == report.another_system


def test_a_restart_or_redeploy_probe_that_saw_no_event_licenses_nothing(ledger: Ledger) -> None:
    probe(ledger, "session", 4, 4)
    seen = probe(ledger, "restart", 3, 3)
    body = {"schema": "execsys.probe/2", "axis": "redeploy", "identity": ID, "m": 5, "n": 5,
            "evidence": {"event": "redeploy", "verdict": "not-observed",
                         "sentence": "no redeploy observed: the serving process (pid 7) is the one baseline b measured"}}
    none = ledger.append("probe", body, identity=ID)
    report = compute_scope(ledger, ID)
    assert report.licensed == ["session", "restart"] and report.licence == "restart" and report.unverified == []
    assert "redeploy" in report.unmeasured and report.measured["restart"].records == [seen]
    assert report.excluded == [{"record": none, "reason": "redeploy probe: no redeploy observed: the serving process "
                                "(pid 7) is the one baseline b measured: it licenses nothing across a redeploy"}]
    assert report.statement.endswith(" 1 probe record of this identity saw no sign of the restart or redeploy it "
                                     "measures and did not count.")


def test_a_restart_that_could_not_be_confirmed_is_licensed_unverified(ledger: Ledger) -> None:
    probe(ledger, "session", 4, 4)
    probe(ledger, "restart", 3, 3)
    body = {"schema": "execsys.probe/2", "axis": "restart", "identity": ID, "m": 2, "n": 2,
            "evidence": {"event": "restart", "verdict": "unverified", "sentence": "restart unverified: remote"}}
    ledger.append("probe", body, identity=ID)
    probe(ledger, "concurrency", 2, 2)
    report = compute_scope(ledger, ID)
    assert report.licensed == ["session", "restart", "concurrency"] and report.licence == "restart"
    assert report.unverified == ["restart"] and report.unverified_why == {"restart": "restart unverified: remote"}
    assert report.statement.startswith(
        "Identity 111111111111: comparable across server restarts, unverified (a restart could not be confirmed "
        "from here), also under concurrent load (restart agreement 5/5 = 1.00")
    assert report.to_json()["unverified"] == ["restart"]
    text = contract_markdown(report)
    assert "| restart | 1.00 | 5/5 |" in text and "licensed, unverified: restart unverified: remote |" in text
    # an unverified axis that is not the widest licence is named apart
    probe(ledger, "hosts", 2, 2)
    wider = compute_scope(ledger, ID)
    assert wider.licence == "hosts" and wider.unverified == ["restart"]
    assert "Licensed unverified (the event could not be confirmed from here): restart." in wider.statement


def targeted(ledger: Ledger, axis: str, m: int, n: int, target: dict, digest: str, cases_file: str) -> str:
    """A probe record (as :func:`probe` writes it) that says what it probed and with which cases."""
    body = {"schema": "execsys.probe/2", "axis": axis, "identity": ID, "n": n, "m": m, "scope": {},
            "target": {**target, "models": [None], "observed": {}}, "cases_digest": digest,
            "cases_file": cases_file, "system_check": {"verdict": "unverified", "lock": ID}}
    if axis in ("restart", "redeploy"):
        body["evidence"] = {"event": axis, "verdict": "observed", "sentence": f"{axis} observed"}
    return ledger.append("probe", body, identity=ID)


def test_records_of_another_target_or_case_set_are_not_pooled_with_the_newest(ledger: Ledger) -> None:
    endpoint = {"kind": "endpoint", "endpoints": ["http://127.0.0.1:8000/v1"], "command": None}
    harness = {"kind": "command", "endpoints": [], "command": "lm_eval --model local-completions"}
    cases, other_cases = "a" * 64, "b" * 64
    by_harness = targeted(ledger, "session", 3, 10, harness, cases, "/p/cases.jsonl")
    elsewhere = targeted(ledger, "session", 5, 5, endpoint, other_cases, "/p/other.jsonl")
    first = targeted(ledger, "session", 4, 4, endpoint, cases, "/p/cases.jsonl")
    newest = targeted(ledger, "session", 6, 6, endpoint, cases, "/q/cases.jsonl")  # the same cases, moved
    restart_both = targeted(ledger, "restart", 1, 2, harness, other_cases, "/p/other.jsonl")
    restart = targeted(ledger, "restart", 3, 3, endpoint, cases, "/p/cases.jsonl")
    report = compute_scope(ledger, ID)
    session = report.measured["session"]
    assert (session.m, session.n, session.records, session.record) == (10, 10, [first, newest], newest)
    assert report.measured["restart"].records == [restart]
    assert report.licensed == ["session", "restart"] and report.unstable == [] and report.licence == "restart"
    assert report.excluded == [
        {"record": by_harness, "reason": "probed another target: the harness command `lm_eval --model "
         f"local-completions`, not endpoint http://127.0.0.1:8000/v1: not pooled with {newest}, the newest "
         "session probe"},
        {"record": elsewhere, "reason": "probed another case set: other.jsonl (cases digest bbbbbbbbbbbb), not "
         f"cases.jsonl (cases digest aaaaaaaaaaaa): not pooled with {newest}, the newest session probe"},
        {"record": restart_both, "reason": "probed another target: the harness command `lm_eval --model "
         "local-completions`, not endpoint http://127.0.0.1:8000/v1; and another case set: other.jsonl (cases "
         f"digest bbbbbbbbbbbb), not cases.jsonl (cases digest aaaaaaaaaaaa): not pooled with {restart}, the "
         "newest restart probe"},
    ]
    assert report.statement.endswith(
        " 3 probe records of this identity probed another target or case set than the newest of its axis and "
        "were not pooled with it.")
    assert "saw no sign" not in report.statement
    assert report.to_json()["excluded"] == report.excluded


def test_a_newest_probe_that_compared_nothing_does_not_displace_the_measurement(ledger: Ledger) -> None:
    endpoint = {"kind": "endpoint", "endpoints": ["http://h:1/v1"], "command": None}
    measured = targeted(ledger, "session", 4, 4, endpoint, "a" * 64, "cases.jsonl")
    errored = targeted(ledger, "session", 0, 0, endpoint, "b" * 64, "other.jsonl")  # every case errored
    report = compute_scope(ledger, ID)
    assert report.measured["session"].records == [measured] and report.licensed == ["session"]
    assert [e["record"] for e in report.excluded] == [errored]
    assert report.statement.endswith(" 1 probe record of this identity probed another target or case set than "
                                     "the newest of its axis and was not pooled with it.")


def test_the_runtime_row_names_what_serves_before_how_it_restarts(ledger: Ledger) -> None:
    report = compute_scope(ledger, ID)
    observed = {"engine": {"name": "llama.cpp", "version": "b4500"},
                "endpoint": {"url": "http://gpu1:8080/v1", "models": ["tiny", "tiny-2"]},
                "served": {"digest": None, "verdict": "unverifiable"}, "process": {"pid": 7}}
    declared = {"engine": "llama.cpp", "endpoint": "http://gpu1:8080/v1", "restart": "systemctl restart llama",
                "api_key_env": ""}
    text = contract_markdown(report, IdentityRef(ID, {"runtime": {"declared": declared, "observed": observed}}))
    assert ("\n| runtime | engine=llama.cpp b4500, endpoint=http://gpu1:8080/v1, served models=tiny tiny-2, "
            "served=unverifiable, restart=systemctl restart llama |\n") in text
    only_declared = contract_markdown(report, IdentityRef(ID, {"runtime": {"declared": declared, "observed": {}}}))
    assert "\n| runtime | engine=llama.cpp, endpoint=http://gpu1:8080/v1, restart=systemctl restart llama |\n" in (
        only_declared)
    long = {"restart": "x" * 230 + " --flag value"}
    assert "\n| runtime | restart=" + "x" * 230 + " … |\n" in contract_markdown(
        report, IdentityRef(ID, {"runtime": {"declared": long, "observed": {}}}))
