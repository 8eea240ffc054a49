"""Ollama: ``/api/version``, ``/api/tags`` (each model's content ``digest``), ``/api/show`` (its details).

Ollama names models by mutable tags (``llama3.2:latest``); the digest is what the tag pointed at
when the server loaded it, so it is the only name that says which weights answered (aliases that
silently resolve to another model: ollama/ollama#16111). ``/api/ps`` says what is resident and
until when -- volatile, outside the id.
"""

from __future__ import annotations

from typing import Any

from execsys.observe.engines import EngineClient, NativeObservation, pick

ENGINE = "ollama"
_DETAILS = ("format", "family", "families", "parameter_size", "quantization_level", "parent_model")


def introspect(client: EngineClient, process: dict[str, Any] | None) -> NativeObservation:
    seen = NativeObservation(ENGINE)
    version = client.get("/api/version", seen)
    seen.identity["version"] = version.get("version") if isinstance(version, dict) else None
    tags = client.get("/api/tags", seen)
    models = [m for m in (tags.get("models") or []) if isinstance(m, dict)] if isinstance(tags, dict) else []
    listed: list[dict[str, Any]] = []
    for model in sorted(models, key=lambda m: str(m.get("name"))):
        name = model.get("name") or model.get("model")
        entry: dict[str, Any] = {"name": name, "digest": model.get("digest")}
        show = client.post("/api/show", seen, {"model": name}) if name else None
        if isinstance(show, dict):
            entry["details"] = pick(show.get("details"), _DETAILS)
            entry["parameters"] = show.get("parameters") if isinstance(show.get("parameters"), str) else None
        listed.append(entry)
    seen.identity["models"] = listed
    running = client.get("/api/ps", seen)
    if isinstance(running, dict) and isinstance(running.get("models"), list):
        seen.volatile["resident"] = [pick(m, ("name", "digest", "size_vram", "expires_at"))
                                     for m in running["models"] if isinstance(m, dict)]
    # Ollama keeps weights in its blob store under the digest: no file path to compare with [artifact]
    return seen
