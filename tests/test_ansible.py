"""contrib/ansible's execsys_facts under real ansible-core, against the suite's loopback sshd.

Eight inventory aliases reach the one loopback sshd (seven) or a closed port (one). One alias has a
planted hazard (a 0-byte python3 first on the PATH it inspects), one serves a different artifact;
``execsys fleet --from-ansible`` must name both and give the exact rates: 7/8 reachable,
6/7 identities, 6/7 digests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.markers import starts_real_service

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "contrib" / "ansible" / "library"
EXECSYS = str(Path(sys.executable).with_name("execsys"))
CLEAN_PATH = "/usr/bin:/bin"


def _ansible(name: str) -> str:
    starts_real_service("ansible-core")
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.skip(f"{name} not installed (the test extra installs ansible-core)")
    return found


@pytest.fixture
def fleet_inventory(sshd_server, tmp_path):
    """Eight aliases: host-1..7 over the loopback sshd, host-8 unreachable; host-3 hazardous,
    host-6 serving other bytes. Returns (inventory, env)."""
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / "model-a.bin").write_bytes(b"the weights every node should serve\n" * 1000)
    (artifacts / "model-b.bin").write_bytes(b"a stale copy on one node\n" * 1000)
    project = tmp_path / "project"  # one directory: the harness component names it
    project.mkdir()
    for name in ("a", "b"):
        (project / f"execsys-{name}.toml").write_text(f'[model]\nname = "tiny"\n\n[artifact]\npath = "{artifacts}/model-{name}.bin"\n'
                                              "\n[doctor]\nports = []\n")
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "python3").write_bytes(b"")
    (plant / "python3").chmod(0o755)
    lines = ["[gpu]"]
    for i in range(1, 8):
        extra = ""
        if i == 3:
            extra = f" execsys_path={plant}:{CLEAN_PATH}"
        if i == 6:
            extra = f" execsys_config={project}/execsys-b.toml"
        lines.append(f"host-{i} ansible_host={sshd_server.dest}{extra}")
    lines.append(f"host-8 ansible_host={sshd_server.unreachable_dest}")
    lines += ["", "[gpu:vars]", f"ansible_ssh_common_args='-F {sshd_server.config_path}'",
              f"execsys_path={CLEAN_PATH}", f"execsys_config={project}/execsys-a.toml", f"execsys_bin={EXECSYS}"]
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"), "ANSIBLE_REMOTE_TMP": str(tmp_path / "ansible-remote"),
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_SSH_TRANSFER_METHOD": "piped", "ANSIBLE_DEPRECATION_WARNINGS": "False",
           "ANSIBLE_CONFIG": str(tmp_path / "no-ansible.cfg"), "ANSIBLE_TIMEOUT": "10",
           "EXECSYS_LEDGER": str(tmp_path / "ledger.sqlite3")}
    return inventory, env


def _fleet(directory: Path) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "execsys", "fleet", "--from-ansible", str(directory), "--json"],
                          capture_output=True, text=True, timeout=120)
    human = subprocess.run([sys.executable, "-m", "execsys", "fleet", "--from-ansible", str(directory)],
                           capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout), human.stdout


def test_execsys_facts_and_the_fleet_answer_over_eight_hosts(fleet_inventory, tmp_path):
    inventory, env = fleet_inventory
    tree = tmp_path / "tree"
    proc = subprocess.run([_ansible("ansible"), "all", "-i", str(inventory), "-M", str(LIBRARY), "-m", "execsys_facts",
                           "-a", "execsys={{ execsys_bin }} config={{ execsys_config }} path={{ execsys_path }}",
                           "--tree", str(tree), "-f", "8"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]  # 4: a host was unreachable
    results = {p.name: json.loads(p.read_text()) for p in tree.iterdir()}
    assert sorted(results) == [f"host-{i}" for i in range(1, 9)]
    assert results["host-8"].get("unreachable") is True
    for i in range(1, 8):
        body = results[f"host-{i}"]
        assert body["changed"] is False, body
        facts = body["ansible_facts"]["execsys"]
        assert set(facts) >= {"doctor", "identity", "artifact"}
        assert facts["doctor"]["verdict"] == ("hazards" if i == 3 else "clean"), facts["doctor"]
        assert facts["artifact"]["path"].endswith("model-b.bin" if i == 6 else "model-a.bin")
    digest_a = results["host-1"]["ansible_facts"]["execsys"]["artifact"]["blake3"]
    from execsys.digest import digest_path

    assert digest_a == digest_path(tmp_path / "artifacts" / "model-a.bin").digest  # computed from the bytes
    assert results["host-3"]["ansible_facts"]["execsys"]["doctor"]["hazards"]["stub-executables"] == "fail"

    code, body, human = _fleet(tree)
    assert code == 1
    assert body["hosts"] == 8
    assert [p["host"] for p in body["problems"]] == ["host-8"]
    assert body["problems"][0]["problem"].startswith("unreachable")
    assert (body["identity_agreement"]["k"], body["identity_agreement"]["n"]) == (6, 7)
    assert [(o["host"], o["components"]) for o in body["outliers"]] == [("host-6", ["artifact"])]
    assert (body["digest_match"]["k"], body["digest_match"]["n"]) == (6, 7)
    assert [d["host"] for d in body["digest_match"]["defects"]] == ["host-6"]
    assert body["digest_match"]["expected"] == digest_a
    assert {h for h, s in body["hazards"]["stub-executables"].items() if s == "fail"} == {"host-3"}
    assert list(body["hazards"])[0] == "stub-executables"
    assert "6/7 = 0.857" in human and "DEFECT   host-6" in human and "host-3" in human


def test_the_example_playbook_fills_the_fact_cache_that_fleet_reads(fleet_inventory, tmp_path):
    inventory, env = fleet_inventory
    cache = tmp_path / "facts"
    env = {**env, "ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache)}
    proc = subprocess.run([_ansible("ansible-playbook"), "-i", str(inventory), "-M", str(LIBRARY),
                           str(ROOT / "contrib" / "ansible" / "playbook.yml"), "-f", "8"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "changed=0" in proc.stdout and "changed=1" not in proc.stdout
    code, body, _ = _fleet(cache)
    assert code == 1
    assert body["hosts"] == 7  # the fact cache holds the reachable hosts only
    assert (body["digest_match"]["k"], body["digest_match"]["n"]) == (6, 7)
    assert [d["host"] for d in body["digest_match"]["defects"]] == ["host-6"]
    assert {h for h, s in body["hazards"]["stub-executables"].items() if s == "fail"} == {"host-3"}


def test_the_module_fails_in_one_line_where_execsys_is_not_installed(tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"execsys": str(tmp_path / "no-execsys")}))
    proc = subprocess.run(["/usr/bin/python3", str(LIBRARY / "execsys_facts"), str(args)], capture_output=True,
                          text=True, timeout=30)
    body = json.loads(proc.stdout)
    assert proc.returncode == 1 and body["failed"] is True and body["changed"] is False
    assert "execsys is not installed on this host" in body["msg"]


def test_hosts_with_only_python3_get_the_doctor_sent_from_the_controller(fleet_inventory, tmp_path):
    """No execsys on host-2 and host-3 (the module finds none there): the action plugin sends the
    controller's doctor through the module's stdin, as `doctor --host` does over ssh. Their doctor
    facts come back with the node check's verdict and line, the artifact digest is computed there
    (b3sum or python blake3), the identity is null; the fleet adds all three hosts up."""
    inventory, env = fleet_inventory
    project = tmp_path / "project"
    plant = tmp_path / "plant"
    missing = tmp_path / "not-installed" / "execsys"
    bare = tmp_path / "bare.ini"
    ssh_args = next(line for line in inventory.read_text().splitlines() if line.startswith("ansible_ssh_common_args"))
    dest = inventory.read_text().split("host-1 ansible_host=", 1)[1].split()[0]
    bare.write_text("\n".join([
        "[gpu]",
        f"host-1 ansible_host={dest} execsys_bin={EXECSYS}",
        f"host-2 ansible_host={dest} execsys_bin={missing}",
        f"host-3 ansible_host={dest} execsys_bin={missing} execsys_path={plant}:{CLEAN_PATH}",
        "", "[gpu:vars]", ssh_args, f"execsys_path={CLEAN_PATH}", f"execsys_config={project}/execsys-a.toml", ""]))
    env = {**env, "ANSIBLE_ACTION_PLUGINS": str(ROOT / "contrib" / "ansible" / "action_plugins")}
    tree = tmp_path / "tree"
    proc = subprocess.run([_ansible("ansible"), "all", "-i", str(bare), "-M", str(LIBRARY), "-m", "execsys_facts",
                           "-a", "execsys={{ execsys_bin }} config={{ execsys_config }} path={{ execsys_path }}",
                           "--tree", str(tree), "-f", "3"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, "\n".join(line for line in proc.stdout.splitlines() if "|" in line or "msg" in line
                                            ) + proc.stderr[-3000:]
    results = {p.name: json.loads(p.read_text()) for p in tree.iterdir()}
    installed = results["host-1"]["ansible_facts"]["execsys"]
    assert "shipped" not in installed and installed["identity"]["id"]
    for name in ("host-2", "host-3"):
        body = results[name]
        assert body["changed"] is False, body
        facts = body["ansible_facts"]["execsys"]
        assert facts["shipped"] is True and facts["identity"] is None and "not installed" in facts["note"]
        assert set(facts["doctor"]["hazards"]) == set(installed["doctor"]["hazards"])  # all nine, checked there
        assert facts["doctor"]["environment"]["path"].startswith(str(plant) if name == "host-3" else CLEAN_PATH)
        assert facts["artifact"]["path"] == str(tmp_path / "artifacts" / "model-a.bin")
        assert facts["artifact"]["blake3"] == installed["artifact"]["blake3"]  # the same bytes, hashed on the host
    assert results["host-2"]["ansible_facts"]["execsys"]["doctor"]["verdict"] == "clean"
    hazardous = results["host-3"]["ansible_facts"]["execsys"]["doctor"]
    assert hazardous["verdict"] == "hazards" and hazardous["hazards"]["stub-executables"] == "fail"
    assert hazardous["line"].startswith("fail stub-executables: ") and len(hazardous["line"].encode()) <= 80
    assert results["host-3"]["msg"] == hazardous["line"]

    code, body, _ = _fleet(tree)
    assert code == 1 and body["hosts"] == 3 and body["problems"] == []
    assert (body["identity_agreement"]["k"], body["identity_agreement"]["n"]) == (1, 1)  # only host-1 is pinned
    assert (body["digest_match"]["k"], body["digest_match"]["n"]) == (3, 3)
    assert {h for h, s in body["hazards"]["stub-executables"].items() if s == "fail"} == {"host-3"}


def test_without_the_action_plugin_a_bare_host_says_what_is_missing(tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"execsys": str(tmp_path / "no-execsys")}))
    proc = subprocess.run(["/usr/bin/python3", str(LIBRARY / "execsys_facts"), str(args)], capture_output=True,
                          text=True, timeout=30)
    body = json.loads(proc.stdout)
    assert body["execsys_missing"] is True and "action plugin" in body["msg"]
    assert body["python"] == "/usr/bin/python3"
