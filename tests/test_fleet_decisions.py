"""The fleet view's decisions as tables: agreement and its exit code, which digest is expected, the
modal identity's tie-break, the hazard matrix's order and counts, ``--ledger-since`` units, the
flags' errors, and the Prometheus textfile parsed back with ``prometheus_client``'s own parser
(label values with ``"``, ``\\`` and newlines come back exactly as the host reported them).

Reports are small JSON files in a temp directory, read by the real :func:`run_fleet` (tests/test_fleet.py
drives the CLI and 10,000 reports).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from execsys import COMPONENTS
from execsys.declaration import parse as parse_declaration
from execsys.errors import InputError, UsageError
from execsys.fleet import PROM_STATUS, FleetOptions, parse_since, prometheus_text, run_fleet

A, B, C = "a" * 64, "b" * 64, "c" * 64


def facts(*, hazards: dict[str, str] | None = None, identity: str | None = "i1", digest: str | None = A,
          declared: str | None = None, error: str | None = None) -> dict:
    """An Ansible ``--tree`` result of the execsys_facts module (the fleet's smallest host report)."""
    body: dict = {"doctor": {"hazards": hazards or {}}, "artifact": {"blake3": digest, "declared": declared}}
    if identity is not None:
        body["identity"] = {"id": f"node-{identity}", "components": dict.fromkeys(COMPONENTS, f"sha256:{identity}")}
    if error:
        body["error"] = error
    return {"ansible_facts": {"execsys": body}}


def fleet(tmp_path: Path, hosts: dict[str, dict], **options):
    directory = tmp_path / "tree"
    directory.mkdir(exist_ok=True)
    for name, doc in hosts.items():
        (directory / f"{name}.json").write_text(json.dumps(doc))
    return run_fleet(FleetOptions(from_ansible=str(directory), **options))


# -- agreement, and the exit code -------------------------------------------------------------------

@pytest.mark.parametrize(("hosts", "agrees"), [
    pytest.param({"h1": facts(), "h2": facts()}, True, id="same-identity-digest-no-hazard-agrees"),
    pytest.param({"h1": facts(hazards={"x": "warn"}), "h2": facts()}, True, id="a-warning-does-not-disagree"),
    pytest.param({"h1": facts(hazards={"x": "skip"}), "h2": facts()}, True, id="a-skip-does-not-disagree"),
    pytest.param({"h1": facts(hazards={"x": "fail"}), "h2": facts()}, False, id="a-failing-hazard-disagrees"),
    pytest.param({"h1": facts(hazards={"x": "error"}), "h2": facts()}, False, id="a-could-not-check-disagrees"),
    pytest.param({"h1": facts(identity="i2"), "h2": facts()}, False, id="another-identity-disagrees"),
    pytest.param({"h1": facts(digest=B), "h2": facts()}, False, id="another-digest-disagrees"),
    pytest.param({"h1": facts(error="cannot pin"), "h2": facts()}, False, id="a-problem-disagrees"),
    pytest.param({"h1": {"unreachable": True, "msg": "ssh: no route"}, "h2": facts()}, False,
                 id="an-unreachable-node-disagrees"),
    pytest.param({"h1": facts(identity=None, digest=None)}, True, id="nothing-to-compare-agrees"),
])
def test_agreement_and_exit_code(tmp_path, hosts, agrees) -> None:
    report = fleet(tmp_path, hosts)
    assert report.agrees is agrees
    assert report.exit_code == (0 if agrees else 1)
    assert report.to_json()["verdict"] == ("agrees" if agrees else "disagrees")


@pytest.mark.parametrize(("identities", "k", "n", "modal"), [
    pytest.param(["i1", "i1", "i2"], 2, 3, "i1", id="majority-is-modal"),
    pytest.param(["i2", "i1"], 1, 2, None, id="tie-broken-by-the-smaller-fleet-identity"),
    pytest.param(["i2", "i2", "i1", "i1", "i3"], 2, 5, None, id="two-way-tie-of-two"),
    pytest.param([None, "i2"], 1, 1, "i2", id="a-report-without-identity-is-not-counted"),
])
def test_modal_identity(tmp_path, identities, k, n, modal) -> None:
    report = fleet(tmp_path, {f"h{i}": facts(identity=ident) for i, ident in enumerate(identities)})
    agreement = report.to_json()["identity_agreement"]
    assert (agreement["k"], agreement["n"]) == (k, n)
    assert agreement["ratio"] == round(k / n, 6)
    fleet_id = {r.identity: r.fleet_digest for r in report.records if r.fleet_digest}
    if modal is None:  # a tie: the smallest fleet digest among the tied ones, so every run names the same
        tied = [ident for ident in set(identities) if ident and identities.count(ident) == k]
        modal = min(tied, key=lambda ident: fleet_id[f"node-{ident}"])
    assert agreement["fleet_digest"] == fleet_id[f"node-{modal}"]
    outliers = {o["host"] for o in report.to_json()["outliers"]}
    assert outliers == {f"h{i}" for i, ident in enumerate(identities) if ident not in (None, modal)}


@pytest.mark.parametrize(("hosts", "expected_digest", "k", "n", "defects", "expected", "source"), [
    pytest.param([(A, None), (A, None), (B, None)], None, 2, 3, {"h2": A}, A, "the fleet's modal digest",
                 id="modal-digest"),
    pytest.param([(B, None), (A, None)], None, 1, 2, {"h0": A}, A, "the fleet's modal digest",
                 id="modal-tie-smaller-digest"),
    pytest.param([(A, None), (A, None)], B, 0, 2, {"h0": B, "h1": B}, B, "--expected-digest",
                 id="the-flag-beats-a-unanimous-fleet"),
    pytest.param([(A, C), (C, C)], None, 1, 2, {"h0": C}, A, "the fleet's modal digest",
                 id="each-node-against-its-declared-digest"),
    pytest.param([(A, C), (A, None)], B, 0, 2, {"h0": B, "h1": B}, B, "--expected-digest",
                 id="the-flag-beats-the-declared-digest"),
    pytest.param([(None, None), (A, None)], None, 1, 1, {}, A, "the fleet's modal digest", id="no-digest-not-counted"),
])
def test_digest_match(tmp_path, hosts, expected_digest, k, n, defects, expected, source) -> None:
    report = fleet(tmp_path, {f"h{i}": facts(digest=d, declared=dd) for i, (d, dd) in enumerate(hosts)},
                   expected_digest=expected_digest, expected_source="--expected-digest" if expected_digest else None)
    match = report.digest_match()
    assert (match["k"], match["n"], match["expected"], match["expected_source"]) == (k, n, expected, source)
    assert {d["host"]: d["expected"] for d in match["defects"]} == defects


def test_expected_digest_precedence_in_the_options(tmp_path) -> None:
    report = tmp_path / "r.json"
    report.write_text("{}")
    declaration = parse_declaration(f'[artifact]\npath = "/m"\ndigest = "{C}"\n', tmp_path / "execsys.toml")
    by_flag = FleetOptions.from_sources(declaration, None, reports=[str(report)], expected_digest=B)
    assert (by_flag.expected_digest, by_flag.expected_source) == (B, "--expected-digest")
    by_declaration = FleetOptions.from_sources(declaration, None, reports=[str(report)])
    assert by_declaration.expected_digest == C
    assert by_declaration.expected_source.startswith("the declaration (")
    assert FleetOptions.from_sources(None, None, reports=[str(report)]).expected_digest is None


@pytest.mark.parametrize(("kwargs", "error", "needle"), [
    pytest.param({}, UsageError, "no host reports", id="no-source"),
    pytest.param({"reports": ["R"], "from_ansible": "D"}, UsageError, "not REPORT and --from-ansible", id="two-sources"),
    pytest.param({"reports": ["R"], "ledger_since": "1d"}, UsageError, "not REPORT and --ledger-since",
                 id="report-and-ledger"),
    pytest.param({"reports": ["missing.json"]}, InputError, "no such report", id="missing-report"),
    pytest.param({"from_ansible": "R"}, InputError, "not a directory", id="ansible-source-not-a-dir"),
    pytest.param({"reports": ["R"], "prom": "no-dir/x.prom"}, InputError, "--prom", id="prom-dir-missing"),
    pytest.param({"reports": ["R"], "prom": "D"}, InputError, "--prom", id="prom-is-a-directory"),
    pytest.param({"ledger_since": "7x"}, UsageError, "--ledger-since", id="bad-age-unit"),
])
def test_option_errors(tmp_path, monkeypatch, kwargs, error, needle) -> None:
    monkeypatch.chdir(tmp_path)
    Path("R").write_text("{}")
    Path("D").mkdir()
    with pytest.raises(error, match=needle.replace("-", r"\-")):
        FleetOptions.from_sources(None, None, **kwargs)


NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("text", "iso"), [
    pytest.param("30s", "2026-12-01T11:59:30.000Z", id="seconds"),
    pytest.param("90m", "2026-12-01T10:30:00.000Z", id="minutes"),
    pytest.param("24h", "2026-11-30T12:00:00.000Z", id="hours"),
    pytest.param("7d", "2026-11-24T12:00:00.000Z", id="days"),
    pytest.param("1w", "2026-11-24T12:00:00.000Z", id="weeks"),
    pytest.param(" 2 h ", "2026-12-01T10:00:00.000Z", id="spaces-allowed"),
    pytest.param("0s", "2026-12-01T12:00:00.000Z", id="zero-age-is-now"),
    pytest.param("2026-11-30T08:00", "2026-11-30T08:00:00.000Z", id="naive-iso-is-utc"),
    pytest.param("2026-11-30T08:00:00Z", "2026-11-30T08:00:00.000Z", id="z-suffix"),
    pytest.param("2026-11-30T10:00:00+02:00", "2026-11-30T08:00:00.000Z", id="offset-converted-to-utc"),
])
def test_ledger_since(text, iso) -> None:
    assert parse_since(text, NOW) == iso


