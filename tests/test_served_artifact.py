"""The served artifact is the pinned artifact: a real llama-cpp-python server, real GGUF files, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.observe.served import ANSWERS_ANY_NAME, UNLISTED_MODEL_NAME
from tests.fixtures.llama import LlamaServer, free_port, make_tiny_gguf


def _declare(directory: Path, artifact: Path, server: LlamaServer) -> None:
    (directory / "execsys.toml").write_text(
        f'[artifact]\npath = "{artifact}"\n[runtime]\nengine = "llama-cpp-python"\nendpoint = "{server.base_url}"\n')


@pytest.fixture(scope="module")
def other_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_gguf(tmp_path_factory.mktemp("other") / "other.gguf", seed=1)


def test_pin_reads_what_the_engine_loaded_and_finds_the_pinned_artifact(cli, tmp_path: Path, llama_server) -> None:
    _declare(tmp_path, llama_server.model_path, llama_server)
    result = cli("pin", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lock = result.json()
    runtime = lock["components"]["runtime"]["observed"]
    native = runtime["engine_native"]
    assert native["engine"] == "llama-cpp-python"
    assert native["model_path"] == str(llama_server.model_path)
    assert native["model_path_source"] == "process argv --model"
    assert native["settings"]["n_ctx"] == "256"
    assert native["settings"]["model_alias"] == llama_server.alias
    assert native["models"] == [llama_server.alias]
    assert native["read"] == ["/v1/models"] and native["absent"] == []
    served = runtime["served"]
    assert served["verdict"] == "the pinned artifact" and served["sentence"] == "served: the pinned artifact"
    assert served["digest"] == lock["components"]["artifact"]["observed"]["digest"]
    assert not any("another artifact" in note for note in lock["notes"])
    verified = cli("verify", "--json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.json()["verdict"] == "same-system"


def test_an_engine_that_answers_any_model_name_is_named_at_pin(cli, tmp_path: Path, llama_server) -> None:
    """llama-cpp-python serves its default model for any name it does not know, echoing the name asked."""
    _declare(tmp_path, llama_server.model_path, llama_server)
    result = cli("pin", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lock = result.json()
    honesty = lock["live"]["model_name_honesty"]
    assert honesty["asked"] == UNLISTED_MODEL_NAME and honesty["answered"] is True and honesty["status"] == 200
    assert honesty["answered_as"] == UNLISTED_MODEL_NAME  # it even claims to be the model asked for
    warning = next(note for note in lock["notes"] if note.startswith(ANSWERS_ANY_NAME))
    assert f"asked for the unlisted model {UNLISTED_MODEL_NAME!r}: HTTP 200" in warning
    assert ANSWERS_ANY_NAME in result.stderr
    # the probe's answer is behaviour at pin time, not identity: the id is the same without it
    assert "model_name_honesty" not in json.dumps(lock["components"])


def test_a_server_started_on_another_gguf_is_an_integrity_defect(cli, tmp_path: Path, tiny_gguf: Path,
                                                                   other_gguf: Path) -> None:
    pytest.importorskip("llama_cpp")
    with LlamaServer(other_gguf) as server:
        server.start()
        _declare(tmp_path, tiny_gguf, server)
        pinned = cli("pin", "--json", cwd=tmp_path)
        assert pinned.returncode == 0, pinned.stderr
        served = pinned.json()["components"]["runtime"]["observed"]["served"]
        assert served["verdict"] == "another artifact" and served["path"] == str(other_gguf)
        assert served["digest"] != pinned.json()["components"]["artifact"]["observed"]["digest"]
        assert f"served: another artifact ({other_gguf}, {served['digest']})" in pinned.stderr
        verified = cli("verify", "--json", cwd=tmp_path)
        assert verified.returncode == 1, verified.stdout + verified.stderr
        report = verified.json()
        assert report["verdict"] == "new-identity"
        assert report["components"]["runtime"]["status"] == "changed"
        assert str(other_gguf) in report["components"]["runtime"]["reason"]
        assert f"served: another artifact ({other_gguf}" in report["sentence"]
        # the doctor's unread-env-config hazard finds the serving process by the declared endpoint's port
        doctor = cli("doctor", "--only", "unread-env-config", "--json", cwd=tmp_path)
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        hazard = json.loads(doctor.stdout)["hazards"][0]
        assert hazard["status"] == "fail"
        assert f"artifact: declared {tiny_gguf}" in hazard["summary"] and str(other_gguf) in hazard["summary"]


def test_verify_after_a_restart_onto_another_file_names_the_served_artifact(cli, tmp_path: Path, tiny_gguf: Path,
                                                                             other_gguf: Path) -> None:
    pytest.importorskip("llama_cpp")
    port = free_port()
    with LlamaServer(tiny_gguf, port=port) as server:
        server.start()
        _declare(tmp_path, tiny_gguf, server)
        assert cli("pin", cwd=tmp_path).returncode == 0
        assert cli("verify", cwd=tmp_path).returncode == 0
    with LlamaServer(other_gguf, port=port) as restarted:
        restarted.start()
        verified = cli("verify", "--json", cwd=tmp_path)
        shown = cli("verify", cwd=tmp_path, env={"COLUMNS": "400"})
    assert verified.returncode == 1, verified.stdout + verified.stderr
    report = verified.json()
    assert report["verdict"] == "new-identity"
    assert f"served: another artifact ({other_gguf}" in report["components"]["runtime"]["reason"]
    # what moved is what the engine says it loaded, not only its argv
    fields = {c["field"] for c in report["components"]["runtime"]["changes"]}
    assert {"observed.served.path", "observed.served.digest", "observed.engine_native.model_path"} <= fields
    assert shown.returncode == 1
    assert f"new-identity: 1 changed (runtime); served: another artifact ({other_gguf}" in shown.stdout


class ServerInDirectory(LlamaServer):
    """A llama-cpp-python server started from ``cwd`` with the model given relative to it."""

    def __init__(self, model: Path, cwd: Path):
        super().__init__(Path(model.name))
        self.cwd = cwd

    def start(self) -> ServerInDirectory:
        import subprocess

        from tests.fixtures.llama import wait_ready

        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.cwd)
        if not wait_ready(self.base_url, self.ready_timeout, self.proc):
            self.stop()
            raise RuntimeError(f"server never became ready:\n{self.log_tail()}")
        return self


def test_a_relative_model_path_is_the_serving_process_s_not_the_declaration_s(cli, tmp_path: Path,
                                                                                other_gguf: Path) -> None:
    pytest.importorskip("llama_cpp")
    served_dir = tmp_path / "served"
    served_dir.mkdir()
    (served_dir / other_gguf.name).write_bytes(other_gguf.read_bytes())
    project = tmp_path / "project"
    project.mkdir()
    # the same file name beside the declaration is another file: only the process's cwd resolves it right
    (project / other_gguf.name).write_bytes(b"GGUF-not-this-one")
    with ServerInDirectory(other_gguf, served_dir) as server:
        server.start()
        _declare(project, served_dir / other_gguf.name, server)
        pinned = cli("pin", "--json", cwd=project)
    assert pinned.returncode == 0, pinned.stderr
    runtime = pinned.json()["components"]["runtime"]["observed"]
    assert runtime["engine_native"]["model_path"] == other_gguf.name
    assert runtime["served"]["path"] == str(served_dir / other_gguf.name)
    assert runtime["served"]["verdict"] == "the pinned artifact"
