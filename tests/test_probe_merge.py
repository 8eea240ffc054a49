"""``execsys probe merge``: records from separate hosts combine only when just the hardware moved."""

from __future__ import annotations

import json

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.ledger import Ledger

from .fixtures.llama import FlipEndpoint
from .test_probe_arithmetic import write_cases


def write_identity(path, ledger_path, *, gpu: str, model: str = "tiny") -> str:
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["hardware"]["observed"] = {"gpu": gpu, "host": f"box-{gpu}"}
    components["model"]["declared"] = {"name": model}
    identity = content_id(components)
    lock = {"schema": "execsys.identity/1", "id": identity, "recorded_at": "2026-11-30T00:00:00Z",
            "declaration": {}, "components": components, "notes": []}
    path.write_text(json.dumps(lock))
    with Ledger.open(ledger_path) as ledger:
        ledger.append("identity", lock, identity=identity)
    return identity


def test_merge_records_from_two_hosts(cli, tmp_path, ledger_path):
    markers = {f"c{i:02d}": " [host]" for i in (2, 5, 7)}
    cases = write_cases(tmp_path / "cases.jsonl", markers, n=10)
    records = []
    for salt, gpu in ((0, "a100"), (1, "h100")):
        lock = tmp_path / f"{gpu}.lock.json"
        write_identity(lock, ledger_path, gpu=gpu)
        with FlipEndpoint(host_salt=salt) as endpoint:
            result = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                         "--lock", str(lock))
        assert result.returncode == 0, result.stderr
        records.append(result.json()["id"])
    merged = cli("probe", "merge", *records, "--json")
    assert merged.returncode == 1, merged.stderr
    record = merged.json()
    assert record["axis"] == "hosts" and record["target"]["records"] == records
    assert (record["m"], record["n"]) == (7, 10)
    assert record["flipped"] == ["c02", "c05", "c07"]
    assert record["sentence"].startswith("hosts agreement 7/10 = 0.70")
    assert record["cases"][2]["first_divergence"]["char"] is not None
    with Ledger.open(ledger_path) as ledger:
        assert ledger.get(record["id"]).kind == "probe"
    human = cli("probe", "merge", *records)
    assert "hosts agreement 7/10" in human.stdout


def test_merge_refuses_when_more_than_hardware_moved(cli, tmp_path, ledger_path):
    cases = write_cases(tmp_path / "cases.jsonl", n=3)
    records = []
    for gpu, model in (("a100", "tiny"), ("h100", "tiny-v2")):
        lock = tmp_path / f"{gpu}.lock.json"
        write_identity(lock, ledger_path, gpu=gpu, model=model)
        with FlipEndpoint() as endpoint:
            records.append(cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                               "--lock", str(lock)).json()["id"])
    result = cli("probe", "merge", *records)
    assert result.returncode == 2
    assert "refusing to merge" in result.stderr and "(model moved too)" in result.stderr


def test_merge_refuses_records_without_identity(cli, tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl", n=3)
    with FlipEndpoint() as endpoint:
        ids = [cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                   cwd=tmp_path).json()["id"] for _ in range(2)]
    result = cli("probe", "merge", *ids)
    assert result.returncode == 2 and "has no identity" in result.stderr
