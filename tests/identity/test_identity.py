"""`execsys init`, `pin`, `verify` and `diff` on a real git repository, real artifacts and a loopback endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.observe.artifact import read_gguf_metadata
from tests.fixtures.fake_http import JsonHandler, LoopbackServer
from tests.fixtures.git_repo import git, make_repo
from tests.fixtures.llama import make_tiny_gguf


class FakeEngine:
    """An OpenAI-compatible endpoint on loopback whose self-description a test can change.

    Only to pin exact fields (versions, fingerprints); the real llama.cpp server is used beside it.
    """

    def __init__(self) -> None:
        self.version = "0.6.3"
        self.fingerprint = "fp_44709d6fcb"
        self.models = ["org/model-7b"]
        self.seen_auth: list[str | None] = []
        engine = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                engine.seen_auth.append(self.headers.get("Authorization"))
                if self.path == "/v1/models":
                    self.send_json({"object": "list", "data": [{"id": m, "object": "model", "created": 1700000000}
                                                               for m in engine.models]})
                elif self.path == "/version":
                    self.send_json({"version": engine.version})
                elif self.path == "/openapi.json":
                    self.send_json({"openapi": "3.1.0", "info": {"title": "vLLM", "version": engine.version}})
                else:
                    self.send_json({"error": "not found"}, 404)

            def do_POST(self) -> None:
                self.read_json()
                self.send_json({"id": "x", "object": "chat.completion", "system_fingerprint": engine.fingerprint,
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": "h"},
                                             "finish_reason": "length"}]})

        self.server = LoopbackServer(Handler)
        self.url = self.server.url()

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    server = FakeEngine()
    yield server
    server.close()


@pytest.fixture
def project(tmp_path: Path, engine: FakeEngine) -> Path:
    """A harness repo with a GGUF artifact and a declaration pointing at the loopback endpoint."""
    repo = make_repo(tmp_path / "evals")
    make_tiny_gguf(repo / "model.gguf", seed=0)
    (repo / ".gitignore").write_text("model.gguf\nexecsys.lock.json\n")
    git("add", ".gitignore", cwd=repo)
    git("commit", "-q", "-m", "ignore", cwd=repo)
    (repo / "execsys.toml").write_text(f"""
[model]
name = "execsys-tiny"

[artifact]
path = "model.gguf"
quantization = "F32"

[runtime]
engine = "vllm"
endpoint = "{engine.url}"

[budget]
temperature = 0.0
seed = 7
max_tokens = 64

