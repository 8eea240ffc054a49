"""Every example in every ``--help`` is checked: each parses, and those the suite can run here run.

The examples are read from the help the parsers print (``examples:`` sections of every command
and action), so an example that is added, changed or wrong is caught without a list to keep in
step. Each line is cut where its description starts (two spaces outside quotes), continuation
lines are joined, and it is split at the shell's ``&&``, ``|``, ``;`` and ``>`` into commands;
every ``execsys`` command among them goes through the real argument parser and must parse without
a usage error. Those the suite can run also run, each with the exit code it is expected to give:
``RUN_FOR_REAL`` in one fresh directory with its own ledger and HOME, ``AGAINST_ENDPOINTS`` (the
probe, plan, compare and explain examples) against the suite's loopback OpenAI endpoints,
``OVER_SSH`` against its loopback sshd. Every other one is checked for parsing only, because it
needs what the suite cannot start here (systemctl, docker, a GPU, a vLLM or SGLang server, a
terminal for the TUI, Ansible's fact tree, a result file of a past run). Each list is checked to be
still in the help, so an edited example cannot drop out of its real run unnoticed.

The real runs happen in fresh network and PID namespaces (``unshare``, as root) where that is
allowed: no server of this machine answers there, so ``doctor``, ``init`` and ``pin`` see the same
empty machine on every run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

SEPARATORS = {"&&", "||", "|", ";", ">", ">>", "<"}


def _cut_description(line: str) -> str:
    """The command part of an example line: up to two spaces outside quotes (then the description)."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif line.startswith("  ", index):
            return line[:index]
    return line


def example_lines(help_text: str) -> list[str]:
    """The example command lines of one help text's ``examples:`` (or ``typical session:``) section."""
    lines: list[str] = []
    inside = False
    pending = ""
    for raw in help_text.splitlines():
        if raw.strip() in ("examples:", "typical session:"):  # the latter: `execsys --help`'s own
            inside = True
            continue
        if not inside:
            continue
        if not raw.strip():
            inside = False
            continue
        text = pending + raw.strip() if pending else raw.strip()
        if text.endswith("\\"):
            pending = text[:-1].rstrip() + " "
            continue
        pending = ""
        lines.append(_cut_description(text).strip())
    return lines


def execsys_commands(example: str) -> list[list[str]]:
    """The argv (without the leading ``execsys``) of each execsys command in one example line."""
    lexer = shlex.shlex(example, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = []
    current: list[str] = []
    redirect = False
    for token in lexer:
        if token in SEPARATORS:
            if current:
                commands.append(current)
            current, redirect = [], token in (">", ">>", "<")
            continue
        if redirect:  # the file after a redirection is no command
            redirect = False
            continue
        current.append(token)
    if current:
        commands.append(current)
    return [argv[1:] for argv in commands if argv and argv[0] == "execsys"]


@cache
def all_examples() -> tuple[tuple[str, str], ...]:
    """(where, example line) for every example in every parser's help, top level included."""
    import argparse

    from execsys.cli import build_parser

    found: list[tuple[str, str]] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        found.extend((path, line) for line in example_lines(parser.format_help()))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                seen: set[int] = set()
                for name, sub in action.choices.items():
                    if id(sub) not in seen:
                        seen.add(id(sub))
                        walk(sub, f"{path} {name}")

    walk(build_parser(), "execsys")
    from execsys.commands import probe

    for axis in probe.AXIS_LINES:  # each axis's own help (execsys probe AXIS --help)
        walk(probe.axis_parser(axis), f"execsys probe {axis} --help")
    return tuple(found)


def parse(argv: list[str]):
    """Parse as ``execsys`` does: a usage error raises SystemExit(2); words left over are one too."""
    from execsys.cli import build_parser

    if not argv:
        argv = ["tui"]  # bare `execsys` in a terminal opens the TUI
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # as main() does: the command's own one-line error, exit 2
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extras)}")
    assert getattr(args, "_module", None) is not None, "no command"
    return args


