"""What pin notes beside the id: each declared fact this machine contradicts (the host, its GPUs, the
quantization, environment variables, harness commands, the chat template, tools no MCP server
offers), and no note for a system that is what its declaration says.

The GPUs come from a real process: an ``nvidia-smi`` on PATH that answers as a GPU box's would (this
VM has no NVIDIA driver, so NVML fails first, as on any CPU box).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from execsys import declaration
from execsys.identity import (
    Identity,
    _notes,
    pin,
)
from tests.fixtures.identity_project import (
    llama_model_dir,
    stub_program,
)


def test_pin_notes_every_declared_fact_this_machine_contradicts(tmp_path: Path) -> None:
    import socket

    llama_model_dir(tmp_path)
    (tmp_path / "template.jinja").write_text("{{ other }}\n")
    mute = stub_program(tmp_path / "bin", "python3", "")
    mute.write_text("#!/bin/sh\nexit 3\n")
    (tmp_path / "execsys.toml").write_text(
        '[artifact]\npath = "model"\nquantization = "awq"\nbogus = 1\n'
        '[context_policy]\ntemplate = "template.jinja"\n'
        '[hardware]\nhost = "gpu-box-01"\ngpu = "H200"\ngpu_count = 2\n'
        f'[harness]\ncommands = ["no-such-program-xyz --run", "{mute} -c pass"]\n'
        '[environment]\nvariables = { EXECSYS_TEST_NEVER_SET = "1", EXECSYS_TEST_NEVER_SET_2 = "1" }\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    hardware = identity.observed("hardware")
    gpus = [gpu.get("name") or "" for gpu in hardware.get("gpus") or []]
    assert socket.gethostname() != "gpu-box-01"
    expected = [
        f"{tmp_path / 'execsys.toml'}:4: unknown key 'artifact.bogus' (ignored)",
        "declared quantization 'awq' but the files say 'none (bfloat16)' (config.json (no quantization_config))",
        "declared [environment] variables that do not hold: EXECSYS_TEST_NEVER_SET, EXECSYS_TEST_NEVER_SET_2 "
        "(checked in execsys's own environment (no serving process found))",
        "harness command 'no-such-program-xyz --run': not found (on PATH, or relative to the declaration)",
        "the chat template the engine applies (tokenizer_config.json chat_template) is not the declared "
        "[context_policy] template: a flip no decoding margin explains may be this",
        f"declared host 'gpu-box-01' but this is {socket.gethostname()!r}",
    ]
    if not any("h200" in name.lower() for name in gpus):
        expected.append(f"declared GPU 'H200' but this host has {', '.join(gpus) or 'no NVIDIA GPU'}")
    if len(gpus) != 2:
        expected.append(f"declared 2 GPU(s) but this host has {len(gpus)}")
    if hardware.get("gpu_note"):
        expected.append(f"hardware: {hardware['gpu_note']}")
    interpreter_note = [n for n in identity.notes if n.startswith(f"harness command '{mute} -c pass': ")]
    assert len(interpreter_note) == 1 and interpreter_note[0].startswith(
        f"harness command '{mute} -c pass': its interpreter did not describe itself (")
    assert [n for n in identity.notes if n not in interpreter_note] == expected
    assert identity.notes.index(interpreter_note[0]) == 4  # in the order of the harness's commands


def test_a_system_that_matches_its_declaration_has_no_notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16"}))
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    (model / "model.safetensors").write_bytes(b"w" * 10)
    (tmp_path / "template.jinja").write_text("{{ messages }}\n")
    monkeypatch.setenv("EXECSYS_TEST_ALWAYS_SET", "1")
    (tmp_path / "execsys.toml").write_text(
        '[artifact]\npath = "model"\nquantization = "none"\n[context_policy]\ntemplate = "template.jinja"\n'
        '[environment]\nvariables = { EXECSYS_TEST_ALWAYS_SET = "1" }\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    gpu_note = identity.observed("hardware").get("gpu_note")
    assert identity.notes == ([f"hardware: {gpu_note}"] if gpu_note else [])


def _nvidia_smi(bin_dir: Path, names: list[str]) -> None:
    """An nvidia-smi answering the query pin makes (CSV, no header, no units) with one line per GPU."""
    bin_dir.mkdir(exist_ok=True)
    lines = "\n".join(f"{i}, {name}, GPU-{i:08d}-0000-0000-0000-000000000000, 143771, 9.0, 550.54.15, "
                      "Disabled, Enabled" for i, name in enumerate(names))
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      'case "$1" in --query-gpu=*) cat <<"EOF"\n' + lines + "\nEOF\n;;\n"
                      "*) echo '| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |';;\n"
                      "esac\n")
    script.chmod(0o755)


@pytest.fixture
def gpu_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Makes this machine report the given GPUs through nvidia-smi (NVML has no driver to load here)."""
    from execsys.observe.hardware import gpus_via_nvml

    if gpus_via_nvml()[0] is not None:
        pytest.skip("a real NVIDIA driver answers through NVML before nvidia-smi is asked")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    def with_gpus(*names: str) -> None:
        _nvidia_smi(tmp_path / "bin", list(names))

    return with_gpus


