"""What the doctor looks at: options from flags, ``execsys.toml`` and GPU-box defaults.

``DoctorOptions`` is plain, JSON-serialisable data (it travels to remote hosts).
A list left as ``None`` means "not declared": the ``Context`` on the host being
inspected then fills in what matters on a GPU box -- the usual interpreters and
tools plus any engine command on PATH, the ports engine processes listen on,
the active virtual environment, the git repository of the current directory.
Defaults are worked out on each host, because each host has its own PATH.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from execsys.doctor import files, sysinfo

if TYPE_CHECKING:  # never imported at run time: this module also runs on remote hosts, stdlib only
    from execsys.declaration import Declaration
    from execsys.identity import Identity

DEFAULT_COMMANDS = ("python3", "python", "pip", "pip3", "git", "nvidia-smi")
DEFAULT_TIMEOUT = 3.0
DEFAULT_CLOCK_SKEW_THRESHOLD_MS = 250.0


@dataclass
class DoctorOptions:
    """Everything a doctor run needs; ``None`` lists are filled with defaults on each host."""

    commands: list[str] | None = None
    ports: list[int] | None = None
    paths: list[str] | None = None
    venvs: list[str] | None = None
    repos: list[str] | None = None
    env_file: str | None = None
    pid: int | None = None
    process: str | None = None
    layers: list[str] | None = None
    # Layers an untrusted declaration names: never run, shown in the skip (``untrusted`` is its line).
    withheld_layers: list[str] = field(default_factory=list)
    # [doctor] commands/pins named by a path (``./tool``): the doctor would start them; withheld the same way
    withheld_commands: list[str] = field(default_factory=list)
    untrusted: str | None = None
    hosts: list[str] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    strict: bool = False
    timeout: float = DEFAULT_TIMEOUT
    host_timeout: float | None = None
    max_parallel_hosts: int = 8
    clock_skew_threshold_ms: float = DEFAULT_CLOCK_SKEW_THRESHOLD_MS
    pins: dict[str, dict[str, str]] = field(default_factory=dict)
    declared_env: dict[str, str] = field(default_factory=dict)
    artifact_path: str | None = None
    engine: str | None = None
    endpoint_port: int | None = None
    endpoint: str | None = None  # [runtime] endpoint as declared (model-name-honesty asks it)
    api_key_env: str | None = None
    config_path: str | None = None
    # binary-aliasing asks the operator's interactive shell (bash -i sources the rc files) for aliases
    # and functions; a node check runs under a daemon, where no interactive shell ever runs
    shell_aliases: bool = True
    # binary-aliasing shows each program's digest; a node check hashes only where a digest decides a
    # finding (two programs by one name, a pinned digest): it runs every 30-60 s on every node
    evidence_digests: bool = True

    accept: list[str] = field(default_factory=list)

    @classmethod
    def from_sources(cls, declaration: Declaration | None = None, lock: Identity | None = None,
                     **overrides: Any) -> DoctorOptions:
        """Options from their sources: ``overrides`` (flags, a TUI form) > ``declaration`` > ``lock``.

        ``declaration`` is a loaded ``execsys.toml`` (``execsys.declaration.Declaration``) or None;
        ``lock`` the pinned ``execsys.identity.Identity`` or None -- it fills in only what the
        declaration leaves open (the artifact path, the engine, its process and endpoint as pinned).
        An override of ``None`` is "not given" and leaves the declared value alone, so CLI flags can be
        passed straight in. Everything is validated here (:meth:`validate`): a bad flag or declared
        value raises ``UsageError``/``InputError`` naming it, before any check runs."""
        opts = cls._from_declaration(declaration)
        if lock is not None:
            opts._fill_from_lock(lock)
        for key, value in overrides.items():
            if not hasattr(opts, key):
                raise TypeError(f"unknown doctor option {key!r}")
            if value is None:
                continue
            if key == "pins":
                value = normalise_pins(value)
            setattr(opts, key, value)
        if overrides.get("layers") is not None:
            opts.withheld_layers = []  # --layer: the operator's own commands, which replace the declared ones
        if overrides.get("commands") is not None:
            opts.withheld_commands = []  # --cmd, likewise
        if not opts.withheld_layers and not opts.withheld_commands:
            opts.untrusted = None
        if overrides.get("pid") is not None and overrides.get("process") is None:
            opts.process = None  # an explicit --pid wins over a declared process name
        opts.validate_flags(overrides)
        opts.validate()
        return opts

    @classmethod
    def _from_declaration(cls, decl: Declaration | None) -> DoctorOptions:
        opts = cls()
        if decl is None:
            return opts
        get = decl.get
        doctor = decl.tables.get("doctor", {})
        opts.commands = _strs(doctor.get("commands"))
        try:
            opts.ports = _ints(doctor.get("ports"))
        except (TypeError, ValueError):
            from execsys.errors import InputError

            raise InputError(f"{decl.path}: [doctor] ports must be a list of port numbers, "
                             f"not {doctor.get('ports')!r}") from None
        opts.paths = _strs(doctor.get("paths"))
        opts.venvs = _strs(doctor.get("venvs"))
        opts.repos = _strs(doctor.get("repos"))
        if opts.repos is None and get("harness", "repo"):
            opts.repos = [str(get("harness", "repo"))]
        opts.layers = _strs(doctor.get("layers")) or _strs(get("environment", "layers"))
        opts.hosts = _strs(doctor.get("hosts")) or _strs(get("environment", "hosts")) or []
        opts.accept = _strs(doctor.get("accept")) or []
        if doctor.get("timeout") is not None:
            opts.timeout = float(doctor["timeout"])
        if doctor.get("clock_skew_threshold_ms") is not None:
            opts.clock_skew_threshold_ms = float(doctor["clock_skew_threshold_ms"])
        opts.pins = normalise_pins(doctor.get("pins") or {})
        opts.env_file = get("runtime", "env_file") or get("environment", "env_file")
        opts.declared_env = {str(k): str(v) for k, v in (get("environment", "variables") or {}).items()}
        opts.artifact_path = get("artifact", "path")
        opts.engine = get("runtime", "engine")
        opts.process = get("runtime", "process")
        opts.endpoint_port = endpoint_port(get("runtime", "endpoint"))
        opts.endpoint, opts.api_key_env = get("runtime", "endpoint"), get("runtime", "api_key_env")
        if opts.ports is None and opts.endpoint_port:
            opts.ports = [opts.endpoint_port]
        if not getattr(decl, "trusted", True):
            opts._withhold_commands(decl)
        base = os.path.dirname(str(decl.path)) if getattr(decl, "path", None) else ""
        opts.config_path = str(decl.path) if getattr(decl, "path", None) else None
        opts._resolve_relative(base)
        return opts

    def _withhold_commands(self, decl: Declaration) -> None:
        """From a declaration the user has not trusted, what the doctor would start is never run: the
        layers (each is a command prefix) and the commands and pins named by a path (a program shipped
        beside the declaration; a bare name is found on the operator's own PATH)."""
        from execsys import trust

        hint = trust.hint(decl.path)
        if self.layers:
            self.withheld_layers, self.layers, self.untrusted = self.layers, None, hint
        by_path = [name for name in [*(self.commands or []), *self.pins] if "/" in name or os.sep in name]
        if by_path:
            self.withheld_commands = list(dict.fromkeys(by_path))
            if self.commands is not None:
                self.commands = [name for name in self.commands if name not in by_path]
            self.pins = {name: pin for name, pin in self.pins.items() if name not in by_path}
            self.untrusted = hint

    def _fill_from_lock(self, lock: Identity) -> None:
        """What the pinned identity declared, where the declaration is silent (the lowest layer)."""
        def pinned(component: str, key: str) -> Any:
            value = (lock.components.get(component) or {}).get("declared", {}).get(key)
            return value if isinstance(value, str) and value else None

        base = str((getattr(lock, "declaration", None) or {}).get("base_dir") or "")
        if self.artifact_path is None and pinned("artifact", "path"):
            path = str(pinned("artifact", "path"))
            absolute = "://" in path or os.path.isabs(path) or not base
            self.artifact_path = path if absolute else os.path.normpath(os.path.join(base, path))
        self.engine = self.engine or pinned("runtime", "engine")
        self.process = self.process or pinned("runtime", "process")
        self.endpoint = self.endpoint or pinned("runtime", "endpoint")
        if self.endpoint_port is None:
            self.endpoint_port = endpoint_port(pinned("runtime", "endpoint"))
            if self.ports is None and self.endpoint_port:
                self.ports = [self.endpoint_port]

    def validate_flags(self, given: dict[str, Any]) -> None:
        """UsageError naming the flag for values given as overrides (``--only``, ``--host``, ``--layer``)."""
        from execsys.doctor import registry

        from execsys.errors import UsageError

        for hazard_id in given.get("only") or []:
            if hazard_id not in registry.IDS:
                raise UsageError(f"unknown hazard {hazard_id!r} for --only (known: {', '.join(registry.IDS)})")
        for dest in given.get("hosts") or []:
            from execsys.ssh import Destination  # here, not above: a node check names no host

            try:
                Destination.parse(dest)
            except ValueError as exc:
                raise UsageError(f"--host: {exc}") from None
        for layer in given.get("layers") or []:
            try:
                layer_argv(layer)
            except ValueError as exc:
                raise UsageError(f"--layer {layer!r}: not a command prefix ({exc})") from None

    def validate(self) -> None:
        """InputError naming the first option that cannot work (from the flags or execsys.toml), before
        any check runs: a port outside 1-65535, a timeout or threshold not above 0, a host that is no ssh
        destination ('-oProxyCommand=...' is refused here, not passed to ssh), an empty layer."""
        from execsys.errors import InputError

        where = f" ({self.config_path})" if self.config_path else ""
        for port in self.ports or []:
            if not 1 <= port <= 65535:
                raise InputError(f"port {port}: out of range 1-65535{where}")
        if not self.timeout > 0:
            raise InputError(f"doctor timeout {self.timeout}: must be greater than 0{where}")
        if not self.clock_skew_threshold_ms > 0:
            raise InputError(f"clock skew threshold {self.clock_skew_threshold_ms} ms: must be greater than 0{where}")
        for dest in self.hosts:
            from execsys.ssh import Destination  # here, not above: a node check names no host

            try:
                Destination.parse(dest)
            except ValueError as exc:
                raise InputError(f"host: {exc}{where}") from None
        for layer in [*(self.layers or []), *self.withheld_layers]:  # malformed is malformed, trusted or not
            try:
                layer_argv(layer)
            except ValueError as exc:
                raise InputError(f"layer {layer!r}: not a command prefix ({exc}){where}") from None
        from execsys.doctor import registry

        known = registry.finding_ids()
        for finding_id in self.accept:
            if finding_id not in known:
                hazard = finding_id.split("/", 1)[0]
                hint = (f"known for {hazard}: {', '.join(sorted(i for i in known if i.startswith(hazard + '/')))}"
                        if hazard in registry.IDS else "ids are <hazard>/<kind>, as `execsys doctor -v` shows them")
                raise InputError(f"[doctor] accept: unknown finding id {finding_id!r} ({hint}){where}")

    def _resolve_relative(self, base: str) -> None:
        """Paths in execsys.toml are relative to the file, not to wherever the doctor was started."""
        if not base:
            return

        def fix(p: str) -> str:
            return p if os.path.isabs(p) or p.startswith("~") else os.path.normpath(os.path.join(base, p))

        for name in ("paths", "venvs", "repos"):
            value = getattr(self, name)
            if value:
                setattr(self, name, [fix(p) for p in value])
        if self.env_file:
            self.env_file = fix(self.env_file)
        if self.artifact_path and "://" not in self.artifact_path:
            self.artifact_path = fix(self.artifact_path)

    def to_payload(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> DoctorOptions:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def for_remote(self) -> DoctorOptions:
        """What a remote host is asked to check: the same declaration, minus the local-only parts."""
        remote = dataclasses.replace(self, hosts=[], layers=None, withheld_layers=[], config_path=None)
        return remote

    @property
    def effective_host_timeout(self) -> float:
        return self.host_timeout if self.host_timeout is not None else max(30.0, self.timeout * 8)


def endpoint_port(endpoint: Any) -> int | None:
    if not endpoint:
        return None
    try:
        parts = urlsplit(str(endpoint) if "://" in str(endpoint) else f"http://{endpoint}")
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def normalise_pins(raw: Any) -> dict[str, dict[str, str]]:
    """``{name: "/path" | "blake3:..." | {path=, digest=}}`` -> ``{name: {"path"?, "digest"?}}``."""
    out: dict[str, dict[str, str]] = {}
    for name, value in dict(raw).items():
        pin: dict[str, str] = {}
        if isinstance(value, dict):
            pin = {k: str(v) for k, v in value.items() if k in ("path", "digest") and v}
        elif isinstance(value, str):
            if value.startswith(("blake3:", "sha256:")) or (len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
                pin["digest"] = value if ":" in value else f"blake3:{value}"
            else:
                pin["path"] = value
        if pin:
            out[str(name)] = pin
    return out


def layer_argv(layer: str) -> list[str]:
    """A layer ("ssh gpu1", "docker exec -i box") as the argv prefix it stands for; ValueError when it is
    empty or not shell-quoted correctly."""
    import shlex

    words = shlex.split(layer)
    if not words:
        raise ValueError("empty")
    return words


def _strs(value: Any) -> list[str] | None:
    return None if value is None else [str(v) for v in value]


def _ints(value: Any) -> list[int] | None:
    return None if value is None else [int(v) for v in value]


class Context:
    """One host's view of the options, with defaults resolved lazily and shared probes memoised."""

    def __init__(self, options: DoctorOptions, cancel: threading.Event | None = None):
        self.options = options
        self.accept = tuple(options.accept)  # the finding ids the operator accepted ([doctor] accept)
        self.cancel = cancel or threading.Event()
        self._lock = threading.Lock()
        self._memo: dict[Any, Any] = {}
        self._key_locks: dict[Any, threading.Lock] = {}

    @property
    def timeout(self) -> float:
        return self.options.timeout

    def memo(self, key: Any, compute):
        """Compute once per key even when several hazard threads ask at the same time."""
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._memo:
                self._memo[key] = compute()
            return self._memo[key]

    def invoke(self, argv: list[str]) -> files.Invocation:
        """A trivial invocation, run once per program for all hazards (``python3 --version`` etc.).

        Two names for one program are started once: symlinks to one file by real path, and pip-style
        console scripts (``pip``/``pip3``) by content, since they never look at their own name. Other
        scripts with equal content are not merged: pyenv/asdf shims and busybox dispatch on ``$0``.
        """
        path = argv[0]
        key: object = os.path.realpath(path)
        try:
            if files.entry_point(path):
                key = files.digest(path)
        except OSError:
            pass
        if argv[1:] == ["--version"]:
            return self.memo(("version", key), lambda: self._version(path))
        return self.memo(("invoke", key, tuple(argv[1:])), lambda: files.bounded_run(argv, self.timeout))

    def _version(self, path: str) -> files.Invocation:
        ep = files.entry_point(path)
        if ep is not None and os.path.exists(ep.interpreter):
            answer = files.entry_answer(self.python_facts(ep.interpreter), ep, path)
            if answer is not None:
                return answer
        return files.version_invocation(path, self.timeout)

    def python_facts(self, interpreter: str) -> files.Invocation:
        """One run of ``interpreter`` answering what every hazard asks it (``files.PYTHON_PROBE``): its
        prefixes and distributions, and where the entry module of each console script it runs is.

        The scripts are the first match on PATH of each command checked (and pip/pip3, which
        package-prefixes asks) whose shebang names this interpreter; any other one's ``--version``
        runs on its own."""
        def run() -> files.Invocation:
            modules: list[str] = []
            for name in dict.fromkeys([*self.commands(), "pip", "pip3"]):
                found = files.which_all(name)
                ep = files.entry_point(found[0]) if found else None
                if ep is not None and os.path.abspath(ep.interpreter) == os.path.abspath(interpreter):
                    modules.append(ep.module)
            wanted = sorted(set(modules))
            facts = files.python_facts(interpreter, wanted, self.timeout)
            if facts.timed_out and not self.cancel.is_set():
                # Once more: every hazard that reads an interpreter hangs on this one start, and a
                # loaded host (a cold page cache, a dozen checks starting at once) can stretch a
                # 0.2 s start past the timeout once; a hung interpreter misses it twice. Two tries
                # stay inside the check's deadline (3 timeouts and slack).
                facts = files.python_facts(interpreter, wanted, self.timeout)
                facts.attempts = 2
            return facts

        return self.memo(("python-facts", os.path.abspath(interpreter)), run)

    # -- defaults ---------------------------------------------------------
    @property
    def commands_explicit(self) -> bool:
        return self.options.commands is not None

    def commands(self) -> list[str]:
        if self.options.commands is not None:
            return list(dict.fromkeys(self.options.commands))
        engines = [c for c in sysinfo.ENGINE_COMMANDS if files.which_all(c)]
        return list(dict.fromkeys([*DEFAULT_COMMANDS, *engines, *self.options.pins]))

    def engine_processes(self) -> list[sysinfo.ProcessInfo]:
        return self.memo("engine-processes", sysinfo.engine_processes)

    def ports(self) -> list[int]:
        if self.options.ports is not None:
            return list(dict.fromkeys(self.options.ports))

        def _engine_ports() -> list[int]:
            pids = {p.pid for p in self.engine_processes()}
            if not pids:
                return []
            found, _ = self.listeners()
            return sorted({lst.port for lst in found if pids & set(lst.pids)})

        return self.memo("engine-ports", _engine_ports)

    def listeners(self, ports: list[int] | None = None) -> tuple[list[sysinfo.Listener], int]:
        """``sysinfo.listeners(ports)``, reusing the full table when the default ports already read it:
        the walk over every process's fds is the costly part, and one run needs it once."""
        if ports is None:
            found, hidden = self.memo("listeners", sysinfo.listeners)
            return list(found), hidden
        if "listeners" not in self._memo:
            return sysinfo.listeners(ports)
        found, hidden = self._memo["listeners"]
        wanted = [lst for lst in found if lst.port in ports]
        return wanted, hidden if wanted else 0

    def venvs(self) -> list[str]:
        if self.options.venvs is not None:
            return [os.path.expanduser(v) for v in self.options.venvs]
        active = os.environ.get("VIRTUAL_ENV")
        if active:
            return [active]
        if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
            return [sys.prefix]
        return []

    def repos(self) -> list[str]:
        if self.options.repos is not None:
            return [os.path.expanduser(r) for r in self.options.repos]

        def _cwd_repo() -> list[str]:
            inv = files.bounded_run(["git", "rev-parse", "--show-toplevel"], self.timeout)
            return [inv.output.strip()] if inv.ok and inv.output.strip() else []

        return self.memo("cwd-repo", _cwd_repo)

    def paths(self) -> list[str]:
        return [os.path.expanduser(p) for p in (self.options.paths or [])]

    def layers(self) -> list[str]:
        return list(self.options.layers or [])
