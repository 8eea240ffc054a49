"""``execsys run``: put execsys in the path of the evaluation run itself.

Seven steps, each one event: gate (the doctor), identity (verify the lock or pin one), run the
harness command with the identity in its environment, watch the serving runtime while it runs,
verify after, find and digest the results, record (ledger + a sidecar beside each result). The
engine is :func:`execsys.run.runner.run_eval`; options come from :class:`RunOptions`.
"""

from execsys.run.options import RunOptions
from execsys.run.record import RunRecord
from execsys.run.runner import run_eval

__all__ = ["RunOptions", "RunRecord", "run_eval"]
