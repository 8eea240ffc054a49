"""pin's facts beside the id (execsys/identity.py): what the engine does now, the harness's interpreter,
cancel, progress and where relative paths resolve -- in-process, as a user reads them in the lock.

Written for mutants that survived scripts/mutation.sh in ``_live_facts``, ``_harness_interpreter``,
``observe_components`` and their helpers (the CLI tests run ``execsys pin`` in subprocesses, where a
mutant cannot be seen). Real declarations and artifacts in tmp_path, a real venv and git repository,
real processes. The engine is a stdlib loopback server answering llama.cpp's recorded shapes
(``tests/data/engines``) and, as ``llama-server`` does, any model name it is asked for; the real
llama-cpp-python server is in ``tests/test_served_artifact.py``.
"""

from __future__ import annotations

import subprocess
import threading
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.errors import InputError
from execsys.identity import (
    ArtifactHashed,
    Cancelled,
    ComponentObserved,
    observe_components,
    observe_runtime,
    pin,
    verify,
    write_lock,
)
from execsys.observe.served import ANSWERS_ANY_NAME, UNLISTED_MODEL_NAME
from tests.fixtures.fake_http import JsonHandler, LoopbackServer
from tests.fixtures.identity_project import DECLARATION

DATA = Path(__file__).parent / "data" / "engines"
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
                    text = (DATA / LLAMA_CPP_ROUTES[path]).read_text().replace("{MODEL}", engine.model)
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
def project(tmp_path: Path) -> Path:
    (tmp_path / "model.bin").write_bytes(b"weights")
    return tmp_path


@pytest.fixture
def any_name_engine(project: Path) -> Iterator[AnyNameEngine]:
    with AnyNameEngine(project / "model.bin") as engine:
        yield engine


def _declare(project: Path, text: str) -> declaration.Declaration:
    (project / "execsys.toml").write_text(DECLARATION + text)
    return declaration.load(project / "execsys.toml")


# -- what the engine does now, outside the id -----------------------------------------------------------


def test_a_live_engine_and_a_model_name_it_answers_anyway_are_kept_outside_the_id(
        project: Path, any_name_engine: AnyNameEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECSYS_FACTS_KEY", "sk-facts-0123456789abcdef")
    decl = _declare(project, f'[runtime]\nengine = "llama.cpp"\nendpoint = "{any_name_engine.endpoint}"\n'
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
    identity = pin(_declare(project, f'[runtime]\nendpoint = "{any_name_engine.endpoint}"\n'))
    assert any_name_engine.chats[-1] == (UNLISTED_MODEL_NAME, None)
    assert identity.live["model_name_honesty"]["answered"] is True
    assert "engine" not in identity.live  # no engine declared: nothing asked of its native routes


def test_an_engine_that_lists_no_model_is_not_asked_for_an_unlisted_one(project: Path) -> None:
    with AnyNameEngine(project / "model.bin", listed=False) as engine:
        identity = pin(_declare(project, f'[runtime]\nendpoint = "{engine.endpoint}"\n'))
    assert identity.live == {} and engine.chats == []
    assert not [note for note in identity.notes if ANSWERS_ANY_NAME in note]


def test_an_endpoint_that_does_not_answer_is_not_asked_anything_more(project: Path) -> None:
    identity = pin(_declare(project, '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n'), require_endpoint=False)
    assert identity.live == {}
    assert identity.observed("runtime")["endpoint"]["error"].startswith("endpoint http://127.0.0.1:9/v1: unreachable")


def test_a_number_json_cannot_hold_is_refused_naming_the_field(project: Path) -> None:
    """Python's json reads NaN; the lock and the canonical id cannot hold it: one line, not a crash."""
    with AnyNameEngine(project / "model.bin", nan_params=True) as engine:
        decl = _declare(project, f'[runtime]\nengine = "llama.cpp"\nendpoint = "{engine.endpoint}"\n')
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
        decl = _declare(project, f'[runtime]\nengine = "llama.cpp"\nendpoint = "{engine.endpoint}"\n')
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


# -- the harness's interpreter: where the grader's, tools' and workflow's packages are read -------------


def _venv_with_probe(root: Path) -> Path:
    """A real venv holding a distribution (execsys-facts-probe 4.5.6) that execsys's own interpreter lacks.

    Its python is a copy, not a symlink: the harness record keeps the interpreter's resolved path, and a
    symlinked venv's python resolves to the base interpreter, whose packages are not the venv's."""
    env = root / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=False).create(env)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    dist = Path(site) / "execsys_facts_probe-4.5.6.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: execsys-facts-probe\nVersion: 4.5.6\n")
    return python


