"""What every node-check mode shares: the environment to inspect, one doctor run, the worst finding.

Daemons start their check programs with almost no environment (slurmd hands a HealthCheckProgram
only ``SLURMD_NODENAME``: no PATH, no HOME). A doctor run there would find no ``python3`` on an
empty PATH and report ``ok`` about nothing. So a node check first chooses the environment it
inspects, and says which in its evidence:

1. ``--env-from pid:N`` (the serving process's own environment) or ``--env-from FILE`` (an env
   file, ``KEY=VALUE`` lines or a NUL-separated ``/proc/N/environ`` copy);
2. ``--path P`` sets PATH in it (or in the default environment);
3. otherwise the declaration's ``[environment] variables`` over this process's environment, with
   PATH from there, else this process's PATH, else :data:`DEFAULT_PATH`.

An environment whose PATH is still empty is "could not check" (exit 2 class), never ``ok``.

The doctor itself runs unchanged (``execsys.doctor.runner.run_local``); this module reduces its
report to a :class:`Verdict` (``ok``/``fail``/``unknown`` and one line of at most
:data:`LINE_LIMIT` bytes) and hands it to the mode, which decides the exit code, what to log and
whether to drain. Everything is bounded: the doctor's own deadline, the drain's timeout, and a
budget (:data:`BUDGET_S`) well inside Slurm's 60 s kill.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from execsys.doctor.context import DoctorOptions
from execsys.doctor.model import HazardResult, HostReport
from execsys.doctor.node_checks import registry
from execsys.doctor.sysinfo import node_name, parse_environ

from execsys.errors import InputError, UsageError
from execsys.operation import Event, OnEvent, emit, new_cancel
from execsys.redact import redact_text, scrub
from execsys.termsafe import shown

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity

__all__ = ["BUDGET_S", "DEFAULT_PATH", "LINE_LIMIT", "NodeCheckOptions", "NodeCheckReport", "Outcome",
           "Verdict", "fit_line", "inspected_environment", "run_node_check", "unknown_report"]

SCHEMA = "execsys.node-check/1"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH inspected when neither the flags, the declaration nor the process give one (Debian's
root PATH: where a node's python3, nvidia-smi and engines are installed system-wide)."""
LINE_LIMIT = 80
"""NPD's default ``max_output_length``: every mode's line fits it, so a Slurm Reason stays short too."""
BUDGET_S = 40.0
"""The whole node check, drain included, ends within this: Slurm kills a HealthCheckProgram at 60 s."""
DRAIN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class InspectedEnvironment:
    """The environment the doctor looks at, and where it came from (shown in the evidence)."""

    variables: dict[str, str]
    source: str
    path_source: str

    @property
    def path(self) -> str:
        return self.variables.get("PATH", "")

    def evidence(self) -> str:
        return f"environment: {self.source}; PATH from {self.path_source}: {self.path or '(empty)'}"


