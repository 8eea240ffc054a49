"""Observe the hardware component: host, OS, CPU, memory, virtualization and every GPU.

Only stable facts go in (no uptime, no free memory, no temperatures), because the
identity id is computed over them and the same machine must get the same id.

This file runs with nothing but the standard library: psutil, distro and pynvml
are used when importable and fallbacks (``/proc``, ``/etc/os-release``,
``nvidia-smi``) otherwise, because placement checks send its source over SSH to
hosts where execsys is not installed (:func:`observe_remote_hardware`). A machine
without an NVIDIA driver has ``gpus: []`` and a note, which is a fact, not an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from typing import Any

try:
    import psutil
except ImportError:  # pragma: no cover - remote hosts without psutil
    psutil = None  # type: ignore[assignment]

try:
    import distro
except ImportError:  # pragma: no cover
    distro = None  # type: ignore[assignment]


def _run(argv: list[str], timeout: float = 5.0) -> str | None:
    """stdout of a short command, or None. Plain subprocess: this module also runs on remote hosts."""
    try:
        res = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.decode("utf-8", "replace") if res.returncode == 0 else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def machine_id() -> str | None:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        text = (_read(path) or "").strip()
        if text:
            return text
    return None


def os_info() -> dict[str, Any]:
    if distro is not None:
        # Where os-release exists it answers all four fields; distro would still run `lsb_release -a`
        # (a Python script: 0.05-0.3 s) and `uname -rs` on every pin and verify to rank the answers.
        has_os_release = any(os.path.isfile(p) for p in ("/etc/os-release", "/usr/lib/os-release"))
        found = distro.LinuxDistribution(include_lsb=not has_os_release, include_uname=not has_os_release)
        return {"id": found.id() or None, "name": found.name(pretty=True) or None,
                "version": found.version(best=True) or None, "codename": found.codename() or None}
    fields: dict[str, str] = {}
    for line in (_read("/etc/os-release") or "").splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            fields[key] = value.strip().strip('"')
    return {"id": fields.get("ID"), "name": fields.get("PRETTY_NAME"), "version": fields.get("VERSION_ID"),
            "codename": fields.get("VERSION_CODENAME")}


def cpu_info() -> dict[str, Any]:
    model = None
    flags: set[str] = set()
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    if model is None:
        model = platform.processor() or None
    physical = None
    if psutil is not None:
        try:
            physical = psutil.cpu_count(logical=False)
        except Exception:  # noqa: BLE001 - some containers hide topology
            physical = None
    return {"model": model, "logical_cores": os.cpu_count(), "physical_cores": physical,
            "hypervisor_flag": "hypervisor" in flags}


def memory_total_bytes() -> int | None:
    if psutil is not None:
        return int(psutil.virtual_memory().total)
    match = re.search(r"MemTotal:\s+(\d+) kB", _read("/proc/meminfo") or "")
    return int(match.group(1)) * 1024 if match else None


def virtualization(hypervisor_flag: bool = False) -> dict[str, Any]:
    """What the OS runs on: 'none', a hypervisor name, or a container type (systemd-detect-virt when present)."""
    vm = container = None
    if shutil.which("systemd-detect-virt"):
        vm = (_run(["systemd-detect-virt", "--vm"]) or "").strip() or None
        container = (_run(["systemd-detect-virt", "--container"]) or "").strip() or None
    if vm in (None, "none"):
        vendor = " ".join(filter(None, ((_read("/sys/class/dmi/id/sys_vendor") or "").strip(),
                                        (_read("/sys/class/dmi/id/product_name") or "").strip())))
        known = {"QEMU": "qemu", "KVM": "kvm", "VMware": "vmware", "VirtualBox": "oracle", "Xen": "xen",
                 "Microsoft Corporation Virtual": "microsoft", "Amazon EC2": "amazon", "Google Compute": "google"}
        for marker, name in known.items():
            if marker in vendor:
                vm = name
                break
        else:
            vm = "unknown-hypervisor" if hypervisor_flag else (vm or "none")
    if container in (None, "none"):
        container = detect_container() or "none"
    return {"vm": vm, "container": container}


def container_kind(pid: int | None = None) -> tuple[str, str] | None:
    """(the container a process runs in, the sign that says so), or None: ``/.dockerenv`` or
    ``/run/.containerenv`` in its root filesystem, ``container=`` in its environment, a runtime's name in
    the cgroup of its pid 1. ``pid`` None is this process. The environment component and the serving
    stack both ask this, so one machine gets one container verdict."""
    root = "/" if pid is None else f"/proc/{pid}/root/"
    for marker, kind in ((".dockerenv", "docker"), ("run/.containerenv", "podman")):
        if os.path.exists(root + marker):
            return kind, "/" + marker
    if pid is None:
        env = os.environ.get("container")  # noqa: SIM112 - systemd and podman set it lower-case
    else:
        raw = b""
        with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read(1 << 20)
        env = next((os.fsdecode(e[10:]) for e in raw.split(b"\0") if e.startswith(b"container=")), None)
    if env:
        return env, "container= in its environment"
    cgroup = _read("/proc/1/cgroup" if pid is None else f"{root}proc/1/cgroup") or ""
    for marker in ("docker", "kubepods", "containerd", "lxc", "libpod"):
        if marker in cgroup:
            return marker, "the cgroup of its pid 1"
    return None


def detect_container() -> str | None:
    found = container_kind()
    return found[0] if found else None


# -- GPUs ---------------------------------------------------------------------------------------


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def gpus_via_nvml() -> tuple[list[dict[str, Any]] | None, str | None]:
    """(gpus, note). gpus is None when NVML is unusable (then try nvidia-smi)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"no NVIDIA driver ({_text(str(exc)) or type(exc).__name__})"
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        except Exception:  # noqa: BLE001
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        cuda_version = f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else None
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu: dict[str, Any] = {
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                "driver_version": driver,
                "cuda_version": cuda_version,
            }
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                gpu["compute_capability"] = f"{major}.{minor}"
            except Exception:  # noqa: BLE001
                gpu["compute_capability"] = None
            try:
                current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
                gpu["mig_mode"] = "enabled" if current else "disabled"
            except Exception:  # noqa: BLE001 - NotSupported on consumer GPUs
                gpu["mig_mode"] = "unsupported"
            try:
                current, _pending = pynvml.nvmlDeviceGetEccMode(handle)
                gpu["ecc_mode"] = "enabled" if current else "disabled"
            except Exception:  # noqa: BLE001
                gpu["ecc_mode"] = "unsupported"
            gpus.append(gpu)
        return gpus, None
    except Exception as exc:  # noqa: BLE001
        return None, f"NVML query failed ({exc})"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def gpus_via_nvidia_smi() -> tuple[list[dict[str, Any]] | None, str | None]:
    if not shutil.which("nvidia-smi"):
        return None, None
    fields = "index,name,uuid,memory.total,compute_cap,driver_version,mig.mode.current,ecc.mode.current"
    out = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"], timeout=15)
    if out is None:
        return None, "nvidia-smi failed"
    header = _run(["nvidia-smi"], timeout=15) or ""
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 8:
            continue
        gpus.append({
            "index": int(parts[0]), "name": parts[1], "uuid": parts[2],
            "memory_total_bytes": int(float(parts[3])) * 1024 * 1024 if parts[3].replace(".", "").isdigit() else None,
            "compute_capability": parts[4] or None, "driver_version": parts[5],
            "cuda_version": cuda.group(1) if cuda else None,
            "mig_mode": parts[6].lower() if parts[6] not in ("[N/A]", "N/A") else "unsupported",
            "ecc_mode": parts[7].lower() if parts[7] not in ("[N/A]", "N/A") else "unsupported",
        })
    return gpus, None


