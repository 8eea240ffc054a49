"""``execsys attach`` (execsys/run/attach.py) as decisions, in-process against a lock pinned in tmp_path:
what is refused before anything is written (and the sentence), what the sidecar and the ledger row
say, the exit code by verify-now's verdict, and provenance never downgraded."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from execsys.errors import InputError, UsageError
from execsys.identity import pin
from execsys.ledger import Ledger
from execsys.operation import new_cancel
from execsys.redact import scrub
from execsys.run import attach as attach_module
from execsys.run.attach import (
    ATTACHED_SENTENCE,
    AttachOptions,
    AttachReport,
    _recorded_by_run,
    attach_results,
)
from execsys.run.events import ResultFound, RunRecorded
from execsys.run.shard import Shard
from execsys.sources import load_sources

LEDGER = "ledger.sqlite3"


@dataclass
class FakeLock:
    id: str


@dataclass
class Check:
    status: str


@dataclass
class Report:
    verdict: str
    components: dict
    sentence: str


def _clean_env(monkeypatch) -> None:
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)


@pytest.fixture
def real_node(tmp_path, monkeypatch):
    """tmp_path with a declaration (one env file), its lock pinned for real, and a result file."""
    monkeypatch.chdir(tmp_path)
    _clean_env(monkeypatch)
    (tmp_path / "env").write_text("OMP_NUM_THREADS=1\n")
    (tmp_path / "execsys.toml").write_text('[runtime]\nenv_file = "env"\n')
    identity = pin(load_sources(None, None).declaration)
    (tmp_path / "execsys.lock.json").write_text(json.dumps(scrub(identity.to_json())))
    (tmp_path / "scores.json").write_text('{"acc": 0.5}')
    return tmp_path


@pytest.fixture
def node(tmp_path, monkeypatch):
    """tmp_path with a result file and a stand-in lock: verify answers from the file ``system`` (its
    text is the identity), so each row costs milliseconds, not a pin (real_node's rows pin for real)."""
    monkeypatch.chdir(tmp_path)
    _clean_env(monkeypatch)
    (tmp_path / "system").write_text("s1")
    (tmp_path / "scores.json").write_text('{"acc": 0.5}')

    def verify(identity, declaration=None, exclude=()):
        observed = (tmp_path / "system").read_text()
        assert exclude == [tmp_path / "execsys.lock.json"]
        assert declaration is not None  # the declaration's paths, not only the lock's, are re-observed
        if identity.id == observed:
            return Report("same-system", {"runtime": Check("same")}, "the same system")
        return Report("new-identity", {"runtime": Check("changed"), "os": Check("same"), "hw": Check("missing")},
                      "runtime changed")

    monkeypatch.setattr("execsys.identity.verify", verify)
    return tmp_path


def _sources(tmp_path: Path):
    """The sources of tmp_path; under the stand-in lock unless a real one is there."""
    if (tmp_path / "execsys.lock.json").is_file():
        return load_sources(None, None, ledger=tmp_path / LEDGER)
    sources = load_sources(None, None, read_lock=False, ledger=tmp_path / LEDGER)
    return dataclasses.replace(sources, lock=FakeLock("s1"))


def _rows(tmp_path: Path, kind: str) -> list[dict]:
    with Ledger.open(tmp_path / LEDGER) as ledger:
        return [r.body for r in ledger.iter(kind=kind)]


def test_an_attach_digests_verifies_now_writes_the_sidecar_and_the_row(real_node) -> None:
    node = real_node
    options = AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={})
    assert options.results == [node / "scores.json"] and options.lock_path == node / "execsys.lock.json"
    assert options.ledger == node / LEDGER and options.shard is None and options.sidecar_dir is None
    events = []
    report = attach_results(options, on_event=events.append)
    assert report.verify_now == {"verdict": "same-system", "changed": [], "sentence": report.verify_now["sentence"]}
    assert report.exit_code == 0 and report.identity_id == options.lock.id
    assert report.results == [{"path": str(node / "scores.json"), "blake3": report.results[0]["blake3"],
                               "harness": "other"}]
    assert report.sidecars == [str(node / "scores.json.execsys.json")] and len(report.receipts) == 1
    sidecar = json.loads((node / "scores.json.execsys.json").read_text())
    assert sidecar["schema"] == "execsys.attach/1" and sidecar["attached_after"] is True
    assert sidecar["statement"] == ATTACHED_SENTENCE and sidecar["result"] == report.results[0]
    assert sidecar["verdict"] == "attached" and sidecar["id"] == report.id
    assert sidecar["summary"] == "attached after the run: 1 result(s); verify now same-system"
    [row] = _rows(node, "attach")
    assert row == report.to_json()
    assert [type(e) for e in events] == [ResultFound, RunRecorded]
    assert (events[1].run_id, events[1].verdict, events[1].sidecars) == (report.id, "attached",
                                                                           tuple(report.sidecars))
    assert events[0].path == str(node / "scores.json") and events[0].harness == "other"
    assert len(_rows(node, "receipt")) == 1


