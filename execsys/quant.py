"""Will this quantization format run natively on the deployment target, or on a slower fallback?

Vendor quantization formats are not portable across GPU generations: some refuse to load, others
load and silently run on a slower kernel -- the worse outcome, because it looks like it worked.
This module answers the question from a support table shipped as data
(``execsys/data/quant_support.toml``: format x scheme x engine x compute capability, each rule with
its source and as-of date), for a target named as ``sm_XX``, a compute capability, a GPU name,
or ``auto`` (NVML on this machine, or over SSH on ``--host``).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from execsys.declaration import loads_toml
from execsys.errors import InputError

if TYPE_CHECKING:
    from execsys.identity import Identity

ENGINE_ALIASES = {
    "vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm",
    "trt-llm": "trtllm", "llamacpp": "llamacpp", "llama.cpp": "llamacpp", "llama-cpp": "llamacpp",
    "llama_cpp": "llamacpp", "llama-cpp-python": "llamacpp", "llama-server": "llamacpp",
}

# GPU marketing names -> compute capability. Longest key that occurs in the normalised name wins,
# so "rtx 6000 ada" beats "rtx 6000" and "h100" matches "NVIDIA H100 80GB HBM3".
GPU_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "v100": (7, 0), "titan v": (7, 0),
    "t4": (7, 5), "rtx 2080": (7, 5), "rtx 2070": (7, 5), "quadro rtx": (7, 5), "titan rtx": (7, 5),
    "a100": (8, 0), "a30": (8, 0),
    "a10": (8, 6), "a10g": (8, 6), "a40": (8, 6), "a16": (8, 6), "a2": (8, 6), "rtx a6000": (8, 6),
    "rtx a5000": (8, 6), "rtx a4000": (8, 6), "rtx 3090": (8, 6), "rtx 3080": (8, 6), "rtx 3070": (8, 6),
    "rtx 3060": (8, 6),
    "jetson orin": (8, 7), "orin": (8, 7),
    "l4": (8, 9), "l40": (8, 9), "l40s": (8, 9), "l20": (8, 9), "rtx 4090": (8, 9), "rtx 4080": (8, 9),
    "rtx 4070": (8, 9), "rtx 4060": (8, 9), "rtx 6000 ada": (8, 9), "rtx 5000 ada": (8, 9),
    "h100": (9, 0), "h200": (9, 0), "h800": (9, 0), "h20": (9, 0), "gh200": (9, 0),
    "b200": (10, 0), "b100": (10, 0), "gb200": (10, 0),
    "b300": (10, 3), "gb300": (10, 3),
    "rtx 5090": (12, 0), "rtx 5080": (12, 0), "rtx 5070": (12, 0), "rtx 5060": (12, 0),
    "rtx pro 6000": (12, 0), "rtx pro 6000 blackwell": (12, 0),
    "gb10": (12, 1), "dgx spark": (12, 1),
}


@dataclass
class Target:
    """A deployment target resolved to a compute capability."""

    text: str  # what the user gave (or what auto detection found)
    capability: tuple[int, int]
    gpu: str | None = None
    detected_on: str | None = None  # "local", an ssh destination, or None when given explicitly

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def label(self) -> str:
        cc = f"{self.capability[0]}.{self.capability[1]}"
        return f"{self.gpu} ({self.sm}, compute capability {cc})" if self.gpu else f"{self.sm} (compute capability {cc})"


@dataclass
class QuantVerdict:
    format: str
    scheme: str
    engine: str
    target: str
    verdict: Literal["native", "fallback", "unsupported"]
    reason: str
    source: str
    as_of: str
    compute_capability: str = ""
    gpu: str | None = None
    observed: dict[str, Any] | None = None  # what the engine's log says it ran (observed_kernels_check)

    def to_json(self) -> dict[str, Any]:
        extra = {"observed": self.observed} if self.observed is not None else {}
        return {**extra,
            "format": self.format,
            "scheme": self.scheme,
            "engine": self.engine,
            "target": self.target,
            "verdict": self.verdict,
            "reason": self.reason,
            "source": self.source,
            "as_of": self.as_of,
            "compute_capability": self.compute_capability,
            "gpu": self.gpu,
        }


# ------------------------------------------------------------------ the table
@lru_cache(maxsize=1)
def support_table() -> dict[str, Any]:
    """The shipped support table, parsed once."""
    text = resources.files("execsys.data").joinpath("quant_support.toml").read_text(encoding="utf-8")
    return loads_toml(text)


def formats() -> dict[str, dict[str, Any]]:
    return support_table()["formats"]


def engines() -> list[str]:
    return list(support_table()["engines"])


def resolve_format(text: str) -> str:
    """Canonical format name for ``text`` (case-insensitive; aliases such as 'modelopt_fp4')."""
    key = text.strip().lower()
    for name, spec in formats().items():
        if key == name or key in (a.lower() for a in spec.get("aliases", [])):
            return name
    known = ", ".join(formats())
    raise InputError(f"unknown quantization format '{text}' (known: {known})")


def resolve_scheme(fmt: str, text: str | None) -> str:
    spec = formats()[fmt]
    if not text:
        return spec["default_scheme"]
    for scheme in spec["schemes"]:
        if text.lower() == scheme.lower():
            return scheme
    for alias, scheme in spec.get("scheme_aliases", {}).items():
        if text.lower() == alias.lower():
            return scheme
    if spec["schemes"] == ["any"]:
        return "any"  # GGUF: every quant type (Q4_K_M, Q8_0, IQ4_XS) loads through the same engines
    raise InputError(f"unknown scheme '{text}' for {fmt} (known: {', '.join(spec['schemes'])})")


def resolve_engine(text: str) -> str:
    key = text.strip().lower()
    if key in ENGINE_ALIASES:
        return ENGINE_ALIASES[key]
    raise InputError(f"unknown engine '{text}' (known: vllm, sglang, trtllm, llamacpp)")


# ------------------------------------------------------------------ targets
_SM = re.compile(r"^(?:sm_?|compute_?)(\d+)(\d)[af]?$")
_CC = re.compile(r"^(\d+)\.(\d+)$")


# Compute capabilities NVIDIA has shipped (Maxwell onwards). A typed sm_XX outside this set is a typo
# or a future part the support table cannot speak for: refused rather than answered from the
# nearest rule. A capability read from a real GPU (--target auto) is taken as it is.
KNOWN_CAPABILITIES: tuple[tuple[int, int], ...] = (
    (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9),
    (9, 0), (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1),
)


def parse_target(text: str) -> Target:
    """``sm_90``, ``sm90a``, ``9.0`` or a GPU name such as ``H100`` / ``NVIDIA L40S`` / ``RTX 4090``."""
    raw = text.strip()
    low = raw.lower()
    found = _SM.match(low) or _CC.match(low)
    if found:
        capability = (int(found.group(1)), int(found.group(2)))
        if capability not in KNOWN_CAPABILITIES:
            known = ", ".join(f"sm_{major}{minor}" for major, minor in KNOWN_CAPABILITIES)
            raise InputError(f"unknown target '{text}': no NVIDIA GPU has compute capability "
                             f"{capability[0]}.{capability[1]} (known: {known})")
        return Target(raw, capability)
    capability = gpu_capability(raw)
    if capability is None:
        raise InputError(
            f"unknown target '{text}': give sm_XX (e.g. sm_90), a compute capability (9.0), "
            "a GPU name (H100, L40S, RTX 4090, ...) or 'auto'"
        )
    return Target(raw, capability, gpu=raw)


def gpu_capability(name: str) -> tuple[int, int] | None:
    """Compute capability of a GPU by name, or None when the name is not known.

    Matches whole words, longest key first: 'NVIDIA H100 80GB HBM3', 'A100-SXM4-40GB',
    'NVIDIA GeForce RTX 4090' and 'RTX 6000 Ada Generation' all resolve."""
    norm = re.sub(r"[^a-z0-9]+", " ", name.lower())
    padded = f" {' '.join(norm.split())} "
    for key in sorted(GPU_COMPUTE_CAPABILITY, key=len, reverse=True):
        if f" {key} " in padded:
            return GPU_COMPUTE_CAPABILITY[key]
    return None


def detect_local_target() -> Target:
    """The first GPU's compute capability through NVML; exit-2 error when there is no NVIDIA GPU."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise InputError("--target auto needs nvidia-ml-py (import pynvml); give --target sm_XX instead") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise InputError(
            f"--target auto: no NVIDIA GPU visible here through NVML ({exc}); "
            "give --target sm_XX or a GPU name, or --host DEST to read a remote GPU"
        ) from exc
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            raise InputError("--target auto: NVML sees no GPU on this machine; give --target sm_XX or a GPU name")
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
    except pynvml.NVMLError as exc:
        raise InputError(f"--target auto: NVML could not read the GPU ({exc}); give --target sm_XX") from exc
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return Target(f"auto:{name}", (int(major), int(minor)), gpu=name, detected_on="local")


