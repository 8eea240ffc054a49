"""`execsys quant check`: the shipped support table queried for every format at five targets."""

from __future__ import annotations

import json

import pytest

from execsys import quant
from execsys.canonical import content_id
from execsys.errors import InputError

TARGETS = ["sm_80", "sm_89", "sm_90", "sm_100", "sm_120"]
FORMATS = ["fp8", "nvfp4", "mxfp4", "mxfp8", "int8", "awq", "gptq", "bnb-nf4", "gguf"]
ENGINES = ["vllm", "sglang", "trtllm", "llamacpp"]

# (format, scheme, engine, target) -> verdict, as the cited sources support it.
EXPECTED = {
    # FP8 W8A8 needs cc >= 8.9; vLLM falls back to FP8 Marlin (weight-only) on Ampere.
    ("fp8", "per-tensor", "vllm", "sm_80"): "fallback",
    ("fp8", "per-tensor", "vllm", "sm_89"): "native",
    ("fp8", "per-tensor", "vllm", "sm_90"): "native",
    ("fp8", "per-tensor", "vllm", "sm_100"): "native",
    ("fp8", "per-tensor", "vllm", "sm_120"): "native",
    # block-wise FP8 has no Marlin path in vLLM (vllm#13885); SGLang falls back to FP8 Marlin on Ampere
    # (can_auto_enable_marlin_fp8, sglang PR #31340; sglang#7715 was the failure before it).
    ("fp8", "block", "vllm", "sm_80"): "unsupported",
    ("fp8", "block", "vllm", "sm_90"): "native",
    ("fp8", "per-tensor", "sglang", "sm_80"): "fallback",
    ("fp8", "per-tensor", "sglang", "sm_89"): "native",
    # NVFP4: Marlin fallback off Blackwell in vLLM, native on sm_100, fallback cases on sm_120.
    ("nvfp4", "W4A4", "vllm", "sm_80"): "fallback",
    ("nvfp4", "W4A4", "vllm", "sm_90"): "fallback",
    ("nvfp4", "W4A4", "vllm", "sm_100"): "native",
    ("nvfp4", "W4A4", "vllm", "sm_120"): "fallback",
    ("nvfp4", "W4A4", "trtllm", "sm_90"): "unsupported",
    ("nvfp4", "W4A4", "trtllm", "sm_100"): "native",
    ("nvfp4", "W4A4", "trtllm", "sm_120"): "native",
    ("nvfp4", "W4A4", "sglang", "sm_100"): "native",
    ("nvfp4", "W4A4", "sglang", "sm_90"): "fallback",
    # MXFP4: llama.cpp everywhere; TensorRT-LLM native on Blackwell.
    ("mxfp4", "W4A16", "llamacpp", "sm_80"): "native",
    ("mxfp4", "W4A16", "llamacpp", "sm_120"): "native",
    ("mxfp4", "W4A16", "trtllm", "sm_100"): "native",
    # MXFP8: Transformer Engine only on 10.0/10.3.
    ("mxfp8", "W8A8", "trtllm", "sm_100"): "native",
    ("mxfp8", "W8A8", "trtllm", "sm_90"): "unsupported",
    ("mxfp8", "W8A8", "trtllm", "sm_120"): "unsupported",
    # INT8 W8A8: vLLM Turing-Hopper, not at >= 10.0.
    ("int8", "W8A8", "vllm", "sm_80"): "native",
    ("int8", "W8A8", "vllm", "sm_90"): "native",
    ("int8", "W8A8", "vllm", "sm_100"): "unsupported",
    ("int8", "W8A8", "vllm", "sm_120"): "unsupported",
    # AWQ/GPTQ int4: Marlin on Ampere and newer; Machete only on Hopper.
    ("awq", "W4A16", "vllm", "sm_80"): "native",
    ("gptq", "W4A16", "vllm", "sm_90"): "native",
    ("gptq", "machete", "vllm", "sm_90"): "native",
    ("gptq", "machete", "vllm", "sm_80"): "fallback",
    ("gptq", "machete", "vllm", "sm_89"): "fallback",
    ("awq", "machete", "vllm", "sm_100"): "fallback",
    ("awq", "machete", "vllm", "sm_120"): "fallback",
    ("awq", "W4A16", "llamacpp", "sm_90"): "unsupported",
    # bitsandbytes: Volta-Hopper in vLLM.
    ("bnb-nf4", "nf4", "vllm", "sm_80"): "native",
    ("bnb-nf4", "nf4", "vllm", "sm_90"): "native",
    ("bnb-nf4", "nf4", "vllm", "sm_100"): "unsupported",
    # GGUF: llama.cpp everywhere; vLLM experimental.
    ("gguf", "any", "llamacpp", "sm_100"): "native",
    ("gguf", "any", "vllm", "sm_90"): "fallback",
    ("gguf", "any", "trtllm", "sm_90"): "unsupported",
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_at_every_target_has_a_sourced_verdict(fmt: str, target: str) -> None:
    parsed = quant.parse_target(target)
    for scheme in quant.formats()[fmt]["schemes"]:
        for engine in ENGINES:
            verdict = quant.check(fmt, scheme=scheme, engine=engine, target=parsed)
            assert verdict.verdict in ("native", "fallback", "unsupported")
            # Every answer comes from a written rule, not from the "no entry" default.
            assert "no entry" not in verdict.source, (fmt, scheme, engine, target)
            assert verdict.reason and verdict.as_of
            expected = EXPECTED.get((fmt, scheme, engine, target))
            if expected is not None:
                assert verdict.verdict == expected, (fmt, scheme, engine, target, verdict.reason)


def test_every_expectation_is_exercised() -> None:
    for (fmt, scheme, _engine, target) in EXPECTED:
        assert fmt in FORMATS and target in TARGETS
        assert scheme in quant.formats()[fmt]["schemes"]


def test_sources_cite_the_field_reports() -> None:
    sources = " ".join(rule["source"] for rule in quant.support_table()["rules"])
    for cited in ("vllm#13885", "sglang#7715", "vllm#30135"):
        assert cited in sources


@pytest.mark.parametrize(
    ("name", "cc"),
    [("NVIDIA A100-SXM4-80GB", (8, 0)), ("NVIDIA L4", (8, 9)), ("NVIDIA L40S", (8, 9)),
     ("NVIDIA GeForce RTX 4090", (8, 9)), ("NVIDIA H100 80GB HBM3", (9, 0)), ("NVIDIA H200", (9, 0)),
     ("NVIDIA B200", (10, 0)), ("NVIDIA GeForce RTX 5090", (12, 0)), ("Tesla T4", (7, 5)),
     ("Tesla V100-SXM2-16GB", (7, 0)), ("NVIDIA RTX 6000 Ada Generation", (8, 9))],
)
def test_gpu_names_map_to_compute_capability(name: str, cc: tuple[int, int]) -> None:
    assert quant.parse_target(name).capability == cc


@pytest.mark.parametrize(("text", "cc"), [("sm_90a", (9, 0)), ("sm100", (10, 0)), ("12.0", (12, 0)), ("sm_75", (7, 5))])
def test_sm_and_capability_spellings(text: str, cc: tuple[int, int]) -> None:
    assert quant.parse_target(text).capability == cc


def test_aliases_resolve() -> None:
    assert quant.resolve_scheme("gguf", "Q4_K_M") == "any"  # a GGUF file type names its scheme
    assert quant.resolve_format("modelopt_fp4") == "nvfp4"
    assert quant.resolve_format("bitsandbytes") == "bnb-nf4"
    assert quant.resolve_scheme("fp8", "blockwise") == "block"
    assert quant.resolve_engine("TensorRT-LLM") == "trtllm"
    with pytest.raises(InputError):
        quant.resolve_format("fp9")


def test_cli_json_one_engine(cli) -> None:
    result = cli("quant", "check", "fp8", "--engine", "vllm", "--target", "A100", "--json")
    assert result.returncode == 1  # a fallback is a finding
    data = result.json()
    assert {"format", "scheme", "engine", "target", "verdict", "reason", "source", "as_of"} <= set(data)
    assert data["verdict"] == "fallback"
    assert "Marlin" in data["reason"]
    assert data["compute_capability"] == "8.0"
    native = cli("quant", "check", "fp8", "--engine", "vllm", "--target", "sm_89", "--json")
    assert native.returncode == 0 and native.json()["verdict"] == "native"


def test_cli_all_engines_is_a_list(cli) -> None:
    result = cli("quant", "check", "nvfp4", "--target", "sm_90", "--json")
    data = result.json()
    assert [row["engine"] for row in data] == ENGINES
    assert result.returncode == 1  # no engine runs NVFP4 natively on Hopper
    human = cli("quant", "check", "nvfp4", "--target", "H100")
    assert "fallback" in human.stdout and "Marlin" in human.stdout and "source:" in human.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["fp9", "--target", "sm_90"], "unknown quantization format"),
     (["fp8", "--target", "sm_9x"], "unknown target"),
     (["fp8", "--target", "sm_999"], "no NVIDIA GPU has compute capability 99.9"),
     (["fp8", "--target", "13.7"], "unknown target"),
     (["fp8", "--target", "Voodoo 5"], "unknown target"),
     (["fp8", "--engine", "ollama", "--target", "sm_90"], "unknown engine"),
     (["fp8", "--scheme", "W3A3", "--target", "sm_90"], "unknown scheme")],
)
def test_bad_input_is_one_line_exit_2(cli, args: list[str], needle: str) -> None:
    result = cli("quant", "check", *args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def _first_gpu_here() -> tuple[str, str] | None:
    """(name, compute capability) of this machine's first NVIDIA GPU, read through NVML by the test
    itself -- never from the command under test -- or None when there is none."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        return (name.decode() if isinstance(name, bytes) else str(name), f"{major}.{minor}")
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


def test_target_auto_without_a_gpu_is_a_clear_exit_2(cli) -> None:
    gpu = _first_gpu_here()
    if gpu is not None:
        result = cli("quant", "check", "fp8", "--engine", "vllm", "--target", "auto", "--json")
        assert result.returncode in (0, 1), result.stderr
        assert (result.json()["gpu"], result.json()["compute_capability"]) == gpu
        return
    result = cli("quant", "check", "fp8", "--target", "auto")
    assert result.returncode == 2
    assert "no NVIDIA GPU" in result.stderr and "--target sm_XX" in result.stderr


def test_target_auto_over_ssh_reports_the_remote_has_no_gpu(cli, ssh_config_env) -> None:
    # The loopback sshd is this machine: whether "the remote" has a GPU is decided here, through NVML,
    # independently of the answer under test (a GPU-less remote must never be answered as some sm_XX).
    gpu = _first_gpu_here()
    result = cli("quant", "check", "fp8", "--engine", "vllm", "--target", "auto", "--host", ssh_config_env.dest,
                 "--json")
    if gpu is not None:
        assert result.returncode in (0, 1), result.stderr
        assert (result.json()["gpu"], result.json()["compute_capability"]) == gpu
        return
    assert result.returncode == 2 and result.stdout == ""
    assert ssh_config_env.dest in result.stderr and "no NVIDIA GPU there" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _write_lock(path, **declared) -> str:
    from execsys import COMPONENTS

    components = {name: {"declared": dict(declared.get(name, {})), "observed": {}} for name in COMPONENTS}
    data = {"schema": "execsys.identity/1", "id": content_id(components), "recorded_at": "2026-11-30T00:00:00Z",
            "declaration": {}, "components": components, "notes": []}
    path.write_text(json.dumps(data))
    return data["id"]


def test_lock_file_quantization_is_checked(cli, tmp_path) -> None:
    lock = tmp_path / "execsys.lock.json"
    _write_lock(lock, artifact={"path": "model", "quantization": "awq:machete"}, runtime={"engine": "vllm"})
    on_a100 = cli("quant", "check", "--lock", str(lock), "--target", "A100", "--json")
    assert on_a100.returncode == 1
    data = on_a100.json()
    assert (data["format"], data["scheme"], data["engine"], data["verdict"]) == ("awq", "machete", "vllm", "fallback")
    on_h100 = cli("quant", "check", "--lock", str(lock), "--target", "H100", "--json")
    assert on_h100.returncode == 0 and on_h100.json()["verdict"] == "native"


def test_lock_without_a_known_quantization_is_exit_2(cli, tmp_path) -> None:
    lock = tmp_path / "execsys.lock.json"
    _write_lock(lock, artifact={"path": "model"})
    result = cli("quant", "check", "--lock", str(lock), "--target", "sm_90")
    assert result.returncode == 2 and "give FORMAT" in result.stderr


def test_the_pinned_quantization_comes_from_the_lock_beside_the_declaration(cli, tmp_path) -> None:
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "execsys.toml").write_text("")
    _write_lock(tmp_path / "eval" / "execsys.lock.json", artifact={"path": "model", "quantization": "fp8"},
                runtime={"engine": "vllm"})
    result = cli("quant", "check", "--config", "eval/execsys.toml", "--target", "A100", "--json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    data = result.json()
    assert (data["format"], data["engine"], data["verdict"]) == ("fp8", "vllm", "fallback")


def test_no_format_and_no_lock_names_where_it_looked(cli, tmp_path) -> None:
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "execsys.toml").write_text("")
    result = cli("quant", "check", "--config", "eval/execsys.toml", "--target", "A100", cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "give a FORMAT" in result.stderr and "looked for eval/execsys.lock.json" in result.stderr
    # with a FORMAT, no lock is read: a broken one lying beside the declaration does not matter
    (tmp_path / "eval" / "execsys.lock.json").write_text("{not json")
    named = cli("quant", "check", "fp8", "--engine", "vllm", "--config", "eval/execsys.toml", "--target", "H100",
                cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    broken = cli("quant", "check", "--lock", "eval/execsys.lock.json", "--target", "H100", cwd=tmp_path)
    assert broken.returncode == 2 and "not valid JSON" in broken.stderr
