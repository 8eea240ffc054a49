"""`execsys run`'s gate is the doctor as `execsys doctor --lock` runs it, never a weaker one.

The gate used to build its doctor from the declaration alone: what only the lock named (the serving
process, the endpoint's port) went unchecked, and a run passed a gate that `execsys doctor --lock` fails."""

from __future__ import annotations

import uuid
from pathlib import Path

from execsys import COMPONENTS, declaration
from execsys.identity import Identity
from execsys.ledger import Ledger
from execsys.run.gate import run_gate


def test_the_gate_checks_what_only_the_lock_names(tmp_path: Path) -> None:
    absent = f"llama-server-{uuid.uuid4().hex[:8]}"
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["runtime"]["declared"] = {"engine": "llama.cpp", "process": absent,
                                         "endpoint": "http://127.0.0.1:1/v1"}
    lock = Identity(id="0" * 64, recorded_at="2026-12-02T00:00:00Z", components=components)
    decl = declaration.parse("", tmp_path / "execsys.toml")
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        without = run_gate(decl, "fail", None, ledger)
        gated = run_gate(decl, "fail", None, ledger, lock)
    def ports(outcome) -> list[str]:
        return [line for line in outcome.failing if line.startswith("port-collisions")]

    assert ports(without) == []  # the declaration alone names no process
    assert not gated.passed
    assert ports(gated) == [f"port-collisions: the declared process {absent!r} is not running"]