_REMOTE_NVIDIA_SMI = ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]


def detect_remote_target(dest: str, timeout: float = 30.0) -> Target:
    """Compute capability of the first GPU on ``dest``: what ``execsys pin`` would observe there
    (:func:`execsys.observe.hardware.observe_remote_hardware`), else -- when that cannot run there --
    ``nvidia-smi --query-gpu=name,compute_cap`` over SSH."""
    from execsys.observe.hardware import observe_remote_hardware

    gpus: list[dict[str, Any]] = []
    observed: dict[str, Any] | None = None
    try:
        observed = observe_remote_hardware(dest, timeout) or {}
        gpus = list(observed.get("gpus") or [])
    except InputError:  # e.g. its python failed: the direct nvidia-smi query reports its own failure
        observed = None
    if observed is not None and not gpus:
        note = observed.get("gpu_note")
        raise InputError(f"--target auto --host {dest}: no NVIDIA GPU there" + (f" ({note})" if note else "")
                         + "; give --target sm_XX or a GPU name")
    for gpu in gpus:
        cc = str(gpu.get("compute_capability") or "")
        found = _CC.match(cc)
        if found:
            return Target(f"auto:{gpu.get('name')}", (int(found.group(1)), int(found.group(2))),
                          gpu=gpu.get("name"), detected_on=dest)
    from execsys.ssh import describe_failure, run_remote

    try:
        result = run_remote(dest, _REMOTE_NVIDIA_SMI, timeout=timeout)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if not result.ok:
        raise InputError(f"--target auto --host {dest}: could not read the GPU there ({describe_failure(result)})")
    for line in result.text().splitlines():
        name, _, cc = line.rpartition(",")
        found = _CC.match(cc.strip())
        if found and name.strip():
            return Target(f"auto:{name.strip()}", (int(found.group(1)), int(found.group(2))),
                          gpu=name.strip(), detected_on=dest)
    raise InputError(f"--target auto --host {dest}: nvidia-smi there reported no GPU")


