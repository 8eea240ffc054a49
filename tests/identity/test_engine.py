"""A harness that runs in a venv: the packages of the system under test are read in that venv.

A venv's python resolves to its base interpreter, and the harness record keeps the resolved path (one
interpreter under two names is one system). Started by that path, the base interpreter sees none of the
venv's packages, so a grader, tool or workflow package, or an in-process engine, installed only in the
venv would be pinned as missing (or with the base's version). Real venv, real interpreter runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from execsys import declaration
from execsys.identity import pin


def _venv_with(tmp_path: Path, distributions: dict[str, str]) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120,
                   capture_output=True)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    for name, version in distributions.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return venv / "bin" / "python"


def test_a_harness_in_a_venv_has_its_packages_and_engine_read_in_that_venv(tmp_path: Path) -> None:
    python = _venv_with(tmp_path, {"evalkit": "3.1.4", "llama_cpp_python": "9.9.9"})
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(
        '[artifact]\npath = "model.bin"\n[runtime]\nengine = "llama-cpp-python"\n'
        f'[harness]\ncommands = ["{python} -c pass"]\n'
        '[grader]\npackages = ["evalkit"]\n[tools]\npackages = ["evalkit"]\n[workflow]\npackages = ["evalkit"]\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    interpreter = identity.observed("harness")["commands"][0]["interpreter"]
    assert interpreter["prefix"] == str(tmp_path / "venv") and interpreter["executable"] == os.path.realpath(python)
    for name in ("grader", "tools", "workflow"):
        assert identity.observed(name)["packages"] == {"interpreter": os.path.realpath(python),
                                                       "versions": {"evalkit": "3.1.4"}}, name
    engine = identity.observed("runtime")["engine"]
    assert (engine["version"], engine["found_in"]) == ("9.9.9", "the harness's interpreter")
