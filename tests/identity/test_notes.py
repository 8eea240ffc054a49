"""What pin notes beside the id, and what verify says of the served artifact (execsys/identity.py), in-process.

Written for mutants of ``_notes``, ``_served_notes``, ``_served_defect``, ``_identity_by_id`` and the
Identity accessors that survived scripts/mutation.sh. The machine facts come from real processes:
an ``nvidia-smi`` on PATH that answers as a GPU box's would (this VM has no NVIDIA driver, so NVML
fails first, as on any CPU box), and a loopback HTTP server that replays llama.cpp's recorded
``/props`` and ``/v1/models`` answers (tests/data/engines) for a model file in tmp_path. The real
llama.cpp server is exercised through the CLI in test_served_artifact.py; here each pin takes well
under a second, because every mutant of pin re-runs these tests.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from execsys import declaration
from execsys.canonical import content_id
from execsys.identity import (
    Identity,
    _notes,
    field_changes,
    load_identity_ref,
    pin,
    record_identity,
    verify,
)
from execsys.ledger import Ledger
from execsys.observe.served import ANSWERS_ANY_NAME, UNLISTED_MODEL_NAME
from tests.fixtures.fake_http import JsonHandler, LoopbackServer
from tests.fixtures.identity_project import b3sum, needs_b3sum

ENGINES = Path(__file__).parent / "data" / "engines"


# -- a llama.cpp endpoint on loopback ----------------------------------------------------------------


class RecordedLlama(LoopbackServer):
    """Answers ``/v1/models`` and ``/props`` with llama.cpp's recorded answers for ``model``; a chat request
    naming an unlisted model is answered when ``answers_any_name`` (as llama.cpp does) and refused with a
    404 otherwise (as vLLM does). ``models_status`` other than 200 refuses ``/v1/models`` (a key is needed)."""

    def __init__(self, model: Path, *, answers_any_name: bool = False, models_status: int = 200) -> None:
        self.model = str(model)
        self.answers_any_name = answers_any_name
        self.models_status = models_status
        super().__init__(self._handler())
        self.endpoint = self.url()

    def _recorded(self, name: str) -> dict:
        return json.loads((ENGINES / name).read_text().replace("{MODEL}", self.model))

    def _handler(self) -> type[JsonHandler]:
        llama = self

        class Handler(JsonHandler):

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/v1/models":
                    if llama.models_status != 200:
                        self.send_json({"error": {"message": "Invalid API Key"}}, llama.models_status)
                    else:
                        self.send_json(llama._recorded("llama_cpp_models.json"))
                elif path == "/props":
                    self.send_json(llama._recorded("llama_cpp_props.json"))
                else:
                    self.send_json({"error": {"message": "File Not Found"}}, 404)

            def do_POST(self) -> None:
                body = self.read_json()
                if body.get("model") == llama.model or llama.answers_any_name:
                    self.send_json({"model": llama.model, "choices": [{"message": {"content": "hi"}}]})
                else:
                    self.send_json({"error": {"message": f"model {body.get('model')!r} not found"}}, 404)

        return Handler


def _serving(tmp_path: Path, endpoint: str) -> Path:
    (tmp_path / "execsys.toml").write_text(
        f'[artifact]\npath = "model.gguf"\n[runtime]\nengine = "llama.cpp"\nendpoint = "{endpoint}"\n')
    return tmp_path / "execsys.toml"


@pytest.fixture
def weights(tmp_path: Path) -> tuple[Path, Path]:
    """The pinned model file and another one of the same size."""
    (tmp_path / "model.gguf").write_bytes(b"weights")
    (tmp_path / "other.gguf").write_bytes(b"weightz")
    return tmp_path / "model.gguf", tmp_path / "other.gguf"


@needs_b3sum
def test_pin_notes_an_engine_serving_another_artifact_and_answering_any_model_name(
        tmp_path: Path, weights: tuple[Path, Path]) -> None:
    model, other = weights
    with RecordedLlama(other, answers_any_name=True) as llama:
        identity = pin(declaration.load(_serving(tmp_path, llama.endpoint)))
    served = (f"served: another artifact ({other}, {b3sum(other)}) according to /props model_path; "
              f"the pinned artifact is {model}")
    assert identity.observed("runtime")["served"]["sentence"] == served
    honesty = (f"{ANSWERS_ANY_NAME} (asked for the unlisted model {UNLISTED_MODEL_NAME!r}: HTTP 200, "
               f"answered as {str(other)!r}, saying 'hi')")
    assert [n for n in identity.notes if not n.startswith("hardware: ")] == [
        f"{served} -- an integrity defect: results measured now are not the pinned artifact's", honesty]
    assert identity.live["model_name_honesty"]["answered"] is True


@needs_b3sum
def test_an_engine_serving_the_pinned_artifact_honestly_adds_no_note(tmp_path: Path,
                                                                     weights: tuple[Path, Path]) -> None:
    model, _ = weights
    with RecordedLlama(model) as llama:
        identity = pin(declaration.load(_serving(tmp_path, llama.endpoint)))
    assert identity.observed("runtime")["served"]["verdict"] == "the pinned artifact"
    assert identity.live["model_name_honesty"] == {
        "asked": UNLISTED_MODEL_NAME, "status": 404, "answered": False}
    assert [n for n in identity.notes if not n.startswith("hardware: ")] == []


@needs_b3sum
def test_verify_names_the_served_artifact_defect_as_the_runtime_change(tmp_path: Path,
                                                                       weights: tuple[Path, Path]) -> None:
    model, other = weights
    with RecordedLlama(model) as llama:
        identity = pin(declaration.load(_serving(tmp_path, llama.endpoint)))
        same = verify(identity)
        llama.model = str(other)  # restarted by hand on other weights, the declaration untouched
        moved = verify(identity)
    assert not (same.components["runtime"].reason or "").startswith("served:")
    assert "served:" not in same.sentence
    served = (f"served: another artifact ({other}, {b3sum(other)}) according to /props model_path; "
              f"the pinned artifact is {model}")
    runtime = moved.components["runtime"]
    assert (runtime.status, runtime.reason) == ("changed", served)
    assert moved.verdict == "new-identity"
    assert moved.sentence.endswith(f"; {served} since {identity.id[:12]} was pinned; "
                                   "re-measure before comparing results across this change")


@pytest.mark.parametrize("status", [401, 403])
def test_an_endpoint_that_refuses_the_model_list_is_noted_with_what_to_declare(tmp_path: Path, status: int) -> None:
    (tmp_path / "model.gguf").write_bytes(b"weights")
    with RecordedLlama(tmp_path / "model.gguf", models_status=status) as llama:
        (tmp_path / "execsys.toml").write_text(
            f'[artifact]\npath = "model.gguf"\n[runtime]\nendpoint = "{llama.endpoint}"\n')
        identity = pin(declaration.load(tmp_path / "execsys.toml"))
    assert identity.observed("runtime")["endpoint"]["models_status"] == status
    assert [n for n in identity.notes if not n.startswith("hardware: ")] == [
        f"the endpoint refused /v1/models ({status}): name the variable holding its key in [runtime] api_key_env"]


def test_an_endpoint_that_lists_nothing_for_another_reason_is_not_a_key_problem(tmp_path: Path) -> None:
    (tmp_path / "model.gguf").write_bytes(b"weights")
    with RecordedLlama(tmp_path / "model.gguf", models_status=404) as llama:
        (tmp_path / "execsys.toml").write_text(
            f'[artifact]\npath = "model.gguf"\n[runtime]\nendpoint = "{llama.endpoint}"\n')
        identity = pin(declaration.load(tmp_path / "execsys.toml"))
    assert identity.observed("runtime")["endpoint"]["models_status"] == 404
    assert [n for n in identity.notes if not n.startswith("hardware: ")] == []


# -- the GPUs this machine has, as nvidia-smi reports them --------------------------------------------


def _nvidia_smi(bin_dir: Path, names: list[str]) -> None:
    """An nvidia-smi answering the query pin makes (CSV, no header, no units) with one line per GPU."""
    bin_dir.mkdir(exist_ok=True)
    lines = "\n".join(f"{i}, {name}, GPU-{i:08d}-0000-0000-0000-000000000000, 143771, 9.0, 550.54.15, "
                      "Disabled, Enabled" for i, name in enumerate(names))
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      'case "$1" in --query-gpu=*) cat <<"EOF"\n' + lines + "\nEOF\n;;\n"
                      "*) echo '| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |';;\n"
                      "esac\n")
    script.chmod(0o755)


@pytest.fixture
def gpu_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Makes this machine report the given GPUs through nvidia-smi (NVML has no driver to load here)."""
    from execsys.observe.hardware import gpus_via_nvml

    if gpus_via_nvml()[0] is not None:
        pytest.skip("a real NVIDIA driver answers through NVML before nvidia-smi is asked")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    def with_gpus(*names: str) -> None:
        _nvidia_smi(tmp_path / "bin", list(names))

    return with_gpus


