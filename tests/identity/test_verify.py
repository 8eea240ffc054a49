"""pin / verify / diff in-process (execsys/identity.py): the verdicts, sentences and changes a user reads.

Written for mutants that survived scripts/mutation.sh (the CLI tests run `execsys pin|verify|diff` in
subprocesses, where a mutant cannot be seen). A real declaration and artifact in tmp_path, a real lock
file; the artifact digests are b3sum's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.errors import InputError
from execsys.identity import (
    SCHEMA,
    ArtifactHashed,
    Cancelled,
    ComponentChecked,
    ComponentObserved,
    Identity,
    describe_change,
    diff_identities,
    diff_sentence,
    field_changes,
    flatten,
    load_lock,
    observe_runtime,
    pin,
    sanitize_declared,
    verify,
    write_lock,
)
from tests.fixtures.identity_project import DECLARATION, b3sum, needs_b3sum, write_project


@pytest.fixture
def pinned(tmp_path: Path) -> tuple[Path, Identity]:
    identity = pin(declaration.load(write_project(tmp_path)), require_endpoint=False)
    lock = write_lock(identity, tmp_path / "execsys.lock.json")
    return lock, load_lock(lock)


@needs_b3sum
def test_verify_right_after_pin_is_the_same_system(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    assert identity.observed("artifact")["digest"] == b3sum(tmp_path / "model.bin")
    assert identity.declared("budget") == {"temperature": 0.0, "seed": 7}
    report = verify(identity)
    assert report.verdict == "same-system" and report.observed_id == identity.id
    assert report.sentence == f"all twelve components match identity {identity.id[:12]}"
    assert {name: check.status for name, check in report.components.items()} == dict.fromkeys(COMPONENTS, "same")
    data = report.to_json()
    assert (data["schema"], data["lock_id"], data["lock_schema"], data["verdict"]) == (
        "execsys.verify/1", identity.id, SCHEMA, "same-system")
    assert data["components"]["artifact"] == {"status": "same", "changes": [], "reason": None}
    assert (data["observed_id"], data["sentence"]) == (identity.id, report.sentence)
    # who pinned and who checks: shown by `verify`, never compared
    assert data["pinned_observer"] == identity.observer and identity.observer.get("cwd")
    assert data["observer"] == report.observer and report.observer.get("cwd")


def test_verify_tells_what_it_observes_and_stops_on_cancel(pinned: tuple[Path, Identity]) -> None:
    _, identity = pinned
    events: list = []
    verify(identity, on_event=events.append)
    assert [e.name for e in events if isinstance(e, ComponentChecked)] == list(COMPONENTS)
    assert any(isinstance(e, ArtifactHashed) for e in events)
    assert {e.name for e in events if isinstance(e, ComponentObserved)} >= {"artifact", "budget"}
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        verify(identity, cancel=cancel)


def test_an_unreachable_endpoint_makes_the_runtime_unverifiable_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    report = verify(identity)
    runtime = report.components["runtime"]
    assert runtime.status == "unverifiable" and "endpoint http://127.0.0.1:9/v1: unreachable" in (runtime.reason or "")
    assert report.sentence.startswith(f"1 unverifiable (runtime) since {identity.id[:12]} was pinned")


@needs_b3sum
def test_verify_rehashes_the_artifact_and_names_what_moved(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    old = identity.observed("artifact")["digest"]
    (tmp_path / "model.bin").write_bytes(b"weightz")  # same size, one byte moved
    report = verify(identity)
    assert report.verdict == "new-identity" and report.observed_id not in (None, identity.id)
    assert report.sentence == (f"1 changed (artifact) since {identity.id[:12]} was pinned; "
                               "re-measure before comparing results across this change")
    artifact = report.components["artifact"]
    assert artifact.status == "changed"
    assert artifact.changes == [{"field": "observed.digest", "old": old, "new": b3sum(tmp_path / "model.bin")}]
    assert [name for name, check in report.components.items() if check.status != "same"] == ["artifact"]


def test_an_edited_declaration_is_a_move_too(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 8"))
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    assert report.components["budget"].status == "changed"
    assert report.components["budget"].changes == [{"field": "declared.seed", "old": 7, "new": 8}]
    assert report.sentence.startswith(f"1 changed (budget) since {identity.id[:12]} was pinned")


def test_a_missing_artifact_is_unverifiable_not_changed(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "model.bin").unlink()
    report = verify(identity)
    assert report.verdict == "new-identity" and report.observed_id is None
    assert report.components["artifact"].status == "unverifiable"
    assert report.components["artifact"].reason
    assert report.components["budget"].status == "same"
    # the model is read from the artifact's files, so it cannot be checked either
    assert report.sentence == (f"2 unverifiable (model, artifact) since {identity.id[:12]} was pinned; "
                               "re-measure before comparing results across this change")


def test_an_older_schema_is_not_compared_at_all(pinned: tuple[Path, Identity]) -> None:
    _, identity = pinned
    old = Identity(identity.id, identity.recorded_at, identity.components, schema="execsys.identity/1",
                   observer=identity.observer)
    report = verify(old)
    assert report.verdict == "new-identity" and report.observed_id is None
    assert report.sentence == "pinned with identity schema 1; re-pin to compare under schema 2"
    assert {check.status for check in report.components.values()} == {"unverifiable"}
    assert report.components["budget"].to_json() == {"status": "unverifiable", "changes": [],
                                                     "reason": "pinned with identity schema 1"}
    data = report.to_json()
    assert (data["lock_id"], data["lock_schema"]) == (identity.id, "execsys.identity/1")
    assert data["observer"].get("cwd") and data["pinned_observer"] == identity.observer
    assert report.schema_outdated and not verify(identity).schema_outdated


def identity_with(**declared: dict) -> Identity:
    components = {name: {"declared": dict(declared.get(name, {})), "observed": {}} for name in COMPONENTS}
    return Identity(id="0" * 64, recorded_at="2026-12-01T00:00:00Z", components=components, source="lock")


def test_diff_says_what_a_comparison_isolates() -> None:
    a = identity_with(budget={"seed": 1}, artifact={"path": "m"})
    assert diff_identities(a, a).sentence == "same system: no component moved"
    one = diff_identities(a, identity_with(budget={"seed": 2}, artifact={"path": "m"}))
    assert one.moved == ["budget"] and one.sentence == "isolates budget"
    assert one.changes == {"budget": [{"field": "declared.seed", "old": 1, "new": 2}]}
    two = diff_identities(a, identity_with(budget={"seed": 2}, artifact={"path": "n"}, grader={"name": "g"}))
    assert two.moved == ["artifact", "budget", "grader"]  # in component order
    assert two.sentence == "descriptive only: 3 components moved (artifact, budget, grader)"
    data = two.to_json()
    assert data["schema"] == "execsys.diff/1" and data["moved"] == two.moved
    assert data["a"] == {"id": "0" * 64, "recorded_at": "2026-12-01T00:00:00Z", "source": "lock", "schema": SCHEMA}
    assert data["b"] == data["a"]  # identity_with gives every side the same id, time and source
    assert data["changes"] == two.changes and data["sentence"] == two.sentence
    assert two.schema_note is None
    older = identity_with(budget={"seed": 1})
    older.schema = "execsys.identity/1"
    assert diff_identities(older, a).schema_note == (
        "A was pinned with identity schema 1, B with schema 2: fields that moved may reflect the schema, "
        "not the system; re-pin both")
    assert diff_sentence(["x", "y"]) == "descriptive only: 2 components moved (x, y)"


def test_fields_are_compared_by_dotted_path() -> None:
    assert flatten({"a": {"b": 1, "c": {}}, "gpus": [{"uuid": "u0"}, {"uuid": "u1"}], "flags": ["-x", "-y"],
                    "none": []}) == {
        "a.b": 1, "a.c": {}, "gpus[0].uuid": "u0", "gpus[1].uuid": "u1", "gpus.length": 2, "flags": ["-x", "-y"],
        "none": []}
    assert flatten({}) == {} and flatten(5, "x") == {"x": 5}
    assert field_changes({"a": 1, "b": None, "gone": 3}, {"a": 2, "b": None, "new": None}) == [
        {"field": "a", "old": 1, "new": 2}, {"field": "gone", "old": 3, "new": None},
        {"field": "new", "old": None, "new": None}]
    assert field_changes({"gpus": [{"u": 1}]}, {"gpus": [{"u": 1}, {"u": 2}]}) == [
        {"field": "gpus.length", "old": 1, "new": 2}, {"field": "gpus[1].u", "old": None, "new": 2}]


def test_a_change_is_described_in_one_readable_line() -> None:
    digest_a, digest_b = "a" * 64, "b" * 64
    assert describe_change({"field": "observed.digest", "old": digest_a, "new": digest_b}) == (
        "observed.digest: aaaaaaaaaaaaaaaa… -> bbbbbbbbbbbbbbbb…")
    assert describe_change({"field": "seed", "old": 7, "new": None}) == "seed: 7 -> null"
    assert describe_change({"field": "f", "old": ["-x"], "new": "é"}) == 'f: ["-x"] -> é'
    long = "x" * 100
    assert describe_change({"field": "f", "old": long, "new": "x" * 80}) == f"f: {'x' * 77}... -> {'x' * 80}"
    assert describe_change({"field": "f", "old": "A" * 64, "new": "g" * 64}) == f"f: {'A' * 64} -> {'g' * 64}"
    assert describe_change({"field": "f", "old": "X" * 64, "new": ["é"]}) == f'f: {"X" * 64} -> ["é"]'
    assert describe_change({"field": "f", "old": "y" * 81, "new": "z" * 80}) == f"f: {'y' * 77}... -> {'z' * 80}"


def test_a_lock_that_is_not_an_identity_is_refused_naming_why(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    data = json.loads(lock.read_text())

    def problem(body: object) -> str:
        path = tmp_path / "bad.lock.json"
        path.write_text(json.dumps(body))
        with pytest.raises(InputError) as caught:
            load_lock(path)
        return str(caught.value)

    assert problem([1]) == f"{tmp_path / 'bad.lock.json'}: not an execsys identity (expected a JSON object)"
    assert "identity schema 'execsys.identity/9' is not understood" in problem({**data, "schema": "execsys.identity/9"})
    short = {**data, "components": {k: v for k, v in data["components"].items() if k != "tools"}}
    assert "'components' must hold exactly the twelve components (model, artifact, " in problem(short)
    broken = json.loads(lock.read_text())
    broken["components"]["tools"] = {"declared": {}}
    assert "component 'tools' must be" in problem(broken)
    assert "the id does not match the components" in problem({**data, "id": "f" * 64})
    assert load_lock(lock).id == identity.id
    assert identity.summary.startswith(f"artifact {identity.observed('artifact')['digest'][:12]} ")


# -- what a lock may record of a declaration: sanitize_declared -----------------------------------
# Each secret below is one that the final scrub alone would miss (a flag's next word, a lowercase
# variable name, a `pass=` query, user:token in a repo URL), so only the per-component rule hides it.


def test_the_runtime_table_loses_its_credentials_and_keeps_the_rest() -> None:
    table = {"engine": "vllm", "endpoint": "http://eval:hunter2@127.0.0.1:8000/v1?pass=opensesame&x=a",
             "flags": ["--api-key", "plainvalue", "--ctx-size", 8192],
             "restart": "restart-engine --api-key plainvalue --now", "ready": "curl http://u:pw@h/health"}
    assert sanitize_declared("runtime", table) == {
        "engine": "vllm", "endpoint": "http://eval:<redacted>@127.0.0.1:8000/v1?pass=<redacted>&x=a",
        "flags": ["--api-key", "<redacted>", "--ctx-size", "8192"],
        "restart": "restart-engine --api-key <redacted> --now", "ready": "curl http://u:<redacted>@h/health"}
    assert table["flags"][1] == "plainvalue"  # the declaration itself is left as it was
    # the same keys in another table are that table's own words, not the runtime's flags
    assert sanitize_declared("workflow", {"flags": ["--api-key", "plainvalue"], "endpoint": "http://h/v1?pass=x"}) == {
        "flags": ["--api-key", "plainvalue"], "endpoint": "http://h/v1?pass=x"}


def test_environment_variables_are_redacted_by_name_and_recorded_as_text() -> None:
    assert sanitize_declared("environment", {"variables": {"my_token": "abc", "OMP_NUM_THREADS": 8},
                                             "source_modules": ["m"]}) == {
        "variables": {"my_token": "<redacted>", "OMP_NUM_THREADS": "8"}, "source_modules": ["m"]}
    assert sanitize_declared("workflow", {"variables": {"my_token": "abc", "n": 8}}) == {
        "variables": {"my_token": "abc", "n": 8}}


def test_the_harness_repo_and_commands_lose_their_credentials() -> None:
    table = {"name": "lm-eval", "repo": "https://ci:ghtoken123@git.example.com/evals.git",
             "commands": ["python eval.py --api-key plainvalue", "lm_eval --tasks gsm8k"]}
    assert sanitize_declared("harness", table) == {
        "name": "lm-eval", "repo": "https://git.example.com/evals.git",
        "commands": ["python eval.py --api-key <redacted>", "lm_eval --tasks gsm8k"]}
    assert sanitize_declared("harness", {"commands": ["lm_eval", 2]}) == {"commands": ["lm_eval", "2"]}
    assert sanitize_declared("model", {"repo": "https://ci:ghtoken123@git.example.com/m.git", "commands": [1]}) == {
        "repo": "https://ci:<redacted>@git.example.com/m.git", "commands": [1]}


def test_the_grader_command_and_judge_endpoint_lose_their_credentials() -> None:
    table = {"name": "judge", "command": "python grade.py --api-key plainvalue",
             "judge": {"endpoint": "http://127.0.0.1:9/v1?pass=opensesame", "model": "m"}}
    assert sanitize_declared("grader", table) == {
        "name": "judge", "command": "python grade.py --api-key <redacted>",
        "judge": {"endpoint": "http://127.0.0.1:9/v1?pass=<redacted>", "model": "m"}}
    assert sanitize_declared("grader", {"name": "exact-match"}) == {"name": "exact-match"}
    assert sanitize_declared("grader", {"judge": {"model": "m"}}) == {"judge": {"model": "m"}}


def test_each_mcp_server_loses_its_credentials() -> None:
    table = {"enabled": ["search"], "mcp": [
        {"name": "web", "url": "http://127.0.0.1:9/mcp?pass=opensesame"},
        {"name": "local", "command": ["server", "--api-key", "plainvalue", 3]},
        "not a table"]}
    assert sanitize_declared("tools", table) == {"enabled": ["search"], "mcp": [
        {"name": "web", "url": "http://127.0.0.1:9/mcp?pass=<redacted>"},
        {"name": "local", "command": ["server", "--api-key", "<redacted>", "3"]},
        "not a table"]}
    assert table["mcp"][1]["command"][2] == "plainvalue"
    assert sanitize_declared("workflow", {"mcp": [{"url": "http://h/mcp?pass=x"}]}) == {
        "mcp": [{"url": "http://h/mcp?pass=x"}]}


# -- the engine's version where it runs, not in execsys's own interpreter ---------------------------

NOT_INSTALLED = ("not installed in the serving process's or the harness's interpreter "
                 "(or neither is visible from here)")


def test_a_python_engine_seen_nowhere_it_runs_has_no_version() -> None:
    """llama-cpp-python is installed in execsys's own interpreter here, which is the observer's, not the
    system's: without a serving process or a harness interpreter its version is unknown."""
    from importlib import metadata

    assert metadata.version("llama_cpp_python")  # installed beside execsys, where it must not count
    assert observe_runtime({"engine": "llama_cpp"}, require_endpoint=False)["engine"] == {
        "name": "llama-cpp-python", "version": None, "source": NOT_INSTALLED}
    assert observe_runtime({"engine": "Made-Up-Engine"}, require_endpoint=False)["engine"] == {
        "name": "made-up-engine", "version": None, "source": NOT_INSTALLED}
    assert observe_runtime({}, require_endpoint=False)["engine"] == {"name": None, "version": None, "source": None}


