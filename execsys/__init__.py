"""execsys: make an evaluation result say which execution system produced it.

The core package holds the declaration (``execsys.toml``), the pinned identity
(``execsys.lock.json``), artifact digests, the ledger and the CLI. The doctor,
probes and TUI ship as ``execsys.doctor``, ``execsys.probes`` and ``execsys.tui``.
"""

__version__ = "0.1.0"

COMPONENTS: tuple[str, ...] = (
    "model",
    "artifact",
    "runtime",
    "hardware",
    "harness",
    "context_policy",
    "retrieval",
    "tools",
    "workflow",
    "budget",
    "grader",
    "environment",
)
