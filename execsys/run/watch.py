"""Step 4, the watch: re-observe the serving runtime while the harness runs.

An engine restarted into other flags, upgraded or swapped half-way through an evaluation leaves a
result that no single execution system produced, and nothing in the harness's output says so. Every
``--watch`` seconds this observes what the endpoint says about itself (model list,
``system_fingerprint``, server version and build) and the process listening on its port (pid, start
time, argv, numerics environment); any field that differs from the previous observation is a drift
event ``{at, component, before, after}``. It also asks, with one token, which model answers a request
for the first listed one: a router re-pointing an alias keeps the list and changes that answer.
The observation itself is :mod:`execsys.identity.serving`, shared with every probe pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from execsys.identity.serving import ServingObserver, changes, observe_serving
from execsys.ledger import now_iso

__all__ = ["ServingObserver", "Watcher", "changes", "observe_serving"]


class Watcher:
    """A daemon thread observing every ``interval_s``; ``drift`` collects the events, ``on_drift`` hears
    each, ``on_look`` hears the events of one look together (a restart is many fields in one look)."""

    def __init__(self, declared_runtime: dict[str, Any], interval_s: float,
                 on_drift: Callable[[dict[str, Any]], None] | None = None,
                 observe: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 on_look: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.declared_runtime = declared_runtime
        self.interval_s = interval_s
        self.on_drift = on_drift
        self.on_look = on_look
        self.observe = observe if observe is not None else ServingObserver()
        self.drift: list[dict[str, Any]] = []
        self.observations = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return self.interval_s > 0 and bool(self.declared_runtime.get("endpoint") or
                                            self.declared_runtime.get("process"))

    def start(self) -> None:
        """Take the baseline observation now (before the harness starts), then watch in the background."""
        if not self.active:
            return
        self._last = self._observe()
        self._thread = threading.Thread(target=self._loop, name="execsys-run-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _observe(self) -> dict[str, Any]:
        self.observations += 1
        return self.observe(self.declared_runtime)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                now = self._observe()
            except Exception as exc:  # noqa: BLE001 - a failed look is recorded, never fatal to the run
                self.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if self._stop.is_set():
                return  # the harness ended while we looked: verify-after speaks for that moment
            found = changes(self._last or {}, now, now_iso())
            for event in found:
                self.drift.append(event)
                if self.on_drift is not None:
                    self.on_drift(event)
            if found and self.on_look is not None:
                self.on_look(found)
            self._last = now