def _stub(bin_dir: Path, name: str, output: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(0o755)
    return path


def test_a_binary_engine_keeps_what_its_binary_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert observe_runtime({"engine": "llama.cpp"}, require_endpoint=False)["engine"] == {
        "name": "llama.cpp", "version": None,
        "source": "not found installed here (no package metadata, no binary on PATH)"}
    # lmdeploy ships a package and a binary: found as a binary, its --version answer stands
    stub = _stub(tmp_path / "bin", "lmdeploy", "lmdeploy 0.6.1")
    monkeypatch.setenv("PATH", str(stub.parent))
    assert observe_runtime({"engine": "lmdeploy"}, require_endpoint=False)["engine"] == {
        "name": "lmdeploy", "version": "0.6.1", "source": "lmdeploy --version", "binary": str(stub)}


@pytest.fixture
def serving_python() -> Iterator[str]:
    """A real Python process, found by the marker in its argv as a serving process is ([runtime] process)."""
    marker = f"execsys-serving-{uuid.uuid4().hex}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        yield marker
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_python_engine_is_read_from_the_serving_process_interpreter(serving_python: str) -> None:
    from importlib import metadata

    engine = observe_runtime({"engine": "llama-cpp-python", "process": serving_python},
                             require_endpoint=False)["engine"]
    assert engine == {"name": "llama-cpp-python", "version": metadata.version("llama_cpp_python"),
                      "source": "package metadata (llama_cpp_python)",
                      "interpreter": os.path.realpath(sys.executable), "found_in": "the serving process's interpreter"}


def test_a_python_engine_is_read_from_the_harness_interpreter(tmp_path: Path) -> None:
    """An in-process engine: the harness's Python (a non-Python command before it is passed over)."""
    from importlib import metadata

    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[runtime]\nengine = "llama-cpp-python"\n'
                                           f'[harness]\ncommands = ["true", "{sys.executable} -c pass"]\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    assert identity.observed("runtime")["engine"] == {
        "name": "llama-cpp-python", "version": metadata.version("llama_cpp_python"),
        "source": "package metadata (llama_cpp_python)", "interpreter": os.path.realpath(sys.executable),
        "found_in": "the harness's interpreter"}


