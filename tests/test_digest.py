"""`execsys digest` on real files and trees, checked against the real `b3sum` binary."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from execsys.digest import digest_path, manifest_line, walk_tree

pytestmark = pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum not installed")

NON_UTF8 = b"caf\xe9-latin1.bin"  # 0xE9 alone is not valid UTF-8


def b3sum(*args: str | bytes, cwd: Path | None = None, input: bytes | None = None) -> bytes:
    return subprocess.run(["b3sum", *args], cwd=cwd, input=input, capture_output=True, check=True).stdout


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A tree shaped like a Hugging Face snapshot: nested files, names b3sum must escape, symlinks to blobs."""
    root = tmp_path / "snapshot"
    blobs = tmp_path / "blobs"
    (root / "sub" / "deeper").mkdir(parents=True)
    blobs.mkdir()
    (blobs / "abc123").write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # above the mmap threshold
    (root / "model.safetensors").symlink_to(blobs / "abc123")
    (root / "config.json").write_text('{"model_type": "llama"}')
    (root / "sub" / "a.txt").write_text("alpha\n")
    (root / "sub" / "deeper" / "b.txt").write_text("beta\n")
    (root / "sub.txt").write_text("sorts before 'sub/' bytewise\n")
    (root / "back\\slash.txt").write_text("b3sum escapes this name\n")
    (root / "new\nline.txt").write_text("and this one\n")
    (root / "empty").write_bytes(b"")
    os.symlink(root / "sub", root / "linked-dir")  # a directory symlink is followed (not a loop)
    with open(os.path.join(os.fsencode(root), NON_UTF8), "wb") as fh:
        fh.write(b"bytes under a non-UTF-8 name")
    return root


def test_file_digest_is_b3sum(cli, tmp_path: Path) -> None:
    for size in (0, 1, 1023, 1024, 1025, 3 * (1 << 20) + 5, (64 << 20) + 3):  # chunk, mmap-window edges
        path = tmp_path / f"f{size}"
        path.write_bytes(os.urandom(size) if size < (1 << 20) else os.urandom(1 << 20) * (size >> 20) + b"x" * (size % (1 << 20)))
        expected = b3sum("--no-names", str(path)).decode().strip()
        result = cli("digest", str(path))
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[0] == expected, size
        assert digest_path(path).digest == expected


def test_tree_manifest_is_b3sum_format_and_checks(cli, tree: Path) -> None:
    result = cli("digest", str(tree), "--manifest")
    assert result.returncode == 0, result.stderr
    manifest = result.stdout.encode()
    lines = manifest.decode().splitlines()
    # sorted bytewise by relative path: 'sub.txt' (0x2e) before 'sub/...' (0x2f); symlinked dir included
    paths = [line.split("  ", 1)[1] for line in lines]
    assert paths.index("sub.txt") < paths.index("sub/a.txt")
    assert "linked-dir/deeper/b.txt" in paths and "model.safetensors" in paths
    assert "\\back\\\\slash.txt" not in paths  # escaped lines start with a backslash before the digest
    assert any(line.startswith("\\") and line.endswith("back\\\\slash.txt") for line in lines)
    assert any(line.startswith("\\") and line.endswith("new\\nline.txt") for line in lines)
    # each line with a UTF-8 name is exactly what b3sum prints for that file, run from inside the tree
    for rel, _full, _size in walk_tree(os.fsencode(tree)):
        if rel != NON_UTF8:
            expected = b3sum(rel, cwd=tree).decode().rstrip("\n")
            assert expected in lines, rel
    # the tree digest is the BLAKE3 of the manifest bytes, as b3sum computes it
    digest_json = cli("digest", str(tree), "--json").json()
    assert digest_json["kind"] == "tree"
    assert digest_json["digest"] == b3sum("--no-names", "-", input=manifest).decode().strip()
    assert digest_json["files"] == len(lines)
    # b3sum --check verifies every UTF-8-named line from inside PATH (b3sum itself refuses to check
    # names that are not UTF-8, so that line is checked above by comparing with b3sum's own output)
    checkable = b"".join(line + b"\n" for line in manifest.splitlines() if b"\\xe9" not in line)
    check = subprocess.run(["b3sum", "--check", "-"], cwd=tree, input=checkable, capture_output=True)
    assert check.returncode == 0, check.stderr
    assert check.stdout.decode().count(": OK") == len(lines) - 1


