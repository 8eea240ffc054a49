"""A change in words (execsys.delta): only what moved, on both sides -- the one differ behind the probes'
system check, ``execsys run``'s drift lines, ``verify`` and ``diff`` -- and the drift of a run folded
into each change once (execsys.run.drift)."""

from __future__ import annotations

import pytest
from execsys.probes.system import describe, sentence

from execsys.delta import brief, dict_change, list_change, text_change, value_change
from execsys.run.drift import LookNarrator, fold, summary_lines

ARGV = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/m/tiny.gguf", "--n_threads", "2"]


@pytest.mark.parametrize(("old", "new", "words"), [
    pytest.param(ARGV, [*ARGV[:-1], "1"], "--n_threads 2 → 1", id="a-flag-value-replaced-is-named-by-its-flag"),
    pytest.param(ARGV, [*ARGV, "--n_batch", "7"], "+--n_batch 7", id="inserted"),
    pytest.param(ARGV, ARGV[:3], "---model /m/tiny.gguf --n_threads 2", id="removed"),
    pytest.param(ARGV, [*ARGV[:-1], "1", "--n_batch", "64"], "--n_threads 2 → 1 +--n_batch 64",
                 id="replaced-then-inserted"),
    pytest.param(["a", "--x", "1"], ["a", "--y", "1"], "--x → --y", id="a-flag-replaced-is-not-named-by-itself"),
    pytest.param(["vllm", "serve", "m"], ["vllm", "serve", "m2"], "m → m2", id="after-a-word-no-flag"),
    pytest.param(["a", "b", "c"], ["a", "x"], "b → x -c", id="the-longer-run-rest-removed"),
    pytest.param([1, 2], [1, 2], "reordered", id="equal-lists-say-reordered"),
])
def test_a_list_change_is_what_moved_in_it(old, new, words) -> None:
    assert list_change(old, new) == words
    assert list_change(old, new, arrow="->") == words.replace("→", "->")


def test_a_dict_change_names_the_keys_that_moved_and_never_null() -> None:
    assert dict_change({"A": "1", "C": 3}, {"A": "2", "B": "x"}) == "A: 1 → 2, +B: x, -C: 3"
    assert dict_change({"A": None}, {"A": None, "B": None}) == "+B: None"  # gained, though its value is null
    assert dict_change({"n": {"a": 1}}, {"n": {"a": 2}}) == "n: a: 1 → 2"  # nested: the inner key


def test_a_long_string_shows_its_differing_middle_with_context() -> None:
    old, new = "p" * 200 + "OLD" + "s" * 200, "p" * 200 + "NEW" + "s" * 200
    assert text_change(old, new) == f"…{'p' * 12}OLD{'s' * 12}… → …{'p' * 12}NEW{'s' * 12}…"
    assert text_change("short", "other") == "short → other"
    # a change as long as the limit is cut too
    assert text_change("a" * 300, "b" * 300) == f"{'a' * 119}… → {'b' * 119}…"


def test_value_change_dispatches_on_both_types() -> None:
    assert value_change(ARGV, [*ARGV[:-1], "1"]) == "--n_threads 2 → 1"
    assert value_change({"a": 1}, {"a": 2}) == "a: 1 → 2"
    assert value_change(1, None) == "1 → None"
    assert value_change(["x"], "x") == "x → x"  # a list against a string: both in full
    assert value_change([["nested"]], [["other"]]) == "['nested'] → ['other']"  # lists of lists: values, not argvs
    assert brief("x" * 200) == "x" * 117 + "..." and brief(["a", "b"]) == "a b"


def test_the_probe_system_check_words_a_difference_with_the_same_differ() -> None:
    replaced = {"component": "runtime.process.argv", "pinned": ARGV, "observed": [*ARGV[:-1], "1"]}
    assert describe(replaced) == "runtime argv --n_threads 2 -> 1"
    assert describe({"component": "runtime.process.argv", "pinned": ARGV, "observed": [*ARGV, "--n_batch", "7"]}) == (
        "runtime argv +--n_batch 7")
    assert describe({"component": "runtime.process.numerics_env", "pinned": {"A": "1"},
                     "observed": {"A": "1", "B": "2"}}) == "runtime numerics env +B: 2"
    assert describe({"component": "runtime.endpoint.models", "pinned": ["a"], "observed": ["b"]}) == (
        "runtime models a -> b")
    assert sentence([replaced, replaced]) == (
        "the engine answering this probe is not the pinned system: runtime argv --n_threads 2 -> 1")


