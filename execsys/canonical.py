"""Canonical JSON and content ids.

An identity id must be the same for the same system on every run, so the JSON
it is computed over has one spelling: sorted keys, no insignificant
whitespace, UTF-8.
"""

from __future__ import annotations

import json
from typing import Any

import blake3


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def content_id(obj: Any) -> str:
    """BLAKE3 hex of the canonical JSON of ``obj``."""
    return blake3.blake3(canonical_json(obj)).hexdigest()


def short(digest: str | None, n: int = 12) -> str:
    return (digest or "")[:n]