@dataclass(frozen=True)
class Verdict:
    """The worst finding: ``ok``, ``fail`` (a failing hazard, or a warning under --strict) or
    ``unknown`` (execsys could not check), and its one line."""

    level: str
    line: str
    hazard: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What a mode makes of a verdict: the exit code, the stdout line, a log line, whether to drain."""

    exit_code: int
    line: str
    log: str | None = None
    drain: bool = False


@dataclass(frozen=True)
class NodeCheckStarted(Event):
    mode: str
    environment: str


@dataclass(frozen=True)
class HazardChecked(Event):
    result: HazardResult


@dataclass(frozen=True)
class NodeDrained(Event):
    node: str
    argv: tuple[str, ...]
    returncode: int | None
    output: str


@dataclass
class NodeCheckOptions:
    """A node check: the mode, the doctor's options, and which environment to inspect."""

    mode: str
    doctor: DoctorOptions
    drain: bool = False
    path: str | None = None
    env_from: str | None = None
    declared_env: dict[str, str] = field(default_factory=dict)
    node_name: str | None = None
    budget_s: float = BUDGET_S

    @classmethod
    def from_sources(cls, declaration: Declaration | None = None, lock: Identity | None = None, *,
                     mode: str, drain: bool | None = None, path: str | None = None,
                     env_from: str | None = None, node_name: str | None = None,
                     **doctor_overrides: Any) -> NodeCheckOptions:
        """Flags over the declaration. UsageError for an unknown mode, ``--drain`` outside the slurm
        mode, a malformed ``--env-from``, or a ``--timeout`` that could not finish inside the budget."""
        del lock  # a node check inspects the environment; the pinned identity is not needed
        if mode not in registry.IDS:
            raise UsageError(f"unknown --node-check mode {mode!r} (known: {', '.join(registry.IDS)})")
        if drain and mode != "slurm":
            raise UsageError("--drain applies only to --node-check slurm (a Prolog's exit code drains already)")
        if env_from is not None:
            _parse_env_from(env_from)
        if path is not None and not path.strip(":").strip():
            raise UsageError("--path is empty: a node check never inspects an empty PATH")
        doctor = DoctorOptions.from_sources(declaration, None, **doctor_overrides)
        doctor.hosts = []  # a node check is about this node; the fleet view adds the nodes up
        # Daemons and batch jobs run no interactive shell, so an alias shadows nothing they run; and
        # `bash -i` would source the rc files (pyenv or conda init: 0.2-0.5 CPU-s) on every check.
        doctor.shell_aliases = False
        doctor.evidence_digests = False
        options = cls(mode=mode, doctor=doctor, drain=bool(drain), path=path, env_from=env_from,
                      declared_env=dict(doctor.declared_env),
                      node_name=node_name or os.environ.get("SLURMD_NODENAME") or None)
        if options.doctor_deadline() + DRAIN_TIMEOUT_S > options.budget_s:
            raise UsageError(f"--timeout {doctor.timeout:g}: a node check must end within {options.budget_s:.0f} s "
                             f"(Slurm kills it at 60 s); use at most {_max_timeout(options.budget_s):g}")
        return options

    def doctor_deadline(self) -> float:
        from execsys.doctor.runner import hazard_deadline

        return hazard_deadline(self.doctor) + 2.0  # host facts are joined for up to 2 s more

    @property
    def host_name(self) -> str:
        return self.node_name or node_name()


