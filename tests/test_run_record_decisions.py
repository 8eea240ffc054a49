"""``execsys run``'s record as tables, in process and in milliseconds: the documented
``execsys.run/3`` body field by field, the sentences a reader gets (why a run drifted, which files it
could not vouch for), and the files beside each result -- the sidecar (its ``result`` and
``previous``), the receipt (its subjects, predicate and signature) and the ledger's ``receipt`` rows
-- written with real temp files, a real ledger and a real key. tests/test_run_decisions.py has the
verdict's precedence and exit codes; tests/test_run_cli.py and tests/test_receipt.py run the same
steps end to end.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import blake3
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from execsys import receipt
from execsys.ledger import Ledger
from execsys.run.record import (
    RunRecord,
    earlier_records,
    keep_receipts,
    prepare_receipts,
    prepare_sidecars,
    receipt_path,
    sidecar_path,
)

DRIFT_1 = {"at": "t1", "component": "runtime.process.pid", "before": 1, "after": 2}
DRIFT_2 = {"at": "t2", "component": "runtime.engine.version", "before": "0.1", "after": "0.2"}


def record(**fields) -> RunRecord:
    return RunRecord(id="run-1", command=["python", "eval.py"], cwd="/tmp", **fields)


# -- the record's body, field by field --------------------------------------------------------------------

def test_the_run_record_body_is_the_documented_one() -> None:
    rec = RunRecord(
        id="run-7", command=["python", "eval.py", "--n", "3"], cwd="/work", identity_id="ab" * 32,
        lock_path="/work/execsys.lock.json", identity_how="verified", identity_from="EXECSYS_LOCK",
        doctor={"report": "doctor-1", "verdict": "hazards", "gate_mode": "fail", "failing": ["h: x"], "override": "known"},
        started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:01:00Z", exit_code=0, signals=[],
        drift=[], watch={"interval_s": 5.0, "observations": 3}, verify_after={"verdict": "same-system"},
        results=[{"path": "/work/scores.json", "blake3": "00", "harness": "other"}], harness="lm-eval",
        hook={"reports": []}, result_errors=[{"path": "/work/a.json", "error": "gone"}],
        sidecar_errors=[{"sidecar": "/work/b.execsys.json", "error": "is a FIFO"}],
        receipt_errors=[{"receipt": "/work/c.execsys.intoto.json", "error": "read-only file system"}],
        shard={"index": 0, "count": 2, "source": "cases.jsonl", "job": "j"},
    )
    hook_problem = "the Inspect hook did not run (is execsys[inspect] installed in the harness's environment?)"
    assert rec.to_json() == {
        "schema": "execsys.run/3",
        "id": "run-7",
        "verdict": "overridden",
        "summary": "overridden: python eval.py --n 3 (1 result)",
        "identity": {"id": "ab" * 32, "lock": "/work/execsys.lock.json", "how": "verified", "from": "EXECSYS_LOCK"},
        "doctor": {"report": "doctor-1", "verdict": "hazards", "gate_mode": "fail", "failing": ["h: x"], "override": "known"},
        "command": {"argv": ["python", "eval.py", "--n", "3"], "harness": "lm-eval"},
        "cwd": "/work",
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:01:00Z",
        "exit_code": 0,
        "signals": [],
        "drift": [],
        "watch": {"interval_s": 5.0, "observations": 3},
        "verify_after": {"verdict": "same-system"},
        "results": [{"path": "/work/scores.json", "blake3": "00", "harness": "other"}],
        "gate_passed": False,
        "overridden": True,
        "drifted": False,
        "failed": False,
        "interrupted": False,
        "refused": None,
        "result_errors": [{"path": "/work/a.json", "error": "gone"}],
        "sidecar_errors": [{"sidecar": "/work/b.execsys.json", "error": "is a FIFO"}],
        "receipt_errors": [{"receipt": "/work/c.execsys.intoto.json", "error": "read-only file system"}],
        "shard": {"index": 0, "count": 2, "source": "cases.jsonl", "job": "j"},
        "hook": {"reports": [], "problem": hook_problem},
        "verdict_detail": "overridden: ran past a failing gate (known); " + hook_problem
                          + "; result /work/a.json not digested: gone; sidecar /work/b.execsys.json not written: "
                            "is a FIFO; receipt /work/c.execsys.intoto.json not written: read-only file system",
    }
    assert rec.exit_status == 1  # files it could not vouch for


def test_a_refused_run_says_why_in_its_body_and_has_no_hook_field() -> None:
    body = record(refused="the gate failed").to_json()
    assert (body["refused"], body["verdict"], "hook" in body) == ("the gate failed", "refused", False)


# -- what the record could not vouch for ------------------------------------------------------------------

@pytest.mark.parametrize(("errors", "problems"), [
    pytest.param({}, None, id="nothing-is-no-sentence"),
    pytest.param({"result_errors": [{"path": "/r/a.json", "error": "/r/a.json: still growing"}]},
                 "result /r/a.json not digested: still growing", id="result-path-colon-prefix-dropped"),
    pytest.param({"result_errors": [{"path": "/r/a.json", "error": "/r/a.json gone"}]},
                 "result /r/a.json not digested: gone", id="result-path-space-prefix-dropped"),
    pytest.param({"result_errors": [{"path": "/r/a.json", "error": "disk on fire /r/a.json: x"}]},
                 "result /r/a.json not digested: disk on fire /r/a.json: x", id="path-inside-is-kept"),
    pytest.param({"sidecar_errors": [{"sidecar": "/r/a.execsys.json", "error": "/r/a.execsys.json: is a FIFO"}]},
                 "sidecar /r/a.execsys.json not written: is a FIFO", id="sidecar"),
    pytest.param({"sidecar_errors": [{"sidecar": "/r/s", "error": "/r/s is a directory"}]},
                 "sidecar /r/s not written: is a directory", id="sidecar-space-prefix"),
    pytest.param({"receipt_errors": [{"receipt": "/r/a.intoto.json", "error": "/r/a.intoto.json: read-only"}]},
                 "receipt /r/a.intoto.json not written: read-only", id="receipt"),
    pytest.param({"receipt_errors": [{"receipt": "/r/i", "error": "/r/i changed since it was digested"}]},
                 "receipt /r/i not written: changed since it was digested", id="receipt-space-prefix"),
    pytest.param({"result_errors": [{"path": "a", "error": "x"}, {"path": "b", "error": "y"}],
                  "sidecar_errors": [{"sidecar": "c", "error": "z"}], "receipt_errors": [{"receipt": "d", "error": "w"}]},
                 "result a not digested: x; result b not digested: y; sidecar c not written: z; receipt d not written: w",
                 id="all-of-them-in-order"),
])
def test_file_problems(errors, problems) -> None:
    rec = record(exit_code=0, **errors)
    assert rec.file_problems() == problems
    assert rec.verdict_detail() == "clean: gate passed, no drift, same system after, exit 0" + (
        f"; {problems}" if problems else "")
    assert rec.exit_status == (1 if problems else 0)


# -- why a run drifted ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "cause"), [
    pytest.param({"drift": [DRIFT_1]}, "the runtime changed during the run (runtime.process.pid at t1: 1 -> 2)",
                 id="one-event-no-count"),
    pytest.param({"drift": [DRIFT_1, DRIFT_2]},
                 "the runtime changed during the run (runtime.process.pid at t1: 1 -> 2; 2 drift events)",
                 id="two-events-counted-first-named"),
    pytest.param({"drift": [DRIFT_1, DRIFT_2, DRIFT_1]},
                 "the runtime changed during the run (runtime.process.pid at t1: 1 -> 2; 3 drift events)",
                 id="three-events"),
    pytest.param({"drift": [DRIFT_1], "hook": {"reports": [{"recorded": True}], "mismatches": 4}},
                 "the runtime changed during the run (runtime.process.pid at t1: 1 -> 2); 4 model call(s) answered "
                 "by another model or fingerprint than the pinned one", id="event-then-call-count"),
    pytest.param({"drift": [{"at": "t", "component": "runtime.process.argv", "before": ["vllm", "serve", "m"],
                             "after": ["vllm", "serve", "m2"]}]},
                 "the runtime changed during the run (runtime.process.argv at t: m -> m2)",
                 id="a-list-says-what-moved-in-it"),
    pytest.param({"drift": [{"at": "t1", "component": "runtime.endpoint.error", "before": None, "after": "refused"},
                            {"at": "t1", "component": "runtime.process.argv", "before": ["s", "--n", "2"], "after": None},
                            {"at": "t2", "component": "runtime.endpoint.error", "before": "refused", "after": None},
                            {"at": "t2", "component": "runtime.process.argv", "before": None, "after": ["s", "--n", "1"]}]},
                 "the runtime changed during the run (runtime.process.argv at t2: --n 2 -> 1; 4 drift events)",
                 id="a-restart-names-what-it-changed-not-the-outage"),
    pytest.param({"drift": [{"at": "t", "component": "runtime.process.numerics_env", "before": {"A": "1"},
                             "after": {"A": "1", "B": "2"}}]},
                 "the runtime changed during the run (runtime.process.numerics_env at t: +B: 2)",
                 id="a-dict-says-the-key-it-gained"),
    pytest.param({"drift": [{"at": "t", "component": "c", "before": "a" * 100, "after": "b" * 101}]},
                 "the runtime changed during the run (c at t: " + "a" * 100 + " -> " + "b" * 97 + "...)",
                 id="100-chars-kept-101-cut-to-97"),
    pytest.param({"drift": [{"at": "t", "component": "c", "before": ["x" * 60, "y" * 60], "after": 3}]},
                 "the runtime changed during the run (c at t: " + ("x" * 60 + " " + "y" * 60)[:97] + "... -> 3)",
                 id="a-long-list-is-cut-too"),
    pytest.param({"verify_after": {"verdict": "new-identity", "sentence": "the engine is 0.12 now"}},
                 "the system after the run is not the pinned one (the engine is 0.12 now)", id="new-identity-sentence"),
    pytest.param({"verify_after": {"verdict": "new-identity"}},
                 "the system after the run is not the pinned one (new identity)", id="new-identity-no-sentence"),
    pytest.param({"verify_after": {"verdict": "unverified", "sentence": "the working directory is gone"}},
                 "the working directory is gone", id="unverified-sentence"),
    pytest.param({"verify_after": {"verdict": "unverified"}},
                 "the system could not be re-observed after the run", id="unverified-no-sentence"),
])
def test_drift_cause(fields, cause) -> None:
    rec = record(exit_code=0, **fields)
    assert rec.verdict == "drifted"
    assert rec.drift_cause() == cause
    assert rec.verdict_detail() == f"drifted: {cause}: compare this result causally with nothing"


def test_drift_cause_of_a_run_that_did_not_drift_is_the_general_sentence() -> None:
    assert record(verify_after={"verdict": "same-system", "sentence": "s"}).drift_cause() == (
        "the runtime changed during the run")


def test_an_interrupted_run_says_so() -> None:
    assert record(signals=["SIGINT"]).verdict_detail() == "interrupted: stopped by a signal; partial results digested"


# -- sidecars: where, what, and the runs they replaced ---------------------------------------------------------

def _result(path: Path, text: str = '{"score": 0.5}\n') -> dict[str, str]:
    path.write_text(text)
    return {"path": str(path), "blake3": blake3.blake3(path.read_bytes()).hexdigest(), "harness": "other"}


def _body(run_id: str = "run-new") -> dict:
    return RunRecord(id=run_id, command=["python", "eval.py", "--api-key", "sk-abcdefghijklmnop1234"],
                     cwd="/tmp", exit_code=0).to_json()


def _sidecar(target: Path, body: dict) -> None:
    target.write_text(json.dumps(body))


def test_a_sidecar_is_the_body_plus_its_result_and_is_scrubbed(tmp_path) -> None:
    a, b = _result(tmp_path / "a.json"), _result(tmp_path / "b.json", "{}")
    prepared = prepare_sidecars(_body(), [a, b], None)
    assert prepared.errors == [] and prepared.what == "sidecar"
    assert prepared.paths == [str(tmp_path / "a.json.execsys.json"), str(tmp_path / "b.json.execsys.json")]
    assert not (tmp_path / "a.json.execsys.json").exists()  # nothing in place before commit
    assert prepared.commit() == []
    assert prepared.committed == prepared.paths
    for result in (a, b):
        side = json.loads(Path(result["path"] + ".execsys.json").read_text())
        assert (side["schema"], side["id"], side["result"], side["previous"]) == ("execsys.run/3", "run-new", result, [])
        assert side["verdict"] == "clean" and side["command"]["argv"][:3] == ["python", "eval.py", "--api-key"]
        assert "sk-abcdefghijklmnop1234" not in json.dumps(side)


def test_sidecars_in_a_sidecar_dir_are_named_by_the_result_s_path(tmp_path) -> None:
    one, two = tmp_path / "t1", tmp_path / "t2"
    one.mkdir()
    two.mkdir()
    shared = tmp_path / "sidecars"
    results = [_result(one / "results.json"), _result(two / "results.json")]
    prepared = prepare_sidecars(_body(), results, shared)
    assert prepared.commit() == []
    assert prepared.paths == [str(sidecar_path(Path(r["path"]), shared)) for r in results]
    assert len(set(prepared.paths)) == 2 and all(Path(p).parent == shared for p in prepared.paths)
    assert [json.loads(Path(p).read_text())["result"] for p in prepared.paths] == results
    assert not (one / "results.json.execsys.json").exists()


@pytest.mark.parametrize(("earlier", "previous"), [
    pytest.param({"schema": "execsys.run/2", "id": "run-a", "previous": ["run-0"]}, ["run-a", "run-0"],
                 id="the-replaced-run-then-its-previous"),
    pytest.param({"schema": "execsys.run/1", "id": "run-a"}, ["run-a"], id="a-run-1-sidecar-has-no-previous"),
    pytest.param({"schema": "execsys.attach/1", "id": "attach-a", "previous": ["run-0"]}, ["attach-a", "run-0"],
                 id="an-attach-counts"),
    pytest.param({"schema": "execsys.run/2", "id": "run-a", "previous": "run-0"}, ["run-a"],
                 id="previous-not-a-list-is-ignored"),
    pytest.param({"schema": "execsys.run/2", "id": "run-a", "previous": ["run-0", "run-a", "run-0"]}, ["run-a", "run-0"],
                 id="each-id-once-newest-first"),
    pytest.param({"schema": "execsys.run/2", "id": "run-new", "previous": ["run-0"]}, ["run-0"],
                 id="this-run-is-not-its-own-previous"),
    pytest.param({"schema": "execsys.run/2", "id": "doctor-1", "previous": [7, None, "probe-x", "attach-b"]},
                 ["attach-b"], id="only-run-and-attach-ids"),
    pytest.param({"schema": "other/1", "id": "run-a", "previous": ["run-0"]}, [], id="not-a-run-sidecar"),
    pytest.param({"id": "run-a"}, [], id="no-schema"),
])
def test_a_sidecar_links_the_runs_whose_sidecar_it_replaced(tmp_path, earlier, previous) -> None:
    result = _result(tmp_path / "scores.json")
    target = tmp_path / "scores.json.execsys.json"
    _sidecar(target, earlier)
    assert earlier_records(target, "run-new") == previous
    prepared = prepare_sidecars(_body("run-new"), [result], None)
    assert prepared.commit() == []
    assert json.loads(target.read_text())["previous"] == previous


def test_a_body_without_an_id_still_links_the_earlier_runs(tmp_path) -> None:
    result = _result(tmp_path / "scores.json")
    _sidecar(tmp_path / "scores.json.execsys.json", {"schema": "execsys.run/2", "id": "run-a"})
    prepared = prepare_sidecars({"schema": "execsys.run/2", "id": None}, [result], None)
    assert prepared.commit() == []
    assert json.loads((tmp_path / "scores.json.execsys.json").read_text())["previous"] == ["run-a"]


def test_a_symlink_at_the_sidecar_s_name_is_neither_read_nor_written_through(tmp_path) -> None:
    result = _result(tmp_path / "scores.json")
    victim = tmp_path / "victim.json"
    _sidecar(victim, {"schema": "execsys.run/2", "id": "run-planted"})
    target = tmp_path / "scores.json.execsys.json"
    target.symlink_to(victim)
    assert earlier_records(target, "run-new") == []
    prepared = prepare_sidecars(_body(), [result], None)
    assert prepared.commit() == []
    assert not target.is_symlink() and json.loads(target.read_text())["previous"] == []
    assert json.loads(victim.read_text()) == {"schema": "execsys.run/2", "id": "run-planted"}  # untouched


def test_a_corrupt_sidecar_links_nothing_and_is_replaced(tmp_path) -> None:
    result = _result(tmp_path / "scores.json")
    target = tmp_path / "scores.json.execsys.json"
    target.write_text('{"schema": "execsys.run/2", "id": "run-a", ')  # cut short
    assert earlier_records(target, "run-new") == []
    prepared = prepare_sidecars(_body(), [result], None)
    assert prepared.errors == [] and prepared.commit() == []
    assert json.loads(target.read_text())["previous"] == []


def test_no_sidecar_and_a_directory_there_link_nothing(tmp_path) -> None:
    assert earlier_records(tmp_path / "absent.execsys.json", "run-new") == []
    (tmp_path / "dir.execsys.json").mkdir()
    assert earlier_records(tmp_path / "dir.execsys.json", "run-new") == []


def test_a_sidecar_that_cannot_be_written_is_an_error_naming_it_and_the_rest_are_written(tmp_path) -> None:
    (tmp_path / "afile").write_text("x")
    fifo_result, ok = _result(tmp_path / "fifo.json"), _result(tmp_path / "ok.json")
    os.mkfifo(tmp_path / "fifo.json.execsys.json")
    under_a_file = {"path": str(tmp_path / "afile" / "scores.json"), "blake3": "00"}
    prepared = prepare_sidecars(_body(), [fifo_result, under_a_file, ok], None)
    fifo = str(tmp_path / "fifo.json.execsys.json")
    assert prepared.errors == [
        {"sidecar": fifo, "error": f"{fifo}: is a FIFO (named pipe), not a regular file: refusing to replace it"},
        # an OSError is its strerror, lower case
        {"sidecar": str(tmp_path / "afile" / "scores.json.execsys.json"), "error": "file exists"},
    ]
    assert prepared.paths == [str(tmp_path / "ok.json.execsys.json")]
    assert prepared.commit() == []
    assert json.loads((tmp_path / "ok.json.execsys.json").read_text())["result"] == ok
    rec = record(exit_code=0, sidecar_errors=prepared.errors)
    assert rec.file_problems() == (f"sidecar {fifo} not written: is a FIFO (named pipe), not a regular file: refusing to replace it; "
                                   f"sidecar {tmp_path / 'afile' / 'scores.json.execsys.json'} not written: file exists")


def test_a_sidecar_replaced_by_a_directory_before_commit_is_a_late_error(tmp_path) -> None:
    first, second = _result(tmp_path / "first.json"), _result(tmp_path / "second.json")
    prepared = prepare_sidecars(_body(), [first, second], None)
    blocked = tmp_path / "first.json.execsys.json"
    blocked.mkdir()  # something put there between the ledger row and the rename
    assert prepared.commit() == [
        {"sidecar": str(blocked), "error": f"{blocked}: is a directory, not a regular file: refusing to replace it"}]
    assert prepared.committed == [str(tmp_path / "second.json.execsys.json")]
    assert json.loads((tmp_path / "second.json.execsys.json").read_text())["result"] == second


# -- receipts ----------------------------------------------------------------------------------------------

def _statement(path: str | Path) -> dict:
    return json.loads(base64.b64decode(json.loads(Path(path).read_text())["payload"]))


def _signer(tmp_path: Path):
    key = ed25519.Ed25519PrivateKey.generate()
    pem = tmp_path / "key.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return receipt.load_signer(pem)


@pytest.mark.parametrize("attached_after", [False, True])
def test_each_receipt_names_every_result_and_carries_the_record(tmp_path, attached_after) -> None:
    a, b = _result(tmp_path / "a.json"), _result(tmp_path / "b.json", "{}")
    body = _body()
    kwargs = {"attached_after": True} if attached_after else {}
    prepared = prepare_receipts(body, [a, b], None, **kwargs)
    assert prepared.errors == [] and prepared.what == "receipt"
    assert prepared.paths == [str(receipt_path(Path(r["path"]), None)) for r in (a, b)]
    assert prepared.paths == [str(tmp_path / "a.json.execsys.intoto.json"), str(tmp_path / "b.json.execsys.intoto.json")]
    assert len(prepared.envelopes) == 2
    assert prepared.commit() == []
    for path, envelope in zip(prepared.paths, prepared.envelopes, strict=True):
        assert json.loads(Path(path).read_text()) == envelope
        assert envelope["signatures"] == []
        statement = _statement(path)
        assert {s["name"]: s["digest"]["blake3"] for s in statement["subject"]} == {
            "a.json": a["blake3"], "b.json": b["blake3"]}
        predicate = statement["predicate"]
        assert (predicate["id"], predicate["verdict"], predicate["attached_after"]) == ("run-new", "clean", attached_after)
        assert "sk-abcdefghijklmnop1234" not in json.dumps(statement)


def test_receipts_in_a_sidecar_dir_sit_beside_the_sidecars(tmp_path) -> None:
    result = _result(tmp_path / "scores.json")
    shared = tmp_path / "sidecars"
    prepared = prepare_receipts(_body(), [result], shared)
    assert prepared.commit() == []
    side = sidecar_path(tmp_path / "scores.json", shared)
    expected = side.with_name(side.name.removesuffix(".execsys.json") + ".execsys.intoto.json")
    assert receipt_path(tmp_path / "scores.json", shared) == expected
    assert prepared.paths == [str(expected)] and expected.is_file()
    assert [s["name"] for s in _statement(expected)["subject"]] == [os.path.relpath(tmp_path / "scores.json", shared)]


def test_a_result_changed_since_it_was_digested_gets_no_receipt(tmp_path) -> None:
    a, b = _result(tmp_path / "a.json"), _result(tmp_path / "b.json")
    Path(a["path"]).write_text('{"score": 0.9}\n')  # rewritten after the record digested it
    prepared = prepare_receipts(_body(), [a, b], None)
    assert prepared.paths == [] and prepared.envelopes == []
    assert [e["receipt"] for e in prepared.errors] == [str(tmp_path / "a.json.execsys.intoto.json"),
                                                       str(tmp_path / "b.json.execsys.intoto.json")]
    assert all(e["error"].startswith(f"{a['path']}: changed since it was digested") for e in prepared.errors)


def test_a_receipt_that_cannot_be_written_is_an_error_naming_it(tmp_path) -> None:
    a, b = _result(tmp_path / "a.json"), _result(tmp_path / "b.json")
    blocked = tmp_path / "a.json.execsys.intoto.json"
    blocked.mkdir()
    prepared = prepare_receipts(_body(), [a, b], None)
    assert prepared.errors == [
        {"receipt": str(blocked), "error": f"{blocked}: is a directory, not a regular file: refusing to replace it"}]
    assert prepared.paths == [str(tmp_path / "b.json.execsys.intoto.json")] and len(prepared.envelopes) == 1


def test_a_symlink_at_the_receipt_s_name_is_replaced_not_written_through(tmp_path) -> None:
    result = _result(tmp_path / "scores.json")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "scores.json.execsys.intoto.json").symlink_to(victim)
    prepared = prepare_receipts(_body(), [result], None)
    assert prepared.commit() == []
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "scores.json.execsys.intoto.json").is_symlink()


def test_each_receipt_written_is_kept_in_the_ledger_once_under_its_run(tmp_path) -> None:
    signer = _signer(tmp_path)
    first, second = _result(tmp_path / "first.json"), _result(tmp_path / "second.json")
    prepared = prepare_receipts(_body(), [first, second], None, signer)
    blocked = tmp_path / "first.json.execsys.intoto.json"
    blocked.mkdir()  # the first cannot be renamed into place: only the second is kept
    assert [e["receipt"] for e in prepared.commit()] == [str(blocked)]
    kept = str(tmp_path / "second.json.execsys.intoto.json")
    keyid = signer.public_key.keyid
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        keep_receipts(ledger, "run-new", "id-1", prepared)
        keep_receipts(ledger, "run-new", "id-1", prepared)  # again: the same rows, none added
        rows = list(ledger.iter(kind="receipt"))
    assert len(rows) == 1
    row = rows[0]
    assert (row.identity, row.parent, row.key) == ("id-1", "run-new", f"receipt:{kept}")
    assert row.body == {"run": "run-new", "path": kept, "summary": f"receipt {kept}: signed by {keyid}",
                        "envelope": prepared.envelopes[1]}
    assert [s["keyid"] for s in row.body["envelope"]["signatures"]] == [keyid]


def test_unsigned_receipts_say_so_in_the_ledger(tmp_path) -> None:
    results = [_result(tmp_path / "a.json"), _result(tmp_path / "b.json")]
    prepared = prepare_receipts(_body(), results, None)
    assert prepared.commit() == []
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        keep_receipts(ledger, "attach-1", None, prepared)
        rows = list(ledger.iter(kind="receipt"))
    assert [(r.parent, r.body["path"], r.body["summary"]) for r in rows] == [
        ("attach-1", p, f"receipt {p}: unsigned (no signatures)") for p in prepared.paths]