@pytest.mark.parametrize("text", ["7x", "h", "-1d", "yesterday", ""])
def test_ledger_since_refuses(text) -> None:
    with pytest.raises(UsageError, match="--ledger-since"):
        parse_since(text, NOW)


# -- the hazard matrix -------------------------------------------------------------------------------

def test_hazard_matrix_worst_first_and_unknown_statuses_count_as_error(tmp_path) -> None:
    report = fleet(tmp_path, {
        "h1": facts(hazards={"calm": "ok", "warned": "warn", "errs": "error", "fails": "fail", "odd": "bogus"}),
        "h2": facts(hazards={"calm": "ok", "warned": "warn", "errs": "ok", "fails": "ok", "odd": "ok"}),
        "h3": facts(hazards={"calm": "skip", "warned": "warn", "errs": "error", "fails": "ok", "odd": "ok"}),
    })
    counts = report.hazard_counts()
    # one fail ranks above two errors, which rank above three warnings; ties keep the order first seen
    assert report.hazard_ids == ["fails", "errs", "odd", "warned", "calm"]
    assert counts["odd"] == {"fail": 0, "error": 1, "warn": 0, "skip": 0, "ok": 2}
    assert counts["calm"] == {"fail": 0, "error": 0, "warn": 0, "skip": 1, "ok": 2}
    assert report.failing_hosts == 2  # h1 (fail) and h3 (error); a warning is not failing