def _max_timeout(budget: float) -> float:
    return max(0.5, (budget - DRAIN_TIMEOUT_S - 2.0 - 5.0) // 3)


@dataclass
class NodeCheckReport:
    """One node check: the mode's exit code and line, the environment inspected, the doctor report."""

    mode: str
    exit_code: int
    line: str
    status: str
    hazard: str | None
    environment: dict[str, str]
    host: HostReport | None = None
    log: str | None = None
    drain: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The whole report, redacted (the doctor's evidence and the environment's source name files
        and values from the node; ``--json`` is written as it is, past the console's redactor)."""
        return scrub({"schema": SCHEMA, "mode": self.mode, "exit_code": self.exit_code, "status": self.status,
                "line": self.line, "hazard": self.hazard, "environment": dict(self.environment),
                "log": self.log, "drain": self.drain,
                "doctor": self.host.to_json() if self.host is not None else None})


def fit_line(text: str, limit: int = LINE_LIMIT) -> str:
    """One line of at most ``limit`` UTF-8 bytes (NPD cuts there; a Slurm Reason should be short),
    redacted and terminal-safe: it names paths and summaries from the node (an ``--env-from`` path,
    a hazard's evidence) and goes to NPD, syslog, a Slurm Reason and a terminal as it is."""
    line = shown(" ".join(redact_text(text).split()))
    data = line.encode("utf-8")
    if len(data) <= limit:
        return line
    return data[: limit - 3].decode("utf-8", "ignore").rstrip() + "..."


def _parse_env_from(spec: str) -> tuple[str, int | str]:
    if spec.startswith("pid:"):
        try:
            pid = int(spec[4:])
        except ValueError:
            raise UsageError(f"--env-from {spec!r}: pid:N needs a process id") from None
        if pid <= 0:
            raise UsageError(f"--env-from {spec!r}: pid:N needs a process id")
        return "pid", pid
    if not spec.strip():
        raise UsageError("--env-from is empty: give FILE or pid:N")
    return "file", spec


class CannotCheck(Exception):
    """The node check could not choose an environment to inspect: an exit-2-class problem."""


def read_env_file(path: str) -> dict[str, str]:
    """``KEY=VALUE`` lines (comments, ``export``, quotes) or a NUL-separated ``/proc/N/environ`` copy.

    Read once, bounded: a FIFO, ``/dev/zero`` or a file over the env-file cap is an InputError (the
    check's "could not check"), never a read that lasts until the watchdog fires."""
    from execsys.fsutil import ENV_FILE_LIMIT, read_bounded

    raw = read_bounded(path, ENV_FILE_LIMIT, "--env-from file")
    if b"\0" in raw:
        return parse_environ(raw)
    from execsys.doctor.hazards.unread_env_config import parse_env_text

    return parse_env_text(raw.decode("utf-8"))


def inspected_environment(options: NodeCheckOptions, process_env: dict[str, str] | None = None
                          ) -> InspectedEnvironment:
    """The environment the doctor inspects (see the module docstring); CannotCheck when none can be read
    or its PATH is empty."""
    own = dict(os.environ if process_env is None else process_env)
    if options.env_from is not None:
        kind, value = _parse_env_from(options.env_from)
        try:
            if kind == "pid":
                from execsys.doctor import sysinfo

                variables = sysinfo.process_environ(int(value))
            else:
                variables = read_env_file(str(value))
        except InputError as exc:
            raise CannotCheck(str(exc)) from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise CannotCheck(f"cannot read --env-from {options.env_from}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from exc
        source = f"--env-from {options.env_from}"
        path_source = source
    else:
        variables = {**own, **options.declared_env}
        declared_path = options.declared_env.get("PATH", "").strip(":")
        source = ("the declaration's [environment] variables over this process's environment"
                  if options.declared_env else "this process's environment")
        if declared_path:
            path_source = "the declaration's [environment] variables"
        elif own.get("PATH", "").strip(":"):
            variables["PATH"] = own["PATH"]  # a declared PATH of only colons is none: not over this one
            path_source = "this process's environment"
        else:
            variables["PATH"] = DEFAULT_PATH
            path_source = "the default PATH (none was given: daemons pass no PATH)"
    if options.path is not None:
        variables["PATH"] = options.path
        path_source = "--path"
    if not variables.get("PATH", "").strip(":").strip():
        raise CannotCheck(f"PATH is empty in {path_source}; give --path or --env-from")
    return InspectedEnvironment(variables, source, path_source)


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """The hazards read ``os.environ`` (PATH, VIRTUAL_ENV, PIP_*...) as they would under the daemon's
    program: for one node check -- a process of its own -- the process environment is the inspected one."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(variables)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def verdict(host: HostReport, strict: bool, host_name: str) -> Verdict:
    """The worst finding of one doctor run, as one line."""
    failed = [r for r in host.hazards if r.status == "fail"]
    if strict:
        failed += [r for r in host.hazards if r.status == "warn"]
    if failed:
        worst = failed[0]
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        head = f"{worst.status} {worst.id}: "
        body = fit_line(worst.summary, LINE_LIMIT - len(head.encode()) - len(more.encode()))
        return Verdict("fail", head + body + more, worst.id)
    errors = [r for r in host.hazards if r.status == "error"]
    if errors or host.error:
        worst_id = errors[0].id if errors else None
        text = f"unknown {worst_id}: {errors[0].summary}" if errors else f"unknown: {host.error}"
        return Verdict("unknown", fit_line(text), worst_id)
    warnings = len(host.warnings)
    note = f" ({warnings} warn)" if warnings else ""
    return Verdict("ok", fit_line(f"ok: {len(host.hazards)} hazards clear on {host_name}{note}"))


def unknown_report(mode: str, reason: str, environment: dict[str, str] | None = None) -> NodeCheckReport:
    """The report of a node check that could not check at all (bad flags or declaration included),
    already decided by the mode: a Prolog fails open on it."""
    v = Verdict("unknown", fit_line(f"unknown: {reason}"))
    outcome = registry.load(mode).outcome(v, drain_requested=False)
    return NodeCheckReport(mode, outcome.exit_code, outcome.line, v.level, None,
                           environment or {}, None, outcome.log, None)


def drain_node(node: str, line: str, timeout: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
    """``scontrol update NodeName=<node> State=DRAIN Reason="execsys: <line>"``, bounded by ``timeout``.

    Run with this process's environment (``SLURM_CONF`` included), with the default PATH appended:
    slurmd gives its programs no PATH, and scontrol lives in /usr/bin."""
    search = os.pathsep.join(p for p in (os.environ.get("PATH", ""), DEFAULT_PATH) if p)
    scontrol = shutil.which("scontrol", path=search)
    reason = f"execsys: {line}"
    argv = [scontrol or "scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]
    if scontrol is None:
        return {"node": node, "argv": argv, "returncode": None, "output": f"scontrol not found on {search}"}
    env = {**os.environ, "PATH": search}
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                              env=env)
        output = (proc.stdout + proc.stderr).strip()
        return {"node": node, "argv": argv, "returncode": proc.returncode, "output": output}
    except subprocess.TimeoutExpired:
        return {"node": node, "argv": argv, "returncode": None, "output": f"scontrol did not answer in {timeout:g} s"}
    except OSError as exc:
        return {"node": node, "argv": argv, "returncode": None, "output": f"cannot run scontrol: {exc.strerror}"}


def run_node_check(options: NodeCheckOptions, on_event: OnEvent | None = None,
                   cancel: threading.Event | None = None) -> NodeCheckReport:
    """One doctor run on this node in the chosen environment, decided by the mode; never prints."""
    from execsys.doctor.runner import HazardChecked as DoctorHazardChecked
    from execsys.doctor.runner import run_local

    cancel = new_cancel(cancel)
    mode = registry.load(options.mode)
    try:
        env = inspected_environment(options)
    except CannotCheck as exc:
        return unknown_report(options.mode, str(exc))
    environment = {"source": env.source, "path_source": env.path_source, "path": env.path}
    emit(on_event, NodeCheckStarted(options.mode, env.evidence()))
    doctor = options.doctor
    if doctor.venvs is None:
        # execsys's own install is not the environment under check: only the inspected one's venv
        doctor = replace(doctor, venvs=[env.variables["VIRTUAL_ENV"]] if env.variables.get("VIRTUAL_ENV") else [])
    with _environment(env.variables):
        host = run_local(doctor, cancel=cancel,
                         on_event=lambda event: emit(on_event, HazardChecked(event.result))
                         if isinstance(event, DoctorHazardChecked) else None)
    host.host.setdefault("name", options.host_name)
    host.host["environment"] = env.evidence()
    v = verdict(host, doctor.strict, options.host_name)
    outcome = mode.outcome(v, drain_requested=options.drain)
    drained = None
    if outcome.drain:
        if options.node_name:
            drained = drain_node(options.node_name, outcome.line)
        else:
            drained = {"node": None, "argv": [], "returncode": None,
                       "output": "SLURMD_NODENAME is not set: cannot name the node to drain"}
        emit(on_event, NodeDrained(drained["node"] or "", tuple(drained["argv"]), drained["returncode"],
                                   drained["output"]))
    return NodeCheckReport(options.mode, outcome.exit_code, outcome.line, v.level, v.hazard, environment,
                           host, outcome.log, drained)

