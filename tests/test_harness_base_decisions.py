"""The pieces every harness adapter shares (execsys/harnesses/base.py) and which adapter a command or a
file belongs to (execsys/harnesses/registry.py), as tables: the last flag value wins, the script a plain
command runs, the sidecar and receipt names beside an Inspect log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.harnesses import registry
from execsys.harnesses.base import (
    RECEIPT_SUFFIX,
    SIDECAR_SUFFIX,
    HarnessResult,
    SampleOutput,
    flag_value,
    program_words,
    receipt_name,
    script_name,
    sidecar_name,
)


@pytest.mark.parametrize(("argv", "names", "value"), [
    pytest.param(["x", "--tasks", "a"], ("--tasks",), "a", id="space"),
    pytest.param(["x", "--tasks=a,b"], ("--tasks",), "a,b", id="equals"),
    pytest.param(["x", "--tasks=a=b"], ("--tasks",), "a=b", id="equals-in-value"),
    pytest.param(["x", "--tasks", "a", "--tasks=b"], ("--tasks",), "b", id="last-wins"),
    pytest.param(["x", "-t", "a", "--tasks", "b"], ("--tasks", "-t"), "b", id="last-of-either-name"),
    pytest.param(["x", "--tasks", "b", "-t", "a"], ("--tasks", "-t"), "a", id="last-of-either-name-2"),
    pytest.param(["x", "--tasks"], ("--tasks",), None, id="flag-at-end-has-no-value"),
    pytest.param(["--tasks", "a"], ("--tasks",), "a", id="flag-first"),
    pytest.param(["x", "--tasksx", "a"], ("--tasks",), None, id="longer-flag-not-it"),
    pytest.param(["x", "--tasks="], ("--tasks",), "", id="empty-equals"),
    pytest.param([], ("--tasks",), None, id="empty-argv"),
    pytest.param(["x", "--other", "a"], ("--tasks",), None, id="absent"),
])
def test_flag_value(argv, names, value) -> None:
    assert flag_value(argv, *names) == value


@pytest.mark.parametrize(("argv", "words"), [
    pytest.param(["python", "-m", "lm_eval", "--model", "x"], ["python", "lm_eval"], id="module"),
    pytest.param(["/venv/bin/inspect", "eval", "t.py", "--model", "m"], ["inspect", "eval", "t.py"], id="basenames"),
    pytest.param(["python", "-m"], ["python"], id="dangling-m"),
    pytest.param(["python", "-m", "", "x"], ["python", "x"], id="empty-module"),
    pytest.param(["python", "-u", "eval.py"], ["python"], id="stops-at-option"),
    pytest.param([], [], id="empty"),
    pytest.param(["a/b/", "c"], ["", "c"], id="trailing-slash"),
])
def test_program_words(argv, words) -> None:
    assert program_words(argv) == words


@pytest.mark.parametrize(("argv", "name"), [
    pytest.param(["python", "eval.py", "out.json"], "eval.py", id="python-script"),
    pytest.param(["python3.11", "eval.py"], "eval.py", id="versioned-python"),
    pytest.param(["/usr/bin/bash", "run.sh"], "run.sh", id="bash-path"),
    pytest.param(["pypy3", "-m", "pkg"], "pkg", id="module"),
    pytest.param(["sh", "x.sh"], "x.sh", id="sh"),
    pytest.param(["zsh", "x.zsh"], "x.zsh", id="zsh"),
    pytest.param(["./run.sh", "a"], "run.sh", id="program-itself"),
    pytest.param(["python"], "python", id="interpreter-alone"),
    pytest.param(["pythonista", "x"], "pythonista", id="not-an-interpreter"),
    pytest.param(["mypython", "x"], "mypython", id="not-an-interpreter-prefix"),
    pytest.param(["python", "-c", "pass"], "python", id="python-c"),
    pytest.param([], "?", id="empty"),
    pytest.param(["-x"], "?", id="only-an-option"),
])
def test_script_name(argv, name) -> None:
    assert script_name(argv) == name


@pytest.mark.parametrize(("result", "sidecar", "receipt"), [
    pytest.param("scores.json", "scores.json.execsys.json", "scores.json.execsys.intoto.json", id="plain"),
    pytest.param("2026-01-01T10-00-00_task.json", "execsys-2026-01-01T10-00-00_task.json.execsys.json",
                 "execsys-2026-01-01T10-00-00_task.json.execsys.intoto.json", id="inspect-log-dashes"),
    pytest.param("2026-01-01T10:00:00_t.eval", "execsys-2026-01-01T10:00:00_t.eval.execsys.json",
                 "execsys-2026-01-01T10:00:00_t.eval.execsys.intoto.json", id="inspect-log-colons"),
    pytest.param("x2026-01-01T10-00-00.json", "x2026-01-01T10-00-00.json.execsys.json",
                 "x2026-01-01T10-00-00.json.execsys.intoto.json", id="time-not-at-start"),
    pytest.param("2026-01-01T10-00.json", "2026-01-01T10-00.json.execsys.json",
                 "2026-01-01T10-00.json.execsys.intoto.json", id="no-seconds-not-a-log"),
    pytest.param("2026-01-01 10-00-00.json", "2026-01-01 10-00-00.json.execsys.json",
                 "2026-01-01 10-00-00.json.execsys.intoto.json", id="no-T-not-a-log"),
])
def test_sidecar_and_receipt_names(result, sidecar, receipt) -> None:
    assert sidecar_name(result) == sidecar
    assert receipt_name(result) == receipt
    assert (SIDECAR_SUFFIX, RECEIPT_SUFFIX) == (".execsys.json", ".execsys.intoto.json")


def test_result_shapes_default_empty() -> None:
    result = HarnessResult(Path("/r"), "other", {})
    assert (result.embedded, result.notes, result.sources) == (None, [], [])
    assert HarnessResult(Path("/r"), "o", {}).notes is not result.notes
    assert SampleOutput("t/1", "p", "o").expected is None


# -- the registry ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "name"), [
    pytest.param(["lm_eval", "--model", "hf"], "lm-eval", id="lm-eval"),
    pytest.param(["python", "-m", "lm_eval", "--tasks", "x"], "lm-eval", id="lm-eval-module"),
    pytest.param(["inspect", "eval", "t.py"], "inspect", id="inspect"),
    pytest.param(["python", "eval.py"], "other", id="other"),
    pytest.param([], "other", id="empty-is-other"),
])
def test_for_command(argv, name) -> None:
    assert registry.for_command(argv).name == name


def test_adapters_in_order_other_last() -> None:
    assert [a.name for a in registry.ADAPTERS] == ["lm-eval", "inspect", "other"]


@pytest.mark.parametrize(("name", "found"), [("lm-eval", "lm-eval"), ("inspect", "inspect"), ("other", "other"),
                                             ("nope", "other"), ("", "other"),
                                             ("inspect-ai", "other"), ("LM-EVAL", "other")])
def test_by_name(name, found) -> None:
    assert registry.by_name(name).name == found


def test_for_file(tmp_path) -> None:
    results = tmp_path / "results_2026-01-01T10-00-00.json"
    results.write_text(json.dumps({"results": {}, "configs": {}}))
    assert registry.for_file(results).name == "lm-eval"
    samples = tmp_path / "samples_arc_2026-01-01T10-00-00.jsonl"
    samples.write_text("")
    assert registry.for_file(samples).name == "lm-eval"
    plain = tmp_path / "scores.json"
    plain.write_text("{}")
    assert registry.for_file(plain).name == "other"
    not_lm = tmp_path / "results_x.json"
    not_lm.write_text(json.dumps({"results": {}}))
    assert registry.for_file(not_lm).name == "other"


@pytest.mark.parametrize(("name", "sidecar"), [
    ("scores.json.execsys.json", True), ("scores.json.execsys.intoto.json", True), ("scores.json", False),
    ("scores.execsys.json.bak", False), ("execsys.json", False), (".execsys.json", True),
])
def test_is_sidecar(name, sidecar) -> None:
    assert registry.is_sidecar(Path("/r") / name) is sidecar
