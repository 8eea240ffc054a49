"""``verify`` and ``diff`` as a user reads them: each field that moved shows only what moved in it, on
both sides, and a table that gained a key says ``+key: value`` (never ``{} -> null``).

A real llama.cpp server restarted by a real shell command into other flags (the argv moved by one
value and one flag), and a declaration edited to declare a model name and an environment variable,
pinned and checked with the real CLI."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fixtures.llama import wait_ready


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_verify_and_diff_show_the_argv_delta_and_keys_gained_as_plus(cli, tmp_path: Path, restart_script,
                                                                    tiny_gguf: Path) -> None:
    server = restart_script(extra_args=["--n_threads", "2"], restart_extra_args=["--n_threads", "1", "--n_batch", "64"])
    project = tmp_path / "project"
    project.mkdir()
    (project / "execsys.toml").write_text(
        f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{server.base_url}"\n')
    assert cli("pin", cwd=project).returncode == 0
    (project / "execsys.lock.json").rename(project / "before.lock.json")

    subprocess.run(server.command, shell=True, check=True, timeout=120)
    assert wait_ready(server.base_url, 60.0)
    (project / "execsys.toml").write_text(
        f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{server.base_url}"\n\n'
        '[model]\nname = "tiny"\n\n[environment]\nvariables = { DELTA_CHECK = "1" }\n')

    verified = cli("verify", "--lock", "before.lock.json", cwd=project, env={"DELTA_CHECK": "1"})
    assert verified.returncode == 1, verified.stderr
    said = _lines(verified.stdout)
    assert "observed.process.argv: --n_threads 2 → 1 +--n_batch 64" in said, verified.stdout
    assert "+declared.name: tiny" in said and "+declared.variables.DELTA_CHECK: 1" in said, verified.stdout
    assert str(tiny_gguf) not in verified.stdout  # the whole argv is not shown on either side
    assert "null" not in verified.stdout, verified.stdout

    assert cli("pin", cwd=project, env={"DELTA_CHECK": "1"}).returncode == 0
    diffed = cli("diff", "before.lock.json", "execsys.lock.json", cwd=project)
    assert diffed.returncode == 0, diffed.stderr
    said = _lines(diffed.stdout)
    assert "observed.process.argv: --n_threads 2 → 1 +--n_batch 64" in said, diffed.stdout
    # the model and environment tables were empty in the first lock: each gained key is one line
    assert "model: 1 field(s)" in said and "+declared.name: tiny" in said, diffed.stdout
    # (the variable is read from the serving process, which does not hold it: gained, as null)
    assert "+declared.variables.DELTA_CHECK: 1" in said and "+observed.variables.DELTA_CHECK: null" in said, \
        diffed.stdout
    assert "observed.variables_not_holding: +DELTA_CHECK" in said, diffed.stdout
    assert "{} -> null" not in diffed.stdout and "{} → null" not in diffed.stdout and "declared: " not in diffed.stdout
    assert str(tiny_gguf) not in diffed.stdout
    # the record keeps every field as it was: the rendering changed, not the JSON
    data = cli("diff", "before.lock.json", "execsys.lock.json", "--json", cwd=project).json()
    assert {"field": "declared", "old": {}, "new": None} in data["changes"]["model"]
    assert {"field": "declared.name", "old": None, "new": "tiny"} in data["changes"]["model"]
