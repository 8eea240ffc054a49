"""The kernels an engine's start-up log says it chose, as decision tables: version ranges at their bounds,
which engine's patterns a log is read with, the last match per pattern and module, the evidence kept from
the match on, the log's tail past the size cap, and which fallbacks concern a format. In-process,
milliseconds: the logs are planted files."""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys.errors import InputError
from execsys.observe import kernels

FP4 = ("Your GPU does not have native support for FP4 computation but FP4 quantization is being used. "
       "Weight-only FP4 compression will be used leveraging the Marlin kernel")


@pytest.mark.parametrize(("version", "spec", "inside"), [
    ("0.9", ">=0.9", True), ("0.9.0", ">=0.9", True), ("0.8.9", ">=0.9", False), ("0.10", ">=0.9", True),
    ("0.9", ">0.9", False), ("0.9.1", ">0.9", True),
    ("0.9", "<0.9", False), ("0.8.99", "<0.9", True),
    ("0.9", "<=0.9", True), ("0.9.1", "<=0.9", False),
    ("0.9", "==0.9.0", True), ("0.9.1", "==0.9", False),
    ("0.9.5", ">=0.9, <0.10", True), ("0.10.0", ">=0.9,<0.10", False), ("0.8", ">=0.9,<0.10", False),
    ("v0.9.2", ">=0.9", True),                                # a leading v
    ("0.9.2rc1+cu124", ">=0.9.2", True),                      # a suffix after the numbers
    (" 1.0 ", ">=0.9", True),
    (None, ">=0.9", True), ("", ">=0.9", True), ("dev", ">=0.9", True),   # unknown: in every range
    ("0.1", "", True), ("0.1", "   ", True),
    ("0.1", "~=0.9", True), ("0.1", ">=x", True),             # a bound it cannot read is skipped
    ("0.1", "~=0.9, >=0.5", False),
    ("0.1", " >= 0.0.5 ", True), ("0.1", ">=0.05", False),     # 0.05 is 0.5
])
def test_a_version_in_a_range(version: str | None, spec: str, inside: bool) -> None:
    assert kernels.version_in_range(version, spec) is inside


def test_the_patterns_are_read_from_the_data_file_in_its_order() -> None:
    loaded = kernels.patterns()
    assert loaded[0].id == "vllm-fp4-marlin-fallback" and loaded[-1].id == "llamacpp-offload"
    first = loaded[0]
    assert (first.engine, first.versions, first.kind, first.value, first.fallback, first.formats) == (
        "vllm", ">=0.9", "quant_kernel", "Marlin fallback (W4A16)", True, ("nvfp4", "mxfp4"))
    flash = next(p for p in loaded if p.id == "llamacpp-flash-attn")
    assert (flash.versions, flash.value, flash.fallback, flash.formats) == ("", None, False, ())


def test_a_fallback_line_is_found_with_its_evidence_from_the_match_on() -> None:
    line = "WARNING 10-30 11:02:17 [marlin_utils_fp4.py:141] " + FP4 + ".\r\n"
    found = kernels.scan_lines([line], "vllm", "0.11.0")
    assert found == [{"pattern": "vllm-fp4-marlin-fallback", "engine": "vllm", "kind": "quant_kernel",
                      "value": "Marlin fallback (W4A16)", "fallback": True, "formats": ["nvfp4", "mxfp4"],
                      "evidence": FP4 + ".", "source": kernels.patterns()[0].source}]


def test_a_pattern_outside_the_engine_s_version_is_not_read() -> None:
    assert kernels.scan_lines([FP4], "vllm", "0.8.5") == []
    assert kernels.scan_lines([FP4], "vllm", None)[0]["pattern"] == "vllm-fp4-marlin-fallback"


def test_the_engine_picks_whose_patterns_read_the_log() -> None:
    # SGLang's FP4 pattern is a substring of vLLM's warning
    assert [m["pattern"] for m in kernels.scan_lines([FP4], "sglang")] == ["sglang-fp4-marlin-fallback"]
    assert [m["pattern"] for m in kernels.scan_lines([FP4], None)] == ["vllm-fp4-marlin-fallback",
                                                                       "sglang-fp4-marlin-fallback"]
    assert kernels.scan_lines([FP4], "ollama") == []
    line = "llama_context: flash_attn    = enabled"
    for engine in ("llama.cpp", "llama-cpp-python", "llamacpp", "LLaMA.cpp"):
        assert [(m["pattern"], m["value"]) for m in kernels.scan_lines([line], engine)] == [
            ("llamacpp-flash-attn", "enabled")], engine


