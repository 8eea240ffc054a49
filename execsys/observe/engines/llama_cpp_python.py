"""llama-cpp-python's server (``python -m llama_cpp.server``): ``/v1/models`` plus its process's argv.

It has no endpoint that describes its settings: ``/v1/models`` gives only the alias (or the model
path when no ``--model_alias`` is given), so the weights, context length, batch size and chat
format it actually runs with are read from the serving process's command line, as the process was
started -- which is the only truthful source, because a ``--config_file`` edited later is not
what it loaded.
"""

from __future__ import annotations

from typing import Any

from execsys.observe.engines import (
    EngineClient,
    NativeObservation,
    argv_options,
    argv_values,
    models_list,
    process_argv,
)

ENGINE = "llama-cpp-python"
# llama_cpp.server's ModelSettings/ServerSettings, as argparse flags (underscores, as it spells them)
_FLAGS = ("--model", "--model_alias", "--n_ctx", "--n_batch", "--n_ubatch", "--chat_format", "--n_gpu_layers",
          "--seed", "--n_threads", "--n_threads_batch", "--flash_attn", "--type_k", "--type_v", "--rope_freq_base",
          "--rope_freq_scale", "--hf_model_repo_id", "--draft_model", "--config_file", "--cache", "--logits_all",
          "--offload_kqv", "--mul_mat_q", "--split_mode", "--main_gpu", "--tensor_split")


def introspect(client: EngineClient, process: dict[str, Any] | None) -> NativeObservation:
    seen = NativeObservation(ENGINE)
    models = models_list(client.get("/v1/models", seen))
    seen.identity["models"] = sorted(str(m.get("id")) for m in models)
    argv = process_argv(process)
    settings = argv_options(argv, _FLAGS)
    seen.identity["settings"] = {flag.lstrip("-"): value for flag, value in sorted(settings.items())}
    model = argv_values(argv, ("--model",)).get("--model")
    if model:
        seen.model_path, seen.model_path_source = model, "process argv --model"
    elif len(models) == 1 and not settings.get("--model_alias"):
        # without an alias the server lists the model by the path it was given
        seen.model_path, seen.model_path_source = str(models[0].get("id")), "/v1/models id (no --model_alias)"
    return seen
