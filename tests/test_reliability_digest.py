"""Digests that are right for every name and every file, and clear when they cannot be.

`execsys digest FILE` prints b3sum's own line (escapes included); two trees whose
names differ only in bytes that are not UTF-8 get different digests; a file
truncated while hashed is an error naming it (not SIGBUS, not exit 3); a tree
1,500 directories deep is walked; an empty path is named as such.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from execsys import digest as digest_module
from execsys.digest import digest_path, hash_file, manifest_line
from execsys.errors import InputError

needs_b3sum = pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum not installed")


@needs_b3sum
@pytest.mark.parametrize("name", [b"new\nline.bin", b"back\\slash.bin", b"both\\and\nnew.bin", b"plain.bin",
                                  b"caf\xe9.bin"])
def test_file_digest_line_is_exactly_b3sums(cli, tmp_path: Path, name: bytes) -> None:
    path = os.path.join(os.fsencode(tmp_path), name)
    with open(path, "wb") as fh:
        fh.write(b"weights")
    expected = subprocess.run(["b3sum", name], cwd=tmp_path, capture_output=True, check=True).stdout
    result = subprocess.run([sys.executable, "-m", "execsys", "digest", name], cwd=tmp_path,
                            capture_output=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected


def _tree(root: Path, names: list[bytes]) -> Path:
    root.mkdir()
    for name in names:
        with open(os.path.join(os.fsencode(root), name), "wb") as fh:
            fh.write(b"same bytes")
    return root


def test_names_differing_only_in_invalid_utf8_bytes_get_different_digests(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", [b"w\xe9.bin"])
    b = _tree(tmp_path / "b", [b"w\xff.bin"])
    c = _tree(tmp_path / "c", [b"w\xef\xbf\xbd.bin"])  # a name that really is U+FFFD
    digests = {digest_path(p).digest for p in (a, b, c)}
    assert len(digests) == 3
    # the escaped form keeps the bytes and is itself valid UTF-8 text
    assert manifest_line("0" * 64, b"w\xe9.bin") == "\\" + "0" * 64 + "  w\\xe9.bin"
    assert manifest_line("0" * 64, b"a\\x\xe9\n") == "\\" + "0" * 64 + "  a\\\\x\\xe9\\n"
    assert digest_path(a).manifest.encode("utf-8")


@needs_b3sum
def test_b3sum_check_checks_every_line_but_the_non_utf8_names_and_execsys_says_which(tmp_path: Path) -> None:
    """The manifest is documented as ``b3sum --check``-able except the lines of names that are not
    UTF-8 (b3sum cannot name those files from a UTF-8 check file, and refuses its own lossy line for
    them too). Checked with the real b3sum over the whole manifest: every other line OK, one
    'Invalid backslash escape' per such name, exit 1; execsys said so in one line on stderr."""
    names = [b"plain.bin", b"back\\slash.bin", b"new\nline.bin", b"caf\xe9.bin", b"bad\xff\xfe.bin", b"tab\there"]
    tree = _tree(tmp_path / "tree", names)
    made = subprocess.run([sys.executable, "-m", "execsys", "digest", str(tree), "--manifest"], capture_output=True)
    assert made.returncode == 0, made.stderr
    [note] = made.stderr.decode().strip().splitlines()
    assert note.startswith("note: 2 of 6 names are not UTF-8") and "b3sum --check cannot check" in note
    check = subprocess.run(["b3sum", "--check", "-"], cwd=tree, input=made.stdout, capture_output=True)
    assert check.returncode == 1
    assert check.stdout.decode().count(": OK") == 4 and "FAILED" not in check.stdout.decode()
    assert check.stderr.decode().count("Invalid backslash escape") == 2
    own = subprocess.run(["b3sum", b"caf\xe9.bin"], cwd=tree, capture_output=True, check=True).stdout
    refused = subprocess.run(["b3sum", "--check", "-"], cwd=tree, input=own, capture_output=True)
    assert refused.returncode == 1 and b"replacement character" in refused.stderr  # b3sum's own line: no better
    utf8_only = subprocess.run([sys.executable, "-m", "execsys", "digest", str(_tree(tmp_path / "ok", names[:3])),
                                "--manifest"], capture_output=True)
    assert utf8_only.returncode == 0 and utf8_only.stderr == b""


def test_a_file_truncated_while_hashed_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digest_module, "WINDOW", 1 << 20)
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(5 << 20))

    def truncate_after_first_window(done: int, total: int) -> None:
        if done == 1 << 20:
            os.truncate(path, 2 << 20)

    with pytest.raises(InputError, match="changed while it was being hashed"):
        hash_file(path, progress=truncate_after_first_window)
    # a small file that shrinks, or any file that grows, is caught too
    path.write_bytes(b"x" * 4096)

    def grow(done: int, total: int) -> None:
        with open(path, "ab") as fh:
            fh.write(b"more")

    with pytest.raises(InputError, match="changed while it was being hashed"):
        hash_file(path, progress=grow)


def test_a_file_truncated_by_another_process_while_hashed_is_exit_2(cli, tmp_path: Path) -> None:
    """A writer truncating a large file from outside: never SIGBUS, never exit 3."""
    path = tmp_path / "weights.bin"
    with open(path, "wb") as fh:
        fh.truncate(600 << 20)  # sparse: cheap to make, 600 MiB to hash
    proc = subprocess.Popen([sys.executable, "-m", "execsys", "digest", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import time

    time.sleep(0.3)
    os.truncate(path, 1 << 20)
    out, err = proc.communicate(timeout=120)
    # hashing may have finished before the truncation (exit 0), else it is the clear error
    assert proc.returncode in (0, 2), (proc.returncode, err)
    if proc.returncode == 2:
        assert "changed while it was being hashed" in err and "Traceback" not in err


def test_a_tree_1500_directories_deep_is_walked(tmp_path: Path) -> None:
    root = tmp_path / "deep"
    current = os.fsencode(root)
    os.mkdir(current)
    for _ in range(1500):
        current = os.path.join(current, b"d")
        os.mkdir(current)
    with open(os.path.join(current, b"leaf.bin"), "wb") as fh:
        fh.write(b"leaf")
    try:
        result = digest_path(root)
        assert result.files == 1 and result.entries[0].relpath == b"d/" * 1500 + b"leaf.bin"
    finally:
        # removed here, deepest first: pytest's later clean-up of old tmp dirs uses shutil.rmtree, which
        # recurses once per level and dies with a RecursionError at exit on a tree this deep
        os.unlink(os.path.join(current, b"leaf.bin"))
        while current != os.fsencode(tmp_path):
            os.rmdir(current)
            current = os.path.dirname(current)


def test_an_empty_path_is_named(cli) -> None:
    result = cli("digest", "")
    assert result.returncode == 2
    assert "path is empty" in result.stderr and ": :" not in result.stderr


def test_every_expect_in_digests_help_is_accepted(cli, tmp_path: Path) -> None:
    """The help's example used to be ``--expect 3f2a...``, which --expect refuses (exit 2): each
    ``--expect`` value the help shows must be one it takes."""
    import shlex

    shown = cli("digest", "--help").stdout
    values = [words[words.index("--expect") + 1] for line in shown.splitlines()
              if line.strip().startswith("execsys digest") and "--expect" in (words := shlex.split(line))]
    assert values, shown
    (tmp_path / "model.gguf").write_bytes(b"")
    for value in values:
        result = cli("digest", "model.gguf", "--expect", value, cwd=tmp_path, timeout=60)
        assert result.returncode in (0, 1), (value, result.stderr)
