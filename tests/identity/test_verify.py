"""`verify` in-process: the verdict, the sentence, and each component's status, changes and reason a
user reads when a pinned system is checked again -- changed, unverifiable, or the same.

A real declaration and artifact in tmp_path, a real lock file; the artifact digests are b3sum's.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.errors import InputError
from execsys.identity import (
    SCHEMA,
    ArtifactHashed,
    Cancelled,
    ComponentChecked,
    ComponentObserved,
    Identity,
    VerifyOptions,
    load_lock,
    pin,
    run_verify,
    verify,
    write_lock,
)
from tests.fixtures.git_repo import git
from tests.fixtures.identity_project import DECLARATION, JUDGE_DOWN, RICH, b3sum, needs_b3sum, write_project


@needs_b3sum
def test_verify_right_after_pin_is_the_same_system(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    lock, identity = pinned
    assert identity.observed("artifact")["digest"] == b3sum(tmp_path / "model.bin")
    assert identity.declared("budget") == {"temperature": 0.0, "seed": 7}
    report = verify(identity)
    assert report.verdict == "same-system" and report.observed_id == identity.id
    assert report.sentence == f"all twelve components match identity {identity.id[:12]}"
    assert {name: check.status for name, check in report.components.items()} == dict.fromkeys(COMPONENTS, "same")
    data = report.to_json()
    assert (data["schema"], data["lock_id"], data["lock_schema"], data["verdict"]) == (
        "execsys.verify/1", identity.id, SCHEMA, "same-system")
    assert data["components"]["artifact"] == {"status": "same", "changes": [], "reason": None}
    assert (data["observed_id"], data["sentence"]) == (identity.id, report.sentence)
    # who pinned and who checks: shown by `verify`, never compared
    assert data["pinned_observer"] == identity.observer and identity.observer.get("cwd")
    assert data["observer"] == report.observer and report.observer.get("cwd")


def test_verify_tells_what_it_observes_and_stops_on_cancel(pinned: tuple[Path, Identity]) -> None:
    _, identity = pinned
    events: list = []
    verify(identity, on_event=events.append)
    assert [e.name for e in events if isinstance(e, ComponentChecked)] == list(COMPONENTS)
    assert any(isinstance(e, ArtifactHashed) for e in events)
    assert {e.name for e in events if isinstance(e, ComponentObserved)} >= {"artifact", "budget"}
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        verify(identity, cancel=cancel)


def test_run_verify_announces_each_check_and_stops_on_cancel(tmp_path: Path) -> None:
    path = write_project(tmp_path)
    identity = load_lock(write_lock(pin(declaration.load(path), require_endpoint=False), tmp_path / "x.lock.json"))
    events: list = []
    report = run_verify(VerifyOptions.from_sources(None, identity), on_event=events.append)
    assert report.verdict == "same-system"
    assert [(e.name, e.status) for e in events if isinstance(e, ComponentChecked)] == [(n, "same") for n in COMPONENTS]
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        run_verify(VerifyOptions.from_sources(None, identity), cancel=stop)


def test_each_component_check_is_announced_with_its_verdict(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 8"))
    (tmp_path / "model.bin").unlink()
    events: list = []
    verify(identity, on_event=events.append, declaration=declaration.load(tmp_path / "execsys.toml"))
    checked = {e.name: e for e in events if isinstance(e, ComponentChecked)}
    assert checked["budget"] == ComponentChecked("budget", "changed", 1, None)
    assert checked["harness"] == ComponentChecked("harness", "same", 0, None)
    assert (checked["model"].status, checked["model"].changes, checked["model"].reason) == (
        "unverifiable", 0, "the artifact's files cannot be read")


def test_an_unreachable_endpoint_makes_the_runtime_unverifiable_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    report = verify(identity)
    runtime = report.components["runtime"]
    assert runtime.status == "unverifiable" and "endpoint http://127.0.0.1:9/v1: unreachable" in (runtime.reason or "")
    assert report.sentence.startswith(f"1 unverifiable (runtime) since {identity.id[:12]} was pinned")


@needs_b3sum
def test_verify_rehashes_the_artifact_and_names_what_moved(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    old = identity.observed("artifact")["digest"]
    (tmp_path / "model.bin").write_bytes(b"weightz")  # same size, one byte moved
    report = verify(identity)
    assert report.verdict == "new-identity" and report.observed_id not in (None, identity.id)
    assert report.sentence == (f"1 changed (artifact) since {identity.id[:12]} was pinned; "
                               "re-measure before comparing results across this change")
    artifact = report.components["artifact"]
    assert artifact.status == "changed"
    assert artifact.changes == [{"field": "observed.digest", "old": old, "new": b3sum(tmp_path / "model.bin")}]
    assert [name for name, check in report.components.items() if check.status != "same"] == ["artifact"]


def test_an_edited_declaration_is_a_move_too(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 8"))
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    assert report.components["budget"].status == "changed"
    assert report.components["budget"].changes == [{"field": "declared.seed", "old": 7, "new": 8}]
    assert report.sentence.startswith(f"1 changed (budget) since {identity.id[:12]} was pinned")


def test_a_missing_artifact_is_unverifiable_not_changed(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "model.bin").unlink()
    report = verify(identity)
    assert report.verdict == "new-identity" and report.observed_id is None
    assert report.components["artifact"].status == "unverifiable"
    assert report.components["artifact"].reason
    assert report.components["budget"].status == "same"
    # the model is read from the artifact's files, so it cannot be checked either
    assert report.sentence == (f"2 unverifiable (model, artifact) since {identity.id[:12]} was pinned; "
                               "re-measure before comparing results across this change")


def test_an_older_schema_is_not_compared_at_all(pinned: tuple[Path, Identity]) -> None:
    _, identity = pinned
    old = Identity(identity.id, identity.recorded_at, identity.components, schema="execsys.identity/1",
                   observer=identity.observer)
    report = verify(old)
    assert report.verdict == "new-identity" and report.observed_id is None
    assert report.sentence == "pinned with identity schema 1; re-pin to compare under schema 2"
    assert {check.status for check in report.components.values()} == {"unverifiable"}
    assert report.components["budget"].to_json() == {"status": "unverifiable", "changes": [],
                                                     "reason": "pinned with identity schema 1"}
    data = report.to_json()
    assert (data["lock_id"], data["lock_schema"]) == (identity.id, "execsys.identity/1")
    assert data["observer"].get("cwd") and data["pinned_observer"] == identity.observer
    assert report.schema_outdated and not verify(identity).schema_outdated


def test_a_judge_that_does_not_answer_leaves_the_grader_unverifiable_and_keeps_declared_moves(rich: Path) -> None:
    identity = pin(declaration.load(rich / "execsys.toml"), require_endpoint=False)
    (rich / "index.bin").unlink()
    (rich / "execsys.toml").write_text(RICH.replace('name = "judge"', 'name = "judge-2"'))
    report = verify(identity, declaration=declaration.load(rich / "execsys.toml"))
    grader = report.components["grader"]
    assert (grader.status, grader.reason) == ("unverifiable", JUDGE_DOWN)
    assert grader.changes == [{"field": "declared.name", "old": "judge", "new": "judge-2"}]
    retrieval = report.components["retrieval"]
    assert retrieval.status == "changed" and retrieval.reason is None
    assert retrieval.changes == [
        {"field": "observed.index.digest", "old": b3sum_text(b"index"), "new": None},
        {"field": "observed.index.files", "old": 1, "new": None},
        {"field": "observed.index.kind", "old": "file", "new": None},
        {"field": "observed.index.note", "old": None, "new": "not found on this machine"}]
    assert report.observed_id is None
    assert report.sentence == (f"1 changed (retrieval); 1 unverifiable (grader) since {identity.id[:12]} was pinned; "
                               "re-measure before comparing results across this change")
    assert [name for name, check in report.components.items() if check.status == "same"] == [
        name for name in COMPONENTS if name not in ("retrieval", "grader")]


def b3sum_text(data: bytes) -> str:
    done = subprocess.run(["b3sum", "--no-names"], input=data, capture_output=True, timeout=30, check=True)
    return done.stdout.decode().strip()


def test_a_declared_grader_or_tools_move_is_named(pinned: tuple[Path, Identity], tmp_path: Path) -> None:
    _, identity = pinned
    (tmp_path / "execsys.toml").write_text(DECLARATION + '[grader]\nname = "fuzzy"\n[tools]\nenabled = ["search"]\n')
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    assert report.components["grader"].to_json() == {
        "status": "changed", "changes": [{"field": "declared.name", "old": None, "new": "fuzzy"}],
        "reason": "declared name None → fuzzy"}
    assert report.components["tools"].to_json() == {
        "status": "changed", "changes": [{"field": "declared.enabled", "old": None, "new": ["search"]}], "reason": None}
    assert report.sentence.startswith("2 changed (tools, grader) since ")


@needs_b3sum
def test_the_current_declaration_is_compared_as_pin_records_it(tmp_path: Path) -> None:
    """The pinned declared half is redacted; the current declaration is compared after the same redaction,
    and its observed changes are kept beside the declared ones."""
    (tmp_path / "model.bin").write_bytes(b"weights")
    text = DECLARATION + '[runtime]\nflags = ["--api-key", "plainvalue"]\n'
    (tmp_path / "execsys.toml").write_text(text)
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    assert identity.declared("runtime") == {"flags": ["--api-key", "<redacted>"]}
    (tmp_path / "model.bin").write_bytes(b"weightz")
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    assert report.components["runtime"].status == "same"
    assert report.components["artifact"].changes == [
        {"field": "observed.digest", "old": identity.observed("artifact")["digest"], "new": b3sum(tmp_path / "model.bin")}]


def test_the_lock_being_checked_is_not_an_edit_of_the_harness(tmp_path: Path) -> None:
    """The lock lives in the harness's repository: rewriting it is not a dirty working tree."""
    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION)
    (tmp_path / "execsys.lock.json").write_text("{}\n")
    git("init", "-q", cwd=tmp_path)
    git("add", ".", cwd=tmp_path)
    git("commit", "-qm", "eval", cwd=tmp_path)
    lock = tmp_path / "execsys.lock.json"
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False, exclude=[lock])
    assert identity.observed("harness")["dirty"] is False
    loaded = load_lock(write_lock(identity, lock))
    report = verify(loaded)
    assert report.components["harness"].status == "same", report.components["harness"].changes
    assert report.verdict == "same-system"


