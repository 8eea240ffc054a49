"""Observe the artifact (and what the files say about the model): digest, size, format, quantization.

The quantization recorded here is read from the files themselves -- a
``config.json`` ``quantization_config`` or a GGUF header's ``general.file_type`` --
and set beside the declared one, because a launch script's idea of what it loads
and the bytes on disk disagree more often than anyone expects.

The GGUF header is read by a small standard-library reader (the ``gguf`` package is
only a test dependency).
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Any

from execsys.digest import ProgressFn, digest_path
from execsys.errors import InputError

# llama.cpp's LlamaFileType (general.file_type), as names without the MOSTLY_ prefix.
GGUF_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}

_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_WANTED_GGUF_KEYS = {"general.file_type", "general.name", "general.architecture", "general.basename",
                     "general.size_label", "general.quantization_version"}


class GGUFError(ValueError):
    pass


def read_gguf_metadata(path: str | os.PathLike, wanted: set[str] | None = None) -> dict[str, Any]:
    """Scalar/string metadata from a GGUF header (arrays such as the vocabulary are skipped)."""
    wanted = _WANTED_GGUF_KEYS if wanted is None else wanted
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise GGUFError("not a GGUF file (bad magic)")
        (version,) = struct.unpack("<I", _exact(fh, 4))
        if version == 1:
            _tensors, kv_count = struct.unpack("<II", _exact(fh, 8))
            length_fmt = "<I"
        elif version in (2, 3):
            _tensors, kv_count = struct.unpack("<QQ", _exact(fh, 16))
            length_fmt = "<Q"
        else:
            raise GGUFError(f"GGUF version {version} is not understood")
        found: dict[str, Any] = {"gguf_version": version}
        for _ in range(kv_count):
            key = _string(fh, length_fmt)
            (vtype,) = struct.unpack("<I", _exact(fh, 4))
            value = _value(fh, vtype, length_fmt, keep=key in wanted)
            if key in wanted:
                found[key] = value
                if wanted.issubset(found):
                    break
        return found


def _exact(fh, n: int) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise GGUFError("truncated GGUF header")
    return data


def _string(fh, length_fmt: str) -> str:
    (length,) = struct.unpack(length_fmt, _exact(fh, struct.calcsize(length_fmt)))
    if length > 1 << 24:
        raise GGUFError("implausible string length in GGUF header")
    return _exact(fh, length).decode("utf-8", "replace")


def _value(fh, vtype: int, length_fmt: str, *, keep: bool) -> Any:
    if vtype in _GGUF_SCALARS:
        fmt = _GGUF_SCALARS[vtype]
        return struct.unpack(fmt, _exact(fh, struct.calcsize(fmt)))[0]
    if vtype == 8:
        return _string(fh, length_fmt)
    if vtype == 9:
        (item_type,) = struct.unpack("<I", _exact(fh, 4))
        (count,) = struct.unpack(length_fmt, _exact(fh, struct.calcsize(length_fmt)))
        if item_type in _GGUF_SCALARS and not keep:
            fh.seek(count * struct.calcsize(_GGUF_SCALARS[item_type]), os.SEEK_CUR)
            return None
        items = [_value(fh, item_type, length_fmt, keep=keep) for _ in range(count)]
        return items if keep else None
    raise GGUFError(f"unknown GGUF value type {vtype}")


def detect_format(path: Path) -> str:
    """safetensors, gguf, pytorch, onnx or other -- from the files, not their names alone."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    names = [p.name for p in files]
    if any(_is_gguf(p) for p in files if p.suffix == ".gguf" or len(files) == 1):
        return "gguf"
    if any(n.endswith(".safetensors") for n in names):
        return "safetensors"
    if any(n.endswith((".bin", ".pt", ".pth")) for n in names):
        return "pytorch"
    if any(n.endswith(".onnx") for n in names):
        return "onnx"
    return "other"


def _is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False


def _first_gguf(path: Path) -> Path | None:
    if path.is_file():
        return path if _is_gguf(path) else None
    for candidate in sorted(path.rglob("*.gguf")):
        if _is_gguf(candidate):
            return candidate
    return None


