"""``RunOptions``: what ``execsys run`` was asked to do, layered flags > declaration > lock, validated."""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from execsys.errors import InputError, UsageError
from execsys.operation import first_given
from execsys.proc import MAX_WAIT_S

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity
    from execsys.run.shard import Shard
    from execsys.sources import Sources

# fail: a failing hazard refuses the run; warn: fails are warnings; off: no doctor
GateMode = Literal["fail", "warn", "off"]
GATES: tuple[GateMode, ...] = get_args(GateMode)
DEFAULT_WATCH_S = 30.0
JOB_LOCK_ENV = "EXECSYS_LOCK"
JOB_IDENTITY_ENV = "EXECSYS_IDENTITY"


@dataclass(frozen=True)
class JobIdentity:
    """The identity this process's environment already carries: a Slurm ``TaskProlog`` running
    ``execsys pin --task-prolog`` exports it into every job step (and an enclosing ``execsys run``
    into its harness). A run inside that job is tied to the node's identity, not to whatever lock
    happens to sit beside a declaration in the job's working directory."""

    lock_path: Path
    identity_id: str | None  # what the lock held when the job started; None when only the lock was exported

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> JobIdentity | None:
        lock = environ.get(JOB_LOCK_ENV, "").strip()
        if not lock:
            return None
        return cls(Path(lock).expanduser(), environ.get(JOB_IDENTITY_ENV, "").strip() or None)


def load_run_sources(config: str | None, lock: str | None, environ: Mapping[str, str],
                ledger: str | os.PathLike[str] | None = None) -> tuple[Sources, JobIdentity | None]:
    """The declaration and lock of a run: ``--lock``, else the job's ``$EXECSYS_LOCK``, else the lock
    beside the declaration. A job's lock brings its own declaration (the one it was pinned from) unless
    ``--config``/``$EXECSYS_CONFIG`` or a ``./execsys.toml`` names one."""
    from execsys.identity import load_lock
    from execsys.sources import config_given, config_path, load_sources

    job = JobIdentity.from_environment(environ) if lock is None else None
    if job is None:
        return load_sources(config, lock, ledger=ledger), None
    if not job.lock_path.is_file():
        raise InputError(f"{JOB_LOCK_ENV}={job.lock_path} (exported into this job by a TaskProlog or an enclosing "
                         "execsys run) does not exist: pin the node again, or give --lock FILE")
    if not config_given(config) and not config_path(None).exists():
        pinned_from = load_lock(job.lock_path).declaration.get("path")
        if isinstance(pinned_from, str) and Path(pinned_from).is_file():
            config = pinned_from
    return load_sources(config, str(job.lock_path), ledger=ledger), job


