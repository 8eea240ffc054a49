"""A change between two values, in words: only the part that moved, on both sides.

A restarted engine's argv, a lock's observed environment or a long version string differ in one
element, one key or a few characters; printing both whole values buries that change (one restart
once printed its whole argv eighteen times). Every face that says "this moved" -- the probes'
system check (``runtime argv +--n_batch 7``), ``execsys run``'s drift lines, ``verify`` and
``diff`` -- words a change with :func:`value_change`:

* two lists (an argv): the runs inserted and removed, in order (``+--n_batch 7``, ``-x``), and a
  replaced run as ``old → new`` after the flag it belongs to (``--n_threads 2 → 1``);
* two dicts: the keys that moved (``+key: value``, ``-key: value``, ``key: a → b``);
* two long strings: the differing middle with a little context on each side;
* anything else: both values, each cut to a readable length.

Pure functions, no rendering library: engines and faces share them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

ARROW = "→"  # a terminal that cannot encode it shows "->" (execsys.console's ASCII look-alikes)
BRIEF_LIMIT = 120
CONTEXT = 12  # characters kept either side of a long string's change

Render = Callable[[Any], str]


def brief(value: Any, limit: int = BRIEF_LIMIT) -> str:
    """A value on one line: a list as its elements joined by spaces, cut to ``limit`` characters."""
    text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def list_change(old: list[Any], new: list[Any], *, arrow: str = ARROW) -> str:
    """``+--n_batch 7 -x``, ``--n_threads 2 → 1``: the runs inserted, removed and replaced between two
    lists, in order. A replaced run that follows a flag (an element starting with ``-``) is named by it."""
    a, b = [str(x) for x in old], [str(x) for x in new]
    parts = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "replace":
            # as many elements as both runs have are replaced; the rest of the longer is removed or added
            both = min(i2 - i1, j2 - j1)
            flag = a[i1 - 1] if i1 > 0 and a[i1 - 1].startswith("-") and not a[i1].startswith("-") else None
            change = f"{' '.join(a[i1:i1 + both])} {arrow} {' '.join(b[j1:j1 + both])}"
            parts.append(f"{flag} {change}" if flag else change)
            i1, j1 = i1 + both, j1 + both
        if tag in ("delete", "replace") and i1 < i2:
            parts.append("-" + " ".join(a[i1:i2]))
        if tag in ("insert", "replace") and j1 < j2:
            parts.append("+" + " ".join(b[j1:j2]))
    return " ".join(parts) or "reordered"


def dict_change(old: dict[Any, Any], new: dict[Any, Any], *, render: Render = brief, arrow: str = ARROW) -> str:
    """``+B: 2, -C: 3, A: 1 → 9``: the keys that moved, sorted; a key gained or lost is never ``null``."""
    parts = []
    for key in sorted(set(old) | set(new), key=str):
        if key not in old:
            parts.append(f"+{key}: {render(new[key])}")
        elif key not in new:
            parts.append(f"-{key}: {render(old[key])}")
        elif old[key] != new[key]:
            parts.append(f"{key}: {value_change(old[key], new[key], render=render, arrow=arrow)}")
    return ", ".join(parts) or "reordered"


def text_change(old: str, new: str, *, limit: int = BRIEF_LIMIT, arrow: str = ARROW) -> str:
    """Two strings; when either is longer than ``limit``, only their differing middle (``…`` marks
    what is left out), with :data:`CONTEXT` characters of what they share on each side."""
    if len(old) <= limit and len(new) <= limit:
        return f"{old} {arrow} {new}"
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    head = max(0, start - CONTEXT)

    def middle(text: str) -> str:
        stop = len(text) - max(0, end - CONTEXT)
        shown = text[head:stop]
        if len(shown) > limit:
            shown = shown[:limit - 1] + "…"
        return ("…" if head else "") + shown + ("…" if stop < len(text) else "")

    return f"{middle(old)} {arrow} {middle(new)}"


def value_change(old: Any, new: Any, *, render: Render = brief, arrow: str = ARROW) -> str:
    """What moved between ``old`` and ``new``, in words (see the module's docstring); ``render`` words a
    whole value that is not a string (a list's elements are always shown as text)."""
    if isinstance(old, list) and isinstance(new, list) and not _has_containers(old) and not _has_containers(new):
        return list_change(old, new, arrow=arrow)
    if isinstance(old, dict) and isinstance(new, dict):
        return dict_change(old, new, render=render, arrow=arrow)
    if isinstance(old, str) and isinstance(new, str):
        return text_change(old, new, arrow=arrow)
    return f"{render(old)} {arrow} {render(new)}"


def _has_containers(items: list[Any]) -> bool:
    return any(isinstance(item, (list, dict)) for item in items)
