"""``execsys run``'s gate as a table, in process: what the real doctor finds becomes the run's
``doctor`` field (mode, verdict, report id, failing lines, override), the report is kept in the
ledger, and a failing gate refuses the run unless overridden.

Each row runs the real doctor (about a second) on a declaration made to fail one way: an env file
that does not exist (a ``fail``), one that cannot be decoded (an ``error``), an unreachable machine
(its hazards ``error``, and a line of its own). The unreachable machine is 127.0.0.1 port 1, where
the connection is refused at once. (No test name here says r-e-m-o-t-e, s-s-h or h-o-s-t: the
mutation script's ``-k`` leaves such tests out.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.identity import Identity
from execsys.ledger import Ledger
from execsys.run.gate import run_gate

UNREACHABLE = "ssh://127.0.0.1:1"


def _declared(tmp_path: Path, text: str):
    path = tmp_path / "execsys.toml"
    path.write_text(text)
    return declaration.load(path)


def _failing_from_report(body: dict) -> list[str]:
    """The report's own fail/error hazards, every machine (a one-machine report has no ``hosts``),
    as the gate must list them."""
    return [f"{h['id']}: {h['summary']}" for host in body.get("hosts") or [body] for h in host["hazards"]
            if h["status"] in ("fail", "error")]


@pytest.mark.parametrize(("mode", "override", "refused", "overridden"), [
    pytest.param("fail", None, True, False, id="fail-refuses"),
    pytest.param("fail", "known, ticket 12", False, True, id="fail-overridden-runs"),
    pytest.param("warn", None, False, False, id="warn-runs"),
    pytest.param("warn", "needless", False, False, id="warn-with-a-reason-is-not-overridden"),
])
def test_a_missing_env_file_fails_the_gate(tmp_path, mode, override, refused, overridden) -> None:
    decl = _declared(tmp_path, '[runtime]\nenv_file = "missing.env"\n')
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        gate = run_gate(decl, mode, override, ledger)
        rows = list(ledger.iter(kind="doctor"))
    assert gate.report_id is not None and gate.report_id.startswith("doctor-")
    assert [r.id for r in rows] == [gate.report_id]
    assert rows[0].body["verdict"] == gate.verdict == "hazards"
    missing = f"unread-env-config: env file {tmp_path / 'missing.env'} does not exist"
    assert missing in gate.failing
    assert gate.failing == _failing_from_report(rows[0].body)
    assert not any(line.startswith(("stub-executables:", "baked-paths:")) for line in gate.failing)  # both ok here
    assert (gate.mode, gate.override, gate.refused, gate.overridden, gate.passed) == (
        mode, override, refused, overridden, False)
    assert gate.to_json() == {"report": gate.report_id, "verdict": "hazards", "gate_mode": mode,
                              "failing": gate.failing, "override": override}


def test_an_env_file_that_cannot_be_read_is_an_error_and_fails_the_gate(tmp_path) -> None:
    (tmp_path / "bad.env").write_bytes(b"\xff\xfe=1\n")
    decl = _declared(tmp_path, '[runtime]\nenv_file = "bad.env"\n')
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        gate = run_gate(decl, "fail", None, ledger)
    unreadable = [line for line in gate.failing if line.startswith("unread-env-config:")]
    assert len(unreadable) == 1 and unreadable[0].startswith(
        f"unread-env-config: cannot read env file {tmp_path / 'bad.env'}: ")
    assert gate.refused


def test_an_unreachable_machine_fails_the_gate_with_a_line_of_its_own(tmp_path) -> None:
    decl = _declared(tmp_path, f'[runtime]\nenv_file = "missing.env"\n[doctor]\nhosts = ["{UNREACHABLE}"]\n')
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        gate = run_gate(decl, "fail", None, ledger)
        assert gate.report_id is not None
        body = ledger.get(gate.report_id).body
    # the local fail first, then each of the machine's hazards not inspected, then the machine itself
    assert gate.failing[0] == f"unread-env-config: env file {tmp_path / 'missing.env'} does not exist"
    assert gate.failing[:-1] == _failing_from_report(body)
    not_inspected = [line for line in gate.failing[1:-1] if ": host not inspected: " in line]
    assert len(not_inspected) == len(body["hosts"][1]["hazards"]) == 10
    assert gate.failing[-1].startswith(f"host {UNREACHABLE}: ") and "refused" in gate.failing[-1].lower()
    assert gate.refused


def test_the_lock_and_the_declaration_both_feed_the_gate(tmp_path) -> None:
    """What only the lock names (the serving process) is checked, and what only the declaration names."""
    absent = "llama-server-absent-7f3a"
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["runtime"]["declared"] = {"engine": "llama.cpp", "process": absent,
                                         "endpoint": "http://127.0.0.1:1/v1"}
    lock = Identity(id="0" * 64, recorded_at="2026-12-02T00:00:00Z", components=components)
    decl = _declared(tmp_path, '[runtime]\nenv_file = "missing.env"\n')
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        gate = run_gate(decl, "fail", None, ledger, lock)
    assert f"port-collisions: the declared process {absent!r} is not running" in gate.failing  # from the lock
    assert f"unread-env-config: env file {tmp_path / 'missing.env'} does not exist" in gate.failing  # declared