[environment]
variables = {{ OMP_NUM_THREADS = "4" }}
""")
    return repo


ENV = {"OMP_NUM_THREADS": "4", "VLLM_ATTENTION_BACKEND": "FLASHINFER", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def test_pin_records_twelve_components_declared_and_observed(cli, project: Path, engine: FakeEngine,
                                                              ledger_path: Path) -> None:
    result = cli("pin", "--json", cwd=project, env=ENV)
    assert result.returncode == 0, result.stderr
    lock = result.json()
    assert lock == json.loads((project / "execsys.lock.json").read_text())
    assert lock["schema"] == "execsys.identity/2"
    assert list(lock["components"]) == list(COMPONENTS)
    for name in COMPONENTS:
        assert set(lock["components"][name]) == {"declared", "observed"}
    assert lock["id"] == content_id(lock["components"])
    assert "recorded_at" in lock and lock["recorded_at"] not in json.dumps(lock["components"])

    artifact = lock["components"]["artifact"]
    b3 = subprocess.run(["b3sum", "--no-names", str(project / "model.gguf")], capture_output=True, text=True).stdout
    assert artifact["observed"]["digest"] == b3.strip()
    assert artifact["observed"]["format"] == "gguf"
    assert artifact["observed"]["quantization"] == "F32"
    assert artifact["observed"]["quantization_source"] == "gguf general.file_type"
    assert artifact["observed"]["quantization_matches_declared"] is True
    assert artifact["declared"] == {"path": "model.gguf", "quantization": "F32"}
    assert lock["components"]["model"]["observed"]["from_files"]["name"] == "execsys-tiny"

    runtime = lock["components"]["runtime"]["observed"]
    assert runtime["endpoint"]["models"] == ["org/model-7b"]
    assert runtime["endpoint"]["server_version"] == "0.6.3"
    assert runtime["endpoint"]["openapi"] == {"title": "vLLM", "version": "0.6.3"}
    assert runtime["endpoint"]["system_fingerprint"] == "fp_44709d6fcb"
    # numerics switches set in the pinning shell are the observer's, outside the id (issue 17)
    assert "numerics_env" not in runtime
    assert lock["observer"]["numerics_env"]["VLLM_ATTENTION_BACKEND"] == "FLASHINFER"
    assert lock["observer"]["numerics_env"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert "argv" in runtime["process"]  # the process listening on the port (this test run) was found

    harness = lock["components"]["harness"]["observed"]
    head = git("rev-parse", "HEAD", cwd=project).strip()
    assert harness["commit"] == head and harness["branch"] == "main" and harness["dirty"] is False
    assert harness["remote_url"] == "https://github.com/example/evals.git"

    hardware = lock["components"]["hardware"]["observed"]
    for key in ("hostname", "machine_id", "os", "kernel", "cpu", "memory_total_bytes", "virtualization", "gpus"):
        assert key in hardware
    if not hardware["gpus"]:
        assert hardware["gpu_note"]
    env = lock["components"]["environment"]["observed"]
    # [environment] variables are read from the serving process: here the loopback engine in this test run
    # (its environment as it started: /proc), not the pinning shell's OMP_NUM_THREADS=4
    import psutil

    served = psutil.Process().environ().get("OMP_NUM_THREADS")
    assert env["variables"] == {"OMP_NUM_THREADS": served}
    assert env["variables_not_holding"] == ([] if served == "4" else ["OMP_NUM_THREADS"])
    assert lock["live"]["environment"] == {"variables_checked": {
        "where": f"checked in pid {os.getpid()}, the serving process", "pid": os.getpid()}}
    # execsys's interpreter and the operator's shell are the observer's, never the id's
    assert "python" not in env and "shell" not in env and "shells" not in env
    observer = lock["observer"]
    assert observer["python"]["executable"] and observer["shell"]["name"] and observer["cwd"] == str(project)
    assert observer["execsys"] and observer["user"]

    records = cli("ledger", "list", "--kind", "identity", "--json").json()
    assert len(records) == 1 and records[0]["identity"] == lock["id"]


def test_same_system_same_id_and_verify_passes(cli, project: Path) -> None:
    first = cli("pin", "--json", cwd=project, env=ENV).json()
    second = cli("pin", "--json", cwd=project, env=ENV).json()
    assert first["id"] == second["id"]
    # each pin is a new record of the same system: stamped when it was taken, both kept in the ledger
    first_at, second_at = (datetime.fromisoformat(p["recorded_at"].replace("Z", "+00:00")) for p in (first, second))
    assert first_at <= second_at <= datetime.now(timezone.utc)
    assert json.loads((project / "execsys.lock.json").read_text())["recorded_at"] == second["recorded_at"]
    recorded = cli("ledger", "list", "--kind", "identity", "--json").json()
    assert [r["identity"] for r in recorded] == [first["id"], first["id"]]
    result = cli("verify", "--json", cwd=project, env=ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    report = result.json()
    assert report["verdict"] == "same-system"
    assert report["observed_id"] == report["lock_id"] == second["id"]
    assert all(c["status"] == "same" for c in report["components"].values())


def test_same_interpreter_under_another_name_is_the_same_system(cli, project: Path, tmp_path: Path) -> None:
    # The installed `execsys` script (its shebang names e.g. python3.11) and `python -m execsys` run one
    # interpreter under two names: the same system. (A symlink to the interpreter placed outside a venv
    # would not do: it loses the venv, a genuinely different environment.)
    script = Path(sys.executable).parent / "execsys"
    if not script.exists():
        pytest.skip("execsys console script not installed beside this interpreter")
    pinned = subprocess.run([str(script), "pin", "--json"], cwd=project, capture_output=True,
                            text=True, env={**os.environ, **ENV}, timeout=120)
    assert pinned.returncode == 0, pinned.stderr
    result = cli("verify", "--json", cwd=project, env=ENV)
    assert result.returncode == 0, result.stdout
    assert result.json()["components"]["environment"]["status"] == "same"


def test_verify_catches_swapped_artifact_and_upgraded_engine(cli, project: Path, engine: FakeEngine) -> None:
    assert cli("pin", cwd=project, env=ENV).returncode == 0
    # what the launch script intends to load is still called model.gguf ...
    make_tiny_gguf(project / "model.gguf", seed=1)
    engine.version = "0.6.4"
    result = cli("verify", "--json", cwd=project, env=ENV)
    assert result.returncode == 1
    report = result.json()
    assert report["verdict"] == "new-identity"
    artifact = report["components"]["artifact"]
    assert artifact["status"] == "changed"
    assert any(c["field"] == "observed.digest" for c in artifact["changes"])
    runtime = report["components"]["runtime"]
    assert {"field": "observed.endpoint.server_version", "old": "0.6.3", "new": "0.6.4"} in runtime["changes"]
    assert report["components"]["hardware"]["status"] == "same"
    human = cli("verify", cwd=project, env=ENV)
    assert human.returncode == 1
    assert "server_version: 0.6.3 → 0.6.4" in human.stdout and "new-identity" in human.stdout


def test_verify_sees_dirty_harness_and_changed_declaration(cli, project: Path) -> None:
    assert cli("pin", cwd=project, env=ENV).returncode == 0
    (project / "eval.py").write_text("print('evaluate, differently')\n")
    text = (project / "execsys.toml").read_text().replace("temperature = 0.0", "temperature = 0.7")
    (project / "execsys.toml").write_text(text)
    report = cli("verify", "--json", cwd=project, env=ENV).json()
    harness = report["components"]["harness"]
    assert harness["status"] == "changed"
    assert {"field": "observed.dirty", "old": False, "new": True} in harness["changes"]
    assert {"field": "declared.temperature", "old": 0.0, "new": 0.7} in report["components"]["budget"]["changes"]


def test_verify_endpoint_down_is_unverifiable(cli, project: Path, engine: FakeEngine) -> None:
    assert cli("pin", cwd=project, env=ENV).returncode == 0
    engine.close()
    result = cli("verify", "--json", cwd=project, env=ENV)
    assert result.returncode == 1
    runtime = result.json()["components"]["runtime"]
    assert runtime["status"] == "unverifiable" and "unreachable" in runtime["reason"]


def test_diff_isolates_one_component_or_says_descriptive_only(cli, project: Path, engine: FakeEngine) -> None:
    a = cli("pin", "--json", "--out", "a.lock.json", cwd=project, env=ENV).json()
    engine.fingerprint = "fp_new"
    b = cli("pin", "--json", "--out", "b.lock.json", cwd=project, env=ENV).json()
    one = cli("diff", "a.lock.json", "b.lock.json", "--json", cwd=project)
    assert one.returncode == 0
    assert one.json()["moved"] == ["runtime"]
    assert one.json()["sentence"] == "isolates runtime"
    assert {"field": "observed.endpoint.system_fingerprint", "old": "fp_44709d6fcb", "new": "fp_new"} in \
        one.json()["changes"]["runtime"]

    (project / "eval.py").write_text("print('changed harness')\n")
    declared = (project / "execsys.toml").read_text()
    (project / "execsys.toml").write_text(declared.replace('OMP_NUM_THREADS = "4"', 'OMP_NUM_THREADS = "8"'))
    c = cli("pin", "--json", "--out", "c.lock.json", env=ENV, cwd=project).json()
    # ledger ids and identity-id prefixes work as well as lock files
    many = cli("diff", a["id"][:10], "c.lock.json", "--json", cwd=project).json()
    assert many["moved"] == ["runtime", "harness", "environment"]
    assert many["sentence"] == "descriptive only: 3 components moved (runtime, harness, environment)"
    same = cli("diff", "b.lock.json", b["id"][:12], cwd=project)
    assert "same system: no component moved" in same.stdout
    assert c["id"] not in (a["id"], b["id"])


def test_hugging_face_tree_quantization_from_config(cli, tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    snap = tmp_path / "models--org--m" / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    (blobs / "1").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                                         "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}))
    (blobs / "2").write_bytes(os.urandom(4096))
    (snap / "config.json").symlink_to(blobs / "1")
    (snap / "model.safetensors").symlink_to(blobs / "2")
    (tmp_path / "execsys.toml").write_text(f'[artifact]\npath = "{snap}"\nquantization = "gptq"\n')
    result = cli("pin", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    artifact = result.json()["components"]["artifact"]["observed"]
    assert artifact["kind"] == "tree" and artifact["files"] == 2 and artifact["format"] == "safetensors"
    assert artifact["quantization"] == "awq 4-bit"
    assert artifact["quantization_config"]["group_size"] == 128
    assert artifact["quantization_matches_declared"] is False
    assert "declared quantization 'gptq' but the files say 'awq 4-bit'" in " ".join(result.json()["notes"])
    assert "gptq" in result.stderr  # and said on stderr as a warning


def test_gguf_reader_agrees_with_gguf_package(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = make_tiny_gguf(tmp_path / "t.gguf", seed=3)
    ours = read_gguf_metadata(path)
    reader = gguf.GGUFReader(str(path))
    field = reader.fields["general.file_type"]
    assert ours["general.file_type"] == int(field.parts[field.data[0]][0])
    assert ours["general.name"] == "execsys-tiny"
    assert ours["general.architecture"] == "llama"


def test_real_llama_cpp_server_runtime_identity(cli, tmp_path: Path, llama_server) -> None:
    (tmp_path / "execsys.toml").write_text(
        f'[artifact]\npath = "{llama_server.model_path}"\n[runtime]\nengine = "llama-cpp-python"\n'
        f'endpoint = "{llama_server.base_url}"\n')
    result = cli("pin", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    runtime = result.json()["components"]["runtime"]["observed"]
    from importlib.metadata import version

    # the version installed where the engine runs (the serving process's interpreter), not execsys's own
    server_python = os.path.realpath(runtime["process"]["exe"])
    assert runtime["engine"] == {"name": "llama-cpp-python", "version": version("llama_cpp_python"),
                                 "source": "package metadata (llama_cpp_python)", "interpreter": server_python,
                                 "found_in": "the serving process's interpreter"}
    assert runtime["endpoint"]["models"] == [llama_server.alias]
    assert "llama_cpp.server" in " ".join(runtime["process"]["argv"])
    assert cli("verify", cwd=tmp_path).returncode == 0


# -- init ----------------------------------------------------------------------------------------


# init fills in the engines listening on this machine: beside the worker that starts real servers, a
# llama.cpp server started between its two inits would make them differ, so it runs in that worker
@pytest.mark.xdist_group("integration")
def test_init_writes_a_template_that_loads_clean_and_refuses_overwrite(cli, tmp_path: Path, engine) -> None:
    repo = make_repo(tmp_path / "r")
    result = cli("init", cwd=repo)
    assert result.returncode == 0, result.stderr
    text = (repo / "execsys.toml").read_text()
    from execsys.declaration import parse

    decl = parse(text)
    assert decl.warnings == []
    for name in COMPONENTS:
        assert f"[{name}]" in text
    # relative to the declaration, as the template says: a clone elsewhere still names itself
    assert decl.get("harness", "repo") == "."
    (repo / "eval").mkdir()
    assert cli("init", "--config", "eval/execsys.toml", cwd=repo).returncode == 0
    assert parse((repo / "eval" / "execsys.toml").read_text()).get("harness", "repo") == ".."
    assert cli("init", "--config", str(tmp_path / "outside.toml"), cwd=repo).returncode == 0
    assert parse((tmp_path / "outside.toml").read_text()).get("harness", "repo") == str(repo.resolve())
    import socket

    assert decl.get("hardware", "host") == socket.gethostname()
    again = cli("init", cwd=repo)
    assert again.returncode == 2 and "--force" in again.stderr
    assert (repo / "execsys.toml").read_text() == text
    (repo / "execsys.toml").write_text("# mine\n")
    assert cli("init", "--force", cwd=repo).returncode == 0
    assert (repo / "execsys.toml").read_text() == text
    assert cli("pin", cwd=repo).returncode == 0  # the template pins as written


def test_python_api_round_trip(project: Path, engine: FakeEngine, ledger_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine layer the CLI and the TUI call: options from sources -> run -> report, with typed events."""
    from execsys import declaration, identity
    from execsys.ledger import Ledger

    monkeypatch.chdir(project)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    decl = declaration.load(project / "execsys.toml")
    events: list[object] = []
    options = identity.PinOptions.from_sources(decl, None)
    assert options.lock_path == project / "execsys.lock.json"  # beside the declaration
    report = identity.run_pin(options, on_event=events.append)
    pinned = report.identity
    size = (project / "model.gguf").stat().st_size
    hashed = [e for e in events if isinstance(e, identity.ArtifactHashed)]
    assert hashed and (hashed[-1].done_bytes, hashed[-1].total_bytes) == (size, size)
    observed = [e for e in events if isinstance(e, identity.ComponentObserved)]
    assert sorted(e.name for e in observed) == sorted(COMPONENTS)
    assert [e.index for e in observed] == list(range(1, 13)) and {e.total for e in observed} == {12}
    recorded = [e for e in events if isinstance(e, identity.IdentityRecorded)]
    assert recorded == [identity.IdentityRecorded(pinned.id, report.record_id, str(options.lock_path))]
    lock = options.lock_path
    with Ledger.open() as ledger:
        assert identity.load_identity_ref(report.record_id, ledger).id == pinned.id
        assert identity.load_identity_ref(pinned.id[:8], ledger).id == pinned.id
    loaded = identity.load_lock(lock)
    assert loaded.to_json() == pinned.to_json()
    checked: list[object] = []
    verified = identity.run_verify(identity.VerifyOptions.from_sources(None, loaded), on_event=checked.append)
    assert verified.verdict == "same-system" and verified.to_json()["observed_id"] == pinned.id
    assert [e.name for e in checked if isinstance(e, identity.ComponentChecked)] == list(COMPONENTS)
    engine.models = ["org/model-7b", "org/other"]
    runtime = identity.observe_runtime(decl.component("runtime"))
    assert runtime["endpoint"]["models"] == ["org/model-7b", "org/other"]
    again = identity.run_pin(identity.PinOptions.from_sources(decl, loaded, record=False))
    assert again.record_id is None and again.lock_path is None
    assert identity.load_lock(lock).id == pinned.id  # observing only writes nothing
    moved = again.diff
    assert moved is not None and moved.moved == ["runtime"] and moved.sentence == "isolates runtime"
    assert moved.to_json()["changes"]["runtime"][0]["field"] == "observed.endpoint.models"
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(identity.Cancelled):
        identity.run_pin(identity.PinOptions.from_sources(decl, None, lock_path=project / "other.lock.json"),
                         cancel=cancel)
    assert not (project / "other.lock.json").exists()