def test_the_help_has_examples_in_every_command():
    from execsys.cli import COMMANDS

    where = {w.split()[1] for w, _ in all_examples() if len(w.split()) > 1}
    assert set(COMMANDS) <= where, set(COMMANDS) - where
    assert len(all_examples()) > 80


@pytest.mark.parametrize("where, example", all_examples(), ids=[f"{w}: {e}"[:90] for w, e in all_examples()])
def test_every_help_example_parses(where, example, capsys):
    commands = execsys_commands(example)
    if not commands:  # a line of another program (b3sum, ansible) shown beside execsys
        assert not example.startswith("execsys "), example
        return
    for argv in commands:
        try:
            parse(argv)
        except SystemExit as exc:
            pytest.fail(f"{where}: 'execsys {shlex.join(argv)}' is refused by the parser (exit {exc.code}): "
                        f"{capsys.readouterr().err.strip()}")


def test_example_lines_are_cut_joined_and_split_as_a_shell_would():
    help_text = ("examples:\n  execsys init && execsys pin        declare, then pin\n"
                 "  execsys run --override \"a  b\" -- x\n  execsys plan run p.json \\\n      --log e.jsonl\n"
                 "  execsys pin --json | jq .id\n  execsys ledger export > ledger.jsonl\n\nafter\n")
    lines = example_lines(help_text)
    assert lines == ["execsys init && execsys pin", 'execsys run --override "a  b" -- x',
                     "execsys plan run p.json --log e.jsonl", "execsys pin --json | jq .id",
                     "execsys ledger export > ledger.jsonl"]
    assert [execsys_commands(line) for line in lines] == [
        [["init"], ["pin"]], [["run", "--override", "a  b", "--", "x"]], [["plan", "run", "p.json", "--log", "e.jsonl"]],
        [["pin", "--json"]], [["ledger", "export"]]]


def test_a_wrong_example_is_caught(capsys):
    """The check itself: an example with a flag no command has, or a bad value, fails to parse."""
    for wrong in ("execsys doctor --no-such-flag", "execsys probe session --concurrency many",
                  "execsys ledger list --kind"):
        with pytest.raises(SystemExit) as refused:
            parse(execsys_commands(wrong)[0])
        assert refused.value.code == 2


# -- the examples that run for real --------------------------------------------------------------

# In this order, in one directory: (example as the help prints it, the exit codes it may give here).
# A doctor may warn or find a hazard on a machine (exit 1) but must never be refused (2).
FINDING_OR_OK = (0, 1)
RUN_FOR_REAL: list[tuple[str, tuple[int, ...]]] = [
    ("execsys doctor", FINDING_OR_OK),
    ("execsys doctor -v", FINDING_OR_OK),
    ("execsys doctor --strict", FINDING_OR_OK),
    # nothing called llama-server runs in the namespace: the declared process is reported missing
    ("execsys doctor --only port-collisions --port 8000 --process llama-server", (1,)),
    ("execsys init", (0,)),
    ("execsys init --force", (0,)),
    ("execsys init --config eval/execsys.toml", (0,)),
    ("execsys init && execsys pin", (0,)),
    ("execsys pin --config eval/execsys.toml", (0,)),
    ("execsys pin --lock runs/today.lock.json", (0,)),
    ("execsys pin --json | jq .id", (0,)),
    ("execsys verify", (0,)),
    ("execsys verify --config eval/execsys.toml", (0,)),
    ("execsys verify --lock runs/2026-11-30/execsys.lock.json --json", (0,)),
    ("execsys diff before.lock.json execsys.lock.json", (0,)),
    ("execsys ledger list --kind identity", (0,)),
    ("execsys digest model.gguf", (0,)),
    ("execsys digest ~/.cache/huggingface/hub/models--org--name/snapshots/abc123 --manifest > MANIFEST", (0,)),
    # accepted (before, '3f2a...' was refused, exit 2); these bytes are not that digest's: a mismatch
    ("execsys digest model.gguf --expect af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262", (1,)),
    ("execsys probe size --expect 0.95 --width 0.10", (0,)),
    ("execsys scope", (0, 1)),
    ("execsys scope --config eval/execsys.toml", (0, 1)),
    ("execsys scope --audit", (0,)),
    ("execsys plan new --arms A B --cases cases.jsonl --design abba --seed 7 --out plan.json", (0,)),
    ("execsys plan check plan.json", (0,)),
    ("execsys quant check fp8 --engine vllm --target A100", FINDING_OR_OK),
    ("execsys quant check fp8 --scheme block --engine vllm --target sm_80", FINDING_OR_OK),
    ("execsys quant check nvfp4 --target sm_90 --json", FINDING_OR_OK),
    ("execsys ledger list", (0,)),
    ("execsys ledger list --kind probe --json", (0,)),
    ("execsys ledger list --kind run", (0,)),
    ("execsys ledger list --limit 0 --json", (0,)),
    ("execsys ledger export > ledger.jsonl", (0,)),
    ("execsys ledger export --kind probe --json | jq length", (0,)),
    ("execsys trust", (0,)),
    ("execsys trust --config eval/execsys.toml", (0,)),
    ("execsys trust --list", (0,)),
    ("execsys trust --revoke --config eval/execsys.toml", (0,)),
    ("execsys doctor --trust", FINDING_OR_OK),
    ("execsys run --result 'scores/*.json' --json -- ./eval.sh > run.json", (0,)),
]
MODEL_BYTES = b"GGUF" + bytes(range(256)) * 4


