"""npd: a Kubernetes node-problem-detector custom plugin (``contrib/npd/execsys-monitor.json``).

NPD's plugin protocol (``pkg/custompluginmonitor/plugin/plugin.go``): exit 0 is OK, 1 NonOK,
anything else Unknown; stdout is trimmed and cut to ``max_output_length`` (80 bytes by default)
and becomes the node condition's message. So: exit 0 ok, 1 a failing hazard (warnings too with
``--strict``), 2 could not check, and one line that already fits, naming the worst finding --
``ok: 9 hazards clear on gpu-17`` / ``fail clock-skew: 612 s ahead of ntp``.
"""

from __future__ import annotations

from execsys.doctor.node_checks.check import Outcome, Verdict

ID = "npd"
EXIT = {"ok": 0, "fail": 1, "unknown": 2}


def outcome(verdict: Verdict, drain_requested: bool = False) -> Outcome:
    del drain_requested  # NPD acts on the condition itself (taints, remedies); the plugin only reports
    return Outcome(EXIT[verdict.level], verdict.line)