# -- a run's drift: one restart is many events -------------------------------------------------------

def _restart(before: list[str], after: list[str]) -> tuple[list[dict], list[dict]]:
    down = [{"at": "T1", "component": "runtime.endpoint.error", "before": None, "after": "refused"},
            {"at": "T1", "component": "runtime.endpoint.models", "before": ["tiny"], "after": None},
            {"at": "T1", "component": "runtime.process.argv", "before": before, "after": None},
            {"at": "T1", "component": "runtime.process.pid", "before": 10, "after": None}]
    up = [{"at": "T2", "component": "runtime.endpoint.error", "before": "refused", "after": None},
          {"at": "T2", "component": "runtime.endpoint.models", "before": None, "after": ["tiny"]},
          {"at": "T2", "component": "runtime.process.argv", "before": None, "after": after},
          {"at": "T2", "component": "runtime.process.pid", "before": None, "after": 11}]
    return down, up


def test_each_look_is_one_line_worded_against_what_was_seen_before_it() -> None:
    down, up = _restart(ARGV, [*ARGV[:-1], "1"])
    narrator = LookNarrator()
    assert narrator.line(down) == ("runtime.endpoint.error: refused; no longer observed: endpoint.models, "
                                   "process.argv, process.pid")
    assert narrator.line(up) == ("runtime.process.argv: --n_threads 2 → 1; runtime.process.pid: 10 → 11; "
                                 "the endpoint answers again; observed again as before: endpoint.models")
    many = [{"at": "T", "component": f"runtime.x{i}", "before": i, "after": None} for i in range(6)]
    assert LookNarrator().line(many) == "no longer observed: x0, x1, x2, x3, +2 more"


def test_the_runs_drift_is_each_change_once_with_its_count() -> None:
    down, up = _restart(ARGV, [*ARGV[:-1], "1"])
    assert summary_lines(down + up) == [
        "runtime.process.argv: --n_threads 2 → 1 (2 events, T1 to T2)",
        "runtime.process.pid: 10 → 11 (2 events, T1 to T2)",
        "back as before: endpoint.error, endpoint.models (2 events each)"]
    twice = down + up + [dict(e, at="T3") for e in down]
    folded = {f.component: f for f in fold(twice)}
    assert folded["runtime.process.argv"].events == 3 and folded["runtime.process.argv"].after is None
    assert summary_lines(twice)[:3:2] == [
        "runtime.endpoint.error: (none) → refused (3 events, T1 to T3)",
        "runtime.process.argv: no longer observed (was /venv/bin/python -m llama_cpp.server --model /m/tiny.gguf "
        "--n_threads 2) (3 events, T1 to T3)"]
    one = [{"at": "T", "component": "runtime.engine.version", "before": None, "after": "0.3"}]
    assert summary_lines(one) == ["runtime.engine.version: (none) → 0.3 (1 event, at T)"]
    mixed = [{"at": "T", "component": "a", "before": 1, "after": None}, {"at": "U", "component": "a", "before": None,
                                                                         "after": 1},
             {"at": "T", "component": "b", "before": 1, "after": 2}, {"at": "U", "component": "b", "before": 2,
                                                                      "after": 1},
             {"at": "V", "component": "b", "before": 1, "after": 2}, {"at": "W", "component": "b", "before": 2,
                                                                      "after": 1}]
    assert summary_lines(mixed) == ["back as before: a, b (2-4 events each)"]


def test_the_tui_run_detail_says_each_change_once_not_each_event() -> None:
    from execsys.tui.screens.scope import detail_text_of_run

    down, up = _restart(ARGV, [*ARGV[:-1], "1"])
    shown = detail_text_of_run("run-1", {"verdict": "drifted", "drift": down + up}).plain
    assert "Drift during the run: 8 event(s)" in shown
    assert "≠ runtime.process.argv: --n_threads 2 → 1 (2 events, T1 to T2)" in shown
    assert shown.count("\n  ≠ ") == 3 and "/m/tiny.gguf" not in shown, shown
    assert "Drift during the run: none" in detail_text_of_run("run-2", {"verdict": "clean"}).plain