def test_the_examples_run_for_real_are_still_in_the_help():
    shown = {line for _, line in all_examples()}
    missing = [example for example, _ in RUN_FOR_REAL if example not in shown]
    assert not missing, f"no longer in any --help (update RUN_FOR_REAL): {missing}"


def _namespaces() -> list[str]:
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "-p", "-f", "--mount-proc", "true"],
                                                  capture_output=True, timeout=30).returncode == 0:
        return ["unshare", "-n", "-p", "-f", "--mount-proc"]
    return []


def _setup(root: Path) -> None:
    (root / "model.gguf").write_bytes(MODEL_BYTES)
    snapshot = root / "home" / ".cache/huggingface/hub/models--org--name/snapshots/abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "llama"}\n')
    (snapshot / "model.safetensors").write_bytes(b"\0" * 64)
    (root / "eval").mkdir()
    (root / "scores").mkdir()  # where eval.sh writes (a --result glob names an existing directory)
    (root / "cases.jsonl").write_text("".join(
        json.dumps({"id": f"c{i}", "prompt": f"What is {i}+{i}?", "expected": str(2 * i)}) + "\n" for i in range(8)))
    script = root / "eval.sh"
    script.write_text('#!/bin/sh\nmkdir -p scores && echo \'{"accuracy": 1.0}\' > scores/a.json\n')
    script.chmod(0o755)


def _before(example: str, root: Path) -> None:
    """What an example takes for granted, put in place just before it (the files a past step left)."""
    if example.startswith("execsys verify --lock runs/2026-11-30/"):
        (root / "runs/2026-11-30").mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "execsys.lock.json", root / "runs/2026-11-30/execsys.lock.json")
    elif example == "execsys init && execsys pin":  # as in a directory that has no declaration yet
        (root / "execsys.toml").unlink()
    elif example.startswith("execsys diff before.lock.json"):
        shutil.copy(root / "execsys.lock.json", root / "before.lock.json")


