"""The watch's contract with ``execsys run``, in process: what each look is given and counted as, when
each drift event happened, and that the watching thread can neither keep a finished run alive nor
hold its end up for more than a minute.

tests/test_run_decisions.py has the drift-event table and the tick-by-tick comparison; these rows pin
what a user reads back from the run record (``observations``, each event's ``at``) and what they
would notice at exit (a process that does not end, a stop that waits for ever on a stuck look).
"""

from __future__ import annotations

import re
import threading

from execsys.identity.serving import ServingObserver
from execsys.run.watch import Watcher

DECLARED = {"endpoint": "http://127.0.0.1:9/v1", "process": "vllm"}


def _watch_until(calls_wanted: int, values):
    """A started watcher whose observe answers ``values`` in turn; returns it once it has looked
    ``calls_wanted`` times, and the arguments of every look."""
    seen: list[object] = []
    done = threading.Event()
    lock = threading.Lock()

    def observe(declared):
        with lock:
            seen.append(declared)
            if len(seen) >= calls_wanted:
                done.set()
            return values[min(len(seen), len(values)) - 1]

    watcher = Watcher(DECLARED, 0.001, observe=observe)
    watcher.start()
    assert done.wait(10)
    watcher.stop()
    return watcher, seen


def test_without_an_observer_the_watch_observes_the_serving_runtime() -> None:
    assert isinstance(Watcher(DECLARED, 5.0).observe, ServingObserver)


def test_each_look_is_given_the_declared_runtime_and_counted_once() -> None:
    watcher, seen = _watch_until(4, [{"runtime.process.pid": 1}])
    assert seen and all(arg is DECLARED for arg in seen)
    assert watcher.observations == len(seen)


def test_a_drift_event_is_stamped_with_the_time_it_was_seen() -> None:
    watcher, _ = _watch_until(3, [{"runtime.process.pid": 1}, {"runtime.process.pid": 2}])
    assert [(e["component"], e["before"], e["after"]) for e in watcher.drift] == [("runtime.process.pid", 1, 2)]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", watcher.drift[0]["at"])


def test_the_watching_thread_is_a_named_daemon() -> None:
    # a daemon: a run that ends on an error before stop() still exits; named: a stack dump says whose it is
    started = threading.Event()
    release = threading.Event()

    def observe(_declared):
        if started.is_set():
            release.wait(10)
        started.set()
        return {}

    watcher = Watcher(DECLARED, 0.001, observe=observe)
    watcher.start()
    try:
        threads = [t for t in threading.enumerate() if t.name == "execsys-run-watch"]
        assert len(threads) == 1 and threads[0].daemon is True
    finally:
        release.set()
        watcher.stop()


class _RecordingThread:
    def __init__(self) -> None:
        self.timeouts: list[object] = []

    def join(self, timeout=None) -> None:
        self.timeouts.append(timeout)


def test_stop_waits_at_most_a_minute_for_a_stuck_look() -> None:
    watcher = Watcher(DECLARED, 5.0, observe=lambda d: {})
    watcher._thread = _RecordingThread()  # type: ignore[assignment]  # stands in for a thread stuck in a look
    watcher.stop()
    assert watcher._thread.timeouts == [60]  # type: ignore[attr-defined]
