"""How vLLM's self-description is read, pinned on exact text: the fingerprint's spelling, the ``*_info``
gauges of a Prometheus exposition (split into configured and measured labels), absent endpoints; and the
argv shapes by which init recognises each engine's listener. The real vLLM answers are in tests/test_vllm.py."""

from __future__ import annotations

import pytest

from execsys.observe import engines
from execsys.observe.engines.vllm import info_gauges, read_fingerprint
from execsys.observe.listener import engine_of_argv
from tests.fixtures.fake_http import JsonHandler, LoopbackServer

# the shape vLLM 0.32's PrometheusStatLogger.log_metrics_info writes (a gauge at 1, CacheConfig as labels)
EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_cpu_blocks="None",num_gpu_blocks="64",kv_cache_memory_bytes="None"} 1.0
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 1.7e9
"""


def test_info_gauges_split_configuration_from_what_was_measured_at_start() -> None:
    configured, measured = info_gauges(EXPOSITION)
    assert configured == {
        "vllm:cache_config_info": [{"block_size": "128", "cache_dtype": "auto", "enable_prefix_caching": "True",
                                    "engine": "0"}],
        "vllm:lora_requests_info": [{"max_lora": "2"}],
    }
    assert measured == {
        "vllm:cache_config_info": [{"engine": "0", "kv_cache_memory_bytes": "None", "num_cpu_blocks": "None",
                                    "num_gpu_blocks": "64"}],
        "vllm:lora_requests_info": [{"max_lora": "2", "running_lora_adapters": "a", "waiting_lora_adapters": ""}],
    }
    assert info_gauges("this is { not prometheus") == ({}, {})


@pytest.mark.parametrize(("text", "expected"), [
    ("vllm-0.32.0-1a2b3c4d", {"version": "0.32.0", "parallelism": [], "config_hash": "1a2b3c4d"}),
    ("vllm-0.32.0rc1.dev5+g1234-tp2-pp2-ep-deadbeef",
     {"version": "0.32.0rc1.dev5+g1234", "parallelism": ["tp2", "pp2", "ep"], "config_hash": "deadbeef"}),
    ("vllm-0.32.0-nohash", {"version": "0.32.0", "parallelism": [], "config_hash": "nohash"}),
    ("my-cluster-a", {"form": "not vLLM's default"}),
])
def test_the_fingerprint_is_read_as_vllm_spells_it(text: str, expected: dict) -> None:
    assert read_fingerprint(text) == {"value": text, **expected}


class _NoDevMode(JsonHandler):
    def do_GET(self) -> None:
        if self.path == "/version":
            self.send_json({"version": "0.32.0"})
        elif self.path == "/v1/models":
            self.send_json({"object": "list", "data": []})
        else:
            self.send_json({"detail": "Not Found"}, 404)


def test_without_dev_mode_server_info_and_metrics_are_absences() -> None:
    with LoopbackServer(_NoDevMode) as server:
        native = engines.introspect("vllm", server.url(""), timeout=5)
    assert native is not None
    assert native.absent == {"/metrics": "HTTP 404", "/server_info": "HTTP 404"}
    assert "server_info" not in native.identity and "metrics_info" not in native.identity
    assert native.to_identity_json()["absent"] == ["/metrics", "/server_info"]


@pytest.mark.parametrize(("argv", "expected"), [
    (["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
     ("vllm", "vllm.entrypoints")),
    (["/venv/bin/python", "/venv/bin/vllm", "serve", "Qwen/Qwen2.5-7B"], ("vllm", "vllm serve")),
    (["vllm", "serve", "m"], ("vllm", "vllm serve")),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], ("sglang", "sglang.launch_server")),
    (["/usr/bin/python3", "/usr/local/bin/sglang", "serve", "--model-path", "m"], ("sglang", "sglang serve")),
    (["python", "-m", "llama_cpp.server", "--model", "m.gguf"], ("llama-cpp-python", "llama_cpp.server")),
    (["/opt/llama.cpp/build/bin/llama-server", "-m", "m.gguf"], ("llama.cpp", "llama-server")),
    (["/usr/local/bin/ollama", "serve"], ("ollama", "ollama serve")),
    (["/usr/local/bin/ollama", "runner", "--model", "/root/.ollama/models/blobs/sha256-x"], None),
    (["python", "eval.py", "--engine", "vllm"], None),
    ([], None),
])
def test_each_engine_s_listener_is_known_by_its_argv(argv: list[str], expected) -> None:
    assert engine_of_argv(argv) == expected
