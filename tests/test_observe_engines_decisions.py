"""How each engine's own answers are read, as decision tables: llama.cpp's ``/props``, ``/health``, ``/slots``;
llama-cpp-python's ``/v1/models`` and argv; vLLM's ``/version``, ``/v1/models``, ``/metrics``, ``/server_info``
and fingerprint; SGLang's ``/get_server_info`` and ``/get_model_info``; Ollama's ``/api/*`` -- and the bounded
client's reasons for an absent endpoint, the argv reader, the registry.

Recorded answers (tests/data/engines/) and hand-made variants are served by a loopback server in a thread;
every case runs in milliseconds, in-process.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from execsys.observe import engines
from execsys.observe.engines import vllm
from tests.fixtures.fake_http import routed_servers

DATA = Path(__file__).parent / "data" / "engines"
MODEL = "/models/served.gguf"


def recorded(name: str) -> tuple[int, str, bytes]:
    return 200, "application/json", (DATA / name).read_text().replace("{MODEL}", MODEL).encode()


def ok(body: Any, ctype: str = "application/json") -> tuple[int, str, bytes]:
    return 200, ctype, (body if isinstance(body, bytes) else json.dumps(body).encode())



@pytest.fixture
def serve():
    with routed_servers() as start:
        yield start


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- the observation's two halves --------------------------------------------------------------------------


def test_the_identity_half_keeps_which_endpoints_answered_and_the_volatile_half_why_others_did_not() -> None:
    seen = engines.NativeObservation("vllm", identity={"version": "1"}, volatile={"uptime": 5},
                                     read=["/version", "/metrics", "/version"],
                                     absent={"/server_info": "HTTP 404", "/a": "timeout"},
                                     model_path="/m", model_path_source="/v1/models root")
    assert seen.to_identity_json() == {"engine": "vllm", "version": "1", "model_path": "/m",
                                       "model_path_source": "/v1/models root", "read": ["/metrics", "/version"],
                                       "absent": ["/a", "/server_info"]}
    volatile = seen.to_volatile_json()
    assert volatile == {"uptime": 5, "absent_because": {"/a": "timeout", "/server_info": "HTTP 404"}}
    assert list(volatile["absent_because"]) == ["/a", "/server_info"]
    assert engines.NativeObservation("x").to_identity_json() == {
        "engine": "x", "model_path": None, "model_path_source": None, "read": [], "absent": []}


# -- the bounded client --------------------------------------------------------------------------------------


def test_the_client_reads_json_and_text_and_records_each_absence_s_reason(serve) -> None:
    server = serve({"/json": ok({"a": 1}), "/text": ok(b"# HELP x\nx 1\n", "text/plain"),
                    "/refused": (503, "application/json", b"{}"), "/broken": ok(b"{nope"),
                    "/big": ok(b'"' + b"x" * 40 + b'"'), "/post": ok({"posted": True})})
    seen = engines.NativeObservation("t")
    with engines.EngineClient(server.url("") + "/", api_key="sk-engine-key-1234", timeout=2.0,
                              max_bytes=30) as client:
        assert client.root == server.url("") and client.timeout == 2.0 and client.max_bytes == 30
        assert client.get("/json?verbose=1", seen) == {"a": 1}
        assert client.get_text("/text", seen) == "# HELP x\nx 1\n"
        assert client.get("/refused", seen) is None
        assert client.get("/broken", seen) is None
        assert client.get("/big", seen) is None
        assert client.get("/missing", seen) is None
        assert client.post("/post", seen, {"model": "m"}) == {"posted": True}
    assert seen.read == ["/json", "/text", "/post"]  # by endpoint, without the query
    assert seen.absent == {"/refused": "HTTP 503", "/broken": "not JSON", "/big": "answer larger than 30 bytes",
                           "/missing": "HTTP 404"}
    requests = server.server.seen
    assert requests[0][1] == "/json?verbose=1"  # the query is still sent
    assert {auth for _, _, auth, _ in requests} == {"Bearer sk-engine-key-1234"}
    assert requests[-1][0] == "POST" and requests[-1][3] == {"model": "m"}


def test_an_answer_at_the_size_cap_is_read(serve) -> None:
    body = b'"' + b"x" * 28 + b'"'  # 30 bytes
    server = serve({"/at": ok(body)})
    seen = engines.NativeObservation("t")
    with engines.EngineClient(server.url(""), max_bytes=30) as client:
        assert client.get("/at", seen) == "x" * 28
    with engines.EngineClient(server.url(""), max_bytes=29) as client:
        assert client.get("/at", seen) is None
    assert seen.absent == {"/at": "answer larger than 29 bytes"}
    assert engines.MAX_RESPONSE_BYTES == 1 << 20


def test_the_client_sends_no_key_when_none_is_given(serve) -> None:
    server = serve({"/json": ok({})})
    with engines.EngineClient(server.url("")) as client:
        assert client.timeout == 5.0 and client.max_bytes == engines.MAX_RESPONSE_BYTES
        client.get("/json", engines.NativeObservation("t"))
    assert server.server.seen[0][2] is None


def test_an_engine_that_is_not_there_is_an_absence_with_the_error_s_name() -> None:
    seen = engines.NativeObservation("t")
    with engines.EngineClient(f"http://127.0.0.1:{_closed_port()}", timeout=1.0) as client:
        assert client.get("/props?x=1", seen) is None
    assert list(seen.absent) == ["/props"]
    assert seen.absent["/props"].startswith("ConnectError: ")
    assert len(seen.absent["/props"]) <= len("ConnectError: ") + 120


def test_an_engine_that_never_answers_is_an_absence_within_the_timeout() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        seen = engines.NativeObservation("t")
        with engines.EngineClient(f"http://127.0.0.1:{listening.getsockname()[1]}", timeout=0.2) as client:
            assert client.get("/props", seen) is None
            assert client.get("/slow", seen, budget=0.2) is None
    assert seen.absent == {"/props": "no answer within the timeout", "/slow": "no answer within the timeout"}


def test_an_answer_past_the_observation_cap_is_an_absence_saying_so(serve) -> None:
    server = serve({"/huge": ok(b'"' + b"x" * (9 << 20) + b'"')})
    seen = engines.NativeObservation("t")
    with engines.EngineClient(server.url(""), max_bytes=64 << 20) as client:
        assert client.get("/huge", seen) is None
    assert seen.absent == {"/huge": "answered more than 8 MiB"}


# -- argv ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "expected"), [
    (["-c", "4096"], {"-c": "4096"}),
    (["--ctx-size=8192"], {"--ctx-size": "8192"}),
    (["-c", "1", "-c", "2"], {"-c": "2"}),                   # the last one wins
    (["-c=1", "-c", "2"], {"-c": "2"}),
    (["-c", "2", "-c=3"], {"-c": "3"}),
    (["-fa", "-c", "4"], {"-fa": True, "-c": "4"}),           # a name followed by a flag is a switch
    (["--seed", "-1"], {"--seed": "-1"}),                     # a negative number is a value
    (["--seed", "-x"], {"--seed": True}),
    (["-c"], {"-c": True}),                                   # at the end: a switch
    (["--slots"], {"--slots": True}),
    (["--slots=1"], {}),                                      # a switch is never spelled with a value
    (["--other", "v", "--unknown=3"], {}),
    (["model.gguf", "-c", "=5"], {"-c": "=5"}),
    (["--ctx-size=a=b"], {"--ctx-size": "a=b"}),
    ([], {}),
])
def test_argv_options_read_values_and_switches_as_argparse_would(argv: list[str], expected: dict) -> None:
    assert engines.argv_options(argv, ("-c", "--ctx-size", "--seed", "-fa"), switches=("--slots",)) == expected


@pytest.mark.parametrize(("word", "flag"), [("-c", True), ("--x", True), ("-1", False), ("-0.5", False),
                                            ("value", False), ("", False), ("-", True)])
def test_what_counts_as_a_flag(word: str, flag: bool) -> None:
    assert engines._is_flag(word) is flag


@pytest.mark.parametrize(("process", "expected"), [
    (None, []), ({}, []), ({"argv": "a b"}, []), ({"argv": ["a", 1]}, ["a", "1"]), ({"note": "remote"}, []),
])
def test_a_process_s_argv_is_a_list_of_words_or_nothing(process, expected) -> None:
    assert engines.process_argv(process) == expected


@pytest.mark.parametrize(("data", "expected"), [
    ({"data": [{"id": "a"}, "b", 3, {"id": "c"}]}, [{"id": "a"}, {"id": "c"}]),
    ({"data": {"id": "a"}}, []), ({"models": []}, []), ([{"id": "a"}], []), (None, []),
])
def test_the_models_of_a_models_list(data, expected) -> None:
    assert engines.models_list(data) == expected


def test_pick_keeps_scalars_and_lists_of_scalars_only() -> None:
    data = {"s": "x", "i": 1, "f": 1.5, "b": False, "l": [1, "a", True], "mixed": [1, {"a": 1}], "d": {"a": 1},
            "n": None, "empty": [], "other": 1}
    assert engines.pick(data, ("s", "i", "f", "b", "l", "mixed", "d", "n", "empty", "absent")) == {
        "s": "x", "i": 1, "f": 1.5, "b": False, "l": [1, "a", True], "empty": []}
    assert engines.pick(["s"], ("s",)) == {}
    assert engines.pick(None, ("s",)) == {}


@pytest.mark.parametrize(("value", "expected"), [("12", 12), (7, 7), (7.9, 7), ("x", None), (None, None),
                                                 ([], None)])
def test_int_or_none(value, expected) -> None:
    assert engines.int_or_none(value) == expected


def test_blake3_of_a_text_is_its_utf8_bytes_digest() -> None:
    import blake3

    assert engines.blake3_text("é") == blake3.blake3("é".encode()).hexdigest()


# -- the registry ----------------------------------------------------------------------------------------------


def test_the_registry_knows_each_engine_by_its_canonical_name() -> None:
    assert engines.known_engines() == ["llama-cpp-python", "llama.cpp", "ollama", "sglang", "vllm"]


def test_an_engine_is_found_by_any_of_its_spellings_and_its_fingerprint_is_read(serve) -> None:
    server = serve({"/version": ok({"version": "0.32.0"})})
    seen = engines.introspect("VLLM", server.url(""), system_fingerprint="vllm-0.32.0-tp2-1a2b3c4d")
    assert seen is not None and seen.engine == "vllm"
    assert seen.identity["fingerprint"] == {"value": "vllm-0.32.0-tp2-1a2b3c4d", "version": "0.32.0",
                                            "parallelism": ["tp2"], "config_hash": "1a2b3c4d"}
    assert "fingerprint" not in engines.introspect("vllm", server.url(""), system_fingerprint="").identity
    assert "fingerprint" not in engines.introspect("vllm", server.url("")).identity


def test_an_engine_without_a_fingerprint_reader_keeps_none(serve) -> None:
    server = serve({})
    seen = engines.introspect("sglang", server.url(""), system_fingerprint="fp_1")
    assert seen is not None and "fingerprint" not in seen.identity


def test_the_key_and_timeout_reach_the_engine_s_requests(serve) -> None:
    server = serve({"/api/version": ok({"version": "0.12.6"})})
    seen = engines.introspect("ollama", server.url(""), api_key="sk-ollama-key-5566", timeout=2.0)
    assert seen is not None and seen.identity["version"] == "0.12.6"
    assert {auth for _, _, auth, _ in server.server.seen} == {"Bearer sk-ollama-key-5566"}


# -- llama.cpp ------------------------------------------------------------------------------------------------


def _llama(routes: dict, serve, process: dict | None = None) -> engines.NativeObservation:
    server = serve(routes)
    seen = engines.introspect("llama.cpp", server.url(""), process=process, timeout=2.0)
    assert seen is not None
    return seen


def test_llama_cpp_s_recorded_answers(serve) -> None:
    seen = _llama({"/props": recorded("llama_cpp_props.json"), "/health": recorded("llama_cpp_health.json"),
                   "/v1/models": recorded("llama_cpp_models.json"),
                   "/slots": ok([{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False},
                                 {"id": 2, "is_processing": True}, "x"])}, serve)
    assert seen.identity == {
        "n_ctx": 4096, "total_slots": 4, "build_info": "b6058-3f4fc97f",
        "chat_template_blake3": engines.blake3_text("{% for message in messages %}{{ message.content }}{% endfor %}"),
        "model_meta": {"n_params": 8030261248, "size": 4912898304, "n_ctx_train": 131072, "n_vocab": 128256,
                       "n_embd": 4096},
        "flags": {}}
    assert seen.model_path == MODEL and seen.model_path_source == "/props model_path"
    assert seen.volatile == {"health": "ok", "slots_processing": 2, "slots": 4}
    assert seen.absent == {}


@pytest.mark.parametrize(("props", "expected"), [
    # an older llama-server: n_ctx at the top level
    ({"n_ctx": 2048}, {"n_ctx": 2048, "total_slots": None, "build_info": None, "chat_template_blake3": None}),
    ({"default_generation_settings": "x", "n_ctx": "1024"}, {"n_ctx": 1024}),
    ({"default_generation_settings": {"n_ctx": 512}, "n_ctx": 1024}, {"n_ctx": 512}),
    ({"default_generation_settings": {}}, {"n_ctx": None}),
    ({"build_info": 6058, "chat_template": ""}, {"build_info": None, "chat_template_blake3": None}),
    ({"chat_template": 5, "total_slots": "2"}, {"chat_template_blake3": None, "total_slots": 2}),
])
def test_llama_cpp_s_props_in_each_shape(serve, props: dict, expected: dict) -> None:
    seen = _llama({"/props": ok(props)}, serve)
    for key, value in expected.items():
        assert seen.identity[key] == value, key
    assert seen.model_path is None and seen.model_path_source is None


@pytest.mark.parametrize("model_path", ["", 5, None])
def test_llama_cpp_s_props_without_a_model_path_fall_back_to_the_argv(serve, model_path) -> None:
    seen = _llama({"/props": ok({"model_path": model_path})}, serve,
                  {"argv": ["llama-server", "--model", "/m/a.gguf", "-ngl", "99", "--slots", "-nkvo"]})
    assert seen.model_path == "/m/a.gguf" and seen.model_path_source == "process argv --model"
    assert seen.identity["flags"] == {"-ngl": "99", "--slots": True, "-nkvo": True}


def test_a_bare_model_flag_names_no_weights(serve) -> None:
    """``-m`` with no value (or before another flag) is no path: never the weights "True"."""
    seen = _llama({}, serve, {"argv": ["llama-server", "-c", "1", "-m"]})
    assert seen.model_path is None and seen.model_path_source is None
    seen = _llama({}, serve, {"argv": ["llama-server", "-m", "--model", "/m/b.gguf"]})
    assert seen.model_path == "/m/b.gguf" and seen.model_path_source == "process argv --model"
    lcp = _lcp([{"id": "/m/listed.gguf"}], serve, ["python", "-m", "llama_cpp.server", "--model"])
    assert lcp.model_path == "/m/listed.gguf" and lcp.model_path_source == "/v1/models id (no --model_alias)"
    vllm_seen = engines.introspect("vllm", serve({}).url(""), process={"argv": ["python", "x", "--model"]})
    assert vllm_seen is not None and vllm_seen.model_path is None


def test_llama_cpp_s_props_model_path_decides_over_the_argv(serve) -> None:
    seen = _llama({"/props": ok({"model_path": "/from/props.gguf"})}, serve,
                  {"argv": ["llama-server", "-m", "/from/argv.gguf"]})
    assert seen.model_path == "/from/props.gguf" and seen.model_path_source == "/props model_path"


def test_llama_cpp_without_props_or_a_model_flag_names_no_weights(serve) -> None:
    seen = _llama({}, serve, {"argv": ["llama-server", "-c", "4096"]})
    assert seen.model_path is None and seen.model_path_source is None
    assert seen.identity == {"flags": {"-c": "4096"}}
    assert seen.volatile == {}
    assert sorted(seen.absent) == ["/health", "/props", "/slots", "/v1/models"]


@pytest.mark.parametrize(("routes", "volatile", "meta"), [
    ({"/health": ok(["ok"]), "/slots": ok({"0": {}})}, {}, "absent"),
    ({"/health": ok({"state": "x"}), "/slots": ok([])}, {"health": None, "slots_processing": 0, "slots": 0},
     "absent"),
    ({"/v1/models": ok({"data": [{"id": "m", "meta": "x"}]})}, {}, None),
    ({"/v1/models": ok({"data": [{"id": "m", "meta": {"n_params": 1, "other": 2}}]})}, {}, {"n_params": 1}),
    ({"/v1/models": ok({"data": [{"id": "m"}]})}, {}, None),
    ({"/v1/models": ok({"data": []})}, {}, "absent"),
])
def test_llama_cpp_s_health_slots_and_model_meta_in_each_shape(serve, routes, volatile, meta) -> None:
    seen = _llama(routes, serve)
    assert seen.volatile == volatile
    if meta == "absent":
        assert "model_meta" not in seen.identity
    else:
        assert seen.identity["model_meta"] == meta


# -- llama-cpp-python -------------------------------------------------------------------------------------------


def _lcp(models: list, serve, argv: list[str] | None) -> engines.NativeObservation:
    server = serve({"/v1/models": ok({"data": models})})
    seen = engines.introspect("llama_cpp_python", server.url(""), process={"argv": argv} if argv else None)
    assert seen is not None and seen.engine == "llama-cpp-python"
    return seen


def test_llama_cpp_python_s_settings_are_its_argv_and_its_weights_its_model_flag(serve) -> None:
    seen = _lcp([{"id": "b"}, {"id": "a"}], serve,
                ["python", "-m", "llama_cpp.server", "--n_ctx", "4096", "--model", "/m/x.gguf",
                 "--model_alias", "x", "--unknown", "1"])
    assert seen.identity == {"models": ["a", "b"],
                             "settings": {"model": "/m/x.gguf", "model_alias": "x", "n_ctx": "4096"}}
    assert list(seen.identity["settings"]) == ["model", "model_alias", "n_ctx"]
    assert seen.model_path == "/m/x.gguf" and seen.model_path_source == "process argv --model"


@pytest.mark.parametrize(("models", "argv", "path"), [
    ([{"id": "/m/listed.gguf"}], None, "/m/listed.gguf"),                   # listed by the path it was given
    ([{"id": "alias"}], ["python", "--model_alias", "alias"], None),       # an alias is not a path
    ([{"id": "/m/a.gguf"}, {"id": "/m/b.gguf"}], None, None),                # two: which one?
    ([], None, None),
])
def test_llama_cpp_python_without_a_model_flag(serve, models, argv, path) -> None:
    seen = _lcp(models, serve, argv)
    assert seen.model_path == path
    assert seen.model_path_source == ("/v1/models id (no --model_alias)" if path else None)


# -- Ollama -------------------------------------------------------------------------------------------------------


def test_ollama_s_recorded_answers(serve) -> None:
    server = serve({"/api/version": recorded("ollama_version.json"), "/api/tags": recorded("ollama_tags.json"),
                    "/api/show": recorded("ollama_show.json"), "/api/ps": recorded("ollama_ps.json")})
    seen = engines.introspect("ollama", server.url(""))
    assert seen is not None
    digest = "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72"
    assert seen.identity == {"version": "0.12.6", "models": [
        {"name": "llama3.2:latest", "digest": digest,
         "details": {"format": "gguf", "family": "llama", "families": ["llama"], "parameter_size": "3.2B",
                     "quantization_level": "Q4_K_M", "parent_model": ""},
         "parameters": 'stop "<|eot_id|>"'}]}
    assert seen.volatile == {"resident": [{"name": "llama3.2:latest", "digest": digest, "size_vram": 3770000000,
                                           "expires_at": "2025-10-30T11:07:17.4Z"}]}
    assert ("POST", "/api/show", None, {"model": "llama3.2:latest"}) in server.server.seen
    assert seen.model_path is None


def test_ollama_s_models_in_name_order_each_shown_by_name_or_model(serve) -> None:
    server = serve({"/api/version": ok(["0.1"]),
                    "/api/tags": ok({"models": [{"name": "b:1", "digest": "d2"}, "junk", {"model": "a:1"},
                                                {"digest": "d3"}]}),
                    "/api/show": ok({"details": {"format": "gguf", "extra": 1}, "parameters": 5}),
                    "/api/ps": ok({"models": "x"})})
    seen = engines.introspect("ollama", server.url(""))
    assert seen is not None
    assert seen.identity["version"] is None
    # sorted by str(name): "None" (a:1 has no name, then the nameless) before "b:1"
    assert seen.identity["models"] == [
        {"name": "a:1", "digest": None, "details": {"format": "gguf"}, "parameters": None},
        {"name": None, "digest": "d3"},
        {"name": "b:1", "digest": "d2", "details": {"format": "gguf"}, "parameters": None}]
    shown = [body["model"] for method, _, _, body in server.server.seen if method == "POST"]
    assert shown == ["a:1", "b:1"]  # a model with no name is never shown
    assert seen.volatile == {}


def test_ollama_with_nothing_to_say(serve) -> None:
    server = serve({"/api/tags": ok({"models": None}), "/api/ps": ok({"models": [{"name": "x"}, 3]})})
    seen = engines.introspect("ollama", server.url(""))
    assert seen is not None
    assert seen.identity == {"version": None, "models": []}
    assert seen.volatile == {"resident": [{"name": "x"}]}
    assert engines.introspect("ollama", serve({"/api/tags": ok(["x"])}).url("")).identity["models"] == []


def test_ollama_s_show_refused_keeps_the_tag_and_digest(serve) -> None:
    server = serve({"/api/tags": ok({"models": [{"name": "a", "digest": "d"}]}),
                    "/api/show": ok(["not", "a", "dict"])})
    seen = engines.introspect("ollama", server.url(""))
    assert seen is not None and seen.identity["models"] == [{"name": "a", "digest": "d"}]


# -- SGLang ---------------------------------------------------------------------------------------------------------


def test_sglang_s_recorded_answers(serve) -> None:
    server = serve({"/get_server_info": recorded("sglang_get_server_info.json"),
                    "/get_model_info": recorded("sglang_get_model_info.json")})
    seen = engines.introspect("sglang", server.url(""))
    assert seen is not None
    assert seen.identity["server_args"] == {
        "model_path": MODEL, "tokenizer_path": MODEL, "tp_size": 2, "pp_size": 1, "dp_size": 1, "ep_size": 1,
        "attention_backend": "flashinfer", "sampling_backend": "flashinfer", "enable_deterministic_inference": True,
        "kv_cache_dtype": "auto", "dtype": "auto", "random_seed": 42, "disable_radix_cache": False,
        "chunked_prefill_size": 8192, "load_format": "auto", "version": "0.5.4.post1"}
    assert seen.identity["model_info"] == {"model_path": MODEL, "tokenizer_path": MODEL, "is_generation": True,
                                           "weight_version": "default", "model_type": "qwen2",
                                           "architectures": ["Qwen2ForCausalLM"]}
    assert seen.volatile == {"internal_states": [{"last_gen_throughput": 151.7, "num_running_reqs": 3,
                                                  "num_queue_reqs": 0, "token_usage": 0.02}]}
    assert seen.model_path == MODEL and seen.model_path_source == "/get_model_info model_path"


@pytest.mark.parametrize(("server_info", "model_info", "path", "source"), [
    ({"model_path": "/s"}, {"model_path": "/m"}, "/m", "/get_model_info model_path"),
    ({"model_path": "/s"}, {"model_path": ""}, "/s", "/get_server_info model_path"),
    ({"model_path": "/s"}, None, "/s", "/get_server_info model_path"),
    ({"model_path": 3}, {"model_path": None}, None, None),
    (None, None, None, None),
])
def test_sglang_s_weights_are_named_by_the_model_info_first(serve, server_info, model_info, path, source) -> None:
    routes = {}
    if server_info is not None:
        routes["/get_server_info"] = ok(server_info)
    if model_info is not None:
        routes["/get_model_info"] = ok(model_info)
    seen = engines.introspect("sglang", serve(routes).url(""))
    assert seen is not None
    assert (seen.model_path, seen.model_path_source) == (path, source)


@pytest.mark.parametrize(("states", "volatile"), [
    ([], {}), ("x", {}), (["x"], {}), ([{"num_running_reqs": 1}, "x", {"token_usage": 0.5, "other": 1}],
                                         {"internal_states": [{"num_running_reqs": 1}, {"token_usage": 0.5}]}),
])
def test_sglang_s_scheduler_state_is_kept_outside_the_id(serve, states, volatile) -> None:
    seen = engines.introspect("sglang", serve({"/get_server_info": ok({"internal_states": states})}).url(""))
    assert seen is not None and seen.volatile == volatile
    assert seen.identity == {"server_args": {}, "model_info": {}}


# -- vLLM ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "model"), [
    (["/venv/bin/vllm", "serve", "Qwen/Q", "--port", "1"], "Qwen/Q"),
    (["python", "/venv/bin/vllm", "serve", "m"], "m"),
    (["vllm", "serve", "--model", "m2"], "m2"),              # a flag after serve: the --model flag
    (["serve", "m"], None),                                  # nothing before serve
    (["python", "x", "serve", "m"], None),                   # serve of another program
    (["vllm", "serve"], None),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model=m3"], "m3"),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model"], None),
    ([], None),
])
def test_vllm_s_served_model_from_its_argv(argv: list[str], model: str | None) -> None:
    assert vllm.serve_model(argv) == model


@pytest.mark.parametrize(("text", "expected"), [
    ("vllm-0.32.0-dp4-ep-abcdef01", {"version": "0.32.0", "parallelism": ["dp4", "ep"], "config_hash": "abcdef01"}),
    ("vllm-0.32.0-ABCDEF01", {"form": "not vLLM's default"}),   # the hash is lower-case hex
    ("vllm-0.32.0-abcdef0", {"form": "not vLLM's default"}),    # and eight digits
    ("vllm-0.32.0-abcdef012", {"form": "not vLLM's default"}),
    ("xvllm-0.32.0-abcdef01", {"form": "not vLLM's default"}),
    ("vllm--abcdef01", {"form": "not vLLM's default"}),
])
def test_vllm_s_fingerprint_spellings(text: str, expected: dict) -> None:
    assert vllm.read_fingerprint(text) == {"value": text, **expected}


def test_info_gauges_are_per_engine_index_in_order_and_other_metrics_ignored() -> None:
    text = """\
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{engine="1",block_size="16",num_gpu_blocks="10"} 1.0
vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="12"} 1.0
# TYPE vllm:model_info gauge
vllm:model_info{engine="0",dtype="bf16"} 1.0
# TYPE vllm:other_info_total counter
vllm:other_info_total{a="1"} 3.0
# TYPE vllm:requests gauge
vllm:requests{engine="0"} 2.0
"""
    configured, measured = vllm.info_gauges(text)
    assert configured == {
        "vllm:cache_config_info": [{"block_size": "16", "engine": "0"}, {"block_size": "16", "engine": "1"}],
        "vllm:model_info": [{"dtype": "bf16", "engine": "0"}]}
    # only the engine label moves for model_info: nothing measured there
    assert measured == {"vllm:cache_config_info": [{"engine": "0", "num_gpu_blocks": "12"},
                                                   {"engine": "1", "num_gpu_blocks": "10"}]}


@pytest.mark.parametrize(("label", "is_measured"), [
    ("num_gpu_blocks", True), ("num_cpu_blocks", True), ("kv_cache_size_tokens", True),
    ("kv_cache_max_concurrency", True), ("kv_cache_memory_bytes", True), ("num_gpu_blocks_override", False),
    ("xnum_gpu_blocks", False), ("num_tpu_blocks", False), ("block_size", False),
])
def test_which_cache_labels_are_measured_at_start(label: str, is_measured: bool) -> None:
    configured, measured = vllm.info_gauges(f'# TYPE x_info gauge\nx_info{{{label}="1"}} 1.0\n')
    assert ("x_info" in measured) is is_measured
    assert (label in configured["x_info"][0]) is not is_measured


def test_a_measured_label_without_an_engine_index_is_still_measured() -> None:
    assert vllm.info_gauges('# TYPE x_info gauge\nx_info{num_gpu_blocks="5"} 1.0\n')[1] == {
        "x_info": [{"num_gpu_blocks": "5"}]}


SERVER_INFO = {
    "vllm_config": {
        "model_config": {"model": "/m", "dtype": "bfloat16", "max_model_len": 8192, "seed": 0,
                         "quantization": None, "hf_config": {"x": 1}, "unpicked": "x"},
        "cache_config": {"block_size": 16, "enable_prefix_caching": True},
        "parallel_config": {"tensor_parallel_size": 2, "world_size": 2},
        "scheduler_config": {"junk": 1},
        "attention_config": "FLASH_ATTN",
        "device_config": {"device": "cuda"},
    },
    "vllm_env": {"VLLM_USE_V1": "1", "VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_LOGGING_LEVEL": "INFO",
                 "HOME": "/root"},
    "system_env": {"vllm_version": "0.32.0", "torch_version": "2.9.0", "cuda_compiled_version": None,
                   "gpu_models": "H100"},
}


def test_vllm_s_server_info_picks_what_decides_the_computation(serve) -> None:
    server = serve({"/server_info": ok(SERVER_INFO)})
    seen = engines.introspect("vllm", server.url(""), timeout=1.0)
    assert seen is not None
    assert seen.identity["server_info"] == {
        "config": {"model_config": {"model": "/m", "dtype": "bfloat16", "max_model_len": 8192, "seed": 0},
                   "cache_config": {"block_size": 16, "enable_prefix_caching": True},
                   "parallel_config": {"tensor_parallel_size": 2},
                   "device_config": {"device": "cuda"}},
        "vllm_env": {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_USE_V1": "1"},
        "system_env": {"vllm_version": "0.32.0", "torch_version": "2.9.0"}}
    assert list(seen.identity["server_info"]["vllm_env"]) == ["VLLM_ATTENTION_BACKEND", "VLLM_USE_V1"]
    assert ("GET", "/server_info?config_format=json") in [s[:2] for s in server.server.seen]
    assert vllm.SERVER_INFO_BUDGET_S == 60.0


@pytest.mark.parametrize(("info", "expected"), [
    ({}, {"config": {}, "vllm_env": {}, "system_env": {}}),
    ({"vllm_config": "x", "vllm_env": ["VLLM_USE_V1"], "system_env": "x"}, {"config": {}, "vllm_env": {},
                                                                            "system_env": {}}),
    (["x"], None),
])
def test_vllm_s_server_info_in_other_shapes(serve, info, expected) -> None:
    seen = engines.introspect("vllm", serve({"/server_info": ok(info)}).url(""))
    assert seen is not None
    assert seen.identity.get("server_info") == expected


def test_the_server_info_budget_is_the_longer_of_the_timeout_and_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    budgets: list[float | None] = []

    class Client:
        timeout = 5.0

        def get(self, path: str, into: Any, *, budget: float | None = None) -> None:
            budgets.append(budget)

    vllm._server_info(Client(), engines.NativeObservation("vllm"))  # type: ignore[arg-type]
    Client.timeout = 90.0
    vllm._server_info(Client(), engines.NativeObservation("vllm"))  # type: ignore[arg-type]
    assert budgets == [60.0, 90.0]


def test_vllm_s_recorded_answers_and_its_process(serve) -> None:
    exposition = ('# TYPE vllm:cache_config_info gauge\n'
                  'vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="64"} 1.0\n')
    server = serve({"/version": recorded("vllm_version.json"), "/v1/models": recorded("vllm_models.json"),
                    "/metrics": ok(exposition.encode(), "text/plain")})
    process = {"argv": ["vllm", "serve", "other", "-tp", "2", "--enforce-eager", "--block-size=16"],
               "numerics_env": {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_FP8_X": "1", "CUDA_HOME": "/c"}}
    seen = engines.introspect("vllm", server.url(""), process=process)
    assert seen is not None
    assert seen.identity["version"] == "0.6.3.post1"
    assert seen.identity["models"] == [{"id": "llama-8b", "root": MODEL, "max_model_len": 8192}]
    assert seen.model_path == MODEL and seen.model_path_source == "/v1/models root"
    assert seen.identity["metrics_info"] == {"vllm:cache_config_info": [{"block_size": "16", "engine": "0"}]}
    assert seen.volatile["metrics_info"] == {"vllm:cache_config_info": [{"engine": "0", "num_gpu_blocks": "64"}]}
    assert seen.identity["flags"] == {"-tp": "2", "--enforce-eager": True, "--block-size": "16"}
    assert seen.identity["backend_env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_FP8_X": "1"}
    assert "/metrics" in seen.read and "/server_info" in seen.absent


def test_vllm_s_metrics_without_info_gauges_keep_nothing_measured(serve) -> None:
    server = serve({"/metrics": ok(b"# TYPE x gauge\nx 1.0\n", "text/plain")})
    seen = engines.introspect("vllm", server.url(""))
    assert seen is not None
    assert seen.identity["metrics_info"] == {} and "metrics_info" not in seen.volatile


@pytest.mark.parametrize(("models", "process", "path", "source"), [
    ([{"id": "b", "root": "/rb"}, {"id": "a", "root": "/ra"}], None, "/rb", "/v1/models root"),
    # a LoRA adapter has a parent: its root is not the base weights
    ([{"id": "lora", "root": "/adapter", "parent": "base"}, {"id": "base", "root": "/base"}], None, "/base",
     "/v1/models root"),
    ([{"id": "a", "root": ""}], {"argv": ["vllm", "serve", "/from/argv"]}, "/from/argv",
     "process argv (vllm serve MODEL / --model)"),
    ([{"id": "a", "root": 5}], {"argv": ["python", "x", "--model", "/flag"]}, "/flag",
     "process argv (vllm serve MODEL / --model)"),
    ([], None, None, None),
])
def test_vllm_s_weights_are_its_models_root_else_its_argv(serve, models, process, path, source) -> None:
    seen = engines.introspect("vllm", serve({"/v1/models": ok({"data": models})}).url(""), process=process)
    assert seen is not None
    assert (seen.model_path, seen.model_path_source) == (path, source)


def test_vllm_s_models_are_listed_in_id_order_with_their_lengths(serve) -> None:
    models = [{"id": "b", "max_model_len": "4096"}, {"id": "a", "root": "/r", "max_model_len": None}]
    seen = engines.introspect("vllm", serve({"/v1/models": ok({"data": models}),
                                             "/version": ok({"v": 1})}).url(""))
    assert seen is not None
    assert seen.identity["models"] == [{"id": "a", "root": "/r", "max_model_len": None},
                                       {"id": "b", "root": None, "max_model_len": 4096}]
    assert seen.identity["version"] is None
    assert seen.identity["flags"] == {} and seen.identity["backend_env"] == {}


def test_info_gauge_samples_without_an_engine_index_come_first_and_other_sample_names_are_skipped() -> None:
    text = """\