def test_a_system_that_moved_since_the_pin_is_attached_with_exit_1(real_node) -> None:
    node = real_node
    (node / "env").write_text("OMP_NUM_THREADS=2\n")
    report = attach_results(AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={}))
    assert report.verify_now["verdict"] == "new-identity" and report.verify_now["changed"] == ["runtime"]
    assert report.exit_code == 1
    assert report.to_json()["summary"] == "attached after the run: 1 result(s); verify now new-identity"


def test_verify_now_lists_every_component_not_the_same(node) -> None:
    (node / "system").write_text("s2")
    report = attach_results(AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={}))
    assert report.verify_now == {"verdict": "new-identity", "changed": ["runtime", "hw"], "sentence": "runtime changed"}
    assert report.exit_code == 1 and report.identity_id == "s1" and report.lock_path == str(node / "execsys.lock.json")
    assert report.recorded_at and report.to_json()["identity"] == {"id": "s1", "lock": str(node / "execsys.lock.json")}
    [row] = _rows(node, "attach")
    assert row["verify_now"]["verdict"] == "new-identity"
    with Ledger.open(node / LEDGER) as ledger:
        [record] = ledger.iter(kind="attach")
        assert record.identity == "s1" and record.id == report.id


@pytest.mark.parametrize(("verdict", "code"), [("same-system", 0), ("new-identity", 1), ("unverified", 1),
                                               (None, 1)])
def test_exit_code_by_verify_now(verdict, code) -> None:
    assert AttachReport("a", "i", "l", {"verdict": verdict}).exit_code == code


def test_a_cancel_before_the_first_result_attaches_nothing(node) -> None:
    cancel = new_cancel(None)
    cancel.set()
    report = attach_results(AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={}),
                            cancel=cancel)
    assert report.results == [] and report.sidecars == []
    assert not (node / "scores.json.execsys.json").exists()


@pytest.mark.parametrize(("results", "error", "message"), [
    pytest.param([], UsageError, "name at least one result file: execsys attach RESULT... [--lock L]", id="none"),
    pytest.param(None, UsageError, "name at least one result file", id="none-given"),
    pytest.param(["missing.json"], InputError, "{tmp}/missing.json: no such result file", id="missing"),
    pytest.param(["."], InputError, "{tmp}: no such result file", id="a-directory"),
    pytest.param(["scores.json.execsys.json"], InputError,
                 "{tmp}/scores.json.execsys.json: that is a sidecar or a receipt; attach the result file beside it",
                 id="a-sidecar"),
    pytest.param(["scores.json.execsys.intoto.json"], InputError, "{tmp}/scores.json.execsys.intoto.json: that is a "
                                                                  "sidecar or a receipt", id="a-receipt"),
])
def test_refused_results(node, results, error, message) -> None:
    (node / "scores.json.execsys.json").write_text("{}")
    (node / "scores.json.execsys.intoto.json").write_text("{}")
    with pytest.raises(error) as caught:
        AttachOptions.from_sources(_sources(node), results=results, environ={})
    assert str(caught.value) == message.format(tmp=node) or str(caught.value).startswith(message.format(tmp=node))