def file_quantization(path: Path) -> dict[str, Any]:
    """What the files say about quantization and the model: {quantization, source, detail, model}."""
    gguf = _first_gguf(path)
    if gguf is not None:
        try:
            meta = read_gguf_metadata(gguf)
        except (GGUFError, OSError) as exc:
            return {"quantization": None, "source": f"GGUF header unreadable ({exc})", "model": {}}
        file_type = meta.get("general.file_type")
        name = GGUF_FILE_TYPES.get(file_type, f"file_type {file_type}") if file_type is not None else None
        model = {k.split(".", 1)[1]: v for k, v in meta.items()
                 if k in ("general.name", "general.architecture", "general.basename", "general.size_label")}
        return {"quantization": name, "source": "gguf general.file_type" if name else "gguf (no general.file_type)",
                "model": model}
    config_path = path / "config.json" if path.is_dir() else path.parent / "config.json"
    if not config_path.is_file():
        return {"quantization": None, "source": None, "model": {}}
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"quantization": None, "source": f"config.json unreadable ({exc})", "model": {}}
    model = {k: config[k] for k in ("model_type", "architectures", "_name_or_path") if k in config}
    dtype = config.get("torch_dtype") or config.get("dtype")
    if dtype:
        model["dtype"] = dtype
    qconf = config.get("quantization_config")
    if isinstance(qconf, dict):
        method = str(qconf.get("quant_method") or qconf.get("quant_type") or "unknown")
        bits = qconf.get("bits") or qconf.get("w_bit")
        label = f"{method} {bits}-bit" if bits else method
        return {"quantization": label, "source": "config.json quantization_config", "detail": qconf, "model": model}
    return {"quantization": "none" if dtype is None else f"none ({dtype})", "source": "config.json (no quantization_config)",
            "model": model}


def _norm(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (text or "").lower())


def resolve(path_text: str, base_dir: Path | None) -> Path:
    """A declared path as the system means it: relative to the declaration's directory (never the
    pinning shell's cwd, so pinning from a subdirectory finds the same files); ``~`` is the invoking
    user's home, which is right: another user's ``~/models/m`` is another file, another system."""
    path = Path(os.path.expanduser(path_text))
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return Path(os.path.abspath(path))


def observe_artifact(declared: dict[str, Any], *, base_dir: Path | None = None,
                     progress: ProgressFn | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(artifact observed, model observed). Raises InputError when the declared artifact is unusable."""
    if not declared.get("path"):
        return {"note": "no artifact declared ([artifact] path)"}, {}
    path = resolve(declared["path"], base_dir)
    result = digest_path(path, progress=progress)
    quant = file_quantization(path)
    observed: dict[str, Any] = {
        "path": str(path),
        "kind": result.kind,
        "digest": result.digest,
        "size_bytes": result.size_bytes,
        "files": result.files,
        "format": detect_format(path),
        "quantization": quant["quantization"],
        "quantization_source": quant["source"],
    }
    if "detail" in quant:
        observed["quantization_config"] = quant["detail"]
    if declared.get("quantization"):
        declared_q, seen_q = _norm(declared["quantization"]), _norm(quant["quantization"])
        observed["quantization_matches_declared"] = bool(seen_q) and (declared_q in seen_q or seen_q in declared_q)
    if declared.get("adapter"):
        adapter_path = resolve(declared["adapter"], base_dir)
        try:
            adapter = digest_path(adapter_path)
        except InputError as exc:
            raise InputError(f"adapter {exc}") from exc
        observed["adapter"] = {"path": str(adapter_path), "kind": adapter.kind, "digest": adapter.digest,
                               "size_bytes": adapter.size_bytes, "files": adapter.files}
    from execsys.observe.model_signature import observe_signature

    # what a shipped model-signing bundle (model.sig) states, and the key [artifact] signature_key names;
    # absent when neither is there, so an artifact without one is recorded as it always was
    signature = observe_signature(path, declared, base_dir)
    if signature is not None:
        observed["signature"] = signature
    return observed, quant.get("model", {})
