"""``execsys run``'s decisions as tables: the record's verdict, its precedence and exit code, the gate's
refuse/override/pass, the watch's drift events, and which files the result finder takes.

Every row is built from plain dataclasses, dicts and temp files and judged by the real functions,
in milliseconds (tests/test_run_cli.py runs the same steps end to end against a real server). Each
row is a case a plausible slip gets wrong: a swapped precedence, an exit code replaced by 1, a
verify-after ``new-identity`` not counted, an optional field compared when one side lacks it, a
file rewritten in place taken for an older run's.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from execsys.harnesses import lm_eval, other, registry
from execsys.identity.serving import flatten as _flatten
from execsys.ledger import Ledger
from execsys.run.gate import GateOutcome, run_gate
from execsys.run.record import VERDICTS, RunRecord, sidecar_path
from execsys.run.results import ResultFinder
from execsys.run.watch import Watcher, changes

DRIFT = [{"at": "t", "component": "runtime.process.pid", "before": 1, "after": 2}]
NEW_IDENTITY = {"verdict": "new-identity", "changed": ["runtime"], "observed_id": "x", "sentence": "s"}
SAME_SYSTEM = {"verdict": "same-system", "changed": [], "observed_id": "y", "sentence": "s"}
FAILING_GATE = {"failing": ["port-collisions: 2 processes listen"], "override": None}
OVERRIDDEN_GATE = {"failing": ["port-collisions: 2 processes listen"], "override": "known stray"}


def record(**fields) -> RunRecord:
    return RunRecord(id="run_1", command=["python", "eval.py"], cwd="/tmp", **fields)


# -- the verdict and its precedence: interrupted > failed > drifted > overridden > clean; refused apart --

VERDICT_ROWS = [
    # (fields, verdict, exit status)
    pytest.param({}, "clean", 0, id="nothing-happened-clean-0"),
    pytest.param({"exit_code": 0}, "clean", 0, id="exit-0-clean"),
    pytest.param({"exit_code": None}, "clean", 0, id="never-exited-is-not-failed"),
    pytest.param({"exit_code": 0, "verify_after": SAME_SYSTEM}, "clean", 0, id="same-system-after-is-clean"),
    pytest.param({"exit_code": 0, "verify_after": {"verdict": "unverifiable"}}, "clean", 0,
                 id="only-new-identity-after-drifts"),
    pytest.param({"exit_code": 1}, "failed", 1, id="exit-1-failed-1"),
    pytest.param({"exit_code": 3}, "failed", 3, id="failed-keeps-the-harness-code-3"),
    pytest.param({"exit_code": 255}, "failed", 255, id="failed-keeps-the-harness-code-255"),
    pytest.param({"exit_code": 2, "drift": DRIFT}, "failed", 2, id="failed-outranks-drifted"),
    pytest.param({"exit_code": 4, "verify_after": NEW_IDENTITY}, "failed", 4, id="failed-outranks-new-identity"),
    pytest.param({"exit_code": 5, "doctor": OVERRIDDEN_GATE}, "failed", 5, id="failed-outranks-overridden"),
    pytest.param({"exit_code": 0, "drift": DRIFT}, "drifted", 1, id="drift-mid-run-drifted-1"),
    pytest.param({"exit_code": 0, "verify_after": NEW_IDENTITY}, "drifted", 1, id="verify-after-new-identity-drifted-1"),
    pytest.param({"exit_code": 0, "hook": {"reports": [{"recorded": True}], "mismatches": 1}}, "drifted", 1,
                 id="hook-mismatch-drifted"),
    pytest.param({"exit_code": 0, "hook": {"reports": [{"recorded": True}], "mismatches": 0}}, "clean", 0,
                 id="hook-no-mismatch-clean"),
    pytest.param({"exit_code": 0, "drift": DRIFT, "doctor": OVERRIDDEN_GATE}, "drifted", 1,
                 id="drifted-outranks-overridden"),
    pytest.param({"exit_code": 0, "doctor": OVERRIDDEN_GATE}, "overridden", 0, id="overridden-exits-0"),
    pytest.param({"exit_code": 0, "doctor": FAILING_GATE}, "clean", 0, id="gate-warn-is-not-overridden"),
    pytest.param({"exit_code": 0, "doctor": {"failing": [], "override": "needless"}}, "clean", 0,
                 id="override-without-failing-is-clean"),
    pytest.param({"exit_code": -2}, "interrupted", 130, id="killed-by-sigint-130"),
    pytest.param({"exit_code": -9}, "interrupted", 137, id="killed-by-sigkill-137"),
    pytest.param({"exit_code": -15}, "interrupted", 143, id="killed-by-sigterm-143"),
    pytest.param({"exit_code": 0, "signals": ["SIGINT"]}, "interrupted", 130, id="signal-then-exit-0-is-130"),
    pytest.param({"exit_code": None, "signals": ["SIGTERM"]}, "interrupted", 143, id="signal-no-exit-is-128-plus-it"),
    pytest.param({"exit_code": 7, "signals": ["SIGINT"]}, "interrupted", 7, id="signal-keeps-harness-code"),
    pytest.param({"exit_code": 2, "signals": ["SIGINT"], "drift": DRIFT}, "interrupted", 2,
                 id="interrupted-outranks-failed-and-drifted"),
    pytest.param({"refused": "the gate failed", "exit_code": None}, "refused", 1, id="refused-1"),
    pytest.param({"refused": "lock", "exit_code": 3, "signals": ["SIGINT"], "drift": DRIFT}, "refused", 1,
                 id="refused-outranks-everything"),
]


@pytest.mark.parametrize(("fields", "verdict", "status"), VERDICT_ROWS)
def test_verdict_and_exit_status(fields, verdict, status) -> None:
    rec = record(**fields)
    assert rec.verdict == verdict
    assert rec.exit_status == status
    body = rec.to_json()
    assert body["verdict"] == verdict
    assert body["verdict_detail"].startswith(f"{verdict}: ")
    assert verdict in VERDICTS


@pytest.mark.parametrize(("fields", "booleans"), [
    pytest.param({}, (True, False, False, False, False), id="clean"),
    pytest.param({"exit_code": 1}, (True, False, False, True, False), id="failed"),
    pytest.param({"exit_code": -15}, (True, False, False, True, True), id="negative-code-is-failed-and-interrupted"),
    pytest.param({"signals": ["SIGINT"]}, (True, False, False, False, True), id="signal"),
    pytest.param({"verify_after": NEW_IDENTITY}, (True, False, True, False, False), id="new-identity"),
    pytest.param({"doctor": FAILING_GATE}, (False, False, False, False, False), id="gate-warn"),
    pytest.param({"doctor": OVERRIDDEN_GATE}, (False, True, False, False, False), id="overridden"),
])
def test_the_booleans_behind_the_verdict(fields, booleans) -> None:
    body = record(**fields).to_json()
    assert (body["gate_passed"], body["overridden"], body["drifted"], body["failed"], body["interrupted"]) == booleans


@pytest.mark.parametrize(("fields", "detail"), [
    pytest.param({"exit_code": 3}, "failed: the harness exited 3", id="failed-names-the-code"),
    pytest.param({"refused": "no lock"}, "refused: no lock", id="refused-names-why"),
    pytest.param({"exit_code": 0, "doctor": OVERRIDDEN_GATE},
                 "overridden: ran past a failing gate (known stray)", id="overridden-names-the-reason"),
    pytest.param({"exit_code": 0}, "clean: gate passed, no drift, same system after, exit 0", id="clean"),
    pytest.param({"exit_code": 0, "drift": DRIFT},
                 "drifted: the runtime changed during the run (runtime.process.pid at t: 1 -> 2): compare this result "
                 "causally with nothing", id="drifted-names-the-first-change"),
    pytest.param({"exit_code": 0, "hook": {"reports": [{"recorded": True}], "mismatches": 2}},
                 "drifted: 2 model call(s) answered by another model or fingerprint than the pinned one: "
                 "compare this result causally with nothing", id="drifted-by-hook-counts-the-calls"),
    pytest.param({"exit_code": 0, "hook": {"reports": []}},
                 "clean: gate passed, no drift, same system after, exit 0; the Inspect hook did not run "
                 "(is execsys[inspect] installed in the harness's environment?)", id="hook-did-not-run"),
    pytest.param({"exit_code": 0, "hook": {"reports": [{"recorded": False}, {"error": "disk full"}]}},
                 "clean: gate passed, no drift, same system after, exit 0; the Inspect hook could not record: "
                 "no record written; disk full", id="hook-could-not-record"),
])
def test_verdict_detail(fields, detail) -> None:
    assert record(**fields).verdict_detail() == detail


@pytest.mark.parametrize(("hook", "problem"), [
    pytest.param(None, None, id="no-hook-no-problem"),
    pytest.param({"reports": [{"recorded": True}]}, None, id="recorded-no-problem"),
    pytest.param({"reports": [{"recorded": True, "error": "x"}]}, "the Inspect hook could not record: x",
                 id="error-even-if-recorded"),
])
def test_hook_problem(hook, problem) -> None:
    assert record(hook=hook).hook_problem == problem


@pytest.mark.parametrize(("argv", "results", "summary"), [
    pytest.param(["a" * 60], [], "clean: " + "a" * 60 + " (0 results)", id="60-chars-kept-0-results"),
    pytest.param(["a" * 61], [{}], "clean: " + "a" * 57 + "... (1 result)", id="61-chars-cut-1-result"),
    pytest.param(["x"], [{}, {}], "clean: x (2 results)", id="2-results-plural"),
])
def test_summary_length_and_plural(argv, results, summary) -> None:
    assert RunRecord(id="r", command=argv, cwd="/", results=results).summary() == summary


def test_summary_of_a_refused_run_says_why() -> None:
    assert record(refused="no lock").summary() == "refused: python eval.py (0 results); no lock"


@pytest.mark.parametrize(("name", "sidecar_dir", "expected"), [
    pytest.param("scores.json", None, "/r/scores.json.execsys.json", id="beside"),
    # in a shared directory the name carries the BLAKE3 of the result's absolute path: one basename, two files
    pytest.param("scores.json", Path("/s"), "/s/scores.json.18d40fa45523.execsys.json", id="in-sidecar-dir"),
    pytest.param("2026-01-01T10-00-00_task.json", None, "/r/execsys-2026-01-01T10-00-00_task.json.execsys.json",
                 id="inspect-log-name-prefixed"),
])
def test_sidecar_path(name, sidecar_dir, expected) -> None:
    assert str(sidecar_path(Path("/r") / name, sidecar_dir)) == expected


# -- the gate ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "failing", "override", "refused", "overridden", "passed"), [
    pytest.param("fail", [], None, False, False, True, id="fail-clean-passes"),
    pytest.param("fail", ["h: x"], None, True, False, False, id="fail-failing-refuses"),
    pytest.param("fail", ["h: x"], "why", False, True, False, id="fail-failing-overridden-runs"),
    pytest.param("fail", [], "why", False, False, True, id="override-with-nothing-failing-is-not-overridden"),
    pytest.param("warn", ["h: x"], None, False, False, False, id="warn-never-refuses"),
    pytest.param("warn", ["h: x"], "why", False, False, False, id="warn-is-not-an-override"),
    pytest.param("off", [], None, False, False, True, id="off-passes"),
])
def test_gate_outcome(mode, failing, override, refused, overridden, passed) -> None:
    gate = GateOutcome(mode, "hazards" if failing else "clean", "doctor_1", list(failing), override)
    assert (gate.refused, gate.overridden, gate.passed) == (refused, overridden, passed)
    assert gate.to_json() == {"report": "doctor_1", "verdict": gate.verdict, "gate_mode": mode,
                              "failing": list(failing), "override": override}


def test_gate_off_runs_no_doctor_and_keeps_the_override(tmp_path) -> None:
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        gate = run_gate(None, "off", "because", ledger)
        assert list(ledger.iter(kind="doctor")) == []
    assert (gate.mode, gate.verdict, gate.report_id, gate.failing, gate.override) == ("off", "off", None, [], "because")
    assert not gate.refused and gate.passed


# -- the watch -----------------------------------------------------------------------------------------

FP = "runtime.endpoint.system_fingerprint"
ANSWERED = "runtime.endpoint.answered_model"


@pytest.mark.parametrize(("before", "after", "events"), [
    pytest.param({"runtime.process.pid": 1}, {"runtime.process.pid": 1}, [], id="same-no-event"),
    pytest.param({"runtime.process.pid": 1}, {"runtime.process.pid": 2}, [("runtime.process.pid", 1, 2)],
                 id="changed-one-event"),
    pytest.param({}, {"runtime.process.argv": ["a"]}, [("runtime.process.argv", None, ["a"])], id="appears-counts"),
    pytest.param({"runtime.process.argv": ["a"]}, {}, [("runtime.process.argv", ["a"], None)], id="disappears-counts"),
    pytest.param({"runtime.engine.version": None}, {"runtime.engine.version": "1"},
                 [("runtime.engine.version", None, "1")], id="none-to-value-counts-for-a-required-field"),
    pytest.param({FP: None}, {FP: "fp_1"}, [], id="fingerprint-appearing-is-not-drift"),
    pytest.param({FP: "fp_1"}, {}, [], id="fingerprint-missing-under-load-is-not-drift"),
    pytest.param({FP: "fp_1"}, {FP: "fp_2"}, [(FP, "fp_1", "fp_2")], id="fingerprint-changed-is-drift"),
    pytest.param({ANSWERED: "m"}, {ANSWERED: None}, [], id="answered-model-unknown-is-not-drift"),
    pytest.param({ANSWERED: "m"}, {ANSWERED: "other"}, [(ANSWERED, "m", "other")], id="answered-model-changed"),
    pytest.param({"b": 1, "a": 1}, {"b": 2, "a": 2}, [("a", 1, 2), ("b", 1, 2)], id="events-sorted-by-field"),
])
def test_drift_events(before, after, events) -> None:
    got = changes(before, after, "2026-01-01T00:00:00Z")
    assert [(e["component"], e["before"], e["after"]) for e in got] == events
    assert all(e["at"] == "2026-01-01T00:00:00Z" for e in got)


@pytest.mark.parametrize(("declared", "interval", "active"), [
    pytest.param({"endpoint": "http://127.0.0.1:1/v1"}, 5.0, True, id="endpoint-watched"),
    pytest.param({"process": "vllm"}, 0.5, True, id="process-watched"),
    pytest.param({"endpoint": "http://127.0.0.1:1/v1"}, 0, False, id="watch-0-is-off"),
    pytest.param({"endpoint": "http://127.0.0.1:1/v1"}, -1, False, id="negative-is-off"),
    pytest.param({}, 5.0, False, id="nothing-declared-is-off"),
    pytest.param({"endpoint": ""}, 5.0, False, id="empty-endpoint-is-off"),
])
def test_watch_is_active(declared, interval, active) -> None:
    assert Watcher(declared, interval, observe=lambda d: {}).active is active


def test_an_inactive_watch_observes_nothing() -> None:
    seen = []
    watcher = Watcher({}, 5.0, observe=lambda d: seen.append(d) or {})
    watcher.start()
    watcher.stop()
    assert (seen, watcher.observations, watcher.drift) == ([], 0, [])


def test_the_watch_compares_each_tick_with_the_last_and_records_failed_looks() -> None:
    ticks = iter([{"runtime.process.pid": 1}, {"runtime.process.pid": 1}, RuntimeError("refused"),
                  {"runtime.process.pid": 2}, {"runtime.process.pid": 2}, {"runtime.process.pid": 3}])
    done = threading.Event()
    heard: list[dict] = []

    def observe(_declared):
        value = next(ticks, None)
        if value is None:
            done.set()
            return {"runtime.process.pid": 3}
        if isinstance(value, Exception):
            raise value
        return value

    looks: list[list[dict]] = []
    watcher = Watcher({"process": "p"}, 0.001, on_drift=heard.append, observe=observe, on_look=looks.append)
    watcher.start()
    assert done.wait(10)
    watcher.stop()
    assert [(e["before"], e["after"]) for e in watcher.drift] == [(1, 2), (2, 3)]
    assert heard == watcher.drift
    assert looks == [[watcher.drift[0]], [watcher.drift[1]]]  # one call per look that found drift
    assert watcher.errors == ["RuntimeError: refused"]
    assert watcher.observations >= 6


@pytest.mark.parametrize(("observed", "listener", "flat"), [
    pytest.param({}, {}, {"runtime.engine.version": None}, id="nothing-observed-keeps-the-version-key"),
    pytest.param({"engine": {"version": "0.11"}, "endpoint": {"models": ["m"], "error": "e", "other": 1}}, {},
                 {"runtime.engine.version": "0.11", "runtime.endpoint.models": ["m"], "runtime.endpoint.error": "e"},
                 id="only-named-endpoint-fields"),
    pytest.param({"process": {"pid": 1, "argv": ["a"], "cwd": "/x"}}, {"pid": 2, "started_at": "t"},
                 {"runtime.engine.version": None, "runtime.process.pid": 2, "runtime.process.argv": ["a"],
                  "runtime.process.started_at": "t"}, id="the-listener-wins-over-the-declared-process"),
])
def test_flatten(observed, listener, flat) -> None:
    assert _flatten(observed, listener) == flat


# -- the result finder ---------------------------------------------------------------------------------

def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _bump_mtime(path: Path, seconds: float = 2.0) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + int(seconds * 1e9)))


def _found(finder: ResultFinder, root: Path) -> list[tuple[str, str]]:
    return [(str(p.relative_to(root)), h) for p, h in finder.found()]


def _rewrite_same_size(path: Path) -> None:
    with open(path, "r+") as fh:  # in place: same inode, same size
        fh.write("0.75")
    _bump_mtime(path)


def _rewrite_other_size_same_mtime(path: Path) -> None:
    st = path.stat()
    path.write_text("0.875")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replace_by_rename(path: Path) -> None:
    tmp = path.with_name("tmp.partial")
    tmp.write_text("0.99")
    os.replace(tmp, path)
    _bump_mtime(path)


def _touch_only(path: Path) -> None:
    _bump_mtime(path)


def _delete(path: Path) -> None:
    path.unlink()


def _unchanged(path: Path) -> None:
    pass


@pytest.mark.parametrize(("during", "found"), [
    pytest.param(_unchanged, [], id="an-older-run-s-file-unchanged-is-left-alone"),
    pytest.param(_rewrite_same_size, [("scores.json", "other")], id="rewritten-in-place-same-size-is-found"),
    pytest.param(_rewrite_other_size_same_mtime, [("scores.json", "other")], id="other-size-same-mtime-is-found"),
    pytest.param(_replace_by_rename, [("scores.json", "other")], id="replaced-by-rename-is-found"),
    pytest.param(_touch_only, [("scores.json", "other")], id="touched-is-found"),
    pytest.param(_delete, [], id="deleted-during-the-run-is-not-a-result"),
])
def test_a_result_that_was_there_before(tmp_path, during, found) -> None:
    scores = _write(tmp_path / "scores.json", "0.50")
    finder = ResultFinder(other.ADAPTER, [], ["scores.json"], tmp_path)
    finder.before()
    during(scores)
    assert _found(finder, tmp_path) == found


def test_a_result_created_during_the_run_is_found_and_sidecars_and_directories_are_not(tmp_path) -> None:
    finder = ResultFinder(other.ADAPTER, [], ["out/**/*", "absent.json"], tmp_path)
    finder.before()
    _write(tmp_path / "out" / "b.json", "{}")
    _write(tmp_path / "out" / "a" / "deep.txt", "x")
    _write(tmp_path / "out" / "b.json.execsys.json", "{}")
    assert _found(finder, tmp_path) == [("out/a/deep.txt", "other"), ("out/b.json", "other")]


def test_result_patterns_resolve_against_the_cwd_home_and_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cwd = tmp_path / "cwd"
    finder = ResultFinder(other.ADAPTER, [], ["rel.json", "~/home.json", str(tmp_path / "abs.json")], cwd)
    assert finder.patterns == [str(cwd / "rel.json"), str(tmp_path / "home" / "home.json"), str(tmp_path / "abs.json")]


def _lm_eval_results(path: Path) -> Path:
    return _write(path, '{"results": {"t": {}}, "configs": {"t": {}}}')


def test_a_file_in_the_harness_dir_is_the_harness_s_only_when_it_owns_it(tmp_path) -> None:
    out = tmp_path / "lm"
    finder = ResultFinder(lm_eval.ADAPTER, [out, tmp_path / "missing-dir"], ["mine.json"], tmp_path)
    finder.before()
    _lm_eval_results(out / "m" / "results_2026-01-01T10-00-00.json")
    _write(out / "m" / "notes.txt", "not lm-eval's")
    _lm_eval_results(tmp_path / "mine.json")  # given by --result: whichever harness claims it
    assert _found(finder, tmp_path) == [("lm/m/notes.txt", "other"),
                                         ("lm/m/results_2026-01-01T10-00-00.json", "lm-eval"),
                                         ("mine.json", "other")]
    assert registry.for_file(tmp_path / "mine.json").name == "other"  # no results_ name: not lm-eval's


# -- lm-eval: which samples file belongs to a results file -------------------------------------------

def _samples(directory: Path, task: str, stamp: str, value: int) -> None:
    _write(directory / f"samples_{task}_{stamp}.jsonl", f'{{"doc_id": 0, "acc": {value}}}\n')


@pytest.mark.parametrize(("stamps", "expected"), [
    pytest.param(["2026-01-01T09-00-00", "2026-01-02T09-00-00", "2026-01-03T09-00-00"], 3,
                 id="several-the-newest-wins"),
    pytest.param(["2026-01-03T09-00-00", "2026-01-01T09-00-00"], 3, id="newest-whatever-the-write-order"),
    pytest.param(["2026-01-01T09-00-00", "2026-01-05T10-00-00", "2026-01-09T09-00-00"], 5,
                 id="the-results-own-stamp-wins-over-newer"),
])
def test_lm_eval_reads_the_samples_file_of_its_results(tmp_path, stamps, expected) -> None:
    model = tmp_path / "model"
    for stamp in stamps:
        _samples(model, "arc", stamp, int(stamp[8:10]))  # the value says which file was read
    results = _write(model / "results_2026-01-05T10-00-00.json",
                     '{"results": {"arc": {}}, "configs": {"arc": {"metric_list": [{"metric": "acc"}]}}}')
    assert lm_eval.ADAPTER.read(results).outcomes == {"arc/0": expected}


def test_lm_eval_task_names_are_glob_escaped(tmp_path) -> None:
    model = tmp_path / "model"
    _samples(model, "mmlu[x]", "2026-01-01T09-00-00", 1)
    _samples(model, "mmlux", "2026-01-02T09-00-00", 0)  # what an unescaped [x] would match
    results = _write(model / "results_2026-01-05T10-00-00.json",
                     '{"results": {"mmlu[x]": {}}, "configs": {"mmlu[x]": {"metric_list": [{"metric": "acc"}]}}}')
    assert lm_eval.ADAPTER.read(results).outcomes == {"mmlu[x]/0": 1}
    assert lm_eval.glob_escape("a*b?[c]") == "a[*]b[?][[]c]"