def test_duplicate_names_count_twice_and_are_keyed(tmp_path) -> None:
    doc = {"schema": "execsys.doctor/1", "host": {"name": "gpu-1"}, "hazards": [{"id": "x", "status": "ok"}]}
    paths = []
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
        paths.append(str(tmp_path / f"{name}.json"))
    report = run_fleet(FleetOptions(reports=paths))
    assert [r.key for r in report.records] == ["gpu-1", "gpu-1#2", "gpu-1#3"]
    assert report.duplicates == {"gpu-1": 3}
    assert report.hosts == 3


@pytest.mark.parametrize(("host", "expected"), [
    pytest.param({"name": "gpu-9"}, "gpu-9", id="name"),
    pytest.param({"name": "local", "hostname": "node-3"}, "node-3", id="local-means-the-machine-name"),
    pytest.param({}, "file-name", id="neither-the-file-name"),
    pytest.param({"name": "local"}, "file-name", id="local-without-a-machine-name-the-file-name"),
])
def test_doctor_report_node_name(tmp_path, host, expected) -> None:
    path = tmp_path / "file-name.json"
    path.write_text(json.dumps({"schema": "execsys.doctor/1", "host": host, "hazards": []}))
    assert run_fleet(FleetOptions(reports=[str(path)])).records[0].host == expected


