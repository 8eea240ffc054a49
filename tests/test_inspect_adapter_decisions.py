"""The Inspect adapter's decisions as a table (issue 26): which commands it claims, where it looks for
logs, which files it owns, how a sample is keyed and scored, and which identity it finds.

All in process and without Inspect installed: the log files are written here byte for byte, and for
:meth:`InspectHarness.read` the object Inspect's reader returns is built from plain namespaces (the
real reader on a real ``inspect eval`` log is covered by tests/test_run_inspect.py, through a
subprocess mutation testing cannot follow). A wrong answer in any of these is silent: a run's
results not found, one case's outcome under another's name, or the identity check skipped.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from execsys.errors import InputError
from execsys.harnesses import inspect as adapter
from execsys.harnesses.inspect import ADAPTER, InspectHarness, graded_samples, sample_key, score_outcome
from execsys.harnesses.inspect_names import served_model, unqualified


@pytest.mark.parametrize("argv, claimed", [
    (["inspect", "eval", "task.py"], True),
    (["/venv/bin/inspect", "eval-set", "t.py"], True),
    (["inspect", "eval-retry", "log.eval"], True),
    (["python", "-m", "inspect_ai", "eval", "t.py"], True),
    (["inspect", "--log-level", "info", "eval"], True),    # the subcommand after an option still counts
    (["inspect", "view"], False),
    (["inspect", "score", "log.eval"], False),
    (["lm_eval", "eval"], False),
    (["python", "inspect.py", "eval"], False),
    (["python", "run.py", "eval"], False),
    (["myinspect", "eval"], False),
])
def test_which_commands_are_inspect_runs(argv: list[str], claimed: bool) -> None:
    assert ADAPTER.matches(argv) is claimed
    assert ADAPTER.name == adapter.NAME == "inspect"


def test_the_command_line_is_passed_through_unchanged() -> None:
    argv = ["inspect", "eval", "t.py", "--model", "m"]
    prepared = ADAPTER.prepare(argv, "id", "run")
    assert prepared == argv and prepared is not argv


@pytest.mark.parametrize("argv, env, expected", [
    (["inspect", "eval"], {}, "CWD/logs"),
    (["inspect", "eval"], {"INSPECT_LOG_DIR": "env-logs"}, "CWD/env-logs"),
    (["inspect", "eval"], {"INSPECT_LOG_DIR": ""}, "CWD/logs"),
    (["inspect", "eval", "--log-dir", "flag-logs"], {"INSPECT_LOG_DIR": "env-logs"}, "CWD/flag-logs"),
    (["inspect", "eval", "--log-dir=/abs/logs"], {}, "/abs/logs"),
    (["inspect", "eval"], {"INSPECT_LOG_DIR": "/abs/env"}, "/abs/env"),
])
def test_where_the_logs_are_looked_for(argv: list[str], env: dict[str, str], expected: str, tmp_path: Path) -> None:
    got = ADAPTER.output_dirs(argv, tmp_path, env)
    assert got == [Path(expected.replace("CWD", str(tmp_path)))]


def test_a_log_dir_under_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ADAPTER.output_dirs(["inspect", "eval", "--log-dir", "~/l"], tmp_path / "cwd", {}) == [tmp_path / "home" / "l"]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, text, owned", [
    ("a.json", '{"version": 2, "status": "success", "eval": {"task": "t"}}', True),
    ("a.json", '{"status": "success", "eval": {"task": "t"}}', True),
    ("a.json", '{"version": 2, "eval": {"task": "t"}}', True),
    ("a.json", '{"eval": {"task": "t"}}', False),                      # neither version nor status
    ("a.json", '{"version": 2, "status": "x"}', False),                # no eval
    ("a.json", '{"results": {"x": 1}, "eval": 1, "version": 1}', False),  # an lm-eval results file
    ("a.txt", '{"version": 2, "status": "success", "eval": {}}', False),
])
def test_which_json_files_are_inspect_logs(name: str, text: str, owned: bool, tmp_path: Path) -> None:
    assert ADAPTER.owns(_write(tmp_path / name, text)) is owned


def test_results_past_the_start_of_an_inspect_log_do_not_disown_it(tmp_path: Path) -> None:
    text = '{"version": 2, "status": "success", "eval": {"task": "t"}, "results": {"scores": []}}'
    assert ADAPTER.owns(_write(tmp_path / "a.json", text))


def test_only_the_first_4096_bytes_are_read(tmp_path: Path) -> None:
    text = '{"pad": "' + "x" * 5000 + '", "version": 2, "eval": {}}'
    assert not ADAPTER.owns(_write(tmp_path / "late.json", text))
    text = '{"version": 2, "eval": {}, "pad": "' + "x" * 5000 + '"}'
    assert ADAPTER.owns(_write(tmp_path / "early.json", text))


def test_an_eval_log_is_a_zip(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "a.eval", "w") as zf:
        zf.writestr("header.json", "{}")
    assert ADAPTER.owns(tmp_path / "a.eval")
    assert not ADAPTER.owns(_write(tmp_path / "b.eval", '{"version": 2, "eval": {}}'))


def test_what_cannot_be_read_is_not_owned(tmp_path: Path) -> None:
    assert not ADAPTER.owns(tmp_path / "missing.json")
    os.mkfifo(tmp_path / "fifo.json")
    assert not ADAPTER.owns(tmp_path / "fifo.json")
    (tmp_path / "dir.eval").mkdir()
    assert not ADAPTER.owns(tmp_path / "dir.eval")
    assert ADAPTER.is_primary(tmp_path / "x.eval") is True


@pytest.mark.parametrize("value, outcome", [("C", True), ("I", False), (1.0, 1.0), (0, 0), ("P", "P"), (None, None)])
def test_score_values(value: object, outcome: object) -> None:
    assert score_outcome(value) == outcome and type(score_outcome(value)) is type(outcome)


def _log(task: str = "arith", samples: list | None = None, metadata: dict | None = None,
         updated: dict | None = None) -> SimpleNamespace:
    log = SimpleNamespace(eval=SimpleNamespace(task=task, metadata=metadata), samples=samples)
    if updated is not None:
        log.metadata = updated
    return log


def _sample(sample_id: object, epoch: int | None = 1, scores: dict | None = None, **extra: object) -> SimpleNamespace:
    return SimpleNamespace(id=sample_id, epoch=epoch, scores=scores, **extra)


@pytest.mark.parametrize("epoch, key", [(None, "t/7"), (0, "t/7"), (1, "t/7"), (2, "t/7#2"), (10, "t/7#10")])
def test_sample_keys_name_the_epoch_past_the_first(epoch: int | None, key: str) -> None:
    assert sample_key(_log("t"), _sample(7, epoch)) == key


def _reading(monkeypatch: pytest.MonkeyPatch, log: SimpleNamespace) -> None:
    def read_log(path: Path) -> SimpleNamespace:
        assert isinstance(path, Path) and path.name == "x.eval"  # the file asked for, not another
        return log

    monkeypatch.setattr(adapter, "_read_log", read_log)


def test_reading_outcomes_takes_each_samples_first_score(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    samples = [
        _sample("a", 1, {"match": SimpleNamespace(value="C"), "other": SimpleNamespace(value="I")}),
        _sample("a", 2, {"match": SimpleNamespace(value="I")}),
        _sample("b", 1, {"match": SimpleNamespace(value=0.5)}),
        _sample("c", 1, {}),            # not scored: no outcome
        _sample("d", 1, None),
        _sample("e", 1, {"match": SimpleNamespace(value="C")}),   # scored after unscored ones
    ]
    _reading(monkeypatch, _log(samples=samples))
    result = InspectHarness().read(tmp_path / "x.eval")
    assert result.outcomes == {"arith/a": True, "arith/a#2": False, "arith/b": 0.5, "arith/e": True}
    assert result.harness == "inspect" and result.embedded is None and result.path == tmp_path / "x.eval"
    _reading(monkeypatch, _log(samples=None))
    assert InspectHarness().read(tmp_path / "x.eval").outcomes == {}


@pytest.mark.parametrize("metadata, updated, embedded", [
    ({"execsys": {"identity": "idA", "run": "r1"}}, None, {"identity": "idA", "run": "r1"}),
    ({"execsys": {"identity": "idA"}}, None, {"identity": "idA", "run": None}),
    ({"execsys": {"identity": 12, "run": "r"}}, None, {"identity": "12", "run": "r"}),
    ({"execsys": {"identity": ""}}, None, None),
    ({"execsys": {"run": "r1"}}, None, None),
    ({"execsys": "idA"}, None, None),
    (None, None, None),
    ({}, {"execsys": {"identity": "idB", "run": "r2"}}, {"identity": "idB", "run": "r2"}),
    # an edit recorded in the log's updates wins over the metadata the eval started with
    ({"execsys": {"identity": "idA", "run": "r1"}}, {"execsys": {"identity": "idB"}}, {"identity": "idB", "run": None}),
    ({"execsys": {"identity": "idA", "run": "r1"}}, {}, {"identity": "idA", "run": "r1"}),
    ({"execsys": {"identity": "idA", "run": "r1"}}, None, {"identity": "idA", "run": "r1"}),
])
def test_the_embedded_identity(metadata, updated, embedded, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = _log(samples=[], metadata=metadata, updated=updated)
    _reading(monkeypatch, log)
    assert InspectHarness().read(tmp_path / "x.eval").embedded == embedded
    assert log.eval.metadata == metadata  # the log's own metadata is not changed by reading it


def test_graded_samples_skip_errored_and_unanswered_samples(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = SimpleNamespace(completion="4")
    chat = [SimpleNamespace(role="user", text="2+2 é?"), SimpleNamespace(role="assistant", text="hm")]
    samples = [
        _sample("a", 1, input="2+2?", output=out, target="4", error=None),
        _sample("b", 2, input=chat, output=SimpleNamespace(completion="5"), target=["5"], error=None),
        _sample("c", 1, input="x", output=out, target="4", error="boom"),
        _sample("d", 1, input="x", output=None, target="4", error=None),
        _sample("e", 1, input="y", output=out, target="4"),       # no error attribute at all
    ]
    _reading(monkeypatch, _log(samples=samples))
    got = graded_samples(tmp_path / "x.eval")
    assert [(s.id, s.prompt, s.output, s.expected) for s in got] == [
        ("arith/a", "2+2?", "4", "4"),
        ("arith/b#2", '[{"role": "user", "content": "2+2 é?"}, {"role": "assistant", "content": "hm"}]', "5", ["5"]),
        ("arith/e", "y", "4", "4"),
    ]
    _reading(monkeypatch, _log(samples=None))
    assert graded_samples(tmp_path / "x.eval") == []


def test_reading_without_inspect_installed_says_how_to_get_it(tmp_path: Path) -> None:
    try:
        import inspect_ai  # noqa: F401  # pyright: ignore[reportMissingImports]
    except ImportError:
        with pytest.raises(InputError) as raised:
            adapter._read_log(tmp_path / "x.eval")
        assert str(raised.value) == f"{tmp_path / 'x.eval'}: {adapter.MISSING_EXTRA}"
        assert "pip install 'execsys[inspect]'" in adapter.MISSING_EXTRA
    else:
        with pytest.raises(InputError, match="not found"):
            adapter._read_log(tmp_path / "x.eval")


@pytest.mark.parametrize("name, requested, served", [
    ("openai-api/local/tiny", "openai-api/local/tiny", "tiny"),
    ("openai/gpt-4o", "openai/gpt-4o", "gpt-4o"),
    ("meta-llama/Llama-3", "vllm/meta-llama/Llama-3", "meta-llama/Llama-3"),
    ("vllm/meta-llama/Llama-3", "vllm/meta-llama/Llama-3", "meta-llama/Llama-3"),
    ("openai-api/tiny", "openai-api/tiny", "tiny"),       # no service part: only the provider goes
    ("openai-api/local/", "openai-api/local/tiny", "openai-api/local/"),  # nothing left: kept as is
    ("openai-api/local", "openai-api/local/tiny", "openai-api/local"),
    ("tiny", "openai-api/local/tiny", "tiny"),
    ("other/tiny", "openai-api/local/tiny", "other/tiny"),
    ("openai/x", "tiny", "openai/x"),                      # an unqualified request: nothing taken off
    ("openai/x", None, "openai/x"),
    ("openai/x", "", "openai/x"),
])
def test_the_provider_qualifier_is_taken_off_the_requested_model_only(name: str, requested: str | None, served: str) -> None:
    assert unqualified(name, requested) == served


@pytest.mark.parametrize("event_model, response, output_model, served", [
    ("openai-api/local/tiny", {"model": "tiny-served"}, "openai-api/local/tiny", "tiny-served"),
    ("openai-api/local/tiny", {"model": "openai-api/local/x"}, None, "x"),
    ("openai-api/local/tiny", {"model": "tiny", "error": "e"}, "openai-api/local/out", "out"),
    ("openai-api/local/tiny", {"model": ""}, "openai-api/local/other", "other"),
    ("openai-api/local/tiny", {"model": 3}, "openai-api/local/tiny", "tiny"),
    ("openai-api/local/tiny", "not a dict", "openai-api/local/tiny", "tiny"),
    ("openai-api/local/tiny", None, None, None),
    ("openai-api/local/tiny", None, "", None),
    ("openai-api/local/tiny", None, 5, None),
    (None, {"model": "openai-api/local/x"}, None, "openai-api/local/x"),
    (7, {"model": "openai-api/local/x"}, None, "openai-api/local/x"),
])
def test_which_model_answered(event_model, response, output_model, served) -> None:
    output = SimpleNamespace(model=output_model) if output_model is not None else None
    event = SimpleNamespace(model=event_model, output=output)
    assert served_model(event, response) == served


def test_which_model_answered_when_the_event_lacks_fields() -> None:
    assert served_model(SimpleNamespace(output=SimpleNamespace(model="openai/x")), None) == "openai/x"
    assert served_model(SimpleNamespace(model="openai/x"), {"model": "openai/y"}) == "y"
    assert served_model(SimpleNamespace(model="openai/x"), None) is None


def test_the_head_read_stops_exactly_at_4096_bytes(tmp_path: Path) -> None:
    # '"eval"' ends at byte 4097: one byte past what is read, so the file is not recognised
    prefix = '{"version": 2, "pad": "'
    pad = "x" * (4091 - len(prefix) - len('", '))
    text = prefix + pad + '", "eval": {}}'
    assert text.index('"eval"') + len('"eval"') == 4097
    assert not ADAPTER.owns(_write(tmp_path / "edge.json", text))
    assert ADAPTER.owns(_write(tmp_path / "inside.json", prefix + pad[1:] + '", "eval": {}}'))


def test_a_character_cut_at_the_head_boundary_does_not_disown_the_log(tmp_path: Path) -> None:
    prefix = '{"version": 2, "eval": {}, "pad": "'
    text = prefix + "x" * (4095 - len(prefix)) + "é" * 10 + '"}'
    assert len(text[:4095].encode()) == 4095  # the 4096th byte is the first half of an é
    assert ADAPTER.owns(_write(tmp_path / "cut.json", text))
    (tmp_path / "bad.json").write_bytes(b'{"version": 2, "eval": {}, "\xff\xfe": 1}')
    assert ADAPTER.owns(tmp_path / "bad.json")


@pytest.mark.parametrize("start, owned", [(10, False), (11, False), (12, True), (13, True)])
def test_results_near_the_start_mean_an_lm_eval_file(start: int, owned: bool, tmp_path: Path) -> None:
    # '"results"' is 9 characters: it lies inside the first 20 when it starts at 11 or below
    head = "{" + '"' + "a" * (start - 5) + '": ' + '"results": 1, "eval": {}, "version": 2}'
    assert head.index('"results"') == start
    assert ADAPTER.owns(_write(tmp_path / "r.json", head)) is owned


class _FakeInspectLog:
    """Inspect's ``inspect_ai.log`` module as far as _read_log uses it: ``read_eval_log(str)``."""

    def __init__(self, fails: Exception | None = None) -> None:
        self.asked: list[object] = []
        self.fails = fails

    def read_eval_log(self, name: object) -> str:
        self.asked.append(name)
        if self.fails:
            raise self.fails
        return "the log"


