"""A checked-in identity lock whose id is a literal (schema execsys.identity/2).

Every identity id in existence is the BLAKE3 of the canonical JSON of the twelve components. The lock
in tests/data/golden/ was pinned once from the fixed declaration beside it (the declared half as
`execsys pin` records it, credentials redacted; the artifact observed from the fixed 64-byte file
there; the rest of the observed half written down for an H200 host, so that nothing depends on the
machine running the suite). If canonicalisation, redaction of the declared half, or the id function
changes, these tests fail: that change invalidates every lock users hold, and must bump the schema."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.canonical import canonical_json
from execsys.identity import SCHEMA, load_lock, pin

GOLDEN = Path(__file__).parents[1] / "data" / "golden"
GOLDEN_ID = "a615bc22bda5178d842e2ce154703954dba0a2fd0d65080446b4bc15f4fda325"
ARTIFACT_DIGEST = "05bc65d33c09788e53fc71a529bac7fbee20168c5bd50957d2d2a45b1d264e51"  # b3sum model.bin
# how the canonical spelling starts: sorted keys, no whitespace, declared before observed
SPELLING_STARTS = ('{"artifact":{"declared":{"format":"gguf","path":"model.bin","quantization":"Q4_K_M"},'
                   '"observed":{"digest":"' + ARTIFACT_DIGEST + '","files":1,"format":"pytorch",')


def test_the_golden_lock_loads_with_its_literal_id() -> None:
    identity = load_lock(GOLDEN / "execsys.lock.json")  # recomputes the id and refuses a mismatch
    assert identity.id == GOLDEN_ID, ("the identity id of a fixed system changed: canonicalisation or the id "
                                      "function moved, which orphans every lock in existence -- bump the schema")
    assert identity.schema == SCHEMA == "execsys.identity/2"
    assert identity.summary == "artifact 05bc65d33c09 pytorch; llama.cpp b4567; gpu-box-01 1x NVIDIA H200"


def test_the_canonical_spelling_of_the_golden_components() -> None:
    components = json.loads((GOLDEN / "execsys.lock.json").read_text(encoding="utf-8"))["components"]
    spelling = canonical_json(components)
    assert spelling.startswith(SPELLING_STARTS.encode())
    assert b"\n" not in spelling and b", " not in spelling and b'": ' not in spelling
    assert "Réponds brièvement".encode() in spelling  # UTF-8 as is, not \u escapes
    assert list(json.loads(spelling)) == sorted(COMPONENTS)


@pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum is installed by scripts/test.sh")
def test_the_golden_id_is_b3sum_of_the_canonical_components() -> None:
    """Checked with another BLAKE3 implementation, so the id is not only the code agreeing with itself."""
    components = json.loads((GOLDEN / "execsys.lock.json").read_text(encoding="utf-8"))["components"]
    done = subprocess.run(["b3sum", "--no-names"], input=canonical_json(components), capture_output=True,
                          timeout=30, check=True)
    assert done.stdout.decode().strip() == GOLDEN_ID
    artifact = subprocess.run(["b3sum", "--no-names", str(GOLDEN / "model.bin")], capture_output=True,
                              timeout=30, check=True)
    assert artifact.stdout.decode().strip() == ARTIFACT_DIGEST


def test_pinning_the_golden_declaration_records_the_golden_declared_half() -> None:
    """What `execsys pin` records of the fixed declaration today is what the golden lock holds: the
    declared half (secrets redacted the same way) and the artifact observed from its bytes."""
    golden = load_lock(GOLDEN / "execsys.lock.json")
    pinned = pin(declaration.load(GOLDEN / "execsys.toml"), require_endpoint=False)
    for name in COMPONENTS:
        assert pinned.declared(name) == golden.declared(name), name
    runtime = pinned.declared("runtime")
    assert runtime["endpoint"] == "http://evaluser:<redacted>@127.0.0.1:8000/v1"
    assert runtime["flags"][3] == "<redacted>"
    assert pinned.declared("environment")["variables"]["HF_TOKEN"] == "<redacted>"
    observed, recorded = pinned.observed("artifact"), golden.observed("artifact")
    assert observed["path"] == str((GOLDEN / "model.bin").resolve())
    assert {k: v for k, v in observed.items() if k != "path"} == {k: v for k, v in recorded.items() if k != "path"}
    assert observed["digest"] == ARTIFACT_DIGEST and observed["size_bytes"] == 64


def test_one_changed_fact_is_another_identity(tmp_path: Path) -> None:
    data = json.loads((GOLDEN / "execsys.lock.json").read_text(encoding="utf-8"))
    data["components"]["budget"]["declared"]["seed"] = 1235
    edited = tmp_path / "edited.lock.json"
    edited.write_text(json.dumps(data), encoding="utf-8")
    from execsys.errors import InputError

    with pytest.raises(InputError, match="the id does not match"):
        load_lock(edited)