def test_workflow_packages_are_read_from_the_first_harness_interpreter_that_describes_itself(project: Path) -> None:
    python = _venv_with_probe(project)
    broken = project / "broken" / "python3"  # named like Python, says nothing about itself
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    decl = _declare(project, f'[harness]\ncommands = ["true", "{broken} -c pass", "{python} -c pass"]\n'
                             '[workflow]\npackages = ["execsys-facts-probe"]\n')
    identity = pin(decl, require_endpoint=False)
    commands = identity.observed("harness")["commands"]
    assert commands[1]["interpreter"]["note"] and "note" not in commands[2]["interpreter"]
    assert identity.observed("workflow")["packages"] == {"interpreter": str(python),
                                                         "versions": {"execsys-facts-probe": "4.5.6"}}


def test_without_a_harness_interpreter_packages_are_read_from_execsys_own(project: Path) -> None:
    identity = pin(_declare(project, '[harness]\ncommands = ["true"]\n[workflow]\npackages = ["execsys-facts-probe"]\n'),
                   require_endpoint=False)
    packages = identity.observed("workflow")["packages"]
    assert packages["versions"] == {"execsys-facts-probe": None}
    assert packages["interpreter"] != "None" and Path(packages["interpreter"]).name.startswith("python")


# -- observe_components: the endpoint, cancel, progress, exclusions ----------------------------------------


def test_observing_components_requires_the_declared_endpoint_unless_told_otherwise(project: Path) -> None:
    decl = _declare(project, '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    with pytest.raises(InputError) as caught:
        observe_components(decl)
    assert str(caught.value).startswith("endpoint http://127.0.0.1:9/v1: unreachable")
    components = observe_components(decl, require_endpoint=False)
    assert list(components) == list(COMPONENTS)
    assert "unreachable" in components["runtime"]["observed"]["endpoint"]["error"]


def test_a_pin_cancelled_after_the_runtime_stops_saying_nothing_was_written(project: Path) -> None:
    decl = _declare(project, "")
    cancel = threading.Event()
    events: list = []

    def on_event(event: object) -> None:
        events.append(event)
        cancel.set()

    with pytest.raises(Cancelled) as caught:
        pin(decl, on_event=on_event, cancel=cancel)
    assert str(caught.value) == "cancelled: nothing was written"
    assert events == [ComponentObserved("runtime", 1, 12)]


def test_artifact_hashing_reports_its_bytes(project: Path) -> None:
    (project / "model.bin").write_bytes(b"w" * 3000)
    events: list = []
    pin(_declare(project, ""), require_endpoint=False, on_event=events.append)
    hashed = [event for event in events if isinstance(event, ArtifactHashed)]
    assert hashed and hashed[-1] == ArtifactHashed(3000, 3000)
    assert all(event.total_bytes == 3000 and 0 <= event.done_bytes <= 3000 for event in hashed)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True, timeout=30)


def test_an_excluded_file_is_no_edit_of_the_harness_at_pin(project: Path) -> None:
    decl = _declare(project, "")
    lock = project / "execsys.lock.json"
    lock.write_text("{}\n")
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-qm", "eval")
    lock.write_text('{"id": "rewritten"}\n')  # the lock being rewritten by this very pin
    assert pin(decl, require_endpoint=False, exclude=[lock]).observed("harness")["dirty"] is False
    assert pin(decl, require_endpoint=False).observed("harness")["dirty"] is True


# -- where relative paths mean "beside the declaration" ----------------------------------------------------


def test_a_declaration_without_a_file_resolves_beside_the_working_directory(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    identity = pin(declaration.parse(DECLARATION), require_endpoint=False)
    assert identity.declaration == {"path": None, "base_dir": str(project)}
    assert identity.observed("artifact")["path"] == str(project / "model.bin")


def test_an_empty_runtime_file_setting_names_no_file(project: Path) -> None:
    identity = pin(_declare(project, '[runtime]\nenv_file = ""\nlog = ""\n'), require_endpoint=False)
    runtime = identity.observed("runtime")
    assert "env_file_numerics" not in runtime and "kernels" not in runtime
    assert observe_runtime({"env_file": "", "log": ""}, require_endpoint=False, base_dir=project).keys() == \
        runtime.keys()
