"""One probe run's rows in the ledger, and the keys they are kept under.

Every row of a run has the ``probe-run`` record as its parent; its key says what it is:

- ``probe-case`` ``<pass>:<case id>``: one case's answer on one pass; ``...#retry<r>`` for the r-th
  retry of an errored case (``--resume --retry-errored``: the errored row stays, the newest row counts);
- ``probe-step`` (the axis's own steps: ``restart:<pass>``, ``observe:<pass>``), ``probe-window``
  ``window:<pass>`` (when the pass sent its requests) and ``probe-system`` ``system:<pass>:start|end``
  (:func:`execsys.probes.system.step_key`);
- ``probe`` ``final``, then ``final#retry<r>`` after retries: the run's record.

``fillers:<pass>`` (the filler requests a load pass sent) is kept beside the steps in memory only.
A second append of the same parent and key is a no-op, so a resumed run writes nothing twice.
:class:`ProbeRunStore` is the one place the runner reads and writes these rows through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execsys.ledger import Ledger

RETRY_MARK = "#retry"
FINAL_KEY = "final"
CASE_KIND = "probe-case"
STEP_KIND = "probe-step"
WINDOW_KIND = "probe-window"  # when one pass sent its requests (parent = run id, key window:<pass>)
SYSTEM_KIND = "probe-system"  # the runtime at the start/end of one pass (parent = run id, key system:<pass>:<at>)


def case_key(pass_index: int, case_id: str, retry: int = 0) -> str:
    """A probe-case row's key: ``<pass>:<case id>``, and ``...#retry<r>`` for the r-th retry of an
    errored case (``--resume --retry-errored``: the errored row stays, the newest row counts)."""
    return f"{pass_index}:{case_id}" + (f"{RETRY_MARK}{retry}" if retry else "")


def case_row(ledger: Ledger, run_id: str, pass_index: int, case_id: str) -> tuple[Any, int]:
    """The row that counts for a case on a pass (the newest retry of an errored one) and its retry number."""
    row = ledger.child(run_id, case_key(pass_index, case_id))
    retry = 0
    while row is not None and row.body.get("error"):
        newer = ledger.child(run_id, case_key(pass_index, case_id, retry + 1))
        if newer is None:
            break
        row, retry = newer, retry + 1
    return row, retry


def final_row(ledger: Ledger, run_id: str) -> tuple[Any, int]:
    """The run's newest final record (``final``, then ``final#retry<r>`` after retries) and its number."""
    row, retry = ledger.child(run_id, FINAL_KEY), 0
    while row is not None:
        newer = ledger.child(run_id, f"{FINAL_KEY}{RETRY_MARK}{retry + 1}")
        if newer is None:
            break
        row, retry = newer, retry + 1
    return row, retry


def final_key(final: Any, final_retry: int) -> str:
    """Where a run's next final record goes: ``final``, or after the newest ``final#retry<r>`` there is."""
    return FINAL_KEY if final is None else f"{FINAL_KEY}{RETRY_MARK}{final_retry + 1}"


def window_key(pass_index: int) -> str:
    return f"window:{pass_index}"


def fillers_key(pass_index: int) -> str:
    return f"fillers:{pass_index}"


class ProbeRunStore:
    """The rows of run ``run_id`` in ``ledger``: read and written by key, as the module docstring lists them."""

    def __init__(self, ledger: Ledger, run_id: str):
        self.ledger = ledger
        self.run_id = run_id

    def case_row(self, pass_index: int, case_id: str) -> tuple[Any, int]:
        return case_row(self.ledger, self.run_id, pass_index, case_id)

    def has_case(self, pass_index: int, case_id: str) -> bool:
        """Whether the case's first row on the pass is there (errored or not)."""
        return self.ledger.has_child(self.run_id, case_key(pass_index, case_id))

    def final_row(self) -> tuple[Any, int]:
        return final_row(self.ledger, self.run_id)

    def append_cases(self, entries: list[tuple[dict[str, Any], str]]) -> None:
        """Case rows ``(body, key)``, in one transaction."""
        self.ledger.append_many(CASE_KIND, [(body, self.run_id, key) for body, key in entries])

    def append_step(self, key: str, body: dict[str, Any]) -> None:
        self.ledger.append(STEP_KIND, {"step": key, **body}, parent=self.run_id, key=key)

    def append_system(self, key: str, entry: dict[str, Any]) -> None:
        # a kind of its own, as the windows: probe-step rows stay the axis's own steps
        self.ledger.append(SYSTEM_KIND, {"step": key, **entry}, parent=self.run_id, key=key)

    def append_window(self, pass_index: int, window: dict[str, Any]) -> None:
        # a kind of its own: the axis steps (restarts, observations) stay what probe-step rows hold
        self.ledger.append(WINDOW_KIND, {"pass": pass_index, **window}, parent=self.run_id,
                           key=window_key(pass_index))

    def append_final(self, body: dict[str, Any], *, identity: str | None, key: str, record_id: str) -> str:
        """The run's record under ``key``; returns the id stored (another process's, if it finished first)."""
        return self.ledger.append("probe", body, identity=identity, parent=self.run_id, key=key,
                                  record_id=record_id)

    def load_progress(self, steps: dict[str, dict[str, Any]], pass_counts: dict[int, int],
                      pass_errors: dict[int, int], passes: int) -> None:
        """Recorded steps, and how many case results (and errors) each pass already has: counts only,
        read row by row, so resuming a large probe holds no per-case state."""
        fixed: set[tuple[int, str]] = set()
        for row in self.ledger.iter(parent=self.run_id):
            if row.kind in (STEP_KIND, WINDOW_KIND, SYSTEM_KIND):
                steps[row.key or ""] = row.body
                continue
            if row.kind != CASE_KIND:
                continue
            index = row.body.get("pass")
            if not isinstance(index, int) or not 0 <= index < passes:
                continue
            key = row.key or ""
            if RETRY_MARK in key:
                # a retry of an errored case: it replaces that error when it succeeded (rows come in order)
                retried = (index, key.split(RETRY_MARK)[0])
                if not row.body.get("error") and retried not in fixed:
                    fixed.add(retried)
                    pass_errors[index] = pass_errors.get(index, 0) - 1
                continue
            pass_counts[index] = pass_counts.get(index, 0) + 1
            if row.body.get("error"):
                pass_errors[index] = pass_errors.get(index, 0) + 1
