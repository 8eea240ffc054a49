"""SGLang: ``/get_server_info`` (its server args: ``tp_size``, ``attention_backend``, deterministic mode) and
``/get_model_info`` (``model_path``, ``weight_version``).

SGLang's deterministic mode still varies between runs in some configurations (sglang#15388,
#19431) and depends on the attention backend and tensor parallelism, and its weights can be
updated in place (``weight_version``): all of that is identity. The server-info answer also
carries live scheduler state (``internal_states``: running requests, token usage), which is kept
outside the id.
"""

from __future__ import annotations

from typing import Any

from execsys.observe.engines import EngineClient, NativeObservation, pick

ENGINE = "sglang"
_SERVER_ARGS = ("model_path", "tokenizer_path", "tp_size", "pp_size", "dp_size", "ep_size", "attention_backend",
                "prefill_attention_backend", "decode_attention_backend", "sampling_backend", "moe_runner_backend",
                "enable_deterministic_inference", "quantization", "kv_cache_dtype", "dtype", "context_length",
                "random_seed", "disable_radix_cache", "chunked_prefill_size", "max_running_requests",
                "speculative_algorithm", "speculative_draft_model_path", "revision", "load_format", "version")
_MODEL_INFO = ("model_path", "tokenizer_path", "is_generation", "weight_version", "model_type", "architectures")
_VOLATILE_STATE = ("last_gen_throughput", "memory_usage", "num_running_reqs", "num_queue_reqs", "token_usage",
                   "avg_spec_accept_length")


def introspect(client: EngineClient, process: dict[str, Any] | None) -> NativeObservation:
    seen = NativeObservation(ENGINE)
    server = client.get("/get_server_info", seen)
    seen.identity["server_args"] = pick(server, _SERVER_ARGS)
    states = server.get("internal_states") if isinstance(server, dict) else None
    if isinstance(states, list) and states and isinstance(states[0], dict):
        seen.volatile["internal_states"] = [pick(s, _VOLATILE_STATE) for s in states if isinstance(s, dict)]
    info = client.get("/get_model_info", seen)
    seen.identity["model_info"] = pick(info, _MODEL_INFO)
    for source, data in (("/get_model_info model_path", info), ("/get_server_info model_path", server)):
        if isinstance(data, dict) and isinstance(data.get("model_path"), str) and data["model_path"]:
            seen.model_path, seen.model_path_source = data["model_path"], source
            break
    return seen
