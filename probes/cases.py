"""Probe cases: JSON Lines loading, validation and ``--n`` selection.

A case is ``{"id", "prompt" | "messages", "max_tokens"?, "params"?, "expected"?}``. Cases
with ``prompt`` go to ``/v1/completions`` and cases with ``messages`` to
``/v1/chat/completions``. Bad input is refused with the file and line named, because a
probe over a silently skipped subset would report an agreement rate for cases nobody chose.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from execsys.errors import InputError


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    expected: Any = None

    @property
    def kind(self) -> str:
        """``completion`` (prompt) or ``chat`` (messages)."""
        return "chat" if self.messages is not None else "completion"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id}
        if self.messages is not None:
            data["messages"] = self.messages
        else:
            data["prompt"] = self.prompt
        if self.max_tokens is not None:
            data["max_tokens"] = self.max_tokens
        if self.params:
            data["params"] = self.params
        if self.expected is not None:
            data["expected"] = self.expected
        return data


def parse_case(obj: Any, where: str) -> Case:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: a case must be a JSON object, got {type(obj).__name__}")
    case_id = obj.get("id")
    if isinstance(case_id, bool) or not isinstance(case_id, (str, int)) or case_id == "":
        raise InputError(f"{where}: every case needs an \"id\" (a string or integer)")
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        raise InputError(f"{where}: case {case_id!s} needs exactly one of \"prompt\" or \"messages\"")
    prompt = obj.get("prompt")
    messages = obj.get("messages")
    if has_prompt and not isinstance(prompt, str):
        raise InputError(f"{where}: case {case_id!s}: \"prompt\" must be a string")
    if has_messages and not (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)):
        raise InputError(f"{where}: case {case_id!s}: \"messages\" must be a list of objects")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise InputError(f"{where}: case {case_id!s}: \"max_tokens\" must be a positive integer")
    params = obj.get("params") or {}
    if not isinstance(params, dict):
        raise InputError(f"{where}: case {case_id!s}: \"params\" must be an object")
    return Case(str(case_id), prompt, messages, max_tokens, params, obj.get("expected"))


def iter_cases(path: str | Path) -> Iterable[Case]:
    path = Path(path)
    try:
        handle = path.open("r", encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"cases file {path}: not found") from None
    except IsADirectoryError:
        raise InputError(f"cases file {path}: is a directory, expected a JSON Lines file") from None
    except OSError as exc:
        raise InputError(f"cases file {path}: {exc.strerror or exc}") from None
    with handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path} line {lineno}: not valid JSON ({exc.msg})") from None
            except UnicodeDecodeError:
                raise InputError(f"{path} line {lineno}: not UTF-8 text") from None
            yield parse_case(obj, f"{path} line {lineno}")


def load_cases(path: str | Path) -> list[Case]:
    """Every case in the file, in file order; duplicate ids and an empty file are errors."""
    cases: list[Case] = []
    seen: set[str] = set()
    try:
        for case in iter_cases(path):
            if case.id in seen:
                raise InputError(f"{path}: case id {case.id!r} appears more than once")
            seen.add(case.id)
            cases.append(case)
    except UnicodeDecodeError:
        raise InputError(f"cases file {path}: not UTF-8 text") from None
    if not cases:
        raise InputError(f"cases file {path}: no cases (expected JSON Lines with \"id\" and \"prompt\" or \"messages\")")
    return cases


def select(cases: list[Case], n: int | None, sample_seed: int | None = None) -> list[Case]:
    """The first ``n`` cases, or a seeded sample of ``n`` (kept in file order) when ``sample_seed`` is given."""
    if n is None or n >= len(cases):
        return list(cases)
    if n < 1:
        raise InputError("--n must be at least 1")
    if sample_seed is None:
        return cases[:n]
    chosen = set(random.Random(sample_seed).sample(range(len(cases)), n))
    return [case for i, case in enumerate(cases) if i in chosen]


def cases_digest(cases: Iterable[Case]) -> str:
    """BLAKE3 over the selected cases' canonical JSON: two records speak about the same cases iff equal."""
    from execsys.canonical import canonical_json

    hasher = blake3.blake3()
    for case in cases:
        hasher.update(canonical_json(case.to_json()))
        hasher.update(b"\n")
    return hasher.hexdigest()


def pass_order(cases: list[Case], seed: int, pass_index: int) -> list[Case]:
    """Order for a pass: pass 0 in file order, later passes shuffled by ``seed + pass_index``, never
    the same order as the pass before (so the second pass is genuinely a different order)."""
    if pass_index == 0 or len(cases) < 2:
        return list(cases)
    order = list(cases)
    random.Random(seed * 1_000_003 + pass_index).shuffle(order)
    previous = pass_order(cases, seed, pass_index - 1) if pass_index > 1 else cases
    if [c.id for c in order] == [c.id for c in previous]:
        order = order[1:] + order[:1]
    return order
