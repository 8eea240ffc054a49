"""Which files ``execsys run`` records as its results, and when their digests are trusted, as tables.

In process and in milliseconds: the result finder over temp trees (an older run's file left alone,
each changed file found whatever comes before it, a harness's own file named as that harness's),
the settle loop with its pauses replaced by a hook that plays the writer a harness left behind
(still writing, done after one pause, deleted, mid-hash), and the up-front refusal of a ``--result``
glob that would walk for ever, timed by a clock that ticks once per entry walked.
tests/test_run_decisions.py has the in-place-rewrite table; tests/test_run_cli.py runs it end to end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import blake3
import pytest

from execsys.digest import ChangedWhileHashed, hash_file
from execsys.errors import InputError
from execsys.harnesses import inspect, lm_eval, other
from execsys.run import results
from execsys.run.results import FoundResult, ResultFinder, check_pattern_finishes, settled_digests


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _bump(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def _found(finder: ResultFinder, root: Path) -> list[tuple[str, str]]:
    return [(str(p.relative_to(root)), h) for p, h in finder.found()]


# -- the finder ------------------------------------------------------------------------------------

def test_a_changed_file_is_found_after_unchanged_ones(tmp_path) -> None:
    for name in ("a.json", "b.json", "c.json", "d.json"):
        _write(tmp_path / name, "{}")
    finder = ResultFinder(other.ADAPTER, [], ["*.json"], tmp_path)
    finder.before()
    _bump(tmp_path / "b.json")
    _bump(tmp_path / "d.json")
    assert _found(finder, tmp_path) == [("b.json", "other"), ("d.json", "other")]


def test_without_a_snapshot_every_file_there_is_found(tmp_path) -> None:
    _write(tmp_path / "a.json", "{}")
    assert _found(ResultFinder(other.ADAPTER, [], ["*.json"], tmp_path), tmp_path) == [("a.json", "other")]


def test_an_absolute_pattern_is_globbed_as_written(tmp_path) -> None:
    # "scores.json/" names a directory: a file of that name is not the result asked for
    _write(tmp_path / "scores.json", "{}")
    pattern = f"{tmp_path}/scores.json/"
    finder = ResultFinder(other.ADAPTER, [], [pattern], tmp_path / "elsewhere")
    assert finder.patterns == [pattern]
    finder.before()
    _bump(tmp_path / "scores.json")
    assert finder.found() == []


def test_receipts_and_sidecars_in_a_harness_dir_are_never_results(tmp_path) -> None:
    out = tmp_path / "lm"
    finder = ResultFinder(lm_eval.ADAPTER, [out], [], tmp_path)
    finder.before()
    _write(out / "m" / "results_1.json.execsys.json", "{}")
    _write(out / "m" / "results_1.json.execsys.intoto.json", "{}")
    _write(out / "m" / "samples_t_2026-01-01T00-00-00.jsonl", "{}")
    assert _found(finder, tmp_path) == [("lm/m/samples_t_2026-01-01T00-00-00.jsonl", "lm-eval")]


def _inspect_log_named_like_lm_eval(path: Path) -> Path:
    # Inspect owns it (an eval log header); lm-eval would too (results_*.json with results and configs)
    return _write(path, json.dumps({"eval": {"task": "t"}, "version": 2, "status": "success",
                                    "results": {}, "configs": {}}))


def test_a_file_in_the_harness_s_own_dir_is_that_harness_s_when_it_claims_it(tmp_path) -> None:
    logs = tmp_path / "logs"
    finder = ResultFinder(inspect.ADAPTER, [logs], ["given/*.json"], tmp_path)
    finder.before()
    _inspect_log_named_like_lm_eval(logs / "results_2026.json")
    _inspect_log_named_like_lm_eval(tmp_path / "given" / "results_2026.json")
    assert inspect.ADAPTER.owns(logs / "results_2026.json") and lm_eval.ADAPTER.owns(logs / "results_2026.json")
    # in the log dir: Inspect's; named by --result only: the first harness that claims it
    assert _found(finder, tmp_path) == [("given/results_2026.json", "lm-eval"), ("logs/results_2026.json", "inspect")]


def test_a_file_named_by_result_is_whichever_harness_claims_it_even_in_the_harness_s_dir(tmp_path) -> None:
    logs = tmp_path / "logs"
    finder = ResultFinder(inspect.ADAPTER, [logs], ["logs/named/*.json"], tmp_path)
    finder.before()
    _inspect_log_named_like_lm_eval(logs / "named" / "results_2026.json")
    _inspect_log_named_like_lm_eval(logs / "results_2026.json")
    assert _found(finder, tmp_path) == [("logs/named/results_2026.json", "lm-eval"),
                                         ("logs/results_2026.json", "inspect")]


def test_a_found_result_as_json() -> None:
    assert FoundResult(Path("/r/s.json"), "ab12", "lm-eval").to_json() == {
        "path": "/r/s.json", "blake3": "ab12", "harness": "lm-eval"}


def test_digest_is_the_file_s_blake3(tmp_path) -> None:
    path = _write(tmp_path / "s.json", "0.5")
    assert results.digest(path) == blake3.blake3(b"0.5").hexdigest()


# -- the settle loop ---------------------------------------------------------------------------------

class _Writer:
    """Stands in for time.sleep: records each pause and runs ``during(pause_number)`` in it."""

    def __init__(self, during=None) -> None:
        self.pauses: list[float] = []
        self.during = during

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)
        if self.during is not None:
            self.during(len(self.pauses))


@pytest.fixture()
def writer(monkeypatch):
    def install(during=None) -> _Writer:
        fake = _Writer(during)
        monkeypatch.setattr(results.time, "sleep", fake)
        return fake
    return install


def test_files_that_hold_still_settle_after_one_pause(tmp_path, writer) -> None:
    a, b = _write(tmp_path / "a", "1"), _write(tmp_path / "b", "2")
    fake = writer()
    assert settled_digests([a, b]) == {a: hash_file(a), b: hash_file(b)}
    assert fake.pauses == [0.2]


def test_a_file_written_during_the_first_pause_settles_on_its_final_bytes(tmp_path, writer) -> None:
    a, late = _write(tmp_path / "a", "1"), _write(tmp_path / "late", "partial")

    def finish(pause: int) -> None:
        if pause == 1:
            late.write_text("partial, then the rest")

    fake = writer(finish)
    got = settled_digests([a, late])
    assert got == {a: hash_file(a), late: hash_file(late)}
    assert late.read_text() == "partial, then the rest"
    assert fake.pauses == [0.2, 0.3]


def test_a_file_still_changing_after_every_pause_is_reported_not_waited_on(tmp_path, writer) -> None:
    busy = _write(tmp_path / "busy", "x")
    fake = writer(lambda pause: busy.write_text("x" * (pause + 1)))
    got = settled_digests([busy])
    assert fake.pauses == [0.2, 0.3, 0.5]
    assert isinstance(got[busy], InputError)
    assert str(got[busy]) == (f"{busy}: still being written after the harness exited (it kept changing for "
                              "1 s after it was hashed)")


def test_a_missing_file_is_its_error_and_costs_no_pause(tmp_path, writer) -> None:
    gone = tmp_path / "gone"
    fake = writer()
    got = settled_digests([gone])
    assert isinstance(got[gone], (OSError, InputError))
    assert fake.pauses == []


def test_a_file_deleted_after_hashing_is_not_vouched_for(tmp_path, writer) -> None:
    # a 1-byte file stamped at the epoch: (mtime 0, size 1), the stamp a slip could give a missing file
    doomed = _write(tmp_path / "doomed", "1")
    os.utime(doomed, ns=(0, 0))
    fake = writer(lambda pause: doomed.unlink() if pause == 1 else None)
    got = settled_digests([doomed])
    assert isinstance(got[doomed], (OSError, InputError))
    assert fake.pauses == [0.2]


def test_a_file_that_changed_while_hashed_is_hashed_again(tmp_path, writer, monkeypatch) -> None:
    path = _write(tmp_path / "r", "1")
    calls: list[Path] = []
    real = results.digest

    def digest(p: Path) -> str:
        calls.append(p)
        if len(calls) == 1:
            raise ChangedWhileHashed(f"{p} changed while it was being hashed")
        return real(p)

    monkeypatch.setattr(results, "digest", digest)
    fake = writer()
    assert settled_digests([path]) == {path: hash_file(path)}
    assert calls == [path, path]
    assert fake.pauses == [0.2, 0.3]


def test_an_unreadable_file_is_its_error_and_the_others_still_settle(tmp_path, writer) -> None:
    ok, directory = _write(tmp_path / "ok", "1"), tmp_path / "d"
    directory.mkdir()
    fake = writer()
    got = settled_digests([directory, ok])
    assert got[ok] == hash_file(ok)
    assert isinstance(got[directory], (OSError, InputError))
    assert fake.pauses == [0.2]


def test_nothing_to_settle_is_nothing_and_no_pause(writer) -> None:
    fake = writer()
    assert settled_digests([]) == {}
    assert fake.pauses == []


# -- a --result glob that would walk for ever ------------------------------------------------------

@pytest.fixture()
def ticking_clock(monkeypatch):
    """time.monotonic advancing 1 s per reading: the budget counts the entries walked."""
    ticks = iter(range(10**6))
    monkeypatch.setattr(results.time, "monotonic", lambda: float(next(ticks)))


def _tree(root: Path, files: int) -> None:
    for i in range(files):
        _write(root / f"f{i}.json", "{}")


@pytest.mark.parametrize(("files", "budget", "refused"), [
    pytest.param(2, 10.0, False, id="a-small-tree-within-budget"),
    pytest.param(20, 10.0, True, id="a-tree-past-the-budget"),
    pytest.param(20, 25.0, False, id="the-same-tree-with-more-budget"),
])
def test_a_glob_is_refused_when_its_walk_outlasts_the_budget(tmp_path, ticking_clock, files, budget, refused) -> None:
    _tree(tmp_path / "out", files)
    pattern = str(tmp_path / "out" / "**" / "*.json")
    if not refused:
        check_pattern_finishes(pattern, budget_s=budget)
        return
    with pytest.raises(InputError) as err:
        check_pattern_finishes(pattern, budget_s=budget)
    assert str(err.value) == (f"--result {pattern}: still matching after {budget:g} s (a glob over / or through "
                              "a symlink loop?); name the directory the harness writes to")


def test_only_the_tree_under_the_first_wildcard_is_walked(tmp_path, ticking_clock) -> None:
    _tree(tmp_path / "big", 40)
    _tree(tmp_path / "big" / "small", 2)
    check_pattern_finishes(str(tmp_path / "big" / "small" / "**" / "*.json"), budget_s=10)
    for walks_big in ("sm*/**/*.json", "small*/**", "*/small/**/*.json"):
        with pytest.raises(InputError):
            check_pattern_finishes(f"{tmp_path / 'big'}/{walks_big}", budget_s=10)


def test_a_glob_without_a_double_star_walks_nothing(tmp_path, ticking_clock) -> None:
    _tree(tmp_path / "out", 40)
    check_pattern_finishes(str(tmp_path / "out" / "*" / "*.json"), budget_s=-1)


def test_the_default_budget_is_twenty_seconds(tmp_path, ticking_clock) -> None:
    assert results.PATTERN_BUDGET_S == 20.0
    _tree(tmp_path / "out", 15)
    check_pattern_finishes(str(tmp_path / "out" / "**"))
    _tree(tmp_path / "out", 25)
    with pytest.raises(InputError, match="still matching after 20 s"):
        check_pattern_finishes(str(tmp_path / "out" / "**"))


@pytest.mark.parametrize(("budget", "refused"), [
    pytest.param(3.0, False, id="entries-equal-to-the-budget-pass"),
    pytest.param(2.0, True, id="one-entry-over-the-budget-is-refused"),
])
def test_the_budget_boundary(tmp_path, ticking_clock, budget, refused) -> None:
    _tree(tmp_path / "out", 2)  # walked as out/, out/f0.json, out/f1.json: three entries, one tick each
    pattern = str(tmp_path / "out" / "**" / "*.json")
    if refused:
        with pytest.raises(InputError):
            check_pattern_finishes(pattern, budget_s=budget)
    else:
        check_pattern_finishes(pattern, budget_s=budget)


def test_the_walk_goes_down_every_level_as_the_glob_would(tmp_path, ticking_clock) -> None:
    deep = tmp_path / "out" / "a" / "b" / "c"
    _tree(deep, 30)  # one entry at the top, thirty three levels down
    with pytest.raises(InputError):
        check_pattern_finishes(str(tmp_path / "out" / "**" / "*.json"), budget_s=10)


def test_a_file_that_keeps_changing_while_hashed_does_not_hold_up_the_others(tmp_path, writer, monkeypatch) -> None:
    busy, calm = _write(tmp_path / "a-busy", "1"), _write(tmp_path / "b-calm", "2")
    real = results.digest

    def digest(p: Path) -> str:
        if p == busy:
            raise ChangedWhileHashed(f"{p} changed while it was being hashed")
        return real(p)

    monkeypatch.setattr(results, "digest", digest)
    writer()
    got = settled_digests([busy, calm])
    assert got[calm] == hash_file(calm)
    assert isinstance(got[busy], InputError) and "still being written" in str(got[busy])
