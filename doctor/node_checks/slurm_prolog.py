"""slurm-prolog: a Slurm ``Prolog`` gate, and the ``TaskProlog`` lines of ``execsys pin --task-prolog``.

A Prolog runs as root before each job; a non-zero exit drains the node and requeues the job held
(``launch failed requeued held``). So only a failing hazard exits 1. When execsys itself cannot
check -- an unreadable environment, a bad flag or declaration, a check that did not finish -- it
fails open: exit 0 and a line in the log (stderr and syslog), because an execsys problem must not
drain every node of the cluster at once.

A ``TaskProlog`` runs as the job's user before each task; slurmd reads ``export NAME=value`` lines
on its stdout into the task's environment. :func:`task_prolog_exports` gives those lines, so every
job step carries the node's pinned identity (``EXECSYS_IDENTITY``) and its lock (``EXECSYS_LOCK``).
Slurm takes the value verbatim (no shell quoting), so none is added.
"""

from __future__ import annotations

import os

from execsys.doctor.node_checks.check import Outcome, Verdict

ID = "slurm-prolog"
IDENTITY_VARIABLE = "EXECSYS_IDENTITY"
LOCK_VARIABLE = "EXECSYS_LOCK"


def outcome(verdict: Verdict, drain_requested: bool = False) -> Outcome:
    del drain_requested  # slurmd drains on the exit code itself
    if verdict.level == "fail":
        return Outcome(1, verdict.line)
    if verdict.level == "unknown":
        return Outcome(0, verdict.line, log=f"execsys prolog: could not check, letting the job run: {verdict.line}")
    return Outcome(0, verdict.line)


def task_prolog_exports(identity_id: str, lock_path: str | os.PathLike[str]) -> list[str]:
    """The TaskProlog stdout lines that put the identity into every task's environment."""
    for name, value in ((IDENTITY_VARIABLE, identity_id), (LOCK_VARIABLE, str(lock_path))):
        if "\n" in value or not value:
            raise ValueError(f"{name}: cannot export {value!r} through a TaskProlog line")
    return [f"export {IDENTITY_VARIABLE}={identity_id}", f"export {LOCK_VARIABLE}={os.path.abspath(lock_path)}"]
