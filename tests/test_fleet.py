"""`execsys fleet`: host reports added up -- exact counts, outliers named, defects never averaged away."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from execsys.doctor.registry import IDS as HAZARD_IDS

from execsys import COMPONENTS
from execsys.fleet import component_digests, fleet_components
from execsys.ledger import Ledger

DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


def pin_json(host: str, *, schema: str = "execsys.identity/1", engine_version: str = "0.11.0", digest: str = DIGEST_A, gpu_uuid: str = "GPU-1",
             declared_digest: str | None = None) -> dict:
    """An identity document of the shape `execsys pin --json` writes, for one host."""
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["artifact"] = {"declared": {"path": "/srv/m"} | ({"digest": declared_digest} if declared_digest else {}),
                              "observed": {"path": "/srv/m", "digest": digest, "format": "safetensors"}}
    components["runtime"]["observed"] = {"engine": {"name": "vllm", "version": engine_version}}
    components["hardware"]["observed"] = {"hostname": host, "machine_id": f"mid-{host}", "kernel": "6.1",
                                          "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": gpu_uuid}]}
    return {"schema": schema, "id": f"node-{host}", "components": components}


def doctor_json(host: str, failing: str | None = None) -> dict:
    hazards = [{"id": h, "status": "fail" if h == failing else "ok", "summary": "", "evidence": [], "fix": ""}
               for h in HAZARD_IDS]
    return {"schema": "execsys.doctor/1", "host": {"hostname": host, "name": "local"}, "hazards": hazards,
            "verdict": "hazards" if failing else "clean"}


def write(tmp: Path, name: str, doc: dict) -> str:
    path = tmp / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_host_name_and_gpu_uuids_do_not_split_the_identity():
    a = component_digests(pin_json("gpu-1", gpu_uuid="GPU-aaa")["components"])
    b = component_digests(pin_json("gpu-2", gpu_uuid="GPU-bbb")["components"])
    assert a == b
    c = component_digests(pin_json("gpu-3", engine_version="0.11.1")["components"])
    assert [n for n in COMPONENTS if a[n] != c[n]] == ["runtime"]
    original = pin_json("gpu-1")["components"]
    snapshot = copy.deepcopy(original)
    fleet_components(original)
    assert original == snapshot  # the report itself is not edited


def test_agreement_outliers_defects_and_hazards_exact(tmp_path, cli):
    files = [write(tmp_path, f"pin-gpu-{i}.json", pin_json(f"gpu-{i}", gpu_uuid=f"GPU-{i}")) for i in range(1, 6)]
    files.append(write(tmp_path, "pin-gpu-6.json", pin_json("gpu-6", engine_version="0.11.1")))
    files.append(write(tmp_path, "pin-gpu-7.json", pin_json("gpu-7", digest=DIGEST_B)))
    files.append(write(tmp_path, "doctor-gpu-8.json", doctor_json("gpu-8", failing="clock-skew")))
    result = cli("fleet", *files, "--json")
    assert result.returncode == 1, result.stderr
    body = result.json()
    assert body["hosts"] == 8
    assert body["identity_agreement"]["k"] == 5 and body["identity_agreement"]["n"] == 7
    outliers = {o["host"]: o for o in body["outliers"]}
    assert set(outliers) == {"gpu-6", "gpu-7"}
    assert outliers["gpu-6"]["components"] == ["runtime"]
    assert outliers["gpu-6"]["changes"][0] == {"component": "runtime", "modal": "vllm 0.11.0", "this": "vllm 0.11.1"}
    assert outliers["gpu-7"]["components"] == ["artifact"]
    assert outliers["gpu-6"]["report"].endswith("pin-gpu-6.json")
    # the host is named by its execsys identity id; the sha256 it was compared by is the fleet digest
    assert outliers["gpu-6"]["identity"] == "node-gpu-6" and outliers["gpu-6"]["fleet_digest"].startswith("sha256:")
    assert body["identity_agreement"]["fleet_digest"].startswith("sha256:") and "modal" not in body["identity_agreement"]
    assert body["schema"] == "execsys.fleet/2"
    match = body["digest_match"]
    assert (match["k"], match["n"]) == (6, 7)
    assert match["expected"] == DIGEST_A and match["expected_source"] == "the fleet's modal digest"
    assert [d["host"] for d in match["defects"]] == ["gpu-7"]
    assert body["hazards"]["clock-skew"] == {"gpu-8": "fail"}
    assert list(body["hazards"])[0] == "clock-skew"  # the worst first
    assert body["hazard_counts"]["clock-skew"]["fail"] == 1
    human = cli("fleet", *files)
    assert "gpu-6 (identity node-gpu-6): runtime (vllm 0.11.0 -> vllm 0.11.1)" in human.stdout  # its pinned id
    assert "DEFECT   gpu-7" in human.stdout and "6/7 = 0.857" in human.stdout
    assert "5/7 share the modal fleet digest sha256:" in human.stdout


def test_an_agreeing_fleet_exits_0(tmp_path, cli):
    files = [write(tmp_path, f"{i}.json", pin_json(f"gpu-{i}", schema=f"execsys.identity/{1 + i % 2}"))
             for i in range(3)]
    files += [write(tmp_path, f"d{i}.json", doctor_json(f"gpu-{i}x")) for i in range(3)]
    result = cli("fleet", *files, "--json")
    assert result.returncode == 0, result.stdout
    assert result.json()["verdict"] == "agrees"


def test_the_lock_sets_the_expected_digest_so_a_unanimous_wrong_fleet_fails(tmp_path, cli):
    """Six hosts serving the same wrong bytes agree with each other; against the pin, 0/6."""
    files = [write(tmp_path, f"{i}.json", pin_json(f"gpu-{i}", digest=DIGEST_B)) for i in range(6)]
    result = cli("fleet", *files, "--expected-digest", DIGEST_A, "--json")
    body = result.json()
    assert result.returncode == 1
    assert (body["digest_match"]["k"], body["digest_match"]["n"]) == (0, 6)
    assert len(body["digest_match"]["defects"]) == 6
    declared = [write(tmp_path, f"x{i}.json", pin_json(f"gpu-{i}", declared_digest=DIGEST_A,
                                                       digest=DIGEST_A if i else DIGEST_B)) for i in range(4)]
    body = cli("fleet", *declared, "--json").json()
    assert (body["digest_match"]["k"], body["digest_match"]["n"]) == (3, 4)


def test_duplicates_count_twice_and_are_flagged(tmp_path, cli):
    files = [write(tmp_path, "a.json", doctor_json("gpu-1")), write(tmp_path, "b.json", doctor_json("gpu-1")),
             write(tmp_path, "c.json", doctor_json("gpu-2"))]
    body = cli("fleet", *files, "--json").json()
    assert body["hosts"] == 3
    assert body["duplicates"] == [{"host": "gpu-1", "reports": 2}]
    assert set(body["hazards"]["clock-skew"]) == {"gpu-1", "gpu-1#2", "gpu-2"}


def test_unreadable_and_unreachable_reports_count_and_fail(tmp_path, cli):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "gpu-1").write_text(json.dumps(doctor_json("x")))
    (tree / "gpu-2").write_text(json.dumps({"unreachable": True, "msg": "Failed to connect to the host via ssh"}))
    (tree / "gpu-3").write_text("{not json")
    result = cli("fleet", "--from-ansible", str(tree), "--json")
    body = result.json()
    assert result.returncode == 1 and body["hosts"] == 3
    problems = {p["host"]: p["problem"] for p in body["problems"]}
    assert problems["gpu-2"].startswith("unreachable: Failed to connect")
    assert problems["gpu-3"].startswith("unreadable report")
    assert set(body["hazards"]["clock-skew"]) == {"gpu-1"}  # the file name is the inventory host


@pytest.mark.parametrize("args, needle", [
    ([], "no host reports"),
    (["nope.json"], "no such report file"),
    (["--from-ansible", "missing-dir"], "not a directory"),
    (["--ledger-since", "yesterday-ish"], "not an ISO date/time"),
])
def test_bad_input_is_one_line_exit_2(args, needle, cli, tmp_path):
    result = cli("fleet", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_prometheus_textfile_parses_with_the_four_metrics(tmp_path, cli):
    from prometheus_client.parser import text_string_to_metric_families

    files = [write(tmp_path, "p1.json", pin_json("gpu-1")), write(tmp_path, "p2.json", pin_json("gpu-2", digest=DIGEST_B)),
             write(tmp_path, "d1.json", doctor_json("gpu-1", failing="port-collisions"))]
    prom = tmp_path / "textfile" / "execsys.prom"
    prom.parent.mkdir()
    prom.write_text("stale\n")
    result = cli("fleet", *files, "--prom", str(prom))
    assert result.returncode == 1
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert set(families) == {"execsys_doctor_hazard_status", "execsys_identity_info",
                             "execsys_fleet_identity_agreement", "execsys_fleet_digest_match_ratio"}
    status = {(s.labels["host"], s.labels["hazard"]): s.value for s in families["execsys_doctor_hazard_status"].samples}
    # the doctor report of gpu-1 and its pin report are one host, not a duplicate
    assert status[("gpu-1", "port-collisions")] == 2 and status[("gpu-1", "clock-skew")] == 0
    identities = {s.labels["host"]: s.labels["identity"] for s in families["execsys_identity_info"].samples}
    assert set(identities) == {"gpu-1", "gpu-2"} and identities["gpu-1"] != identities["gpu-2"]
    assert families["execsys_fleet_identity_agreement"].samples[0].value == 0.5
    assert families["execsys_fleet_digest_match_ratio"].samples[0].value == 0.5
    assert [p.name for p in prom.parent.iterdir()] == ["execsys.prom"]  # no temp file left behind
    bad = cli("fleet", *files, "--prom", str(tmp_path / "no-dir" / "x.prom"))
    assert bad.returncode == 2 and "--prom" in bad.stderr


def test_ledger_since_takes_the_newest_records_per_host(tmp_path, ledger_path, cli):
    with Ledger.open(ledger_path) as ledger:
        ledger.append("doctor", doctor_json("gpu-1", failing="baked-paths"))  # superseded below
        ledger.append("doctor", doctor_json("gpu-1"))
        ledger.append("doctor", doctor_json("gpu-2", failing="lost-mode-bits"))
        ledger.append("identity", pin_json("gpu-1"), identity="node-gpu-1")
        ledger.append("identity", pin_json("gpu-2", engine_version="0.12.0"), identity="node-gpu-2")
    body = cli("fleet", "--ledger-since", "1h", "--json").json()
    assert body["hosts"] == 2
    assert body["hazards"]["baked-paths"] == {"gpu-1": "ok", "gpu-2": "ok"}
    assert body["hazards"]["lost-mode-bits"]["gpu-2"] == "fail"
    assert body["identity_agreement"]["k"] == 1 and body["identity_agreement"]["n"] == 2
    future = cli("fleet", "--ledger-since", "2999-01-01T00:00:00Z")
    assert future.returncode == 2 and "no host reports found in the ledger" in future.stderr


def _facts(i: int, padding: str) -> dict:
    version = "0.11.1" if i % 1000 == 7 else "0.11.0"
    digests = {n: f"sha256:{n}" for n in COMPONENTS}
    digests["runtime"] = f"sha256:runtime-{version}"
    hazards = {h: "ok" for h in HAZARD_IDS}
    if i % 500 == 3:
        hazards["clock-skew"] = "fail"
    return {"ansible_facts": {"execsys": {
        "doctor": {"verdict": "clean", "hazards": hazards, "evidence": padding},
        "identity": {"id": f"node-{i}", "components": digests, "labels": {"runtime": f"vllm {version}"}},
        "artifact": {"path": "/srv/m", "blake3": DIGEST_B if i % 2500 == 11 else DIGEST_A}}}, "changed": False}


_PEAK = r"""
import json, sys, tracemalloc
from execsys.fleet import FleetOptions, run_fleet
tracemalloc.start()
report = run_fleet(FleetOptions.from_sources(None, None, from_ansible=sys.argv[1]))
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
json.dump({"body": report.to_json(), "peak": peak}, sys.stdout)
"""


def _fleet_peak(directory: Path) -> tuple[dict, int]:
    """The fleet answer and the peak traced memory of computing it, in a process of its own: in a test
    worker, threads left by earlier tests (and pytest-xdist's own) allocate while it is measured."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PEAK, str(directory)], capture_output=True, text=True,
                          timeout=300, check=True)
    measured = json.loads(done.stdout)
    return measured["body"], measured["peak"]