# ------------------------------------------------------------------ the check
def _cc_value(text: str) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return (int(major), int(minor or 0))


def _matches(value: str, rule_value: Any) -> bool:
    if rule_value is None or rule_value == "*":
        return True
    if isinstance(rule_value, list):
        return value in rule_value
    return value == rule_value


def check(fmt: str, *, scheme: str | None = None, engine: str, target: Target) -> QuantVerdict:
    """The first matching rule of the support table for (format, scheme, engine, compute capability)."""
    fmt = resolve_format(fmt)
    scheme_name = resolve_scheme(fmt, scheme)
    engine_name = resolve_engine(engine)
    table = support_table()
    as_of_default = table["as_of"]
    cc = target.capability
    for rule in table["rules"]:
        if not (_matches(fmt, rule.get("format")) and _matches(scheme_name, rule.get("scheme"))
                and _matches(engine_name, rule.get("engine"))):
            continue
        if "cc_min" in rule and cc < _cc_value(rule["cc_min"]):
            continue
        if "cc_below" in rule and cc >= _cc_value(rule["cc_below"]):
            continue
        return QuantVerdict(fmt, scheme_name, engine_name, target.text, rule["verdict"], rule["reason"],
                            rule["source"], rule.get("as_of", as_of_default),
                            compute_capability=f"{cc[0]}.{cc[1]}", gpu=target.gpu)
    return QuantVerdict(fmt, scheme_name, engine_name, target.text, "unsupported",
                        f"no rule in the support table covers {fmt} ({scheme_name}) on {engine_name} at {target.sm}",
                        "execsys quant_support.toml (no entry)", as_of_default,
                        compute_capability=f"{cc[0]}.{cc[1]}", gpu=target.gpu)


