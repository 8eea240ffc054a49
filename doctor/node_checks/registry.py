"""The node-check modes, one module each; ``execsys doctor --node-check MODE`` reads this list.

Adding an engine is one module under ``node_checks/`` exposing ``ID``, ``SUMMARY`` and
``outcome(verdict, options) -> Outcome``, and one line here.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple


class Mode(NamedTuple):
    id: str
    module: str  # under execsys.doctor.node_checks
    summary: str


MODES: tuple[Mode, ...] = (
    Mode("npd", "npd", "Kubernetes node-problem-detector custom plugin: exit 0/1/2, one line <= 80 bytes"),
    Mode("slurm", "slurm", "Slurm HealthCheckProgram: drains the node itself with --drain on a failing hazard"),
    Mode("slurm-prolog", "slurm_prolog", "Slurm Prolog: only a failing hazard exits 1; cannot-check fails open"),
    Mode("nhc", "nhc", "LBNL NHC: the line and exit code contrib/nhc/execsys.nhc turns into die/return"),
)

IDS: tuple[str, ...] = tuple(m.id for m in MODES)
_BY_ID = {m.id: m for m in MODES}


def get(mode: str) -> Mode:
    try:
        return _BY_ID[mode]
    except KeyError:
        raise KeyError(f"unknown node-check mode {mode!r} (known: {', '.join(IDS)})") from None


def load(mode: str):
    """The module implementing ``mode``; it exposes ``outcome(verdict, options) -> Outcome``."""
    return importlib.import_module(f"execsys.doctor.node_checks.{get(mode).module}")
