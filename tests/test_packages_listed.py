"""Every package directory of the source tree installs: pyproject.toml lists packages by hand (doctor/,
probes/ and tui/ map to execsys.doctor, execsys.probes and execsys.tui), so a new subpackage that is not
listed is missing from the wheel -- and from the installed layout import-linter and pyright read -- while
every test of the editable checkout still passes. The fleet split (execsys/fleet/) was one."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_directory_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, directory in setuptools["package-dir"].items():
        base = ROOT / directory
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            relative = init.parent.relative_to(base).parts
            found.add(".".join((package, *relative)))
    assert found - listed == set(), f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert listed - found == set(), f"listed but not a package directory: {sorted(listed - found)}"
