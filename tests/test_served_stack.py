"""The serving stack, read from the serving process's own interpreter: a real venv (no system
site-packages: llama-cpp-python and numpy installed into it, from pip's cache) serving a real
llama-cpp-python server. Nothing is expected of the base interpreter behind the venv."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from execsys.observe.stack import container_of, observe_stack, stack_distributions, torch_build
from tests.fixtures.llama import LlamaServer


class VenvLlamaServer(LlamaServer):
    """The suite's llama-cpp-python server, run by another interpreter."""

    def __init__(self, python: Path, model: Path):
        super().__init__(model)
        self.python = python

    @property
    def argv(self) -> list[str]:
        return [str(self.python), *super().argv[1:]]


@pytest.fixture(scope="module")
def serving_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv of its own (pip in it by ensurepip, no system site-packages) with the test venv's
    llama-cpp-python (its server extra) and numpy installed into it: pip's cache holds both wheels, so
    this is a local install, not a build."""
    pytest.importorskip("llama_cpp")
    venv = tmp_path_factory.mktemp("serving") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    f"llama-cpp-python[server]=={version('llama_cpp_python')}", f"numpy=={version('numpy')}"],
                   check=True, timeout=600)
    return venv


def test_stack_distributions_keeps_the_serving_libraries_and_every_nvidia_wheel() -> None:
    dists = ["torch==2.5.1", "nvidia-cublas-cu12==12.4.5.8", "nvidia-nccl-cu12==2.21.5", "requests==2.32.3",
             "vllm==0.6.3.post1", "flashinfer-python==0.2.0"]
    assert stack_distributions(dists) == {"flashinfer-python": "0.2.0", "nvidia-cublas-cu12": "12.4.5.8",
                                          "nvidia-nccl-cu12": "2.21.5", "torch": "2.5.1", "vllm": "0.6.3.post1"}


def test_torch_build_is_read_from_version_py_without_importing(tmp_path: Path) -> None:
    # torch's generated torch/version.py, as the 2.5.1+cu124 wheel ships it
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(
        "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
        "__version__ = '2.5.1+cu124'\ndebug = False\ncuda: Optional[str] = '12.4'\n"
        "git_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'\nhip: Optional[str] = None\n"
        "raise SystemExit('importing this file is not reading it')\n")
    facts = torch_build([str(tmp_path / "elsewhere"), str(tmp_path)])
    assert facts is not None
    assert (facts["version"], facts["cuda"], facts["hip"]) == ("2.5.1+cu124", "12.4", None)
    assert facts["git_version"].startswith("a8d6afb5")


def test_the_serving_venv_s_distributions_are_what_pin_records(cli, tmp_path: Path, serving_venv: Path,
                                                                tiny_gguf: Path) -> None:
    python = serving_venv / "bin" / "python"
    server = VenvLlamaServer(python, tiny_gguf)
    with server:
        server.start()
        stack = observe_stack({"exe": str(python)}, server.pid)
        (tmp_path / "execsys.toml").write_text(
            f'[artifact]\npath = "{tiny_gguf}"\n[runtime]\nengine = "llama-cpp-python"\n'
            f'endpoint = "{server.base_url}"\n')
        pinned = cli("pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    assert stack["interpreter"]["prefix"] == str(serving_venv)
    # installed in the venv itself, read as files
    assert stack["distributions"]["llama-cpp-python"] == version("llama_cpp_python")
    assert stack["distributions"]["numpy"] == version("numpy")
    assert "pip" not in stack["distributions"]  # installed in the venv itself, but no serving library
    assert stack["torch"] == {"verdict": "not installed in the serving interpreter"}
    assert stack["container"]["verdict"] in ("not in a container", "image", "unverifiable")
    # one container verdict: the stack's agrees with the environment component's
    environment = pinned.json()["components"]["environment"]["observed"]["container"]
    if environment == "none":
        assert stack["container"]["verdict"] == "not in a container"
    else:
        assert stack["container"]["verdict"] != "not in a container"
        assert stack["container"]["container"] == environment
    runtime = pinned.json()["components"]["runtime"]["observed"]
    recorded = runtime["stack"]
    assert recorded["interpreter"]["executable"] == os.path.realpath(python)
    assert recorded["interpreter"]["prefix"] == str(serving_venv)
    assert recorded["distributions"] == stack["distributions"]
    # the engine's version, too, is the venv's: the base interpreter behind it has none
    assert runtime["process"]["interpreter"] == str(python)
    assert (runtime["engine"]["version"], runtime["engine"]["found_in"]) == (
        version("llama_cpp_python"), "the serving process's interpreter")


def test_container_of_a_process_that_is_gone_is_unverifiable() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    result = container_of(proc.pid)
    assert result["verdict"] == "unverifiable" and f"/proc/{proc.pid}/cgroup" in result["reason"]


def test_gpu_topology_agrees_with_nvidia_smi() -> None:
    import shutil

    from execsys.observe.stack import gpu_topology

    topology = gpu_topology()
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30) if smi else None
    if listed is None or listed.returncode != 0:
        assert topology["verdict"] == "unverifiable" and topology["reason"]
        return
    count = len([line for line in listed.stdout.splitlines() if line.startswith("GPU ")])
    assert len(topology["gpus"]) == count and topology["peers"] == count - 1
    assert len(topology["pairs"]) == count * (count - 1) // 2
    status = subprocess.run([smi, "nvlink", "--status", "-i", "0"], capture_output=True, text=True, timeout=30)
    active = len([line for line in status.stdout.splitlines() if "GB/s" in line])
    assert topology["gpus"][0]["nvlink_active_links"] == active