def test_lock_is_readable_like_any_file_the_user_writes(cli, project: Path) -> None:
    # mkstemp makes 0600 files: a lock on a shared GPU box must not become private to its writer
    old = os.umask(0o022)
    try:
        assert cli("pin", cwd=project, env=ENV).returncode == 0
        lock = project / "execsys.lock.json"
        assert lock.stat().st_mode & 0o777 == 0o644
        lock.chmod(0o664)  # a group-writable lock stays group-writable when re-pinned
        assert cli("pin", cwd=project, env=ENV).returncode == 0
        assert lock.stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(old)


def test_an_identity_prefix_shared_by_two_identities_is_ambiguous(cli, project: Path, ledger_path: Path) -> None:
    from execsys.ledger import Ledger

    assert cli("pin", cwd=project, env=ENV).returncode == 0
    with Ledger.open(ledger_path) as ledger:
        ledger.append("identity", {"schema": "execsys.identity/1"}, identity="abc1" + "0" * 60)
        ledger.append("identity", {"schema": "execsys.identity/1"}, identity="abc2" + "0" * 60)
    result = cli("diff", "abc", "execsys.lock.json", cwd=project)
    assert result.returncode == 2 and "ambiguous" in result.stderr, result.stdout
    scoped = cli("scope", "--identity", "abc", cwd=project)
    assert scoped.returncode == 2 and "ambiguous" in scoped.stderr