def test_non_utf8_name_keeps_its_bytes_in_the_manifest(cli, tree: Path) -> None:
    # b3sum shows the name lossily (U+FFFD); the manifest escapes the byte instead and keeps the
    # same digest of the file's contents
    b3sum_digest = b3sum("--no-names", NON_UTF8, cwd=tree).decode().strip()
    assert f"\\{b3sum_digest}  caf\\xe9-latin1.bin" in cli("digest", str(tree), "--manifest").stdout.splitlines()


def test_tree_digest_moves_when_any_byte_or_name_moves(tree: Path) -> None:
    before = digest_path(tree).digest
    (tree / "sub" / "a.txt").write_text("alphA\n")
    after_edit = digest_path(tree).digest
    assert after_edit != before
    (tree / "sub" / "a.txt").rename(tree / "sub" / "a2.txt")
    assert digest_path(tree).digest not in (before, after_edit)


def test_fifo_in_tree_is_skipped_not_waited_on(cli, tree: Path) -> None:
    os.mkfifo(tree / "a-fifo")
    result = cli("digest", str(tree), "--manifest", timeout=30)
    assert result.returncode == 0
    assert "a-fifo" not in result.stdout


def test_symlink_loop_is_an_error(cli, tree: Path) -> None:
    os.symlink("../..", tree / "sub" / "deeper" / "up")  # leads back to the root: a loop
    result = cli("digest", str(tree))
    assert result.returncode == 2
    assert "symlink loop" in result.stderr and "up" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_self_referencing_symlink_is_an_error(cli, tree: Path) -> None:
    os.symlink("self", tree / "self")
    result = cli("digest", str(tree))
    assert result.returncode == 2
    assert "symlink loop" in result.stderr


def test_dangling_symlink_is_an_error(cli, tree: Path) -> None:
    os.symlink(tree / "nowhere", tree / "half-downloaded")
    result = cli("digest", str(tree))
    assert result.returncode == 2
    assert "dangling symlink" in result.stderr and "half-downloaded" in result.stderr


