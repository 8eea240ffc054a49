"""vLLM: ``/version``, ``/v1/models`` (``root``: the weights it loaded, ``max_model_len``), the process argv and env.

The version a container tag claims is not the version that runs (an image tagged v0.6.2 ran
vLLM 0.5.5: substratusai/vllm-docker#30), so ``/version`` is asked. Parallelism, KV-cache dtype,
prefix caching, speculative decoding, quantization and the attention/GEMM backend switches all
change outputs -- batch invariance depends on the attention backend (vllm#27433) and TP=4 differs
from TP=1 even with ``VLLM_BATCH_INVARIANT=1`` -- and vLLM reports none of them over HTTP, so they
are read from how the serving process was started: its argv and its ``VLLM_*`` environment.
"""

from __future__ import annotations

from typing import Any

from execsys.observe.engines import (
    EngineClient,
    NativeObservation,
    argv_options,
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
    model = argv_options(argv, ("--model",)).get("--model")
    return str(model) if model else None


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
    argv = process_argv(process)
    seen.identity["flags"] = argv_options(argv, _FLAGS, switches=_SWITCHES)
    env = (process or {}).get("numerics_env") or {}
    seen.identity["backend_env"] = {k: v for k, v in sorted(env.items()) if k.startswith(_ENV_PREFIXES)}
    if seen.model_path is None:
        model = serve_model(argv)
        if model:
            seen.model_path, seen.model_path_source = model, "process argv (vllm serve MODEL / --model)"
    return seen
