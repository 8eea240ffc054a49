"""Remote placement: the four conditions an arm placed on another host must meet before it runs.

A paired difference between arms on two machines is only as good as the claim that each arm ran
what and where it was registered to. Before an arm's first case, for a host that is not this
machine: (a) the placement was registered before any case ran, (b) the artifact's digest computed
on the host over SSH equals the pinned one, (c) the host's identity (GPUs, driver) is recorded,
(d) the host is admissible under the declaration's residency policy (``[placement] allowed``).
Each is a pass/fail :class:`~execsys.plan.checks.Check`; a failed one makes the run descriptive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from execsys.errors import InputError
from execsys.ledger import now_iso
from execsys.plan.checks import Check


@dataclass
class PlacementReport:
    arm: str
    host: str
    checks: list[Check]
    hardware: dict[str, Any] | None = None
    digest: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"arm": self.arm, "host": self.host, "passed": self.passed,
                "checks": [c.to_json() for c in self.checks], "hardware": self.hardware, "digest": self.digest}


def registered_before_running(arm: str, host: str, registered_at: str | None) -> Check:
    """(a): the placement is part of a registration that precedes now (and so every case)."""
    return Check("a-registered", bool(registered_at) and str(registered_at) <= now_iso(),
                 f"placement {arm}={host} registered at {registered_at}, before any case ran"
                 if registered_at else "the placement was not registered")


def artifact_digest_on_host(host: str, artifact_path: str | None, expected_digest: str | None,
                            timeout: float) -> tuple[Check, dict[str, Any] | None]:
    """(b): the artifact's bytes on the host hash to the pinned digest (and the digest evidence)."""
    if not artifact_path or not expected_digest:
        return Check("b-digest", False,
                     "no artifact path and pinned digest to verify (give --lock with a pinned artifact)"), None
    from execsys.digest import remote_digest

    remote = remote_digest(host, artifact_path, timeout=timeout)
    evidence = remote.to_json()
    if not remote.ok:
        return Check("b-digest", False, f"could not compute the digest on {host}: {remote.error}"), evidence
    if remote.digest == expected_digest:
        return Check("b-digest", True, f"{artifact_path} on {host} hashes to the pinned {expected_digest[:16]}"
                     f" ({remote.method})"), evidence
    return Check("b-digest", False, f"integrity defect: {artifact_path} on {host} hashes to "
                 f"{str(remote.digest)[:16]}, the lock pins {expected_digest[:16]}"), evidence


def host_identity_recorded(host: str, timeout: float) -> tuple[Check, dict[str, Any] | None]:
    """(c): the host's hardware identity, observed over SSH and recorded with the run."""
    from execsys.observe.hardware import observe_remote_hardware

    try:
        hardware = observe_remote_hardware(host, timeout=min(timeout, 120.0))
    except InputError as exc:
        return Check("c-host-identity", False, f"could not record the identity of {host}: {exc}"), None
    gpus = hardware.get("gpus") or []
    what = ", ".join(str(g.get("name")) for g in gpus) or "no GPU"
    driver = next((g.get("driver_version") for g in gpus if g.get("driver_version")), None)
    return Check("c-host-identity", True, f"recorded {host}: {what}" + (f", driver {driver}" if driver else "")), \
        hardware


def host_admissible(host: str, placement_table: dict[str, Any]) -> Check:
    """(d): the host's tier/region (``[placement] hosts``) must be in ``[placement] allowed``."""
    allowed = [str(a) for a in placement_table.get("allowed") or []]
    if not allowed:
        return Check("d-admissible", False,
                     "no residency policy declared ([placement] allowed in execsys.toml): admissibility unknown")
    hosts = placement_table.get("hosts") or {}
    entry = hosts.get(host)
    labels: list[str] = [host]
    if isinstance(entry, str):
        labels.append(entry)
    elif isinstance(entry, dict):
        labels += [str(v) for k, v in entry.items() if k in ("tier", "region", "surface", "zone")]
    elif isinstance(entry, list):
        labels += [str(v) for v in entry]
    hit = [label for label in labels if label in allowed]
    if hit:
        return Check("d-admissible", True, f"{host} is {hit[0]}, allowed by [placement] allowed = {allowed}")
    if entry is None:
        return Check("d-admissible", False, f"{host} has no tier/region in [placement] hosts; allowed: {allowed}")
    return Check("d-admissible", False, f"{host} ({', '.join(labels[1:])}) is not in [placement] allowed = {allowed}")


def check_placement(arm: str, host: str, *, registered_at: str | None, artifact_path: str | None,
                    expected_digest: str | None, placement_table: dict[str, Any],
                    timeout: float = 600.0) -> PlacementReport:
    """The four remote-placement conditions for one arm, each pass/fail, before the arm starts."""
    registered = registered_before_running(arm, host, registered_at)
    digest_check, digest_evidence = artifact_digest_on_host(host, artifact_path, expected_digest, timeout)
    identity_check, hardware = host_identity_recorded(host, timeout)
    checks = [registered, digest_check, identity_check, host_admissible(host, placement_table)]
    return PlacementReport(arm, host, checks, hardware, digest_evidence)
