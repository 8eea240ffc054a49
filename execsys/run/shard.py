"""Which shard of a sharded evaluation a run is, read where the scheduler puts it.

An evaluation too big for one machine is split into N shards, each a job of its own (a Slurm job
array, a Kubernetes Indexed Job), and the merged score is read as one evaluation. For
``execsys shards`` to check that every shard ran, and ran the same system, each run records which
shard it was and which job it belongs to:

- Slurm job array: ``SLURM_ARRAY_TASK_ID`` (the index, counted from ``SLURM_ARRAY_TASK_MIN`` in
  steps of ``SLURM_ARRAY_TASK_STEP``, so ``--array=1-4`` is shards 0-3), ``SLURM_ARRAY_TASK_COUNT``
  (N) and ``SLURM_ARRAY_JOB_ID`` (the job: what ties the array's tasks together);
- Kubernetes Indexed Job: ``JOB_COMPLETION_INDEX``; the pod is not told the job's completions, so
  N comes from ``--shard K/N`` (K must be the index) and the job from ``--shard K/N@GROUP``;
- otherwise ``--shard K/N[@GROUP]`` alone.

A ``--shard`` given inside a Slurm array must agree with it: a run that says it is another shard
than the scheduler started is refused before anything runs (exit 2), not recorded under a wrong
index.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from execsys.errors import UsageError

_FLAG = re.compile(r"^\s*(\S+?)\s*/\s*([^@\s]+)\s*(?:@(.*))?$")


@dataclass(frozen=True)
class Shard:
    """One shard: ``index`` of ``count`` (None when nothing says N), ``source`` (slurm, kubernetes,
    flag), ``job`` (the key shards of one job share; None when nothing names it)."""

    index: int
    count: int | None
    source: str
    job: str | None = None
    task_id: str | None = None  # the scheduler's own name for it (Slurm's array task id), when it has one

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"index": self.index, "count": self.count, "source": self.source, "job": self.job}
        if self.task_id is not None:
            body["task_id"] = self.task_id
        return body


def _integer(text: str, what: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise UsageError(f"{what} {text!r}: not an integer") from None
    return value


def parse_flag(text: str) -> tuple[int, int, str | None]:
    """``--shard K/N[@GROUP]`` -> (K, N, GROUP): integers, 0 <= K < N."""
    match = _FLAG.match(text or "")
    if not match:
        raise UsageError(f"--shard {text!r}: give K/N (this run is shard K of N, from 0), e.g. --shard 2/8 "
                         "or --shard 2/8@my-eval")
    k = _integer(match.group(1), f"--shard {text}: K")
    n = _integer(match.group(2), f"--shard {text}: N")
    group = (match.group(3) or "").strip() or None
    if match.group(3) is not None and group is None:
        raise UsageError(f"--shard {text!r}: nothing after '@' (give the job's name, or leave the '@' out)")
    if n < 1:
        raise UsageError(f"--shard {text}: N must be 1 or more")
    if not 0 <= k < n:
        raise UsageError(f"--shard {text}: K must be 0 to {n - 1} (shards count from 0)")
    return k, n, group


def shard_from(flag: str | None, environ: Mapping[str, str]) -> Shard | None:
    """The shard this run is: Slurm's array variables, else ``JOB_COMPLETION_INDEX``, else ``--shard``;
    None when nothing says it is one. Raises UsageError for a bad ``--shard`` or one that contradicts
    the scheduler."""
    given = parse_flag(flag) if flag is not None else None
    task = environ.get("SLURM_ARRAY_TASK_ID", "").strip()
    if task:
        task_id = _integer(task, "SLURM_ARRAY_TASK_ID")
        low = _integer(environ.get("SLURM_ARRAY_TASK_MIN") or "0", "SLURM_ARRAY_TASK_MIN")
        step = _integer(environ.get("SLURM_ARRAY_TASK_STEP") or "1", "SLURM_ARRAY_TASK_STEP") or 1
        index = (task_id - low) // step
        count_text = environ.get("SLURM_ARRAY_TASK_COUNT", "").strip()
        count = _integer(count_text, "SLURM_ARRAY_TASK_COUNT") if count_text else None
        if given is not None and (given[0] != index or (count is not None and given[1] != count)):
            raise UsageError(f"--shard {flag}: this is Slurm array task {task_id} (shard {index} of "
                             f"{count if count is not None else '?'}): leave --shard out, or make it agree")
        if count is None and given is not None:
            count = given[1]
        job = (given[2] if given else None) or environ.get("SLURM_ARRAY_JOB_ID", "").strip() or None
        return Shard(index, count, "slurm", job, str(task_id))
    completion = environ.get("JOB_COMPLETION_INDEX", "").strip()
    if completion:
        index = _integer(completion, "JOB_COMPLETION_INDEX")
        if given is not None and given[0] != index:
            raise UsageError(f"--shard {flag}: this is Indexed Job completion index {index} "
                             f"(JOB_COMPLETION_INDEX): give --shard {index}/N")
        return Shard(index, given[1] if given else None, "kubernetes", given[2] if given else None)
    if given is not None:
        return Shard(given[0], given[1], "flag", given[2])
    return None
