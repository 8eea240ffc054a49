"""One observation pass asks each question once (issue 26): inside a pass the first asker computes and
every other asker -- on any thread of the pass -- shares that answer (or that failure); outside a pass,
and in a new pass, it is asked again; a pass's answers can be re-entered."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from execsys.observe.passmemo import Answers, observation_pass, remembered


class Counter:
    def __init__(self, value: object = "answer") -> None:
        self.calls = 0
        self.value = value

    def __call__(self) -> object:
        self.calls += 1
        return self.value


def test_outside_a_pass_every_ask_computes() -> None:
    ask = Counter()
    assert remembered("k", ask) == "answer" and remembered("k", ask) == "answer"
    assert ask.calls == 2


def test_inside_a_pass_a_key_is_computed_once() -> None:
    ask, other = Counter("a"), Counter("b")
    with observation_pass():
        assert [remembered("k", ask), remembered("k", ask), remembered(("k", 2), other), remembered(("k", 2), other)] \
            == ["a", "a", "b", "b"]
    assert (ask.calls, other.calls) == (1, 1)


def test_a_falsy_answer_is_remembered_too() -> None:
    for value in (None, 0, "", []):
        ask = Counter(value)
        with observation_pass():
            assert remembered("k", ask) == value and remembered("k", ask) == value
        assert ask.calls == 1


def test_a_new_pass_asks_again_and_the_pass_ends_with_its_block() -> None:
    ask = Counter()
    with observation_pass():
        remembered("k", ask)
    with observation_pass():
        remembered("k", ask)
        remembered("k", ask)
    remembered("k", ask)
    assert ask.calls == 3


def test_a_nested_pass_is_its_own_and_the_outer_resumes() -> None:
    ask = Counter()
    with observation_pass():
        remembered("k", ask)
        with observation_pass():
            remembered("k", ask)
            remembered("k", ask)
        remembered("k", ask)
    assert ask.calls == 2


def test_a_pass_s_answers_can_be_re_entered() -> None:
    answers = Answers()
    ask = Counter()
    with observation_pass(answers):
        remembered("k", ask)
    with observation_pass(answers):
        remembered("k", ask)
    assert ask.calls == 1
    assert answers.get("k", Counter("other")) == "answer"


def test_the_pass_is_reset_even_when_its_block_raises() -> None:
    ask = Counter()
    with pytest.raises(RuntimeError), observation_pass():
        raise RuntimeError("boom")
    remembered("k", ask)
    remembered("k", ask)
    assert ask.calls == 2


def test_a_failure_is_shared_with_every_asker_of_the_pass() -> None:
    calls = []

    def failing() -> object:
        calls.append(1)
        raise ValueError("no answer")

    with observation_pass():
        for _ in range(3):
            with pytest.raises(ValueError, match="^no answer$"):
                remembered("k", failing)
    assert len(calls) == 1


def test_threads_of_one_pass_wait_for_the_first_asker_s_answer() -> None:
    started = threading.Event()
    calls = []

    def slow() -> str:
        calls.append(threading.current_thread().name)
        started.set()
        time.sleep(0.1)
        return "shared"

    results: list[object] = []
    with observation_pass():
        contexts = [contextvars.copy_context() for _ in range(4)]
        first = threading.Thread(target=lambda: results.append(contexts[0].run(remembered, "k", slow)))
        first.start()
        started.wait(5)
        others = [threading.Thread(target=lambda c=c: results.append(c.run(remembered, "k", slow)))
                  for c in contexts[1:]]
        for t in others:
            t.start()
        for t in [first, *others]:
            t.join(5)
    assert results == ["shared"] * 4 and len(calls) == 1


def test_a_thread_outside_the_pass_computes_its_own() -> None:
    ask = Counter()
    with observation_pass():
        remembered("k", ask)
        t = threading.Thread(target=lambda: remembered("k", ask))  # no copied context: no pass
        t.start()
        t.join(5)
    assert ask.calls == 2
