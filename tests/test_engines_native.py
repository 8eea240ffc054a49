"""Engine-native introspection over each engine's documented response shapes.

vLLM, SGLang, Ollama and llama.cpp's ``llama-server`` are not installable here, so their answers
are the recorded shapes in ``tests/data/engines/`` served by a stdlib loopback server -- beside
the real llama-cpp-python server in ``tests/test_served_artifact.py``. The pins go through the
real CLI: what reaches the lock, inside the id and outside it, is what a user sees.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from execsys.observe import engines
from tests.fixtures.fake_http import JsonHandler, LoopbackServer
from tests.fixtures.llama import make_tiny_gguf

DATA = Path(__file__).parent / "data" / "engines"

ROUTES = {
    "llama.cpp": {"/props": "llama_cpp_props.json", "/health": "llama_cpp_health.json",
                  "/v1/models": "llama_cpp_models.json"},
    "vllm": {"/version": "vllm_version.json", "/v1/models": "vllm_models.json"},
    "sglang": {"/get_server_info": "sglang_get_server_info.json", "/get_model_info": "sglang_get_model_info.json",
               "/v1/models": "vllm_models.json"},
    "ollama": {"/api/version": "ollama_version.json", "/api/tags": "ollama_tags.json",
               "/api/show": "ollama_show.json", "/api/ps": "ollama_ps.json", "/v1/models": "vllm_models.json"},
}


class RecordedEngine(LoopbackServer):
    """Answers each route with its recorded file (``{MODEL}`` replaced); anything else is a 404."""

    def __init__(self, routes: dict[str, str], model: Path | str, *, slow: dict[str, float] | None = None,
                 huge: set[str] | None = None):
        self.routes = routes
        self.model = str(model)
        self.slow = slow or {}
        self.huge = huge or set()
        self.requests: list[tuple[str, str]] = []
        super().__init__(self._handler())
        self.root = self.url("")

    def _handler(self):
        engine = self

        class Handler(JsonHandler):
            def _answer(self) -> None:
                path = self.path.split("?")[0]
                engine.requests.append((self.command, path))
                if path in engine.slow:
                    time.sleep(engine.slow[path])
                if path in engine.huge:
                    body = b'{"pad": "' + b"x" * (engine.MAX + 10) + b'"}'
                elif path in engine.routes:
                    text = (DATA / engine.routes[path]).read_text().replace("{MODEL}", engine.model)
                    body = text.encode()
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_bytes(body)

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self._answer()

        return Handler

    MAX = engines.MAX_RESPONSE_BYTES


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    return make_tiny_gguf(tmp_path / "served.gguf", seed=5)


@pytest.fixture
def recorded(gguf: Path) -> Iterator[Callable[..., RecordedEngine]]:
    started: list[RecordedEngine] = []

    def _start(engine: str, **kwargs) -> RecordedEngine:
        server = RecordedEngine(ROUTES[engine], kwargs.pop("model", gguf), **kwargs).__enter__()
        started.append(server)
        return server

    yield _start
    for server in started:
        server.__exit__()


def test_llama_server_props_give_model_path_context_slots_and_template_digest(recorded, gguf: Path) -> None:
    server = recorded("llama.cpp")
    seen = engines.introspect("llama.cpp", server.root, timeout=2.0)
    assert seen is not None
    native = seen.to_identity_json()
    assert native["model_path"] == str(gguf) and native["model_path_source"] == "/props model_path"
    assert native["n_ctx"] == 4096 and native["total_slots"] == 4 and native["build_info"] == "b6058-3f4fc97f"
    assert native["chat_template_blake3"] == engines.blake3_text(
        "{% for message in messages %}{{ message.content }}{% endfor %}")
    assert native["model_meta"]["n_params"] == 8030261248
    # /slots is off unless llama-server runs with --slots: absent, not an error
    assert native["absent"] == ["/slots"] and seen.absent["/slots"] == "HTTP 404"
    assert seen.to_volatile_json()["health"] == "ok"
    assert "health" not in native


def test_vllm_root_is_the_model_path_and_flags_come_from_the_process(recorded, gguf: Path) -> None:
    server = recorded("vllm")
    process = {"argv": ["/opt/venv/bin/vllm", "serve", "meta-llama/Llama-3.1-8B", "--tensor-parallel-size", "4",
                        "--kv-cache-dtype=fp8", "--enable-prefix-caching", "--quantization", "fp8",
                        "--api-key", "***"],
               "numerics_env": {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_BATCH_INVARIANT": "1",
                                "CUDA_VISIBLE_DEVICES": "0,1,2,3"}}
    seen = engines.introspect("vllm", server.root, process=process, timeout=2.0)
    native = seen.to_identity_json()
    assert native["version"] == "0.6.3.post1"
    assert native["models"] == [{"id": "llama-8b", "root": str(gguf), "max_model_len": 8192}]
    assert native["model_path"] == str(gguf) and native["model_path_source"] == "/v1/models root"
    assert native["flags"] == {"--tensor-parallel-size": "4", "--kv-cache-dtype": "fp8",
                               "--enable-prefix-caching": True, "--quantization": "fp8"}
    assert native["backend_env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_BATCH_INVARIANT": "1"}
    # no /v1/models root (an older vLLM): the positional model of `vllm serve` names it
    assert engines.vllm.serve_model(process["argv"]) == "meta-llama/Llama-3.1-8B"


def test_sglang_server_args_inside_the_id_scheduler_state_outside(recorded, gguf: Path) -> None:
    server = recorded("sglang")
    seen = engines.introspect("sglang", server.root, timeout=2.0)
    native = seen.to_identity_json()
    args = native["server_args"]
    assert args["tp_size"] == 2 and args["attention_backend"] == "flashinfer"
    assert args["enable_deterministic_inference"] is True and args["version"] == "0.5.4.post1"
    assert native["model_info"]["weight_version"] == "default"
    assert native["model_path"] == str(gguf) and native["model_path_source"] == "/get_model_info model_path"
    assert "sk-recorded-never" not in json.dumps(native) + json.dumps(seen.to_volatile_json())
    assert "internal_states" not in json.dumps(native)
    assert seen.to_volatile_json()["internal_states"][0]["num_running_reqs"] == 3


def test_ollama_digest_and_details_per_model(recorded) -> None:
    server = recorded("ollama")
    seen = engines.introspect("ollama", server.root, timeout=2.0)
    native = seen.to_identity_json()
    assert native["version"] == "0.12.6"
    assert native["models"] == [{"name": "llama3.2:latest",
                                 "digest": "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
                                 "details": {"format": "gguf", "family": "llama", "families": ["llama"],
                                             "parameter_size": "3.2B", "quantization_level": "Q4_K_M",
                                             "parent_model": ""},
                                 "parameters": 'stop "<|eot_id|>"'}]
    assert ("POST", "/api/show") in server.requests
    assert seen.to_volatile_json()["resident"][0]["size_vram"] == 3770000000
    assert native["model_path"] is None  # weights live in Ollama's blob store, named by digest


def test_a_slow_or_oversized_endpoint_is_absent_within_its_timeout(recorded) -> None:
    server = recorded("llama.cpp", slow={"/props": 3.0}, huge={"/v1/models"})
    started = time.monotonic()
    seen = engines.introspect("llama.cpp", server.root, timeout=0.5)
    assert time.monotonic() - started < 2.5
    assert seen.absent["/props"] == "no answer within the timeout"
    assert seen.absent["/v1/models"] == f"answer larger than {engines.MAX_RESPONSE_BYTES} bytes"
    assert seen.model_path is None and seen.to_volatile_json()["health"] == "ok"


def test_unknown_engine_keeps_the_generic_observation(recorded) -> None:
    server = recorded("vllm")
    assert engines.introspect("tgi", server.root) is None
    assert engines.introspect(None, server.root) is None
    assert server.requests == []


def test_pin_records_native_facts_in_the_id_and_live_state_outside(cli, tmp_path: Path, recorded,
                                                                    gguf: Path) -> None:
    server = recorded("sglang")
    (tmp_path / "execsys.toml").write_text(
        f'[artifact]\npath = "{gguf}"\n[runtime]\nengine = "sglang"\nendpoint = "{server.root}/v1"\n')
    first = cli("pin", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lock = first.json()
    runtime = lock["components"]["runtime"]["observed"]
    assert runtime["engine_native"]["server_args"]["tp_size"] == 2
    assert runtime["served"]["verdict"] == "the pinned artifact"
    assert "engine_live" not in runtime
    assert lock["live"]["engine"]["internal_states"][0]["num_queue_reqs"] == 0
    # the recorded server refuses unlisted names (404): no honesty warning
    assert lock["live"]["model_name_honesty"]["answered"] is False
    assert not any("any model name" in note for note in lock["notes"])
    assert cli("verify", cwd=tmp_path).returncode == 0


def test_pin_against_a_recorded_vllm_serving_another_file_names_it(cli, tmp_path: Path, recorded,
                                                                    gguf: Path) -> None:
    other = make_tiny_gguf(tmp_path / "other.gguf", seed=6)
    server = recorded("vllm", model=other)
    (tmp_path / "execsys.toml").write_text(
        f'[artifact]\npath = "{gguf}"\n[runtime]\nengine = "vllm"\nendpoint = "{server.root}/v1"\n')
    pinned = cli("pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    served = pinned.json()["components"]["runtime"]["observed"]["served"]
    assert served["verdict"] == "another artifact" and served["path"] == str(other)
    assert served["source"] == "/v1/models root"
    verified = cli("verify", "--json", cwd=tmp_path)
    assert verified.returncode == 1
    assert f"served: another artifact ({other}" in verified.json()["sentence"]


def test_llama_server_without_props_falls_back_to_its_argv(recorded, gguf: Path) -> None:
    server = recorded("llama.cpp", slow={}, huge={"/props"})
    process = {"argv": ["/usr/local/bin/llama-server", "-m", str(gguf), "-fa", "-c", "8192", "-np", "4",
                        "--seed", "-1", "--cache-type-k=q8_0"]}
    seen = engines.introspect("llama.cpp", server.root, process=process, timeout=2.0)
    native = seen.to_identity_json()
    assert native["model_path"] == str(gguf) and native["model_path_source"] == "process argv -m"
    # -fa took no value in older builds: a switch, not "-c"; a negative seed is a value, not a flag
    assert native["flags"] == {"-fa": True, "-c": "8192", "-np": "4", "--seed": "-1", "--cache-type-k": "q8_0"}
    assert "/props" in native["absent"]