def test_verify_options_use_the_pinned_declaration_while_it_exists(pinned: tuple[Path, Identity],
                                                                   tmp_path: Path) -> None:
    from execsys.identity import VerifyOptions, run_verify

    lock, identity = pinned
    with pytest.raises(InputError) as caught:
        VerifyOptions.from_sources(None, None, lock_path="elsewhere.lock.json")
    assert str(caught.value) == "elsewhere.lock.json: no such lock file (create one with 'execsys pin')"
    with pytest.raises(InputError) as caught:
        VerifyOptions.from_sources(None, None)
    assert str(caught.value) == "execsys.lock.json: no such lock file (create one with 'execsys pin')"
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 9"))
    options = VerifyOptions.from_sources(None, identity)
    assert options.lock is identity and options.declaration is not None
    assert options.declaration.component("budget")["seed"] == 9
    report = run_verify(options)
    assert report.components["budget"].changes == [{"field": "declared.seed", "old": 7, "new": 9}]
    (tmp_path / "execsys.toml").unlink()
    assert VerifyOptions.from_sources(None, identity).declaration is None


def test_what_could_not_be_observed_is_unknown_not_changed(rich: Path) -> None:
    """An unverifiable component keeps only the changes that could be seen: its declared ones."""
    decl = declaration.load(rich / "execsys.toml")
    identity = pin(decl, require_endpoint=False)
    shutil.rmtree(rich / "model")
    (rich / "execsys.toml").write_text(RICH.replace('path = "model"', 'path = "model"\nquantization = "awq"'))
    report = verify(identity, declaration=declaration.load(rich / "execsys.toml"))
    artifact, model = report.components["artifact"], report.components["model"]
    assert (artifact.status, model.status) == ("unverifiable", "unverifiable")
    assert artifact.changes == [{"field": "declared.quantization", "old": None, "new": "awq"}]
    assert model.changes == [] and model.reason == "the artifact's files cannot be read"
    assert artifact.reason is not None and artifact.reason.startswith("cannot re-hash the artifact: ")


