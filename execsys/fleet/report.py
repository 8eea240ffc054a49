"""The fleet answer: :class:`FleetOptions` (where the reports come from, the digest expected),
:func:`run_fleet` (every report read once, added up, ``--prom`` written atomically; never prints) and
:class:`FleetReport` -- identity agreement over fleet digests with each outlier named, the artifact digest
match rate with every mismatch listed as a defect, the hazard matrix worst first, the problems, and the
verdict and exit code. :func:`parse_since` reads ``--ledger-since``.
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys import COMPONENTS
from execsys.errors import InputError, UsageError
from execsys.fleet.prometheus import prometheus_text
from execsys.fleet.read import HostRecord, _file_records, _ledger_records, _Reader
from execsys.operation import Event, OnEvent, emit, new_cancel

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity

SCHEMA = "execsys.fleet/2"  # /2: identity_agreement.fleet_digest; outliers name fleet_digest and identity
STATUS_RANK = {"fail": 4, "error": 3, "warn": 2, "skip": 1, "ok": 0}


@dataclass(frozen=True)
class ReportRead(Event):
    """One report reduced to its host record (``index`` counts from 1)."""

    index: int
    host: str
    report: str


# -- options --------------------------------------------------------------------------------------

_RELATIVE = re.compile(r"^(\d+)\s*([smhdw])$")


def parse_since(text: str, now: datetime | None = None) -> str:
    """``--ledger-since``: an ISO-8601 date/time, or an age (``90m``, ``24h``, ``7d``) -> an ISO UTC string."""
    now = now or datetime.now(timezone.utc)
    match = _RELATIVE.match(text.strip())
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        seconds = amount * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]
        try:
            when = now - timedelta(seconds=seconds)
        except (OverflowError, ValueError):  # older than any date: 100000000000d
            when = datetime.min.replace(tzinfo=timezone.utc)
    else:
        try:
            when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"--ledger-since {text!r}: not an ISO date/time (2026-12-01T08:00) or an age "
                             "(90m, 24h, 7d)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class FleetOptions:
    """Where the host reports come from, the digest expected, and where the metrics go."""

    reports: list[str] = field(default_factory=list)
    from_ansible: str | None = None
    ledger_since: str | None = None  # ISO UTC, already parsed
    ledger_path: str | None = None
    prom: str | None = None
    expected_digest: str | None = None
    expected_source: str | None = None

    @classmethod
    def from_sources(cls, declaration: Declaration | None = None, lock: Identity | None = None, *,
                     reports: list[str] | None = None, from_ansible: str | None = None,
                     ledger_since: str | None = None, ledger_path: str | None = None,
                     prom: str | None = None, expected_digest: str | None = None) -> FleetOptions:
        """Exactly one source of reports; the expected digest from the flag, the lock, or the declaration."""
        given = [name for name, value in (("REPORT", reports), ("--from-ansible", from_ansible),
                                          ("--ledger-since", ledger_since)) if value]
        if not given:
            raise UsageError("no host reports: give REPORT files, --from-ansible DIR or --ledger-since T")
        if len(given) > 1:
            raise UsageError(f"give one source of host reports, not {' and '.join(given)}")
        for path in reports or []:
            if not os.path.exists(path):
                raise InputError(f"{path}: no such report file or directory")
        if from_ansible is not None and not os.path.isdir(from_ansible):
            raise InputError(f"--from-ansible {from_ansible}: not a directory (an Ansible fact cache or --tree "
                             "output)")
        if prom is not None:
            from execsys.fsutil import check_output

            # abspath, not resolve(): a symlink loop at --prom must be the writer's refusal, not a RuntimeError
            parent = Path(os.path.abspath(os.path.expanduser(prom))).parent
            if Path(prom).is_dir() or not parent.is_dir():
                raise InputError(f"--prom {prom}: cannot write there (give a file in an existing directory)")
            check_output(prom, "the Prometheus textfile")  # a FIFO, device or loop there: refused before reading
        if expected_digest is not None:
            # as digest --expect: a digest the fleet is held to must be one ('zz' matched no host, silently)
            given_digest, expected_digest = expected_digest, expected_digest.strip().lower()
            if len(expected_digest) != 64 or any(c not in "0123456789abcdef" for c in expected_digest):
                raise UsageError(f"--expected-digest {given_digest!r}: not a BLAKE3 hex digest (64 hex characters)")
        source = "--expected-digest" if expected_digest else None
        if expected_digest is None and lock is not None:
            expected_digest = lock.observed("artifact").get("digest") or None
            source = f"the lock ({lock.source or 'pinned identity'})" if expected_digest else None
        if expected_digest is None and declaration is not None and declaration.get("artifact", "digest"):
            expected_digest = str(declaration.get("artifact", "digest"))
            source = f"the declaration ({declaration.path})"
        return cls(reports=list(reports or []), from_ansible=from_ansible,
                   ledger_since=parse_since(ledger_since) if ledger_since else None, ledger_path=ledger_path,
                   prom=prom, expected_digest=expected_digest, expected_source=source)


# -- the report -----------------------------------------------------------------------------------

@dataclass
class FleetReport:
    """The fleet answer. ``records`` are the hosts, in the order read (duplicates keyed ``host#2``); the
    agreement is over fleet digests (``modal_fleet_digest``), never called an execsys identity."""

    records: list[HostRecord]
    labels: dict[tuple[str, str], str]
    expected_digest: str | None
    expected_source: str | None
    modal_fleet_digest: str | None = None
    identity_k: int = 0
    identity_n: int = 0
    digest_k: int = 0
    digest_n: int = 0
    duplicates: dict[str, int] = field(default_factory=dict)  # host -> how many reports name it
    hazard_ids: list[str] = field(default_factory=list)  # worst first
    prom_path: str | None = None
    cancelled: bool = False
    reports: int = 0  # reports read: more than the hosts where a doctor and a pin report of one host met
    _modal_digest: str | None = None  # the expected digest when neither the lock nor the reports declare one
    _counts: dict[str, dict[str, int]] | None = field(default=None, repr=False)

    @property
    def hosts(self) -> int:
        return len(self.records)

    def outliers(self) -> Iterator[dict[str, Any]]:
        modal = self._modal_components()
        for r in self.records:
            if r.fleet_digest is None or r.fleet_digest == self.modal_fleet_digest:
                continue
            changes = []
            for name, mine, theirs in zip(COMPONENTS, r.components or (), modal or (), strict=False):
                if mine != theirs:
                    changes.append({"component": name, "modal": self.labels.get((name, theirs), ""),
                                    "this": self.labels.get((name, mine), "")})
            yield {"host": r.key, "report": r.report, "fleet_digest": r.fleet_digest, "identity": r.identity,
                   "components": [c["component"] for c in changes], "changes": changes}

    def _modal_components(self) -> tuple[str, ...] | None:
        return next((r.components for r in self.records if r.fleet_digest == self.modal_fleet_digest), None)

    def defects(self) -> Iterator[dict[str, Any]]:
        for r in self.records:
            expected = self._expected_for(r)
            if r.digest is not None and expected is not None and r.digest != expected:
                yield {"host": r.key, "report": r.report, "digest": r.digest, "expected": expected}

    def _expected_for(self, r: HostRecord) -> str | None:
        return self.expected_digest or r.declared_digest or self._modal_digest

    def problems(self) -> Iterator[dict[str, Any]]:
        for r in self.records:
            if r.problem:
                yield {"host": r.key, "report": r.report, "problem": r.problem}

    def hazard_counts(self) -> dict[str, dict[str, int]]:
        """hazard -> status -> hosts, in ``hazard_ids`` order (counted once, on first use)."""
        if self._counts is None:
            counts: dict[str, dict[str, int]] = {h: dict.fromkeys(STATUS_RANK, 0) for h in self.hazard_ids}
            for r in self.records:
                for hazard, status in (r.hazards or {}).items():
                    counts[hazard][status if status in STATUS_RANK else "error"] += 1
            self._counts = counts
        return {h: dict(self._counts[h]) for h in self.hazard_ids}

    @property
    def failing_hosts(self) -> int:
        return sum(1 for r in self.records if any(s in ("fail", "error") for s in (r.hazards or {}).values()))

    @property
    def agrees(self) -> bool:
        return (self.identity_k == self.identity_n and self.digest_k == self.digest_n
                and self.failing_hosts == 0 and not any(r.problem for r in self.records))

    @property
    def exit_code(self) -> int:
        return 0 if self.agrees else 1

    def digest_match(self) -> dict[str, Any]:
        """``{k, n, ratio, expected, expected_source, defects}``: every mismatch listed, none averaged away."""
        return {"k": self.digest_k, "n": self.digest_n, "ratio": _ratio(self.digest_k, self.digest_n),
                "expected": self.expected_digest or self._modal_digest,
                "expected_source": self.expected_source or ("the fleet's modal digest" if self._modal_digest else None),
                "defects": list(self.defects())}

    def to_json(self) -> dict[str, Any]:
        counts = self.hazard_counts()
        return {
            "schema": SCHEMA,
            "hosts": self.hosts,
            "reports": self.reports,
            "identity_agreement": {"k": self.identity_k, "n": self.identity_n,
                                   "fleet_digest": self.modal_fleet_digest,
                                   "ratio": _ratio(self.identity_k, self.identity_n)},
            "outliers": list(self.outliers()),
            "digest_match": self.digest_match(),
            "hazards": {h: {r.key: r.hazards[h] for r in self.records
                            if r.hazards and h in r.hazards} for h in self.hazard_ids},
            "hazard_counts": counts,
            "duplicates": [{"host": host, "reports": n} for host, n in self.duplicates.items()],
            "problems": list(self.problems()),
            "prom": self.prom_path,
            "verdict": "agrees" if self.agrees else "disagrees",
            "cancelled": self.cancelled,
        }


def _ratio(k: int, n: int) -> float | None:
    return round(k / n, 6) if n else None


# -- running --------------------------------------------------------------------------------------

def _kind(record: HostRecord) -> str | None:
    """"doctor" for a record of hazards alone, "pin" for one of an identity or digest alone, else None
    (both already, as execsys_facts have, or neither: an unreadable report)."""
    doctor = record.hazards is not None
    pinned = record.fleet_digest is not None or record.digest is not None
    return "doctor" if doctor and not pinned else "pin" if pinned and not doctor else None


def _complete(record: HostRecord, other: HostRecord) -> None:
    """``record`` with the other kind of report of its host (``other``) folded in."""
    if other.hazards is not None:
        record.hazards = other.hazards
    else:
        record.fleet_digest, record.identity, record.components = other.fleet_digest, other.identity, other.components
        record.digest, record.declared_digest = other.digest, other.declared_digest
    record.problem = record.problem or other.problem
    record.report = f"{record.report}+{other.report}"


def run_fleet(options: FleetOptions, on_event: OnEvent | None = None,
              cancel: threading.Event | None = None) -> FleetReport:
    """Read every host report, add them up, write ``--prom`` atomically; never prints."""
    cancel = new_cancel(cancel)
    reader = _Reader()
    source = _ledger_records(options, reader) if options.ledger_since else _file_records(options, reader)
    records: list[HostRecord] = []
    seen: Counter[str] = Counter()
    keys: set[str] = set()  # every key given: one series per key, so node_exporter never sees a duplicate
    identities: Counter[str] = Counter()  # fleet digest -> hosts
    digests: Counter[str] = Counter()
    hazard_rank: dict[str, tuple[int, ...]] = {}
    waiting: dict[str, HostRecord] = {}  # host -> its record of one kind (doctor, pin), open for the other
    cancelled = False
    read = 0

    def count(record: HostRecord) -> None:
        if record.fleet_digest is not None:
            identities[record.fleet_digest] = identities.get(record.fleet_digest, 0) + 1
        if record.digest is not None:
            digests[record.digest] = digests.get(record.digest, 0) + 1
        if record.hazards:
            for hazard in record.hazards:
                if hazard not in hazard_rank:
                    hazard_rank[hazard] = ()

    for record in source:
        if cancel.is_set():
            cancelled = True
            break
        read += 1
        host = record.host
        kind = _kind(record)
        partner = waiting.get(host) if kind is not None else None
        if partner is not None and _kind(partner) not in (None, kind):
            # the doctor and the pin report of one host: one host, not a duplicate
            _complete(partner, record)
            del waiting[host]
            count(record)
            if on_event is not None:
                emit(on_event, ReportRead(read, host, record.report))
            continue
        if kind is not None and host not in waiting:
            waiting[host] = record
        records.append(record)
        times = seen[host] = seen.get(host, 0) + 1
        key = host if times == 1 else f"{host}#{times}"
        while key in keys:  # hosts a, a and a#2: the second a is a#2, so the host a#2 is keyed a#2#2
            times += 1
            key = f"{host}#{times}"
        keys.add(key)
        record.key = key
        count(record)
        if on_event is not None:  # 10,000 events nobody listens to cost a tenth of the run
            emit(on_event, ReportRead(read, record.host, record.report))
    if not records and not cancelled:
        raise InputError("no host reports found" + (f" in the ledger since {options.ledger_since}"
                                                    if options.ledger_since else ""))
    modal = min(identities.items(), key=lambda kv: (-kv[1], kv[0]))[0] if identities else None
    report = FleetReport(records, reader.labels, options.expected_digest, options.expected_source,
                         modal_fleet_digest=modal, identity_k=identities.get(modal, 0) if modal else 0,
                         identity_n=sum(identities.values()),
                         duplicates={h: n for h, n in seen.items() if n > 1}, cancelled=cancelled,
                         reports=read)
    if not options.expected_digest and digests:
        report._modal_digest = min(digests.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    report.digest_n = sum(1 for r in records if r.digest is not None and report._expected_for(r) is not None)
    report.digest_k = sum(1 for r in records if r.digest is not None and r.digest == report._expected_for(r))
    report.hazard_ids = list(hazard_rank)
    counts = report.hazard_counts()
    report.hazard_ids = sorted(counts, key=lambda h: tuple(-counts[h][s] for s in ("fail", "error", "warn")))
    if options.prom:
        from execsys.fsutil import write_output

        write_output(options.prom, prometheus_text(report), "the Prometheus textfile")
        report.prom_path = options.prom
    return report