# -- the Prometheus textfile, parsed back --------------------------------------------------------------

@pytest.mark.parametrize(("status", "value"), [
    ("ok", 0), ("skip", 0), ("warn", 1), ("fail", 2), ("error", 3), ("bogus", 3)])
def test_prometheus_status_values(tmp_path, status, value) -> None:
    report = fleet(tmp_path, {"h1": facts(hazards={"x": status})})
    families = {f.name: f for f in text_string_to_metric_families(prometheus_text(report))}
    [sample] = families["execsys_doctor_hazard_status"].samples
    assert (sample.labels, sample.value) == ({"host": "h1", "hazard": "x"}, value)
    assert PROM_STATUS.get(status, 3) == value


NASTY = [
    pytest.param('gpu"1', id="double-quote"),
    pytest.param("gpu\\1", id="backslash"),
    pytest.param("gpu\n1", id="newline"),
    pytest.param('a\\"b\\n"\n', id="all-three-and-an-escaped-looking-sequence"),
    pytest.param("\\", id="a-lone-backslash"),
    pytest.param("plain-host", id="plain"),
]


@pytest.mark.parametrize("name", NASTY)
def test_prometheus_label_values_come_back_exactly(tmp_path, name) -> None:
    doc = {"schema": "execsys.doctor/1", "host": {"name": name},
           "hazards": [{"id": f"haz{name}", "status": "fail"}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    pin = {"schema": "execsys.identity/1", "id": "n", "components": {
        c: {"declared": {}, "observed": {"hostname": name} if c == "hardware" else {}} for c in COMPONENTS}}
    (tmp_path / "p.json").write_text(json.dumps(pin))
    prom = tmp_path / "fleet.prom"
    report = run_fleet(FleetOptions(reports=[str(path), str(tmp_path / "p.json")], prom=str(prom)))
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    [status] = families["execsys_doctor_hazard_status"].samples
    assert status.labels == {"host": name, "hazard": f"haz{name}"}
    [info] = families["execsys_identity_info"].samples
    # the pin report names the same host as the doctor report: one host, its two kinds of report
    assert info.labels == {"host": name, "fleet_digest": report.records[0].fleet_digest, "identity": "n"}
    assert [r.key for r in report.records] == [name] and report.duplicates == {}


@pytest.mark.parametrize(("digests", "ratio"), [
    pytest.param([A, A, B], 2 / 3, id="two-of-three"),
    pytest.param([A], 1.0, id="one-of-one"),
    pytest.param([None], None, id="none-counted-is-NaN"),
])
def test_prometheus_ratios(tmp_path, digests, ratio) -> None:
    report = fleet(tmp_path, {f"h{i}": facts(digest=d, identity=None) for i, d in enumerate(digests)})
    families = {f.name: f for f in text_string_to_metric_families(prometheus_text(report))}
    value = families["execsys_fleet_digest_match_ratio"].samples[0].value
    assert math.isnan(value) if ratio is None else value == ratio
    assert math.isnan(families["execsys_fleet_identity_agreement"].samples[0].value)  # no identities: NaN