def _pin_declaring(tmp_path: Path, hardware: str) -> Identity:
    (tmp_path / "model.gguf").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(f'[artifact]\npath = "model.gguf"\n[hardware]\n{hardware}')
    return pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)


def test_a_machine_that_is_what_its_declaration_says_has_no_notes(tmp_path: Path, gpu_box) -> None:
    gpu_box("NVIDIA H200", "NVIDIA H200")
    identity = _pin_declaring(tmp_path, f'host = "{socket.gethostname()}"\ngpu = "h200"\ngpu_count = 2\n')
    assert [g["name"] for g in identity.observed("hardware")["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert identity.notes == []


def test_the_declared_gpu_is_matched_in_any_case_within_the_name(tmp_path: Path, gpu_box) -> None:
    gpu_box("NVIDIA H200")
    identity = _pin_declaring(tmp_path, 'gpu = "H200"\n')
    assert identity.notes == []


@pytest.mark.parametrize(("names", "shown"), [
    (["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"], "NVIDIA A100-SXM4-80GB, NVIDIA A100-SXM4-80GB"),
    ([""], "no NVIDIA GPU"),  # a GPU that reports no name is shown as none of the declared kind
], ids=["two-other-gpus", "a-nameless-gpu"])
def test_a_declared_gpu_this_machine_lacks_is_noted_with_every_gpu_it_has(tmp_path: Path, gpu_box,
                                                                          names: list[str], shown: str) -> None:
    gpu_box(*names)
    identity = _pin_declaring(tmp_path, 'gpu = "H200"\n')
    assert [g["name"] for g in identity.observed("hardware")["gpus"]] == names
    assert identity.notes == [f"declared GPU 'H200' but this host has {shown}"]


# -- declared tools no MCP server offers -------------------------------------------------------------


def test_declared_tools_no_mcp_server_offers_are_noted_in_declared_order(tmp_path: Path) -> None:
    # A real MCP server costs seconds here (the SDK's import alone takes ~2 s, and each mutant of pin
    # re-runs this test), so the tools' observation is the record observe_tools makes of a server
    # offering one tool; test_tools_mcp.py pins a real server through the CLI.
    from execsys.observe.tools import tool_record

    (tmp_path / "model.gguf").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(
        '[artifact]\npath = "model.gguf"\n[tools]\nenabled = ["shell", "search", "fetch"]\n')
    decl = declaration.load(tmp_path / "execsys.toml")
    components = pin(decl, require_endpoint=False).components
    # no server observed: nothing says what is offered
    assert [n for n in _notes(decl, components) if not n.startswith("hardware: ")] == []
    components["tools"]["observed"] = {"servers": [{
        "name": "web", "transport": "stdio", "command": ["web-mcp"], "server": {"name": "web", "version": "1.0"},
        "tools": [tool_record({"name": "search", "description": "Search the web",
                               "inputSchema": {"type": "object"}})]}]}
    assert [n for n in _notes(decl, components) if not n.startswith("hardware: ")] == [
        "declared tools that no MCP server offers: shell, fetch"]


# -- an identity the ledger knows only by the records taken under it ---------------------------------


def test_an_identity_known_only_by_its_id_reads_as_empty_not_as_an_error(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        probe = ledger.append("probe", {"axis": "restart"}, identity="cd" * 32)
        known = load_identity_ref(probe, ledger)
    assert (known.id, known.source, known.recorded_at) == ("cd" * 32, f"ledger record {probe}", "")
    assert known.to_json()["recorded_at"] == ""
    assert known.observed("artifact") == {} and known.declared("budget") == {}
    assert known.summary == "? no GPU"


def test_a_record_taken_under_an_identity_resolves_to_its_newest_identity_record(tmp_path: Path) -> None:
    (tmp_path / "model.gguf").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model.gguf"\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        # the same system pinned twice: one id, two records
        identity.recorded_at = "2026-01-05T10:00:00Z"
        first = record_identity(identity, ledger)
        identity.recorded_at = "2026-03-07T12:00:00Z"
        newest = record_identity(identity, ledger)
        probe = ledger.append("probe", {"axis": "restart"}, identity=identity.id)
        found = load_identity_ref(probe, ledger)
    assert first != newest
    assert (found.id, found.recorded_at, found.source) == (identity.id, "2026-03-07T12:00:00Z",
                                                           f"ledger record {newest}")


# -- field changes --------------------------------------------------------------------------------------


def test_a_field_that_was_null_and_is_now_absent_is_a_change() -> None:
    # the id is computed over both, so verify must be able to name the field that moved it
    assert content_id({"kernels": None}) != content_id({})
    assert field_changes({"kernels": None}, {}) == [{"field": "kernels", "old": None, "new": None}]
    assert field_changes({}, {"kernels": None}) == [{"field": "kernels", "old": None, "new": None}]
