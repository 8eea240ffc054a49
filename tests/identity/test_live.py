"""What the engine serving the system does now, as pin and verify read it from its endpoint: the
artifact it serves, whether it answers a model name it does not list (and with which key it is
asked), a model list it refuses, and numbers JSON cannot hold -- kept outside the id, in the lock's
``live`` facts and its notes.

Stdlib loopback servers replay llama.cpp's recorded answers (tests/data/engines) for a model file
in tmp_path, and answer a chat request naming any model as ``llama-server`` does (or refuse it, as
vLLM does); the real llama-cpp-python server is in tests/test_served_artifact.py. Each pin here
takes well under a second.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from execsys import declaration
from execsys.errors import InputError
from execsys.identity import (
    load_lock,
    observe_runtime,
    pin,
    verify,
    write_lock,
)
from execsys.observe.served import ANSWERS_ANY_NAME, UNLISTED_MODEL_NAME
from tests.fixtures.fake_http import JsonHandler, LoopbackServer
from tests.fixtures.identity_project import DECLARATION, b3sum, declare, needs_b3sum, write_project

ENGINES = Path(__file__).parents[1] / "data" / "engines"


LLAMA_CPP_ROUTES = {"/props": "llama_cpp_props.json", "/health": "llama_cpp_health.json",
                    "/v1/models": "llama_cpp_models.json"}


class AnyNameEngine(LoopbackServer):
    """llama.cpp's recorded GET answers ({MODEL}: the served file) and a one-word chat answer to any model
    name, naming the model it was asked for; ``chats`` keeps (model asked, Authorization header) per request."""

    def __init__(self, model: Path, *, listed: bool = True, nan_params: bool = False) -> None:
        self.model = str(model)
        self.listed = listed
        self.nan_params = nan_params  # /v1/models meta says n_params: NaN (Python's json reads it, JSON has none)
        self.chats: list[tuple[str, str | None]] = []
        super().__init__(self._handler())
        self.endpoint = self.url()

    def _handler(self) -> type[JsonHandler]:
        engine = self

        class Handler(JsonHandler):

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/v1/models" and not engine.listed:
                    self.send_bytes(b'{"object": "list", "data": []}')
                elif path in LLAMA_CPP_ROUTES:
                    text = (ENGINES / LLAMA_CPP_ROUTES[path]).read_text().replace("{MODEL}", engine.model)
                    if engine.nan_params:
                        text = text.replace('"n_params": 8030261248', '"n_params": NaN')
                    self.send_bytes(text.encode())
                else:
                    self.send_bytes(b'{"error": "not found"}', 404)

            def do_POST(self) -> None:
                request = self.read_json()
                if self.path != "/v1/chat/completions":
                    self.send_bytes(b'{"error": "not found"}', 404)
                    return
                engine.chats.append((str(request.get("model")), self.headers.get("Authorization")))
                body = {"model": request.get("model"), "choices": [{"message": {"role": "assistant", "content": "Hi"}}],
                        "system_fingerprint": "b6058-3f4fc97f"}
                self.send_json(body)

        return Handler


@pytest.fixture
def any_name_engine(project: Path) -> Iterator[AnyNameEngine]:
    with AnyNameEngine(project / "model.bin") as engine:
        yield engine


def test_a_live_engine_and_a_model_name_it_answers_anyway_are_kept_outside_the_id(
        project: Path, any_name_engine: AnyNameEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECSYS_FACTS_KEY", "sk-facts-0123456789abcdef")
    decl = declare(project, f'[runtime]\nengine = "llama.cpp"\nendpoint = "{any_name_engine.endpoint}"\n'
                             'api_key_env = "EXECSYS_FACTS_KEY"\n')
    identity = pin(decl)
    runtime = identity.observed("runtime")
    assert runtime["endpoint"]["models"] == [str(project / "model.bin")]
    assert "engine_live" not in runtime and runtime["engine_native"]["n_ctx"] == 4096
    assert identity.live == {
        "engine": {"health": "ok", "absent_because": {"/slots": "HTTP 404"}},
        "model_name_honesty": {"asked": UNLISTED_MODEL_NAME, "status": 200, "answered": True,
                               "answered_as": UNLISTED_MODEL_NAME, "text": "Hi"}}
    assert f"{ANSWERS_ANY_NAME} (asked for the unlisted model {UNLISTED_MODEL_NAME!r}: HTTP 200, answered as " \
           f"{UNLISTED_MODEL_NAME!r}, saying 'Hi')" in identity.notes
    # the unlisted name is asked with the declared key, as the harness would send it
    assert any_name_engine.chats[-1] == (UNLISTED_MODEL_NAME, "Bearer sk-facts-0123456789abcdef")
    # what the engine does now moves nothing: the same system pinned again is the same id
    assert pin(decl).id == identity.id


def test_an_unlisted_name_is_asked_without_a_key_when_none_is_declared(
        project: Path, any_name_engine: AnyNameEngine) -> None:
    identity = pin(declare(project, f'[runtime]\nendpoint = "{any_name_engine.endpoint}"\n'))
    assert any_name_engine.chats[-1] == (UNLISTED_MODEL_NAME, None)
    assert identity.live["model_name_honesty"]["answered"] is True
    assert "engine" not in identity.live  # no engine declared: nothing asked of its native routes


def test_an_engine_that_lists_no_model_is_not_asked_for_an_unlisted_one(project: Path) -> None:
    with AnyNameEngine(project / "model.bin", listed=False) as engine:
        identity = pin(declare(project, f'[runtime]\nendpoint = "{engine.endpoint}"\n'))
    assert identity.live == {} and engine.chats == []
    assert not [note for note in identity.notes if ANSWERS_ANY_NAME in note]


def test_an_endpoint_that_does_not_answer_is_not_asked_anything_more(project: Path) -> None:
    identity = pin(declare(project, '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n'), require_endpoint=False)
    assert identity.live == {}
    assert identity.observed("runtime")["endpoint"]["error"].startswith("endpoint http://127.0.0.1:9/v1: unreachable")


def test_an_endpoint_that_answers_any_model_name_is_noted_and_kept_outside_the_id(tmp_path: Path) -> None:
    from execsys.observe.served import ANSWERS_ANY_NAME
    from tests.fixtures.llama import FlipEndpoint

    with FlipEndpoint(models=["tiny"]) as endpoint:
        path = write_project(tmp_path, DECLARATION + f'[runtime]\nendpoint = "{endpoint.base_url}"\n')
        identity = pin(declaration.load(path))
    honesty = identity.live["model_name_honesty"]
    assert honesty["answered"] is True and honesty["answered_as"] == honesty["asked"] != "tiny"
    assert [n for n in identity.notes if n.startswith(ANSWERS_ANY_NAME)]
    assert load_lock(write_lock(identity, tmp_path / "execsys.lock.json")).live == identity.live


class RecordedLlama(LoopbackServer):
    """Answers ``/v1/models`` and ``/props`` with llama.cpp's recorded answers for ``model``; a chat request
    naming an unlisted model is answered when ``answers_any_name`` (as llama.cpp does) and refused with a
    404 otherwise (as vLLM does). ``models_status`` other than 200 refuses ``/v1/models`` (a key is needed)."""

    def __init__(self, model: Path, *, answers_any_name: bool = False, models_status: int = 200) -> None:
        self.model = str(model)
        self.answers_any_name = answers_any_name
        self.models_status = models_status
        super().__init__(self._handler())
        self.endpoint = self.url()

    def _recorded(self, name: str) -> dict:
        return json.loads((ENGINES / name).read_text().replace("{MODEL}", self.model))

    def _handler(self) -> type[JsonHandler]:
        llama = self

        class Handler(JsonHandler):

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/v1/models":
                    if llama.models_status != 200:
                        self.send_json({"error": {"message": "Invalid API Key"}}, llama.models_status)
                    else:
                        self.send_json(llama._recorded("llama_cpp_models.json"))
                elif path == "/props":
                    self.send_json(llama._recorded("llama_cpp_props.json"))
                else:
                    self.send_json({"error": {"message": "File Not Found"}}, 404)

            def do_POST(self) -> None:
                body = self.read_json()
                if body.get("model") == llama.model or llama.answers_any_name:
                    self.send_json({"model": llama.model, "choices": [{"message": {"content": "hi"}}]})
                else:
                    self.send_json({"error": {"message": f"model {body.get('model')!r} not found"}}, 404)

        return Handler


def _serving(tmp_path: Path, endpoint: str) -> Path:
    (tmp_path / "execsys.toml").write_text(
        f'[artifact]\npath = "model.gguf"\n[runtime]\nengine = "llama.cpp"\nendpoint = "{endpoint}"\n')
    return tmp_path / "execsys.toml"


@pytest.fixture
def weights(tmp_path: Path) -> tuple[Path, Path]:
    """The pinned model file and another one of the same size."""
    (tmp_path / "model.gguf").write_bytes(b"weights")
    (tmp_path / "other.gguf").write_bytes(b"weightz")
    return tmp_path / "model.gguf", tmp_path / "other.gguf"


@needs_b3sum
def test_pin_notes_an_engine_serving_another_artifact_and_answering_any_model_name(
        tmp_path: Path, weights: tuple[Path, Path]) -> None:
    model, other = weights
    with RecordedLlama(other, answers_any_name=True) as llama:
        identity = pin(declaration.load(_serving(tmp_path, llama.endpoint)))
    served = (f"served: another artifact ({other}, {b3sum(other)}) according to /props model_path; "
              f"the pinned artifact is {model}")
    assert identity.observed("runtime")["served"]["sentence"] == served
    honesty = (f"{ANSWERS_ANY_NAME} (asked for the unlisted model {UNLISTED_MODEL_NAME!r}: HTTP 200, "
               f"answered as {str(other)!r}, saying 'hi')")
    assert [n for n in identity.notes if not n.startswith("hardware: ")] == [
        f"{served} -- an integrity defect: results measured now are not the pinned artifact's", honesty]
    assert identity.live["model_name_honesty"]["answered"] is True


@needs_b3sum
def test_an_engine_serving_the_pinned_artifact_honestly_adds_no_note(tmp_path: Path,
                                                                     weights: tuple[Path, Path]) -> None:
    model, _ = weights
    with RecordedLlama(model) as llama:
        identity = pin(declaration.load(_serving(tmp_path, llama.endpoint)))
    assert identity.observed("runtime")["served"]["verdict"] == "the pinned artifact"
    assert identity.live["model_name_honesty"] == {
        "asked": UNLISTED_MODEL_NAME, "status": 404, "answered": False}
    assert [n for n in identity.notes if not n.startswith("hardware: ")] == []


@needs_b3sum
def test_verify_names_the_served_artifact_defect_as_the_runtime_change(tmp_path: Path,
                                                                       weights: tuple[Path, Path]) -> None:
    model, other = weights
    with RecordedLlama(model) as llama:
        identity = pin(declaration.load(_serving(tmp_path, llama.endpoint)))
        same = verify(identity)
        llama.model = str(other)  # restarted by hand on other weights, the declaration untouched
        moved = verify(identity)
    assert not (same.components["runtime"].reason or "").startswith("served:")
    assert "served:" not in same.sentence
    served = (f"served: another artifact ({other}, {b3sum(other)}) according to /props model_path; "
              f"the pinned artifact is {model}")
    runtime = moved.components["runtime"]
    assert (runtime.status, runtime.reason) == ("changed", served)
    assert moved.verdict == "new-identity"
    assert moved.sentence.endswith(f"; {served} since {identity.id[:12]} was pinned; "
                                   "re-measure before comparing results across this change")


@pytest.mark.parametrize("status", [401, 403])
def test_an_endpoint_that_refuses_the_model_list_is_noted_with_what_to_declare(tmp_path: Path, status: int) -> None:
    (tmp_path / "model.gguf").write_bytes(b"weights")
    with RecordedLlama(tmp_path / "model.gguf", models_status=status) as llama:
        (tmp_path / "execsys.toml").write_text(
            f'[artifact]\npath = "model.gguf"\n[runtime]\nendpoint = "{llama.endpoint}"\n')
        identity = pin(declaration.load(tmp_path / "execsys.toml"))
    assert identity.observed("runtime")["endpoint"]["models_status"] == status
    assert [n for n in identity.notes if not n.startswith("hardware: ")] == [
        f"the endpoint refused /v1/models ({status}): name the variable holding its key in [runtime] api_key_env"]


def test_an_endpoint_that_lists_nothing_for_another_reason_is_not_a_key_problem(tmp_path: Path) -> None:
    (tmp_path / "model.gguf").write_bytes(b"weights")
    with RecordedLlama(tmp_path / "model.gguf", models_status=404) as llama:
        (tmp_path / "execsys.toml").write_text(
            f'[artifact]\npath = "model.gguf"\n[runtime]\nendpoint = "{llama.endpoint}"\n')
        identity = pin(declaration.load(tmp_path / "execsys.toml"))
    assert identity.observed("runtime")["endpoint"]["models_status"] == 404
    assert [n for n in identity.notes if not n.startswith("hardware: ")] == []


def test_a_number_json_cannot_hold_is_refused_naming_the_field(project: Path) -> None:
    """Python's json reads NaN; the lock and the canonical id cannot hold it: one line, not a crash."""
    with AnyNameEngine(project / "model.bin", nan_params=True) as engine:
        decl = declare(project, f'[runtime]\nengine = "llama.cpp"\nendpoint = "{engine.endpoint}"\n')
        with pytest.raises(InputError) as caught:
            pin(decl)
    assert str(caught.value) == ("observed runtime.engine_native.model_meta.n_params is NaN or infinite, which JSON "
                                 "(and so the lock) cannot hold: the engine or file it was read from wrote a "
                                 "non-standard number")
    model = project / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w")
    (project / "execsys.toml").write_text('[artifact]\npath = "model"\n')

    def refused(config: str) -> str:
        (model / "config.json").write_text(config)
        with pytest.raises(InputError) as caught:
            pin(declaration.load(project / "execsys.toml"), require_endpoint=False)
        return str(caught.value).removesuffix(" is NaN or infinite, which JSON (and so the lock) cannot hold: the "
                                              "engine or file it was read from wrote a non-standard number")

    # the first number JSON cannot hold is named, not a finite one before it
    assert refused('{"model_type": "llama", "quantization_config": {"quant_method": "gptq", "bits": 4, '
                   '"damp_percent": 0.01, "clip_ratio": NaN}}') == "observed artifact.quantization_config.clip_ratio"
    assert refused('{"model_type": "llama", "architectures": ["LlamaForCausalLM", -Infinity]}') == (
        "observed model.from_files.architectures[1]")


