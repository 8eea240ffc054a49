"""The identity describes the execution system, not the observer (issue 17), on real shells, venvs and pip.

One unchanged system, pinned from bash and from sh, from two execsys installs on two interpreters,
from the repository root and from a subdirectory: one id. A real package upgrade in the harness's
own venv (the interpreter `[harness] commands` names) moves the id, and `diff` names the harness.
Plus the lock/ledger order and the lock-type checks of issue 15, and the sources rule of issue 9.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from execsys.canonical import content_id
from tests.fixtures.git_repo import git, make_repo

CHECKOUT = Path(__file__).resolve().parents[2]

# A PEP 517 backend in a dozen lines (stdlib only), so pip builds the harness's package from its
# directory with no network and no setuptools in the harness venv.
TINY_BACKEND = '''
import base64, hashlib, os, re, zipfile

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = re.search(r'^version = "(.+)"', open("pyproject.toml").read(), re.M).group(1)
    dist = f"tinypkg-{version}.dist-info"
    files = {"tinypkg/__init__.py": open("tinypkg/__init__.py", "rb").read(),
             f"{dist}/METADATA": f"Metadata-Version: 2.1\\nName: tinypkg\\nVersion: {version}\\n\\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: tiny\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    record = [f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()},{len(v)}"
              for k, v in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\\n".join(record) + "\\n").encode()
    name = f"tinypkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for key, value in files.items():
            zf.writestr(key, value)
    return name
'''


def install_tinypkg(venv: Path, source: Path, version: str) -> None:
    """``pip install ./tinypkg`` at ``version`` into ``venv``, built from the local directory."""
    (source / "tinypkg").mkdir(parents=True, exist_ok=True)
    (source / "tinybackend.py").write_text(TINY_BACKEND)
    (source / "tinypkg" / "__init__.py").write_text(f"VERSION = {version!r}\n")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "tinybackend"\nbackend-path = ["."]\n\n'
        f'[project]\nname = "tinypkg"\nversion = "{version}"\n')
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-index", "--no-deps", "--no-build-isolation", str(source)],
                   check=True, capture_output=True, timeout=120)
    shown = subprocess.run([str(venv / "bin" / "python"), "-c", "import tinypkg; print(tinypkg.VERSION)"],
                           capture_output=True, text=True, timeout=30)
    assert shown.stdout.strip() == version


@pytest.fixture
def harness_venv(tmp_path: Path) -> Path:
    """The harness's own venv (not execsys's), with tinypkg 1.0 installed by pip."""
    venv = tmp_path / "harness-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    install_tinypkg(venv, tmp_path / "tinypkg-src", "1.0")
    return venv


@pytest.fixture
def system(tmp_path: Path, harness_venv: Path) -> Path:
    """A harness repository whose declaration names the harness venv's interpreter and a bash script."""
    repo = make_repo(tmp_path / "evals")
    (repo / "run.sh").write_text("#!/usr/bin/env bash\nexec python eval.py \"$@\"\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "sub").mkdir()
    (repo / "sub" / "README").write_text("a subdirectory to pin from\n")
    (repo / "model.bin").write_bytes(b"\x00weights" * 1000)
    (repo / ".gitignore").write_text("model.bin\n*.lock.json\n")
    (repo / "execsys.toml").write_text(f"""
[artifact]
path = "model.bin"

[harness]
commands = ["{harness_venv}/bin/python eval.py --suite core", "./run.sh --quick"]

[budget]
temperature = 0.0

[environment]
variables = {{ OMP_NUM_THREADS = "4" }}
""")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "declare", cwd=repo)
    return repo


