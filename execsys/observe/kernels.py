"""Observed kernels and backends: what the engine's start-up log says it selected.

The declared quantization format names the weights; the kernels that run them are the engine's
choice at start-up, and it says so only in its log ("Weight-only FP4 compression will be used
leveraging the Marlin kernel", "Using Flash Attention backend on V1 engine."). The patterns are
data (``execsys/data/kernel_patterns.toml``: engine, version range, kind, fallback formats,
source); this module reads ``[runtime] log`` (or ``--engine-log``) against them into
``runtime.observed.kernels``, each with the matched text as evidence (from the match on: the
timestamps before it would move the id at every restart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from execsys.declaration import loads_toml
from execsys.errors import InputError
from execsys.redact import redact_text

# a start-up log worth reading is at its end; a log that grew for months is read from its tail
MAX_LOG_BYTES = 16 << 20
_ENGINE_KEYS = {"llama-cpp-python": "llama.cpp", "llamacpp": "llama.cpp"}


@dataclass(frozen=True)
class KernelPattern:
    id: str
    engine: str
    versions: str
    kind: str
    regex: re.Pattern[str]
    value: str | None
    fallback: bool
    formats: tuple[str, ...]
    source: str


@lru_cache(maxsize=1)
def patterns() -> tuple[KernelPattern, ...]:
    text = resources.files("execsys.data").joinpath("kernel_patterns.toml").read_text(encoding="utf-8")
    data = loads_toml(text)
    return tuple(KernelPattern(id=p["id"], engine=p["engine"], versions=p.get("versions", ""), kind=p["kind"],
                               regex=re.compile(p["regex"]), value=p.get("value"), fallback=bool(p["fallback"]),
                               formats=tuple(p.get("formats", [])), source=p["source"])
                 for p in data["pattern"])


def _version_tuple(text: str) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(x) for x in match.group(1).split(".")) if match else None


def version_in_range(version: str | None, spec: str) -> bool:
    """``spec`` is ">=A", "<B", ... comma-separated; an unknown version is in every range."""
    have = _version_tuple(version or "")
    if have is None or not spec.strip():
        return True
    for part in spec.split(","):
        match = re.match(r"\s*(>=|<=|<|>|==)\s*(\S+)\s*$", part)
        bound = _version_tuple(match.group(2)) if match else None
        if not match or bound is None:
            continue
        op = match.group(1)
        width = max(len(have), len(bound))
        a, b = have + (0,) * (width - len(have)), bound + (0,) * (width - len(bound))
        if not {">=": a >= b, "<=": a <= b, "<": a < b, ">": a > b, "==": a == b}[op]:
            return False
    return True


def _engine_key(engine: str | None) -> str | None:
    from execsys.observe.vocabulary import canonical_engine

    name = canonical_engine(engine)
    return _ENGINE_KEYS.get(name or "", name)


def scan_lines(lines: list[str], engine: str | None, version: str | None = None) -> list[dict[str, Any]]:
    """Matches of the patterns for ``engine`` (all engines' when None), the last per pattern and module."""
    key = _engine_key(engine)
    chosen = [p for p in patterns() if (key is None or p.engine == key) and version_in_range(version, p.versions)]
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for line in lines:
        text = line.rstrip("\r\n")
        for pattern in chosen:
            match = pattern.regex.search(text)
            if match is None:
                continue
            groups = match.groupdict()
            value = groups.get("value") or pattern.value or match.group(0)
            found = {"pattern": pattern.id, "engine": pattern.engine, "kind": pattern.kind, "value": value,
                     "fallback": pattern.fallback, "formats": list(pattern.formats),
                     "evidence": redact_text(text[match.start():][:240]), "source": pattern.source}
            if groups.get("module"):
                found["module"] = groups["module"]
            last[(pattern.id, groups.get("module") or "")] = found
    order = {p.id: i for i, p in enumerate(patterns())}
    return sorted(last.values(), key=lambda m: (order[m["pattern"]], m.get("module") or ""))


def observe_kernels(log_path: str | Path, engine: str | None, version: str | None = None) -> dict[str, Any]:
    """``{"log", "found": [...]}`` from an engine log. Raises InputError when the declared log cannot be read."""
    path = Path(log_path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if size > MAX_LOG_BYTES:
                fh.seek(size - MAX_LOG_BYTES)
            text = fh.read().decode("utf-8", "replace")
    except OSError as exc:
        raise InputError(f"engine log {path}: {exc.strerror or exc}") from exc
    return {"log": str(path), "found": scan_lines(text.splitlines(), engine, version)}


def fallbacks_for(kernels: dict[str, Any] | None, fmt: str) -> list[dict[str, Any]]:
    """The observed fallback matches that concern format ``fmt``."""
    found = (kernels or {}).get("found") or []
    return [m for m in found if isinstance(m, dict) and m.get("fallback") and fmt in (m.get("formats") or [])]