def test_the_examples_that_can_run_here_run(tmp_path):
    root = tmp_path / "work"
    root.mkdir()
    _setup(root)
    env = {**os.environ, "HOME": str(root / "home"), "EXECSYS_LEDGER": str(tmp_path / "ledger.sqlite3"),
           "COLUMNS": "120", "NO_COLOR": "1"}
    env.pop("EXECSYS_CONFIG", None)
    prefix = _namespaces()
    for example, allowed in RUN_FOR_REAL:
        _before(example, root)
        for argv in execsys_commands(example):
            argv = [str(root / "home") + a[1:] if a.startswith("~/") else a for a in argv]  # the shell's ~
            proc = subprocess.run([*prefix, sys.executable, "-m", "execsys", *argv], cwd=root, env=env,
                                  capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            assert proc.returncode in allowed, (
                f"'execsys {shlex.join(argv)}' (from the help: {example}) exited {proc.returncode}, expected "
                f"{allowed}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
            if example.startswith("execsys doctor --only port-collisions"):
                assert "✗ port-collisions" in proc.stdout or "[✗] port-collisions" in proc.stdout, proc.stdout
                assert "'llama-server' is not running" in proc.stdout, proc.stdout
            if "--expect" in argv and argv[0] == "digest":
                assert "MISMATCH" in proc.stdout, proc.stdout + proc.stderr


# -- execsys probe AXIS --help: that axis's help ------------------------------------------------

AXIS_OWN = {"restart": "--restart", "concurrency": "--load", "redeploy": "--baseline", "grader": "--via",
            "size": "--width"}


@pytest.mark.parametrize("axis", ["session", "restart", "concurrency", "hosts", "redeploy", "grader", "merge", "size"])
def test_probe_axis_help_is_that_axis_help(axis, capsys):
    from execsys.cli import main

    with pytest.raises(SystemExit) as done:
        main(["probe", axis, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: execsys probe {axis} ")
    assert f"execsys probe {axis}: " in text
    assert "axes:\n" not in text  # not the combined help's list of every axis
    for other, flag in AXIS_OWN.items():
        assert (flag in text) == (other == axis), (axis, flag)
    for line in example_lines(text):  # its own examples only
        assert line.startswith(f"execsys probe {axis} "), line


def test_probe_help_without_an_axis_is_the_combined_help(capsys):
    from execsys.cli import main

    for argv in (["probe", "--help"], ["probe", "-h"], ["probe", "no-such-axis", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
        text = capsys.readouterr().out
        assert text.startswith("usage: execsys probe [-h]") and "axes:\n" in text
        assert all(flag in text for flag in AXIS_OWN.values())


# -- the probe and plan examples, against the suite's loopback endpoint ---------------------------

# In this order, against two FlipEndpoints (stdlib, loopback; deterministic answers): the example as
# the help prints it, the exit codes it may give. Its addresses (127.0.0.1:8000-8002, gpu1/gpu2, URL)
# become the endpoints'; `...` the target and cases; a record id the one the step before wrote.
AGAINST_ENDPOINTS: list[tuple[str, tuple[int, ...]]] = [
    ("execsys probe session --endpoint http://127.0.0.1:8000/v1 --cases cases.jsonl", (0,)),
    ("execsys probe concurrency --endpoint URL --cases cases.jsonl --load 16", (0,)),
    ("execsys probe hosts --endpoint http://gpu1:8000/v1 --endpoint http://gpu2:8000/v1 --cases cases.jsonl", (0,)),
    ("execsys probe session --command 'python harness.py' --cases cases.jsonl --compare outcome "
     "--extract last-number", (0,)),
    ("execsys probe session ... --until-width 0.10 --max-n 500", (0, 1)),
    ("execsys plan new --arms A B --cases cases.jsonl --design abba --seed 7 --out plan.json", (0,)),
    ("execsys plan run plan.json --arm A=http://127.0.0.1:8001/v1 --arm B=http://127.0.0.1:8002/v1 "
     "--extract last-number --log executed.jsonl", (0,)),
    ("execsys plan check plan.json --executed executed.jsonl", (0,)),
    ("execsys compare plan-run-20261130T101500-1a2b:A plan-run-20261130T101500-1a2b:B --intervention budget",
     (0, 1)),
    ("execsys explain plan-run-20261201T100000-1a2b:A plan-run-20261201T100000-1a2b:B "
     "--rerun A=http://gpu1:8000/v1 --rerun B=http://gpu2:8000/v1", (0, 1)),
]

HARNESS = "import json, sys\ncase = json.loads(sys.stdin.read())\nprint('the answer is', len(case['prompt']))\n"


def test_the_probe_and_plan_examples_run_against_a_loopback_endpoint(tmp_path, ledger_path):
    from tests.fixtures.common import run_cli
    from tests.fixtures.llama import FlipEndpoint

    shown = {line for _, line in all_examples()}
    assert not [e for e, _ in AGAINST_ENDPOINTS if e not in shown], "update AGAINST_ENDPOINTS"
    (tmp_path / "cases.jsonl").write_text("".join(
        json.dumps({"id": f"c{i}", "prompt": f"What is {i}+{i}?", "expected": str(2 * i)}) + "\n" for i in range(8)))
    (tmp_path / "harness.py").write_text(HARNESS)
    plan_run = None
    with FlipEndpoint() as first, FlipEndpoint() as second:
        where = {"http://127.0.0.1:8000/v1": first.base_url, "http://127.0.0.1:8001/v1": first.base_url,
                 "http://127.0.0.1:8002/v1": second.base_url, "http://gpu1:8000/v1": first.base_url,
                 "http://gpu2:8000/v1": second.base_url, "URL": first.base_url}
        for example, allowed in AGAINST_ENDPOINTS:
            [argv] = execsys_commands(example)
            if "..." in argv:
                at = argv.index("...")
                argv[at:at + 1] = ["--endpoint", first.base_url, "--cases", "cases.jsonl"]
            argv = [where.get(a, a) for a in argv]
            argv = [f"{a.split('=', 1)[0]}={where[a.split('=', 1)[1]]}" if "=" in a and a.split("=", 1)[1] in where
                    else a for a in argv]
            argv = [a.replace("plan-run-20261130T101500-1a2b", plan_run or "")
                     .replace("plan-run-20261201T100000-1a2b", plan_run or "") for a in argv]
            result = run_cli(*argv, cwd=tmp_path, timeout=120)
            assert result.returncode in allowed, (
                f"'execsys {shlex.join(argv)}' (from the help: {example}) exited {result.returncode}, expected "
                f"{allowed}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
            if argv[:2] == ["plan", "run"]:
                listed = run_cli("ledger", "list", "--kind", "plan-run", "--json", cwd=tmp_path).json()
                plan_run = listed[0]["id"]
    assert plan_run


# -- the SSH examples, against the suite's loopback sshd ------------------------------------------

# gpu1 and gpu2 are ssh aliases of the suite's sshd (ubuntu@10.0.0.7 becomes gpu2: that user does not
# exist here); /srv/models/llama a directory made for the test.
OVER_SSH: list[tuple[str, tuple[int, ...]]] = [
    ("execsys doctor --host gpu1 --host ubuntu@10.0.0.7 --json", (0, 1)),
    ("execsys digest /srv/models/llama --host gpu1 --host gpu2", (0,)),
]


def test_the_ssh_examples_run_against_the_loopback_sshd(tmp_path, sshd_server, ledger_path):
    from tests.fixtures.common import run_cli

    shown = {line for _, line in all_examples()}
    assert not [e for e, _ in OVER_SSH if e not in shown], "update OVER_SSH"
    text = sshd_server.config_path.read_text()
    block = text[text.index(f"Host {sshd_server.dest}\n"):].split("\n\n", 1)[0]
    config = tmp_path / "ssh_config"
    config.write_text(text + "\n" + block.replace(f"Host {sshd_server.dest}", "Host gpu1 gpu2", 1) + "\n")
    model = tmp_path / "srv-models-llama"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}\n')
    (model / "model.safetensors").write_bytes(b"\1" * 4096)
    env = {"EXECSYS_SSH_CONFIG": str(config)}
    for example, allowed in OVER_SSH:
        [argv] = execsys_commands(example)
        argv = [{"ubuntu@10.0.0.7": "gpu2", "/srv/models/llama": str(model)}.get(a, a) for a in argv]
        result = run_cli(*argv, cwd=tmp_path, env=env, timeout=180)
        assert result.returncode in allowed, (
            f"'execsys {shlex.join(argv)}' (from the help: {example}) exited {result.returncode}, expected "
            f"{allowed}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
        if argv[0] == "doctor":
            reached = {r["host"]["name"]: r["host"] for r in result.json()["hosts"]}
            assert {"gpu1", "gpu2"} <= set(reached), list(reached)
            assert not [name for name, host in reached.items() if host.get("error")], reached
        else:
            assert "every site holds the same artifact (3/3)" in result.stdout, result.stdout
