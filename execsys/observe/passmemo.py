"""One observation pass asks each outside program a question once.

A pin or a verify observes twelve components, and several of them ask the same interpreter about
itself: the harness's command, the serving process's engine version, the serving stack, the
grader and the workflow all read one ``python -I -c ...`` answer (0.1-0.5 s a spawn). Inside
``observation_pass()`` the first asker runs it and every other asker -- on any thread of that pass --
waits for and shares that answer. Outside a pass nothing is remembered, and a new pass asks again:
``execsys run`` re-observes after the harness, and a package upgraded mid-run must show.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class Answers:
    """The answers of one pass; a watcher may keep one per serving process and re-enter it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[Hashable, Future[Any]] = {}

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            answer = self._answers.get(key)
            asker = answer is None
            if answer is None:
                answer = self._answers[key] = Future()
        if asker:
            try:
                answer.set_result(compute())
            except BaseException as exc:
                answer.set_exception(exc)
                raise
        return answer.result()


_CURRENT: contextvars.ContextVar[Answers | None] = contextvars.ContextVar("execsys_observation_pass", default=None)


@contextlib.contextmanager
def observation_pass(answers: Answers | None = None) -> Iterator[None]:
    """Share answers among the observers of one pass (threads started with ``contextvars.copy_context``);
    ``answers`` re-enters an earlier pass's answers instead of starting afresh."""
    token = _CURRENT.set(answers if answers is not None else Answers())
    try:
        yield
    finally:
        _CURRENT.reset(token)


def remembered(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, asked once per observation pass for ``key``; every time outside a pass."""
    answers = _CURRENT.get()
    return compute() if answers is None else answers.get(key, compute)
