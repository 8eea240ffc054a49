"""vLLM: what it says about itself -- ``/version``, ``/v1/models`` (``root``: the weights it loaded,
``max_model_len``), the ``system_fingerprint`` of its responses, the ``*_info`` gauges of ``/metrics``,
``/server_info`` (only with ``VLLM_SERVER_DEV_MODE=1``) -- and how the process was started (argv, env).

The version a container tag claims is not the version that runs (an image tagged v0.6.2 ran
vLLM 0.5.5: substratusai/vllm-docker#30), so ``/version`` is asked. Parallelism, KV-cache dtype,
prefix caching, speculative decoding, quantization and the attention/GEMM backend switches all
change outputs -- batch invariance depends on the attention backend (vllm#27433) and TP=4 differs
from TP=1 even with ``VLLM_BATCH_INVARIANT=1``. vLLM's own account of them (checked against vLLM
0.32's source):

- ``system_fingerprint`` is ``vllm-<version>[-tp<N>][-pp<N>][-dp<N>][-ep]-<hash8>`` by default
  (``--fingerprint-mode full``), ``hash8`` the first 8 hex of ``VllmConfig.compute_hash()``: one
  config, one fingerprint, across restarts (vllm/entrypoints/serve/utils/fingerprint.py).
- ``/metrics``: ``vllm:cache_config_info`` is a gauge set to 1 whose labels are every CacheConfig
  field as a string (``block_size``, ``cache_dtype``, ``enable_prefix_caching``, ``num_gpu_blocks``,
  ...), one series per engine index; ``vllm:lora_requests_info`` and other ``*_info`` gauges the
  same way. Sizes measured at start (block counts, which follow free memory) stay outside the id.
- ``/server_info`` (dev mode): ``vllm_config`` (``?config_format=json``: the whole VllmConfig),
  ``vllm_env`` (every ``VLLM_*`` as vLLM resolved it, defaults included), ``system_env``.

Whatever is not reported over HTTP is read from the process's argv and ``VLLM_*`` environment.
"""

from __future__ import annotations

import re
from typing import Any

from execsys.observe.engines import (
    EngineClient,
    NativeObservation,
    argv_options,
    argv_values,
    int_or_none,
    models_list,
    process_argv,
)

ENGINE = "vllm"
_FLAGS = ("--model", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size",
          "-dp", "--kv-cache-dtype", "--speculative-config", "--quantization", "-q", "--dtype", "--max-model-len",
          "--max-num-seqs", "--max-num-batched-tokens", "--seed", "--attention-backend", "--linear-backend",
          "--moe-backend", "--gpu-memory-utilization", "--served-model-name", "--tokenizer", "--revision",
          "--block-size", "--enforce-eager", "--compilation-config", "-O")
_SWITCHES = ("--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-chunked-prefill",
             "--no-enable-chunked-prefill", "--enforce-eager", "--trust-remote-code", "--enable-expert-parallel")
# environment switches that select kernels or numerics (vLLM reads them at start-up)
_ENV_PREFIXES = ("VLLM_ATTENTION_BACKEND", "VLLM_BATCH_INVARIANT", "VLLM_USE_", "VLLM_NVFP4_GEMM_BACKEND",
                 "VLLM_FLASH_ATTN_VERSION", "VLLM_MARLIN", "VLLM_FP8", "VLLM_ALL2ALL_BACKEND", "VLLM_ENABLE_V1")


def serve_model(argv: list[str]) -> str | None:
    """The positional model of ``vllm serve MODEL`` (vLLM >= 0.5.5), else ``--model``."""
    for index, arg in enumerate(argv[:-1]):
        if arg == "serve" and index >= 1 and argv[index - 1].endswith("vllm") and not argv[index + 1].startswith("-"):
            return argv[index + 1]
    return argv_values(argv, ("--model",)).get("--model") or None


_FINGERPRINT = re.compile(r"^vllm-(?P<version>.+?)(?P<parallel>(?:-(?:tp|pp|dp)\d+|-ep)*)-(?P<hash>[0-9a-f]{8}|nohash)$")
# cache-config labels that are measured at start (they follow free memory), not configured
_MEASURED = re.compile(r"^num_(gpu|cpu)_blocks$|^kv_cache_size_tokens$|^kv_cache_max_concurrency$|"
                       r"^kv_cache_memory_bytes$")
# the parts of /server_info's VllmConfig that decide what is computed, and how
_CONFIG_PICKS = {
    "model_config": ("model", "tokenizer", "revision", "dtype", "max_model_len", "seed", "quantization",
                     "served_model_name", "generation_config", "logprobs_mode", "max_logprobs"),
    "cache_config": ("block_size", "cache_dtype", "enable_prefix_caching", "prefix_caching_hash_algo",
                     "sliding_window", "calculate_kv_scales"),
    "parallel_config": ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                        "enable_expert_parallel", "distributed_executor_backend"),
    "scheduler_config": ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "async_scheduling"),
    "attention_config": ("backend",),
    "device_config": ("device", "device_type"),
}
# the build vLLM says it runs on (its collect_env, as /server_info gives it)
_SYSTEM_PICKS = ("vllm_version", "torch_version", "cuda_compiled_version", "hip_compiled_version", "vllm_build_flags")