def test_the_last_match_per_pattern_and_module_wins_in_the_data_file_s_order() -> None:
    lines = [
        "Using Flash Attention backend on V1 engine.",
        "Selected CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod",
        "Using MarlinLinearKernel for GPTQMarlinLinearMethod",
        "Selected MacheteLinearKernel for Fp8LinearMethod",
        "Using FlashInfer backend.",
        "offloaded 10/33 layers to GPU",
    ]
    found = kernels.scan_lines(lines, "vllm", "0.11")
    assert [(m["pattern"], m.get("module"), m["value"]) for m in found] == [
        ("vllm-linear-kernel", "Fp8LinearMethod", "MacheteLinearKernel"),
        ("vllm-linear-kernel", "GPTQMarlinLinearMethod", "MarlinLinearKernel"),
        ("vllm-attention-backend", None, "FlashInfer"),
    ]
    assert "module" not in found[2]


def test_a_pattern_without_a_value_group_or_value_keeps_the_matched_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    bare = kernels.KernelPattern(id="bare", engine="vllm", versions="", kind="k", regex=re.compile(r"abc\d"),
                                 value=None, fallback=False, formats=(), source="s")
    monkeypatch.setattr(kernels, "patterns", lambda: (bare,))
    assert kernels.scan_lines(["xx abc7 yy"], "vllm")[0]["value"] == "abc7"
    assert kernels.scan_lines(["xx abc7 yy"], "vllm")[0]["evidence"] == "abc7 yy"


def test_the_evidence_is_cut_and_redacted() -> None:
    line = "Using Flash Attention backend on V1 engine." + " " * 300
    evidence = kernels.scan_lines([line.rstrip() + "."], "vllm")
    assert evidence == [] or len(evidence[0]["evidence"]) <= 240
    secret = "llama_context: flash_attn = auto --api-key sk-abcdefghijklmnopqrstuvwx" + "y" * 300
    found = kernels.scan_lines([secret], "llama.cpp")
    assert len(found[0]["evidence"]) <= 240
    assert "sk-abcdefghijklmnopqrstuvwx" not in found[0]["evidence"]


def test_an_engine_log_is_read_from_its_file(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"INFO start\nUsing Flash Attention backend on V1 engine.\n\xff\xfe\n")
    seen = kernels.observe_kernels(log, "vllm", "0.6.3")
    assert seen == {"log": str(log), "found": [{
        "pattern": "vllm-attention-backend", "engine": "vllm", "kind": "attention_backend",
        "value": "Flash Attention", "fallback": False, "formats": [],
        "evidence": "Using Flash Attention backend on V1 engine.", "source": kernels.patterns()[6].source}]}


def test_a_log_past_the_cap_is_read_from_its_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "MAX_LOG_BYTES", 64)
    log = tmp_path / "engine.log"
    head = "Using FlashInfer backend.\n"
    tail = "x" * 20 + "\nUsing Triton backend.\n"
    log.write_text("Using MarlinLinearKernel for GPTQMarlinLinearMethod\n" + head + "y" * 100 + "\n" + tail)
    assert [m["value"] for m in kernels.observe_kernels(log, "vllm")["found"]] == ["Triton"]
    # at the cap exactly, the whole log is read
    log.write_text(head + "z" * (64 - len(head) - 1) + "\n")
    assert log.stat().st_size == 64
    assert [m["value"] for m in kernels.observe_kernels(log, "vllm")["found"]] == ["FlashInfer"]
    assert kernels.MAX_LOG_BYTES == 64


def test_the_default_cap_is_sixteen_mib() -> None:
    assert kernels.MAX_LOG_BYTES == 16 << 20


def test_an_unreadable_log_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        kernels.observe_kernels(tmp_path / "absent.log", "vllm")
    assert str(caught.value) == f"engine log {tmp_path / 'absent.log'}: No such file or directory"


def test_the_fallbacks_that_concern_a_format() -> None:
    found = {"found": [
        {"pattern": "a", "fallback": True, "formats": ["nvfp4", "mxfp4"]},
        {"pattern": "b", "fallback": False, "formats": ["nvfp4"]},
        {"pattern": "c", "fallback": True, "formats": ["fp8"]},
        {"pattern": "d", "fallback": True},
        "not a match",
    ]}
    assert [m["pattern"] for m in kernels.fallbacks_for(found, "nvfp4")] == ["a"]
    assert [m["pattern"] for m in kernels.fallbacks_for(found, "fp8")] == ["c"]
    assert kernels.fallbacks_for(None, "fp8") == [] and kernels.fallbacks_for({"found": None}, "fp8") == []
