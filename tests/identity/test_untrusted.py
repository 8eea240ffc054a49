"""What pin refuses to start from a declaration the user has not trusted (:mod:`execsys.trust`): an MCP
server named by its command, and a Python interpreter shipped beside the declaration (a harness or
grader command naming it by a relative path), which pin would ask its version and packages. A program
on PATH or named by an absolute path is the user's own; a trusted declaration starts what it names.

Declarations are read from files as the commands read them (no test trusts them); the proof that
nothing started is a file the MCP server's command would have created.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from execsys import declaration
from execsys.identity import PinOptions, pin
from execsys.trust import UntrustedDeclaration
from tests.fixtures.identity_project import DECLARATION, write_project


def _load(directory: Path, text: str) -> declaration.Declaration:
    return declaration.load(write_project(directory, DECLARATION + text))


def test_an_untrusted_mcp_server_command_is_refused_before_it_starts(tmp_path: Path) -> None:
    started = tmp_path / "started"
    decl = _load(tmp_path, f'\n[tools]\nmcp = [{{ name = "files", command = ["touch", "{started}"] }}]\n')
    assert not decl.trusted
    with pytest.raises(UntrustedDeclaration) as refused:
        pin(decl, require_endpoint=False)
    assert "declares a tools.mcp command, which execsys would run" in str(refused.value)
    assert str(decl.path) in str(refused.value)
    assert not started.exists(), "pin started an MCP server from an untrusted declaration"


@pytest.mark.parametrize(("table", "command", "key"), [
    ("harness", 'commands = ["venv/bin/python eval.py"]', "harness.commands 'venv/bin/python'"),
    ("harness", 'commands = ["python3 run.py", "OMP_NUM_THREADS=1 ./env/bin/python3.11 eval.py"]',
     "harness.commands './env/bin/python3.11'"),
    ("grader", 'command = "tools/python grade.py"', "grader.command 'tools/python'"),
])
def test_an_untrusted_interpreter_shipped_beside_the_declaration_is_refused(
        tmp_path: Path, table: str, command: str, key: str) -> None:
    decl = _load(tmp_path, f"\n[{table}]\n{command}\n")
    assert not decl.trusted
    with pytest.raises(UntrustedDeclaration) as refused:
        pin(decl, require_endpoint=False)
    assert f"declares {key}, an interpreter pin would start, which execsys would run" in str(refused.value)


@pytest.mark.parametrize("command", [
    f"{sys.executable} eval.py",  # an absolute path: the user's own interpreter
    "~/no-such-venv/bin/python eval.py",  # under the user's home: as absolute
    "python3 eval.py",  # found on PATH
    "venv/bin/run-eval --fast",  # shipped, but no interpreter: described (digest, shebang), never started
])
def test_what_is_not_a_shipped_interpreter_is_pinned_from_an_untrusted_declaration(
        tmp_path: Path, command: str) -> None:
    # a grader command makes the declaration one that needs trusting, whatever the harness says
    decl = _load(tmp_path, f'\n[harness]\ncommands = ["{command}"]\n\n[grader]\ncommand = "python3 grade.py"\n')
    assert not decl.trusted
    identity = pin(decl, require_endpoint=False)
    assert [c["command"] for c in identity.components["harness"]["observed"]["commands"]] == [command]


def test_a_trusted_declaration_starts_the_interpreter_it_ships(tmp_path: Path) -> None:
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    os.symlink(sys.executable, venv_bin / "python")
    decl = dataclasses.replace(_load(tmp_path, '\n[harness]\ncommands = ["venv/bin/python eval.py"]\n'), trusted=True)
    identity = pin(decl, require_endpoint=False)
    [command] = identity.components["harness"]["observed"]["commands"]
    assert command["interpreter"]["version"] == ".".join(map(str, sys.version_info[:3]))


def test_an_engine_log_flag_keeps_whether_the_declaration_is_trusted(tmp_path: Path) -> None:
    """``--engine-log`` rebuilds the declaration with the log in [runtime]: an untrusted one stays refused,
    a trusted one stays trusted."""
    text = '\n[harness]\ncommands = ["venv/bin/python eval.py"]\n'
    untrusted = PinOptions.from_sources(_load(tmp_path, text), engine_log=str(tmp_path / "engine.log"),
                                        require_endpoint=False)
    assert untrusted.declaration.component("runtime")["log"] == str(tmp_path / "engine.log")
    assert untrusted.declaration.trusted is False
    with pytest.raises(UntrustedDeclaration):
        pin(untrusted.declaration, require_endpoint=False)
    trusted = PinOptions.from_sources(dataclasses.replace(_load(tmp_path, text), trusted=True),
                                      engine_log=str(tmp_path / "engine.log"), require_endpoint=False)
    assert trusted.declaration.trusted is True


def test_an_mcp_server_named_by_its_url_starts_nothing_and_is_pinned_from_an_untrusted_declaration(
        tmp_path: Path) -> None:
    decl = _load(tmp_path, '\n[tools]\nmcp = [{ name = "web", url = "http://127.0.0.1:9/mcp" }]\n'
                           '\n[grader]\ncommand = "python3 grade.py"\n')
    assert not decl.trusted
    identity = pin(decl, require_endpoint=False)
    assert identity.components["tools"]["declared"]["mcp"] == [{"name": "web", "url": "http://127.0.0.1:9/mcp"}]
