"""The fleet view: do N host reports agree on identity, artifact bytes and hazards?

"Are all 312 nodes serving the same bytes under the same identity?" Each host report -- an
Ansible ``execsys_facts`` result (fact cache or ``--tree`` output), a doctor, node-check or pin
JSON file, or the ledger's newest doctor and identity records per host -- is reduced as it is read
to one small :class:`HostRecord`, so memory holds no report, only what the answer needs. Then:

- **identity agreement**: k/n hosts share the modal *fleet digest* -- a stdlib sha256 over the pinned
  components with the facts that name one machine removed (hostname, machine id, GPU UUIDs), so two
  nodes of one build agree; each outlier is named with the components that differ from the mode. The
  fleet digest is not an execsys identity: the identity id every other command shows (BLAKE3, over
  every component, the machine's own facts included) is named per host where its report carries it
  (a pin report, execsys_facts);
- **artifact digest match rate**: the share of hosts whose computed artifact digest equals the
  expected one (the lock's pinned digest, else the report's declared digest, else the fleet's
  modal digest -- said which). Every mismatch is listed as an integrity defect, never averaged away;
- **hazard matrix**: hazard x host, the worst hazard first, with counts per status.

Every report given counts once: N is the number of host records. A doctor (or node-check) report and
a pin report of one host are two kinds of report of that host, read as one record (``a.json+b.json``);
two reports of one kind naming the same host both count and the second is flagged (and keyed ``host#2``
in the matrix and the metrics). A report that cannot be read counts too, as a problem. :func:`prometheus_text` renders the four metrics for
node_exporter's textfile collector.

    options = FleetOptions.from_sources(declaration, lock, reports=["a.json"], prom="fleet.prom")
    report = run_fleet(options)          # never prints

One module per seam: :mod:`~execsys.fleet.read` (the host record, the fleet digest, reading report files
and the ledger), :mod:`~execsys.fleet.report` (the options, :func:`run_fleet` and the answer),
:mod:`~execsys.fleet.prometheus` (the textfile metrics) and :mod:`~execsys.fleet.facts` (one host's
``execsys_facts``, installed or shipped). Callers import from ``execsys.fleet``; the names below are the
whole of what they use.
"""

from __future__ import annotations

from execsys.fleet.facts import (
    SHIPPED_NOTE,
    ShippedPrograms,
    host_facts,
    shipped_host_facts,
    shipped_programs,
)
from execsys.fleet.prometheus import PROM_STATUS, prometheus_lines, prometheus_text
from execsys.fleet.read import (
    GPU_NODE_FACTS,
    NODE_FACTS,
    HostRecord,
    _Reader,
    component_digests,
    component_label,
    fleet_components,
    fleet_digest,
)
from execsys.fleet.report import (
    SCHEMA,
    STATUS_RANK,
    FleetOptions,
    FleetReport,
    ReportRead,
    parse_since,
    run_fleet,
)

__all__ = ["FleetOptions", "FleetReport", "HostRecord", "component_digests", "fleet_components",
           "prometheus_text", "run_fleet",
           # the other names callers and tests import
           "GPU_NODE_FACTS", "NODE_FACTS", "PROM_STATUS", "SCHEMA", "SHIPPED_NOTE", "STATUS_RANK", "ReportRead",
           "ShippedPrograms", "_Reader", "component_label", "fleet_digest", "host_facts", "parse_since",
           "prometheus_lines", "shipped_host_facts", "shipped_programs"]
