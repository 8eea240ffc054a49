"""One node's side of the fleet, in process: what ``execsys_facts`` returns where execsys is installed
(:func:`execsys.fleet.host_facts`) and the programs the controller ships to a node with python3 alone
(:func:`execsys.fleet.shipped_programs`).

Real declarations and artifacts in a temp directory, the real doctor (as an npd node check) and the
real pin: the expected values are computed by the public functions the facts are built from (the pin's
identity, the component digests, BLAKE3 of the artifact's bytes), so a fact assembled from the wrong
piece fails. Test names avoid the words the mutation script's -k filter leaves out (see
scripts/mutation.sh)."""

from __future__ import annotations

import ast
import base64
import json
import socket
import subprocess
import sys
import zlib
from pathlib import Path

import blake3
import pytest
from execsys.doctor.node_checks.check import fit_line
from execsys.doctor.registry import IDS

from execsys import COMPONENTS, declaration
from execsys.errors import InputError
from execsys.fleet import (
    ShippedPrograms,
    _Reader,
    component_digests,
    component_label,
    fleet_digest,
    host_facts,
    shipped_host_facts,
    shipped_programs,
)
from execsys.identity import pin

WEIGHTS = b"weights"
DECLARED = "d" * 64


def _no_path(tmp_path: Path) -> str:
    """An env file without PATH: the node check cannot check (and runs no doctor), in milliseconds."""
    env = tmp_path / "no-path.env"
    env.write_text("HOME=/root\n")
    return str(env)


def _project(tmp_path: Path, extra: str = "", artifact: str = "model.bin") -> Path:
    (tmp_path / "model.bin").write_bytes(WEIGHTS)
    config = tmp_path / "execsys.toml"
    config.write_text(f'[artifact]\npath = "{artifact}"\n' + extra)
    return config


# -- host_facts: execsys installed on the node --------------------------------------------------------

def test_installed_facts_carry_the_pinned_identity_and_the_artifact_s_bytes(tmp_path: Path) -> None:
    config = _project(tmp_path, f'digest = "{DECLARED}"\n\n[environment.variables]\nEXECSYS_FACTS_CASE = "1"\n')
    facts = host_facts(str(config), path="/usr/bin:/bin")
    identity = pin(declaration.load(config))
    digests = component_digests(identity.components)
    assert facts["schema"] == "execsys.facts/1" and facts["host"] == socket.gethostname()
    assert facts["identity"] == {
        "id": identity.id, "fleet_digest": fleet_digest(digests), "components": digests,
        "labels": {n: component_label(n, identity.components[n]) for n in COMPONENTS}}
    assert facts["identity"]["labels"]["artifact"] == blake3.blake3(WEIGHTS).hexdigest()[:19]
    assert facts["artifact"] == {"path": str(tmp_path / "model.bin"), "blake3": blake3.blake3(WEIGHTS).hexdigest(),
                                 "declared": DECLARED}
    assert "error" not in facts
    doctor = facts["doctor"]
    assert set(doctor) == {"verdict", "hazards", "line", "environment"}
    assert set(doctor["hazards"]) == set(IDS)
    statuses = doctor["hazards"]
    assert set(statuses.values()) <= {"ok", "skip", "warn", "fail", "error"}
    blocked = [h for h in IDS if statuses[h] in ("fail", "error")]
    assert doctor["verdict"] == ("hazards" if blocked else "clean")
    # an npd node check: its line is the worst finding (a failure before an error), else all clear
    failed = [h for h in IDS if statuses[h] == "fail"]
    errored = [h for h in IDS if statuses[h] == "error"]
    if failed:
        assert doctor["line"].startswith(f"fail {failed[0]}: ")
    elif errored:
        assert doctor["line"].startswith(f"unknown {errored[0]}: ")
    else:
        assert doctor["line"].startswith(f"ok: {len(IDS)} hazards clear on ")
    # the declaration's variables are inspected (the node check is given the declaration)
    assert doctor["environment"] == {
        "source": "the declaration's [environment] variables over this process's environment",
        "path_source": "--path", "path": "/usr/bin:/bin"}
    # and the fleet reads them back as one record of both kinds
    [record] = _Reader().records({"ansible_facts": {"execsys": facts}}, "node-a", "facts.json")
    assert (record.identity, record.fleet_digest, record.digest, record.declared_digest, record.problem) == (
        identity.id, fleet_digest(digests), blake3.blake3(WEIGHTS).hexdigest(), DECLARED, None)
    assert record.hazards == doctor["hazards"]