# -- the lock file ----------------------------------------------------------------------------------


def test_the_lock_file_holds_every_documented_field(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    data = json.loads(lock.read_text())
    assert data == {"schema": SCHEMA, "id": identity.id, "recorded_at": identity.recorded_at,
                    "summary": identity.summary, "declaration": identity.declaration,
                    "components": identity.components, "notes": identity.notes, "observer": identity.observer,
                    "live": identity.live}
    assert data["recorded_at"].startswith("20") and data["summary"].startswith("artifact ")
    assert data["declaration"] == {"path": str(tmp_path / "execsys.toml"), "base_dir": str(tmp_path)}
    with pytest.raises(InputError) as caught:
        write_lock(identity, tmp_path)
    assert str(caught.value) == (f"{tmp_path}: is a directory, not a regular file: refusing to replace it "
                                 "(cannot write the lock there)")


# -- a system that declares more than the artifact --------------------------------------------------

RICH = """\
[artifact]
path = "model"

[context_policy]
template = "template.jinja"

[retrieval]
index = "index.bin"
corpus = "corpus"

[grader]
name = "judge"

[grader.judge]
endpoint = "http://127.0.0.1:9/v1"
model = "j"

[budget]
seed = 7
"""
JUDGE_DOWN = ("judge: endpoint http://127.0.0.1:9/v1: unreachable (ConnectError: [Errno 111] Connection refused); "
              "start the server or fix [runtime] endpoint")


def _llama_model_dir(tmp_path: Path) -> Path:
    """A Hugging Face model directory as pin reads it: config, tokenizer template, weights."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                   "torch_dtype": "bfloat16"}))
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    (model / "model.safetensors").write_bytes(b"w" * 10)
    return model


@pytest.fixture
def rich(tmp_path: Path) -> Path:
    _llama_model_dir(tmp_path)
    (tmp_path / "template.jinja").write_text("{{ messages }}\n")
    (tmp_path / "index.bin").write_bytes(b"index")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("a")
    (tmp_path / "corpus" / "b.txt").write_text("b")
    (tmp_path / "execsys.toml").write_text(RICH)
    return tmp_path


@needs_b3sum
def test_every_declared_component_is_observed_and_announced_in_order(rich: Path) -> None:
    import socket

    events: list = []
    identity = pin(declaration.load(rich / "execsys.toml"), require_endpoint=False, on_event=events.append)
    observed = [(e.name, e.index, e.total) for e in events if isinstance(e, ComponentObserved)]
    order = ["runtime", "artifact", "model", "hardware", "harness", "environment", "grader", "tools", "workflow",
             "context_policy", "retrieval", "budget"]
    assert observed == [(name, index, 12) for index, name in enumerate(order, 1)]
    assert identity.observed("model") == {"from_files": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                         "dtype": "bfloat16"}}
    assert identity.observed("artifact")["kind"] == "tree" and identity.observed("artifact")["files"] == 3
    assert identity.observed("runtime") == {"engine": {"name": None, "version": None, "source": None}}
    assert identity.observed("hardware")["hostname"] == socket.gethostname()
    assert identity.observed("harness") == {"git": None, "note": f"{rich} is not inside a git repository"}
    assert identity.observed("environment")["variables"] == {}
    template = b3sum(rich / "template.jinja")
    done = subprocess.run(["b3sum", "--no-names"], input=b"{{ messages }}", capture_output=True, timeout=30,
                          check=True)
    assert identity.observed("context_policy") == {
        "template": {"path": str(rich / "template.jinja"), "kind": "file", "digest": template, "files": 1},
        "applied_template": {"source": "tokenizer_config.json chat_template",
                             "digest": done.stdout.decode().strip(), "matches_declared": True}}
    retrieval = identity.observed("retrieval")
    assert retrieval["index"] == {"path": str(rich / "index.bin"), "kind": "file", "digest": b3sum(rich / "index.bin"),
                                  "files": 1}
    assert (retrieval["corpus"]["path"], retrieval["corpus"]["kind"], retrieval["corpus"]["files"]) == (
        str(rich / "corpus"), "tree", 2)
    assert identity.observed("grader") == {"judge": {"endpoint": {"url": "http://127.0.0.1:9/v1",
                                                                  "error": JUDGE_DOWN.removeprefix("judge: ")}}}
    assert {name: identity.observed(name) for name in ("tools", "workflow", "budget")} == {
        "tools": {}, "workflow": {}, "budget": {}}


def test_a_judge_that_does_not_answer_leaves_the_grader_unverifiable_and_keeps_declared_moves(rich: Path) -> None:
    identity = pin(declaration.load(rich / "execsys.toml"), require_endpoint=False)
    (rich / "index.bin").unlink()
    (rich / "execsys.toml").write_text(RICH.replace('name = "judge"', 'name = "judge-2"'))
    report = verify(identity, declaration=declaration.load(rich / "execsys.toml"))
    grader = report.components["grader"]
    assert (grader.status, grader.reason) == ("unverifiable", JUDGE_DOWN)
    assert grader.changes == [{"field": "declared.name", "old": "judge", "new": "judge-2"}]
    retrieval = report.components["retrieval"]
    assert retrieval.status == "changed" and retrieval.reason is None
    assert retrieval.changes == [
        {"field": "observed.index.digest", "old": b3sum_text(b"index"), "new": None},
        {"field": "observed.index.files", "old": 1, "new": None},
        {"field": "observed.index.kind", "old": "file", "new": None},
        {"field": "observed.index.note", "old": None, "new": "not found on this machine"}]
    assert report.observed_id is None
    assert report.sentence == (f"1 changed (retrieval); 1 unverifiable (grader) since {identity.id[:12]} was pinned; "
                               "re-measure before comparing results across this change")
    assert [name for name, check in report.components.items() if check.status == "same"] == [
        name for name in COMPONENTS if name not in ("retrieval", "grader")]


def b3sum_text(data: bytes) -> str:
    done = subprocess.run(["b3sum", "--no-names"], input=data, capture_output=True, timeout=30, check=True)
    return done.stdout.decode().strip()


def test_a_declared_grader_or_tools_move_is_named(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[grader]\nname = "fuzzy"\n[tools]\nenabled = ["search"]\n')
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    assert report.components["grader"].to_json() == {
        "status": "changed", "changes": [{"field": "declared.name", "old": None, "new": "fuzzy"}],
        "reason": "declared name None → fuzzy"}
    assert report.components["tools"].to_json() == {
        "status": "changed", "changes": [{"field": "declared.enabled", "old": None, "new": ["search"]}], "reason": None}
    assert report.sentence.startswith("2 changed (tools, grader) since ")


@needs_b3sum
def test_the_current_declaration_is_compared_as_pin_records_it(tmp_path: Path) -> None:
    """The pinned declared half is redacted; the current declaration is compared after the same redaction,
    and its observed changes are kept beside the declared ones."""
    (tmp_path / "model.bin").write_bytes(b"weights")
    text = DECLARATION + '[runtime]\nflags = ["--api-key", "plainvalue"]\n'
    (tmp_path / "execsys.toml").write_text(text)
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    assert identity.declared("runtime") == {"flags": ["--api-key", "<redacted>"]}
    (tmp_path / "model.bin").write_bytes(b"weightz")
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    assert report.components["runtime"].status == "same"
    assert report.components["artifact"].changes == [
        {"field": "observed.digest", "old": identity.observed("artifact")["digest"], "new": b3sum(tmp_path / "model.bin")}]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True, timeout=30)


def test_the_lock_being_checked_is_not_an_edit_of_the_harness(tmp_path: Path) -> None:
    """The lock lives in the harness's repository: rewriting it is not a dirty working tree."""
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION)
    (tmp_path / "execsys.lock.json").write_text("{}\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "eval")
    lock = tmp_path / "execsys.lock.json"
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False, exclude=[lock])
    assert identity.observed("harness")["dirty"] is False
    loaded = load_lock(write_lock(identity, lock))
    report = verify(loaded)
    assert report.components["harness"].status == "same", report.components["harness"].changes
    assert report.verdict == "same-system"