def test_verify_marks_only_the_component_with_such_a_number_unverifiable(project: Path, cli) -> None:
    """Pinned while the engine reported a finite n_params; it now reports NaN. Refusing the whole
    verify would hide what the other eleven components say: runtime alone is unverifiable, naming
    the field, and the verdict is not same-system."""
    with AnyNameEngine(project / "model.bin") as engine:
        decl = declare(project, f'[runtime]\nengine = "llama.cpp"\nendpoint = "{engine.endpoint}"\n')
        identity = pin(decl)
        assert identity.observed("runtime")["engine_native"]["model_meta"]["n_params"] == 8030261248
        engine.nan_params = True
        report = verify(identity)
        write_lock(identity, project / "execsys.lock.json")
        shown = cli("verify", "--json", cwd=project)
    runtime = report.components["runtime"]
    assert runtime.status == "unverifiable"
    assert runtime.reason == ("observed runtime.engine_native.model_meta.n_params is NaN or infinite, which JSON "
                              "(and so the lock) cannot hold: the engine or file it was read from wrote a "
                              "non-standard number")
    # the rest of runtime is still compared, and nothing else in it moved
    assert runtime.changes == [{"field": "observed.engine_native.model_meta.n_params", "old": 8030261248, "new": None}]
    assert {name for name, check in report.components.items() if check.status != "same"} == {"runtime"}
    assert report.verdict == "new-identity" and report.observed_id is None
    assert "1 unverifiable (runtime)" in report.sentence
    assert shown.returncode == 1, shown.stderr
    assert shown.json()["components"]["runtime"]["status"] == "unverifiable"
    assert "NaN" not in shown.stdout.replace("is NaN or infinite", "")  # the JSON itself stays standard


