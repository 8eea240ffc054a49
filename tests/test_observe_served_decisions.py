"""The observation vocabulary and the served-artifact verdicts as decision tables (issue 26).

In process, against real files and a real HTTP server on a loopback port in this process (a stand-in
engine whose answers each test chooses), so mutation testing of ``execsys.observe.vocabulary`` and
``execsys.observe.served`` reaches them. The end-to-end checks against llama.cpp are in
tests/test_served_artifact.py, through CLI subprocesses mutation testing cannot follow. A wrong answer
here is silent: another model's weights called "the pinned artifact", an engine's numerics variable
left out of the identity, or a model-name check that never asks.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from execsys.digest import digest_path
from execsys.observe import served
from execsys.observe.served import (
    ANOTHER,
    PINNED,
    UNLISTED_MODEL_NAME,
    UNVERIFIABLE,
    DigestCache,
    answered_as,
    ask_model,
    check_served,
    honesty_evidence,
    model_name_honesty,
    served_model_path,
)
from execsys.observe.vocabulary import ENGINES, api_and_root, canonical_engine, numerics_env

# -- vocabulary ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, canonical", [
    (None, None), ("", None), ("vllm", "vllm"), (" VLLM ", "vllm"), ("LlamaCpp", "llama.cpp"),
    ("llama-cpp", "llama.cpp"), ("llama_cpp", "llama-cpp-python"), ("llama_cpp_python", "llama-cpp-python"),
    ("text-generation-inference", "tgi"), ("TRTLLM", "tensorrt-llm"), ("tensorrt_llm", "tensorrt-llm"),
    ("unknown-engine", "unknown-engine"),
])
def test_engine_names_are_canonical(name: str | None, canonical: str | None) -> None:
    assert canonical_engine(name) == canonical


def test_every_alias_names_a_known_engine() -> None:
    from execsys.observe.vocabulary import _ALIASES

    assert set(_ALIASES.values()) <= set(ENGINES)
    assert ENGINES["vllm"] == {"modules": ["vllm"], "packages": ["vllm"], "binaries": ["vllm"]}
    assert ENGINES["llama.cpp"]["binaries"] == ["llama-server", "llama-cli"]


@pytest.mark.parametrize("name, kept", [
    ("VLLM_ATTENTION_BACKEND", True), ("SGLANG_X", True), ("CUDA_VISIBLE_DEVICES", True),
    ("CUBLAS_WORKSPACE_CONFIG", True), ("GGML_CUDA_NO_PINNED", True), ("LLAMA_ARG_THREADS", True),
    ("NCCL_ALGO", True), ("TORCH_CUDNN_V8_API", True), ("OMP_NUM_THREADS", True), ("MKL_NUM_THREADS", True),
    ("NVIDIA_TF32_OVERRIDE", True), ("PYTHONHASHSEED", True), ("TORCH_DETERMINISTIC", True),
    ("MY_deterministic_FLAG", True), ("XLA_BATCH_INVARIANT", True), ("ALLOW_tf32", True),
    ("HOME", False), ("PATH", False), ("vllm_lower", False), ("TORCH_HOME", False), ("XCUDA_Y", False),
    ("OMP_PROC_BIND", False),
])
def test_which_variables_change_numerics(name: str, kept: bool) -> None:
    assert (name in numerics_env({name: "1", "UNRELATED": "x"})) is kept


def test_numerics_are_sorted_and_redacted() -> None:
    got = numerics_env({"VLLM_B": "2", "CUDA_A": "1", "VLLM_API_KEY": "sk-secretvalue123456", "HOME": "/h"})
    assert list(got) == ["CUDA_A", "VLLM_API_KEY", "VLLM_B"]
    assert got["CUDA_A"] == "1" and got["VLLM_B"] == "2" and "secretvalue" not in got["VLLM_API_KEY"]


@pytest.mark.parametrize("endpoint, api, root", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("https://gw.example/proxy/", "https://gw.example/proxy/v1", "https://gw.example"),
    ("https://gw.example/proxy/v1//", "https://gw.example/proxy/v1", "https://gw.example"),
    ("http://h:1/v10", "http://h:1/v10/v1", "http://h:1"),
    ("https://gw.example/APIX", "https://gw.example/APIX/v1", "https://gw.example"),
    ("https://gw.example/APIX/", "https://gw.example/APIX/v1", "https://gw.example"),
    ("http://h:1/v1/?x=1", "http://h:1/v1", "http://h:1"),              # the query is not part of the base
])
def test_api_base_and_origin(endpoint: str, api: str, root: str) -> None:
    assert api_and_root(endpoint) == (api, root)


# -- which model path the engine names ----------------------------------------------------------


@pytest.mark.parametrize("observed, found", [
    ({}, None),
    ({"engine_native": {"model_path": "/m.gguf"}}, ("/m.gguf", "the engine")),
    ({"engine_native": {"model_path": "/m.gguf", "model_path_source": "/props"}}, ("/m.gguf", "/props")),
    ({"engine_native": {"model_path": ""}, "process": {"argv": ["s", "-m", "/a"]}}, ("/a", "process argv -m")),
    ({"engine_native": {"model_path": 3}, "process": {"argv": ["s", "--model=/b"]}}, ("/b", "process argv --model")),
    ({"engine_native": {"model_path": "/n"}, "process": {"argv": ["s", "-m", "/a"]}}, ("/n", "the engine")),
    ({"engine_native": None, "process": None}, None),
    ({"process": {"argv": ["s", "--model-path", "/c"]}}, ("/c", "process argv --model-path")),
    ({"process": {"argv": ["s", "--model_path=/d"]}}, ("/d", "process argv --model_path")),
    ({"process": {"argv": ["s", "--model-id", "org/m"]}}, ("org/m", "process argv --model-id")),
    ({"process": {"argv": ["s", "--model-dir", "/e"]}}, ("/e", "process argv --model-dir")),
    ({"process": {"argv": ["s", "--model"]}}, None),                 # a flag with no value after it
    ({"process": {"argv": ["s", "--model="]}}, None),                # an empty value
    ({"process": {"argv": ["s", "--models", "/x"]}}, None),          # not a model flag
    ({"process": {"argv": ["s", "--port", "1", "-m", "/f", "-m", "/g"]}}, ("/f", "process argv -m")),
    ({"process": {"argv": ["s", "--model=/h", "-m", "/i"]}}, ("/h", "process argv --model")),
    ({"process": {"argv": ["s", "--model=/w/a=b.gguf"]}}, ("/w/a=b.gguf", "process argv --model")),
])
def test_the_served_model_path_and_who_said_so(observed: dict[str, Any], found: tuple[str, str] | None) -> None:
    assert served_model_path(observed) == found


# -- the verdict --------------------------------------------------------------------------------


@pytest.fixture
def weights(tmp_path: Path) -> tuple[Path, str, Path, str]:
    pinned, other = tmp_path / "pinned.gguf", tmp_path / "other.gguf"
    pinned.write_bytes(b"pinned weights")
    other.write_bytes(b"other weights")
    return pinned, digest_path(pinned).digest, other, digest_path(other).digest


def _native(path: str) -> dict[str, Any]:
    return {"engine_native": {"model_path": path, "model_path_source": "/props"}}


def test_the_pinned_file_served_is_pinned(weights) -> None:
    pinned, digest, _other, _ = weights
    got = check_served(_native(str(pinned)), {"path": str(pinned), "digest": digest}, endpoint=None, cache=DigestCache())
    assert got == {"path": str(pinned), "source": "/props", "digest": digest, "verdict": PINNED,
                   "sentence": "served: the pinned artifact"}
    assert PINNED == "the pinned artifact"


def test_another_file_served_is_another_artifact(weights) -> None:
    pinned, digest, other, other_digest = weights
    got = check_served(_native(str(other)), {"path": str(pinned), "digest": digest}, endpoint=None, cache=DigestCache())
    assert got == {"path": str(other), "source": "/props", "digest": other_digest, "verdict": ANOTHER,
                   "sentence": f"served: another artifact ({other}, {other_digest}) according to /props; "
                               f"the pinned artifact is {pinned}"}


def test_a_copy_of_the_pinned_weights_elsewhere_is_pinned(weights, tmp_path: Path) -> None:
    pinned, digest, _other, _ = weights
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(pinned.read_bytes())
    got = check_served(_native(str(copy)), {"path": str(pinned), "digest": digest}, endpoint=None, cache=DigestCache())
    assert got["verdict"] == PINNED and got["path"] == str(copy)


def test_no_pinned_digest_is_never_pinned(weights) -> None:
    pinned, _digest, _other, _ = weights
    got = check_served(_native(str(pinned)), {"path": str(pinned), "digest": None}, endpoint=None, cache=DigestCache())
    assert got["verdict"] == ANOTHER and got["digest"] == digest_path(pinned).digest


def test_nothing_to_compare_is_no_check(weights) -> None:
    pinned, digest, _other, _ = weights
    assert check_served(_native(str(pinned)), {"digest": digest}, endpoint=None, cache=DigestCache()) is None
    assert check_served(_native(str(pinned)), {"path": "", "digest": digest}, endpoint=None, cache=DigestCache()) is None
    assert check_served({}, {"path": str(pinned), "digest": digest}, endpoint=None, cache=DigestCache()) is None


def test_a_path_not_on_this_machine_is_unverifiable(weights, tmp_path: Path) -> None:
    pinned, digest, _other, _ = weights
    gone = tmp_path / "gone.gguf"
    got = check_served(_native(str(gone)), {"path": str(pinned), "digest": digest}, endpoint=None, cache=DigestCache())
    assert got == {"path": str(gone), "source": "/props", "digest": None, "verdict": UNVERIFIABLE,
                   "sentence": f"served: unverifiable (/props names {str(gone)!r}, which is not a path on this machine)"}


def test_a_path_that_cannot_be_hashed_is_unverifiable(weights, tmp_path: Path) -> None:
    import os

    pinned, digest, _other, _ = weights
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    got = check_served(_native(str(fifo)), {"path": str(pinned), "digest": digest}, endpoint=None, cache=DigestCache())
    assert {k: v for k, v in got.items() if k != "sentence"} == {
        "path": str(fifo), "source": "/props", "digest": None, "verdict": UNVERIFIABLE}
    assert got["sentence"].startswith(f"served: unverifiable (cannot hash {fifo}: ")


def test_a_relative_path_without_a_visible_process_is_unverifiable(weights) -> None:
    pinned, digest, _other, _ = weights
    got = check_served(_native("models/m.gguf"), {"path": str(pinned), "digest": digest}, endpoint=None,
                       cache=DigestCache())
    assert got == {"path": "models/m.gguf", "source": "/props", "digest": None, "verdict": UNVERIFIABLE,
                   "sentence": "served: unverifiable (/props names the relative path 'models/m.gguf' and the "
                               "serving process's working directory is not visible from here)"}


def test_a_home_path_is_expanded(weights, monkeypatch: pytest.MonkeyPatch) -> None:
    pinned, digest, _other, _ = weights
    monkeypatch.setenv("HOME", str(pinned.parent))
    got = check_served(_native("~/pinned.gguf"), {"path": str(pinned), "digest": digest}, endpoint=None,
                       cache=DigestCache())
    assert got["verdict"] == PINNED and got["path"] == str(pinned)


def test_the_pinned_digest_is_remembered_not_rehashed(weights) -> None:
    pinned, _digest, _other, _ = weights
    cache = DigestCache()
    # the command hashed the pinned file moments ago: its digest is taken as given for that same file
    got = check_served(_native(str(pinned)), {"path": str(pinned), "digest": "blake3:given"}, endpoint=None, cache=cache)
    assert got["verdict"] == PINNED and got["digest"] == "blake3:given"
    assert cache.digests == {DigestCache.key(pinned): "blake3:given"}


def test_the_cache_hashes_each_file_version_once(weights) -> None:
    import os

    pinned, digest, _other, _ = weights
    cache = DigestCache()
    assert cache.digest(pinned) == digest
    cache.digests[DigestCache.key(pinned)] = "blake3:cached"
    assert cache.digest(pinned) == "blake3:cached"
    st = pinned.stat()
    os.utime(pinned, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cache.digest(pinned) == digest  # a new mtime is a new version
    assert DigestCache.key(pinned) == (os.path.realpath(pinned), st.st_size, st.st_mtime_ns + 1_000_000)
    cache.remember(pinned.parent / "missing", "blake3:x")  # nothing to stat: nothing remembered
    assert len(cache.digests) == 2


# -- asking the endpoint ------------------------------------------------------------------------


class _Engine:
    """A loopback HTTP server that answers /v1/chat/completions as each test sets, and records requests."""

    def __init__(self) -> None:
        self.status = 200
        self.delay_s = 0.0
        self.answer: Any = {}
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                if engine.delay_s:
                    import time

                    time.sleep(engine.delay_s)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.requests.append(({"path": self.path, "auth": self.headers.get("Authorization", "")}, body))
                data = engine.answer if isinstance(engine.answer, bytes) else json.dumps(engine.answer).encode()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client that gave up
                    self.send_response(engine.status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def engine() -> Iterator[_Engine]:
    running = _Engine()
    yield running
    running.server.shutdown()
    running.server.server_close()


def _reply(model: Any, content: Any = "ok") -> dict[str, Any]:
    return {"model": model, "choices": [{"message": {"content": content}}]}


def test_asking_sends_one_token_for_the_name_and_reads_the_answer(engine: _Engine) -> None:
    engine.answer = _reply("resident", "hello " * 40)
    got = ask_model(engine.url + "/v1/", "wanted", api_key="k123")
    assert got == {"asked": "wanted", "status": 200, "answered": True, "answered_as": "resident",
                   "text": ("hello " * 40)[:80]}
    (seen, body), = engine.requests
    assert seen == {"path": "/v1/chat/completions", "auth": "Bearer k123"}
    assert body == {"model": "wanted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                    "temperature": 0}


def test_asking_without_a_key_sends_no_authorization(engine: _Engine) -> None:
    engine.answer = _reply("m", None)
    got = ask_model(engine.url, "m")
    assert got["text"] == "" and engine.requests[0][0]["auth"] == ""


@pytest.mark.parametrize("status, answer, expected", [
    (404, {"error": "no such model"}, {"asked": "x", "status": 404, "answered": False}),
    (200, b"not json", {"asked": "x", "status": 200, "answered": True}),
    (200, {"model": "m", "choices": []}, {"asked": "x", "status": 200, "answered": True, "answered_as": "m"}),
    (200, {"choices": [{"message": {"content": 5}}]},
     {"asked": "x", "status": 200, "answered": True, "answered_as": None, "text": "5"}),
    (200, {"model": "m"}, {"asked": "x", "status": 200, "answered": True, "answered_as": "m"}),
    (200, {"model": "m", "choices": None}, {"asked": "x", "status": 200, "answered": True, "answered_as": "m"}),
    (200, [1, 2], {"asked": "x", "status": 200, "answered": True}),
])
def test_what_an_answer_says(engine: _Engine, status: int, answer: Any, expected: dict[str, Any]) -> None:
    engine.status, engine.answer = status, answer
    assert ask_model(engine.url, "x") == expected


def test_an_endpoint_that_cannot_be_asked_gives_none() -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = closed.server_address[1]
    assert ask_model(f"http://127.0.0.1:{port}", "x", timeout=2) is None
    assert answered_as(f"http://127.0.0.1:{port}", "x", timeout=2) is None
    assert model_name_honesty(f"http://127.0.0.1:{port}", ["m"], timeout=2) is None


def test_the_honesty_check_asks_for_a_name_not_listed(engine: _Engine) -> None:
    engine.answer = _reply("resident", "hi")
    assert model_name_honesty(engine.url, []) is None and engine.requests == []
    got = model_name_honesty(engine.url, ["a", UNLISTED_MODEL_NAME, UNLISTED_MODEL_NAME + "-x"])
    assert engine.requests[-1][1]["model"] == UNLISTED_MODEL_NAME + "-x-x"
    assert got["asked"] == UNLISTED_MODEL_NAME + "-x-x" and got["answered"] is True
    model_name_honesty(engine.url, ["a"])
    assert engine.requests[-1][1]["model"] == UNLISTED_MODEL_NAME == "execsys-unlisted-model-name-check"


@pytest.mark.parametrize("status, answer, named", [
    (200, _reply("resident"), "resident"),
    (200, _reply(None), None),
    (200, _reply(7), None),
    (500, _reply("resident"), None),
])
def test_the_watch_reads_the_model_an_answer_names(engine: _Engine, status: int, answer: Any, named: str | None) -> None:
    engine.status, engine.answer = status, answer
    assert answered_as(engine.url, "wanted") == named
    assert engine.requests[-1][1]["model"] == "wanted"


def test_honesty_evidence_sentences() -> None:
    assert honesty_evidence({"asked": "n", "status": 200, "answered_as": "m", "text": "hi"}) == \
        "asked for the unlisted model 'n': HTTP 200, answered as 'm', saying 'hi'"
    assert honesty_evidence({"asked": "n", "status": 404}) == "asked for the unlisted model 'n': HTTP 404, answered as None"
    assert honesty_evidence({"asked": "n", "status": 200, "text": ""}) == \
        "asked for the unlisted model 'n': HTTP 200, answered as None, saying ''"


def test_the_constants_say_what_they_mean() -> None:
    assert (served.PINNED, served.ANOTHER, served.UNVERIFIABLE) == ("the pinned artifact", "another artifact", "unverifiable")
    assert "typo" in served.ANSWERS_ANY_NAME


def test_the_key_reaches_every_question(engine: _Engine) -> None:
    engine.answer = _reply("resident")
    model_name_honesty(engine.url, ["m"], api_key="k1")
    answered_as(engine.url, "m", api_key="k2")
    assert [seen["auth"] for seen, _ in engine.requests] == ["Bearer k1", "Bearer k2"]


def test_a_slow_endpoint_is_not_waited_for_past_the_timeout(engine: _Engine) -> None:
    import time

    engine.answer, engine.delay_s = _reply("resident"), 3.0
    for ask in (lambda: ask_model(engine.url, "m", timeout=0.3),
                lambda: model_name_honesty(engine.url, ["m"], timeout=0.3),
                lambda: answered_as(engine.url, "m", timeout=0.3)):
        started = time.monotonic()
        assert ask() is None
        assert time.monotonic() - started < 2.0


def test_a_relative_path_is_the_serving_process_s(weights, engine: _Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in engine listens in this very process: its working directory is this test's."""
    pinned, digest, _other, other_digest = weights
    monkeypatch.chdir(pinned.parent)
    got = check_served(_native("pinned.gguf"), {"path": str(pinned), "digest": digest}, endpoint=engine.url,
                       cache=DigestCache())
    assert got["verdict"] == PINNED and got["path"] == str(pinned)
    got = check_served(_native("./sub/../other.gguf"), {"path": str(pinned), "digest": digest},
                       endpoint=engine.url, cache=DigestCache())
    assert got["verdict"] == ANOTHER and got["path"] == str(pinned.parent / "other.gguf")
    assert got["digest"] == other_digest


def test_a_relative_path_is_resolved_in_another_serving_process_s_directory(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A real second process listens, from its own directory: the path is its, not this test's."""
    import socket
    import subprocess
    import sys
    import time

    serving_dir, here = tmp_path / "serving", tmp_path / "here"
    serving_dir.mkdir()
    here.mkdir()
    weights = serving_dir / "w.gguf"
    weights.write_bytes(b"weights")
    (here / "w.gguf").write_bytes(b"not the served weights")
    monkeypatch.chdir(here)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              cwd=serving_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as attempt:
                if attempt.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        digest = digest_path(weights).digest
        got = check_served(_native("w.gguf"), {"path": str(weights), "digest": digest},
                           endpoint=f"http://127.0.0.1:{port}", cache=DigestCache())
        assert got["path"] == str(weights) and got["verdict"] == PINNED
    finally:
        server.terminate()
        server.wait(timeout=10)
