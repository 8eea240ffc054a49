"""The execsys hook for Inspect AI: the pinned identity inside every eval log, checked per model call.

Installed with ``execsys[inspect]`` in the harness's environment and found by Inspect through the
``inspect_ai`` entry point (name ``execsys``); active only when ``EXECSYS_LOCK`` is set, which
``execsys run`` does, so ``execsys run -- inspect eval ...`` needs nothing else. At task start it
writes ``{"execsys": {"identity", "run"}}`` into the eval's metadata. On every completed model event it
compares the response's ``model`` and ``system_fingerprint`` with the pinned runtime and counts
mismatches: a per-call drift check that sampling the endpoint every ``--watch`` seconds cannot do.
Only real answers are compared: a pending event, or an attempt that errored and was retried, carries
Inspect's own placeholder output named with the provider-qualified model (``openai-api/local/tiny``),
which says nothing about what served it; and a served name is compared without that qualifier.
At task end it records the verdict in the log with Inspect's own provenance-preserving edit
(``edit_eval_log``: an entry in ``log_updates``, not a silent rewrite), and reports to ``execsys run``
through ``$EXECSYS_HOOK_DIR``.

Inspect logs exceptions raised in hooks and carries on; this hook also catches its own, so a hook
failure never breaks the user's eval: it is logged, and the run's verdict says the hook could not
record. Only the standard library and inspect_ai are imported: the harness's environment need not
have execsys's dependencies.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any

from inspect_ai.hooks import (  # pyright: ignore[reportMissingImports]  (loaded by Inspect, in its env)
    Hooks,
    SampleEvent,
    TaskEnd,
    TaskStart,
    hooks,
)

from execsys.harnesses.inspect_names import served_model

logger = logging.getLogger(__name__)

LOCK_ENV = "EXECSYS_LOCK"
RUN_ENV = "EXECSYS_RUN_ID"
HOOK_DIR_ENV = "EXECSYS_HOOK_DIR"


def _pinned(lock_path: str) -> dict[str, Any]:
    """The lock's identity id and the pinned runtime's served model names and fingerprint."""
    with open(lock_path, encoding="utf-8") as fh:
        lock = json.load(fh)
    endpoint = (((lock.get("components") or {}).get("runtime") or {}).get("observed") or {}).get("endpoint") or {}
    return {"identity": lock.get("id"), "models": list(endpoint.get("models") or []),
            "system_fingerprint": endpoint.get("system_fingerprint")}


class _TaskState:
    def __init__(self, eval_id: str, task: str) -> None:
        self.eval_id = eval_id
        self.task = task
        self.model_calls = 0
        self.failed_attempts = 0  # attempts that errored (a retry followed, or the call failed)
        self.mismatches = 0
        self.examples: list[dict[str, Any]] = []
        self.seen: set[str] = set()
        self.errors: list[str] = []


@hooks(name="execsys", description="Records the pinned execution-system identity in every eval log (execsys run)")
class ExecsysHooks(Hooks):
    def __init__(self) -> None:
        self.tasks: dict[str, _TaskState] = {}
        self._pin: dict[str, Any] | None = None

    def enabled(self) -> bool:
        return bool(os.environ.get(LOCK_ENV))

    def _pinned(self) -> dict[str, Any]:
        if self._pin is None:
            self._pin = _pinned(os.environ[LOCK_ENV])
        return self._pin

    def _mark(self) -> dict[str, Any]:
        return {"identity": self._pinned()["identity"], "run": os.environ.get(RUN_ENV) or None}

    async def on_task_start(self, data: TaskStart) -> None:
        state = self.tasks.setdefault(data.eval_id, _TaskState(data.eval_id, data.spec.task))
        try:
            metadata = dict(data.spec.metadata or {})
            metadata["execsys"] = self._mark()
            data.spec.metadata = metadata
        except Exception as exc:  # noqa: BLE001 - never break the user's eval
            state.errors.append(f"task start: {type(exc).__name__}: {exc}")
            logger.warning("execsys hook: could not write the identity into the eval metadata: %s", exc)

    async def on_sample_event(self, data: SampleEvent) -> None:
        try:
            event = data.event
            if getattr(event, "event", None) != "model":
                return
            state = self.tasks.setdefault(data.eval_id, _TaskState(data.eval_id, ""))
            if getattr(event, "pending", None):
                return  # announced, not answered yet: the same event comes again once it is complete
            key = str(getattr(event, "uuid", None) or id(event))
            if key in state.seen:
                return
            state.seen.add(key)
            if getattr(event, "error", None):
                # a failed attempt (retried, or the call failed): nothing answered it, so there is
                # no served model to check -- its output is Inspect's placeholder
                state.failed_attempts += 1
                return
            state.model_calls += 1
            pinned = self._pinned()
            call = getattr(event, "call", None)
            response = getattr(call, "response", None) if call is not None else None
            served = served_model(event, response)
            fingerprint = response.get("system_fingerprint") if isinstance(response, dict) else None
            wrong: list[str] = []
            if served and pinned["models"] and served not in pinned["models"]:
                wrong.append(f"model {served!r} not in the pinned {pinned['models']}")
            if fingerprint and pinned["system_fingerprint"] and fingerprint != pinned["system_fingerprint"]:
                wrong.append(f"system_fingerprint {fingerprint!r} != pinned {pinned['system_fingerprint']!r}")
            if wrong:
                state.mismatches += 1
                if len(state.examples) < 5:
                    state.examples.append({"sample": data.sample_id, "mismatch": wrong})
        except Exception as exc:  # noqa: BLE001
            logger.warning("execsys hook: model event check failed: %s", exc)

    async def on_task_end(self, data: TaskEnd) -> None:
        state = self.tasks.get(data.eval_id) or _TaskState(data.eval_id, data.log.eval.task)
        location = getattr(data.log, "location", None)
        recorded = False
        try:
            from inspect_ai.log import (  # pyright: ignore[reportMissingImports]
                MetadataEdit,
                ProvenanceData,
                edit_eval_log,
                read_eval_log,
                write_eval_log,
            )

            verdict = "consistent" if state.mismatches == 0 else "model-mismatch"
            check = dict(self._mark(), model_calls=state.model_calls, mismatches=state.mismatches,
                         verdict=verdict, examples=state.examples)
            if not location:
                raise RuntimeError("the log has no location to edit")
            log = read_eval_log(location)
            edited = edit_eval_log(log, [MetadataEdit(metadata_set={"execsys": check})],
                                   ProvenanceData(author="execsys",
                                                  reason=f"execsys run {check['run']}: per-call model check {verdict}"))
            write_eval_log(edited, location)
            recorded = True
        except Exception as exc:  # noqa: BLE001 - never break the user's eval
            state.errors.append(f"task end: {type(exc).__name__}: {exc}")
            logger.warning("execsys hook: could not record the verdict in the log: %s", exc)
        self._report(state, location, recorded)

    def _report(self, state: _TaskState, location: str | None, recorded: bool) -> None:
        directory = os.environ.get(HOOK_DIR_ENV)
        if not directory:
            return
        body = {"eval_id": state.eval_id, "task": state.task, "log": location, "recorded": recorded,
                "model_calls": state.model_calls, "failed_attempts": state.failed_attempts,
                "mismatches": state.mismatches, "examples": state.examples,
                "error": "; ".join(state.errors) or None}
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, suffix=".part")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(body, fh)
            os.replace(tmp, os.path.join(directory, f"{state.eval_id}.json"))
        except OSError as exc:
            logger.warning("execsys hook: could not report to execsys run: %s", exc)