def test_missing_artifact_is_an_error(cli, tmp_path: Path) -> None:
    result = cli("digest", str(tmp_path / "missing.gguf"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"execsys digest: error: {tmp_path / 'missing.gguf'}: no such file or directory"


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) not installed")
def test_permission_denied_inside_tree(tree: Path, ledger_path: Path) -> None:
    """A chmod-000 file really refuses to open once the process lacks CAP_DAC_OVERRIDE.

    The suite runs as root, which reads any file; dropping the two DAC capabilities from the
    bounding set (setpriv) makes root obey file permissions, so the denial is the kernel's own.
    """
    import sys

    locked = tree / "sub" / "locked.bin"
    locked.write_bytes(b"weights nobody may read")
    locked.chmod(0)
    proc = subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m", "execsys", "digest", str(tree)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "locked.bin" in proc.stderr and "permission denied" in proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1


def test_manifest_line_escaping() -> None:
    digest = "0" * 64
    assert manifest_line(digest, b"plain/name") == f"{digest}  plain/name"
    assert manifest_line(digest, b"a\\b") == f"\\{digest}  a\\\\b"
    assert manifest_line(digest, b"a\nb") == f"\\{digest}  a\\nb"


def test_progress_is_reported_while_hashing(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"\0" * (150 << 20))
    calls: list[tuple[int, int]] = []
    digest_path(path, progress=lambda done, total: calls.append((done, total)))
    assert len(calls) >= 3
    assert calls[-1] == (150 << 20, 150 << 20)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


def test_json_shape(cli, tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"weights")
    data = cli("digest", str(path), "--json").json()
    assert data == {"path": str(path), "kind": "file", "algorithm": "blake3",
                    "digest": b3sum("--no-names", str(path)).decode().strip(), "size_bytes": 7, "files": 1}


# -- on other hosts, through a real sshd on loopback --------------------------------------------


def test_remote_digest_matches_local(cli, tree: Path, ssh_config_env) -> None:
    result = cli("digest", str(tree), "--host", ssh_config_env.dest, "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    data = result.json()
    local = digest_path(tree).digest
    assert data["digest"] == local
    remote = next(site for site in data["sites"] if site["host"] == ssh_config_env.dest)
    assert remote["digest"] == local and remote["method"] == "b3sum" and remote["status"] == "match"
    assert data["match_rate"] == {"m": 2, "n": 2, "rate": 1.0}
    assert data["verdict"] == "match"


def test_remote_mismatch_is_an_integrity_defect(cli, tmp_path: Path, ssh_config_env) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"the bytes that are really there")
    wrong = "ab" * 32
    result = cli("digest", str(path), "--host", ssh_config_env.dest, "--expect", wrong, timeout=120)
    assert result.returncode == 1
    assert "integrity defect" in result.stdout
    assert "0/2" in result.stdout  # neither the local copy nor the host holds the expected bytes


@pytest.mark.parametrize("dest", ["-oProxyCommand=touch {marker}", "", "two words", "ssh://-oProxyCommand=id@h",
                                  "ssh://-oProxyCommand=id@h:22"])
def test_a_bad_destination_is_a_usage_error_and_runs_nothing(cli, tmp_path: Path, dest: str) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "model.gguf"
    path.write_bytes(b"bytes")
    result = cli("digest", str(path), f"--host={dest.format(marker=marker)}")
    assert result.returncode == 2, result.stdout
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "not an ssh destination" in result.stderr and not marker.exists()


def test_unreachable_host_cannot_verify(cli, tmp_path: Path, ssh_config_env) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"bytes")
    result = cli("digest", str(path), "--host", ssh_config_env.unreachable_dest, "--json", timeout=120)
    assert result.returncode == 1
    data = result.json()
    site = next(s for s in data["sites"] if s["host"] == ssh_config_env.unreachable_dest)
    assert site["status"] == "unavailable" and site["error"]
    assert data["verdict"] == "unverified"
    assert data["match_rate"] == {"m": 1, "n": 1, "rate": 1.0}


def test_progress_bar_on_a_terminal_only(tmp_path: Path, ledger_path: Path) -> None:
    """A large artifact shows a progress bar when stderr is a terminal (a real pty), and none when piped."""
    import pty
    import select
    import sys

    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(300 << 20)  # sparse: 300 MiB of zeros, above the progress threshold
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "execsys", "digest", str(big)], stdout=subprocess.PIPE,
                            stderr=slave, env=dict(os.environ, TERM="xterm", COLUMNS="100"))
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the child has closed its end
            break
        if not chunk:
            break
        seen += chunk
    out = proc.communicate(timeout=60)[0].decode()
    os.close(master)
    assert proc.returncode == 0
    assert out.split()[0] == b3sum("--no-names", str(big)).decode().strip()
    assert b"hashing" in seen and b"MB" in seen  # the bar: description and transferred size
    piped = subprocess.run([sys.executable, "-m", "execsys", "digest", str(big)], capture_output=True, timeout=60)
    assert piped.stderr == b""