@dataclass
class RunOptions:
    """Everything one run needs. ``command`` is the harness's argv, exactly as after ``--``."""

    command: list[str]
    declaration: Declaration
    lock: Identity | None
    lock_path: Path
    gate: GateMode = "fail"  # fail: a failing hazard refuses; warn: fails are warnings; off: no doctor
    override: str | None = None  # run past a failing gate, for this recorded reason
    repin: bool = False  # a new-identity lock is re-pinned instead of refusing
    watch_s: float = DEFAULT_WATCH_S  # 0 = no watching
    results: list[str] = field(default_factory=list)  # --result PATH|GLOB
    sidecar_dir: Path | None = None
    cwd: Path = field(default_factory=Path.cwd)
    child_stdout_to_stderr: bool = False  # --json: stdout is the record's alone
    grace_s: float = 10.0  # after a cancel, how long the harness has to stop before it is killed
    job: JobIdentity | None = None  # the lock came from the job's environment ($EXECSYS_LOCK)
    sign_key: Path | None = None  # --sign-key / [receipts] key: the receipts' signing key (PEM)
    signer: Any = None  # securesystemslib's CryptoSigner for it, loaded before anything runs
    shard: Shard | None = None  # which shard of a sharded evaluation this run is (execsys.run.shard)
    ledger: Path | None = None  # --ledger; None: $EXECSYS_LEDGER, else the user data dir

    @classmethod
    def from_sources(cls, sources: Sources, **overrides: Any) -> RunOptions:
        """Options from the sources (the declaration, the lock, its path, the ledger), then the overrides
        (None = not given).

        Needs ``command`` among the overrides. Raises UsageError / InputError for what cannot work,
        before anything runs."""
        declaration, lock, lock_path = sources.declaration, sources.lock, sources.lock_path
        command = list(overrides.pop("command", None) or [])
        if not command:
            raise UsageError("no harness command: give it after '--', e.g. execsys run -- lm_eval --model ...")
        cwd = Path(first_given(overrides.pop("cwd", None), Path.cwd()) or Path.cwd()).absolute()
        program = command[0]
        found = shutil.which(program, path=os.environ.get("PATH")) if os.sep not in program else \
            (program if os.access(cwd / program, os.X_OK) else None)
        if not found:
            raise InputError(f"harness command not found: {program!r} (not on PATH, or not executable)")
        if lock is None:  # the run will pin and write it: a lock path that cannot take it is said now
            from execsys.fsutil import check_output

            check_output(lock_path, "the lock")
        gate = first_given(overrides.pop("gate", None), "fail")
        if gate not in GATES:
            raise UsageError(f"--gate {gate!r}: one of {', '.join(GATES)} (fail is the default)")
        override = overrides.pop("override", None)
        if override is not None and not str(override).strip():
            raise UsageError("--override needs a reason: --override 'engine restarted by ops, port checked'")
        watch_s = first_given(overrides.pop("watch_s", None), DEFAULT_WATCH_S)
        if watch_s is None or not 0 <= watch_s <= MAX_WAIT_S:
            # inf (or a year) would be a watch that never looks: say 0 to turn it off
            raise UsageError(f"--watch {watch_s}: seconds between observations, 0 (off) to {MAX_WAIT_S:g}")
        results = [str(r) for r in overrides.pop("results", None) or []]
        for pattern in results:
            _check_result_pattern(pattern, cwd)
        sidecar_dir = overrides.pop("sidecar_dir", None)
        if sidecar_dir is not None:
            sidecar_dir = Path(sidecar_dir).expanduser().absolute()
            if not sidecar_dir.is_dir():
                raise InputError(f"--sidecar-dir {sidecar_dir}: no such directory")
        options = cls(command=command, declaration=declaration, lock=lock, lock_path=Path(lock_path).absolute(),
                      gate=cast(GateMode, gate), override=str(override).strip() if override else None,
                      repin=bool(overrides.pop("repin", None) or False), watch_s=float(watch_s),
                      results=results, sidecar_dir=sidecar_dir, cwd=cwd,
                      child_stdout_to_stderr=bool(overrides.pop("child_stdout_to_stderr", None) or False))
        grace = overrides.pop("grace_s", None)
        if grace is not None:
            options.grace_s = float(grace)
        options.job = overrides.pop("job", None)
        options.ledger = sources.ledger_path
        options.sign_key, options.signer = signing_key(overrides.pop("sign_key", None), declaration)
        from execsys.run.shard import shard_from

        # the scheduler's variables are read where the run starts: a sharded job sets them per task
        environ = overrides.pop("environ", None)
        options.shard = shard_from(overrides.pop("shard", None), os.environ if environ is None else environ)
        if overrides:
            raise TypeError(f"unknown run option(s): {', '.join(sorted(overrides))}")
        return options


def signing_key(given: str | os.PathLike[str] | None, declaration: Declaration) -> tuple[Path | None, Any]:
    """The receipts' key (``--sign-key``, else the declaration's ``[receipts] key``) and its signer,
    loaded now: a key that cannot sign is one line and exit 2 before the run, not a receipt missing
    after it. (None, None) when no key is given: the receipts are unsigned, and say so."""
    key = first_given(given, declaration.get("receipts", "key"))
    if key is None:
        return None, None
    if not str(key).strip():
        raise UsageError("--sign-key needs a key file (an Ed25519 or ECDSA PEM private key)")
    from execsys.receipt import load_signer

    path = Path(os.path.expanduser(str(key))).absolute()
    return path, load_signer(path)


def _check_result_pattern(pattern: str, cwd: Path) -> None:
    """A ``--result`` whose directory does not exist can never match: a typo, said now, not after the run."""
    if not pattern.strip():
        raise UsageError("--result needs a path or a glob")
    path = Path(os.path.expanduser(pattern))
    path = path if path.is_absolute() else cwd / path
    if glob.has_magic(pattern):
        directory = Path(*_until_magic(path.parts))
        if not directory.is_dir():
            raise InputError(f"--result {pattern}: directory {directory} does not exist")
        from execsys.run.results import check_pattern_finishes

        check_pattern_finishes(str(path))  # before anything is written: a glob without end is refused
    elif not path.parent.is_dir():
        raise InputError(f"--result {pattern}: directory {path.parent} does not exist")


def _until_magic(parts: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for part in parts:
        if glob.has_magic(part):
            break
        out.append(part)
    return out
