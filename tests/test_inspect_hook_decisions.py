"""The execsys hook for Inspect (execsys/harnesses/inspect_hook.py) as decisions, in-process: Inspect's
``hooks`` and ``log`` modules are stood in for by small fakes (the hook uses only their names), so each
row drives the hook's own logic -- enabled by ``EXECSYS_LOCK``, the identity written into the task's
metadata, which model events count and which mismatch, the verdict recorded in the log, the report
written for ``execsys run`` -- and checks what ``execsys run`` and the log's reader get.
(tests/test_run_inspect.py runs the real hook inside a real Inspect eval.)"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

MODULE = "execsys.harnesses.inspect_hook"


@dataclass
class MetadataEdit:
    metadata_set: dict


@dataclass
class ProvenanceData:
    author: str
    reason: str


class FakeLogs:
    """``inspect_ai.log``: logs by location, each edit and write kept."""

    def __init__(self) -> None:
        self.logs: dict[str, dict] = {}
        self.written: list[tuple[str, Any]] = []
        self.fail_read: Exception | None = None

    def read_eval_log(self, location):
        if self.fail_read is not None:
            raise self.fail_read
        return self.logs[location]

    def edit_eval_log(self, log, edits, provenance):
        return {"log": log, "edits": edits, "provenance": provenance}

    def write_eval_log(self, log, location):
        self.written.append((location, log))


@pytest.fixture
def hook(monkeypatch, tmp_path):
    """The hook module imported against fake inspect_ai modules; yields (module, logs)."""
    logs = FakeLogs()
    root = types.ModuleType("inspect_ai")
    hooks_module = types.ModuleType("inspect_ai.hooks")

    class Hooks:
        pass

    registered: list[tuple[str, str]] = []

    def hooks(name, description):
        def register(cls):
            registered.append((name, description))
            return cls
        return register

    hooks_module.Hooks = Hooks  # type: ignore[attr-defined]
    hooks_module.hooks = hooks  # type: ignore[attr-defined]
    for name in ("SampleEvent", "TaskEnd", "TaskStart"):
        setattr(hooks_module, name, type(name, (), {}))
    log_module = types.ModuleType("inspect_ai.log")
    log_module.MetadataEdit = MetadataEdit  # type: ignore[attr-defined]
    log_module.ProvenanceData = ProvenanceData  # type: ignore[attr-defined]
    log_module.read_eval_log = logs.read_eval_log  # type: ignore[attr-defined]
    log_module.edit_eval_log = logs.edit_eval_log  # type: ignore[attr-defined]
    log_module.write_eval_log = logs.write_eval_log  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "inspect_ai", root)
    monkeypatch.setitem(sys.modules, "inspect_ai.hooks", hooks_module)
    monkeypatch.setitem(sys.modules, "inspect_ai.log", log_module)
    sys.modules.pop(MODULE, None)
    module = importlib.import_module(MODULE)
    assert registered == [("execsys", "Records the pinned execution-system identity in every eval log "
                                      "(execsys run)")]
    for name in ("EXECSYS_LOCK", "EXECSYS_RUN_ID", "EXECSYS_HOOK_DIR"):
        monkeypatch.delenv(name, raising=False)
    yield module, logs
    sys.modules.pop(MODULE, None)


def _lock(tmp_path: Path, models=("tiny",), fingerprint="fp-1", identity="id-123") -> Path:
    path = tmp_path / "execsys.lock.json"
    path.write_text(json.dumps({"id": identity, "components": {"runtime": {"observed": {"endpoint": {
        "models": list(models), "system_fingerprint": fingerprint}}}}}))
    return path


def _ready(module, tmp_path, monkeypatch, **lock):
    monkeypatch.setenv("EXECSYS_LOCK", str(_lock(tmp_path, **lock)))
    monkeypatch.setenv("EXECSYS_RUN_ID", "run_7")
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir(exist_ok=True)
    monkeypatch.setenv("EXECSYS_HOOK_DIR", str(hook_dir))
    return module.ExecsysHooks(), hook_dir


@dataclass
class Spec:
    task: str
    metadata: dict | None = None


@dataclass
class Start:
    eval_id: str
    spec: Spec


@dataclass
class Output:
    model: str | None = None


@dataclass
class Call:
    response: Any = None


@dataclass
class ModelEvent:
    event: str = "model"
    uuid: str | None = None
    pending: bool = False
    error: str | None = None
    model: str | None = "openai-api/local/tiny"
    output: Output = field(default_factory=Output)
    call: Call | None = None


@dataclass
class Sample:
    eval_id: str
    event: Any
    sample_id: Any = 1


@dataclass
class EvalLog:
    eval: Any
    location: str | None = None


@dataclass
class End:
    eval_id: str
    log: EvalLog


def run(coro):
    return asyncio.run(coro)


def _answer(uuid: str, model="tiny", fingerprint="fp-1", **kwargs) -> ModelEvent:
    response = {"model": model, "system_fingerprint": fingerprint} if model is not None or fingerprint else None
    return ModelEvent(uuid=uuid, call=Call(response), **kwargs)


def test_pinned_reads_the_identity_models_and_fingerprint(hook, tmp_path) -> None:
    module, _ = hook
    assert module._pinned(str(_lock(tmp_path, models=("a", "b")))) == {"identity": "id-123", "models": ["a", "b"],
                                                                     "system_fingerprint": "fp-1"}
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"id": "x", "components": {"runtime": {"observed": {"endpoint": None}}}}))
    assert module._pinned(str(bare)) == {"identity": "x", "models": [], "system_fingerprint": None}
    bare.write_text("{}")
    assert module._pinned(str(bare)) == {"identity": None, "models": [], "system_fingerprint": None}


def test_enabled_only_under_a_lock(hook, monkeypatch) -> None:
    module, _ = hook
    assert module.ExecsysHooks().enabled() is False
    monkeypatch.setenv("EXECSYS_LOCK", "")
    assert module.ExecsysHooks().enabled() is False
    monkeypatch.setenv("EXECSYS_LOCK", "/l.json")
    assert module.ExecsysHooks().enabled() is True
    assert (module.LOCK_ENV, module.RUN_ENV, module.HOOK_DIR_ENV) == ("EXECSYS_LOCK", "EXECSYS_RUN_ID",
                                                                      "EXECSYS_HOOK_DIR")


def test_task_start_writes_the_identity_into_the_metadata(hook, tmp_path, monkeypatch) -> None:
    module, _ = hook
    hooks, _ = _ready(module, tmp_path, monkeypatch)
    spec = Spec("arc", {"mine": 1})
    run(hooks.on_task_start(Start("e1", spec)))
    assert spec.metadata == {"mine": 1, "execsys": {"identity": "id-123", "run": "run_7"}}
    assert hooks.tasks["e1"].task == "arc" and hooks.tasks["e1"].errors == []
    spec2 = Spec("gsm", None)
    monkeypatch.setenv("EXECSYS_RUN_ID", "")
    run(hooks.on_task_start(Start("e2", spec2)))
    assert spec2.metadata == {"execsys": {"identity": "id-123", "run": None}}


def test_task_start_that_cannot_write_is_an_error_not_a_crash(hook, tmp_path, monkeypatch) -> None:
    module, _ = hook
    hooks, _ = _ready(module, tmp_path, monkeypatch)
    (tmp_path / "execsys.lock.json").write_text("not json")
    run(hooks.on_task_start(Start("e1", Spec("arc"))))
    [error] = hooks.tasks["e1"].errors
    assert error.startswith("task start: JSONDecodeError: ")


@pytest.mark.parametrize(("events", "calls", "failed", "mismatches"), [
    pytest.param([_answer("a")], 1, 0, 0, id="pinned-model-and-fingerprint"),
    pytest.param([_answer("a"), _answer("a")], 1, 0, 0, id="same-event-twice-counted-once"),
    pytest.param([_answer("a"), _answer("b")], 2, 0, 0, id="two-events"),
    pytest.param([ModelEvent(uuid="p", pending=True), _answer("p")], 1, 0, 0, id="pending-then-complete"),
    pytest.param([ModelEvent(uuid="p", pending=True), _answer("p", model="big")], 1, 0, 1,
                 id="pending-then-complete-is-checked-when-complete"),
    pytest.param([ModelEvent(uuid="f", error="timeout"), _answer("g")], 1, 1, 0, id="failed-attempt-not-compared"),
    pytest.param([_answer("a", model="other")], 1, 0, 1, id="other-model"),
    pytest.param([_answer("a", fingerprint="fp-2")], 1, 0, 1, id="other-fingerprint"),
    pytest.param([_answer("a", model="other", fingerprint="fp-2")], 1, 0, 1, id="both-wrong-one-mismatch"),
    pytest.param([_answer("a", model=None, fingerprint=None)], 1, 0, 0, id="nothing-said-nothing-wrong"),
    pytest.param([_answer("a", model="openai-api/local/tiny")], 1, 0, 0, id="qualified-name-unqualified"),
    pytest.param([ModelEvent(event="tool", uuid="t")], 0, 0, 0, id="not-a-model-event"),
])
def test_model_events(hook, tmp_path, monkeypatch, events, calls, failed, mismatches) -> None:
    module, _ = hook
    hooks, _ = _ready(module, tmp_path, monkeypatch)
    for event in events:
        run(hooks.on_sample_event(Sample("e1", event)))
    state = hooks.tasks.get("e1")
    got = (state.model_calls, state.failed_attempts, state.mismatches) if state else (0, 0, 0)
    assert got == (calls, failed, mismatches)


def test_a_mismatch_names_what_differs_and_keeps_five_examples(hook, tmp_path, monkeypatch) -> None:
    module, _ = hook
    hooks, _ = _ready(module, tmp_path, monkeypatch)
    for i in range(7):
        run(hooks.on_sample_event(Sample("e1", _answer(f"u{i}", model="big", fingerprint="fp-9"), sample_id=i)))
    state = hooks.tasks["e1"]
    assert state.mismatches == 7 and len(state.examples) == 5
    assert state.examples[0] == {"sample": 0, "mismatch": ["model 'big' not in the pinned ['tiny']",
                                                           "system_fingerprint 'fp-9' != pinned 'fp-1'"]}
    assert [e["sample"] for e in state.examples] == [0, 1, 2, 3, 4]


def test_nothing_pinned_nothing_compared(hook, tmp_path, monkeypatch) -> None:
    module, _ = hook
    hooks, _ = _ready(module, tmp_path, monkeypatch, models=(), fingerprint=None)
    run(hooks.on_sample_event(Sample("e1", _answer("a", model="big", fingerprint="fp-9"))))
    assert (hooks.tasks["e1"].model_calls, hooks.tasks["e1"].mismatches) == (1, 0)


def test_an_event_without_a_uuid_is_keyed_by_the_object(hook, tmp_path, monkeypatch) -> None:
    module, _ = hook
    hooks, _ = _ready(module, tmp_path, monkeypatch)
    one, two = _answer(None), _answer(None)  # type: ignore[arg-type]
    for event in (one, two, one):
        run(hooks.on_sample_event(Sample("e1", event)))
    assert hooks.tasks["e1"].model_calls == 2


def test_a_broken_lock_during_an_event_is_logged_not_raised(hook, tmp_path, monkeypatch) -> None:
    module, _ = hook
    hooks, _ = _ready(module, tmp_path, monkeypatch)
    (tmp_path / "execsys.lock.json").write_text("not json")
    run(hooks.on_sample_event(Sample("e1", _answer("a"))))  # does not raise
    assert hooks.tasks["e1"].model_calls == 1 and hooks.tasks["e1"].mismatches == 0


def _end(hooks, logs, eval_id="e1", location="/logs/a.eval"):
    if location:
        logs.logs[location] = {"the": "log"}
    run(hooks.on_task_end(End(eval_id, EvalLog(types.SimpleNamespace(task="arc"), location))))


def test_task_end_records_the_verdict_in_the_log_and_reports(hook, tmp_path, monkeypatch) -> None:
    module, logs = hook
    hooks, hook_dir = _ready(module, tmp_path, monkeypatch)
    run(hooks.on_task_start(Start("e1", Spec("arc"))))
    run(hooks.on_sample_event(Sample("e1", _answer("a"))))
    run(hooks.on_sample_event(Sample("e1", ModelEvent(uuid="f", error="x"))))
    _end(hooks, logs)
    [(location, edited)] = logs.written
    assert location == "/logs/a.eval" and edited["log"] == {"the": "log"}
    [edit] = edited["edits"]
    assert edit.metadata_set == {"execsys": {"identity": "id-123", "run": "run_7", "model_calls": 1,
                                             "mismatches": 0, "verdict": "consistent", "examples": []}}
    assert edited["provenance"] == ProvenanceData("execsys", "execsys run run_7: per-call model check consistent")
    report = json.loads((hook_dir / "e1.json").read_text())
    assert report == {"eval_id": "e1", "task": "arc", "log": "/logs/a.eval", "recorded": True, "model_calls": 1,
                      "failed_attempts": 1, "mismatches": 0, "examples": [], "error": None}
    assert [p.name for p in hook_dir.iterdir()] == ["e1.json"]  # no temp file left


def test_task_end_after_a_mismatch_says_model_mismatch(hook, tmp_path, monkeypatch) -> None:
    module, logs = hook
    hooks, hook_dir = _ready(module, tmp_path, monkeypatch)
    run(hooks.on_sample_event(Sample("e1", _answer("a", model="big"))))
    _end(hooks, logs)
    [(_, edited)] = logs.written
    check = edited["edits"][0].metadata_set["execsys"]
    assert (check["verdict"], check["mismatches"]) == ("model-mismatch", 1)
    assert edited["provenance"].reason == "execsys run run_7: per-call model check model-mismatch"
    assert json.loads((hook_dir / "e1.json").read_text())["task"] == ""  # never started: the event made it


@pytest.mark.parametrize(("location", "fail", "error"), [
    pytest.param(None, None, "task end: RuntimeError: the log has no location to edit", id="no-location"),
    pytest.param("", None, "task end: RuntimeError: the log has no location to edit", id="empty-location"),
    pytest.param("/logs/a.eval", OSError("gone"), "task end: OSError: gone", id="unreadable-log"),
])
def test_task_end_that_cannot_record_reports_why(hook, tmp_path, monkeypatch, location, fail, error) -> None:
    module, logs = hook
    hooks, hook_dir = _ready(module, tmp_path, monkeypatch)
    logs.fail_read = fail
    run(hooks.on_task_end(End("e9", EvalLog(types.SimpleNamespace(task="gsm"), location))))
    report = json.loads((hook_dir / "e9.json").read_text())
    assert (report["recorded"], report["error"], report["task"], report["log"]) == (False, error, "gsm", location)
    assert logs.written == []


def test_errors_of_start_and_end_are_joined(hook, tmp_path, monkeypatch) -> None:
    module, logs = hook
    hooks, hook_dir = _ready(module, tmp_path, monkeypatch)
    (tmp_path / "execsys.lock.json").write_text("not json")
    run(hooks.on_task_start(Start("e1", Spec("arc"))))
    run(hooks.on_task_end(End("e1", EvalLog(types.SimpleNamespace(task="arc"), None))))
    error = json.loads((hook_dir / "e1.json").read_text())["error"]
    assert error.startswith("task start: JSONDecodeError: ") and "; task end: " in error


def test_no_hook_dir_no_report_and_an_unwritable_one_is_no_crash(hook, tmp_path, monkeypatch) -> None:
    module, logs = hook
    hooks, hook_dir = _ready(module, tmp_path, monkeypatch)
    monkeypatch.delenv("EXECSYS_HOOK_DIR")
    _end(hooks, logs)
    assert list(hook_dir.iterdir()) == [] and len(logs.written) == 1
    monkeypatch.setenv("EXECSYS_HOOK_DIR", str(tmp_path / "missing"))
    _end(hooks, logs, eval_id="e2")  # logged, not raised
    assert not (tmp_path / "missing").exists()