def test_installed_facts_without_a_declared_digest_declare_none(tmp_path: Path) -> None:
    facts = host_facts(str(_project(tmp_path)), env_from=_no_path(tmp_path))
    assert facts["artifact"]["declared"] is None
    assert facts["artifact"]["blake3"] == blake3.blake3(WEIGHTS).hexdigest()


def test_an_environment_without_path_is_a_node_check_that_could_not_check(tmp_path: Path) -> None:
    env = _no_path(tmp_path)
    facts = host_facts(str(_project(tmp_path)), env_from=env)
    doctor = facts["doctor"]
    assert (doctor["verdict"], doctor["hazards"], doctor["environment"]) == ("unknown", {}, {})
    # the line npd shows, cut to its 80 bytes as every node-check line is
    assert doctor["line"] == fit_line(f"unknown: PATH is empty in --env-from {env}; give --path or --env-from")
    assert len(doctor["line"].encode()) <= 80
    assert facts["identity"] is not None  # the pin is its own question


def test_the_environment_comes_from_env_from_and_path_overrides_it(tmp_path: Path) -> None:
    env = tmp_path / "serving.env"
    env.write_text("PATH=/opt/engine/bin:/usr/bin\nHOME=/root\n")
    config = str(_project(tmp_path))
    facts = host_facts(config, env_from=str(env))
    assert facts["doctor"]["environment"] == {"source": f"--env-from {env}", "path_source": f"--env-from {env}",
                                              "path": "/opt/engine/bin:/usr/bin"}
    # --path over the file's PATH: both given, both used
    both = host_facts(config, path="/usr/local/bin:/usr/bin", env_from=str(env))
    assert both["doctor"]["environment"] == {"source": f"--env-from {env}", "path_source": "--path",
                                             "path": "/usr/local/bin:/usr/bin"}


def test_a_declaration_that_cannot_be_pinned_is_the_facts_error(tmp_path: Path) -> None:
    config = _project(tmp_path, f'digest = "{DECLARED}"\n', artifact="missing.bin")
    facts = host_facts(str(config), env_from=_no_path(tmp_path))
    assert facts["identity"] is None
    assert facts["artifact"] == {"path": "missing.bin", "blake3": None, "declared": DECLARED}
    assert facts["error"].startswith("cannot pin: ")
    assert "missing.bin" in facts["error"]
    assert facts["doctor"]["verdict"] == "unknown"  # the doctor's answer is kept beside the error
    [record] = _Reader().records({"ansible_facts": {"execsys": facts}}, "node-b", "facts.json")
    assert record.problem == facts["error"] and record.fleet_digest is None and record.digest is None


def test_installed_facts_are_redacted(tmp_path: Path) -> None:
    secret = "hf_" + "Q" * 34
    facts = host_facts(str(_project(tmp_path, artifact=f"{secret}/missing.bin")),
                       env_from=_no_path(tmp_path))
    text = json.dumps(facts)
    assert secret not in text
    assert "<redacted>" in facts["artifact"]["path"] and "<redacted>" in facts["error"]


def test_a_missing_declaration_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        host_facts(str(tmp_path / "nowhere.toml"), env_from=_no_path(tmp_path))


# -- shipped_programs: a node with python3 and no execsys --------------------------------------------

def _doctor_payload(line: str) -> dict:
    """The options payload inside the shipped one-line doctor program (``agent.main(json.loads(...))``)."""
    packed = line.split("b64decode('", 1)[1].split("')", 1)[0]
    code = zlib.decompress(base64.b64decode(packed)).decode("utf-8")
    for node in ast.walk(ast.parse(code)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "main"
                and node.args and isinstance(node.args[0], ast.Call)):
            return json.loads(ast.literal_eval(node.args[0].args[0]))
    raise AssertionError("no agent.main(json.loads(...)) in the shipped doctor")


def _digest_payload(program: str) -> dict:
    prelude = "\n".join(program.splitlines()[:2])
    scope: dict = {}
    exec(prelude, scope)  # the two lines the controller put in front of the digest program
    return scope["PAYLOAD"]


