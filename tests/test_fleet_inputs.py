"""`execsys fleet` never hangs on a report path that is not a regular file (found by trying /dev/zero)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(120)
def test_special_files_among_the_reports_are_problems_not_hangs(tmp_path: Path, ledger_path: Path) -> None:
    fifo = tmp_path / "gpu-01.json"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "execsys", "fleet", "--json", "/dev/zero", str(fifo)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    import json

    report = json.loads(done.stdout)
    problems = json.dumps(report["problems"])
    assert "not a regular file" in problems and "FIFO" in problems and "character device" in problems
    assert report["hosts"] == 2


def test_a_malformed_report_is_a_problem_of_that_host_and_the_fleet_still_answers(tmp_path: Path, ledger_path) -> None:
    import json

    from prometheus_client.parser import text_string_to_metric_families

    docs = {
        "strhost.json": {"schema": "execsys.doctor/1", "host": "gpu-9", "hazards": [{"id": "clock-skew", "status": "ok"}]},
        "strhazards.json": {"schema": "execsys.doctor/1", "host": {"hostname": "gpu-8"}, "hazards": "nope"},
        "numbers.json": [1, 2],
        "surrogate.json": None,  # written by hand below: a lone surrogate in the host name
        "a1.json": {"schema": "execsys.doctor/1", "host": {"hostname": "a"}, "hazards": [{"id": "clock-skew", "status": "fail"}]},
        "a2.json": {"schema": "execsys.doctor/1", "host": {"hostname": "a"}, "hazards": [{"id": "clock-skew", "status": "fail"}]},
        "a3.json": {"schema": "execsys.doctor/1", "host": {"hostname": "a#2"}, "hazards": [{"id": "clock-skew", "status": "ok"}]},
    }
    for name, doc in docs.items():
        if doc is not None:
            (tmp_path / name).write_text(json.dumps(doc))
    (tmp_path / "surrogate.json").write_text('{"schema": "execsys.doctor/1", "host": {"hostname": "b\\udc80\\"q"}, '
                                             '"hazards": [{"id": "clock-skew", "status": "warn"}]}')
    prom = tmp_path / "fleet.prom"
    done = subprocess.run([sys.executable, "-m", "execsys", "fleet", "--json", "--prom", str(prom),
                           *(str(tmp_path / n) for n in docs)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stderr == ""
    report = json.loads(done.stdout)
    problems = {p["host"]: p["problem"] for p in report["problems"]}
    assert problems["strhazards"] == "malformed report (ValueError: its hazards are str, not a list)"
    assert problems["numbers"] == "not an execsys report (expected a JSON object)"
    assert report["hosts"] == 7
    series = [(s.labels["host"], s.value) for family in text_string_to_metric_families(prom.read_text())
              for s in family.samples if s.name == "execsys_doctor_hazard_status"]
    hosts = [host for host, _ in series]
    assert len(hosts) == len(set(hosts))  # node_exporter refuses a file with two series of one name and labels
    assert ("a", 2.0) in series and ("a#2", 2.0) in series and ("a#2#2", 0.0) in series and ("gpu-9", 0.0) in series
    assert ('b\\udc80"q', 1.0) in series


@pytest.mark.parametrize(("args", "msg"), [
    ('{"timeout": "abc"}', "execsys_facts: argument timeout must be a number of seconds, not 'abc'"),
    ('{"timeout": -1}', "execsys_facts: argument timeout must be between 0 and 86400 seconds, not -1"),
    ('{"config": 5}', "execsys_facts: argument config must be a string, not int"),
    ('{"path": ["x"]}', "execsys_facts: argument path must be a string, not list"),
    ('[1]', "execsys_facts: the module arguments must be a mapping, not list"),
    ('{"env_from": "a\\u0000b"}', "execsys_facts: argument env_from contains a NUL character"),
], ids=["timeout-text", "timeout-negative", "config-int", "path-list", "not-a-mapping", "nul"])
def test_the_ansible_module_answers_failed_json_for_wrongly_typed_arguments(tmp_path: Path, args: str, msg: str) -> None:
    """What Ansible shows the operator is the module's JSON: a traceback there is an unreadable failure."""
    import json

    module = Path(__file__).resolve().parents[1] / "contrib" / "ansible" / "library" / "execsys_facts"
    (tmp_path / "args.json").write_text(args)
    done = subprocess.run([sys.executable, str(module), str(tmp_path / "args.json")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and done.stderr == ""
    assert json.loads(done.stdout) == {"failed": True, "changed": False, "msg": msg}