def test_ten_thousand_reports_exact_counts_in_flat_memory(tmp_path):
    """10,000 host reports: every count exact; the engine holds no report, only a small record per host,
    so peak memory does not grow with the size of the reports (4 KiB more evidence each: same peak)."""
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    for i in range(10_000):
        (small / f"gpu-{i:05d}").write_text(json.dumps(_facts(i, "")))
        (large / f"gpu-{i:05d}").write_text(json.dumps(_facts(i, "x" * 4096)))
    body, peak_small = _fleet_peak(small)
    assert body["hosts"] == 10_000
    assert body["identity_agreement"]["k"] == 9_990 and body["identity_agreement"]["n"] == 10_000
    assert sorted(o["host"] for o in body["outliers"]) == [f"gpu-{i:05d}" for i in range(7, 10_000, 1000)]
    assert all(o["components"] == ["runtime"] for o in body["outliers"])
    assert (body["digest_match"]["k"], body["digest_match"]["n"]) == (9_996, 10_000)
    assert [d["host"] for d in body["digest_match"]["defects"]] == ["gpu-00011", "gpu-02511", "gpu-05011",
                                                                   "gpu-07511"]
    assert body["hazard_counts"]["clock-skew"] == {"fail": 20, "error": 0, "warn": 0, "skip": 0, "ok": 9_980}
    assert len(body["hazards"]["clock-skew"]) == 10_000
    body_large, peak_large = _fleet_peak(large)
    assert body_large["digest_match"]["k"] == body["digest_match"]["k"] == 9_996
    assert peak_large < peak_small * 1.1 + (1 << 20), (peak_small, peak_large)
    assert peak_small / 10_000 < 2048, f"{peak_small / 10_000:.0f} bytes per host"


