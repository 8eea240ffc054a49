"""The harnesses execsys recognises, in the order they are tried: one line each, ``other`` last."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from execsys.harnesses import inspect, lm_eval, other
from execsys.harnesses.base import RECEIPT_SUFFIX, SIDECAR_SUFFIX, HarnessAdapter

ADAPTERS: list[HarnessAdapter] = [
    lm_eval.ADAPTER,
    inspect.ADAPTER,
    other.ADAPTER,
]


def for_command(argv: Sequence[str]) -> HarnessAdapter:
    """The harness a command line runs (``other`` when none is recognised)."""
    return next(adapter for adapter in ADAPTERS if adapter.matches(argv))


def by_name(name: str) -> HarnessAdapter:
    return next((a for a in ADAPTERS if a.name == name), other.ADAPTER)


def for_file(path: Path) -> HarnessAdapter:
    """The harness whose result file this is (``other`` when no known harness claims it)."""
    return next(adapter for adapter in ADAPTERS if adapter.owns(path))


def is_sidecar(path: Path) -> bool:
    """A sidecar or a receipt execsys wrote: never a result of a later run, nor one to attach to."""
    return path.name.endswith((SIDECAR_SUFFIX, RECEIPT_SUFFIX))