def _with_reader(monkeypatch: pytest.MonkeyPatch, reader: _FakeInspectLog) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "inspect_ai", SimpleNamespace(log=reader))
    monkeypatch.setitem(sys.modules, "inspect_ai.log", reader)


def test_the_log_is_read_by_its_path_through_inspects_reader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reader = _FakeInspectLog()
    _with_reader(monkeypatch, reader)
    log = _write(tmp_path / "a.json", "{}")
    assert adapter._read_log(log) == "the log" and reader.asked == [str(log)]


def test_a_log_that_cannot_be_read_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reader = _FakeInspectLog(fails=ValueError("truncated zip"))
    _with_reader(monkeypatch, reader)
    with pytest.raises(InputError) as raised:
        adapter._read_log(tmp_path / "missing.eval")
    assert str(raised.value) == f"{tmp_path / 'missing.eval'}: not found" and reader.asked == []
    os.mkfifo(tmp_path / "fifo.eval")
    with pytest.raises(InputError) as raised:
        adapter._read_log(tmp_path / "fifo.eval")
    assert str(raised.value).startswith(f"Inspect log {tmp_path / 'fifo.eval'}: is a FIFO")
    assert reader.asked == []
    bad = _write(tmp_path / "bad.eval", "x")
    with pytest.raises(InputError) as raised:
        adapter._read_log(bad)
    assert str(raised.value) == f"{bad}: not a readable Inspect log (ValueError: truncated zip)"