def check_all_engines(fmt: str, *, scheme: str | None, target: Target) -> list[QuantVerdict]:
    return [check(fmt, scheme=scheme, engine=name, target=target) for name in engines()]


# ------------------------------------------------------------------ pinned artifacts
def quantization_from_lock(path: str) -> dict[str, str | None]:
    """:func:`quantization_from_identity` of the lock file at ``path`` (read by ``execsys.identity.load_lock``)."""
    from execsys.identity import load_lock

    return quantization_from_identity(load_lock(path))


def _lock_components(path: str) -> dict[str, Any]:
    """The components of the lock at ``path``, read by ``load_lock`` (``execsys plan`` imports this)."""
    from execsys.identity import load_lock

    return load_lock(path).components


def quantization_from_identity(identity: Identity) -> dict[str, str | None]:
    """The pinned artifact's format and scheme, and the runtime engine, from a pinned identity.

    Observed facts win over declared ones: a GGUF file is ``gguf`` whatever its quant type, and a
    Hugging Face checkpoint's ``quantization_config`` label ('awq 4-bit', 'fp8') names the format.
    ``format`` is None (with ``quantization`` holding the raw label) when nothing maps to a format
    the support table knows."""
    components = identity.components
    artifact = components.get("artifact") or {}
    runtime = components.get("runtime") or {}
    layers = [artifact.get("observed") or {}, artifact.get("declared") or {}]
    labels = [str(layer.get("quantization")) for layer in layers
              if isinstance(layer.get("quantization"), str) and layer["quantization"].strip()]
    fmt, scheme = None, None
    if any(layer.get("format") == "gguf" for layer in layers):
        fmt = "gguf"
    for label in labels if fmt is None else []:
        candidate, candidate_scheme = split_quantization(label)
        try:
            fmt = resolve_format(candidate)
        except InputError:
            continue
        if candidate_scheme and not re.match(r"^\d+-bit$", candidate_scheme):
            scheme = candidate_scheme
        break
    engine = None
    for layer in (runtime.get("observed") or {}, runtime.get("declared") or {}):
        if isinstance(layer.get("engine"), str) and layer["engine"]:
            engine = layer["engine"]
            break
    return {"format": fmt, "scheme": scheme, "quantization": labels[0] if labels else None, "engine": engine}


def observed_kernels_check(fmt: str, kernels: dict[str, Any] | None) -> dict[str, Any] | None:
    """The declared format against the kernels the engine's log says it selected
    (``runtime.observed.kernels``, :mod:`execsys.observe.kernels`); None when no log was read."""
    from execsys.observe.kernels import fallbacks_for

    if not isinstance(kernels, dict) or not isinstance(kernels.get("found"), list):
        return None
    falls = fallbacks_for(kernels, fmt)
    selected = [{"kind": m.get("kind"), "value": m.get("value")} for m in kernels["found"] if isinstance(m, dict)]
    if falls:
        return {"verdict": "fallback", "log": kernels.get("log"), "selected": selected,
                "sentence": f"declared {fmt}: observed {falls[0]['value']} \u2014 the deployment target runs the "
                            "slow path",
                "evidence": [m.get("evidence") for m in falls], "sources": [m.get("source") for m in falls]}
    return {"verdict": "no fallback observed", "log": kernels.get("log"), "selected": selected,
            "sentence": f"declared {fmt}: no fallback kernel in the engine log", "evidence": [], "sources": []}


def split_quantization(text: str) -> tuple[str, str | None]:
    """'fp8' -> ('fp8', None); 'awq:machete' / 'fp8/block' / 'gptq W4A16' -> (format, scheme)."""
    for sep in (":", "/", " ", "@"):
        if sep in text.strip():
            fmt, _, scheme = text.strip().partition(sep)
            return fmt.strip(), scheme.strip() or None
    return text.strip(), None
