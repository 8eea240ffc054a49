"""The watch's drift events in words: each change once, as a delta, with how often it was seen.

One restart of the engine is many drift events: every field of the serving process and the
endpoint goes away in one look (``argv: [...] -> null``) and comes back in a later one (``null ->
[...]``), so printing the events one by one buries the one change that matters (``--n_threads 2
→ 1``) under a dozen lines that each repeat the whole argv. The events stay in the record as the
watch saw them; this module only words them:

* :class:`LookNarrator` -- one line per look that found drift, each field worded against the last
  value it was seen with (:func:`execsys.delta.value_change`): what moved, what stopped being
  observed, what came back as before;
* :func:`fold` -- the run's drift as one :class:`FieldDrift` per field, from its value before the
  first event to its value after the last, with the number of events and when they were, for the
  summary after the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from execsys.delta import ARROW, brief, value_change

ERROR_FIELD = "runtime.endpoint.error"  # the endpoint's failure to answer: its clearing is not a loss
NAMES_SHOWN = 4  # fields named on a line of gone or returned fields before "+N more"


def short(component: str) -> str:
    """``process.argv`` for ``runtime.process.argv``: the field's name on a line that lists several."""
    return component.removeprefix("runtime.")


def _names(components: list[str]) -> str:
    shown = ", ".join(short(c) for c in components[:NAMES_SHOWN])
    return shown + (f", +{len(components) - NAMES_SHOWN} more" if len(components) > NAMES_SHOWN else "")


class LookNarrator:
    """Words the drift of one look at a time (the events one observation found, all with one ``at``),
    remembering each field's last observed value, so a field that went away and came back is worded
    against what it was before it went (the restart's argv as a delta, not twice in full)."""

    def __init__(self) -> None:
        self.known: dict[str, Any] = {}  # component -> the last value it was observed with (never None)

    def line(self, events: Iterable[dict[str, Any]]) -> str:
        moved: list[str] = []
        gone: list[str] = []
        back: list[str] = []
        cleared = False
        for event in events:
            component = str(event.get("component"))
            before, after = event.get("before"), event.get("after")
            if before is not None:
                self.known.setdefault(component, before)
            was = self.known.get(component)
            if after is None:
                if component == ERROR_FIELD:
                    cleared = True
                else:
                    gone.append(component)
                continue
            self.known[component] = after
            if was is None:
                moved.append(f"{component}: {brief(after)}")
            elif was == after:
                back.append(component)
            else:
                moved.append(f"{component}: {value_change(was, after)}")
        parts = list(moved)
        if gone:
            parts.append(f"no longer observed: {_names(gone)}")
        if cleared:
            parts.append("the endpoint answers again")
        if back:
            parts.append(f"observed again as before: {_names(back)}")
        return "; ".join(parts)


@dataclass(frozen=True)
class FieldDrift:
    """One field's drift over a run: its value before the first event and after the last (None: not
    observed), how many events it had, and when the first and last were."""

    component: str
    before: Any
    after: Any
    events: int
    first_at: str
    last_at: str

    @property
    def as_before(self) -> bool:
        """It moved (went away, say) and ended as it began."""
        return self.before == self.after

    def words(self) -> str:
        """``runtime.process.argv: --n_threads 2 → 1 (2 events, T1 to T2)``."""
        when = f"at {self.first_at}" if self.first_at == self.last_at else f"{self.first_at} to {self.last_at}"
        counted = f"({self.events} event{'s' if self.events != 1 else ''}, {when})"
        if self.after is None:
            change = f"no longer observed (was {brief(self.before)})" if self.before is not None else "gone"
        elif self.before is None:
            change = f"(none) {ARROW} {brief(self.after)}"
        else:
            change = value_change(self.before, self.after)
        return f"{self.component}: {change} {counted}"


def fold(events: Iterable[dict[str, Any]]) -> list[FieldDrift]:
    """Each field that drifted, once, in the order it first drifted: from the value it had before its
    first event to the one after its last."""
    fields: dict[str, dict[str, Any]] = {}
    for event in events:
        component = str(event.get("component"))
        at = str(event.get("at"))
        seen = fields.setdefault(component, {"before": event.get("before"), "events": 0, "first_at": at})
        seen.update(after=event.get("after"), last_at=at)
        seen["events"] += 1
    return [FieldDrift(component, f["before"], f["after"], f["events"], f["first_at"], f["last_at"])
            for component, f in fields.items()]


def summary_lines(events: list[dict[str, Any]]) -> list[str]:
    """The run's drift after the run: each field that ended other than it began, once, as a delta with
    its count; the fields that went away and came back as they were, on one line."""
    folded = fold(events)
    lines = [f.words() for f in folded if not f.as_before]
    returned = [f for f in folded if f.as_before]
    if returned:
        counts = sorted({f.events for f in returned})
        counted = f"{counts[0]} events each" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} events each"
        lines.append(f"back as before: {_names([f.component for f in returned])} ({counted})")
    return lines