def test_an_endpoint_or_judge_that_answered_when_pinned_and_is_down_now_is_unknown(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"weights")
    text = (DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n'
            '[grader]\nname = "judge"\n[grader.judge]\nendpoint = "http://127.0.0.1:9/v1"\nmodel = "j"\n')
    (tmp_path / "execsys.toml").write_text(text)
    identity = pin(declaration.load(tmp_path / "execsys.toml"), require_endpoint=False)
    # as the lock read when both answered at pin time
    identity.components["runtime"]["observed"]["endpoint"] = {"url": "http://127.0.0.1:9/v1", "models": ["m"]}
    identity.components["grader"]["observed"]["judge"] = {"completion": {"model": "j-2026-05"}}
    (tmp_path / "execsys.toml").write_text(text.replace('model = "j"', 'model = "k"').replace(
        '[runtime]\n', '[runtime]\nversion = "b4567"\n'))
    report = verify(identity, declaration=declaration.load(tmp_path / "execsys.toml"))
    runtime, grader = report.components["runtime"], report.components["grader"]
    assert (runtime.status, grader.status) == ("unverifiable", "unverifiable")
    assert runtime.changes == [{"field": "declared.version", "old": None, "new": "b4567"}]
    assert grader.changes == [{"field": "declared.judge.model", "old": "j", "new": "k"}]
    assert grader.reason is not None and grader.reason.startswith("judge: endpoint http://127.0.0.1:9/v1: unreachable")


def test_a_retrieval_corpus_that_cannot_be_hashed_is_unverifiable_at_verify_and_refused_at_pin(rich: Path) -> None:
    identity = pin(declaration.load(rich / "execsys.toml"), require_endpoint=False)
    (rich / "corpus" / "gone").symlink_to(rich / "nowhere")
    report = verify(identity)
    retrieval = report.components["retrieval"]
    assert retrieval.status == "unverifiable"
    assert retrieval.reason is not None and retrieval.reason.startswith(f"{rich / 'corpus' / 'gone'}: dangling symlink")
    with pytest.raises(InputError, match="dangling symlink"):
        pin(declaration.load(rich / "execsys.toml"), require_endpoint=False)
