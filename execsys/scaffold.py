"""The commented declaration ``execsys init`` writes, pre-filled with what this machine shows.

Engine layer: the CLI's ``init`` and the TUI's Identity form (which pre-fills an empty form the
same way) both call :func:`detect` and :func:`render_template`; neither face owns the detection.
"""

from __future__ import annotations

import json
from pathlib import Path

# ports where common engines listen by default -> engine name
COMMON_PORTS = {8000: "vllm", 30000: "sglang", 8080: "llama.cpp", 11434: "ollama"}
ENGINE_BINARIES = {"vllm": "vllm", "llama-server": "llama.cpp", "ollama": "ollama",
                   "text-generation-launcher": "tgi", "trtllm-serve": "tensorrt-llm"}
ENGINE_PACKAGES = {"vllm": "vllm", "sglang": "sglang", "llama_cpp_python": "llama-cpp-python",
                   "tensorrt_llm": "tensorrt-llm"}


def toml_string(value: str) -> str:
    """A TOML basic string (JSON escapes are valid TOML escapes)."""
    return json.dumps(value, ensure_ascii=False)


def detect() -> dict:
    """What this machine shows: host, GPUs, git repo, engine, endpoint. Every probe is quick and optional."""
    import shutil
    import socket
    from importlib import metadata

    from execsys.observe.hardware import observe_gpus

    found: dict = {"host": socket.gethostname()}
    gpus, _note = observe_gpus()
    if gpus:
        found["gpu"] = gpus[0]["name"]
        found["gpu_count"] = len(gpus)
    try:
        import git

        repo = git.Repo(Path.cwd(), search_parent_directories=True)
        found["repo"] = repo.working_tree_dir
    except Exception:  # noqa: BLE001 - not a repository: nothing to fill in
        pass
    _from_listener(found)
    for package, engine in ENGINE_PACKAGES.items():
        if "engine" in found:
            break
        try:
            metadata.version(package)
            found["engine"] = engine
            break
        except metadata.PackageNotFoundError:
            continue
    if "engine" not in found:
        for binary, engine in ENGINE_BINARIES.items():
            if shutil.which(binary):
                found["engine"] = engine
                break
    for port, engine in COMMON_PORTS.items():
        if "endpoint" in found:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                found["endpoint"] = f"http://127.0.0.1:{port}/v1"
                found.setdefault("engine", engine)
                break
        except OSError:
            continue
    return found


def _from_listener(found: dict) -> None:
    """The first serving engine listening here (the doctor's discovery: its engine processes and socket
    table) fills in the engine, endpoint and process; the weights it says it loaded (vLLM's /v1/models
    ``root``, llama.cpp's /props, SGLang's /get_model_info, the argv's --model) the artifact path."""
    from execsys.observe import engines
    from execsys.observe.listener import engine_listeners

    listening = engine_listeners()
    if not listening:
        return
    first = listening[0]
    found["engine"], found["endpoint"], found["process"] = first["engine"], first["endpoint"], first["process"]
    try:
        native = engines.introspect(first["engine"], first["root"], process={"argv": first["argv"]}, timeout=2.0)
    except Exception:  # noqa: BLE001 - a pre-fill: an engine that answers oddly leaves the path to the user
        native = None
    if native is not None and native.model_path:
        artifact = _served_path(native.model_path, first.get("pid"))
        if artifact is not None:
            found["artifact"] = artifact


def _served_path(model_path: str, pid: int | None) -> str | None:
    """The weights' path as this machine names it: a relative ``--model`` is relative to the serving
    process's working directory, not to the new declaration's. None when no such file or directory is
    here (a hub id such as ``org/model``, a process whose directory cannot be read): a pre-filled
    path that does not exist would make the first ``pin`` fail."""
    import os

    import psutil

    path = model_path
    if not os.path.isabs(path):
        try:
            path = os.path.join(psutil.Process(pid).cwd(), path) if pid else ""
        except (psutil.Error, OSError):
            return None
    return os.path.normpath(path) if path and os.path.exists(path) else None


def render_template(found: dict) -> str:
    from importlib import resources
    from string import Template

    def line(key: str, value, example: str, quote: bool = True) -> str:
        if value is None:
            return f"# {key} = {example}"
        rendered = toml_string(str(value)) if quote else str(value)
        return f"{key} = {rendered}   # detected"

    text = resources.files("execsys.data").joinpath("init_template.toml").read_text(encoding="utf-8")
    return Template(text).substitute(
        artifact_line=line("path", found.get("artifact"), '"models/model.gguf"'),
        engine_line=line("engine", found.get("engine"), '"vllm"        # vllm, sglang, llama.cpp, llama-cpp-python, ...'),
        endpoint_line=line("endpoint", found.get("endpoint"), '"http://127.0.0.1:8000/v1"'),
        process_line=line("process", found.get("process"), '"vllm serve"   # a word of its argv: finds the '
                                                           'serving process when no endpoint is local'),
        host_line=line("host", found.get("host"), '"gpu1"'),
        gpu_line=line("gpu", found.get("gpu"), '"NVIDIA H100 80GB HBM3"'),
        gpu_count_line=line("gpu_count", found.get("gpu_count"), "1", quote=False),
        repo_line=line("repo", found.get("repo"), '"."   # the git repository of the harness'),
    )


def portable_repo_path(repo: Path, config: Path) -> str:
    """The repository as the declaration should name it: relative to the declaration when the
    declaration lives inside it ('.', '..'), so a clone elsewhere still points at itself."""
    import os

    repo, home = repo.resolve(), config.parent.resolve()
    if home == repo or repo in home.parents:
        return Path(os.path.relpath(repo, home)).as_posix()
    return str(repo)