def _run_remote_program(path: Path, argv: list[str], env: dict) -> dict:
    """Run the exact program remote_digest sends, on this machine, the way run_python feeds it (stdin)."""
    import json

    from execsys.digest import remote_program

    payload = {"path": str(path), "timeout": 60}
    prelude = f"import json as _j\nPAYLOAD = _j.loads({json.dumps(json.dumps(payload))})\n"
    proc = subprocess.run(argv, input=(prelude + remote_program()).encode(), capture_output=True, env=env, timeout=60)
    line = next(x for x in proc.stdout.decode().splitlines() if x.startswith("EXECSYS-DIGEST "))
    return json.loads(line[len("EXECSYS-DIGEST "):])


def test_remote_program_without_b3sum_uses_python_blake3(tree: Path) -> None:
    """A host with no b3sum on PATH but the blake3 module computes the same tree digest."""
    import sys

    result = _run_remote_program(tree, [sys.executable, "-"], {"PATH": "/nonexistent", "HOME": "/root"})
    assert result["method"] == "python-blake3"
    assert result["digest"] == digest_path(tree).digest and result["files"] == digest_path(tree).files


def test_remote_program_with_nothing_to_hash_says_so(tree: Path) -> None:
    """No b3sum, no blake3 module (isolated interpreter without site-packages), no execsys: a clear reason."""
    import sys

    result = _run_remote_program(tree, [sys.executable, "-I", "-S", "-"], {"PATH": "/nonexistent"})
    assert "cannot be computed on this host" in result["error"]


def test_non_utf8_path_argument_gives_valid_json(cli, tmp_path: Path) -> None:
    raw = os.path.join(os.fsencode(tmp_path), NON_UTF8)
    with open(raw, "wb") as fh:
        fh.write(b"w")
    result = cli("digest", os.fsdecode(raw), "--json")
    assert result.returncode == 0
    data = result.json()  # valid UTF-8 JSON: the undecodable byte is shown as U+FFFD, as b3sum shows it
    assert data["path"].endswith("caf\ufffd-latin1.bin")
    assert data["digest"] == b3sum("--no-names", raw).decode().strip()


def test_digest_match_engine_reports_each_site_as_an_event(tmp_path: Path, ssh_config_env) -> None:
    """The verdict is the engine's (execsys.digest_match): the command only renders it."""
    from execsys.digest_match import (
        DigestMatchOptions,
        HashProgress,
        LocalHashed,
        SiteDigested,
        run_digest_match,
    )

    path = tmp_path / "model.gguf"
    path.write_bytes(b"weights" * 1000)
    events: list = []
    options = DigestMatchOptions.from_sources(None, None, path=str(path),
                                              hosts=[ssh_config_env.dest, ssh_config_env.unreachable_dest])
    match = run_digest_match(options, events.append)
    local = digest_path(path).digest
    assert events[0] == HashProgress(7000, 7000)
    assert isinstance(events[1], LocalHashed) and events[1].result.digest == local
    sites = {e.host: e for e in events if isinstance(e, SiteDigested)}
    assert sites[ssh_config_env.dest].digest == local and sites[ssh_config_env.unreachable_dest].error
    assert (match.verdict, match.m, match.n, match.exit_code) == ("unverified", 2, 2, 1)
    assert match.to_json()["reference"] == {"digest": local, "source": "local"}
    assert [s["status"] for s in match.to_json()["sites"]] == ["match", "match", "unavailable"]


def test_digest_match_options_refuse_bad_input_before_hashing(tmp_path: Path) -> None:
    from execsys.digest_match import DigestMatchOptions
    from execsys.errors import UsageError

    with pytest.raises(UsageError, match="not a BLAKE3 hex digest"):
        DigestMatchOptions.from_sources(path="m.gguf", expect="abc")
    with pytest.raises(UsageError, match="--host: "):
        DigestMatchOptions.from_sources(path="m.gguf", hosts=["-oProxyCommand=sh"])
    with pytest.raises(UsageError, match="give the artifact PATH"):
        DigestMatchOptions.from_sources()
    options = DigestMatchOptions.from_sources(path="m.gguf", expect="AB" * 32)
    assert (options.expected, options.expected_source, options.compares) == ("ab" * 32, "--expect", True)