def pin_through_shell(shell: str, repo: Path, lock: str, extra_env: dict[str, str], *cwd_args: str,
                      cwd: Path | None = None) -> dict:
    """`execsys pin` started by ``shell`` (not as its last command, so the shell stays its parent)."""
    command = " ".join([sys.executable, "-m", "execsys", "pin", "--json", "--lock", lock, *cwd_args])
    env = {**os.environ, "OMP_NUM_THREADS": "4", **extra_env}
    proc = subprocess.run([shell, "-c", f"{command}; exit $?"], cwd=cwd or repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_bash_and_sh_with_other_terminal_settings_pin_one_id(cli, system: Path, ledger_path: Path) -> None:
    from_bash = pin_through_shell("bash", system, "bash.lock.json",
                                  {"SHELL": "/bin/bash", "LANG": "C.UTF-8", "TZ": "UTC", "COLUMNS": "200",
                                   "TERM": "xterm-256color", "VLLM_UNDECLARED_SWITCH": "1"})
    from_sh = pin_through_shell("sh", system, "sh.lock.json",
                                {"SHELL": "/bin/sh", "LANG": "POSIX", "TZ": "Europe/Paris", "COLUMNS": "60",
                                 "TERM": "dumb"})
    # the observer did differ: shell, locale, $TZ and the pinning shell's numerics switches ...
    assert from_bash["observer"]["shell"]["name"] == "bash"
    assert from_sh["observer"]["shell"]["name"] != "bash"
    assert from_bash["observer"]["locale"]["LANG"] == "C.UTF-8" and from_sh["observer"]["TZ"] == "Europe/Paris"
    assert from_bash["observer"]["numerics_env"] == {"OMP_NUM_THREADS": "4", "VLLM_UNDECLARED_SWITCH": "1"}
    # ... and the system did not: one id
    assert from_bash["id"] == from_sh["id"]
    diff = cli("diff", "bash.lock.json", "sh.lock.json", "--json", cwd=system).json()
    assert diff["moved"] == [] and diff["sentence"] == "same system: no component moved"
    # the bash the harness script runs through is part of the system (its shebang says so), whoever pins
    shells = from_bash["components"]["environment"]["observed"]["shells"]
    assert [s["program"] for s in shells] == ["bash"]
    assert shells[0]["executable"] == os.path.realpath(shutil.which("bash") or "")
    assert "run.sh" in shells[0]["because"]
    verify = cli("verify", "--lock", "bash.lock.json", cwd=system,
                 env={"SHELL": "/bin/sh", "LANG": "POSIX", "OMP_NUM_THREADS": "4"})
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "pinned by   execsys" in verify.stdout and "checked by  execsys" in verify.stdout


def _dependency_dirs() -> list[str]:
    """Where execsys's dependencies are importable from for this interpreter (not execsys itself)."""
    import blake3
    import distro
    import git as gitpython
    import platformdirs
    import psutil
    import rich
    import shellingham

    found = []
    for module in (blake3, gitpython, psutil, distro, shellingham, platformdirs, rich):
        parent = str(Path(module.__file__ or "").resolve().parent.parent)
        if parent not in found:
            found.append(parent)
    return found


def install_execsys_copy(base_python: str, venv: Path) -> Path | None:
    """An execsys install of its own: a venv on ``base_python`` holding a copy of this checkout laid out as
    the wheel lays it out (execsys/, execsys/doctor, ...), its console script, and its dependencies
    reached through a .pth. Built by hand: the test must not need an index to build a wheel."""
    made = subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], capture_output=True, timeout=120)
    if made.returncode != 0:
        return None
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    site = Path(purelib)
    (site / "execsys-deps.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(CHECKOUT / "execsys", site / "execsys", ignore=ignore)
    for name in ("doctor", "probes", "tui"):
        shutil.copytree(CHECKOUT / name, site / "execsys" / name, ignore=ignore)
    script = venv / "bin" / "execsys"
    script.write_text(f"#!{python}\nimport sys\nfrom execsys.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    works = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    return script if works.returncode == 0 else None


def test_another_users_git_preferences_do_not_move_a_dirty_harness(cli, system: Path, tmp_path: Path) -> None:
    (system / "eval.py").write_text("print('an edit not yet committed')\n")
    env = {"OMP_NUM_THREADS": "4"}
    plain = cli("pin", "--json", "--lock", "plain.lock.json", cwd=system, env=env).json()
    home = tmp_path / "other-home"
    home.mkdir()
    (home / ".gitconfig").write_text("[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n")
    theirs = cli("pin", "--json", "--lock", "theirs.lock.json", cwd=system, env={**env, "HOME": str(home)}).json()
    assert plain["components"]["harness"]["observed"]["dirty"] is True
    assert theirs["id"] == plain["id"]


def test_two_execsys_installs_on_two_interpreters_pin_one_id(system: Path, tmp_path: Path,
                                                            ledger_path: Path) -> None:
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [str(Path(sys.base_prefix) / "bin" / f"python{minor}"), f"/usr/bin/python{minor}",
                  f"/usr/local/bin/python{minor}"]
    interpreters: list[str] = []
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if os.path.exists(real) and real not in [os.path.realpath(i) for i in interpreters]:
            interpreters.append(candidate)
    installs = []
    for index, interpreter in enumerate(interpreters):
        script = install_execsys_copy(interpreter, tmp_path / f"execsys-install-{index}")
        if script is not None:
            installs.append(script)
    if len(installs) < 2:  # one interpreter only: two installs on it (two prefixes) still differ as observers
        script = install_execsys_copy(interpreters[0], tmp_path / "execsys-install-twin")
        assert script is not None
        installs.append(script)
    locks = []
    for index, script in enumerate(installs[:2]):
        proc = subprocess.run([str(script), "pin", "--json", "--lock", f"install-{index}.lock.json"], cwd=system,
                              env={**os.environ, "OMP_NUM_THREADS": "4"}, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        locks.append(json.loads(proc.stdout))
    first, second = (lock["observer"]["python"] for lock in locks)
    assert first["prefix"] != second["prefix"]  # two installs really ran ...
    assert all(str(tmp_path) in lock["observer"]["python"]["prefix"] for lock in locks)
    assert locks[0]["id"] == locks[1]["id"]  # ... and pinned one system
    # the interpreter the harness runs is the harness venv's, observed from there whoever asks
    for lock in locks:
        command = lock["components"]["harness"]["observed"]["commands"][0]
        assert command["interpreter"]["prefix"] == str(tmp_path / "harness-venv")


def test_root_and_subdirectory_pin_one_id(cli, system: Path) -> None:
    env = {"OMP_NUM_THREADS": "4"}
    from_root = cli("pin", "--json", cwd=system, env=env)
    assert from_root.returncode == 0, from_root.stderr
    from_sub = cli("pin", "--json", "--config", "../execsys.toml", "--lock", "../sub.lock.json",
                   cwd=system / "sub", env=env)
    assert from_sub.returncode == 0, from_sub.stderr
    root, sub = from_root.json(), from_sub.json()
    assert root["observer"]["cwd"] == str(system) and sub["observer"]["cwd"] == str(system / "sub")
    assert root["id"] == sub["id"]
    # relative paths mean "beside the declaration": the artifact and ./run.sh were found from sub/ too
    commands = sub["components"]["harness"]["observed"]["commands"]
    assert commands[1]["executable"] == str((system / "run.sh").resolve())
    assert sub["components"]["artifact"]["observed"]["path"] == str(system / "model.bin")
    # without --lock, pin writes the lock beside the declaration, and verify finds it there from sub/
    assert cli("pin", "--config", "../execsys.toml", cwd=system / "sub", env=env).returncode == 0
    assert not (system / "sub" / "execsys.lock.json").exists()
    assert json.loads((system / "execsys.lock.json").read_text())["id"] == root["id"]
    verified = cli("verify", "--config", "../execsys.toml", "--json", cwd=system / "sub", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.json()["lock_id"] == root["id"]


def test_a_package_upgrade_in_the_harness_venv_moves_the_id_and_diff_names_the_harness(
        cli, system: Path, harness_venv: Path, tmp_path: Path) -> None:
    env = {"OMP_NUM_THREADS": "4"}
    before = cli("pin", "--json", "--lock", "before.lock.json", cwd=system, env=env).json()
    interpreter = before["components"]["harness"]["observed"]["commands"][0]["interpreter"]
    assert interpreter["prefix"] == str(harness_venv) and interpreter["distributions"] == 1
    assert interpreter["version"] == ".".join(map(str, sys.version_info[:3]))
    install_tinypkg(harness_venv, tmp_path / "tinypkg-src", "1.1")
    after = cli("pin", "--json", "--lock", "after.lock.json", cwd=system, env=env).json()
    assert after["id"] != before["id"]
    diff = cli("diff", "before.lock.json", "after.lock.json", "--json", cwd=system).json()
    assert diff["moved"] == ["harness"] and diff["sentence"] == "isolates harness"
    assert [c["field"] for c in diff["changes"]["harness"]] == \
        ["observed.commands[0].interpreter.distributions_blake3"]
    human = cli("verify", "--lock", "before.lock.json", cwd=system, env=env)
    assert human.returncode == 1 and "harness: changed" in human.stdout


def test_declared_shell_and_shell_syntax_put_the_shell_in_the_id(cli, tmp_path: Path) -> None:
    (tmp_path / "execsys.toml").write_text('[harness]\ncommands = ["python3 eval.py | tee out.txt"]\n'
                                           '[environment]\nshell = "bash"\n')
    lock = cli("pin", "--json", cwd=tmp_path).json()
    shells = {s["program"]: s for s in lock["components"]["environment"]["observed"]["shells"]}
    assert set(shells) == {"bash", "sh"}
    assert shells["bash"]["because"] == "declared in [environment] shell"
    assert shells["bash"]["version"].startswith("GNU bash")
    assert "runs through it" in shells["sh"]["because"]
    (tmp_path / "execsys.toml").write_text('[harness]\ncommands = ["python3 eval.py"]\n')
    plain = cli("pin", "--json", cwd=tmp_path).json()
    assert "shells" not in plain["components"]["environment"]["observed"]


def test_verify_of_a_schema_1_lock_says_re_pin(cli, system: Path) -> None:
    lock = cli("pin", "--json", cwd=system, env={"OMP_NUM_THREADS": "4"}).json()
    old = dict(lock, schema="execsys.identity/1")
    old.pop("observer")
    (system / "old.lock.json").write_text(json.dumps(old))
    human = cli("verify", "--lock", "old.lock.json", cwd=system)
    assert human.returncode == 1
    assert human.stdout == "pinned with identity schema 1; re-pin to compare under schema 2\n"
    report = cli("verify", "--lock", "old.lock.json", "--json", cwd=system)
    assert report.returncode == 1
    assert report.json()["verdict"] == "new-identity" and report.json()["lock_schema"] == "execsys.identity/1"
    assert not any(c["status"] == "changed" for c in report.json()["components"].values())
    # diff still compares (both ids are valid under their own schema) and says the schemas differ
    diff = cli("diff", "old.lock.json", "execsys.lock.json", "--json", cwd=system)
    assert diff.returncode == 0 and "schema 1, B with schema 2" in diff.stderr
    assert (diff.json()["a"]["schema"], diff.json()["b"]["schema"]) == ("execsys.identity/1", "execsys.identity/2")


# -- issue 15: the lock is not replaced when the ledger cannot take the record ------------------


def _corrupt_records_table(ledger: Path) -> None:
    """Overwrite the records table's root page: the file still opens, the next append fails."""
    conn = sqlite3.connect(ledger)
    root, = conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'records'").fetchone()
    page_size, = conn.execute("PRAGMA page_size").fetchone()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with open(ledger, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xa5" * page_size)


def test_a_corrupt_ledger_leaves_the_lock_as_it_was(cli, system: Path, ledger_path: Path) -> None:
    env = {"OMP_NUM_THREADS": "4"}
    assert cli("pin", cwd=system, env=env).returncode == 0
    lock = system / "execsys.lock.json"
    before = lock.read_bytes()
    (system / "eval.py").write_text("print('a different harness')\n")  # this pin would write another id
    _corrupt_records_table(ledger_path)
    result = cli("pin", cwd=system, env=env)
    assert result.returncode == 2, result.stderr
    assert str(ledger_path) in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert lock.read_bytes() == before


# -- issue 15: a lock with a recomputed id but wrong inner types -----------------------------------


@pytest.mark.parametrize(("component", "key", "value"), [
    ("artifact", "path", ["model.bin"]),
    ("runtime", "endpoint", 8000),
])
def test_wrongly_typed_lock_fields_are_named(cli, system: Path, component: str, key: str, value: object) -> None:
    lock = cli("pin", "--json", cwd=system, env={"OMP_NUM_THREADS": "4"}).json()
    lock["components"][component]["declared"][key] = value
    lock["id"] = content_id(lock["components"])  # edited, and the id recomputed to match
    (system / "edited.lock.json").write_text(json.dumps(lock))
    for args in (("verify", "--lock", "edited.lock.json"), ("diff", "edited.lock.json", "execsys.lock.json")):
        result = cli(*args, cwd=system)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert f"components.{component}.declared.{key}" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "internal error" not in result.stderr


def test_out_and_lock_name_the_same_thing(cli, system: Path) -> None:
    env = {"OMP_NUM_THREADS": "4"}
    assert cli("pin", "--out", "out.lock.json", cwd=system, env=env).returncode == 0
    assert (system / "out.lock.json").exists()
    both = cli("pin", "--out", "a.lock.json", "--lock", "b.lock.json", cwd=system, env=env)
    assert both.returncode == 2 and "--out and --lock" in both.stderr
    assert not (system / "a.lock.json").exists() and not (system / "b.lock.json").exists()