# -- what pin says about the system beside the id ---------------------------------------------------


def test_pin_notes_every_declared_fact_this_machine_contradicts(tmp_path: Path) -> None:
    import socket

    _llama_model_dir(tmp_path)
    (tmp_path / "template.jinja").write_text("{{ other }}\n")
    mute = _stub(tmp_path / "bin", "python3", "")
    mute.write_text("#!/bin/sh\nexit 3\n")
    (tmp_path / "execsys.toml").write_text(
        '[artifact]\npath = "model"\nquantization = "awq"\nbogus = 1\n'
        '[context_policy]\ntemplate = "template.jinja"\n'
        '[hardware]\nhost = "gpu-box-01"\ngpu = "H200"\ngpu_count = 2\n'
        f'[harness]\ncommands = ["no-such-program-xyz --run", "{mute} -c pass"]\n'
        '[environment]\nvariables = { EXECSYS_TEST_NEVER_SET = "1", EXECSYS_TEST_NEVER_SET_2 = "1" }\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    hardware = identity.observed("hardware")
    gpus = [gpu.get("name") or "" for gpu in hardware.get("gpus") or []]
    assert socket.gethostname() != "gpu-box-01"
    expected = [
        f"{tmp_path / 'execsys.toml'}:4: unknown key 'artifact.bogus' (ignored)",
        "declared quantization 'awq' but the files say 'none (bfloat16)' (config.json (no quantization_config))",
        "declared environment variables that do not hold here: EXECSYS_TEST_NEVER_SET, EXECSYS_TEST_NEVER_SET_2",
        "harness command 'no-such-program-xyz --run': not found (on PATH, or relative to the declaration)",
        "the chat template the engine applies (tokenizer_config.json chat_template) is not the declared "
        "[context_policy] template: a flip no decoding margin explains may be this",
        f"declared host 'gpu-box-01' but this is {socket.gethostname()!r}",
    ]
    if not any("h200" in name.lower() for name in gpus):
        expected.append(f"declared GPU 'H200' but this host has {', '.join(gpus) or 'no NVIDIA GPU'}")
    if len(gpus) != 2:
        expected.append(f"declared 2 GPU(s) but this host has {len(gpus)}")
    if hardware.get("gpu_note"):
        expected.append(f"hardware: {hardware['gpu_note']}")
    interpreter_note = [n for n in identity.notes if n.startswith(f"harness command '{mute} -c pass': ")]
    assert len(interpreter_note) == 1 and interpreter_note[0].startswith(
        f"harness command '{mute} -c pass': its interpreter did not describe itself (")
    assert [n for n in identity.notes if n not in interpreter_note] == expected
    assert identity.notes.index(interpreter_note[0]) == 4  # in the order of the harness's commands


def test_a_system_that_matches_its_declaration_has_no_notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16"}))
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    (model / "model.safetensors").write_bytes(b"w" * 10)
    (tmp_path / "template.jinja").write_text("{{ messages }}\n")
    monkeypatch.setenv("EXECSYS_TEST_ALWAYS_SET", "1")
    (tmp_path / "execsys.toml").write_text(
        '[artifact]\npath = "model"\nquantization = "none"\n[context_policy]\ntemplate = "template.jinja"\n'
        '[environment]\nvariables = { EXECSYS_TEST_ALWAYS_SET = "1" }\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    gpu_note = identity.observed("hardware").get("gpu_note")
    assert identity.notes == ([f"hardware: {gpu_note}"] if gpu_note else [])


# -- a lock whose id was recomputed over wrongly typed fields ----------------------------------------


def _relocked(tmp_path: Path, edit) -> str:
    from execsys.canonical import content_id

    data = json.loads((Path(__file__).parent / "data" / "golden" / "execsys.lock.json").read_text(encoding="utf-8"))
    edit(data)
    data["id"] = content_id(data["components"])
    path = tmp_path / "edited.lock.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        load_lock(path)
    return str(caught.value).removeprefix(f"{path}: ")


def test_a_lock_with_wrongly_typed_fields_is_refused_naming_the_field(tmp_path: Path) -> None:
    def declared_seed(data: dict) -> None:
        data["components"]["budget"]["declared"]["seed"] = "seven"

    def size(value: object):
        return lambda data: data["components"]["artifact"]["observed"].__setitem__("size_bytes", value)

    def top(key: str, value: object):
        return lambda data: data.__setitem__(key, value)

    def declaration_field(key: str, value: object):
        return lambda data: data["declaration"].__setitem__(key, value)

    assert _relocked(tmp_path, declared_seed) == "components.budget.declared.seed must be an integer, not str"
    assert _relocked(tmp_path, size("64")) == "components.artifact.observed.size_bytes must be a int, not str"
    assert _relocked(tmp_path, size(True)) == "components.artifact.observed.size_bytes must be a int, not bool"
    assert _relocked(tmp_path, lambda d: d["components"]["hardware"]["observed"].__setitem__("gpus", {})) == (
        "components.hardware.observed.gpus must be a list, not dict")
    assert _relocked(tmp_path, top("notes", "x")) == "'notes' must be a list, not str"
    assert _relocked(tmp_path, top("observer", [])) == "'observer' must be a dict, not list"
    assert _relocked(tmp_path, top("recorded_at", 5)) == "'recorded_at' must be a str, not int"
    assert _relocked(tmp_path, top("declaration", "x")) == "'declaration' must be a dict, not str"
    assert _relocked(tmp_path, declaration_field("path", 5)) == "declaration.path must be a string, not int"
    assert _relocked(tmp_path, declaration_field("base_dir", [])) == "declaration.base_dir must be a string, not list"


def test_a_lock_reads_back_what_was_written(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    loaded = load_lock(lock)
    assert (loaded.id, loaded.recorded_at, loaded.schema, loaded.source) == (
        identity.id, identity.recorded_at, SCHEMA, str(lock))
    assert (loaded.components, loaded.declaration, loaded.notes, loaded.observer, loaded.live) == (
        identity.components, identity.declaration, identity.notes, identity.observer, identity.live)
    data = json.loads(lock.read_text())
    for key in ("recorded_at", "declaration", "notes", "observer", "live"):
        del data[key]
    bare = tmp_path / "bare.lock.json"
    bare.write_text(json.dumps(data))
    loaded = load_lock(bare)
    assert (loaded.recorded_at, loaded.declaration, loaded.notes, loaded.observer, loaded.live) == ("", {}, [], {}, {})
    data["live"] = ["not", "a", "table"]
    bare.write_text(json.dumps(data))
    assert load_lock(bare).live == {}


# -- the pin and verify operations, and finding an identity by reference -----------------------------


def test_run_pin_records_in_the_ledger_then_writes_the_lock_beside_the_declaration(tmp_path: Path) -> None:
    from execsys.identity import IdentityRecorded, PinOptions, run_pin
    from execsys.ledger import Ledger

    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION)
    ledger_path = tmp_path / "ledger.db"
    options = PinOptions.from_sources(declaration.load(tmp_path / "execsys.toml"), ledger=ledger_path)
    assert (options.lock_path, options.ledger_path, options.record, options.require_endpoint, options.previous) == (
        tmp_path / "execsys.lock.json", ledger_path, True, True, None)
    events: list = []
    report = run_pin(options, on_event=events.append)
    lock = tmp_path / "execsys.lock.json"
    assert report.lock_path == lock and report.diff is None and report.to_json() == report.identity.to_json()
    assert load_lock(lock).id == report.identity.id
    assert [e for e in events if isinstance(e, IdentityRecorded)] == [
        IdentityRecorded(report.identity.id, str(report.record_id), str(lock))]
    assert [e.name for e in events if isinstance(e, ComponentObserved)][0] == "runtime"
    with Ledger.open(ledger_path) as ledger:
        record = ledger.get(str(report.record_id))
        assert (record.kind, record.identity, record.body["id"]) == ("identity", report.identity.id, report.identity.id)
    # the lock is left out of the harness's own observation, and a re-pin says what moved
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 8"))
    again = run_pin(PinOptions.from_sources(declaration.load(tmp_path / "execsys.toml"), load_lock(lock),
                                            ledger=ledger_path))
    assert again.diff is not None and again.diff.moved == ["budget"] and again.diff.sentence == "isolates budget"
    assert load_lock(lock).id == again.identity.id != report.identity.id


def test_run_pin_without_recording_writes_nothing(tmp_path: Path) -> None:
    from execsys.identity import PinOptions, run_pin

    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION)
    options = PinOptions.from_sources(declaration.load(tmp_path / "execsys.toml"), ledger=tmp_path / "ledger.db",
                                      record=False, lock_path=str(tmp_path / "other.lock.json"))
    assert (options.record, options.require_endpoint, options.lock_path) == (False, False, tmp_path / "other.lock.json")
    report = run_pin(options)
    assert (report.lock_path, report.record_id) == (None, None) and report.identity.id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["execsys.toml", "model.bin"]


def test_pin_options_refuse_bad_paths_in_one_line(tmp_path: Path) -> None:
    from execsys.identity import PinOptions

    (tmp_path / "execsys.toml").write_text(DECLARATION)
    decl = declaration.load(tmp_path / "execsys.toml")
    with pytest.raises(InputError) as caught:
        PinOptions.from_sources(decl, lock_path=" ")
    assert str(caught.value) == "the lock path is empty: give --lock FILE, or omit it for the lock beside the declaration"
    with pytest.raises(InputError) as caught:
        PinOptions.from_sources(decl, lock_path=tmp_path)
    assert str(caught.value) == f"{tmp_path}: cannot write the lock (is a directory)"
    with pytest.raises(InputError) as caught:
        PinOptions.from_sources(decl, engine_log="")
    assert str(caught.value) == "--engine-log is empty: give the engine's log file"
    options = PinOptions.from_sources(decl, engine_log="engine.log", require_endpoint=False)
    assert options.declaration.component("runtime")["log"] == os.path.abspath("engine.log")
    assert options.declaration.path == decl.path and options.require_endpoint is False
    assert options.declaration.component("budget") == decl.component("budget")


def test_verify_options_use_the_pinned_declaration_while_it_exists(pinned: tuple[Path, Identity],
                                                                   tmp_path: Path) -> None:
    from execsys.identity import VerifyOptions, run_verify

    lock, identity = pinned
    with pytest.raises(InputError) as caught:
        VerifyOptions.from_sources(None, None, lock_path="elsewhere.lock.json")
    assert str(caught.value) == "elsewhere.lock.json: no such lock file (create one with 'execsys pin')"
    with pytest.raises(InputError) as caught:
        VerifyOptions.from_sources(None, None)
    assert str(caught.value) == "execsys.lock.json: no such lock file (create one with 'execsys pin')"
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 9"))
    options = VerifyOptions.from_sources(None, identity)
    assert options.lock is identity and options.declaration is not None
    assert options.declaration.component("budget")["seed"] == 9
    report = run_verify(options)
    assert report.components["budget"].changes == [{"field": "declared.seed", "old": 7, "new": 9}]
    (tmp_path / "execsys.toml").unlink()
    assert VerifyOptions.from_sources(None, identity).declaration is None


def test_an_identity_is_found_by_lock_record_or_id_prefix(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    from execsys.identity import load_identity_ref, record_identity
    from execsys.ledger import Ledger

    lock, identity = pinned
    assert load_identity_ref(str(lock)).id == identity.id
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        record_id = record_identity(identity, ledger)
        by_record = load_identity_ref(record_id, ledger)
        assert (by_record.id, by_record.source) == (identity.id, f"ledger record {record_id}")
        assert load_identity_ref(identity.id[:10], ledger).id == identity.id
        # a probe taken under an identity the ledger has no record of is known by its id alone
        probe = ledger.append("probe", {"axis": "restart"}, identity="ab" * 32)
        known = load_identity_ref(probe, ledger)
        assert (known.id, known.components) == ("ab" * 32, {})
        assert known.notes == [f"known only by its id from ledger record {probe}: the ledger holds no identity "
                               "record for it"]
        assert load_identity_ref("abab", ledger).id == "ab" * 32
        under = ledger.append("probe", {"axis": "restart"}, identity=identity.id)
        assert load_identity_ref(under, ledger).components == identity.components
        note = ledger.append("note", {"text": "x"})
        with pytest.raises(InputError) as caught:
            load_identity_ref(note, ledger)
        assert str(caught.value) == f"ledger record {note} is a note record and carries no identity"
        with pytest.raises(InputError) as caught:
            load_identity_ref("zz", ledger)
        assert str(caught.value) == (f"'zz' is neither a lock file nor an identity in the ledger {ledger.path} "
                                     "(see 'execsys ledger list --kind identity')")
        with pytest.raises(InputError) as caught:
            load_identity_ref(str(tmp_path / "missing.json"), ledger)
        assert "no such lock file" in str(caught.value)


def test_runtime_files_resolve_beside_the_declaration_and_shells_the_harness_uses_are_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "eval"
    project.mkdir()
    (project / "model.bin").write_bytes(b"weights")
    (project / "engine.env").write_text("NVIDIA_TF32_OVERRIDE=0\nHF_TOKEN=hf_secretsecretsecret\n")
    (project / "engine.log").write_text("loading weights\n")
    (project / "execsys.toml").write_text('[artifact]\npath = "model.bin"\n[runtime]\nengine = "vllm"\n'
                                          'env_file = "engine.env"\nlog = "engine.log"\n'
                                          '[harness]\ncommands = ["echo hi | cat", "true"]\n')
    monkeypatch.chdir(tmp_path)  # pinned from elsewhere: the declaration's own directory still counts
    identity = pin(declaration.load(project / "execsys.toml"), require_endpoint=False)
    runtime = identity.observed("runtime")
    assert runtime["env_file_numerics"] == {"NVIDIA_TF32_OVERRIDE": "0"}
    assert runtime["kernels"] == {"log": str(project / "engine.log"), "found": []}
    assert identity.declared("runtime")["env_file"] == "engine.env"  # declared as written
    shells = identity.observed("environment")["shells"]
    assert [(s["program"], s["because"]) for s in shells] == [("sh", "harness command 'echo hi | cat' runs through it")]


def test_an_engine_served_from_a_venv_is_read_from_that_venv(tmp_path: Path) -> None:
    """/proc/<pid>/exe of a venv's python is the base interpreter; the venv's own packages are what serve.
    A real venv holding a distribution the base interpreter lacks, and a real process started from it."""
    import venv

    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    dist = Path(site) / "execsys_venv_probe-9.9.9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: execsys-venv-probe\nVersion: 9.9.9\n")
    marker = f"execsys-serving-{uuid.uuid4().hex}"
    proc = subprocess.Popen([str(python), "-c", "import time; time.sleep(60)", marker])
    try:
        engine = observe_runtime({"engine": "execsys-venv-probe", "process": marker}, require_endpoint=False)["engine"]
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert engine == {"name": "execsys-venv-probe", "version": "9.9.9", "source": "package metadata (execsys-venv-probe)",
                      "interpreter": os.path.realpath(python), "found_in": "the serving process's interpreter"}


def test_the_runtime_alone_is_reobserved_as_pin_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """observe_runtime is what the probes' restart axis calls between restarts."""
    with pytest.raises(InputError) as caught:
        observe_runtime({"endpoint": "http://127.0.0.1:9/v1"})  # an endpoint is required unless told otherwise
    assert str(caught.value).startswith("endpoint http://127.0.0.1:9/v1: unreachable")
    with pytest.raises(InputError):
        observe_runtime({"endpoint": "http://127.0.0.1:9/v1"}, require_endpoint=True)
    down = observe_runtime({"endpoint": "http://127.0.0.1:9/v1"}, require_endpoint=False)
    assert down["endpoint"]["url"] == "http://127.0.0.1:9/v1" and "unreachable" in down["endpoint"]["error"]
    (tmp_path / "engine.env").write_text("NVIDIA_TF32_OVERRIDE=0\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    observed = observe_runtime({"env_file": "engine.env"}, require_endpoint=False, base_dir=tmp_path)
    assert observed["env_file_numerics"] == {"NVIDIA_TF32_OVERRIDE": "0"}


def test_what_could_not_be_observed_is_unknown_not_changed(rich: Path) -> None:
    """An unverifiable component keeps only the changes that could be seen: its declared ones."""
    decl = declaration.load(rich / "execsys.toml")
    identity = pin(decl, require_endpoint=False)
    shutil.rmtree(rich / "model")
    (rich / "execsys.toml").write_text(RICH.replace('path = "model"', 'path = "model"\nquantization = "awq"'))
    report = verify(identity, declaration=declaration.load(rich / "execsys.toml"))
    artifact, model = report.components["artifact"], report.components["model"]
    assert (artifact.status, model.status) == ("unverifiable", "unverifiable")
    assert artifact.changes == [{"field": "declared.quantization", "old": None, "new": "awq"}]
    assert model.changes == [] and model.reason == "the artifact's files cannot be read"
    assert artifact.reason is not None and artifact.reason.startswith("cannot re-hash the artifact: ")


def test_an_endpoint_or_judge_that_answered_when_pinned_and_is_down_now_is_unknown(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"weights")
    text = (DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n'
            '[grader]\nname = "judge"\n[grader.judge]\nendpoint = "http://127.0.0.1:9/v1"\nmodel = "j"\n')
    (tmp_path / "execsys.toml").write_text(text)
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    # as the lock read when both answered at pin time
    identity.components["runtime"]["observed"]["endpoint"] = {"url": "http://127.0.0.1:9/v1", "models": ["m"]}
    identity.components["grader"]["observed"]["judge"] = {"completion": {"model": "j-2026-05"}}
    (tmp_path / "execsys.toml").write_text(text.replace('model = "j"', 'model = "k"').replace(
        '[runtime]\n', '[runtime]\nversion = "b4567"\n'))
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    runtime, grader = report.components["runtime"], report.components["grader"]
    assert (runtime.status, grader.status) == ("unverifiable", "unverifiable")
    assert runtime.changes == [{"field": "declared.version", "old": None, "new": "b4567"}]
    assert grader.changes == [{"field": "declared.judge.model", "old": "j", "new": "k"}]
    assert grader.reason is not None and grader.reason.startswith("judge: endpoint http://127.0.0.1:9/v1: unreachable")


def test_each_component_check_is_announced_with_its_verdict(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 8"))
    (tmp_path / "model.bin").unlink()
    events: list = []
    verify(identity, on_event=events.append, declaration=declaration.load(tmp_path / "execsys.toml"))
    checked = {e.name: e for e in events if isinstance(e, ComponentChecked)}
    assert checked["budget"] == ComponentChecked("budget", "changed", 1, None)
    assert checked["harness"] == ComponentChecked("harness", "same", 0, None)
    assert (checked["model"].status, checked["model"].changes, checked["model"].reason) == (
        "unverifiable", 0, "the artifact's files cannot be read")


def test_a_serving_process_started_through_path_is_read_from_its_binary(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """argv[0] 'python3' is found through the serving process's own PATH -- here the test venv's bin first --
    so the venv's interpreter is asked (its llama_cpp_python), not /proc/<pid>/exe (the base interpreter
    behind the venv, which has none on a fresh machine), and never a file of that name in execsys's own
    working directory."""
    from importlib import metadata

    decoy = _stub(tmp_path, "python3", "")
    decoy.write_text("#!/bin/sh\nexit 3\n")
    monkeypatch.chdir(tmp_path)
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    venv_python3 = os.path.join(venv_bin, "python3")
    assert os.path.exists(venv_python3), "the test interpreter's bin has a python3, as a venv's has"
    marker = f"execsys-serving-{uuid.uuid4().hex}"
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(["python3", "-c", "import time; time.sleep(60)", marker], executable=sys.executable,
                            env=env)
    try:
        runtime = observe_runtime({"engine": "llama-cpp-python", "process": marker}, require_endpoint=False)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert runtime["process"]["interpreter"] == venv_python3
    assert runtime["engine"] == {"name": "llama-cpp-python", "version": metadata.version("llama_cpp_python"),
                                 "source": "package metadata (llama_cpp_python)",
                                 "interpreter": os.path.realpath(venv_python3),
                                 "found_in": "the serving process's interpreter"}


def test_a_retrieval_corpus_that_cannot_be_hashed_is_unverifiable_at_verify_and_refused_at_pin(rich: Path) -> None:
    identity = pin(declaration.load(rich / "execsys.toml"), require_endpoint=False)
    (rich / "corpus" / "gone").symlink_to(rich / "nowhere")
    report = verify(identity)
    retrieval = report.components["retrieval"]
    assert retrieval.status == "unverifiable"
    assert retrieval.reason is not None and retrieval.reason.startswith(f"{rich / 'corpus' / 'gone'}: dangling symlink")
    with pytest.raises(InputError, match="dangling symlink"):
        pin(declaration.load(rich / "execsys.toml"), require_endpoint=False)


@needs_b3sum
def test_pin_refuses_an_endpoint_that_does_not_answer_and_reads_grader_files_beside_the_declaration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "eval"
    project.mkdir()
    (project / "model.bin").write_bytes(b"weights")
    (project / "judge.txt").write_text("Grade: {answer}\n")
    (project / "execsys.toml").write_text(DECLARATION + '[grader]\nname = "j"\n[grader.judge]\nprompt = "judge.txt"\n')
    monkeypatch.chdir(tmp_path)
    identity = pin(declaration.load(project / "execsys.toml"))
    assert identity.observed("grader") == {"judge": {"prompt": {"path": str(project / "judge.txt"),
                                                                "digest": b3sum(project / "judge.txt")}}}
    (project / "execsys.toml").write_text(DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    with pytest.raises(InputError) as caught:
        pin(declaration.load(project / "execsys.toml"))
    assert str(caught.value).startswith("endpoint http://127.0.0.1:9/v1: unreachable")


def test_pin_reads_the_engine_from_the_serving_process_and_refuses_a_judge_that_does_not_answer(
        tmp_path: Path, serving_python: str) -> None:
    from importlib import metadata

    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION + f'[runtime]\nengine = "llama-cpp-python"\n'
                                           f'process = "{serving_python}"\n')
    engine = pin(declaration.load(tmp_path / "execsys.toml")).observed("runtime")["engine"]
    assert (engine["version"], engine["found_in"]) == (metadata.version("llama_cpp_python"),
                                                       "the serving process's interpreter")
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[grader]\nname = "j"\n[grader.judge]\n'
                                           'endpoint = "http://127.0.0.1:9/v1"\nmodel = "j"\n')
    with pytest.raises(InputError) as caught:
        pin(declaration.load(tmp_path / "execsys.toml"))
    assert str(caught.value).startswith("[grader.judge] endpoint http://127.0.0.1:9/v1: unreachable")


def test_a_lock_is_read_whole_or_refused_in_one_line(tmp_path: Path) -> None:
    golden = json.loads((Path(__file__).parent / "data" / "golden" / "execsys.lock.json").read_text(encoding="utf-8"))
    older = tmp_path / "older.lock.json"
    older.write_text(json.dumps({**golden, "schema": "execsys.identity/1", "live": {"engine": {"uptime_s": 5}}}))
    loaded = load_lock(older)
    assert (loaded.schema, loaded.schema_version, loaded.live) == ("execsys.identity/1", 1, {"engine": {"uptime_s": 5}})
    binary = tmp_path / "binary.lock.json"
    binary.write_bytes(b"\xff{}")
    with pytest.raises(InputError) as caught:
        load_lock(binary)
    assert str(caught.value) == (f"{binary}: cannot read ('utf-8' codec can't decode byte 0xff in position 0: "
                                 "invalid start byte)")
    with pytest.raises(InputError) as caught:
        load_lock(tmp_path)
    assert str(caught.value) == f"lock {tmp_path}: is a directory, not a regular file"

    def problem(body: object) -> str:
        path = tmp_path / "bad.lock.json"
        path.write_text(json.dumps(body))
        with pytest.raises(InputError) as caught:
            load_lock(path)
        return str(caught.value).removeprefix(f"{path}: ")

    assert problem({**golden, "schema": "execsys.identity/9"}) == (
        "identity schema 'execsys.identity/9' is not understood (this execsys reads execsys.identity/2); "
        "re-pin with 'execsys pin' or upgrade execsys")
    assert problem({**golden, "id": "f" * 64}) == ("the id does not match the components it claims to identify "
                                                   "(edited by hand?); re-pin with 'execsys pin'")
    assert problem({**golden, "components": {**golden["components"], "tools": []}}) == (
        "component 'tools' must be {\"declared\": {...}, \"observed\": {...}}")


def test_a_lock_that_is_not_json_is_refused_naming_the_file(tmp_path: Path) -> None:
    lock = tmp_path / "execsys.lock.json"
    lock.write_text("{")
    with pytest.raises(InputError) as caught:
        load_lock(lock)
    assert str(caught.value).startswith(f"{lock}: not valid JSON (Expecting property name enclosed in double quotes")
    lock.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InputError) as caught:
        load_lock(lock)
    assert str(caught.value) == f"{lock}: nested too deeply to be a lock"
