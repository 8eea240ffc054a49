"""Observed kernels: the engine's start-up log against the patterns in execsys/data/kernel_patterns.toml.

The log lines are quoted verbatim from real vLLM start-ups (as posted in the issues named beside
each), and the llama.cpp one comes from the real llama-cpp-python server the suite starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.observe.kernels import patterns, scan_lines, version_in_range

# vllm-project/vllm issue "NVFP4A16 spurious warning that GPU doesn't support Fp4" (2x RTX Pro 6000)
VLLM_NVFP4_MARLIN = ("(Worker_TP0 pid=201) WARNING 10-24 09:50:14 [marlin_utils_fp4.py:137] Your GPU does not have "
                     "native support for FP4 computation but FP4 quantization is being used. Weight-only FP4 "
                     "compression will be used leveraging the Marlin kernel. This may degrade performance for "
                     "compute-heavy workloads.")
# vllm-project/vllm issue: FP8 on an H100 reported as Marlin weight-only
VLLM_FP8_MARLIN = ("WARNING 11-07 19:34:49 marlin_utils_fp8.py:50] Your GPU does not have native support for FP8 "
                   "computation but FP8 quantization is being used. Weight-only FP8 compression will be used "
                   "leveraging the Marlin kernel. This may degrade performance for compute-heavy workloads.")
VLLM_ATTENTION = ("(EngineCore_DP0 pid=39535) INFO 03-03 19:33:23 [cuda.py:366] Using Flash Attention backend on "
                  "V1 engine.")
VLLM_FP8_CUTLASS = "INFO [__init__.py:255] Selected CutlassFP8ScaledMMLinearKernel for Fp8OnlineLinearMethod"
VLLM_FP8_MARLIN_KERNEL = "INFO  [__init__.py:634] Selected MarlinFP8ScaledMMLinearKernel for Fp8LinearMethod"
VLLM_NVFP4_MOE_MARLIN = ("(EngineCore pid=230) INFO [nvfp4.py:270] Using 'MARLIN' NvFp4 MoE backend out of potential "
                         "backends: ['FLASHINFER_TRTLLM', 'MARLIN'].")
VLLM_NVFP4_GEMM = "INFO [__init__.py:1077] Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM"


def _by_pattern(lines: list[str], engine: str | None = "vllm", version: str | None = None) -> dict[str, dict]:
    return {m["pattern"]: m for m in scan_lines(lines, engine, version)}


def test_every_pattern_names_its_engine_kind_and_source() -> None:
    for pattern in patterns():
        assert pattern.engine in ("vllm", "sglang", "llama.cpp") and pattern.kind and pattern.source
        assert not pattern.fallback or pattern.formats, pattern.id


def test_nvfp4_marlin_fallback_line_is_a_w4a16_fallback_for_nvfp4() -> None:
    found = _by_pattern([VLLM_NVFP4_MARLIN, VLLM_ATTENTION])
    fallback = found["vllm-fp4-marlin-fallback"]
    assert fallback["value"] == "Marlin fallback (W4A16)" and fallback["fallback"] is True
    assert "nvfp4" in fallback["formats"] and "fp8" not in fallback["formats"]
    # the evidence starts at the match: timestamps and pids would move the id at every restart
    assert fallback["evidence"].startswith("Your GPU does not have native support for FP4")
    assert found["vllm-attention-backend"]["value"] == "Flash Attention"
    assert found["vllm-attention-backend"]["fallback"] is False


def test_fp8_marlin_lines_are_fp8_fallbacks_and_cutlass_is_not() -> None:
    found = _by_pattern([VLLM_FP8_MARLIN_KERNEL, VLLM_FP8_MARLIN])
    assert found["vllm-fp8-marlin-fallback"]["value"] == "Marlin fallback (W8A16)"
    assert found["vllm-fp8-marlin-linear"]["value"] == "MarlinFP8ScaledMMLinearKernel"
    # one kernel per layer type: both are kept, keyed by the module they were chosen for
    native = scan_lines([VLLM_FP8_CUTLASS, VLLM_NVFP4_GEMM], "vllm")
    assert [(m["module"], m["value"]) for m in native] == [("Fp8OnlineLinearMethod", "CutlassFP8ScaledMMLinearKernel"),
                                                           ("NVFP4", "FlashInferCutlassNvFp4LinearKernel")]
    assert not any(m["fallback"] for m in native)


def test_nvfp4_moe_on_marlin_is_a_fallback_other_backends_are_recorded() -> None:
    found = _by_pattern([VLLM_NVFP4_MOE_MARLIN])
    assert found["vllm-nvfp4-moe-marlin"]["fallback"] is True
    assert found["vllm-nvfp4-moe-backend"]["value"] == "MARLIN"


def test_patterns_apply_to_their_engine_and_version_range_only() -> None:
    assert _by_pattern([VLLM_NVFP4_MARLIN], engine="llama.cpp") == {}
    assert "vllm-fp4-marlin-fallback" not in _by_pattern([VLLM_NVFP4_MARLIN], version="0.6.3")
    assert "vllm-fp4-marlin-fallback" in _by_pattern([VLLM_NVFP4_MARLIN], version="0.11.0")
    assert "vllm-fp4-marlin-fallback" in _by_pattern([VLLM_NVFP4_MARLIN], version=None)  # unknown: never skipped
    assert version_in_range("0.10.1", ">=0.9,<0.11") and not version_in_range("0.11", ">=0.9,<0.11")


def test_the_last_start_up_in_a_log_wins() -> None:
    first = "INFO 03-03 19:33:23 [cuda.py:366] Using FlashInfer backend."
    found = _by_pattern([first, VLLM_ATTENTION])
    assert found["vllm-attention-backend"]["value"] == "Flash Attention"


def _lock_with_kernels(path: Path, kernels: dict, quantization: str = "nvfp4") -> None:
    from execsys import COMPONENTS
    from execsys.canonical import content_id

    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["artifact"]["declared"] = {"path": "model", "quantization": quantization}
    components["runtime"]["declared"] = {"engine": "vllm"}
    components["runtime"]["observed"] = {"kernels": kernels}
    path.write_text(json.dumps({"schema": "execsys.identity/2", "id": content_id(components),
                                "recorded_at": "2026-12-01T00:00:00Z", "declaration": {}, "components": components,
                                "notes": []}))


def test_quant_check_lock_compares_the_declared_format_with_the_observed_kernels(cli, tmp_path: Path) -> None:
    lock = tmp_path / "execsys.lock.json"
    _lock_with_kernels(lock, {"log": "/var/log/vllm.log", "found": scan_lines([VLLM_NVFP4_MARLIN], "vllm")})
    # the table says B200 runs NVFP4 natively; the log says this deployment ran Marlin
    result = cli("quant", "check", "--lock", str(lock), "--target", "B200", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    data = result.json()
    assert data["verdict"] == "native"
    assert data["observed"]["verdict"] == "fallback"
    assert data["observed"]["sentence"] == ("declared nvfp4: observed Marlin fallback (W4A16) \u2014 the deployment "
                                            "target runs the slow path")
    assert data["observed"]["evidence"][0].startswith("Your GPU does not have native support for FP4")
    shown = cli("quant", "check", "--lock", str(lock), "--target", "B200", env={"COLUMNS": "300"})
    assert shown.returncode == 1
    assert "declared nvfp4: observed Marlin fallback (W4A16) \u2014 the deployment target runs the slow path" in \
        shown.stdout


def test_quant_check_with_native_kernels_observed_keeps_the_table_verdict(cli, tmp_path: Path) -> None:
    lock = tmp_path / "execsys.lock.json"
    _lock_with_kernels(lock, {"log": "vllm.log", "found": scan_lines([VLLM_NVFP4_GEMM, VLLM_ATTENTION], "vllm")})
    result = cli("quant", "check", "--lock", str(lock), "--target", "B200", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.json()["observed"]["verdict"] == "no fallback observed"


def test_quant_check_engine_log_reads_a_log_file(cli, tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([VLLM_FP8_MARLIN_KERNEL, VLLM_FP8_MARLIN]) + "\n")
    result = cli("quant", "check", "fp8", "--engine", "vllm", "--target", "H100", "--engine-log", str(log), "--json")
    assert result.returncode == 1
    assert result.json()["observed"]["sentence"].startswith("declared fp8: observed Marlin fallback (W8A16)")
    missing = cli("quant", "check", "fp8", "--engine", "vllm", "--target", "H100", "--engine-log",
                  str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "nope.log" in missing.stderr


def test_pin_reads_runtime_log_of_the_real_server_into_kernels(cli, tmp_path: Path, llama_server) -> None:
    pytest.importorskip("llama_cpp")
    (tmp_path / "execsys.toml").write_text(
        f'[artifact]\npath = "{llama_server.model_path}"\n[runtime]\nengine = "llama-cpp-python"\n'
        f'endpoint = "{llama_server.base_url}"\nlog = "{llama_server.log_path}"\n')
    result = cli("pin", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    kernels = result.json()["components"]["runtime"]["observed"]["kernels"]
    assert kernels["log"] == str(llama_server.log_path)
    flash = next(m for m in kernels["found"] if m["pattern"] == "llamacpp-flash-attn")
    line = next(x for x in llama_server.log_path.read_text().splitlines() if "flash_attn" in x)
    assert flash["evidence"] in line and flash["value"] == line.split("=")[-1].strip()
    assert cli("verify", cwd=tmp_path).returncode == 0


def test_pin_engine_log_then_quant_check_lock_end_to_end(cli, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "torch_dtype": "bfloat16"}')
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([VLLM_ATTENTION, VLLM_NVFP4_MARLIN]) + "\n")
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model"\nquantization = "nvfp4"\n'
                                           '[runtime]\nengine = "vllm"\n')
    pinned = cli("pin", "--engine-log", str(log), "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    runtime = pinned.json()["components"]["runtime"]
    assert runtime["declared"]["log"] == str(log)  # the flag over [runtime] log, recorded as declared
    assert [m["pattern"] for m in runtime["observed"]["kernels"]["found"]] == ["vllm-fp4-marlin-fallback",
                                                                              "vllm-attention-backend"]
    checked = cli("quant", "check", "--lock", str(tmp_path / "execsys.lock.json"), "--target", "B200",
                  env={"COLUMNS": "300"})
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "declared nvfp4: observed Marlin fallback (W4A16) \u2014 the deployment target runs the slow path" in \
        checked.stdout
    # the log is re-read by verify: a restart that fixed the kernels is a moved runtime
    log.write_text(VLLM_ATTENTION + "\n" + VLLM_NVFP4_GEMM + "\n")
    verified = cli("verify", "--json", cwd=tmp_path)
    assert verified.returncode == 1
    assert any(c["field"].startswith("observed.kernels.found") for c in verified.json()["components"]["runtime"]["changes"])
    empty = cli("pin", "--engine-log", " ", cwd=tmp_path)
    assert empty.returncode == 2 and "--engine-log is empty" in empty.stderr
    missing = cli("pin", "--engine-log", str(tmp_path / "gone.log"), cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"execsys pin: error: engine log {tmp_path / 'gone.log'}: No such file or directory"]
