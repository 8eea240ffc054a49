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
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys import COMPONENTS
from execsys.errors import InputError, UsageError
from execsys.operation import Event, OnEvent, emit, new_cancel

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity

__all__ = ["FleetOptions", "FleetReport", "HostRecord", "component_digests", "fleet_components",
           "prometheus_text", "run_fleet"]

SCHEMA = "execsys.fleet/2"  # /2: identity_agreement.fleet_digest; outliers name fleet_digest and identity
STATUS_RANK = {"fail": 4, "error": 3, "warn": 2, "skip": 1, "ok": 0}
PROM_STATUS = {"ok": 0, "skip": 0, "warn": 1, "fail": 2, "error": 3}
"""``execsys_doctor_hazard_status`` values: 0 ok (or not applicable), 1 warn, 2 fail, 3 could not check."""
NODE_FACTS = ("hostname", "machine_id")
GPU_NODE_FACTS = ("uuid", "serial", "pci_bus_id")


@dataclass(frozen=True)
class ReportRead(Event):
    """One report reduced to its host record (``index`` counts from 1)."""

    index: int
    host: str
    report: str


@dataclass(slots=True)
class HostRecord:
    """What the fleet answer needs from one host report, and nothing more."""

    host: str
    report: str
    key: str = ""  # the host, or host#2, host#3 ... for the second and later reports naming it
    fleet_digest: str | None = None  # sha256 over the fleet components (see fleet_components)
    identity: str | None = None  # the host's execsys identity id (BLAKE3), when the report has it
    components: tuple[str, ...] | None = None  # component digests, in COMPONENTS order
    digest: str | None = None  # the artifact digest computed on the host
    declared_digest: str | None = None
    hazards: dict[str, str] | None = None
    problem: str | None = None  # unreachable, failed, unreadable


# -- identity normalisation --

def fleet_components(components: dict[str, Any]) -> dict[str, Any]:
    """The components with the facts that name one machine removed: hostname, machine id, GPU UUIDs."""
    out = dict(components)
    hardware = out.get("hardware")
    if isinstance(hardware, dict) and isinstance(hardware.get("observed"), dict):
        observed = {k: v for k, v in hardware["observed"].items() if k not in NODE_FACTS}
        gpus = observed.get("gpus")
        if isinstance(gpus, list):
            observed["gpus"] = [{k: v for k, v in g.items() if k not in GPU_NODE_FACTS} if isinstance(g, dict)
                                else g for g in gpus]
        out["hardware"] = {**hardware, "observed": observed}
    return out


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def component_digests(components: dict[str, Any]) -> dict[str, str]:
    """``sha256:<hex>`` of each fleet component's canonical JSON (stdlib only, as on a bare host)."""
    normalised = fleet_components(components)
    return {name: "sha256:" + hashlib.sha256(_canonical(normalised.get(name, {}))).hexdigest()
            for name in COMPONENTS}


def fleet_digest(digests: dict[str, str]) -> str:
    """The fleet digest of a host: one sha256 over its component digests (not its execsys identity id)."""
    return "sha256:" + hashlib.sha256(_canonical([digests.get(n) for n in COMPONENTS])).hexdigest()


def component_label(name: str, component: dict[str, Any]) -> str:
    """A short human value for a component, for "runtime (vllm 0.11.0 -> 0.11.1)"."""
    observed = component.get("observed") or {}
    declared = component.get("declared") or {}
    if name == "artifact" and observed.get("digest"):
        return str(observed["digest"])[:19]
    if name == "runtime":
        engine = observed.get("engine") or {}
        if engine.get("name"):
            return f"{engine['name']} {engine.get('version') or '?'}"
    if name == "hardware":
        gpus = observed.get("gpus") or []
        gpu = f"{len(gpus)}x {gpus[0].get('name')}" if gpus and isinstance(gpus[0], dict) else "no GPU"
        return f"{observed.get('kernel') or '?'}, {gpu}"
    if name == "harness" and observed.get("commit"):
        return str(observed["commit"])[:12] + (" +dirty" if observed.get("dirty") else "")
    if name == "environment" and observed.get("python"):
        return f"python {(observed.get('python') or {}).get('version')}"
    if declared:
        return ", ".join(f"{k}={v}" for k, v in list(declared.items())[:3])[:60]
    return ""


