"""One host's side of the fleet: what contrib/ansible's ``execsys_facts`` returns as ``ansible_facts.execsys``.

:func:`host_facts` where execsys is installed on the host (the doctor as a node check, the identity with
a digest per component, the artifact digest from its bytes; nothing written); for a host with python3
alone, :func:`shipped_programs` builds on the controller the doctor and digest programs sent over the
module's stdin, and :func:`shipped_host_facts` folds what they printed into the same facts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execsys import COMPONENTS
from execsys.fleet.read import component_digests, component_label, fleet_digest

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
