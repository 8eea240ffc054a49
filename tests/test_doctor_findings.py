"""Typed findings with stable ids, one fold into a hazard's status, and ``[doctor] accept``.

Every hazard is created for real (a git repository with core.fileMode=false and a cleared execute
bit, a 0-byte program on PATH, two programs sharing a name) and the doctor is run as a user runs it:
the CLI in a subprocess, and over a real sshd for the remote side. Accepting a finding must stop it
deciding the status while it stays visible -- in the human line, with -v, in --json.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from execsys.doctor import registry
from execsys.doctor.model import Finding, HazardResult, fold, status_of
from execsys.doctor.remote import ClockSample, apply_skew
from execsys.doctor.runner import DoctorOptions, HazardChecked, run_doctor, run_hazard

from execsys.errors import InputError, UsageError


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True, timeout=30)


@pytest.fixture
def filemode_repo(tmp_path: Path) -> Path:
    """A harness repository whose git no longer reports lost execute bits (core.fileMode=false)."""
    repo = tmp_path / "harness"
    repo.mkdir()
    _git(repo, "init", "-q")
    script = repo / "run.sh"
    script.write_text("#!/bin/sh\necho run\n")
    script.chmod(0o755)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    _git(repo, "config", "core.fileMode", "false")
    return repo


def _zero_byte_program(tmp_path: Path) -> Path:
    program = tmp_path / "bin" / "engine"
    program.parent.mkdir(exist_ok=True)
    program.write_bytes(b"")
    program.chmod(0o755)
    return program


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "execsys.toml"
    path.write_text(body)
    return path


# -- ids: one per kind of finding, stable across runs and hosts --------------------------------


def test_every_hazard_declares_its_finding_kinds():
    ids = registry.finding_ids()
    for hazard in registry.HAZARDS:
        kinds = registry.load(hazard.id).FINDINGS
        assert kinds and len(set(kinds)) == len(kinds), hazard.id
        assert all(f"{hazard.id}/{kind}" in ids for kind in kinds)
    assert "lost-mode-bits/core-filemode-false" in ids


def test_finding_ids_do_not_carry_paths_and_repeat_across_runs(filemode_repo, tmp_path):
    (filemode_repo / "run.sh").chmod(0o644)  # now also a lost execute bit (git no longer shows it)
    first = run_hazard("lost-mode-bits", DoctorOptions(repos=[str(filemode_repo)]))
    again = run_hazard("lost-mode-bits", DoctorOptions(repos=[str(filemode_repo)]))
    ids = [f.id for f in first.findings]
    assert ids == ["lost-mode-bits/core-filemode-false", "lost-mode-bits/execute-bit-lost"]
    assert ids == [f.id for f in again.findings]
    assert all(str(tmp_path) not in i for i in ids)  # the text names the repository; the id never does
    assert first.status == "fail" and all(not f.accepted for f in first.findings)
    assert set(ids) <= registry.finding_ids()


def test_emitted_ids_are_declared_for_real_findings(tmp_path, monkeypatch):
    program = _zero_byte_program(tmp_path)
    for d in ("x", "y"):
        tool = tmp_path / d / "tool"
        tool.parent.mkdir()
        tool.write_text(f"#!/bin/sh\necho {d}\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{program.parent}:{tmp_path / 'x'}:{tmp_path / 'y'}:/usr/bin:/bin")
    options = DoctorOptions(commands=["engine", "tool", "missing-program"])
    stub = run_hazard("stub-executables", options)
    alias = run_hazard("binary-aliasing", options)
    assert [f.id for f in stub.findings] == ["stub-executables/zero-byte"]
    assert {f.id for f in alias.findings} == {"binary-aliasing/not-on-path", "binary-aliasing/several-programs"}
    assert {f.id for f in stub.findings + alias.findings} <= registry.finding_ids()


# -- the one fold ----------------------------------------------------------------------------------


def test_the_fold_worst_active_level_wins_and_errors_are_never_accepted():
    findings = [Finding("warn", "w", "h/w"), Finding("error", "e", "h/e"), Finding("fail", "f", "h/f")]
    assert status_of(findings) == "fail"
    result = fold("h", findings, ok="fine", fix="do x", accept=["h/f"])
    assert result.status == "error" and result.summary == "e" and result.fix == "do x"
    result = fold("h", findings, ok="fine", fix="do x", accept=["h/f", "h/e", "h/w"])
    assert result.status == "error"  # a check that could not look is not evidence of a clean system
    assert [f.accepted for f in result.findings] == [True, False, True]
    quiet = fold("h", [Finding("warn", "w", "h/w")], ok="fine", fix="do x", evidence=["seen"], accept=["h/w"])
    assert (quiet.status, quiet.fix) == ("ok", "")
    assert quiet.summary == "accepted (h/w): w"  # never the ok words: they would deny what was accepted
    assert quiet.evidence == ["accepted (h/w): w", "seen"]
    assert HazardResult.from_json(quiet.to_json()).findings == quiet.findings  # travels over ssh as JSON


def test_inter_host_skew_is_a_finding_folded_by_the_same_rule():
    far_off = ClockSample(offset_s=2.0, bound_s=0.001, rtt_s=0.002, samples=5)

    def local_row() -> HazardResult:
        return fold("clock-skew", [], ok="kernel clock synchronised", fix="sync")

    failing = local_row()
    apply_skew(failing, far_off, 250.0)
    assert failing.status == "fail" and failing.findings[-1].id == "clock-skew/inter-host-skew"
    accepted = local_row()
    apply_skew(accepted, far_off, 250.0, ["clock-skew/inter-host-skew"])
    assert accepted.status == "ok" and accepted.findings[-1].accepted
    assert any(line.startswith("accepted (clock-skew/inter-host-skew): clock is +2000 ms off")
               for line in accepted.evidence)


# -- [doctor] accept, as a user runs it -----------------------------------------------------------


def test_accepting_a_finding_clears_the_hazard_and_shows_it_as_accepted(cli, filemode_repo, tmp_path):
    plain = _config(tmp_path, f'[doctor]\nrepos = ["{filemode_repo}"]\n')
    before = cli("doctor", "--json", "--strict", "--only", "lost-mode-bits", "--config", str(plain), cwd=tmp_path)
    assert before.returncode == 1
    row = before.json()["hazards"][0]
    assert row["status"] == "warn"
    assert row["findings"] == [{"id": "lost-mode-bits/core-filemode-false", "level": "warn",
                                "text": row["findings"][0]["text"], "accepted": False}]
    verbose = cli("doctor", "-v", "--only", "lost-mode-bits", "--config", str(plain), cwd=tmp_path)
    assert "finding ids: lost-mode-bits/core-filemode-false" in verbose.stdout  # what to put in accept

    accepting = _config(tmp_path, f'[doctor]\nrepos = ["{filemode_repo}"]\n'
                                  'accept = ["lost-mode-bits/core-filemode-false"]\n')
    after = cli("doctor", "--json", "--strict", "--only", "lost-mode-bits", "--config", str(accepting), cwd=tmp_path)
    assert after.returncode == 0, after.stdout
    row = after.json()["hazards"][0]
    assert row["status"] == "ok" and row["fix"] == ""
    assert row["findings"][0]["id"] == "lost-mode-bits/core-filemode-false" and row["findings"][0]["accepted"]
    assert row["evidence"][0].startswith("accepted (lost-mode-bits/core-filemode-false): ")
    human = cli("doctor", "--only", "lost-mode-bits", "--config", str(accepting), cwd=tmp_path)
    assert "[✓] lost-mode-bits: accepted (lost-mode-bits/core-filemode-false): " in human.stdout
    assert "1 finding accepted" in human.stdout.splitlines()[-1]
    verbose = cli("doctor", "-v", "--only", "lost-mode-bits", "--config", str(accepting), cwd=tmp_path)
    assert "    • accepted (lost-mode-bits/core-filemode-false): " in verbose.stdout


def test_accepting_one_kind_leaves_the_others_deciding(cli, filemode_repo, tmp_path):
    (filemode_repo / "run.sh").chmod(0o644)
    accepting = _config(tmp_path, f'[doctor]\nrepos = ["{filemode_repo}"]\n'
                                  'accept = ["lost-mode-bits/core-filemode-false"]\n')
    result = cli("doctor", "--json", "--only", "lost-mode-bits", "--config", str(accepting), cwd=tmp_path)
    assert result.returncode == 1
    row = result.json()["hazards"][0]
    assert row["status"] == "fail" and "100755 in git but not executable here" in row["summary"]
    assert sorted((f["id"], f["accepted"]) for f in row["findings"]) == [
        ("lost-mode-bits/core-filemode-false", True), ("lost-mode-bits/execute-bit-lost", False)]
    assert row["evidence"][0].startswith(f"{filemode_repo}: 1 file(s) are 100755")  # the active one first


def test_an_unknown_accepted_id_is_one_line_exit_2(cli, tmp_path):
    bad = _config(tmp_path, '[doctor]\naccept = ["lost-mode-bits/core-filemode-flase"]\n')
    result = cli("doctor", "--config", str(bad), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "unknown finding id 'lost-mode-bits/core-filemode-flase'" in result.stderr
    assert "lost-mode-bits/core-filemode-false" in result.stderr  # the ids it could have meant


def test_from_sources_layers_flags_over_declaration_over_lock_and_validates(tmp_path):
    from execsys import declaration
    from execsys.sources import load_sources
    from tests.test_scope import write_lock

    lock_path = tmp_path / "execsys.lock.json"
    write_lock(lock_path, runtime={"engine": "vllm", "endpoint": "http://127.0.0.1:8123/v1"},
               artifact={"path": "/srv/models/m.gguf"})
    _config(tmp_path, '[runtime]\nengine = "sglang"\n')
    sources = load_sources(tmp_path / "execsys.toml")  # the lock beside the declaration
    opts = DoctorOptions.from_sources(sources.declaration, sources.lock)
    assert opts.engine == "sglang"  # declared beats pinned
    assert opts.ports == [8123] and opts.artifact_path == "/srv/models/m.gguf"  # pinned fills the gaps
    assert DoctorOptions.from_sources(sources.declaration, sources.lock, ports=[9000]).ports == [9000]
    with pytest.raises(UsageError, match="unknown hazard 'nope' for --only"):
        DoctorOptions.from_sources(None, only=["nope"])
    with pytest.raises(UsageError, match="--host"):
        DoctorOptions.from_sources(None, hosts=["-oProxyCommand=sh"])
    broken = declaration.parse('[doctor]\nports = [70000]\n', tmp_path / "execsys.toml")
    with pytest.raises(InputError, match="port 70000"):
        DoctorOptions.from_sources(broken)


def test_accept_travels_to_remote_hosts(ssh_config_env, tmp_path):
    """The remote side gets the accept list in its payload and folds it there (python3 over ssh stdin)."""
    program = _zero_byte_program(tmp_path)
    options = DoctorOptions(hosts=[ssh_config_env.dest], commands=[str(program)], only=["stub-executables"])
    failing = run_doctor(options)
    assert [h.result("stub-executables").status for h in failing.hosts] == ["fail", "fail"]
    options.accept = ["stub-executables/zero-byte"]
    seen: list[HazardChecked] = []
    report = run_doctor(options, lambda e: seen.append(e) if isinstance(e, HazardChecked) else None)
    far = report.hosts[1]
    assert far.error is None and far.result("stub-executables").status == "ok"
    assert [(f.id, f.accepted) for f in far.result("stub-executables").findings] == [
        ("stub-executables/zero-byte", True)]
    assert report.exit_code == 0
    remote_rows = [e.result for e in seen if e.host == ssh_config_env.dest]
    assert remote_rows and remote_rows[0].findings[0].accepted
