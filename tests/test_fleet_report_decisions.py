"""The fleet view's reading and reporting as tables, in process: what each kind of host report becomes
(Ansible fact cache and ``--tree`` results, doctor, node-check and pin JSON, ledger exports and the
ledger's newest records), the short labels an outlier is described with, the answer's JSON, the
Prometheus textfile line by line, and the facts a host without execsys reports through the shipped
doctor.

tests/test_fleet_decisions.py has the agreement, digest and hazard-matrix tables; tests/test_fleet.py
drives the CLI and 10,000 reports. Every row here is something an operator reads: a host named after
the wrong field, a problem that does not say why, a metric's help text, a duplicate keyed twice alike.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.errors import InputError
from execsys.fleet import (
    SHIPPED_NOTE,
    FleetOptions,
    HostRecord,
    ReportRead,
    ShippedPrograms,
    _Reader,
    component_digests,
    component_label,
    fleet_components,
    fleet_digest,
    prometheus_text,
    run_fleet,
    shipped_host_facts,
)
from execsys.ledger import Ledger

A, B = "a" * 64, "b" * 64


def _records(data, hint: str = "file-host", *, named_by_file: bool = False) -> list[HostRecord]:
    return _Reader().records(data, hint, "r.json", named_by_file=named_by_file)


def _one(data, hint: str = "file-host", **kwargs) -> HostRecord:
    [record] = _records(data, hint, **kwargs)
    return record


def _pin(host: str = "node-1", *, engine: str = "0.11.0", digest: str | None = A, declared: str | None = None,
         schema: str = "execsys.identity/1", node_id: str = "id-1") -> dict:
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["artifact"] = {"declared": {"digest": declared} if declared else {},
                              "observed": {"digest": digest} if digest else {}}
    components["runtime"]["observed"] = {"engine": {"name": "vllm", "version": engine}}
    components["hardware"]["observed"] = {"hostname": host, "machine_id": f"m-{host}", "kernel": "6.1",
                                          "gpus": [{"name": "H200", "uuid": f"GPU-{host}"}]}
    return {"schema": schema, "id": node_id, "components": components}


def _doctor(name="gpu-1", hazards=None, **host) -> dict:
    return {"schema": "execsys.doctor/1", "host": {"name": name, **host},
            "hazards": hazards if hazards is not None else [{"id": "x", "status": "ok"}]}


# -- the facts that name one machine are not part of the fleet digest ----------------------------

def test_fleet_components_drop_only_the_machine_s_own_facts() -> None:
    components = {"hardware": {"declared": {"gpus": 1}, "observed": {
        "hostname": "n1", "machine_id": "m1", "kernel": "6.1",
        "gpus": [{"name": "H200", "uuid": "U", "serial": "S", "pci_bus_id": "P", "memory": 1}, "odd"]}},
        "runtime": {"observed": {"hostname": "kept outside hardware"}}}
    out = fleet_components(components)
    assert out["hardware"] == {"declared": {"gpus": 1}, "observed": {
        "kernel": "6.1", "gpus": [{"name": "H200", "memory": 1}, "odd"]}}
    assert out["runtime"] == components["runtime"]
    assert components["hardware"]["observed"]["hostname"] == "n1"  # the caller's document untouched


@pytest.mark.parametrize("hardware", [None, "text", {"observed": "text"}, {"observed": {"gpus": "none"}}])
def test_fleet_components_leave_other_shapes_alone(hardware) -> None:
    assert fleet_components({"hardware": hardware}) == {"hardware": hardware}


def test_two_nodes_of_one_build_have_one_fleet_digest_and_another_engine_another() -> None:
    one, two, other = (component_digests(_pin(h, engine=e)["components"])
                       for h, e in (("n1", "0.11.0"), ("n2", "0.11.0"), ("n3", "0.11.1")))
    assert one == two and fleet_digest(one) == fleet_digest(two)
    assert [n for n in COMPONENTS if one[n] != other[n]] == ["runtime"]
    assert all(d.startswith("sha256:") and len(d) == 71 for d in one.values())
    assert fleet_digest(one).startswith("sha256:") and fleet_digest(one) != fleet_digest(other)


def test_the_fleet_digest_is_sha256_of_the_ordered_component_digests() -> None:
    import hashlib

    digests = {n: f"sha256:{i}" for i, n in enumerate(COMPONENTS)}
    body = json.dumps([digests[n] for n in COMPONENTS], separators=(",", ":")).encode()
    assert fleet_digest(digests) == "sha256:" + hashlib.sha256(body).hexdigest()
    missing = dict(digests)
    del missing[COMPONENTS[0]]
    assert fleet_digest(missing) != fleet_digest(digests)


# -- the short labels an outlier is described with ------------------------------------------------

@pytest.mark.parametrize(("name", "component", "label"), [
    pytest.param("artifact", {"observed": {"digest": "blake3:" + "f" * 64}}, "blake3:ffffffffffff", id="artifact-19"),
    pytest.param("artifact", {"declared": {"path": "/m", "format": "gguf"}}, "path=/m, format=gguf",
                 id="artifact-without-digest-declared"),
    pytest.param("runtime", {"observed": {"engine": {"name": "vllm", "version": "0.11.0"}}}, "vllm 0.11.0",
                 id="runtime-engine"),
    pytest.param("runtime", {"observed": {"engine": {"name": "vllm"}}}, "vllm ?", id="runtime-no-version"),
    pytest.param("runtime", {"observed": {"engine": {}}}, "", id="runtime-no-engine-name"),
    pytest.param("hardware", {"observed": {"kernel": "6.1", "gpus": [{"name": "H200"}, {"name": "H200"}]}},
                 "6.1, 2x H200", id="hardware-gpus"),
    pytest.param("hardware", {"observed": {}}, "?, no GPU", id="hardware-nothing"),
    pytest.param("hardware", {"observed": {"kernel": "6.1", "gpus": ["x"]}}, "6.1, no GPU", id="hardware-odd-gpu"),
    pytest.param("harness", {"observed": {"commit": "0123456789abcdef"}}, "0123456789ab", id="harness-commit"),
    pytest.param("harness", {"observed": {"commit": "0123456789abcdef", "dirty": True}}, "0123456789ab +dirty",
                 id="harness-dirty"),
    pytest.param("environment", {"observed": {"python": {"version": "3.12.1"}}}, "python 3.12.1",
                 id="environment-python"),
    pytest.param("runtime", {"declared": {"a": 1, "b": 2, "c": 3, "d": 4}}, "a=1, b=2, c=3", id="three-declared"),
    pytest.param("runtime", {"declared": {"k": "v" * 100}}, "k=" + "v" * 58, id="declared-cut-at-60"),
    pytest.param("runtime", {}, "", id="nothing"),
    pytest.param("runtime", {"observed": None, "declared": None}, "", id="nulls"),
])
def test_component_label(name, component, label) -> None:
    assert component_label(name, component) == label


# -- what each kind of report becomes ---------------------------------------------------------------

def test_a_doctor_report_is_its_node_and_hazards() -> None:
    record = _one(_doctor("gpu-7", [{"id": "x", "status": "fail"}, {"id": "y"}, {"status": "ok"}, "junk"]))
    assert (record.host, record.report, record.hazards, record.problem) == (
        "gpu-7", "r.json", {"x": "fail", "y": "error"}, None)


def test_a_doctor_report_of_several_nodes_is_one_record_each() -> None:
    doc = {"schema": "execsys.doctor/1", "hosts": [
        {"host": {"name": "a"}, "hazards": [{"id": "x", "status": "ok"}]}, "junk",
        {"host": {"name": "b", "error": "ssh: timed out"}, "hazards": []},
        {"host": "c-as-text", "hazards": []}, {"host": 5, "hazards": []}]}
    records = _records(doc)
    assert [(r.host, r.hazards, r.problem) for r in records] == [
        ("a", {"x": "ok"}, None), ("b", {}, "ssh: timed out"), ("c-as-text", {}, None), ("file-host", {}, None)]


def test_named_by_file_keeps_the_inventory_name() -> None:
    assert _one(_doctor("gpu-7"), "inventory-name", named_by_file=True).host == "inventory-name"
    assert _one(_pin("n1"), "inventory-name", named_by_file=True).host == "inventory-name"
    check = {"schema": "execsys.node-check/1", "doctor": _doctor("gpu-7")}
    assert _one(check, "inventory-name", named_by_file=True).host == "inventory-name"
    assert _one(check, "inventory-name").host == "gpu-7"


def test_doctor_hazards_as_a_table_of_statuses() -> None:
    record = _one({"ansible_facts": {"execsys": {"doctor": {"hazards": {"x": "warn", "y": 3}}}}})
    assert record.hazards == {"x": "warn", "y": "3"}


def test_hazards_of_another_shape_are_that_node_s_problem() -> None:
    record = _one(_doctor(hazards="all fine"))
    assert record.problem == "malformed report (ValueError: its hazards are str, not a list)"
    assert record.host == "file-host"


def test_a_node_check_that_could_not_check_says_its_line() -> None:
    record = _one({"schema": "execsys.node-check/1", "line": "NODE HEALTH ERROR cannot run"})
    assert record.problem == "could not check: NODE HEALTH ERROR cannot run"
    assert _one({"schema": "execsys.node-check/1", "doctor": _doctor("g", [{"id": "x", "status": "warn"}])}
                ).hazards == {"x": "warn"}


@pytest.mark.parametrize("schema", ["execsys.identity/1", "execsys.identity/2"])
def test_a_pin_report_is_its_identity_and_digests(schema) -> None:
    doc = _pin("n1", declared=B, schema=schema, node_id="id-9")
    record = _one(doc)
    digests = component_digests(doc["components"])
    assert (record.host, record.identity, record.digest, record.declared_digest) == ("n1", "id-9", A, B)
    assert record.components == tuple(digests[n] for n in COMPONENTS)
    assert record.fleet_digest == fleet_digest(digests)
    assert record.hazards is None and record.problem is None


def test_a_pin_report_without_a_machine_name_is_named_by_its_file() -> None:
    doc = _pin("n1")
    del doc["components"]["hardware"]["observed"]["hostname"]
    assert _one(doc).host == "file-host"


def test_the_reader_keeps_each_component_s_label_once() -> None:
    reader = _Reader()
    reader.records(_pin("n1", engine="0.11.0"), "h", "r1")
    reader.records(_pin("n2", engine="0.11.1"), "h", "r2")
    runtime = sorted(v for (name, _), v in reader.labels.items() if name == "runtime")
    assert runtime == ["vllm 0.11.0", "vllm 0.11.1"]


def test_a_ledger_export_is_read_as_its_body() -> None:
    export = {"kind": "doctor", "id": "doctor_1", "created_at": "t", "body": _doctor("gpu-3")}
    assert _one(export).host == "gpu-3"
    assert _one({"kind": "doctor", "body": _doctor("gpu-3")}).problem  # no created_at: not an export


def test_an_ansible_fact_cache_payload_is_unwrapped_and_its_file_prefix_dropped() -> None:
    facts = {"execsys": {"doctor": {"hazards": {"x": "ok"}}, "artifact": {"blake3": A}}}
    record = _one({"__payload__": json.dumps(facts)}, "s1_gpu-4")
    assert (record.host, record.hazards, record.digest) == ("gpu-4", {"x": "ok"}, A)
    assert _one({"__payload__": json.dumps(facts)}, "s12_s3_gpu-4").host == "s3_gpu-4"  # once, at the start
    assert _one({"__payload__": json.dumps(facts)}, "gpu-s1_4").host == "gpu-s1_4"
    bad = _one({"__payload__": "{not json"}, "s1_gpu-4")
    assert (bad.host, bad.problem) == ("s1_gpu-4", "unreadable Ansible fact cache payload")


@pytest.mark.parametrize(("data", "problem"), [
    pytest.param([1, 2], "not an execsys report (expected a JSON object)", id="a-list"),
    pytest.param({"unreachable": True, "msg": "ssh:\n  no route"}, "unreachable: ssh: no route", id="unreachable"),
    pytest.param({"unreachable": True}, "unreachable: no message", id="unreachable-without-a-message"),
    pytest.param({"failed": True, "msg": "x" * 300}, "failed: " + "x" * 200, id="failed-cut-at-200"),
    pytest.param({"failed": True, "ansible_facts": {"execsys": {}}}, "failed: no message",
                 id="failed-with-empty-facts"),
    pytest.param({"ansible_facts": {"other": 1}}, "not an execsys report (no doctor, identity or execsys facts in it)",
                 id="no-execsys-facts"),
    pytest.param({"schema": "execsys.identity/1", "components": "x"},
                 "not an execsys report (no doctor, identity or execsys facts in it)", id="identity-without-components"),
])
def test_reports_that_are_a_problem(data, problem) -> None:
    record = _one(data)
    assert (record.host, record.problem) == ("file-host", problem)


def test_execsys_facts_under_either_name_and_with_an_error() -> None:
    digests = dict.fromkeys(COMPONENTS, "sha256:1")
    facts = {"identity": {"id": "node-1", "components": digests, "labels": {"runtime": "vllm 0.11.0"}},
             "artifact": {"blake3": A, "declared": B}, "error": "cannot pin: no model"}
    for wrapped in ({"ansible_facts": {"execsys": facts}}, {"ansible_execsys": facts}, {"execsys": facts}):
        reader = _Reader()
        [record] = reader.records(wrapped, "h", "r")
        assert (record.identity, record.digest, record.declared_digest, record.problem) == (
            "node-1", A, B, "cannot pin: no model")
        assert record.components == ("sha256:1",) * len(COMPONENTS)
        assert record.fleet_digest == fleet_digest(digests)
        assert reader.labels[("runtime", "sha256:1")] == "vllm 0.11.0"
        assert reader.labels[("artifact", "sha256:1")] == ""


def test_execsys_facts_of_odd_shapes() -> None:
    digests = {COMPONENTS[0]: 5}  # a number, the others missing
    [record] = _Reader().records({"execsys": {"identity": {"id": 7, "components": digests}}}, "h", "r")
    assert record.components == ("5",) + ("",) * (len(COMPONENTS) - 1)
    assert record.identity is None  # an id that is not text is no id
    assert record.hazards is None and record.digest is None
    [empty] = _Reader().records({"execsys": {"identity": {"components": {}}, "doctor": {}}}, "h", "r")
    assert (empty.components, empty.fleet_digest, empty.hazards) == (None, None, None)


# -- running over files, and the answer ------------------------------------------------------------

def _tree(tmp_path: Path, docs: dict[str, object]) -> Path:
    directory = tmp_path / "tree"
    directory.mkdir()
    for name, doc in docs.items():
        (directory / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return directory


def test_a_directory_of_reports_is_read_sorted_and_hidden_files_skipped(tmp_path) -> None:
    directory = _tree(tmp_path, {"b.json": _doctor("b"), "a.json": _doctor("a"), ".hidden.json": _doctor("h")})
    (directory / "sub").mkdir()
    report = run_fleet(FleetOptions(reports=[str(directory)]))
    assert [r.host for r in report.records] == ["a", "b"]
    ansible = run_fleet(FleetOptions(from_ansible=str(directory)))
    assert [r.host for r in ansible.records] == ["a", "b"]  # inventory names: the file names less .json


def test_an_unreadable_report_is_a_problem_named_by_its_file(tmp_path) -> None:
    directory = _tree(tmp_path, {"bad.json": "{not json", "empty": ""})
    report = run_fleet(FleetOptions(reports=[str(directory / "bad.json"), str(directory / "empty")]))
    assert [r.host for r in report.records] == ["bad", "empty"]
    assert all(r.problem.startswith("unreadable report: ") for r in report.records)
    assert report.exit_code == 1


def test_a_doctor_and_a_pin_report_of_one_node_are_one_record(tmp_path) -> None:
    directory = _tree(tmp_path, {"1-doctor.json": _doctor("n1", [{"id": "x", "status": "warn"}]),
                                 "2-pin.json": _pin("n1", declared=B), "3-pin.json": _pin("n2", declared=B)})
    heard: list[ReportRead] = []
    report = run_fleet(FleetOptions(reports=[str(directory)]), on_event=heard.append)
    [n1, n2] = report.records
    assert (n1.key, n1.hazards, n1.digest, n1.declared_digest, n1.identity) == ("n1", {"x": "warn"}, A, B, "id-1")
    assert n1.report == f"{directory}/1-doctor.json+{directory}/2-pin.json"
    assert (report.hosts, report.reports, report.duplicates) == (2, 3, {})
    assert [(e.index, e.host) for e in heard] == [(1, "n1"), (2, "n1"), (3, "n2")]
    assert (report.identity_k, report.identity_n) == (2, 2)


def test_a_pin_first_then_its_doctor_report_is_one_record_too(tmp_path) -> None:
    directory = _tree(tmp_path, {"1-pin.json": _pin("n1"), "2-doctor.json": _doctor("n1", [{"id": "x", "status": "fail"}])})
    [record] = run_fleet(FleetOptions(reports=[str(directory)])).records
    assert (record.hazards, record.digest, record.identity) == ({"x": "fail"}, A, "id-1")


def test_two_reports_of_one_kind_are_two_nodes_keyed_apart(tmp_path) -> None:
    directory = _tree(tmp_path, {"1.json": _doctor("a"), "2.json": _doctor("a"), "3.json": _doctor("a#2"),
                                 "4.json": _doctor("a")})
    report = run_fleet(FleetOptions(reports=[str(directory)]))
    assert [r.key for r in report.records] == ["a", "a#2", "a#2#2", "a#3"]
    assert report.duplicates == {"a": 3}
    assert report.to_json()["duplicates"] == [{"host": "a", "reports": 3}]


def test_no_reports_at_all_is_refused(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError) as err:
        run_fleet(FleetOptions(reports=[str(empty)]))
    assert str(err.value) == "no host reports found"


def test_a_cancelled_fleet_answers_what_it_read(tmp_path) -> None:
    directory = _tree(tmp_path, {"1.json": _doctor("a")})
    cancel = threading.Event()
    cancel.set()
    report = run_fleet(FleetOptions(reports=[str(directory)]), cancel=cancel)
    assert (report.cancelled, report.hosts, report.to_json()["cancelled"]) == (True, 0, True)


def test_the_answer_as_json(tmp_path) -> None:
    directory = _tree(tmp_path, {"1.json": _pin("n1"), "2.json": _pin("n2", engine="0.12.0"),
                                 "3.json": _pin("n3"), "4.json": {"unreachable": True, "msg": "down"},
                                 "5.json": _doctor("n1", [{"id": "x", "status": "warn"}])})
    report = run_fleet(FleetOptions(reports=[str(directory)], prom=None))
    body = report.to_json()
    assert body["schema"] == "execsys.fleet/2"
    assert (body["hosts"], body["reports"], body["verdict"], body["prom"]) == (4, 5, "disagrees", None)
    modal = report.records[0].fleet_digest
    assert body["identity_agreement"] == {"k": 2, "n": 3, "fleet_digest": modal, "ratio": 0.666667}
    [outlier] = body["outliers"]
    assert outlier == {"host": "n2", "report": f"{directory}/2.json", "fleet_digest": report.records[1].fleet_digest,
                       "identity": "id-1", "components": ["runtime"],
                       "changes": [{"component": "runtime", "modal": "vllm 0.11.0", "this": "vllm 0.12.0"}]}
    assert body["hazards"] == {"x": {"n1": "warn"}}
    assert body["hazard_counts"] == {"x": {"fail": 0, "error": 0, "warn": 1, "skip": 0, "ok": 0}}
    assert body["problems"] == [{"host": "4", "report": f"{directory}/4.json", "problem": "unreachable: down"}]
    assert body["digest_match"]["ratio"] == 1.0 and body["digest_match"]["expected"] == A


def test_the_prometheus_textfile_line_by_line(tmp_path) -> None:
    directory = _tree(tmp_path, {"1.json": _doctor("n1", [{"id": "x", "status": "fail"}, {"id": "y", "status": "odd"}]),
                                 "2.json": _pin("n1"), "3.json": _pin("n2", digest=B),
                                 "4.json": {"execsys": {"artifact": {"blake3": A}}}})
    prom = tmp_path / "fleet.prom"
    report = run_fleet(FleetOptions(reports=[str(directory)], prom=str(prom), expected_digest=A))
    assert report.prom_path == str(prom) and report.to_json()["prom"] == str(prom)
    fd1, fd2 = report.records[0].fleet_digest, report.records[1].fleet_digest
    assert prom.read_text() == prometheus_text(report) == "\n".join([
        "# HELP execsys_doctor_hazard_status execsys doctor hazard status per host: "
        "0 ok or not applicable, 1 warn, 2 fail, 3 could not check",
        "# TYPE execsys_doctor_hazard_status gauge",
        'execsys_doctor_hazard_status{host="n1",hazard="x"} 2',
        'execsys_doctor_hazard_status{host="n1",hazard="y"} 3',
        "# HELP execsys_identity_info The fleet digest each host reports, and its execsys identity id "
        "where the report has one (value always 1)",
        "# TYPE execsys_identity_info gauge",
        f'execsys_identity_info{{host="n1",fleet_digest="{fd1}",identity="id-1"}} 1',
        f'execsys_identity_info{{host="n2",fleet_digest="{fd2}",identity="id-1"}} 1',
        "# HELP execsys_fleet_identity_agreement Share of hosts with the modal fleet digest (k/n)",
        "# TYPE execsys_fleet_identity_agreement gauge",
        "execsys_fleet_identity_agreement 0.5",
        "# HELP execsys_fleet_digest_match_ratio Share of hosts whose artifact digest is the expected one",
        "# TYPE execsys_fleet_digest_match_ratio gauge",
        "execsys_fleet_digest_match_ratio 0.6666666666666666",
    ]) + "\n"


def test_an_identity_info_line_without_an_identity_names_none(tmp_path) -> None:
    facts = {"execsys": {"identity": {"components": dict.fromkeys(COMPONENTS, "sha256:1")}}}
    report = run_fleet(FleetOptions(reports=[str(_tree(tmp_path, {"h.json": facts}) / "h.json")]))
    assert f'execsys_identity_info{{host="h",fleet_digest="{report.records[0].fleet_digest}"}} 1' in \
        prometheus_text(report).splitlines()


def test_a_label_that_is_not_utf8_is_written_as_its_escape(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"schema": "execsys.doctor/1", "host": {"name": "gpu\\ud800"}, "hazards": '
                    '[{"id": "x", "status": "ok"}]}')
    text = prometheus_text(run_fleet(FleetOptions(reports=[str(path)])))
    assert 'execsys_doctor_hazard_status{host="gpu\\\\ud800",hazard="x"} 0' in text.splitlines()
    text.encode("utf-8")


# -- the ledger's newest records per host ----------------------------------------------------------

def test_the_ledger_gives_the_newest_doctor_and_identity_per_node_since_a_time(tmp_path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger:
        old = ledger.append("doctor", _doctor("n1", [{"id": "x", "status": "fail"}]))
        ident = ledger.append("identity", _pin("n1"))
        doc = ledger.append("doctor", _doctor("n1", [{"id": "x", "status": "ok"}]))
        other = ledger.append("doctor", _doctor("n2", [{"id": "x", "status": "warn"}]))
    ids = [getattr(r, "id", r) for r in (old, ident, doc, other)]
    report = run_fleet(FleetOptions(ledger_since="1970-01-01T00:00:00.000Z", ledger_path=str(path)))
    by_host = {r.host: r for r in report.records}
    assert sorted(by_host) == ["n1", "n2"]
    n1 = by_host["n1"]
    assert (n1.hazards, n1.digest, n1.identity) == ({"x": "ok"}, A, "id-1")
    assert n1.report == f"{ids[1]}+{ids[0]}+{ids[2]}"
    assert by_host["n2"].report == ids[3]
    with pytest.raises(InputError) as err:
        run_fleet(FleetOptions(ledger_since="2999-01-01T00:00:00.000Z", ledger_path=str(path)))
    assert str(err.value) == "no host reports found in the ledger since 2999-01-01T00:00:00.000Z"


# -- a host without execsys: the shipped doctor's output -------------------------------------------

def _shipped_programs(**kwargs) -> ShippedPrograms:
    return ShippedPrograms(doctor="print(1)", digest=None, artifact_path=kwargs.get("path", "/srv/m"),
                           declared_digest=kwargs.get("declared"))


def test_shipped_facts_of_a_finished_doctor() -> None:
    from execsys.doctor.registry import IDS

    results = [{"id": h, "status": "ok", "summary": "fine", "evidence": [], "fix": ""} for h in IDS]
    results[0]["status"] = "fail"
    shipped = {"host": {"hostname": "bare-1"}, "results": results, "finished": True,
               "environment": {"python": "/usr/bin/python3"}, "digest": {"digest": A}}
    facts = shipped_host_facts(shipped, _shipped_programs(declared=B))
    assert (facts["schema"], facts["host"], facts["shipped"], facts["note"], facts["identity"]) == (
        "execsys.facts/1", "bare-1", True, SHIPPED_NOTE, None)
    assert facts["doctor"]["hazards"] == {h: ("fail" if i == 0 else "ok") for i, h in enumerate(IDS)}
    assert facts["doctor"]["verdict"] == "hazards"
    assert facts["doctor"]["environment"] == {"python": "/usr/bin/python3"}
    assert facts["artifact"] == {"path": "/srv/m", "blake3": A, "declared": B}
    assert facts["doctor"]["line"] == f"fail {IDS[0]}: fine"  # the node check's own line (npd mode)
    record = _one({"ansible_facts": {"execsys": facts}}, "bare-1")
    assert (record.hazards[IDS[0]], record.digest, record.problem) == ("fail", A, None)


def test_shipped_facts_of_a_doctor_that_did_not_finish() -> None:
    from execsys.doctor.registry import IDS

    shipped = {"host": "not a table", "results": [{"id": IDS[0], "status": "ok", "summary": "", "evidence": [],
                                                   "fix": ""}, {"status": "ok"}, "junk"],
               "finished": False, "digest": {"error": "b3sum: permission denied"}}
    facts = shipped_host_facts(shipped, _shipped_programs())
    assert facts["host"] == "unknown"
    assert facts["doctor"]["hazards"][IDS[0]] == "ok"
    assert all(facts["doctor"]["hazards"][h] == "error" for h in IDS[1:])
    assert facts["artifact"] == {"path": "/srv/m", "blake3": None, "declared": None,
                                 "error": "b3sum: permission denied"}
    assert facts["doctor"]["environment"] == {}
    reasoned = shipped_host_facts({"finished": False, "reason": "killed after 60 s"}, _shipped_programs())
    assert all(status == "error" for status in reasoned["doctor"]["hazards"].values())
    assert reasoned["doctor"]["line"] == f"unknown {IDS[0]}: not inspected: killed after 60 s"
    unsaid = shipped_host_facts({"finished": False}, _shipped_programs())
    assert unsaid["doctor"]["line"] == f"unknown {IDS[0]}: not inspected: the shipped doctor did not finish"
    finished_empty = shipped_host_facts({"finished": True}, _shipped_programs())
    assert finished_empty["doctor"]["line"] == f"unknown {IDS[0]}: not inspected: no result"


# -- rows written against the fleet run's survivors ----------------------------------------------

def test_a_component_digest_is_sha256_of_sorted_compact_utf8_json() -> None:
    import hashlib

    components = {"runtime": {"observed": {"engine": {"version": "0.11.0", "name": "vllm"}},
                              "declared": {"note": "café"}}}
    canonical = '{"declared":{"note":"café"},"observed":{"engine":{"name":"vllm","version":"0.11.0"}}}'
    digests = component_digests(components)
    assert digests["runtime"] == "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert digests["artifact"] == "sha256:" + hashlib.sha256(b"{}").hexdigest()  # an absent component is {}


def test_no_identities_and_no_digests_are_nan_in_the_textfile(tmp_path) -> None:
    report = run_fleet(FleetOptions(reports=[str(_tree(tmp_path, {"d.json": _doctor("n1")}) / "d.json")]))
    lines = prometheus_text(report).splitlines()
    assert "execsys_fleet_identity_agreement NaN" in lines and "execsys_fleet_digest_match_ratio NaN" in lines


def test_a_record_without_hazards_does_not_end_the_hazard_lines(tmp_path) -> None:
    directory = _tree(tmp_path, {"1.json": _pin("n0"), "2.json": _doctor("n1", [{"id": "x", "status": "warn"}]),
                                 "3.json": _doctor("n2", [{"id": "x", "status": "ok"}])})
    lines = prometheus_text(run_fleet(FleetOptions(reports=[str(directory)]))).splitlines()
    assert [line for line in lines if line.startswith("execsys_doctor_hazard_status{")] == [
        'execsys_doctor_hazard_status{host="n1",hazard="x"} 1', 'execsys_doctor_hazard_status{host="n2",hazard="x"} 0']


def test_a_defect_names_its_node_report_digest_and_the_expected_one(tmp_path) -> None:
    directory = _tree(tmp_path, {"1.json": _pin("n1", digest=B)})
    report = run_fleet(FleetOptions(reports=[str(directory)], expected_digest=A, expected_source="--expected-digest"))
    assert report.digest_match()["defects"] == [
        {"host": "n1", "report": f"{directory}/1.json", "digest": B, "expected": A}]
    none_expected = run_fleet(FleetOptions(reports=[str(directory / "1.json")]))
    assert none_expected.digest_match()["expected_source"] == "the fleet's modal digest"


def test_a_doctor_report_s_problem_survives_its_pin_report(tmp_path) -> None:
    unreachable = {"schema": "execsys.doctor/1", "host": {"name": "n1", "error": "ssh: timed out"}, "hazards": []}
    directory = _tree(tmp_path, {"1.json": unreachable, "2.json": _pin("n1")})
    [record] = run_fleet(FleetOptions(reports=[str(directory)])).records
    assert (record.problem, record.digest) == ("ssh: timed out", A)


def test_an_outlier_whose_component_has_no_label_shows_an_empty_one(tmp_path) -> None:
    digests = dict.fromkeys(COMPONENTS, "sha256:1")
    other = dict(digests, runtime="sha256:2")
    directory = _tree(tmp_path, {f"{i}.json": {"execsys": {"identity": {"components": d}}}
                                 for i, d in enumerate([digests, digests, other])})
    [outlier] = run_fleet(FleetOptions(reports=[str(directory)])).outliers()
    assert outlier["changes"] == [{"component": "runtime", "modal": "", "this": ""}]