def read_fingerprint(text: str) -> dict[str, Any]:
    """``vllm-0.32.0-tp2-1a2b3c4d`` -> version, parallelism, config hash; another spelling (a custom
    ``--fingerprint-value``) is kept as it is."""
    match = _FINGERPRINT.match(text)
    if match is None:
        return {"value": text, "form": "not vLLM's default"}
    return {"value": text, "version": match.group("version"),
            "parallelism": [p for p in match.group("parallel").split("-") if p],
            "config_hash": match.group("hash")}


def info_gauges(text: str) -> tuple[dict[str, list[dict[str, str]]], dict[str, list[dict[str, str]]]]:
    """(configured, measured) labels of every ``*_info`` gauge in a Prometheus exposition, per metric
    name and engine index, parsed by prometheus-client's own text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    configured: dict[str, list[dict[str, str]]] = {}
    measured: dict[str, list[dict[str, str]]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError):
        return {}, {}
    for family in families:
        if not family.name.endswith("_info"):
            continue
        for sample in sorted(family.samples, key=lambda s: s.labels.get("engine", "")):
            if sample.name != family.name:
                continue
            labels = dict(sorted(sample.labels.items()))
            if family.name == "vllm:lora_requests_info":  # running and waiting adapters: the moment's state
                keep = {k: v for k, v in labels.items() if k in ("max_lora", "engine")}
                moving = labels
            else:
                keep = {k: v for k, v in labels.items() if not _MEASURED.search(k)}
                moving = {k: v for k, v in labels.items() if _MEASURED.search(k) or k == "engine"}
            configured.setdefault(family.name, []).append(keep)
            if len(moving) > ("engine" in moving):
                measured.setdefault(family.name, []).append(moving)
    return configured, measured


# vLLM runs its collect_env (pip, compilers, GPUs: subprocesses) on the first /server_info and caches it;
# under load that first answer took longer than the 5 s every other endpoint gets, and an endpoint that
# answers the second pin but not the first would flip the id
SERVER_INFO_BUDGET_S = 60.0


def _server_info(client: EngineClient, seen: NativeObservation) -> None:
    info = client.get("/server_info?config_format=json", seen, budget=max(client.timeout, SERVER_INFO_BUDGET_S))
    if not isinstance(info, dict):
        return
    config = info.get("vllm_config")
    picked: dict[str, Any] = {}
    if isinstance(config, dict):
        for section, keys in _CONFIG_PICKS.items():
            part = config.get(section)
            if isinstance(part, dict):
                chosen = {k: part[k] for k in keys if k in part and isinstance(part[k], (str, int, float, bool))}
                if chosen:
                    picked[section] = chosen
    env = info.get("vllm_env")
    numerics = {k: v for k, v in sorted(env.items()) if k.startswith(_ENV_PREFIXES)} if isinstance(env, dict) else {}
    system = info.get("system_env")
    build = {k: system[k] for k in _SYSTEM_PICKS if isinstance(system, dict) and isinstance(system.get(k), str)}
    seen.identity["server_info"] = {"config": picked, "vllm_env": numerics, "system_env": build}


def introspect(client: EngineClient, process: dict[str, Any] | None) -> NativeObservation:
    seen = NativeObservation(ENGINE)
    version = client.get("/version", seen)
    seen.identity["version"] = version.get("version") if isinstance(version, dict) else None
    models = models_list(client.get("/v1/models", seen))
    seen.identity["models"] = [{"id": m.get("id"), "root": m.get("root"), "max_model_len": int_or_none(
        m.get("max_model_len"))} for m in sorted(models, key=lambda m: str(m.get("id")))]
    roots = [m["root"] for m in models if isinstance(m.get("root"), str) and m["root"] and m.get("parent") is None]
    if roots:
        seen.model_path, seen.model_path_source = roots[0], "/v1/models root"
    metrics = client.get_text("/metrics", seen)
    if metrics is not None:
        configured, measured = info_gauges(metrics)
        seen.identity["metrics_info"] = configured
        if measured:
            seen.volatile["metrics_info"] = measured
    _server_info(client, seen)
    argv = process_argv(process)
    seen.identity["flags"] = argv_options(argv, _FLAGS, switches=_SWITCHES)
    env = (process or {}).get("numerics_env") or {}
    seen.identity["backend_env"] = {k: v for k, v in sorted(env.items()) if k.startswith(_ENV_PREFIXES)}
    if seen.model_path is None:
        model = serve_model(argv)
        if model:
            seen.model_path, seen.model_path_source = model, "process argv (vllm serve MODEL / --model)"
    return seen
