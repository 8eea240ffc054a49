"""Observe the chat template the engine actually applies, and whether it is the declared one.

A flip that no decoding margin explains is often a template change: a tokenizer revision or an
engine upgrade renders the same messages into different tokens. Where the engine says what it
applies -- llama.cpp's ``/props`` (``chat_template``), a GGUF's ``tokenizer.chat_template``, a
model directory's ``tokenizer_config.json`` -- its BLAKE3 is recorded, and compared with the ``[context_policy]
template`` file when one is declared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import blake3

PROPS_TIMEOUT_S = 5.0


def _template_text(value: Any) -> str | None:
    """A template as configs hold it: a string, or Hugging Face's list of ``{name, template}`` (the default)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list):
        named = {str(t.get("name")): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default") or next(iter(named.values()), None)
        return chosen if isinstance(chosen, str) and chosen else None
    return None


def _from_props(endpoint: str, api_key: str | None) -> str | None:
    import httpx

    from execsys.observe.http import Unanswered, fetch_bounded, observation_client
    from execsys.observe.vocabulary import api_and_root

    _api, root = api_and_root(endpoint)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        # the same overall deadline and size cap as every observation request: a trickling /props never hangs pin
        with observation_client(root, timeout=PROPS_TIMEOUT_S, headers=headers) as client:
            response = fetch_bounded(client, "GET", f"{root}/props", budget=PROPS_TIMEOUT_S)
        if response.status != 200:
            return None
        data = response.json()
    except (httpx.HTTPError, ValueError, Unanswered):
        return None
    return _template_text(data.get("chat_template")) if isinstance(data, dict) else None


def _from_artifact(artifact_path: str, base_dir: Path) -> tuple[str, str] | None:
    """A GGUF's own ``tokenizer.chat_template`` (what llama.cpp applies unless told otherwise), or a model
    directory's ``tokenizer_config.json``."""
    from execsys.observe.artifact import GGUFError, read_gguf_metadata, resolve

    path = resolve(artifact_path, base_dir)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            return None
        try:
            found = read_gguf_metadata(path, {"tokenizer.chat_template"}).get("tokenizer.chat_template")
        except (OSError, GGUFError):
            return None
        return (found, "the GGUF's tokenizer.chat_template") if isinstance(found, str) and found else None
    config = path / "tokenizer_config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    text = _template_text(data.get("chat_template")) if isinstance(data, dict) else None
    return (text, "tokenizer_config.json chat_template") if text else None


def text_digest(text: str) -> str:
    return blake3.blake3(text.encode("utf-8")).hexdigest()


def observe_applied_template(runtime: dict[str, Any], artifact: dict[str, Any], declared_template: str | None,
                             base_dir: Path) -> dict[str, Any] | None:
    """``{source, digest, matches_declared?}`` of the template the engine applies; None when nothing says."""
    import os

    from execsys.observe.artifact import resolve

    found: tuple[str, str] | None = None
    endpoint = runtime.get("endpoint")
    if isinstance(endpoint, str) and endpoint:
        api_key = os.environ.get(runtime["api_key_env"]) if runtime.get("api_key_env") else None
        text = _from_props(endpoint, api_key)
        if text:
            found = (text, "the endpoint's /props chat_template")
    if found is None and isinstance(artifact.get("path"), str) and artifact["path"]:
        found = _from_artifact(artifact["path"], base_dir)
    if found is None:
        return None
    text, source = found
    observed: dict[str, Any] = {"source": source, "digest": text_digest(text)}
    if declared_template:
        path = resolve(declared_template, base_dir)
        try:
            declared_text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            observed["matches_declared"] = None
        else:
            # a file usually ends in a newline the engine's copy does not keep
            observed["matches_declared"] = declared_text in (text, text + "\n") or declared_text.rstrip("\n") == text
    return observed