def test_without_a_lock_nothing_can_be_attached(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scores.json").write_text("{}")
    with pytest.raises(InputError) as caught:
        AttachOptions.from_sources(load_sources(None, None, ledger=tmp_path / LEDGER), results=["scores.json"], environ={})
    assert str(caught.value) == (f"no pinned identity (looked for {tmp_path / 'execsys.lock.json'}): nothing can be "
                                 "attached will not count toward any scope; run 'execsys pin' first")


def test_sidecar_dir_and_shard(node) -> None:
    with pytest.raises(InputError) as caught:
        AttachOptions.from_sources(_sources(node), results=["scores.json"], sidecar_dir="nowhere", environ={})
    assert str(caught.value) == f"--sidecar-dir {node / 'nowhere'}: no such directory"
    (node / "side").mkdir()
    options = AttachOptions.from_sources(_sources(node), results=["scores.json"], sidecar_dir="side", shard="1/2@g",
                                         environ={})
    assert options.sidecar_dir == node / "side" and options.shard == Shard(1, 2, "flag", "g")
    report = attach_results(options)
    assert report.shard == {"index": 1, "count": 2, "source": "flag", "job": "g"}
    [sidecar] = report.sidecars
    assert Path(sidecar).parent == node / "side" and Path(sidecar).is_file()
    assert not (node / "scores.json.execsys.json").exists()
    options = AttachOptions.from_sources(_sources(node), results=["scores.json"],
                                         environ={"SLURM_ARRAY_TASK_ID": "3"})
    assert options.shard == Shard(3, None, "slurm", None, "3")


def test_a_result_a_run_recorded_is_refused_by_its_sidecar(node) -> None:
    (node / "scores.json.execsys.json").write_text(json.dumps({"schema": "execsys.run/3", "id": "run_9",
                                                              "verdict": "clean"}))
    with pytest.raises(InputError) as caught:
        AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={})
    assert str(caught.value) == (f"{node / 'scores.json'}: recorded by execsys run run_9 (verdict clean) with the "
                                 "identity pinned before it ran; attach would replace that with an after-the-fact "
                                 "record: nothing written")
    # an earlier attach's sidecar is no run's: attaching again is allowed
    (node / "scores.json.execsys.json").write_text(json.dumps({"schema": "execsys.attach/1", "id": "attach_1"}))
    assert AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={}).results


def test_a_run_sidecar_in_the_sidecar_dir_refuses_too(node) -> None:
    from execsys.run.record import sidecar_path

    (node / "side").mkdir()
    target = sidecar_path(node / "scores.json", node / "side")
    target.write_text(json.dumps({"schema": "execsys.run/1", "id": "run_2", "verdict": "drifted"}))
    with pytest.raises(InputError, match="recorded by execsys run run_2 \\(verdict drifted\\)"):
        AttachOptions.from_sources(_sources(node), results=["scores.json"], sidecar_dir="side", environ={})
    # beside the result, without --sidecar-dir, it is not looked at
    assert AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={}).results


def test_a_result_a_run_in_the_ledger_recorded_is_refused_unless_it_changed_since(node) -> None:
    options = AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={})
    from execsys.run.results import digest

    entry = {"path": str(node / "scores.json"), "blake3": digest(node / "scores.json")}
    with Ledger.open(node / LEDGER) as ledger:
        ledger.append("run", {"id": "run_5", "verdict": "failed", "results": ["junk", entry]})
    with pytest.raises(InputError) as caught:
        attach_results(options)
    assert str(caught.value).startswith(f"{node / 'scores.json'}: recorded by execsys run run_5 (verdict failed)")
    assert not (node / "scores.json.execsys.json").exists() and _rows(node, "attach") == []
    (node / "scores.json").write_text('{"acc": 0.7}')  # rewritten since: that run did not record this content
    assert attach_results(options).results[0]["blake3"] != entry["blake3"]


