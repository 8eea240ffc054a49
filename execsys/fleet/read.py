"""Reading host reports: each one reduced, as it is read, to one small :class:`HostRecord`.

The fleet digest of a host (:func:`fleet_components`, :func:`component_digests`, :func:`fleet_digest`) -- a
stdlib sha256 over the pinned components with the facts that name one machine removed -- and the short
labels outliers are described with (:func:`component_label`). :class:`_Reader` turns a document of any
kind the fleet reads (an Ansible ``execsys_facts`` result or fact-cache file, a doctor, node-check or pin
JSON file, a ledger export) into host records; a document of any other shape is a problem of that one
host. :func:`_file_records` reads the report files and directories (bounded, regular files only);
:func:`_ledger_records` the ledger's newest doctor and identity records per host, merged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from execsys import COMPONENTS
from execsys.errors import InputError

if TYPE_CHECKING:
    from execsys.fleet.report import FleetOptions

NODE_FACTS = ("hostname", "machine_id")
GPU_NODE_FACTS = ("uuid", "serial", "pci_bus_id")


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


# -- the report files and the ledger -----------------------------------------------------------------

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
