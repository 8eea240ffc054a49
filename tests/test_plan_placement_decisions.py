"""Remote placement's four conditions as tables, in process: (a) registered before now, (b) the artifact's
digest computed on the host, (c) the host's hardware recorded, (d) the host admissible under the
residency policy -- each pass and each way it fails, with the sentence the operator reads.

The SSH side (the digest computed on the host, the hardware looked at there) is replaced by fakes that
answer as :func:`execsys.digest.remote_digest` and :func:`execsys.observe.hardware.observe_remote_hardware`
do; tests/test_plan.py runs the real thing over the loopback sshd.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import execsys.digest
import execsys.observe.hardware
from execsys.errors import InputError
from execsys.ledger import now_iso
from execsys.plan import placement
from execsys.plan.checks import Check
from execsys.plan.placement import (
    PlacementReport,
    artifact_digest_on_host,
    check_placement,
    host_admissible,
    host_identity_recorded,
    registered_before_running,
)

PINNED = "ab" * 32


@dataclass
class FakeDigest:
    ok: bool
    digest: str | None = None
    error: str | None = None
    method: str = "blake3"

    def to_json(self) -> dict:
        return {"ok": self.ok, "digest": self.digest, "error": self.error, "method": self.method}


@pytest.fixture
def machine(monkeypatch):
    """What the host answers: ``machine.digest`` (a FakeDigest) and ``machine.hardware`` (a dict, or an
    InputError to raise); the calls made are kept in ``machine.calls``."""

    class Remote:
        digest = FakeDigest(True, PINNED)
        hardware: dict | Exception = {"gpus": [{"name": "H100", "driver_version": "550.54"}]}
        calls: list = []

    def remote_digest(host, path, timeout):
        Remote.calls.append(("digest", host, path, timeout))
        return Remote.digest

    def observe_remote_hardware(host, timeout):
        Remote.calls.append(("hardware", host, timeout))
        if isinstance(Remote.hardware, Exception):
            raise Remote.hardware
        return Remote.hardware

    Remote.calls = []
    monkeypatch.setattr(execsys.digest, "remote_digest", remote_digest)
    monkeypatch.setattr(execsys.observe.hardware, "observe_remote_hardware", observe_remote_hardware)
    return Remote


# -- (a) registered before any case ran ----------------------------------------------------------------

def test_registered_in_the_past_passes() -> None:
    check = registered_before_running("B", "gpu1", "2026-01-01T00:00:00.000Z")
    assert check == Check("a-registered", True,
                          "placement B=gpu1 registered at 2026-01-01T00:00:00.000Z, before any case ran")


def test_registered_this_very_instant_passes() -> None:
    assert registered_before_running("B", "gpu1", now_iso()).passed is True


def test_registered_in_the_future_fails() -> None:
    check = registered_before_running("B", "gpu1", "2999-01-01T00:00:00.000Z")
    assert check.passed is False
    assert check.name == "a-registered"


@pytest.mark.parametrize("registered_at", [None, ""])
def test_not_registered_fails(registered_at) -> None:
    assert registered_before_running("B", "gpu1", registered_at) == Check(
        "a-registered", False, "the placement was not registered")


# -- (b) the artifact's digest on the host -------------------------------------------------------------

@pytest.mark.parametrize(("path", "digest"), [(None, PINNED), ("/m.gguf", None), ("", PINNED), ("/m.gguf", "")])
def test_nothing_to_verify_fails_without_asking_the_machine(machine, path, digest) -> None:
    check, evidence = artifact_digest_on_host("gpu1", path, digest, 60.0)
    assert check == Check("b-digest", False,
                          "no artifact path and pinned digest to verify (give --lock with a pinned artifact)")
    assert evidence is None and machine.calls == []


def test_the_pinned_digest_on_the_machine_passes(machine) -> None:
    check, evidence = artifact_digest_on_host("gpu1", "/m.gguf", PINNED, 60.0)
    assert check == Check("b-digest", True, f"/m.gguf on gpu1 hashes to the pinned {PINNED[:16]} (blake3)")
    assert evidence == machine.digest.to_json()
    assert machine.calls == [("digest", "gpu1", "/m.gguf", 60.0)]


def test_another_digest_on_the_machine_is_an_integrity_defect(machine) -> None:
    machine.digest = FakeDigest(True, "cd" * 32)
    check, evidence = artifact_digest_on_host("gpu1", "/m.gguf", PINNED, 60.0)
    assert check == Check("b-digest", False, f"integrity defect: /m.gguf on gpu1 hashes to {'cd' * 8}, "
                          f"the lock pins {PINNED[:16]}")
    assert evidence["digest"] == "cd" * 32


def test_a_digest_that_differs_only_after_the_shown_prefix_is_still_a_defect(machine) -> None:
    # the message shows 16 characters of each; the comparison is of the whole digest
    machine.digest = FakeDigest(True, PINNED[:-1] + "0")
    check, _ = artifact_digest_on_host("gpu1", "/m.gguf", PINNED, 60.0)
    assert check.passed is False
    assert check.detail == f"integrity defect: /m.gguf on gpu1 hashes to {PINNED[:16]}, the lock pins {PINNED[:16]}"


def test_a_digest_the_machine_could_not_compute_fails_with_its_error(machine) -> None:
    machine.digest = FakeDigest(False, None, "ssh: connect to host gpu1: refused")
    check, evidence = artifact_digest_on_host("gpu1", "/m.gguf", PINNED, 60.0)
    assert check == Check("b-digest", False,
                          "could not compute the digest on gpu1: ssh: connect to host gpu1: refused")
    assert evidence == machine.digest.to_json()


# -- (c) the host's identity ---------------------------------------------------------------------------

def test_the_machine_s_gpus_and_driver_are_recorded(machine) -> None:
    machine.hardware = {"gpus": [{"name": "H100", "driver_version": None}, {"name": "A10", "driver_version": "550"}]}
    check, hardware = host_identity_recorded("gpu1", 600.0)
    assert check == Check("c-host-identity", True, "recorded gpu1: H100, A10, driver 550")
    assert hardware is machine.hardware
    assert machine.calls == [("hardware", "gpu1", 120.0)]  # never waits more than two minutes


def test_a_short_timeout_is_kept(machine) -> None:
    host_identity_recorded("gpu1", 30.0)
    assert machine.calls == [("hardware", "gpu1", 30.0)]


@pytest.mark.parametrize("hardware", [{}, {"gpus": None}, {"gpus": []}])
def test_a_machine_without_gpus_is_recorded_as_such(machine, hardware) -> None:
    machine.hardware = hardware
    check, _ = host_identity_recorded("gpu1", 60.0)
    assert check == Check("c-host-identity", True, "recorded gpu1: no GPU")


def test_a_gpu_without_a_driver_names_none(machine) -> None:
    machine.hardware = {"gpus": [{"name": "H100"}]}
    assert host_identity_recorded("gpu1", 60.0)[0].detail == "recorded gpu1: H100"


def test_a_machine_that_cannot_be_looked_at_fails(machine) -> None:
    machine.hardware = InputError("ssh gpu1: timed out")
    check, hardware = host_identity_recorded("gpu1", 60.0)
    assert check == Check("c-host-identity", False, "could not record the identity of gpu1: ssh gpu1: timed out")
    assert hardware is None


# -- (d) admissible under the residency policy ---------------------------------------------------------

@pytest.mark.parametrize(("table", "passed", "detail"), [
    pytest.param({}, False, "no residency policy declared ([placement] allowed in execsys.toml): admissibility unknown",
                 id="no-policy"),
    pytest.param({"allowed": []}, False,
                 "no residency policy declared ([placement] allowed in execsys.toml): admissibility unknown",
                 id="an-empty-policy"),
    pytest.param({"allowed": ["gpu1"]}, True, "gpu1 is gpu1, allowed by [placement] allowed = ['gpu1']",
                 id="the-machine-itself-allowed"),
    pytest.param({"allowed": ["eu"]}, False, "gpu1 has no tier/region in [placement] hosts; allowed: ['eu']",
                 id="a-machine-without-labels"),
    pytest.param({"allowed": ["eu"], "hosts": {"gpu1": "eu"}}, True,
                 "gpu1 is eu, allowed by [placement] allowed = ['eu']", id="a-label-string"),
    pytest.param({"allowed": ["eu"], "hosts": {"gpu1": "us"}}, False,
                 "gpu1 (us) is not in [placement] allowed = ['eu']", id="a-label-not-allowed"),
    pytest.param({"allowed": ["eu"], "hosts": {"gpu1": {"tier": "t1", "region": "eu", "owner": "x"}}}, True,
                 "gpu1 is eu, allowed by [placement] allowed = ['eu']", id="a-region-in-a-table"),
    pytest.param({"allowed": ["x"], "hosts": {"gpu1": {"owner": "x", "zone": "z1", "surface": "s"}}}, False,
                 "gpu1 (z1, s) is not in [placement] allowed = ['x']", id="only-the-four-label-keys-count"),
    pytest.param({"allowed": ["t1"], "hosts": {"gpu1": {"tier": "t1"}}}, True,
                 "gpu1 is t1, allowed by [placement] allowed = ['t1']", id="a-tier"),
    pytest.param({"allowed": ["s"], "hosts": {"gpu1": {"surface": "s"}}}, True,
                 "gpu1 is s, allowed by [placement] allowed = ['s']", id="a-surface"),
    pytest.param({"allowed": ["z"], "hosts": {"gpu1": {"zone": "z"}}}, True,
                 "gpu1 is z, allowed by [placement] allowed = ['z']", id="a-zone"),
    pytest.param({"allowed": ["us", "eu"], "hosts": {"gpu1": ["t2", "eu"]}}, True,
                 "gpu1 is eu, allowed by [placement] allowed = ['us', 'eu']", id="a-list-of-labels"),
    pytest.param({"allowed": ["x"], "hosts": {"gpu1": ["t2", "eu"]}}, False,
                 "gpu1 (t2, eu) is not in [placement] allowed = ['x']", id="a-list-of-labels-not-allowed"),
    pytest.param({"allowed": ["gpu1"], "hosts": {"gpu1": ["t2"]}}, True,
                 "gpu1 is gpu1, allowed by [placement] allowed = ['gpu1']", id="the-name-itself-beside-a-list"),
    pytest.param({"allowed": ["gpu1", "eu"], "hosts": {"gpu1": "eu"}}, True,
                 "gpu1 is gpu1, allowed by [placement] allowed = ['gpu1', 'eu']", id="the-machine-named-first"),
    pytest.param({"allowed": ["eu"], "hosts": {"gpu2": "eu"}}, False,
                 "gpu1 has no tier/region in [placement] hosts; allowed: ['eu']", id="another-machine-s-labels"),
    pytest.param({"allowed": ["eu"], "hosts": {"gpu1": 7}}, False,
                 "gpu1 () is not in [placement] allowed = ['eu']", id="a-label-of-another-type"),
    pytest.param({"allowed": [1], "hosts": {"gpu1": {"tier": 1}}}, True,
                 "gpu1 is 1, allowed by [placement] allowed = ['1']", id="numbers-compare-as-text"),
    pytest.param({"allowed": ["eu"], "hosts": None}, False,
                 "gpu1 has no tier/region in [placement] hosts; allowed: ['eu']", id="machines-null"),
])
def test_machine_admissible(table, passed, detail) -> None:
    assert host_admissible("gpu1", table) == Check("d-admissible", passed, detail)


# -- the four together ---------------------------------------------------------------------------------

def test_check_placement_runs_the_four_in_order(machine) -> None:
    report = check_placement("B", "gpu1", registered_at="2026-01-01T00:00:00.000Z", artifact_path="/m.gguf",
                             expected_digest=PINNED, placement_table={"allowed": ["gpu1"]}, timeout=90.0)
    assert [c.name for c in report.checks] == ["a-registered", "b-digest", "c-host-identity", "d-admissible"]
    assert report.checks[0].detail == "placement B=gpu1 registered at 2026-01-01T00:00:00.000Z, before any case ran"
    assert report.passed is True
    assert (report.arm, report.host, report.hardware, report.digest) == (
        "B", "gpu1", machine.hardware, machine.digest.to_json())
    assert machine.calls == [("digest", "gpu1", "/m.gguf", 90.0), ("hardware", "gpu1", 90.0)]
    assert report.to_json() == {"arm": "B", "host": "gpu1", "passed": True,
                                "checks": [c.to_json() for c in report.checks],
                                "hardware": machine.hardware, "digest": machine.digest.to_json()}


def test_check_placement_s_default_timeout(machine) -> None:
    check_placement("B", "gpu1", registered_at=None, artifact_path="/m", expected_digest=PINNED,
                    placement_table={})
    assert machine.calls == [("digest", "gpu1", "/m", 600.0), ("hardware", "gpu1", 120.0)]


def test_one_failed_condition_fails_the_placement(machine) -> None:
    report = check_placement("B", "gpu1", registered_at="2026-01-01T00:00:00.000Z", artifact_path="/m.gguf",
                             expected_digest=PINNED, placement_table={})
    assert [c.passed for c in report.checks] == [True, True, True, False]
    assert report.passed is False and report.to_json()["passed"] is False


def test_a_report_without_checks_passes() -> None:
    assert PlacementReport("A", "gpu1", []).passed is True
    assert PlacementReport("A", "gpu1", [Check("x", False, "")]).passed is False
    assert PlacementReport("A", "gpu1", [Check("x", True, ""), Check("y", False, "")]).passed is False


def test_the_module_uses_the_ledger_clock() -> None:
    assert placement.now_iso is now_iso
