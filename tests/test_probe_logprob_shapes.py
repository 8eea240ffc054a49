"""Each engine's logprob shape, as its own source builds it, read by the probe (recorded fixtures).

The bodies in tests/data/logprob_shapes/ are JSON literals shaped exactly as vLLM, SGLang and
llama.cpp's llama-server build them (each file names the function in the engine's source): two
answers to one prompt, pass A choosing `` Paris`` over `` Lyon`` by 0.0003 nats at the third token
and pass B `` Lyon`` over `` Paris`` by 0.0005. The parser must give the same tokens, top-K and
chosen logprobs from every shape, and a probe against a loopback endpoint replaying them must call
the flip a near-tie with those margins. The real llama.cpp counterpart (llama-cpp-python's server,
live) is in test_probe_llama.py.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
from execsys.probes.client import parse_completion, parse_logprobs

from tests.fixtures.fake_http import JsonHandler, LoopbackServer

SHAPES = Path(__file__).parent / "data" / "logprob_shapes"
OPENAI_SHAPES = ["vllm_completions", "vllm_chat", "sglang_completions", "sglang_chat",
                 "llama_server_completions", "llama_server_chat"]
TOP_A = [[" Paris", -0.6931], [" Lyon", -0.6934], [" Nice", -4.2], [" Marseille", -5.75], [" Lille", -7.3]]
TOP_B = [[" Lyon", -0.693], [" Paris", -0.6935], [" Nice", -4.2], [" Marseille", -5.75], [" Lille", -7.3]]


def shape(name: str) -> dict:
    return json.loads((SHAPES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", [*OPENAI_SHAPES, "llama_server_native"])
def test_every_engine_shape_reads_as_the_same_tokens_and_top_k(name):
    fixture = shape(name)
    a, b = parse_completion(fixture["a"]), parse_completion(fixture["b"])
    assert (a.text, b.text) == (" It is Paris", " It is Lyon")
    assert a.tokens == [" It", " is", " Paris"] and b.tokens == [" It", " is", " Lyon"]
    assert a.top_logprobs is not None and b.top_logprobs is not None
    assert a.top_logprobs[2] == TOP_A and b.top_logprobs[2] == TOP_B
    assert a.chosen_logprobs == [-0.0021, -0.0105, -0.6931]
    # vLLM's stand-in for -inf stays a number, last in the list
    assert a.top_logprobs[1][-1] == [" has", -9999.0]
    assert a.finish_reason == "length"


def test_llama_server_probabilities_of_older_servers_read_as_their_log():
    a = parse_completion(shape("llama_server_native_old")["a"])
    assert a.text == " It is Paris" and a.tokens == [" It", " is", " Paris"] and a.finish_reason == "length"
    assert a.top_logprobs is not None and a.chosen_logprobs is not None
    assert [t for t, _ in a.top_logprobs[2]] == [t for t, _ in TOP_A]
    for (_, got), (_, want) in zip(a.top_logprobs[2], TOP_A, strict=True):
        assert got == pytest.approx(want, abs=1e-12)
    assert a.chosen_logprobs[2] == pytest.approx(-0.6931, abs=1e-12)
    # a probability of 0 becomes llama-server's own floor for log(0), never -inf (not JSON)
    assert a.top_logprobs[1][-1][1] == -3.4028234663852886e38


def test_post_sampling_probabilities_keep_the_tokens_but_give_no_top_k():
    parsed = parse_logprobs(shape("llama_server_chat_post_sampling")["a"]["choices"][0]["logprobs"])
    assert parsed.tokens == [" It", " is", " Paris"]
    assert parsed.top is None and parsed.values == "post-sampling"


def test_vllm_step_without_logprobs_and_sampled_token_outside_the_top_k():
    # vLLM puts the sampled token first and keeps K+1 entries when it is not among the top K; a step
    # whose logprobs were not computed is null
    parsed = parse_logprobs({"tokens": [" a", " b"], "token_logprobs": [-2.5, None], "text_offset": [0, 2],
                             "top_logprobs": [{" a": -2.5, " x": -0.1, " y": -0.9}, None]})
    assert parsed.top == [[[" x", -0.1], [" y", -0.9], [" a", -2.5]], []]
    assert parsed.chosen == [-2.5, None]


def test_equal_logprobs_keep_the_engine_order():
    parsed = parse_logprobs({"tokens": ["p"], "token_logprobs": [-1.0],
                             "top_logprobs": [{"q": -1.0, "p": -1.0, "r": -0.5}]})
    assert parsed.top == [[["r", -0.5], ["q", -1.0], ["p", -1.0]]]


def test_bools_and_strings_are_not_logprobs():
    parsed = parse_logprobs({"content": [{"token": "x", "logprob": True,
                                          "top_logprobs": [{"token": "x", "logprob": "-1"}, {"token": "y", "logprob": -2}]}]})
    assert parsed.top == [[["y", -2.0]]] and parsed.chosen == [None]


class ReplayEndpoint(LoopbackServer):
    """Answers every call of a prompt after its first with body ``b``, the first with ``a``."""

    def __init__(self, fixture: dict):
        self.fixture = fixture
        self.calls: dict[str, int] = {}
        self.bodies: list[dict] = []
        lock = threading.Lock()
        endpoint = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self.send_json({"object": "list", "data": [{"id": "replay", "object": "model"}]})

            def do_POST(self) -> None:
                request = self.read_json()
                key = json.dumps(request.get("messages") or request.get("prompt"))
                with lock:
                    endpoint.bodies.append(request)
                    endpoint.calls[key] = call = endpoint.calls.get(key, 0) + 1
                self.send_json(endpoint.fixture["a" if call == 1 else "b"])

        super().__init__(Handler)
        self.base_url = self.url()


def one_case(path: Path, chat: bool) -> Path:
    case = ({"id": "louvre", "messages": [{"role": "user", "content": "Where is the Louvre?"}]} if chat
            else {"id": "louvre", "prompt": "Where is the Louvre?", "max_tokens": 3})
    path.write_text(json.dumps(case) + "\n")
    return path


@pytest.mark.parametrize("name", OPENAI_SHAPES)
def test_a_probe_against_each_engine_shape_finds_the_near_tie(cli, tmp_path, name):
    with ReplayEndpoint(shape(name)) as endpoint:
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--json",
                     "--cases", str(one_case(tmp_path / "cases.jsonl", chat="chat" in name)))
    assert result.returncode == 1, result.stderr
    record = result.json()
    assert record["flipped"] == ["louvre"] and record["logprobs"]["status"] == "ok"
    margin = record["cases"][0]["first_divergence"]["logprobs"]
    assert (margin["token"], margin["token_a"], margin["token_b"]) == (2, " Paris", " Lyon")
    assert margin["margin_a"] == pytest.approx(0.0003, abs=1e-12)
    assert margin["margin_b"] == pytest.approx(0.0005, abs=1e-12)
    assert (margin["bound"], margin["verdict"]) == ("exact", "near-tie")
    assert margin["top_a"] == TOP_A and margin["top_b"] == TOP_B
    assert record["sentence"].endswith("1 flip: 1 at near-tie (median margin 0.0005)")


def test_a_probe_against_post_sampling_probabilities_says_unsupported_not_a_margin(cli, tmp_path):
    with ReplayEndpoint(shape("llama_server_chat_post_sampling")) as endpoint:
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--json",
                     "--cases", str(one_case(tmp_path / "cases.jsonl", chat=True)))
    assert result.returncode == 1, result.stderr
    record = result.json()
    assert record["flipped"] == ["louvre"] and record["errored"] == 0
    assert record["logprobs"]["status"] == "unsupported"
    assert record["cases"][0]["first_divergence"]["logprobs"] == "unsupported"
    assert math.isclose(record["agreement_rate"], 0.0)


# Measured on the real vLLM 0.32 CPU server (tests/fixtures/vllm.py's byte-level tiny Llama), logprobs=5,
# then the same request with return_tokens_as_token_ids: the step's real top 5 were ids 224 (-5.0224),
# 179 (-5.0263), 34, 24 and 186 (-5.1044); 179 and 186 are lone bytes of multi-byte characters, both
# decoded to "", and the completions shape keyed by text kept one "" holding 186's logprob.
VLLM_MERGED_STEP = {"tokens": ["\x7f", "6"], "token_logprobs": [-5.022398948669434, -5.031289577484131],
                    "text_offset": [0, 1],
                    "top_logprobs": [{"\x7f": -5.022398948669434, "": -5.104430198669434, "@": -5.069273948669434,
                                      "6": -5.073180198669434},
                                     {"6": -5.031289577484131, "s": -5.1, "": -5.115273952484131, "!": -5.2,
                                      "#": -5.3}]}


def test_a_completions_step_with_fewer_tokens_than_asked_for_was_merged_by_text_and_gives_no_top_k():
    parsed = parse_logprobs(VLLM_MERGED_STEP, top_k=5)
    assert parsed.top is not None and parsed.top[0] == []  # unknown: "" stood for two tokens
    assert [t for t, _ in parsed.top[1]] == ["6", "s", "", "!", "#"]
    assert parsed.chosen == [-5.022398948669434, -5.031289577484131]
    # every step merged: still "given", never taken for an engine without logprobs
    only_merged = {**VLLM_MERGED_STEP, "top_logprobs": VLLM_MERGED_STEP["top_logprobs"][:1], "tokens": ["\x7f"]}
    assert parse_logprobs(only_merged, top_k=5).top == [[]]
    # without the K asked for (another caller), the shape reads as it comes
    assert len(parse_logprobs(VLLM_MERGED_STEP).top[0]) == 4


def test_a_divergent_token_listed_twice_by_text_gives_a_lower_bound_not_a_near_tie():
    from execsys.probes.margin import PassTokens, margin_at

    # vLLM's chat entries name both lone bytes "": which one pass B chose is not known from its text
    a = PassTokens(["x"], [[["x", -1.0], ["", -1.02], ["", -3.0]]], [-1.0])
    b = PassTokens([""], [[["", -1.0], ["x", -1.05], ["", -1.5]]], [-1.0])
    margin = margin_at(a, b, 0)
    assert margin is not None and margin["margin_a"] == pytest.approx(0.02)
    assert (margin["bound"], margin["verdict"]) == ("at least", "not a near-tie")


def test_fewer_tokens_than_asked_for_without_a_lone_byte_are_read_as_they_come():
    # an engine that lists fewer than asked, each a whole text: nothing was merged
    parsed = parse_logprobs({"tokens": ["4"], "token_logprobs": [-0.5],
                             "top_logprobs": [{"4": -0.5, "5": -0.6, "6": -6.0}]}, top_k=5)
    assert parsed.top == [[["4", -0.5], ["5", -0.6], ["6", -6.0]]]
    merged = parse_logprobs({"tokens": ["4"], "token_logprobs": [-0.5],
                             "top_logprobs": [{"4": -0.5, "\ufffd": -0.6, "6": -6.0}]}, top_k=5)
    assert merged.top == [[]]
