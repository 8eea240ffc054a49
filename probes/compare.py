"""Comparing outputs at two levels: bytes (``output``) and extracted answers (``outcome``).

``output`` agreement is byte identity, checked through the BLAKE3 digest of the output's
UTF-8 bytes; ``outcome`` agreement is equality of an answer extracted from the output (a
regex group, a JSON path, the last number, or a grader command's stdout). A disagreement is
located by its first differing character and, when the engine returned tokens, token index.

Extractor specs (``--extract``): ``regex:PATTERN`` (group 1 if the pattern has a group, else
the whole match; the last match wins), ``json:PATH`` (``answer``, ``a.b.0``, ``$.a.b[0]``),
``last-number``, ``command:CMD`` (the output on stdin, the stripped stdout is the outcome).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import blake3

from execsys.errors import UsageError

LEVELS = ("output", "outcome")
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")


def digest(text: str) -> str:
    """BLAKE3 hex of the output's UTF-8 bytes."""
    return blake3.blake3(text.encode("utf-8", "surrogatepass")).hexdigest()


EXTRACT_TIMEOUT = 60.0
"""How long a ``command:`` extractor may take on one output when the caller gives no ``--timeout``."""


@dataclass(frozen=True)
class Extractor:
    kind: str  # regex | json | last-number | command
    arg: str | None = None
    # a command: extractor ends within the probe's --timeout (a hung grader script must not hold
    # every output for a minute whatever the user asked); not part of the spec or of equality
    timeout: float = field(default=EXTRACT_TIMEOUT, compare=False)

    @property
    def spec(self) -> str:
        return self.kind if self.arg is None else f"{self.kind}:{self.arg}"

    def __call__(self, text: str) -> str | None:
        if self.kind == "regex":
            pattern = re.compile(self.arg or "", re.DOTALL | re.MULTILINE)
            matches = list(pattern.finditer(text))
            if not matches:
                return None
            last = matches[-1]
            return (last.group(1) if pattern.groups else last.group(0)).strip()
        if self.kind == "last-number":
            numbers = _NUMBER.findall(text)
            if not numbers:
                return None
            value = numbers[-1].replace(",", "").lstrip("+")
            try:
                number = float(value)
            except ValueError:
                return value
            return str(int(number)) if number.is_integer() and abs(number) < 1e16 else repr(number)
        if self.kind == "json":
            return _json_path(text, self.arg or "")
        if self.kind == "command":
            from execsys.proc import run

            result = run(["sh", "-c", self.arg or ""], timeout=self.timeout, input=text.encode("utf-8", "replace"))
            if not result.ok:
                return None
            return result.text().strip()
        raise AssertionError(self.kind)


def parse_extractor(spec: str | None, timeout: float | None = None) -> Extractor | None:
    """``regex:...``, ``json:...``, ``last-number`` or ``command:...``; UsageError otherwise.
    ``timeout``: the seconds a ``command:`` extractor may take on one output (the probe's ``--timeout``)."""
    if spec is None or spec == "":
        return None
    if spec in ("last-number", "last_number", "number"):
        return Extractor("last-number")
    kind, sep, arg = spec.partition(":")
    if not sep or kind not in ("regex", "json", "command"):
        raise UsageError(
            f"--extract {spec!r}: expected regex:PATTERN, json:PATH, last-number or command:CMD"
        )
    if kind == "regex":
        try:
            re.compile(arg)
        except re.error as exc:
            raise UsageError(f"--extract regex {arg!r}: {exc}") from None
    if not arg:
        raise UsageError(f"--extract {kind}: needs an argument after the colon")
    return Extractor(kind, arg, timeout if timeout is not None else EXTRACT_TIMEOUT)


def _json_path(text: str, path: str) -> str | None:
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        # Tolerate prose around a JSON object: parse from the first brace.
        start = text.find("{")
        if start < 0:
            return None
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
        except json.JSONDecodeError:
            return None
    path = path.strip()
    if path.startswith("$"):
        path = path[1:]
    parts = [p for p in re.split(r"\.|\[|\]", path) if p != ""]
    for part in parts:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first differing item (the shorter length if one is a prefix); None when equal."""
    if a == b:
        return None
    limit = min(len(a), len(b))
    return next((i for i in range(limit) if a[i] != b[i]), limit)


def first_divergence(a: str, b: str) -> int | None:
    """Character offset of the first difference between two outputs."""
    return _first_difference(a, b)


def first_token_divergence(a: list[str] | None, b: list[str] | None) -> int | None:
    """Token index of the first difference, when the engine returned tokens for both."""
    if a is None or b is None:
        return None
    return _first_difference(a, b)


def context(text: str, offset: int, before: int = 12, after: int = 24) -> str:
    """A short window of ``text`` around ``offset`` for side-by-side display."""
    start = max(0, offset - before)
    piece = text[start : offset + after]
    return ("…" if start > 0 else "") + piece + ("…" if offset + after < len(text) else "")


def divergence_between(a: tuple[str | None, list[str] | None], b: tuple[str | None, list[str] | None],
                       k: int) -> dict[str, Any]:
    """Where pass ``k``'s output first differs from pass 0's: character, token, and both sides around it."""
    (text_a, tokens_a), (text_b, tokens_b) = a, b
    if text_a is None or text_b is None:
        return {"pass": k, "char": None, "token": None}
    char = first_divergence(text_a, text_b)
    return {
        "pass": k, "char": char, "token": first_token_divergence(tokens_a, tokens_b),
        "a": context(text_a, char or 0), "b": context(text_b, char or 0),
    }