def test_the_pinned_lock_is_the_expected_digest(tmp_path, cli):
    (tmp_path / "model.bin").write_bytes(b"weights\n" * 4096)
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model.bin"\n')
    assert cli("pin", "--config", str(tmp_path / "execsys.toml")).returncode == 0
    lock = json.loads((tmp_path / "execsys.lock.json").read_text())
    pinned = lock["components"]["artifact"]["observed"]["digest"]
    files = [write(tmp_path, "a.json", pin_json("gpu-1", digest=pinned)),
             write(tmp_path, "b.json", pin_json("gpu-2", digest=pinned)),
             write(tmp_path, "c.json", pin_json("gpu-3", digest=DIGEST_B))]
    body = cli("fleet", *files, "--lock", str(tmp_path / "execsys.lock.json"), "--json").json()
    match = body["digest_match"]
    assert (match["k"], match["n"]) == (2, 3) and match["expected"] == pinned
    assert match["expected_source"].startswith("the lock")
    assert [d["host"] for d in match["defects"]] == ["gpu-3"]


def test_a_doctor_and_a_pin_report_of_one_host_are_one_host_named_by_its_identity(tmp_path, cli):
    """The real `execsys pin` and `execsys doctor` of this machine: two kinds of report of one host, not
    duplicates; the host is named by the identity id pin shows, the sha256 it is compared by is the
    fleet digest. A second doctor report of the host is a duplicate."""
    from prometheus_client.parser import text_string_to_metric_families

    (tmp_path / "model.bin").write_bytes(b"weights\n" * 4096)
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model.bin"\n')
    pinned = cli("pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    lock = pinned.json()
    host = lock["components"]["hardware"]["observed"]["hostname"]
    pin = write(tmp_path, "pin.json", lock)
    checked = cli("doctor", "--only", "clock-skew", "--json", cwd=tmp_path)
    assert checked.returncode in (0, 1), checked.stderr
    doctor = write(tmp_path, "doctor.json", checked.json())
    status = checked.json()["hazards"][0]["status"]
    prom = tmp_path / "fleet.prom"
    result = cli("fleet", doctor, pin, "--json", "--prom", str(prom))
    body = result.json()
    assert (body["hosts"], body["reports"], body["duplicates"], body["problems"]) == (1, 2, [], [])
    assert body["hazards"]["clock-skew"] == {host: status}
    agreement = body["identity_agreement"]
    assert (agreement["k"], agreement["n"], agreement["ratio"]) == (1, 1, 1.0)
    assert agreement["fleet_digest"].startswith("sha256:") and lock["id"] not in agreement["fleet_digest"]
    [info] = {f.name: f for f in text_string_to_metric_families(prom.read_text())}["execsys_identity_info"].samples
    assert info.labels == {"host": host, "identity": lock["id"], "fleet_digest": agreement["fleet_digest"]}
    human = cli("fleet", doctor, pin).stdout
    assert f"identity   1/1 share the modal fleet digest {agreement['fleet_digest'][:19]} (the pinned " in human
    assert human.startswith("1 host from 2 host reports\n")
    assert "fleet identity" not in human and "duplicate" not in human
    again = write(tmp_path, "doctor-again.json", checked.json())
    twice = cli("fleet", doctor, pin, again, "--json").json()
    assert twice["hosts"] == 2 and twice["duplicates"] == [{"host": host, "reports": 2}]
    assert twice["hazards"]["clock-skew"] == {host: status, f"{host}#2": status}