@pytest.mark.parametrize(("run", "said"), [
    pytest.param({}, "recorded by execsys run ? (verdict ?)", id="placeholders"),
    pytest.param({"id": "a\n b", "verdict": " x\ty "}, "recorded by execsys run a b (verdict x y)", id="whitespace"),
    pytest.param({"id": "r" * 100, "verdict": "v" * 50}, f"recorded by execsys run {'r' * 80} (verdict {'v' * 40})",
                 id="cut"),
])
def test_recorded_by_run(run, said) -> None:
    assert _recorded_by_run(Path("/r/s.json"), run).startswith(f"/r/s.json: {said} with the identity")


class _Receipts:
    def __init__(self, errors=(), late=()) -> None:
        self.paths, self.errors, self._late = ["/r/s.intoto.json"], list(errors), list(late)
        self.discarded = False
        self.kept = []

    def commit(self):
        return self._late

    def discard(self) -> None:
        self.discarded = True


def test_a_receipt_that_cannot_be_made_writes_nothing(node, monkeypatch) -> None:
    receipts = _Receipts(errors=[{"receipt": "/r/s.intoto.json", "error": "read-only"}])
    monkeypatch.setattr(attach_module, "prepare_receipts", lambda *a, **k: receipts)
    with pytest.raises(InputError) as caught:
        attach_results(AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={}))
    assert str(caught.value) == "receipt /r/s.intoto.json: cannot be written (read-only): nothing written"
    assert receipts.discarded and _rows(node, "attach") == []
    assert not (node / "scores.json.execsys.json").exists()


def test_a_receipt_lost_after_the_row_is_said(node, monkeypatch) -> None:
    receipts = _Receipts(late=[{"receipt": "/r/s.intoto.json", "error": "renamed away"}])
    monkeypatch.setattr(attach_module, "prepare_receipts", lambda *a, **k: receipts)
    with pytest.raises(InputError) as caught:
        attach_results(AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={}))
    assert str(caught.value) == "receipt /r/s.intoto.json: not written (renamed away)"
    assert len(_rows(node, "attach")) == 1 and not receipts.discarded


def test_a_ledger_that_cannot_take_the_row_discards_the_receipts(node, monkeypatch) -> None:
    receipts = _Receipts()
    monkeypatch.setattr(attach_module, "prepare_receipts", lambda *a, **k: receipts)
    options = AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={})

    def append(self, *a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(Ledger, "append", append)
    with pytest.raises(OSError, match="disk full"):
        attach_results(options)
    assert receipts.discarded and not (node / "scores.json.execsys.json").exists()


def test_a_result_attached_before_can_be_attached_again(node) -> None:
    """Only a run's record is provenance: an earlier attach of the same bytes refuses nothing."""
    options = AttachOptions.from_sources(_sources(node), results=["scores.json"], environ={})
    first = attach_results(options)
    second = attach_results(options)
    assert second.results == first.results and len(_rows(node, "attach")) == 2


def test_the_attach_record_body(node) -> None:
    report = attach_results(AttachOptions.from_sources(_sources(node), results=["scores.json"], shard="0/2",
                                                       environ={}))
    body = report.to_json()
    assert body == {"schema": "execsys.attach/1", "id": report.id, "attached_after": True,
                    "statement": ATTACHED_SENTENCE, "verdict": "attached",
                    "summary": "attached after the run: 1 result(s); verify now same-system",
                    "identity": {"id": "s1", "lock": str(node / "execsys.lock.json")},
                    "verify_now": report.verify_now, "recorded_at": report.recorded_at, "results": report.results,
                    "sidecars": [str(node / "scores.json.execsys.json")], "receipts": report.receipts,
                    "shard": {"index": 0, "count": 2, "source": "flag", "job": None}}
    assert report.receipts == [str(node / "scores.json.execsys.intoto.json")]
