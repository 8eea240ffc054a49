"""Show a declared value in one text field and read it back: strings as typed, the rest as TOML.

A form field holds text; the declaration holds typed TOML values. Lists and tables are edited
as TOML inline values (``["a", "b"]``, ``{ KEY = "v" }``), and read back by the same TOML parser
the declaration loader uses, so what the form saves is exactly what ``execsys.toml`` would say.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # pyright: ignore[reportMissingImports]  (Python 3.10 only)

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def to_field(value: Any) -> str:
    """The text a form field shows for a declared value (empty when not declared)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return toml_inline(value)


def toml_inline(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_inline(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_key(k)} = {toml_inline(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    return json.dumps(str(value), ensure_ascii=False)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def from_field(text: str, expected: Any) -> Any:
    """Parse a field's text for a key of type ``expected`` (a SCHEMA entry); '' means not declared.

    Raises ValueError naming what was expected when the text is not such a value.
    """
    text = text.strip()
    if not text:
        return None
    if expected is str:
        return text
    if expected == (int, str):  # e.g. a reasoning budget: a number or a word
        try:
            return int(text)
        except ValueError:
            return text
    expected_words = {bool: "must be true or false", int: "must be an integer", list: 'must be a list, e.g. ["a", "b"]',
                      dict: 'must be a table, e.g. { KEY = "value" }'}
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError as exc:
        words = expected_words.get(expected, "must be a number" if expected == (int, float) else "must be a TOML value")
        raise ValueError(f"{words} ({exc})") from None
    if expected is bool and not isinstance(value, bool):
        raise ValueError("must be true or false")
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError("must be an integer")
    if expected == (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError("must be a number")
    if expected is list and not isinstance(value, list):
        raise ValueError('must be a list, e.g. ["a", "b"]')
    if expected is dict and not isinstance(value, dict):
        raise ValueError('must be a table, e.g. { KEY = "value" }')
    return value


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested observations as ``(dotted.key, text)`` lines, for a read-only view."""
    if isinstance(value, dict):
        lines: list[tuple[str, str]] = []
        for key, item in value.items():
            lines.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return lines or [(prefix, "{}")] if prefix else lines
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        lines = []
        for index, item in enumerate(value):
            lines.extend(flatten(item, f"{prefix}[{index}]"))
        return lines
    if value is None:
        return [(prefix, MISSING)]
    return [(prefix, value if isinstance(value, str) else toml_inline(value))]


def declaration_text(tables: dict[str, dict[str, Any]]) -> str:
    """``execsys.toml`` text for declaration tables, in the declaration's own table order."""
    from execsys.declaration import SCHEMA

    lines = ["# execsys.toml: the declared execution system (written by execsys tui)", ""]
    for name in SCHEMA:
        table = tables.get(name)
        if not table:
            continue
        lines.append(f"[{name}]")
        for key, value in table.items():
            lines.append(f"{_key(key)} = {toml_inline(value)}")
        lines.append("")
    return "\n".join(lines)


# -- placeholders: an example, never mistakable for a value -------------------------------

EXAMPLE_PREFIX = "e.g. "
"""Every placeholder starts with these words, so an empty field never reads as a declared value
(dimmed text alone is lost under NO_COLOR or on a monochrome terminal)."""

EXAMPLES: dict[str, dict[str, str]] = {
    "model": {"name": "Qwen2.5-7B-Instruct", "revision": "a09a3545", "source": "hf:Qwen/Qwen2.5-7B-Instruct",
              "family": "qwen2"},
    "artifact": {"path": "/srv/models/qwen2.5-7b-q4_k_m.gguf", "quantization": "Q4_K_M", "adapter": "adapters/lora",
                 "format": "gguf", "digest": "blake3 of the files (pin fills it)"},
    "runtime": {"engine": "vllm", "version": "0.6.3", "endpoint": "http://127.0.0.1:8000/v1",
                "restart": "systemctl restart vllm", "ready": "http://127.0.0.1:8000/health", "ready_timeout": "120",
                "env_file": "engine.env", "api_key_env": "OPENAI_API_KEY", "process": "vllm",
                "flags": '["--max-model-len", "8192"]'},
    "hardware": {"host": "gpu1", "gpu": "NVIDIA H200", "gpu_count": "1", "accelerator": "cuda"},
    "harness": {"repo": ".", "commands": '["python eval.py"]', "version": "1.4.0", "name": "lm-eval"},
    "context_policy": {"max_context": "8192", "truncation": "left", "template": "chatml",
                       "system_prompt": "You are a careful assistant."},
    "retrieval": {"enabled": "false", "index": "indexes/wiki.faiss", "top_k": "5", "embedder": "bge-small-en",
                  "corpus": "corpus/wiki.jsonl"},
    "tools": {"enabled": '["python", "search"]', "versions": '{ python = "3.11" }'},
    "workflow": {"name": "single-turn", "steps": '["plan", "answer"]', "max_turns": "4"},
    "budget": {"temperature": "0.0", "top_p": "1.0", "top_k": "1", "seed": "7", "max_tokens": "512",
               "reasoning_budget": "1024", "repeat_penalty": "1.0", "stop": '["</s>"]'},
    "grader": {"name": "exact-match", "command": "python grade.py", "version": "2", "model": "gpt-4o-2024-08-06"},
    "environment": {"variables": '{ CUDA_VISIBLE_DEVICES = "0" }', "layers": '["ssh gpu1"]', "hosts": '["gpu1"]',
                    "env_file": ".env", "shell": "bash"},
}

_BY_TYPE = {bool: "true", int: "8", list: '["a", "b"]', dict: '{ KEY = "value" }'}


def placeholder(component: str, key: str, expected: Any = str) -> str:
    """The placeholder of a form field: ``e.g. <example>``; free-text notes say what they are for."""
    example = EXAMPLES.get(component, {}).get(key)
    if example is None:
        if key == "notes":
            return f"{EXAMPLE_PREFIX}anything a reader should know"
        example = _BY_TYPE.get(expected, "1.0" if expected == (int, float) else "text")
    return f"{EXAMPLE_PREFIX}{example}"


# -- declared beside observed: compare like with like ------------------------------------------

OBSERVED_AS: dict[str, dict[str, str]] = {
    "runtime": {"engine.name": "engine", "engine.version": "version", "endpoint.url": "endpoint"},
    "hardware": {"hostname": "host", "gpus[*].name": "gpu"},
    "environment": {"shell.name": "shell"},
}
"""Observed keys that answer a declared key spelled differently (``[*]`` stands for any index):
the observer records what it read (``engine.name``, ``gpus[0].name``), the declaration says
what was meant (``engine``, ``gpu``); without this map ``=`` could never show for them."""

PATH_KEYS = {("artifact", "path"), ("artifact", "adapter"), ("harness", "repo"), ("runtime", "env_file"),
             ("environment", "env_file")}
"""Declared keys holding paths: compared resolved (relative to the declaration's directory)."""

MISSING = "– (none observed)"
"""How a value the observer found no answer for reads: never ``None``."""

SAME, DIFFERS, OBSERVED_ONLY = "=", "≠", "◇"


def declared_key_for(component: str, observed_key: str, declared: dict[str, Any]) -> str | None:
    """The declared key an observed line answers, or None when nothing declared speaks to it."""
    pattern = re.sub(r"\[\d+\]", "[*]", observed_key)
    mapped = OBSERVED_AS.get(component, {}).get(pattern)
    if mapped is not None:
        return mapped
    return observed_key if observed_key in declared else None


def compare_observed(component: str, declared: dict[str, Any], observed: Any,
                     base_dir: Any = None) -> list[tuple[str, str, str]]:
    """Each observed line as ``(mark, dotted key, text)``: ``=`` as declared, ``≠`` differs, ``◇`` observed only.

    Paths are compared resolved, so a relative declared path and the same file's absolute observed
    path are ``=``; a declared value with nothing observed for it stays ``◇`` only if it was not declared.
    """
    rows: list[tuple[str, str, str]] = []
    for key, text in flatten(observed) if observed else []:
        declared_key = declared_key_for(component, key, declared)
        wanted = declared.get(declared_key) if declared_key is not None else None
        if declared_key is None or to_field(wanted) == "":
            rows.append((OBSERVED_ONLY, key, text))
            continue
        rows.append((SAME if _same(component, declared_key, wanted, text, base_dir) else DIFFERS, key, text))
    return rows


def _same(component: str, key: str, wanted: Any, observed_text: str, base_dir: Any) -> bool:
    if observed_text == MISSING:
        return False
    if (component, key) in PATH_KEYS and isinstance(wanted, str):
        import os
        from pathlib import Path

        from execsys.observe.artifact import resolve

        base = Path(base_dir) if base_dir is not None else None
        return os.path.realpath(resolve(wanted, base)) == os.path.realpath(resolve(observed_text, base))
    if (component, key) == ("runtime", "engine") and isinstance(wanted, str):
        from execsys.observe.vocabulary import canonical_engine  # `llamacpp` and `llama.cpp` are one engine

        return canonical_engine(wanted) == canonical_engine(observed_text)
    return to_field(wanted) == observed_text
