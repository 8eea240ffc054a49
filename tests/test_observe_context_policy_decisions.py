"""The applied chat template as decision tables (issue 26): where it is read from (the endpoint's
``/props`` first, then the GGUF's own key or a model directory's tokenizer_config.json), each way a
source says nothing, and whether the declared template file matches (with and without the trailing
newline a file keeps) -- real GGUF headers, real files, a real loopback ``/props``."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3
import pytest

from execsys.observe.context_policy import (
    _from_artifact,
    _from_props,
    _template_text,
    observe_applied_template,
    text_digest,
)
from tests.fixtures.fake_http import JsonHandler, LoopbackServer

TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def gguf_with(path: Path, **strings: str) -> Path:
    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    kvs = b"".join(s(k) + struct.pack("<I", 8) + s(v) for k, v in strings.items())
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(strings)) + kvs)
    return path


# -- _template_text ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    ("t", "t"), ("", None), (None, None), (5, None), ({"template": "t"}, None),
    ([{"name": "default", "template": "d"}, {"name": "tool_use", "template": "u"}], "d"),
    ([{"name": "tool_use", "template": "u"}, {"name": "default", "template": "d"}], "d"),
    ([{"name": "tool_use", "template": "u"}, {"name": "rag", "template": "r"}], "u"),
    ([{"name": "default", "template": ""}, {"name": "rag", "template": "r"}], None),  # the first listed is the empty default
    ([{"name": "rag", "template": "r"}, {"name": "default", "template": ""}], "r"),
    ([{"name": "default", "template": 3}], None),
    ([{"name": "default", "template": ""}], None),
    (["not a dict", {"name": "x", "template": "x"}], "x"),
    ([], None),
])
def test_a_template_as_configs_hold_it(value: Any, text: str | None) -> None:
    assert _template_text(value) == text


# -- /props ------------------------------------------------------------------------------------------


class Props:
    def __init__(self) -> None:
        self.status = 200
        self.body: Any = {"chat_template": TEMPLATE}
        self.raw: bytes | None = None
        self.paths: list[str] = []
        self.auth: list[str | None] = []
        props = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                props.paths.append(self.path)
                props.auth.append(self.headers.get("Authorization"))
                if props.raw is not None:
                    self.send_bytes(props.raw, props.status)
                else:
                    self.send_json(props.body, props.status)

        self.server = LoopbackServer(Handler)
        self.url = self.server.url("/v1")


@pytest.fixture
def props() -> Iterator[Props]:
    p = Props()
    yield p
    p.server.close()


def test_props_are_read_from_the_origin_with_the_key(props: Props) -> None:
    assert _from_props(props.url, "k-1") == TEMPLATE
    assert props.paths == ["/props"] and props.auth == ["Bearer k-1"]
    assert _from_props(props.url, None) == TEMPLATE and props.auth[1] is None


@pytest.mark.parametrize("status", [201, 404, 500])
def test_props_other_than_200_say_nothing(props: Props, status: int) -> None:
    props.status = status
    assert _from_props(props.url, None) is None


@pytest.mark.parametrize("body", [{"chat_template": ""}, {}, ["x"], "x", {"chat_template": None}])
def test_props_without_a_template_say_nothing(props: Props, body: Any) -> None:
    props.body = body
    assert _from_props(props.url, None) is None


def test_props_that_are_not_json_say_nothing(props: Props) -> None:
    props.raw = b"<html>"
    assert _from_props(props.url, None) is None


def test_props_with_a_named_list_give_the_default(props: Props) -> None:
    props.body = {"chat_template": [{"name": "default", "template": "D"}]}
    assert _from_props(props.url, None) == "D"


def test_props_of_an_endpoint_that_refuses_say_nothing() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _from_props(f"http://127.0.0.1:{port}/v1", None) is None


def test_props_past_the_size_cap_say_nothing(props: Props) -> None:
    from execsys.observe.http import OBSERVE_BODY_LIMIT

    props.raw = json.dumps({"chat_template": "x" * OBSERVE_BODY_LIMIT}).encode()
    assert _from_props(props.url, None) is None


# -- the artifact --------------------------------------------------------------------------------------


def test_a_gguf_s_own_template(tmp_path: Path) -> None:
    gguf_with(tmp_path / "m.GGUF", **{"general.name": "n", "tokenizer.chat_template": TEMPLATE})
    assert _from_artifact("m.GGUF", tmp_path) == (TEMPLATE, "the GGUF's tokenizer.chat_template")


@pytest.mark.parametrize("strings", [{"general.name": "n"}, {"tokenizer.chat_template": ""}])
def test_a_gguf_without_a_template_says_nothing(tmp_path: Path, strings: dict) -> None:
    gguf_with(tmp_path / "m.gguf", **strings)
    assert _from_artifact("m.gguf", tmp_path) is None


def test_a_broken_or_foreign_file_says_nothing(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF\x03")
    assert _from_artifact("m.gguf", tmp_path) is None
    (tmp_path / "m.safetensors").write_text(json.dumps({"chat_template": TEMPLATE}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    assert _from_artifact("m.safetensors", tmp_path) is None  # a file: its directory's config is not read


def test_a_gguf_template_that_is_not_a_string_says_nothing(tmp_path: Path) -> None:
    key = b"tokenizer.chat_template"
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<II", 4, 7)
    (tmp_path / "m.gguf").write_bytes(data)
    assert _from_artifact("m.gguf", tmp_path) is None


@pytest.mark.parametrize(("config", "found"), [
    ({"chat_template": TEMPLATE}, (TEMPLATE, "tokenizer_config.json chat_template")),
    ({"chat_template": [{"name": "default", "template": "D"}]}, ("D", "tokenizer_config.json chat_template")),
    ({"chat_template": ""}, None),
    ({}, None),
    (["chat_template"], None),
])
def test_a_model_directory_s_tokenizer_config(tmp_path: Path, config: Any, found: tuple | None) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tokenizer_config.json").write_text(json.dumps(config))
    assert _from_artifact("model", tmp_path) == found


def test_a_directory_without_a_readable_config_says_nothing(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    assert _from_artifact("model", tmp_path) is None
    (tmp_path / "model" / "tokenizer_config.json").write_text("{nope")
    assert _from_artifact("model", tmp_path) is None


# -- observe_applied_template ---------------------------------------------------------------------------


def test_the_digest_is_blake3_of_the_utf8_text() -> None:
    assert text_digest("é") == blake3.blake3("é".encode()).hexdigest()


def test_props_come_before_the_artifact(tmp_path: Path, props: Props) -> None:
    gguf_with(tmp_path / "m.gguf", **{"tokenizer.chat_template": "artifact's"})
    got = observe_applied_template({"endpoint": props.url}, {"path": "m.gguf"}, None, tmp_path)
    assert got == {"source": "the endpoint's /props chat_template", "digest": text_digest(TEMPLATE)}


def test_props_that_say_nothing_fall_back_to_the_artifact(tmp_path: Path, props: Props) -> None:
    props.status = 404
    gguf_with(tmp_path / "m.gguf", **{"tokenizer.chat_template": "artifact's"})
    got = observe_applied_template({"endpoint": props.url}, {"path": "m.gguf"}, None, tmp_path)
    assert got == {"source": "the GGUF's tokenizer.chat_template", "digest": text_digest("artifact's")}


def test_the_api_key_variable_is_sent_to_props(tmp_path: Path, props: Props, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECSYS_T_PROPS_KEY", "props-key")
    observe_applied_template({"endpoint": props.url, "api_key_env": "EXECSYS_T_PROPS_KEY"}, {}, None, tmp_path)
    observe_applied_template({"endpoint": props.url, "api_key_env": ""}, {}, None, tmp_path)
    assert props.auth == ["Bearer props-key", None]


@pytest.mark.parametrize(("runtime", "artifact"), [
    ({}, {}), ({"endpoint": ""}, {"path": ""}), ({"endpoint": 5}, {"path": 5}), ({}, {"path": "missing"}),
])
def test_nothing_says_means_none(tmp_path: Path, runtime: dict, artifact: dict) -> None:
    assert observe_applied_template(runtime, artifact, "t.jinja", tmp_path) is None


@pytest.mark.parametrize(("declared_text", "matches"), [
    (TEMPLATE, True), (TEMPLATE + "\n", True), (TEMPLATE + "\n\n", True), (TEMPLATE + " ", False),
    ("\n" + TEMPLATE, False), ("other", False), ("", False),
])
def test_the_declared_template_matches_with_or_without_its_newlines(tmp_path: Path, declared_text: str,
                                                                   matches: bool) -> None:
    gguf_with(tmp_path / "m.gguf", **{"tokenizer.chat_template": TEMPLATE})
    (tmp_path / "t.jinja").write_text(declared_text)
    got = observe_applied_template({}, {"path": "m.gguf"}, "t.jinja", tmp_path)
    assert got == {"source": "the GGUF's tokenizer.chat_template", "digest": text_digest(TEMPLATE),
                   "matches_declared": matches}


def test_a_template_ending_in_a_newline_matches_its_file(tmp_path: Path) -> None:
    gguf_with(tmp_path / "m.gguf", **{"tokenizer.chat_template": TEMPLATE + "\n"})
    (tmp_path / "t.jinja").write_text(TEMPLATE + "\n")
    assert observe_applied_template({}, {"path": "m.gguf"}, "t.jinja", tmp_path)["matches_declared"] is True
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    assert observe_applied_template({}, {"path": "m.gguf"}, "t.jinja", tmp_path)["matches_declared"] is False


def test_an_unreadable_declared_template_matches_nothing_either_way(tmp_path: Path) -> None:
    gguf_with(tmp_path / "m.gguf", **{"tokenizer.chat_template": TEMPLATE})
    assert observe_applied_template({}, {"path": "m.gguf"}, "gone.jinja", tmp_path)["matches_declared"] is None
    (tmp_path / "bad.jinja").write_bytes(b"\xff\xfe")
    assert observe_applied_template({}, {"path": "m.gguf"}, "bad.jinja", tmp_path)["matches_declared"] is None
    assert "matches_declared" not in observe_applied_template({}, {"path": "m.gguf"}, "", tmp_path)