def test_a_new_identity_says_the_licences_belong_to_the_one_it_replaced(cli, tmp_path: Path, ledger_path: Path) -> None:
    """`pin` over a lock of another identity names the probe records (and their axes) that count for the old
    one: they license nothing for the new one. The same identity again, or a first pin, says nothing."""
    from execsys.ledger import Ledger
    from tests.fixtures.identity_project import write_project

    write_project(tmp_path)
    first = cli("pin", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "belong to" not in first.stderr and "unlicensed" not in first.stderr
    old = first.json()["id"]
    with Ledger.open(ledger_path) as ledger:
        for axis in ("session", "session", "restart"):
            ledger.append("probe", {"schema": "execsys.probe/1", "axis": axis, "identity": old, "n": 4, "m": 4,
                                    "scope": {}}, identity=old)
    again = cli("pin", cwd=tmp_path)
    assert again.returncode == 0 and "belong to" not in again.stderr and "unlicensed" not in again.stderr
    (tmp_path / "model.bin").write_bytes(b"other weights")
    moved = cli("pin", "--json", cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert moved.json()["id"] != old
    assert (f"3 probe records (session, restart) belong to {old[:12]}…; this identity is unlicensed until probed"
            in moved.stderr)
    json.loads(moved.stdout)  # the note is on stderr: --json stays parseable
    (tmp_path / "model.bin").write_bytes(b"third weights")
    unprobed = cli("pin", cwd=tmp_path)
    assert f"this is a new identity (the lock held {moved.json()['id'][:12]}…); it is unlicensed until probed" \
        in unprobed.stderr