# TYPE x_info summary
x_info_sum{engine="1"} 2.0
x_info{engine="1",quantile="0.5"} 1.0
x_info_count{engine="1"} 3.0
# TYPE y_info gauge
y_info{engine="0",a="1"} 1.0
y_info{a="2"} 1.0
y_info{a="3"} 1.0
"""
    configured, measured = vllm.info_gauges(text)
    assert configured == {"x_info": [{"engine": "1", "quantile": "0.5"}],
                          "y_info": [{"a": "2"}, {"a": "3"}, {"a": "1", "engine": "0"}]}
    assert measured == {}


def test_lora_info_keeps_its_maximum_and_engine_index_inside_the_id() -> None:
    text = ('# TYPE vllm:lora_requests_info gauge\n'
            'vllm:lora_requests_info{engine="0",max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.0\n')
    configured, measured = vllm.info_gauges(text)
    assert configured == {"vllm:lora_requests_info": [{"engine": "0", "max_lora": "4"}]}
    assert measured == {"vllm:lora_requests_info": [{"engine": "0", "max_lora": "4", "running_lora_adapters": "a,b",
                                                     "waiting_lora_adapters": ""}]}


@pytest.mark.parametrize("engine", ["llama.cpp", "sglang", "ollama", "vllm", "llama-cpp-python"])
def test_each_engine_s_observation_is_named_by_its_engine(serve, engine: str) -> None:
    seen = engines.introspect(engine, serve({}).url(""))
    assert seen is not None and seen.engine == engine and seen.to_identity_json()["engine"] == engine
