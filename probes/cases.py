"""Probe cases: JSON Lines loading, validation and ``--n`` selection.

A case is ``{"id", "prompt" | "messages", "max_tokens"?, "params"?, "expected"?}``. Cases
with ``prompt`` go to ``/v1/completions`` and cases with ``messages`` to
``/v1/chat/completions``. Bad input is refused with the file and line named, because a
probe over a silently skipped subset would report an agreement rate for cases nobody chose.
"""

from __future__ import annotations

import json
import os
import random
import stat
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import blake3

from execsys.errors import InputError
from execsys.fsutil import file_kind

# One case per line; a line this long is not a case (a model file or a log given by mistake).
MAX_LINE_BYTES = 16 << 20


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


def load_cases(path: str | Path) -> list[Case]:
    """Every case in the file, parsed, in file order; the same checks (and errors) as :class:`CaseFile`."""
    case_file = CaseFile(path)
    try:
        return list(case_file)
    finally:
        case_file.close()


def select(cases: Sequence[Case], n: int | None, sample_seed: int | None = None) -> Sequence[Case]:
    """The first ``n`` cases, or a seeded sample of ``n`` (kept in file order) when ``sample_seed`` is given.

    A list in gives a list out; a :class:`CaseFile` gives a view over it (no case parsed here)."""
    if n is None or n >= len(cases):
        return list(cases) if isinstance(cases, list) else cases
    if n < 1:
        raise InputError("--n must be at least 1")
    if sample_seed is None:
        return cases[:n] if isinstance(cases, list) else CaseView(cases, array("q", range(n)))
    chosen = sorted(random.Random(sample_seed).sample(range(len(cases)), n))
    if isinstance(cases, list):
        return [cases[i] for i in chosen]
    return CaseView(cases, array("q", chosen))


def cases_digest(cases: Iterable[Case]) -> str:
    """BLAKE3 over the selected cases' canonical JSON: two records speak about the same cases iff equal."""
    from execsys.canonical import canonical_json

    hasher = blake3.blake3()
    for case in cases:
        hasher.update(canonical_json(case.to_json()))
        hasher.update(b"\n")
    return hasher.hexdigest()


def pass_indices(count: int, seed: int, pass_index: int) -> array:
    """Positions in the order a pass sends them: pass 0 in file order, later passes shuffled by
    ``seed + pass_index``, never the same order as the pass before (so the second pass is genuinely
    a different order). Eight bytes per case, whatever the cases hold."""
    order = array("q", range(count))
    if pass_index == 0 or count < 2:
        return order
    random.Random(seed * 1_000_003 + pass_index).shuffle(order)
    previous = pass_indices(count, seed, pass_index - 1) if pass_index > 1 else array("q", range(count))
    if order == previous:
        order = order[1:] + order[:1]
    return order


def pass_order(cases: Sequence[Case], seed: int, pass_index: int) -> list[Case]:
    """The cases in the order a pass sends them (see :func:`pass_indices`)."""
    return [cases[i] for i in pass_indices(len(cases), seed, pass_index)]


class CaseFile(Sequence[Case]):
    """The cases of a JSON Lines file, kept as byte offsets and re-read on use.

    A probe of 50,000 cases would otherwise hold 50,000 parsed cases for its whole run; this keeps
    twelve bytes per case, so the probe's memory does not grow with n. Every line is validated
    when the file is opened (same errors as :func:`load_cases`); a line that no longer parses when
    read back is reported as a file changed under the probe (a resume checks the cases' digest)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offsets = array("q")
        self._lengths = array("l")
        id_hashes = array("q")
        try:
            handle = open(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK), "rb")  # noqa: SIM115 - a FIFO must not block
        except FileNotFoundError:
            raise InputError(f"cases file {self.path}: not found") from None
        except IsADirectoryError:
            raise InputError(f"cases file {self.path}: is a directory, expected a JSON Lines file") from None
        except OSError as exc:
            raise InputError(f"cases file {self.path}: {exc.strerror or exc}") from None
        with handle:
            mode = os.fstat(handle.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise InputError(f"cases file {self.path}: is a directory, expected a JSON Lines file")
            if not stat.S_ISREG(mode):  # cases are re-read by offset: a FIFO or device cannot be
                raise InputError(f"cases file {self.path}: is {file_kind(mode)}, not a regular file")
            offset = 0
            for lineno, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), 1):
                if len(raw) > MAX_LINE_BYTES:
                    raise InputError(f"{self.path} line {lineno}: longer than {MAX_LINE_BYTES >> 20} MiB; "
                                     "a case is one JSON object per line")
                if raw.strip():
                    case = self._parse(raw, lineno)
                    self._offsets.append(offset)
                    self._lengths.append(len(raw))
                    id_hashes.append(hash(case.id))
                offset += len(raw)
        if not self._offsets:
            raise InputError(
                f"cases file {self.path}: no cases (expected JSON Lines with \"id\" and \"prompt\" or \"messages\")")
        self._check_unique(id_hashes)
        self._fd = os.open(self.path, os.O_RDONLY)

    def _parse(self, raw: bytes, lineno: int) -> Case:
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(f"{self.path} line {lineno}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"{self.path} line {lineno}: not valid JSON ({exc.msg})") from None
        return parse_case(obj, f"{self.path} line {lineno}")

    def _check_unique(self, id_hashes: array) -> None:
        """Duplicate ids are an error; compared by hash first (8 bytes a case), by id only on a hash clash."""
        ordered = sorted(id_hashes)
        clashing = {a for a, b in zip(ordered, ordered[1:], strict=False) if a == b}
        if not clashing:
            return
        seen: set[str] = set()
        for case in self:
            if hash(case.id) in clashing:
                if case.id in seen:
                    raise InputError(f"{self.path}: case id {case.id!r} appears more than once")
                seen.add(case.id)

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> Case: ...
    @overload
    def __getitem__(self, index: slice) -> CaseView: ...

    def __getitem__(self, index: int | slice) -> Case | CaseView:
        if isinstance(index, slice):
            return CaseView(self, array("q", range(*index.indices(len(self)))))
        raw = os.pread(self._fd, self._lengths[index], self._offsets[index]) if hasattr(self, "_fd") else None
        if raw is None:
            with self.path.open("rb") as handle:
                handle.seek(self._offsets[index])
                raw = handle.read(self._lengths[index])
        try:
            return self._parse(raw, index + 1)
        except InputError:
            raise InputError(f"cases file {self.path} changed while the probe was reading it") from None

    def __iter__(self) -> Iterator[Case]:
        for i in range(len(self)):
            yield self[i]

    def close(self) -> None:
        fd = self.__dict__.pop("_fd", None)
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class CaseView(Sequence[Case]):
    """Some of a :class:`CaseFile`'s cases (``--n``, ``--sample``), by position, in file order."""

    def __init__(self, base: Sequence[Case], positions: array):
        self._base = base
        self._positions = positions

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, index: int) -> Case: ...
    @overload
    def __getitem__(self, index: slice) -> CaseView: ...

    def __getitem__(self, index: int | slice) -> Case | CaseView:
        if isinstance(index, slice):
            return CaseView(self._base, self._positions[index])
        return self._base[self._positions[index]]

    def __iter__(self) -> Iterator[Case]:
        for position in self._positions:
            yield self._base[position]
