"""llama.cpp's ``llama-server``: ``/props``, ``/health``, ``/slots`` (when ``--slots`` is on), ``/v1/models``.

``/props`` is the one place llama.cpp says which GGUF it loaded (``model_path``), with the
context per slot, the slot count (results change with ``--parallel``: llama.cpp #7052, PR #6950),
the build and the chat template -- the template is recorded as its BLAKE3, since a template
swap changes every prompt the model sees. ``/health`` and ``/slots`` say how busy it is right
now: volatile, outside the id.
"""

from __future__ import annotations

from typing import Any

from execsys.observe.engines import (
    EngineClient,
    NativeObservation,
    argv_options,
    argv_values,
    blake3_text,
    int_or_none,
    models_list,
    process_argv,
)

ENGINE = "llama.cpp"
_MODEL_FLAGS = ("-m", "--model")
_FLAGS = ("-c", "--ctx-size", "-np", "--parallel", "-b", "--batch-size", "-ub", "--ubatch-size", "-ngl",
          "--n-gpu-layers", "-fa", "--flash-attn", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-s", "--seed",
          "--chat-template", "-a", "--alias")
_SWITCHES = ("--cont-batching", "-cb", "--no-cont-batching", "-nocb", "--slots", "--no-kv-offload", "-nkvo")


def introspect(client: EngineClient, process: dict[str, Any] | None) -> NativeObservation:
    seen = NativeObservation(ENGINE)
    props = client.get("/props", seen)
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        settings = settings if isinstance(settings, dict) else {}
        n_ctx = int_or_none(settings.get("n_ctx", props.get("n_ctx")))
        template = props.get("chat_template")
        seen.identity.update({
            "n_ctx": n_ctx,
            "total_slots": int_or_none(props.get("total_slots")),
            "build_info": props.get("build_info") if isinstance(props.get("build_info"), str) else None,
            "chat_template_blake3": blake3_text(template) if isinstance(template, str) and template else None,
        })
        if isinstance(props.get("model_path"), str) and props["model_path"]:
            seen.model_path, seen.model_path_source = props["model_path"], "/props model_path"
    health = client.get("/health", seen)
    if isinstance(health, dict):
        seen.volatile["health"] = health.get("status")
    slots = client.get("/slots", seen)
    if isinstance(slots, list):
        seen.volatile["slots_processing"] = sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))
        seen.volatile["slots"] = len(slots)
    models = models_list(client.get("/v1/models", seen))
    if models:
        meta = models[0].get("meta")
        seen.identity["model_meta"] = ({k: meta[k] for k in ("n_params", "size", "n_ctx_train", "n_vocab", "n_embd")
                                        if k in meta} if isinstance(meta, dict) else None)
    argv = process_argv(process)
    seen.identity["flags"] = argv_options(argv, _FLAGS, switches=_SWITCHES)
    if seen.model_path is None:
        on_argv = argv_values(argv, _MODEL_FLAGS)
        if on_argv:
            flag, path = next(iter(on_argv.items()))
            seen.model_path, seen.model_path_source = path, f"process argv {flag}"
    return seen