def test_shipped_programs_for_a_declaration_read_on_the_node(tmp_path: Path) -> None:
    config = _project(tmp_path, f'digest = "{DECLARED}"\n')
    programs = shipped_programs(config.read_text(), str(config))
    artifact = str(tmp_path / "model.bin")
    assert (programs.artifact_path, programs.declared_digest) == (artifact, DECLARED)
    assert programs.doctor.startswith("import base64,zlib;exec(") and programs.doctor.endswith("\n")
    assert programs.digest is not None
    assert _digest_payload(programs.digest) == {"path": artifact, "timeout": 120.0}
    # the digest program, run by a bare python3, prints the artifact's BLAKE3
    done = subprocess.run([sys.executable, "-I", "-c", programs.digest], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    said = [line for line in done.stdout.splitlines() if line.startswith("EXECSYS-DIGEST ")]
    assert said, done.stdout + done.stderr
    assert json.loads(said[-1].split(" ", 1)[1])["digest"] == blake3.blake3(WEIGHTS).hexdigest()


def test_shipped_programs_take_the_timeout_given(tmp_path: Path) -> None:
    config = _project(tmp_path)
    programs = shipped_programs(config.read_text(), str(config), timeout=7.5)
    assert _digest_payload(programs.digest or "") == {"path": str(tmp_path / "model.bin"), "timeout": 7.5}
    assert programs.declared_digest is None


def test_a_relative_artifact_resolves_beside_the_declaration_as_the_node_sees_it(tmp_path: Path) -> None:
    text = '[artifact]\npath = "weights/model.gguf"\n'
    programs = shipped_programs(text, "/srv/llm/execsys.toml")
    assert programs.artifact_path == "/srv/llm/weights/model.gguf"
    assert _digest_payload(programs.digest or "")["path"] == "/srv/llm/weights/model.gguf"
    beside_cwd = shipped_programs(text)
    assert beside_cwd.artifact_path == "weights/model.gguf"


def test_an_artifact_behind_a_url_gets_no_digest_program() -> None:
    programs = shipped_programs('[artifact]\npath = "hf://org/model"\n', "/srv/execsys.toml")
    assert (programs.digest, programs.artifact_path) == (None, "hf://org/model")


def test_no_declaration_ships_the_doctor_alone() -> None:
    programs = shipped_programs()
    assert (programs.digest, programs.artifact_path, programs.declared_digest) == (None, None, None)
    assert programs.doctor.startswith("import base64,zlib;exec(")


def test_the_shipped_doctor_inspects_the_node_itself(tmp_path: Path) -> None:
    text = '[artifact]\npath = "model.bin"\n\n[doctor]\nhosts = ["gpu-7", "gpu-8"]\n'
    payload = _doctor_payload(shipped_programs(text, "/srv/execsys.toml").doctor)
    assert payload["hosts"] == [] and payload["artifact_path"] == "/srv/model.bin"


def test_a_malformed_declaration_is_refused_by_shipped_programs() -> None:
    with pytest.raises(InputError):
        shipped_programs("[artifact\npath = 1", "/srv/execsys.toml")


# -- shipped_host_facts: what the shipped doctor printed --------------------------------------------

def _results(**statuses: str) -> list[dict]:
    return [{"id": h, "status": statuses.get(h, "ok"), "summary": f"{h} summary", "evidence": [], "fix": ""}
            for h in IDS]


def _shipped(path: str | None = "/srv/m") -> ShippedPrograms:
    return ShippedPrograms(doctor="print(1)", digest=None, artifact_path=path, declared_digest=None)


def test_a_warning_is_not_a_failure_in_the_shipped_line() -> None:
    shipped = {"host": {"hostname": "bare-2"}, "results": _results(**{IDS[1]: "warn"}), "finished": True}
    facts = shipped_host_facts(shipped, _shipped())
    assert facts["doctor"]["verdict"] == "clean"
    assert facts["doctor"]["line"] == f"ok: {len(IDS)} hazards clear on bare-2 (1 warn)"
    assert facts["doctor"]["hazards"][IDS[1]] == "warn"


def test_a_doctor_stopped_after_every_result_is_still_unknown() -> None:
    shipped = {"host": {"hostname": "bare-3"}, "results": _results(), "finished": False,
               "reason": "killed after 60 s"}
    facts = shipped_host_facts(shipped, _shipped())
    assert set(facts["doctor"]["hazards"].values()) == {"ok"}
    assert (facts["doctor"]["verdict"], facts["doctor"]["line"]) == ("hazards", "unknown: killed after 60 s")


def test_an_environment_label_without_python_falls_back_to_the_declared_values() -> None:
    assert component_label("environment", {"observed": {}, "declared": {"variables": "x"}}) == "variables=x"
    assert component_label("runtime", {"observed": {"python": {"version": "3.12"}}}) == ""
