"""contrib/ansible's execsys_facts over 32 loopback hosts (forks 8) against Ansible's own `setup` fact
gathering on the same inventory in the same run (target: <= 1.0x), with `ping` beside both as the
transport floor. The hosts are 32 inventory aliases of one loopback sshd (tests/fixtures/sshd.py).

Run: python benchmarks/bench_ansible.py [--hosts 32] [--forks 8] [--runs 1] [--execsys VENV/bin/execsys]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import compiled_like_an_install, row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.sshd import start_sshd  # noqa: E402 - the suite's loopback sshd


def main() -> int:
    compiled_like_an_install()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--forks", type=int, default=8)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--execsys", type=Path, default=Path(sys.executable).with_name("execsys"),
                        help="the execsys console script the hosts run (default: the one beside this "
                             "interpreter; give a venv's from the README's install to measure what users run)")
    args = parser.parse_args()
    ansible = shutil.which("ansible", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if ansible is None:
        raise SystemExit("benchmark needs ansible-core (pip install ansible-core)")
    execsys = args.execsys
    if not execsys.is_file():
        raise SystemExit(f"no execsys console script at {execsys} (give --execsys PATH)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = start_sshd(work / "sshd")
        try:
            inventory = work / "inventory.ini"
            inventory.write_text("[gpu]\n" + "".join(f"node-{i:02d} ansible_host={server.dest}\n"
                                                     for i in range(args.hosts))
                                 + f"\n[gpu:vars]\nansible_ssh_common_args='-F {server.config_path}'\n")
            env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
                   "ANSIBLE_LOCAL_TEMP": str(work / "local"), "ANSIBLE_REMOTE_TMP": str(work / "remote"),
                   "ANSIBLE_SSH_CONTROL_PATH_DIR": str(work / "cp"), "ANSIBLE_SSH_TRANSFER_METHOD": "piped",
                   "ANSIBLE_CONFIG": str(work / "none.cfg"), "ANSIBLE_DEPRECATION_WARNINGS": "False"}
            modules = {
                "ping": ["-m", "ping"],
                "setup": ["-m", "setup"],
                "execsys_facts": ["-M", str(ROOT / "contrib" / "ansible" / "library"), "-m", "execsys_facts",
                                  "-a", f"execsys={execsys} path=/usr/local/bin:/usr/bin:/bin"],
            }
            times: dict[str, list[float]] = {k: [] for k in modules}
            for _ in range(args.runs):  # interleaved under the same load
                for name, margs in modules.items():
                    start = time.perf_counter()
                    proc = subprocess.run([ansible, "all", "-i", str(inventory), "-f", str(args.forks), *margs],
                                          capture_output=True, text=True, env=env, timeout=900)
                    times[name].append(time.perf_counter() - start)
                    if proc.returncode != 0:
                        raise SystemExit(f"ansible -m {name} failed ({proc.returncode}): {proc.stdout[-800:]}")
        finally:
            server.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(row("module", "median s", "per host s", "vs setup", "target"))
    for name in ("execsys_facts", "setup", "ping"):
        print(row(name, f"{med[name]:.2f}", f"{med[name] / args.hosts:.3f}", f"{med[name] / med['setup']:.2f}x",
                  "<= 1.00x" if name == "execsys_facts" else ""))
    ok = med["execsys_facts"] <= med["setup"]
    print(f"{'PASS' if ok else 'MISS'}: execsys_facts {med['execsys_facts']:.2f} s vs setup {med['setup']:.2f} s "
          f"over {args.hosts} hosts, forks {args.forks}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