def _pin_declaring(tmp_path: Path, hardware: str) -> Identity:
    (tmp_path / "model.gguf").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(f'[artifact]\npath = "model.gguf"\n[hardware]\n{hardware}')
    return pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)


def test_a_machine_that_is_what_its_declaration_says_has_no_notes(tmp_path: Path, gpu_box) -> None:
    gpu_box("NVIDIA H200", "NVIDIA H200")
    identity = _pin_declaring(tmp_path, f'host = "{socket.gethostname()}"\ngpu = "h200"\ngpu_count = 2\n')
    assert [g["name"] for g in identity.observed("hardware")["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert identity.notes == []


def test_the_declared_gpu_is_matched_in_any_case_within_the_name(tmp_path: Path, gpu_box) -> None:
    gpu_box("NVIDIA H200")
    identity = _pin_declaring(tmp_path, 'gpu = "H200"\n')
    assert identity.notes == []


@pytest.mark.parametrize(("names", "shown"), [
    (["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"], "NVIDIA A100-SXM4-80GB, NVIDIA A100-SXM4-80GB"),
    ([""], "no NVIDIA GPU"),  # a GPU that reports no name is shown as none of the declared kind
], ids=["two-other-gpus", "a-nameless-gpu"])
def test_a_declared_gpu_this_machine_lacks_is_noted_with_every_gpu_it_has(tmp_path: Path, gpu_box,
                                                                          names: list[str], shown: str) -> None:
    gpu_box(*names)
    identity = _pin_declaring(tmp_path, 'gpu = "H200"\n')
    assert [g["name"] for g in identity.observed("hardware")["gpus"]] == names
    assert identity.notes == [f"declared GPU 'H200' but this host has {shown}"]


def test_declared_tools_no_mcp_server_offers_are_noted_in_declared_order(tmp_path: Path) -> None:
    # A real MCP server costs seconds here (the SDK's import alone takes ~2 s, and a mutation run of
    # pin re-runs this test for every change it makes), so the tools' observation is the record
    # observe_tools makes of a server offering one tool; test_tools_mcp.py pins a real server through
    # the CLI.
    from execsys.observe.tools import tool_record

    (tmp_path / "model.gguf").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(
        '[artifact]\npath = "model.gguf"\n[tools]\nenabled = ["shell", "search", "fetch"]\n')
    decl = declaration.load(tmp_path / "execsys.toml")
    components = pin(decl, require_endpoint=False).components
    # no server observed: nothing says what is offered
    assert [n for n in _notes(decl, components) if not n.startswith("hardware: ")] == []
    components["tools"]["observed"] = {"servers": [{
        "name": "web", "transport": "stdio", "command": ["web-mcp"], "server": {"name": "web", "version": "1.0"},
        "tools": [tool_record({"name": "search", "description": "Search the web",
                               "inputSchema": {"type": "object"}})]}]}
    assert [n for n in _notes(decl, components) if not n.startswith("hardware: ")] == [
        "declared tools that no MCP server offers: shell, fetch"]
