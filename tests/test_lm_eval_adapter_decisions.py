"""The lm-eval adapter's decisions as tables, in process: which command lines are lm-eval, where it
writes, which files are its own, which samples file a results file is read from (the newest, or the
one with its own timestamp), which metric scores a case, what a grader is given again, and the
choice gaps ``explain`` reports.

Each row is built from temp files in lm-eval 0.4's own layouts and judged by the real functions in
milliseconds; tests/test_run_lm_eval.py and tests/test_grader_harness_files.py run real lm-eval end to
end. Every row is something a user would notice: a case scored from last week's samples, a results
file taken for someone else's, an error message that names no line, a gap off by a sign.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from execsys.errors import InputError
from execsys.harnesses import lm_eval
from execsys.harnesses.base import SampleOutput

ADAPTER = lm_eval.ADAPTER


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(path: Path, *rows: object) -> Path:
    return _write(path, "".join(json.dumps(row) + "\n" for row in rows))


def _results(directory: Path, body: dict, stamp: str = "2026-01-05T10-00-00") -> Path:
    return _write(directory / f"results_{stamp}.json", json.dumps(body))


def _acc_config(*tasks: str, **extra: object) -> dict:
    return {"results": {t: {} for t in tasks},
            "configs": {t: {"metric_list": [{"metric": "acc"}]} for t in tasks}, **extra}


# -- which command lines are lm-eval, and what execsys adds to them ---------------------------------

@pytest.mark.parametrize(("argv", "matches"), [
    pytest.param(["lm_eval", "--model", "hf"], True, id="lm_eval-program"),
    pytest.param(["/venv/bin/lm-eval", "--tasks", "arc"], True, id="lm-eval-console-script-by-basename"),
    pytest.param(["python", "-m", "lm_eval", "--tasks", "arc"], True, id="python-m-lm_eval"),
    pytest.param(["python", "eval.py", "lm_eval"], True, id="a-later-word-before-any-option"),
    pytest.param(["python", "-c", "import lm_eval"], False, id="an-option-ends-the-words"),
    pytest.param(["inspect", "eval", "task.py"], False, id="inspect-is-not-lm-eval"),
    pytest.param(["lm_evaluation"], False, id="only-the-exact-names"),
    pytest.param([], False, id="empty"),
])
def test_matches(argv, matches) -> None:
    assert ADAPTER.matches(argv) is matches


def test_prepare_appends_one_metadata_flag_and_keeps_the_user_s() -> None:
    argv = ["lm_eval", "--metadata", '{"mine": 1}', "--tasks", "arc"]
    prepared = ADAPTER.prepare(argv, "id_abc", "run_7")
    assert prepared == [*argv, "--metadata", '{"execsys": {"identity": "id_abc", "run": "run_7"}}']
    assert argv == ["lm_eval", "--metadata", '{"mine": 1}', "--tasks", "arc"]  # the caller's list untouched


def test_prepare_sorts_the_metadata_keys() -> None:
    metadata = json.loads(ADAPTER.prepare([], "i", "r")[-1])
    assert list(metadata["execsys"]) == ["identity", "run"]


@pytest.mark.parametrize(("argv", "expected"), [
    pytest.param(["lm_eval"], [], id="no-output-path-nothing-watched"),
    pytest.param(["lm_eval", "--output_path", ""], [], id="empty-output-path-nothing-watched"),
    pytest.param(["lm_eval", "--output_path", "out"], ["/cwd/out"], id="relative-dir-under-cwd"),
    pytest.param(["lm_eval", "-o", "/abs/out"], ["/abs/out"], id="short-flag-absolute"),
    pytest.param(["lm_eval", "--output_path=out/results.json"], ["/cwd/out"], id="a-json-file-names-its-directory"),
    pytest.param(["lm_eval", "-o", "out.d/sub"], ["/cwd/out.d/sub"], id="a-dotted-directory-is-a-directory"),
    pytest.param(["lm_eval", "-o", "a", "--output_path", "b"], ["/cwd/b"], id="the-last-flag-wins"),
    pytest.param(["lm_eval", "-o", "~/lm"], ["/home/u/lm"], id="tilde-expands"),
])
def test_output_dirs(argv, expected, monkeypatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    assert ADAPTER.output_dirs(argv, Path("/cwd"), {}) == [Path(p) for p in expected]


# -- which files are lm-eval's --------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "owns", "primary"), [
    pytest.param("results_2026-01-01T10-00-00.json", '{"results": {}, "configs": {}}', True, True, id="results"),
    pytest.param("results_x.json", '{"results": {}}', False, True, id="results-without-configs-is-not-owned"),
    pytest.param("results_x.json", '{"configs": {}}', False, True, id="configs-without-results-is-not-owned"),
    pytest.param("results_x.json", "[1]", False, True, id="not-an-object"),
    pytest.param("results_x.json", "{", False, True, id="not-json"),
    pytest.param("scores.json", '{"results": {}, "configs": {}}', False, False, id="other-name-same-content"),
    pytest.param("results_x.jsonl", '{"results": {}, "configs": {}}', False, False, id="jsonl-is-not-results"),
    pytest.param("samples_arc_2026-01-01T10-00-00.jsonl", "not read", True, False, id="samples-by-name-alone"),
    pytest.param("samples_arc_latest.jsonl", "{}", False, False, id="samples-need-a-date-stamp"),
    pytest.param("samples__2026-01-01T10-00-00.jsonl", "{}", False, False, id="samples-need-a-task"),
])
def test_owns_and_is_primary(tmp_path, name, text, owns, primary) -> None:
    path = _write(tmp_path / name, text)
    assert ADAPTER.owns(path) is owns
    assert ADAPTER.is_primary(path) is primary


# -- reading a results file back -----------------------------------------------------------------

def test_read_scores_each_document_by_the_first_declared_metric(tmp_path) -> None:
    results = _results(tmp_path, {"results": {"arc": {}}, "configs": {"arc": {
        "metric_list": [{"metric": "acc_norm"}, {"metric": "acc"}]}}})
    samples = _jsonl(tmp_path / "samples_arc_2026-01-05T10-00-00.jsonl",
                     {"doc_id": 0, "acc": 1, "acc_norm": 0}, {"doc_id": 1, "acc": 0, "acc_norm": 1})
    read = ADAPTER.read(results)
    assert (read.path, read.harness, read.outcomes) == (results, "lm-eval", {"arc/0": 0, "arc/1": 1})
    assert (read.embedded, read.notes, read.sources) == (None, [], [samples])


@pytest.mark.parametrize(("config", "data", "metric"), [
    pytest.param({"metric_list": [{"metric": "exact_match"}]}, {}, "exact_match", id="metric-list"),
    pytest.param({"metric_list": []}, {"higher_is_better": {"t": {"f1": True, "em": True}}}, "f1",
                 id="empty-list-falls-back-to-higher-is-better"),
    pytest.param({"metric_list": [{"metric": ""}]}, {"higher_is_better": {"t": {"f1": True}}}, "f1",
                 id="empty-metric-name-falls-back"),
    pytest.param({"metric_list": ["acc"]}, {"higher_is_better": {"t": {"f1": True}}}, "f1",
                 id="a-list-of-strings-falls-back"),
    pytest.param({"metric_list": {"metric": "acc"}}, {"higher_is_better": {"t": {"f1": True}}}, "f1",
                 id="a-list-that-is-an-object-falls-back"),
    pytest.param({}, {"higher_is_better": {"other": {"f1": True}}}, None, id="another-task-s-metric-is-not-this-one"),
    pytest.param({}, {"higher_is_better": ["f1"]}, None, id="higher-is-better-of-another-shape"),
    pytest.param({}, {}, None, id="nothing-declared"),
])
def test_first_metric(config, data, metric) -> None:
    assert lm_eval._first_metric(config, data, "t") == metric


def test_read_falls_back_to_the_reported_metric(tmp_path) -> None:
    results = _results(tmp_path, {"results": {"t": {}}, "configs": {"t": {}},
                                  "higher_is_better": {"t": {"f1": True}}})
    _jsonl(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl", {"doc_id": 3, "f1": 0.5})
    assert ADAPTER.read(results).outcomes == {"t/3": 0.5}


def test_read_finds_the_identity_execsys_embedded(tmp_path) -> None:
    body = _acc_config("a", "b")
    body["configs"]["a"]["metadata"] = {"mine": 1}
    body["configs"]["b"]["metadata"] = {"execsys": {"identity": 42, "run": "run_9"}}
    _jsonl(tmp_path / "samples_a_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "acc": 1})
    _jsonl(tmp_path / "samples_b_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "acc": 1})
    assert ADAPTER.read(_results(tmp_path, body)).embedded == {"identity": "42", "run": "run_9"}


@pytest.mark.parametrize(("metadatas", "embedded"), [
    pytest.param([{"execsys": {"identity": "first", "run": "r1"}}, {"execsys": {"identity": "second", "run": "r2"}}],
                 {"identity": "first", "run": "r1"}, id="the-first-task-s-identity"),
    pytest.param([{"execsys": {"identity": ""}}, {"execsys": {"identity": "later"}}],
                 {"identity": "later", "run": None}, id="an-empty-identity-is-skipped-and-run-may-be-absent"),
    pytest.param([{"execsys": "id"}, "metadata-not-an-object"], None, id="shapes-not-objects-are-absent"),
    pytest.param([{"execsys": {"run": "r"}}, {}], None, id="no-identity-no-embedding"),
])
def test_the_embedded_identity(tmp_path, metadatas, embedded) -> None:
    body = _acc_config("a", "b")
    for task, metadata in zip(("a", "b"), metadatas, strict=True):
        body["configs"][task]["metadata"] = metadata
    assert ADAPTER.read(_results(tmp_path, body)).embedded == embedded


def test_read_without_samples_notes_each_task_and_reads_the_others(tmp_path) -> None:
    body = _acc_config("a-lacks", "b-has", "c-lacks", "d-has")
    has_b = _jsonl(tmp_path / "samples_b-has_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "acc": 1})
    has_d = _jsonl(tmp_path / "samples_d-has_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "acc": 0})
    read = ADAPTER.read(_results(tmp_path, body))
    assert read.outcomes == {"b-has/0": 1, "d-has/0": 0}
    assert read.sources == [has_b, has_d]
    assert read.notes == [f"no samples_{task}_*.jsonl beside results_2026-01-05T10-00-00.json "
                          "(run lm-eval with --log_samples)" for task in ("a-lacks", "c-lacks")]


def test_the_note_shows_a_task_name_on_one_short_line(tmp_path) -> None:
    task = "a\nb  c" + "x" * 200
    body = {"results": {task: {}}, "configs": {task: {}}}
    note = ADAPTER.read(_results(tmp_path, body)).notes[0]
    assert note.startswith("no samples_a b c" + "x" * 115 + "_*.jsonl beside")
    assert lm_eval._shown(task) == ("a b c" + "x" * 200)[:120]


def test_tasks_come_from_the_results_when_configs_is_empty(tmp_path) -> None:
    results = _results(tmp_path, {"results": {"t": {}}, "configs": {}, "higher_is_better": {"t": {"acc": True}}})
    _jsonl(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "acc": 1})
    assert ADAPTER.read(results).outcomes == {"t/0": 1}


def test_a_configs_list_is_absent_and_the_results_name_the_tasks(tmp_path) -> None:
    results = _results(tmp_path, {"results": {"t": {}}, "configs": [1], "higher_is_better": {"t": {"acc": True}}})
    _jsonl(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "acc": 1})
    assert ADAPTER.read(results).outcomes == {"t/0": 1}


def test_a_task_with_samples_and_no_metric_is_refused(tmp_path) -> None:
    results = _results(tmp_path, {"results": {"t": {}}, "configs": {"t": {}}})
    _jsonl(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "acc": 1})
    with pytest.raises(InputError) as err:
        ADAPTER.read(results)
    assert str(err.value) == (f"{results}: task t names no metric (no configs.<task>.metric_list, "
                              "no higher_is_better.<task>): its samples cannot be scored")


@pytest.mark.parametrize(("lines", "message"), [
    pytest.param('{"doc_id": 0, "acc": 1}\n{"doc_id": 1\n', ":2: not JSON (", id="bad-json-names-its-line"),
    pytest.param("\n" + "[" * 100000 + "\n", ":2: not JSON (", id="too-deep-names-its-line"),
    pytest.param('{"doc_id": 0, "acc": 1}\n\n[1]\n', ":3: not an lm-eval sample (a JSON object per line)",
                 id="not-an-object-counts-blank-lines"),
    pytest.param('{"doc_id": 0, "f1": 1}\n', ":1: no value for metric 'acc'", id="metric-missing"),
])
def test_a_bad_samples_line_is_refused_naming_it(tmp_path, lines, message) -> None:
    results = _results(tmp_path, _acc_config("t"))
    samples = _write(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl", lines)
    with pytest.raises(InputError) as err:
        ADAPTER.read(results)
    assert str(err.value).startswith(f"{samples}{message}")


def test_blank_samples_lines_are_skipped(tmp_path) -> None:
    results = _results(tmp_path, _acc_config("t"))
    _write(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl", '\n  \n{"doc_id": 5, "acc": 0}\n\n')
    assert ADAPTER.read(results).outcomes == {"t/5": 0}


@pytest.mark.parametrize(("name", "text", "message"), [
    pytest.param("samples_t_2026-01-05T10-00-00.jsonl", "{}",
                 "a samples file; compare the results_*.json beside it", id="a-samples-file"),
    pytest.param("results_x.json", '{"results": {}}', "not an lm-eval results file (no 'results' and 'configs')",
                 id="no-configs"),
    pytest.param("results_x.json", '{"configs": {}}', "not an lm-eval results file (no 'results' and 'configs')",
                 id="no-results"),
    pytest.param("results_x.json", "[]", "not an lm-eval results file (no 'results' and 'configs')", id="a-list"),
])
def test_read_refuses_what_is_not_a_results_file(tmp_path, name, text, message) -> None:
    path = _write(tmp_path / name, text)
    with pytest.raises(InputError) as err:
        ADAPTER.read(path)
    assert str(err.value) == f"{path}: {message}"


# -- which samples file a results file is read from -----------------------------------------------

def _samples(directory: Path, task: str, stamp: str, value: int) -> Path:
    return _jsonl(directory / f"samples_{task}_{stamp}.jsonl", {"doc_id": 0, "acc": value})


@pytest.mark.parametrize(("stamps", "mtimes", "expected"), [
    pytest.param(["2026-01-01T09-00-00", "2026-01-02T09-00-00"], [2, 1], 2,
                 id="newest-by-name-not-by-modification-time"),
    pytest.param(["2026-01-09T09-00-00"], [1], 9, id="one-other-stamp-is-taken"),
    pytest.param(["2026-01-01T09-00-00", "2026-01-05T10-00-00"], [2, 1], 5, id="the-own-stamp-even-if-older"),
    pytest.param(["2026-01-05T10-00-00.5", "2026-01-04T09-00-00"], [1, 2], 5,
                 id="a-longer-stamp-sorts-after-the-shorter"),
])
def test_the_samples_file_chosen(tmp_path, stamps, mtimes, expected) -> None:
    for stamp, mtime in zip(stamps, mtimes, strict=True):
        path = _samples(tmp_path, "arc", stamp, int(stamp[8:10]))
        os.utime(path, (mtime * 1000, mtime * 1000))
    results = _results(tmp_path, _acc_config("arc"))
    assert ADAPTER.read(results).outcomes == {"arc/0": expected}


@pytest.mark.parametrize(("others", "expected"), [
    pytest.param(["arc_easy"], None, id="a-task-whose-name-starts-with-this-one-is-not-read"),
    pytest.param(["arc_easy", "arc"], 4, id="this-task-s-own-file-beside-a-longer-named-one"),
    pytest.param(["arc", "arc_challenge"], 3, id="the-other-newer-by-name-is-still-not-taken"),
])
def test_the_samples_of_another_task_are_never_read(tmp_path, others, expected) -> None:
    # a run of ``arc`` must not score its cases from ``arc_easy``'s samples (the glob matches both)
    for day, task in enumerate(others, 3):
        _samples(tmp_path, task, f"2026-01-0{day}T09-00-00", day)
    results = _results(tmp_path, _acc_config("arc"))
    chosen = lm_eval._samples_file(results, "arc", "2026-01-05T10-00-00")
    assert (None if chosen is None else json.loads(chosen.read_text())["acc"]) == expected
    if expected is None:
        assert ADAPTER.read(results).outcomes == {}


@pytest.mark.parametrize("task", ["", "a/b", "a\0b", ".", ".."])
def test_a_task_that_cannot_be_a_file_name_has_no_samples(tmp_path, task) -> None:
    _write(tmp_path / "samples_._2026-01-05T10-00-00.jsonl", '{"doc_id": 0, "acc": 1}')
    _write(tmp_path / "samples_.._2026-01-05T10-00-00.jsonl", '{"doc_id": 0, "acc": 1}')
    _write(tmp_path / "samples__2026-01-05T10-00-00.jsonl", '{"doc_id": 0, "acc": 1}')
    results = _results(tmp_path, _acc_config("x"))
    assert lm_eval._samples_file(results, task, "2026-01-05T10-00-00") is None


def test_the_stamp_of_a_results_file() -> None:
    assert lm_eval._stamp(Path("/d/results_2026-01-05T10-00-00.123.json")) == "2026-01-05T10-00-00.123"


@pytest.mark.parametrize(("text", "escaped"), [
    pytest.param("plain_task", "plain_task", id="nothing-to-escape"),
    pytest.param("a*b?c[d]", "a[*]b[?]c[[]d]", id="each-magic-character"),
    pytest.param("**", "[*][*]", id="every-occurrence"),
])
def test_glob_escape(text, escaped) -> None:
    assert lm_eval.glob_escape(text) == escaped


# -- what a grader is given again ----------------------------------------------------------------

def _gen(doc_id: object, context: str = "Q?", **fields: object) -> dict:
    return {"doc_id": doc_id, "arguments": {"gen_args_0": {"arg_0": context, "arg_1": {"until": ["\n"]}}},
            "target": "A", **fields}


def _graded(tmp_path: Path, *rows: object, name: str = "samples_gsm8k_2026-01-05T10-00-00.jsonl"):
    return lm_eval.graded_samples(_jsonl(tmp_path / name, *rows))


def test_graded_samples_gives_prompt_scored_output_and_target(tmp_path) -> None:
    got = _graded(tmp_path, _gen(0, "Q0", filtered_resps=["f0"], resps=[["r0"]]),
                  _gen(1, "Q1", filtered_resps=[], resps=[["r1"]]))
    assert got == [SampleOutput("gsm8k/0", "Q0", "f0", "A"), SampleOutput("gsm8k/1", "Q1", "r1", "A")]


def test_graded_samples_names_each_filter_only_when_there_are_several(tmp_path) -> None:
    rows = [_gen(0, filtered_resps=["x"], filter="strict"), _gen(0, filtered_resps=["y"], filter="flexible")]
    assert [s.id for s in _graded(tmp_path, *rows)] == ["gsm8k/0:strict", "gsm8k/0:flexible"]
    one = [_gen(0, filtered_resps=["x"], filter="strict"), _gen(1, filtered_resps=["y"], filter="strict")]
    assert [s.id for s in _graded(tmp_path, *one, name="samples_t_2026-01-05T10-00-00.jsonl")] == ["t/0", "t/1"]


def test_a_filter_of_another_shape_is_named_by_its_json(tmp_path) -> None:
    rows = [_gen(0, filtered_resps=["x"], filter={"b": 1, "a": 2}), _gen(0, filtered_resps=["y"])]
    assert [s.id for s in _graded(tmp_path, *rows)] == ['gsm8k/0:{"a": 2, "b": 1}', "gsm8k/0:None"]


def test_blank_lines_are_skipped_by_the_grader(tmp_path) -> None:
    path = _write(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl",
                  "\n" + json.dumps(_gen(0, filtered_resps=["x"])) + "\n   \n")
    assert [s.id for s in lm_eval.graded_samples(path)] == ["t/0"]


@pytest.mark.parametrize(("text", "message"), [
    pytest.param('{"doc_id": 0\n', ":1: not JSON (", id="not-json"),
    pytest.param("\n[1]\n", ":2: not an lm-eval sample (no 'doc_id')", id="not-an-object"),
    pytest.param('{"resps": []}\n', ":1: not an lm-eval sample (no 'doc_id')", id="no-doc-id"),
    pytest.param(json.dumps({"doc_id": 7, "arguments": {"a": {"arg_0": "ctx", "arg_1": " B"}},
                             "filtered_resps": [[-1.0, False]]}) + "\n",
                 ":1: doc 7: its response is not generated text (a loglikelihood or multiple-choice task): "
                 "nothing for a grader to judge", id="loglikelihood"),
    pytest.param(json.dumps({"doc_id": 8, "arguments": {"a": {"arg_0": "ctx", "arg_1": {}}},
                             "filtered_resps": [3]}) + "\n",
                 ":1: doc 8: its response is not generated text", id="generated-but-no-text"),
])
def test_the_grader_refuses_a_bad_line_naming_it(tmp_path, text, message) -> None:
    path = _write(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl", text)
    with pytest.raises(InputError) as err:
        lm_eval.graded_samples(path)
    assert str(err.value).startswith(f"{path}{message}")


@pytest.mark.parametrize("name", ["results_x.json", "samples_t_latest.jsonl", "t.jsonl"])
def test_the_grader_refuses_a_file_not_named_as_samples(tmp_path, name) -> None:
    path = _write(tmp_path / name, "{}")
    with pytest.raises(InputError) as err:
        lm_eval.graded_samples(path)
    assert str(err.value) == f"{path}: not an lm-eval samples file (samples_<task>_<time>.jsonl)"


def test_samples_that_are_missing_or_not_utf8_are_one_line(tmp_path) -> None:
    missing = tmp_path / "samples_t_2026-01-05T10-00-00.jsonl"
    with pytest.raises(InputError) as err:
        lm_eval.graded_samples(missing)
    assert str(err.value) == f"{missing}: not found"
    _write(missing, "")
    missing.write_bytes(b'{"doc_id": 0}\n\xff')
    with pytest.raises(InputError) as err:
        lm_eval.graded_samples(missing)
    assert str(err.value) == f"lm-eval samples file {missing}: not UTF-8 text (byte 14)"


@pytest.mark.parametrize(("arguments", "first"), [
    pytest.param({"gen_args_0": {"arg_0": "ctx", "arg_1": {"until": []}}, "gen_args_1": {"arg_0": "no"}},
                 ("ctx", True), id="lm-eval-0.4-dict-first-request"),
    pytest.param({"gen_args_0": {"arg_0": "ctx", "arg_1": " continuation"}}, ("ctx", False),
                 id="dict-loglikelihood"),
    pytest.param({"gen_args_0": {"arg_0": "ctx"}}, ("ctx", False), id="dict-context-only"),
    pytest.param({"gen_args_0": ["ctx", {}]}, ("", False), id="dict-request-not-a-dict"),
    pytest.param({"gen_args_0": {}}, ("", False), id="dict-request-empty"),
    pytest.param({}, ("", False), id="empty-dict"),
    pytest.param([["ctx", {"until": []}], ["second", " x"]], ("ctx", True), id="list-first-request"),
    pytest.param([["ctx", " x"]], ("ctx", False), id="list-loglikelihood"),
    pytest.param([[1, {}]], ("", True), id="context-not-a-string"),
    pytest.param([[]], ("", False), id="empty-request"),
    pytest.param([], ("", False), id="empty-list"),
    pytest.param(["ctx"], ("", False), id="request-not-a-list"),
    pytest.param(None, ("", False), id="none"),
    pytest.param("ctx", ("", False), id="a-string"),
])
def test_first_request(arguments, first) -> None:
    assert lm_eval._first_request(arguments) == first


@pytest.mark.parametrize(("sample", "scored"), [
    pytest.param({"filtered_resps": ["f"], "resps": [["r"]]}, "f", id="filtered-first"),
    pytest.param({"filtered_resps": [["f1", "f2"]], "resps": [["r"]]}, "f1", id="several-generations-the-first"),
    pytest.param({"filtered_resps": [], "resps": [["r1", "r2"]]}, "r1", id="raw-when-none-filtered"),
    pytest.param({"resps": [[["r1"], "r2"]]}, "r1", id="raw-several-generations"),
    pytest.param({"filtered_resps": [3], "resps": [["r"]]}, "r", id="filtered-not-text-raw-instead"),
    pytest.param({"filtered_resps": "f"}, None, id="filtered-a-bare-string-is-not-a-list"),
    pytest.param({"resps": ["r"]}, None, id="raw-needs-two-levels"),
    pytest.param({"resps": [[]]}, None, id="raw-empty"),
    pytest.param({"filtered_resps": [[]]}, None, id="filtered-empty-list"),
    pytest.param({"filtered_resps": [[1, "x"]]}, None, id="filtered-list-of-non-text"),
    pytest.param({}, None, id="nothing"),
])
def test_scored_response(sample, scored) -> None:
    assert lm_eval._scored_response(sample) == scored


# -- how near a multiple-choice answer came to going the other way ------------------------------

@pytest.mark.parametrize(("responses", "gap"), [
    pytest.param([[-1.0, True], [-3.5, False]], 2.5, id="best-minus-runner-up"),
    pytest.param([[-3.5, False], [-1.0, True], [-2.0, False]], 1.0, id="unsorted-three"),
    pytest.param([["-1.0", True], ["-1.25", False]], 0.25, id="string-values"),
    pytest.param([[-2.0, True], [-2.0, False]], 0.0, id="a-tie-is-zero"),
    pytest.param([(-1.0, True), (-2.0, False)], 1.0, id="tuples"),
    pytest.param([[-1.0, True]], None, id="one-choice-has-no-gap"),
    pytest.param([], None, id="none-at-all"),
    pytest.param("x", None, id="not-a-list"),
    pytest.param([[-1.0, True], -2.0], None, id="a-bare-number"),
    pytest.param([[-1.0, True], []], None, id="an-empty-response"),
    pytest.param([[-1.0, True], [True, False]], None, id="a-boolean-is-not-a-loglikelihood"),
    pytest.param([[-1.0, True], ["x", False]], None, id="not-a-number"),
    pytest.param([[-1.0, True], [None, False]], None, id="none-value"),
])
def test_top_two_gap(responses, gap) -> None:
    assert lm_eval._top_two_gap(responses) == gap


def test_choice_gaps_for_the_cases_asked_only(tmp_path) -> None:
    results = _results(tmp_path, _acc_config("arc", "gsm"))
    _write(tmp_path / "samples_arc_2026-01-05T10-00-00.jsonl", "\n".join([
        json.dumps({"doc_id": 0, "filtered_resps": [[-1.0, True], [-1.5, False]]}),
        "not json",
        "[1]",
        json.dumps({"doc_id": 1, "filtered_resps": [[-4.0, False], [-1.0, True]]}),
        json.dumps({"doc_id": 2, "filtered_resps": [[-1.0, True], [-9.0, False]]}),
        json.dumps({"doc_id": 3, "filtered_resps": ["generated text"]}),
    ]) + "\n")
    _jsonl(tmp_path / "samples_gsm_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "filtered_resps": [[-1.0, True],
                                                                                                [-2.0, False]]})
    gaps = lm_eval.choice_gaps(results, ["arc/0", "arc/1", "arc/3", "missing/0", "gsm/0", "nodoc", "/0"])
    assert gaps == {"arc/0": 0.5, "arc/1": 3.0, "gsm/0": 1.0}


def test_choice_gaps_read_the_same_samples_file_as_the_outcomes(tmp_path) -> None:
    results = _results(tmp_path, _acc_config("arc"))
    _jsonl(tmp_path / "samples_arc_2026-01-01T09-00-00.jsonl", {"doc_id": 0, "filtered_resps": [[-1, 1], [-2, 0]]})
    _jsonl(tmp_path / "samples_arc_2026-01-03T09-00-00.jsonl", {"doc_id": 0, "filtered_resps": [[-1, 1], [-4, 0]]})
    assert lm_eval.choice_gaps(results, ["arc/0"]) == {"arc/0": 3.0}  # no file of its own stamp: the newest
    _jsonl(tmp_path / "samples_arc_2026-01-05T10-00-00.jsonl", {"doc_id": 0, "acc": 1, "filtered_resps": [[-1, 1], [-6, 0]]})
    _jsonl(tmp_path / "samples_arc_2026-01-09T09-00-00.jsonl", {"doc_id": 0, "filtered_resps": [[-1, 1], [-8, 0]]})
    assert lm_eval.choice_gaps(results, ["arc/0"]) == {"arc/0": 5.0}  # its own stamp, though a newer one exists
    assert ADAPTER.read(results).sources == [tmp_path / "samples_arc_2026-01-05T10-00-00.jsonl"]


def test_a_task_scored_by_loglikelihood_is_not_graded_even_with_a_text_response(tmp_path) -> None:
    path = _jsonl(tmp_path / "samples_t_2026-01-05T10-00-00.jsonl",
                  {"doc_id": 4, "arguments": {"a": {"arg_0": "ctx", "arg_1": " B"}}, "filtered_resps": ["B"]})
    with pytest.raises(InputError, match="doc 4: its response is not generated text"):
        lm_eval.graded_samples(path)


def test_a_directory_named_like_a_samples_file_is_one_line(tmp_path) -> None:
    path = tmp_path / "samples_t_2026-01-05T10-00-00.jsonl"
    path.mkdir()
    with pytest.raises(InputError) as err:
        lm_eval.graded_samples(path)
    assert str(err.value) == f"lm-eval samples file {path}: is a directory, not a regular file"