def observe_gpus() -> tuple[list[dict[str, Any]], str | None]:
    gpus, note = gpus_via_nvml()
    if gpus is not None:
        return gpus, None
    smi, smi_note = gpus_via_nvidia_smi()
    if smi is not None:
        return smi, None
    return [], note or smi_note or "no NVIDIA GPU found"


def observe_hardware(declared: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stable facts about this machine (what the ``hardware`` component observes)."""
    cpu = cpu_info()
    gpus, note = observe_gpus()
    # Machine facts only, the same whoever pins and from wherever (audited for issue 17): no uptime, free
    # memory, load, the invoking user's limits or cgroup share, which belong to a moment or an observer.
    observed: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "machine_id": machine_id(),
        "os": os_info(),
        "kernel": platform.release(),
        "architecture": platform.machine(),
        "cpu": {k: v for k, v in cpu.items() if k != "hypervisor_flag"},
        "memory_total_bytes": memory_total_bytes(),
        "virtualization": virtualization(cpu["hypervisor_flag"]),
        "gpus": gpus,
    }
    if note:
        observed["gpu_note"] = note
    return observed


def observe_remote_hardware(dest: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run :func:`observe_hardware` on ``dest`` over SSH (only ``python3`` needed there).

    Raises :class:`execsys.errors.InputError` with a one-line reason when the host cannot be
    reached or its python fails.
    """
    import inspect
    import sys

    from execsys import ssh
    from execsys.errors import InputError

    source = inspect.getsource(sys.modules[__name__])
    # its own namespace, so the module's `__main__` block does not run there
    program = ("_ns = {'__name__': 'execsys_remote_hardware'}\n"
               f"exec(compile({source!r}, 'execsys/observe/hardware.py', 'exec'), _ns)\n"
               "print('EXECSYS-HARDWARE ' + _j.dumps(_ns['observe_hardware'](PAYLOAD)))\n")
    try:
        result = ssh.run_python(dest, program, {}, timeout=timeout)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    for line in result.text().splitlines():
        if line.startswith("EXECSYS-HARDWARE "):
            return json.loads(line[len("EXECSYS-HARDWARE "):])
    raise InputError(f"hardware of {dest}: {ssh.describe_failure(result)}")


if __name__ == "__main__":  # python3 execsys/observe/hardware.py prints this host's hardware facts
    print(json.dumps(observe_hardware(), indent=2))