# -- reading reports ------------------------------------------------------------------------------

def _intern(text: str | None) -> str | None:
    """One copy of each repeated string (hazard ids, statuses, digests) across 10,000 records."""
    return None if text is None else sys.intern(str(text))


def _doctor_hazards(body: dict[str, Any]) -> dict[str, str]:
    hazards = body.get("hazards")
    intern = sys.intern
    if isinstance(hazards, dict):  # execsys_facts: {id: status}
        # json keys are str already; a status may not be
        return {intern(k): intern(v if type(v) is str else str(v)) for k, v in hazards.items()}
    if hazards is not None and not isinstance(hazards, list):
        raise ValueError(f"its hazards are {type(hazards).__name__}, not a list")
    return {intern(str(item["id"])): intern(str(item.get("status", "error")))
            for item in hazards or [] if isinstance(item, dict) and item.get("id")}


def _host_of_doctor(body: dict[str, Any], fallback: str) -> str:
    host = body.get("host") or {}
    if not isinstance(host, dict):
        return str(host) if isinstance(host, str) and host else fallback
    return str(host.get("name") if host.get("name") not in (None, "local") else host.get("hostname") or fallback)


_ANSIBLE_PAYLOAD = "__payload__"
_ANSIBLE_CACHE_PREFIX = re.compile(r"^s\d+_")


