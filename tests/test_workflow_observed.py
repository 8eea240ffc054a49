"""`[workflow]` packages and config files observed; the chat template the engine applies digested and
compared with the declared `[context_policy] template` (a model directory's tokenizer_config.json, or
an endpoint's `/props` as llama.cpp's llama-server exposes it)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import blake3
import pytest

from tests.fixtures.fake_http import JsonHandler, LoopbackServer

TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"


def test_workflow_packages_and_config_observed_and_an_edited_config_moves_it(cli, tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text("max_turns: 8\nplanner: react\n")
    (tmp_path / "eval.py").write_text("print('run')\n")
    (tmp_path / "execsys.toml").write_text(f"""
[harness]
commands = ["{sys.executable} eval.py"]

[workflow]
name = "react"
packages = ["blake3", "not-an-agent-framework"]
config = ["agent.yaml"]
""")
    pinned = cli("pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    workflow = pinned.json()["components"]["workflow"]["observed"]
    # read from the harness's interpreter (the one that runs the agent), not from execsys's
    assert workflow["packages"]["interpreter"] == str(Path(sys.executable).resolve())
    assert workflow["packages"]["versions"] == {"blake3": metadata.version("blake3"), "not-an-agent-framework": None}
    assert workflow["config"] == [{"path": str(tmp_path / "agent.yaml"),
                                   "digest": blake3.blake3((tmp_path / "agent.yaml").read_bytes()).hexdigest()}]
    assert cli("verify", cwd=tmp_path).returncode == 0
    (tmp_path / "agent.yaml").write_text("max_turns: 16\nplanner: react\n")
    moved = cli("verify", "--json", cwd=tmp_path)
    assert moved.returncode == 1
    report = moved.json()
    assert [n for n, c in report["components"].items() if c["status"] != "same"] == ["workflow"]
    assert report["components"]["workflow"]["changes"][0]["field"] == "observed.config[0].digest"


def test_model_directory_chat_template_digested_and_compared_with_the_declared_one(cli, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    (tmp_path / "template.jinja").write_text(TEMPLATE + "\n")
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "model"\n[context_policy]\ntemplate = "template.jinja"\n')
    pinned = cli("pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    applied = pinned.json()["components"]["context_policy"]["observed"]["applied_template"]
    assert applied == {"source": "tokenizer_config.json chat_template",
                       "digest": blake3.blake3(TEMPLATE.encode()).hexdigest(), "matches_declared": True}

    # a tokenizer revision changes the template: the identity moves and pin says it is not the declared one
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE.replace("<|assistant|>", "")}))
    moved = cli("verify", "--json", cwd=tmp_path).json()
    assert moved["components"]["context_policy"]["status"] == "changed"
    fields = {c["field"] for c in moved["components"]["context_policy"]["changes"]}
    assert "observed.applied_template.matches_declared" in fields
    again = cli("pin", "--json", cwd=tmp_path).json()
    assert any("is not the declared [context_policy] template" in note for note in again["notes"])


class PropsEngine:
    """An endpoint exposing ``/props`` as llama.cpp's llama-server does (llama-cpp-python's server does not)."""

    def __init__(self, template: str) -> None:
        self.template = template
        engine = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                if self.path == "/props":
                    self.send_json({"chat_template": engine.template, "build_info": "b6500-abcdef0"})
                elif self.path == "/v1/models":
                    self.send_json({"object": "list", "data": [{"id": "m"}]})
                else:
                    self.send_response(404)
                    self.end_headers()

        self.server = LoopbackServer(Handler)
        self.url = self.server.url()


@pytest.fixture
def props_engine() -> Iterator[PropsEngine]:
    engine = PropsEngine(TEMPLATE)
    yield engine
    engine.server.close()


def test_endpoint_props_chat_template_is_the_applied_one(cli, tmp_path: Path, props_engine: PropsEngine) -> None:
    (tmp_path / "other.jinja").write_text("{{ messages }}\n")
    (tmp_path / "execsys.toml").write_text(f'[runtime]\nendpoint = "{props_engine.url}"\n'
                                           '[context_policy]\ntemplate = "other.jinja"\n')
    pinned = cli("pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    applied = pinned.json()["components"]["context_policy"]["observed"]["applied_template"]
    assert applied["source"] == "the endpoint's /props chat_template"
    assert applied["digest"] == blake3.blake3(TEMPLATE.encode()).hexdigest()
    assert applied["matches_declared"] is False


def test_gguf_chat_template_is_the_applied_one(cli, tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_chat_template(TEMPLATE)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (tmp_path / "template.jinja").write_text(TEMPLATE)
    (tmp_path / "execsys.toml").write_text('[artifact]\npath = "m.gguf"\n[context_policy]\ntemplate = "template.jinja"\n')
    pinned = cli("pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.json()["components"]["context_policy"]["observed"]["applied_template"] == {
        "source": "the GGUF's tokenizer.chat_template", "digest": blake3.blake3(TEMPLATE.encode()).hexdigest(),
        "matches_declared": True}
