"""`execsys quant` in-process (execsys/quant.py): the whole verdict a user reads, the names it accepts,
what it reads from a pinned identity, and the kernels an engine log says it ran.

The 320-verdict table (test_quant_table_golden) pins only the verdict column; here every field of the
JSON is pinned, with the reason and source text copied from execsys/data/quant_support.toml.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys import COMPONENTS
from execsys.errors import InputError
from execsys.identity import Identity
from execsys.quant import (
    Target,
    check,
    check_all_engines,
    detect_local_target,
    gpu_capability,
    observed_kernels_check,
    parse_target,
    quantization_from_identity,
    quantization_from_lock,
    resolve_engine,
    resolve_format,
    resolve_scheme,
    split_quantization,
)

AS_OF = "2026-11-29"
MARLIN = ("int4 weight-only through Marlin (built for 8.0, 8.7 and 9.0+PTX; Machete may be chosen on Hopper)",
          "prior-art: AWQ/GPTQ int4 Marlin on Ampere-Hopper; vllm CMakeLists MARLIN_ARCHS 8.0;8.7;9.0+PTX")


def test_a_verdict_as_quant_check_json_prints_it() -> None:
    verdict = check("FP8", engine="vLLM", target=parse_target("NVIDIA H100 80GB HBM3"))
    assert verdict.to_json() == {
        "format": "fp8", "scheme": "per-tensor", "engine": "vllm", "target": "NVIDIA H100 80GB HBM3",
        "verdict": "native",
        "reason": "FP8 tensor cores (Ada, Hopper, Blackwell) run W8A8 FP8 GEMMs through CUTLASS scaled_mm",
        "source": "prior-art: FP8 W8A8 needs compute capability >= 8.9; vllm CMakeLists scaled_mm c2x 8.9 / c3x "
                  "sm90, sm100, sm120",
        "as_of": AS_OF, "compute_capability": "9.0", "gpu": "NVIDIA H100 80GB HBM3"}
    on_ada = check("fp8", engine="vllm", target=parse_target("sm_89")).to_json()
    assert (on_ada["verdict"], on_ada["compute_capability"], on_ada["gpu"], on_ada["target"]) == (
        "native", "8.9", None, "sm_89")


def test_a_combination_no_rule_covers_is_unsupported_and_says_so() -> None:
    verdict = check("fp8", engine="vllm", target=parse_target("sm_50"))
    assert verdict.to_json() == {
        "format": "fp8", "scheme": "per-tensor", "engine": "vllm", "target": "sm_50", "verdict": "unsupported",
        "reason": "no rule in the support table covers fp8 (per-tensor) on vllm at sm_50",
        "source": "execsys quant_support.toml (no entry)", "as_of": AS_OF, "compute_capability": "5.0",
        "gpu": None}
    named = check("gguf", engine="sglang", target=Target("Maxwell card", (5, 2), gpu="Maxwell card"))
    assert (named.verdict, named.compute_capability, named.gpu, named.target) == (
        "unsupported", "5.2", "Maxwell card", "Maxwell card")
    assert named.reason == "no rule in the support table covers gguf (any) on sglang at sm_52"


def test_observed_kernels_come_first_in_the_json() -> None:
    verdict = check("nvfp4", engine="vllm", target=parse_target("sm_90"))
    verdict.observed = {"verdict": "fallback"}
    data = verdict.to_json()
    assert list(data)[0] == "observed" and data["observed"] == {"verdict": "fallback"}
    assert "observed" not in check("nvfp4", engine="vllm", target=parse_target("sm_90")).to_json()


def test_every_engine_is_checked_in_the_tables_order() -> None:
    verdicts = check_all_engines("awq", scheme=None, target=parse_target("A100"))
    assert [(v.engine, v.verdict) for v in verdicts] == [
        ("vllm", "native"), ("sglang", "native"), ("trtllm", "native"), ("llamacpp", "unsupported")]
    assert (verdicts[0].reason, verdicts[0].source) == MARLIN
    assert {v.scheme for v in verdicts} == {"W4A16"} and {v.gpu for v in verdicts} == {"A100"}
    assert verdicts[3].reason == "llama.cpp loads GGUF only: convert the checkpoint to a GGUF quant"
    # a scheme given is the scheme every engine is checked for, not the format's default
    assert {v.scheme for v in check_all_engines("fp8", scheme="block", target=parse_target("H100"))} == {"block"}


@pytest.mark.parametrize(("text", "capability", "sm", "label"), [
    ("sm_90", (9, 0), "sm_90", "sm_90 (compute capability 9.0)"),
    ("sm90a", (9, 0), "sm_90", "sm_90 (compute capability 9.0)"),
    ("SM_120", (12, 0), "sm_120", "sm_120 (compute capability 12.0)"),
    ("compute_89", (8, 9), "sm_89", "sm_89 (compute capability 8.9)"),
    (" 8.6 ", (8, 6), "sm_86", "sm_86 (compute capability 8.6)"),
    ("NVIDIA GeForce RTX 4090", (8, 9), "sm_89", "NVIDIA GeForce RTX 4090 (sm_89, compute capability 8.9)"),
    ("A100-SXM4-40GB", (8, 0), "sm_80", "A100-SXM4-40GB (sm_80, compute capability 8.0)"),
])
def test_a_target_is_read_from_an_sm_a_capability_or_a_gpu_name(text: str, capability, sm: str, label: str) -> None:
    target = parse_target(text)
    assert (target.capability, target.sm, target.label) == (capability, sm, label)
    assert target.text == text.strip() and target.detected_on is None


def test_gpu_names_match_whole_words_longest_first() -> None:
    assert gpu_capability("RTX 6000 Ada Generation") == (8, 9)
    assert gpu_capability("Quadro RTX 6000") == (7, 5)
    assert gpu_capability("NVIDIA H100 80GB HBM3") == (9, 0)
    assert gpu_capability("H1000") is None and gpu_capability("") is None


def test_unknown_names_are_one_line_naming_what_is_known() -> None:
    with pytest.raises(InputError, match=r"^unknown target 'sm_95': no NVIDIA GPU has compute capability 9\.5 "
                                         r"\(known: sm_50, sm_52, .*, sm_120, sm_121\)$"):
        parse_target("sm_95")
    with pytest.raises(InputError, match=r"^unknown target 'Voodoo 3': give sm_XX \(e\.g\. sm_90\), a compute "
                                         r"capability \(9\.0\), a GPU name \(H100, L40S, RTX 4090, \.\.\.\) or 'auto'$"):
        parse_target("Voodoo 3")
    with pytest.raises(InputError, match=r"^unknown quantization format 'fp3' \(known: fp8, nvfp4, mxfp4, mxfp8, "
                                         r"int8, awq, gptq, bnb-nf4, gguf\)$"):
        resolve_format("fp3")
    with pytest.raises(InputError, match=r"^unknown scheme 'bogus' for fp8 \(known: per-tensor, block\)$"):
        resolve_scheme("fp8", "bogus")
    with pytest.raises(InputError, match=r"^unknown engine 'tgi' \(known: vllm, sglang, trtllm, llamacpp\)$"):
        resolve_engine("tgi")


def test_aliases_resolve_to_the_tables_names() -> None:
    assert resolve_format(" ModelOpt_FP4 ") == "nvfp4"
    assert resolve_engine("TensorRT-LLM") == "trtllm" and resolve_engine(" llama-server ") == "llamacpp"
    assert resolve_scheme("fp8", None) == "per-tensor" and resolve_scheme("fp8", "") == "per-tensor"
    assert resolve_scheme("gguf", "Q4_K_M") == "any"  # every GGUF quant type loads through the same engines
    assert resolve_scheme("awq", "w4a16") == "W4A16"


def identity(artifact_observed=None, artifact_declared=None, runtime_observed=None, runtime_declared=None) -> Identity:
    components = {name: {"declared": {}, "observed": {}} for name in COMPONENTS}
    components["artifact"] = {"declared": artifact_declared or {}, "observed": artifact_observed or {}}
    components["runtime"] = {"declared": runtime_declared or {}, "observed": runtime_observed or {}}
    return Identity(id="0" * 64, recorded_at="", components=components)


def test_what_a_pinned_identity_says_was_deployed() -> None:
    # the checked-in golden lock: a GGUF file (declared) served by llama.cpp
    golden = Path(__file__).parent / "data" / "golden" / "execsys.lock.json"
    assert quantization_from_lock(str(golden)) == {"format": "gguf", "scheme": None, "quantization": "Q4_K_M",
                                                   "engine": "llama.cpp"}
    hf = identity({"quantization": "awq 4-bit"}, {"quantization": "gptq"}, {"engine": "vllm"}, {"engine": "sglang"})
    assert quantization_from_identity(hf) == {"format": "awq", "scheme": None, "quantization": "awq 4-bit",
                                              "engine": "vllm"}  # observed wins; "4-bit" is no scheme
    assert quantization_from_identity(identity(None, {"quantization": "awq:machete"}, None, {"engine": "vllm"})) == {
        "format": "awq", "scheme": "machete", "quantization": "awq:machete", "engine": "vllm"}
    # an unknown observed label falls through to the declared one
    assert quantization_from_identity(identity({"quantization": "weird"}, {"quantization": "fp8/block"}))["format"] \
        == "fp8"
    unknown = quantization_from_identity(identity({"quantization": "weird"}, {"quantization": "  "}))
    assert unknown == {"format": None, "scheme": None, "quantization": "weird", "engine": None}
    assert quantization_from_identity(identity({"format": "gguf", "quantization": "awq"}))["format"] == "gguf"
    assert quantization_from_identity(identity(runtime_observed={"engine": ""}, runtime_declared={"engine": "x"}))[
        "engine"] == "x"
    assert quantization_from_identity(identity({"quantization": 4})) == {
        "format": None, "scheme": None, "quantization": None, "engine": None}


@pytest.mark.parametrize(("text", "parts"), [
    ("fp8", ("fp8", None)), (" awq:machete ", ("awq", "machete")), ("fp8/block", ("fp8", "block")),
    ("gptq W4A16", ("gptq", "W4A16")), ("nvfp4@cutlass", ("nvfp4", "cutlass")), ("awq:", ("awq", None)),
    ("a:b/c", ("a", "b/c")), ("awq:marlin:v2", ("awq", "marlin:v2")),
])
def test_a_quantization_label_splits_into_format_and_scheme(text: str, parts) -> None:
    assert split_quantization(text) == parts


def test_the_kernels_an_engine_log_names_against_the_declared_format() -> None:
    assert observed_kernels_check("nvfp4", None) is None
    assert observed_kernels_check("nvfp4", {"found": "not a list"}) is None
    marlin = {"kind": "gemm", "value": "Marlin", "fallback": True, "formats": ["nvfp4", "mxfp4"],
              "evidence": "Using MarlinFP4 kernel", "source": "vllm log pattern"}
    cutlass = {"kind": "gemm", "value": "CUTLASS", "fallback": False, "formats": ["nvfp4"]}
    kernels = {"log": "/var/log/engine.log", "found": [cutlass, marlin, "junk"]}
    assert observed_kernels_check("nvfp4", kernels) == {
        "verdict": "fallback", "log": "/var/log/engine.log",
        "selected": [{"kind": "gemm", "value": "CUTLASS"}, {"kind": "gemm", "value": "Marlin"}],
        "sentence": "declared nvfp4: observed Marlin \u2014 the deployment target runs the slow path",
        "evidence": ["Using MarlinFP4 kernel"], "sources": ["vllm log pattern"]}
    assert observed_kernels_check("fp8", kernels) == {
        "verdict": "no fallback observed", "log": "/var/log/engine.log",
        "selected": [{"kind": "gemm", "value": "CUTLASS"}, {"kind": "gemm", "value": "Marlin"}],
        "sentence": "declared fp8: no fallback kernel in the engine log", "evidence": [], "sources": []}


def test_auto_without_a_gpu_says_what_to_give_instead() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(InputError, match=r"^--target auto: no NVIDIA GPU visible here through NVML \(.*\); "
                                             r"give --target sm_XX or a GPU name, or --host DEST to read a remote GPU$"):
            detect_local_target()
        return
    pynvml.nvmlShutdown()
    target = detect_local_target()  # a GPU box: what NVML reports for GPU 0
    assert target.detected_on == "local" and target.text == f"auto:{target.gpu}"