def test_verify_marks_the_model_unverifiable_when_its_config_gains_an_infinity(project: Path) -> None:
    model = project / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w")
    (model / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    (project / "execsys.toml").write_text('[artifact]\npath = "model"\n')
    identity = pin(declaration.load(project / "execsys.toml"), require_endpoint=False)
    (model / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM", -Infinity]}')
    report = verify(identity)
    assert report.components["model"].status == "unverifiable"
    assert report.components["model"].reason.startswith("observed model.from_files.architectures[1] is NaN or infinite")
    assert report.components["artifact"].status == "changed"  # the file's bytes moved, and that is still said
    assert report.sentence.startswith("1 changed (artifact); 1 unverifiable (model) since ")


def test_re_observing_the_runtime_asks_the_engine_its_fingerprint_unless_a_probe_pass_carries_it(
        project: Path, any_name_engine: AnyNameEngine) -> None:
    """The probes' restart axis re-observes the runtime alone: by default with the one-token completion
    whose answer carries ``system_fingerprint``; a probe pass, whose own responses carry it, sends none."""
    declared = {"engine": "llama.cpp", "endpoint": any_name_engine.endpoint}
    observed = observe_runtime(declared)
    assert observed["endpoint"]["system_fingerprint"] == "b6058-3f4fc97f"
    assert "engine_live" not in observed  # what the engine is doing now is no part of the runtime re-observed
    assert [model for model, _key in any_name_engine.chats] == [str(project / "model.bin")]
    quiet = observe_runtime(declared, ask_fingerprint=False)
    assert quiet["endpoint"]["system_fingerprint"] is None
    assert len(any_name_engine.chats) == 1, "a probe pass's re-observation sent a completion"
