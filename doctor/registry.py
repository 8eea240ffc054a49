"""The ten hazards, in the order they are checked and shown.

An explicit list rather than discovery: adding a hazard is one new module under
``hazards/`` (with ``ID``, ``TITLE``, ``FINDINGS`` -- the kinds of finding it emits, each
``<ID>/<kind>`` -- and ``check(ctx)``) and one line here, and
nothing else changes -- the CLI, the TUI, the remote bundle and the JSON all
read this list.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple


class Hazard(NamedTuple):
    id: str
    title: str
    module: str  # under execsys.doctor.hazards


HAZARDS: tuple[Hazard, ...] = (
    Hazard("binary-aliasing", "Which binary actually runs", "binary_aliasing"),
    Hazard("interop-mangling", "Arguments across layers", "interop_mangling"),
    Hazard("stub-executables", "Executables that cannot run", "stub_executables"),
    Hazard("unread-env-config", "Declared vs live environment", "unread_env_config"),
    Hazard("baked-paths", "Absolute paths baked into files", "baked_paths"),
    Hazard("package-prefixes", "Which prefix packages come from", "package_prefixes"),
    Hazard("lost-mode-bits", "Execute bits lost in the tree", "lost_mode_bits"),
    Hazard("port-collisions", "Who answers on the declared ports", "port_collisions"),
    Hazard("clock-skew", "Clock synchronisation", "clock_skew"),
    Hazard("model-name-honesty", "Model names the endpoint answers", "model_name_honesty"),
)

IDS: tuple[str, ...] = tuple(h.id for h in HAZARDS)
_BY_ID = {h.id: h for h in HAZARDS}


def get(hazard_id: str) -> Hazard:
    try:
        return _BY_ID[hazard_id]
    except KeyError:
        raise KeyError(f"unknown hazard {hazard_id!r} (known: {', '.join(IDS)})") from None


def load(hazard_id: str):
    """The module implementing ``hazard_id``; it exposes ``check(ctx) -> HazardResult``."""
    return importlib.import_module(f"execsys.doctor.hazards.{get(hazard_id).module}")


def title(hazard_id: str) -> str:
    return get(hazard_id).title


def finding_ids() -> frozenset[str]:
    """Every finding id the hazard checks declare (each module's ``FINDINGS``, as ``<hazard>/<kind>``):
    the ids ``[doctor] accept`` may name. The runner's own ``error`` rows (a check that crashed, a
    host not inspected) are not among them: a check that could not look is never accepted."""
    return frozenset(f"{hazard.id}/{kind}" for hazard in HAZARDS for kind in load(hazard.id).FINDINGS)
