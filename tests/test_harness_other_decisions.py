"""The adapter for any other harness (execsys/harnesses/other.py): it claims every command and file, runs
the command unchanged, names the task by the script, writes nowhere execsys knows, reads no format."""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys.errors import InputError
from execsys.harnesses.other import ADAPTER, NAME


def test_other_claims_everything_and_changes_nothing(tmp_path) -> None:
    assert ADAPTER.name == NAME == "other"
    argv = ["python", "eval.py", "--out", "x.json"]
    assert ADAPTER.matches(argv) is True and ADAPTER.matches([]) is True
    prepared = ADAPTER.prepare(argv, "identity", "run_1")
    assert prepared == argv and prepared is not argv
    assert ADAPTER.output_dirs(argv, tmp_path, {"HOME": str(tmp_path)}) == []
    for name in ("x.json", "scores.csv", "out"):
        assert ADAPTER.owns(tmp_path / name) is True
        assert ADAPTER.is_primary(tmp_path / name) is True


@pytest.mark.parametrize(("argv", "task"), [
    (["python", "eval.py", "out.json"], "eval.py"), (["./run.sh"], "run.sh"), (["python", "-m", "pkg.mod"], "pkg.mod"),
    ([], "?"),
])
def test_task_is_the_script(argv, task) -> None:
    assert ADAPTER.task(argv) == task


def test_read_refuses_with_the_formats_it_does_read() -> None:
    with pytest.raises(InputError) as caught:
        ADAPTER.read(Path("/r/scores.csv"))
    assert str(caught.value) == ("/r/scores.csv: not a result format execsys reads (lm-eval results_*.json, an "
                                 "Inspect log, or execsys.result/1)")
