"""The fleet answer as node_exporter's textfile collector reads it: the four metrics
``execsys_doctor_hazard_status{host,hazard}``, ``execsys_identity_info{host,fleet_digest,identity}``,
``execsys_fleet_identity_agreement`` and ``execsys_fleet_digest_match_ratio``, in the text exposition
format, with every label value escaped (:func:`_label`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from execsys.fleet.report import FleetReport

PROM_STATUS = {"ok": 0, "skip": 0, "warn": 1, "fail": 2, "error": 3}
"""``execsys_doctor_hazard_status`` values: 0 ok (or not applicable), 1 warn, 2 fail, 3 could not check."""


def _label(value: str) -> str:
    """A label value in the exposition format (backslash, quote and newline escaped; UTF-8 only, so a lone
    surrogate read from a report's JSON becomes its visible escape)."""
    if not value.isascii():
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_lines(report: FleetReport) -> Iterable[str]:
    yield ("# HELP execsys_doctor_hazard_status execsys doctor hazard status per host: "
           "0 ok or not applicable, 1 warn, 2 fail, 3 could not check")
    yield "# TYPE execsys_doctor_hazard_status gauge"
    hazard_labels: dict[str, str] = {}  # hazard id -> its escaped label, once for all hosts
    for r in report.records:
        if not r.hazards:
            continue
        host = _label(r.key)
        for hazard, status in r.hazards.items():
            label = hazard_labels.get(hazard)
            if label is None:
                label = hazard_labels[hazard] = _label(hazard)
            yield f'execsys_doctor_hazard_status{{host="{host}",hazard="{label}"}} {PROM_STATUS.get(status, 3)}'
    yield ("# HELP execsys_identity_info The fleet digest each host reports, and its execsys identity id "
           "where the report has one (value always 1)")
    yield "# TYPE execsys_identity_info gauge"
    for r in report.records:
        if r.fleet_digest is not None:
            named = f',identity="{_label(r.identity)}"' if r.identity else ""
            yield f'execsys_identity_info{{host="{_label(r.key)}",fleet_digest="{_label(r.fleet_digest)}"{named}}} 1'
    yield "# HELP execsys_fleet_identity_agreement Share of hosts with the modal fleet digest (k/n)"
    yield "# TYPE execsys_fleet_identity_agreement gauge"
    yield f"execsys_fleet_identity_agreement {_prom_ratio(report.identity_k, report.identity_n)}"
    yield "# HELP execsys_fleet_digest_match_ratio Share of hosts whose artifact digest is the expected one"
    yield "# TYPE execsys_fleet_digest_match_ratio gauge"
    yield f"execsys_fleet_digest_match_ratio {_prom_ratio(report.digest_k, report.digest_n)}"


def _prom_ratio(k: int, n: int) -> str:
    return repr(k / n) if n else "NaN"


def prometheus_text(report: FleetReport) -> str:
    """The four metrics in the text exposition format node_exporter's textfile collector reads."""
    return "\n".join(prometheus_lines(report)) + "\n"
