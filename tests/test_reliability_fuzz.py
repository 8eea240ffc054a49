"""Every command's file inputs fed with what a careless or hostile user could give them.

Each input -- /dev/zero, a FIFO nobody writes, a 100 MB file, JSON and TOML nested
far deeper than any real file, bytes that are not UTF-8 -- goes to every command
that reads a file: ``--config``, ``--lock``, ``--cases``, ``[runtime] env_file``,
``doctor --env-file``, ``digest``, ``diff``, ``plan check``, ``compare``. Each run
must end with exit 0, 1 or 2 well within its timeout, with no traceback and no
internal error on stderr, and leave nothing half-written behind (no temp file, no
lock written by a run that failed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

INPUTS = ["dev-zero", "fifo", "100mb", "deep-json", "deep-toml", "not-utf8"]

# (name, argv with {F} for the input path, optional declaration text with {F})
COMMANDS = [
    ("pin --config", ["pin", "--config", "{F}", "--out", "out.lock.json"], None),
    ("doctor --config", ["doctor", "--config", "{F}"], None),
    ("verify --lock", ["verify", "--lock", "{F}"], None),
    ("runtime env_file", ["pin", "--out", "out.lock.json"], '[runtime]\nenv_file = "{F}"\n'),
    ("doctor --env-file", ["doctor", "--env-file", "{F}"], None),
    ("probe --cases", ["probe", "session", "--command", "cat", "--cases", "{F}"], None),
    ("digest", ["digest", "{F}"], None),
    ("diff", ["diff", "{F}", "{F}"], None),
    ("plan check", ["plan", "check", "{F}"], None),
    ("compare", ["compare", "{F}", "{F}", "--no-record"], None),
]


def _make(kind: str, where: Path) -> Path:
    path = where / f"input-{kind}"
    if kind == "dev-zero":
        return Path("/dev/zero")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "100mb":
        with open(path, "wb") as fh:
            fh.write(b'{"id": "x", "prompt": "')
            fh.truncate(100 << 20)  # zeros after a JSON-ish start: one line of 100 MB
    elif kind == "deep-json":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "deep-toml":
        path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n[" + ".".join(["t"] * 5000) + "]\n")
    elif kind == "not-utf8":
        path.write_bytes(b"\xff\xfe[model]\nname = \"caf\xe9\"\n\x80\x81" + b'{"id": "\xff"}\n')
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("fuzz-inputs")
    return {kind: _make(kind, where) for kind in INPUTS}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", INPUTS)
@pytest.mark.parametrize(("name", "argv", "declaration"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_hostile_file_inputs_end_cleanly(tmp_path: Path, ledger_path: Path, inputs: dict[str, Path], kind: str,
                                         name: str, argv: list[str], declaration: str | None) -> None:
    target = str(inputs[kind])
    work = tmp_path / "work"
    work.mkdir()
    if declaration is not None:
        (work / "execsys.toml").write_text(declaration.replace("{F}", target))
    args = [a.replace("{F}", target) for a in argv]
    env = dict(os.environ, COLUMNS="120")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "execsys", *args], cwd=work, env=env, capture_output=True,
                          timeout=100, stdin=subprocess.DEVNULL)
    elapsed = time.monotonic() - start
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode in (0, 1, 2), (name, kind, proc.returncode, stderr[-2000:])
    assert "Traceback" not in stderr and "internal error" not in stderr, (name, kind, stderr[-2000:])
    assert elapsed < 90, (name, kind, elapsed)
    leftovers = [p.name for p in work.rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers, (name, kind, leftovers)
    if proc.returncode == 2:
        assert not (work / "out.lock.json").exists(), (name, kind)
        assert stderr.strip(), (name, kind)
    if kind == "fifo":
        assert os.path.exists(target) and not os.path.isfile(target)  # still a FIFO: never replaced
