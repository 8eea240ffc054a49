"""Every module of the package is placed in a layer: the import-linter contracts can only enforce the
layers for modules they name (pyproject.toml [tool.importlinter]; run by scripts/static-checks.sh)."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
FACES = {"execsys.commands", "execsys.tui", "execsys.cli", "execsys.console", "execsys.__main__", "execsys.data"}


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def _top_level_modules() -> set[str]:
    names = {f"execsys.{p.stem}" for p in (ROOT / "execsys").glob("*.py") if p.stem != "__init__"}
    names |= {f"execsys.{p.name}" for p in (ROOT / "execsys").iterdir() if (p / "__init__.py").exists()}
    return names | {"execsys.doctor", "execsys.probes", "execsys.tui"}


def test_every_module_is_an_engine_or_a_face() -> None:
    engines = set(_contracts()["engines-below-faces"]["source_modules"])
    modules = _top_level_modules()
    unplaced = sorted(modules - engines - FACES)
    assert not unplaced, f"add these to a layer in pyproject.toml [tool.importlinter]: {unplaced}"
    assert not engines & FACES
    assert engines <= modules, f"contracts name modules that do not exist: {sorted(engines - modules)}"


def test_the_engines_may_not_reach_the_faces_or_rendering_libraries() -> None:
    forbidden = set(_contracts()["engines-below-faces"]["forbidden_modules"])
    assert {"execsys.commands", "execsys.tui", "textual", "rich"} <= forbidden


def test_every_engine_module_has_one_place_in_the_engine_layers() -> None:
    """A new engine module must be placed in operations > doctor/probes > identity > observe > foundation,
    or the layers contract cannot see it reach upwards."""
    contract = _contracts()["engine-layers"]
    placed = [f"execsys.{name.strip()}" for layer in contract["layers"]
              for name in layer.replace("|", ":").split(":")]
    assert len(placed) == len(set(placed)), "a module is in two layers"
    engines = set(_contracts()["engines-below-faces"]["source_modules"])
    assert set(placed) == engines, (f"not layered: {sorted(engines - set(placed))}; "
                                    f"not an engine: {sorted(set(placed) - engines)}")