class _Reader:
    """Turns report documents into host records, keeping the labels outliers are described with."""

    def __init__(self) -> None:
        self.labels: dict[tuple[str, str], str] = {}  # (component, digest) -> short value
        self._digests: dict[tuple[str, ...], tuple[tuple[str, ...], str]] = {}  # digests -> (interned, fleet)

    def _fleet_digest(self, digests: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        """The interned digests and the fleet digest, computed once per distinct set of digests."""
        known = self._digests.get(digests)
        if known is None:
            known = (tuple(sys.intern(d) for d in digests), fleet_digest(dict(zip(COMPONENTS, digests, strict=True))))
            self._digests[digests] = known
        return known

    def _identity(self, record: HostRecord, components: dict[str, Any], node_id: str | None) -> None:
        digests = component_digests(components)
        for name in COMPONENTS:
            key = (name, digests[name])
            if key not in self.labels:
                self.labels[key] = component_label(name, components.get(name) or {})
        record.components, record.fleet_digest = self._fleet_digest(tuple(digests[n] for n in COMPONENTS))
        record.identity = node_id
        artifact = components.get("artifact") or {}
        record.digest = _intern((artifact.get("observed") or {}).get("digest"))
        record.declared_digest = _intern((artifact.get("declared") or {}).get("digest"))

    def _facts(self, record: HostRecord, facts: dict[str, Any]) -> None:
        doctor = facts.get("doctor") or {}
        if doctor:
            record.hazards = _doctor_hazards(doctor)
        identity = facts.get("identity") or {}
        digests = identity.get("components")
        if isinstance(digests, dict) and digests:
            key = tuple([d if type(d) is str else str(d or "") for d in map(digests.get, COMPONENTS)])
            if key not in self._digests:
                labels = identity.get("labels") or {}
                for name, digest in zip(COMPONENTS, key, strict=True):
                    self.labels.setdefault((name, digest), str(labels.get(name) or ""))
            record.components, record.fleet_digest = self._fleet_digest(key)
            record.identity = _intern(identity.get("id")) if isinstance(identity.get("id"), str) else None
        artifact = facts.get("artifact") or {}
        record.digest = _intern(artifact.get("blake3"))
        record.declared_digest = _intern(artifact.get("declared"))
        if facts.get("error"):
            record.problem = str(facts["error"])

    def records(self, data: Any, host_hint: str, report: str, *, named_by_file: bool = False
                ) -> list[HostRecord]:
        """The host records in one document; ``named_by_file`` keeps the inventory name (Ansible).

        A document of any other shape (a string where a table belongs, a list of numbers) is a problem
        of that one host, never the end of the fleet's answer: the shapes are checked where they are
        read, and what slips past that is caught here, per document."""
        try:
            return self._records(data, host_hint, report, named_by_file=named_by_file)
        except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
            return [HostRecord(host_hint, report, problem=f"malformed report ({type(exc).__name__}: "
                                                          f"{_one_line(exc)})")]

    def _records(self, data: Any, host_hint: str, report: str, *, named_by_file: bool = False
                 ) -> list[HostRecord]:
        if isinstance(data, dict) and isinstance(data.get(_ANSIBLE_PAYLOAD), str):
            # ansible-core >= 2.19 fact cache: {"__payload__": "<json>"} in a file named s<schema>_<host>
            try:
                data = json.loads(data[_ANSIBLE_PAYLOAD])
            except ValueError:
                return [HostRecord(host_hint, report, problem="unreadable Ansible fact cache payload")]
            host_hint = _ANSIBLE_CACHE_PREFIX.sub("", host_hint, count=1)
        if not isinstance(data, dict):
            return [HostRecord(host_hint, report, problem="not an execsys report (expected a JSON object)")]
        schema = data.get("schema")
        if "kind" in data and isinstance(data.get("body"), dict) and "created_at" in data:  # ledger export
            return self._records(data["body"], host_hint, report)
        if schema == "execsys.doctor/1":
            hosts = data.get("hosts")
            bodies: list[Any] = hosts if isinstance(hosts, list) else [data]
            out = []
            for body in bodies:
                if not isinstance(body, dict):
                    continue
                host = host_hint if named_by_file else _host_of_doctor(body, host_hint)
                host_table = body.get("host")
                error = host_table.get("error") if isinstance(host_table, dict) else None
                out.append(HostRecord(host, report, hazards=_doctor_hazards(body),
                                      problem=str(error) if error else None))
            return out
        if schema == "execsys.node-check/1":
            body = data.get("doctor")
            if not isinstance(body, dict):
                return [HostRecord(host_hint, report, problem=f"could not check: {data.get('line')}")]
            host = host_hint if named_by_file else _host_of_doctor(body, host_hint)
            return [HostRecord(host, report, hazards=_doctor_hazards(body))]
        if str(schema).startswith("execsys.identity/") and isinstance(data.get("components"), dict):
            # identity/1 and /2 (which adds "observer", outside the components) read the same here
            components = data["components"]
            hardware = (components.get("hardware") or {}).get("observed") or {}
            host = host_hint if named_by_file else str(hardware.get("hostname") or host_hint)
            record = HostRecord(host, report)
            self._identity(record, components, data.get("id"))
            return [record]
        # Ansible: --tree output (the module's result) or a fact-cache file (the facts themselves)
        if data.get("unreachable"):
            return [HostRecord(host_hint, report, problem=f"unreachable: {_one_line(data.get('msg'))}")]
        facts: dict[str, Any] = data["ansible_facts"] if isinstance(data.get("ansible_facts"), dict) else data
        execsys_facts = facts.get("execsys") or facts.get("ansible_execsys")
        if isinstance(execsys_facts, dict):
            record = HostRecord(host_hint, report)
            self._facts(record, execsys_facts)
            return [record]
        if data.get("failed"):
            return [HostRecord(host_hint, report, problem=f"failed: {_one_line(data.get('msg'))}")]
        return [HostRecord(host_hint, report, problem="not an execsys report (no doctor, identity or "
                                                      "execsys facts in it)")]


def _one_line(text: Any) -> str:
    return " ".join(str(text or "no message").split())[:200]


def _read_json(path: str) -> Any:
    from execsys.fsutil import RECORD_FILE_LIMIT, read_bounded

    # bounded and regular files only: a FIFO or /dev/zero among the reports must not hang the fleet view
    return json.loads(read_bounded(path, RECORD_FILE_LIMIT, "host report"))


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

def _report_paths(options: FleetOptions) -> Iterator[tuple[str, bool]]:
    """(path, named_by_file) for every report file; directories are read file by file, sorted."""
    if options.from_ansible is not None:
        for entry in sorted(os.scandir(options.from_ansible), key=lambda e: e.name):
            if entry.is_file() and not entry.name.startswith("."):
                yield entry.path, True
        return
    for given in options.reports:
        if os.path.isdir(given):
            for entry in sorted(os.scandir(given), key=lambda e: e.name):
                if entry.is_file() and not entry.name.startswith("."):
                    yield entry.path, False
        else:
            yield given, False


def _host_name(path: str) -> str:
    name = os.path.basename(path)
    return name[:-5] if name.endswith(".json") else name


def _file_records(options: FleetOptions, reader: _Reader) -> Iterator[HostRecord]:
    for path, named_by_file in _report_paths(options):
        try:
            data = _read_json(path)
        except (OSError, ValueError, UnicodeDecodeError, RecursionError, InputError) as exc:
            yield HostRecord(_host_name(path), path,
                             problem=f"unreadable report: {getattr(exc, 'strerror', None) or exc}")
            continue
        yield from reader.records(data, _host_name(path), path, named_by_file=named_by_file)


def _ledger_records(options: FleetOptions, reader: _Reader) -> Iterator[HostRecord]:
    """The newest doctor and newest identity record per host since ``ledger_since``, merged."""
    from execsys.ledger import Ledger

    since = options.ledger_since or ""
    newest: dict[str, HostRecord] = {}
    with Ledger.open(options.ledger_path) as ledger:
        for kind in ("identity", "doctor"):
            for row in ledger.iter(kind=kind):
                if row.created_at < since:
                    continue
                for rec in reader.records(row.body, f"record {row.id}", row.id):
                    merged = newest.get(rec.host) or HostRecord(rec.host, row.id)
                    if kind == "identity":
                        merged.fleet_digest, merged.identity = rec.fleet_digest, rec.identity
                        merged.components, merged.digest = rec.components, rec.digest
                        merged.declared_digest = rec.declared_digest
                    else:
                        merged.hazards, merged.problem = rec.hazards, rec.problem
                    merged.report = row.id if merged.report == row.id else f"{merged.report}+{row.id}"
                    newest[rec.host] = merged
    yield from newest.values()


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


# -- one host's facts (what contrib/ansible's execsys_facts module returns) -----------------------

def host_facts(config: str | None = None, path: str | None = None, env_from: str | None = None) -> dict[str, Any]:
    """``ansible_facts.execsys`` for this host: the doctor (as a node check: the environment it inspected
    named), the identity with a digest per component, and the artifact digest computed from its bytes.

    Nothing is written: no lock, no ledger row (Ansible's ``changed`` is always false)."""
    import socket

    from execsys import declaration as declaration_module
    from execsys.doctor.node_checks.check import NodeCheckOptions, run_node_check
    from execsys.errors import ExecsysError
    from execsys.identity import pin
    from execsys.redact import scrub

    decl = declaration_module.load(config)
    facts: dict[str, Any] = {"schema": "execsys.facts/1", "host": socket.gethostname()}
    check = run_node_check(NodeCheckOptions.from_sources(decl, None, mode="npd", path=path, env_from=env_from))
    hazards = {r.id: r.status for r in check.host.hazards} if check.host is not None else {}
    facts["doctor"] = {"verdict": check.host.verdict if check.host is not None else "unknown",
                       "hazards": hazards, "line": check.line, "environment": check.environment}
    try:
        identity = pin(decl)
    except ExecsysError as exc:
        facts["identity"] = None
        facts["artifact"] = {"path": decl.get("artifact", "path"), "blake3": None,
                             "declared": decl.get("artifact", "digest")}
        facts["error"] = f"cannot pin: {exc}"
        return scrub(facts)
    digests = component_digests(identity.components)
    facts["identity"] = {"id": identity.id, "fleet_digest": fleet_digest(digests), "components": digests,
                         "labels": {n: component_label(n, identity.components[n]) for n in COMPONENTS}}
    artifact = identity.components["artifact"]
    facts["artifact"] = {"path": artifact["observed"].get("path") or artifact["declared"].get("path"),
                         "blake3": artifact["observed"].get("digest"),
                         "declared": artifact["declared"].get("digest")}
    return scrub(facts)


# -- a host with python3 alone (contrib/ansible's fallback, as `doctor --host` ships the doctor) --------

SHIPPED_NOTE = ("execsys is not installed on this host: the doctor ran from the controller's copy, sent "
                "over the module's stdin; no identity was pinned")


@dataclass(frozen=True)
class ShippedPrograms:
    """What the controller sends a host that has python3 and no execsys: the doctor (the same
    one-line program ``execsys doctor --host`` sends, agent protocol included) and the artifact
    digest program (``execsys digest``'s remote driver: b3sum, python blake3, or nothing there)."""

    doctor: str
    digest: str | None
    artifact_path: str | None
    declared_digest: str | None


def shipped_programs(config_text: str | None = None, config_path: str | None = None,
                     timeout: float = 120.0) -> ShippedPrograms:
    """The programs for one host, from its declaration (read on the host, parsed here; relative paths
    resolve beside ``config_path`` as the host sees it). Raises InputError for a malformed declaration."""
    from execsys import declaration as declaration_module
    from execsys.digest import remote_program
    from execsys.doctor.context import DoctorOptions
    from execsys.doctor.remote import program_line

    decl = (declaration_module.parse(config_text, Path(config_path or "execsys.toml"))
            if config_text is not None else None)
    options = DoctorOptions.from_sources(decl, None)
    options.hosts = []  # this host is the one inspected
    digest = None
    if options.artifact_path and "://" not in options.artifact_path:
        prelude = f"import json as _j\nPAYLOAD = _j.loads({json.dumps(json.dumps({'path': options.artifact_path, 'timeout': timeout}))})\n"
        digest = prelude + remote_program()
    declared = decl.get("artifact", "digest") if decl is not None else None
    return ShippedPrograms(program_line(options).decode("ascii"), digest, options.artifact_path,
                           str(declared) if declared else None)


def shipped_host_facts(shipped: dict[str, Any], programs: ShippedPrograms) -> dict[str, Any]:
    """``ansible_facts.execsys`` from what the shipped programs printed on the host: the module's
    ``execsys_shipped`` = ``{host: facts, results: [hazard result JSON], finished, reason, environment,
    digest: {digest, error} | None}``. The verdict and line are the node check's own (npd mode)."""
    from execsys.doctor.model import HazardResult, HostReport
    from execsys.doctor.node_checks.check import verdict
    from execsys.doctor.registry import IDS
    from execsys.doctor.runner import error_result
    from execsys.redact import scrub

    seen = shipped.get("host")
    host_facts_seen: dict[str, Any] = seen if isinstance(seen, dict) else {}
    name = str(host_facts_seen.get("hostname") or "unknown")
    results = {r.id: r for r in (HazardResult.from_json(item) for item in shipped.get("results") or []
                                 if isinstance(item, dict) and item.get("id"))}
    reason = None if shipped.get("finished") else str(shipped.get("reason") or "the shipped doctor did not finish")
    hazards = [results.get(h) or error_result(h, "host-not-inspected", f"not inspected: {reason or 'no result'}",
                                              [], "") for h in IDS]
    report = HostReport(name, dict(host_facts_seen), hazards, 0.0, error=reason)
    line = verdict(report, False, name).line
    said = shipped.get("digest")
    digest: dict[str, Any] = said if isinstance(said, dict) else {}
    facts: dict[str, Any] = {
        "schema": "execsys.facts/1", "host": name, "shipped": True, "note": SHIPPED_NOTE,
        "doctor": {"verdict": report.verdict, "hazards": {r.id: r.status for r in hazards}, "line": line,
                   "environment": shipped.get("environment") or {}},
        "identity": None,
        "artifact": {"path": programs.artifact_path, "blake3": digest.get("digest") or None,
                     "declared": programs.declared_digest},
    }
    if digest.get("error"):
        facts["artifact"]["error"] = str(digest["error"])
    return scrub(facts)

