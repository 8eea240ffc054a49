"""One observation of the serving runtime, as ``execsys run``'s watch and every probe pass take it.

What the endpoint says about itself (model list, ``system_fingerprint``, server version and build),
which model answers a one-token request for the first listed one (a router re-pointing an alias keeps
the list and changes that answer), and the process listening on its port (pid, start time, argv,
numerics environment), flattened to ``{"runtime.<field>": value}`` so that two observations -- or an
observation and the lock -- compare field by field. :func:`changes` lists what differs between two.
"""

from __future__ import annotations

from typing import Any

# Facts that may be absent on one tick for reasons that are not a change (the engine gives no
# fingerprint under load): compared only when both observations have a value.
OPTIONAL = {"runtime.endpoint.system_fingerprint", "runtime.endpoint.answered_model"}


class ServingObserver:
    """One observation of the serving runtime per call, flattened to ``{"runtime.<field>": value}``.

    What a serving process's interpreter says of itself (its engine package's version, its stack)
    is asked once per process -- the listener's pid and start time -- not on every tick: each ask
    spawns that interpreter, and a watch every few seconds would otherwise cost a core. A restart
    is a new process and is asked afresh; a package upgraded on disk under a process that keeps
    running does not change what that process has loaded (verify-after re-reads it anyway).
    """

    def __init__(self, *, completions: bool = True) -> None:
        # completions=False: a probe pass, whose own responses already say which model answered each
        # case and with which fingerprint; a completion of our own there would be one more request
        # the endpoint counts and caches between the probe's cases. Only GETs are sent then.
        self.completions = completions
        self._answers: dict[tuple[Any, Any], Any] = {}

    def __call__(self, declared_runtime: dict[str, Any]) -> dict[str, Any]:
        from execsys.identity import observe_runtime
        from execsys.observe.listener import listener as listener_of
        from execsys.observe.passmemo import Answers, observation_pass

        # scanned first: which process listens decides whose answers this tick re-enters. The scan is
        # taken in a pass of its own, which becomes a new process's answers: its first tick reads the
        # socket table once, not twice (every process's descriptors: 50 ms on a loaded machine)
        fresh = Answers()
        with observation_pass(fresh):
            listener = listener_of(declared_runtime.get("endpoint"))
        answers = self._answers.setdefault((listener.get("pid"), listener.get("started_at")), fresh)
        with observation_pass(answers):
            observed = observe_runtime(declared_runtime, require_endpoint=False, ask_fingerprint=self.completions)
        flat = flatten(observed, listener)
        models = (observed.get("endpoint") or {}).get("models") or []
        if self.completions and models and declared_runtime.get("endpoint"):
            flat["runtime.endpoint.answered_model"] = _answered_model(declared_runtime, str(models[0]))
        return flat


def _answered_model(declared_runtime: dict[str, Any], requested: str) -> str | None:
    """Which model answers a request for the first listed one: a proxy or router re-pointing an alias
    mid-run changes it while the model list stays the same."""
    import os

    from execsys.observe.served import answered_as

    key_env = declared_runtime.get("api_key_env")
    timeout = min(float(declared_runtime.get("ready_timeout") or 5.0), 10.0)
    return answered_as(str(declared_runtime["endpoint"]), requested,
                       api_key=os.environ.get(key_env) if key_env else None, timeout=timeout)


def observe_serving(declared_runtime: dict[str, Any]) -> dict[str, Any]:
    """One observation of the serving runtime, flattened to ``{"runtime.<field>": value}``."""
    return ServingObserver()(declared_runtime)


def flatten(observed: dict[str, Any], listener: dict[str, Any]) -> dict[str, Any]:
    """An observed runtime (as :func:`execsys.identity.observe_runtime` or the lock holds it), with the
    listening process's pid and start time, as ``{"runtime.<field>": value}``."""
    endpoint = observed.get("endpoint") or {}
    process = dict(observed.get("process") or {})
    process.update(listener)
    flat: dict[str, Any] = {"runtime.engine.version": (observed.get("engine") or {}).get("version")}
    for key in ("models", "system_fingerprint", "server_version", "build_info", "openapi", "error"):
        if key in endpoint:
            flat[f"runtime.endpoint.{key}"] = endpoint[key]
    for key in ("pid", "started_at", "exe", "argv", "numerics_env"):
        if key in process:
            flat[f"runtime.process.{key}"] = process[key]
    return flat


def changes(before: dict[str, Any], after: dict[str, Any], at: str) -> list[dict[str, Any]]:
    """Drift events between two observations (a field that appears or disappears counts)."""
    events = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if key in OPTIONAL and (old is None or new is None):
            continue
        if old != new:
            events.append({"at": at, "component": key, "before": old, "after": new})
    return events
