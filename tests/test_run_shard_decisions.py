"""Which shard a run is (execsys/run/shard.py) as a table: ``--shard K/N[@GROUP]`` parsed at its bounds,
Slurm's array variables (min, step, count, job), Kubernetes' completion index, and each contradiction
refused with the sentence a user reads."""

from __future__ import annotations

import pytest

from execsys.errors import UsageError
from execsys.run.shard import Shard, parse_flag, shard_from


@pytest.mark.parametrize(("text", "parsed"), [
    pytest.param("0/1", (0, 1, None), id="only-shard"),
    pytest.param("2/8", (2, 8, None), id="plain"),
    pytest.param("7/8", (7, 8, None), id="last-is-n-minus-1"),
    pytest.param(" 3 / 4 ", (3, 4, None), id="spaces"),
    pytest.param("1/4@my-eval", (1, 4, "my-eval"), id="group"),
    pytest.param("1/4@ my eval ", (1, 4, "my eval"), id="group-stripped"),
])
def test_parse_flag(text, parsed) -> None:
    assert parse_flag(text) == parsed


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("8/8", "--shard 8/8: K must be 0 to 7 (shards count from 0)", id="k-equal-n"),
    pytest.param("-1/8", "--shard -1/8: K must be 0 to 7 (shards count from 0)", id="k-negative"),
    pytest.param("0/0", "--shard 0/0: N must be 1 or more", id="n-zero"),
    pytest.param("0/-2", "--shard 0/-2: N must be 1 or more", id="n-negative"),
    pytest.param("a/4", "--shard a/4: K 'a': not an integer", id="k-not-integer"),
    pytest.param("1/b", "--shard 1/b: N 'b': not an integer", id="n-not-integer"),
    pytest.param("1/4@", "--shard '1/4@': nothing after '@' (give the job's name, or leave the '@' out)",
                 id="empty-group"),
    pytest.param("1/4@  ", "--shard '1/4@  ': nothing after '@'", id="blank-group"),
    pytest.param("3", "--shard '3': give K/N (this run is shard K of N, from 0), e.g. --shard 2/8 or "
                      "--shard 2/8@my-eval", id="no-slash"),
    pytest.param("", "--shard '': give K/N", id="empty"),
])
def test_parse_flag_refuses(text, message) -> None:
    with pytest.raises(UsageError) as caught:
        parse_flag(text)
    assert str(caught.value).startswith(message)


def test_parse_flag_of_none_is_refused_as_empty() -> None:
    with pytest.raises(UsageError, match="give K/N"):
        parse_flag(None)  # type: ignore[arg-type]


SLURM = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_STEP": "1",
         "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_JOB_ID": "777"}


@pytest.mark.parametrize(("flag", "environ", "shard"), [
    pytest.param(None, {}, None, id="nothing-no-shard"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "  "}, None, id="blank-task-id-no-shard"),
    pytest.param("2/8", {}, Shard(2, 8, "flag", None), id="flag"),
    pytest.param("2/8@g", {}, Shard(2, 8, "flag", "g"), id="flag-group"),
    pytest.param(None, SLURM, Shard(2, 4, "slurm", "777", "3"), id="slurm-from-min-1"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "5"}, Shard(5, None, "slurm", None, "5"), id="slurm-defaults"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "", "SLURM_ARRAY_TASK_STEP": ""},
                 Shard(5, None, "slurm", None, "5"), id="slurm-empty-min-step"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_STEP": "3"},
                 Shard(2, None, "slurm", None, "7"), id="slurm-step-3"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "3"},
                 Shard(2, None, "slurm", None, "8"), id="slurm-step-floors"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_STEP": "0"},
                 Shard(4, None, "slurm", None, "4"), id="slurm-step-0-is-1"),
    pytest.param("2/4", SLURM, Shard(2, 4, "slurm", "777", "3"), id="slurm-agreeing-flag"),
    pytest.param("2/4@mine", SLURM, Shard(2, 4, "slurm", "mine", "3"), id="flag-group-over-slurm-job"),
    pytest.param("5/9", {"SLURM_ARRAY_TASK_ID": "5"}, Shard(5, 9, "slurm", None, "5"), id="slurm-count-from-flag"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_JOB_ID": " "}, Shard(1, None, "slurm", None, "1"),
                 id="slurm-blank-job"),
    pytest.param(None, {"JOB_COMPLETION_INDEX": "3"}, Shard(3, None, "kubernetes", None), id="kubernetes"),
    pytest.param("3/5@k", {"JOB_COMPLETION_INDEX": " 3 "}, Shard(3, 5, "kubernetes", "k"), id="kubernetes-flag"),
    pytest.param("1/2", {"JOB_COMPLETION_INDEX": "1", "SLURM_ARRAY_TASK_ID": "1"},
                 Shard(1, 2, "slurm", None, "1"), id="slurm-before-kubernetes"),
])
def test_shard_from(flag, environ, shard) -> None:
    assert shard_from(flag, environ) == shard


@pytest.mark.parametrize(("flag", "environ", "message"), [
    pytest.param("1/4", SLURM, "--shard 1/4: this is Slurm array task 3 (shard 2 of 4): leave --shard out, or "
                               "make it agree", id="slurm-other-index"),
    pytest.param("2/5", SLURM, "--shard 2/5: this is Slurm array task 3 (shard 2 of 4)", id="slurm-other-count"),
    pytest.param("1/4", {"SLURM_ARRAY_TASK_ID": "3"}, "--shard 1/4: this is Slurm array task 3 (shard 3 of ?)",
                 id="slurm-count-unknown"),
    pytest.param("2/4", {"JOB_COMPLETION_INDEX": "3"}, "--shard 2/4: this is Indexed Job completion index 3 "
                                                      "(JOB_COMPLETION_INDEX): give --shard 3/N",
                 id="kubernetes-other-index"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "x"}, "SLURM_ARRAY_TASK_ID 'x': not an integer", id="bad-task"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "m"},
                 "SLURM_ARRAY_TASK_MIN 'm': not an integer", id="bad-min"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_STEP": "s"},
                 "SLURM_ARRAY_TASK_STEP 's': not an integer", id="bad-step"),
    pytest.param(None, {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "c"},
                 "SLURM_ARRAY_TASK_COUNT 'c': not an integer", id="bad-count"),
    pytest.param(None, {"JOB_COMPLETION_INDEX": "k"}, "JOB_COMPLETION_INDEX 'k': not an integer", id="bad-index"),
    pytest.param("9/4", {}, "--shard 9/4: K must be 0 to 3", id="bad-flag-first"),
])
def test_shard_from_refuses(flag, environ, message) -> None:
    with pytest.raises(UsageError) as caught:
        shard_from(flag, environ)
    assert str(caught.value).startswith(message)


def test_to_json_names_the_task_only_when_there_is_one() -> None:
    assert Shard(1, 4, "flag", "g").to_json() == {"index": 1, "count": 4, "source": "flag", "job": "g"}
    assert Shard(2, None, "slurm", "7", "3").to_json() == {"index": 2, "count": None, "source": "slurm", "job": "7",
                                                          "task_id": "3"}
    assert Shard(0, 1, "flag").job is None and Shard(0, 1, "flag").task_id is None
