"""Artifact digests (execsys/digest.py) in-process, against the real `b3sum`: the digest, the manifest
lines, the JSON, the progress a face shows and the one-line errors.

In-process, so that scripts/mutation.sh's runs see them (the CLI tests in test_digest.py run `execsys
digest` in a subprocess, which imports the unmutated checkout). Every golden value is b3sum's own output
over the same bytes or files, so nothing here is computed by the code under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from execsys.digest import (
    READ_CHUNK,
    WINDOW,
    artifact_size,
    b3sum_line,
    digest_path,
    hash_file,
    manifest_line,
    walk_tree,
)
from execsys.errors import InputError

pytestmark = pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum is installed by scripts/test.sh")


def b3sum(*args: str | bytes, cwd: Path | None = None, data: bytes | None = None) -> str:
    done = subprocess.run(["b3sum", *args], input=data, capture_output=True, cwd=cwd, timeout=120, check=True)
    return done.stdout.decode("utf-8", "replace")


def b3sum_digest(data: bytes) -> str:
    return b3sum("--no-names", data=data).strip()


def test_a_file_digest_is_b3sums(tmp_path: Path) -> None:
    for size in (0, 1, 1024, 3 << 20, (8 << 20) + 5):  # empty, small, and across the 8 MiB read chunk
        path = tmp_path / f"weights-{size}.bin"
        path.write_bytes(os.urandom(size))
        result = digest_path(path)
        assert result.digest == b3sum("--no-names", str(path)).strip()
        assert result.to_json() == {"path": str(path), "kind": "file", "algorithm": "blake3",
                                    "digest": result.digest, "size_bytes": size, "files": 1}
        assert result.to_json(manifest=True) == result.to_json()  # a file has no manifest


def test_a_file_larger_than_one_window_is_hashed_from_mappings(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    with path.open("wb") as handle:
        handle.write(os.urandom(1 << 20) * (WINDOW >> 20))
        handle.write(b"tail")
    size = WINDOW + 4
    seen: list[tuple[int, int]] = []
    assert hash_file(path, progress=lambda done, total: seen.append((done, total))) == \
        b3sum("--no-names", str(path)).strip()
    assert seen == [(WINDOW, size), (size, size)]  # one step per window, ending at the whole file


def test_a_tree_digest_is_b3sum_of_its_manifest_and_the_manifest_checks(tmp_path: Path) -> None:
    root = tmp_path / "model"
    (root / "sub dir" / "deeper").mkdir(parents=True)
    files = {"config.json": b"{}", "sub dir/tokenizer model": b"tok", "sub dir/deeper/é.bin": b"x" * 5000,
             "a.safetensors": b"weights", "B.txt": b"upper first"}
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    os.mkfifo(root / "a.fifo")  # not artifact bytes: left out, and never opened (it would block)
    result = digest_path(root)
    names = sorted(rel.encode() for rel in files)  # bytewise: "B.txt" before "a.safetensors"
    expected = "".join(b3sum(rel, cwd=root) for rel in (n.decode() for n in names))
    assert result.manifest == expected
    assert result.digest == b3sum_digest(expected.encode())
    assert (result.kind, result.files, result.size_bytes) == ("tree", 5, sum(map(len, files.values())))
    assert [entry.relpath for entry in result.entries] == names
    assert [entry.size for entry in result.entries] == [len(files[n.decode()]) for n in names]
    assert result.to_json(manifest=True)["manifest"] == expected
    assert "manifest" not in result.to_json()
    (tmp_path / "manifest.b3").write_text(result.manifest)
    subprocess.run(["b3sum", "--check", str(tmp_path / "manifest.b3")], cwd=root, check=True, timeout=60,
                   capture_output=True)
    assert artifact_size(root) == result.size_bytes and artifact_size(root / "config.json") == 2
    assert artifact_size(tmp_path / "missing") == 0


def test_the_progress_of_a_tree_reaches_its_total(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"1" * 10)
    (tmp_path / "b").write_bytes(b"2" * 30)
    seen: list[tuple[int, int]] = []
    digest_path(tmp_path, progress=lambda done, total: seen.append((done, total)))
    assert {total for _, total in seen} == {40}
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert seen[-1] == (40, 40) and (10, 40) in seen


@pytest.mark.parametrize(("name", "line"), [
    (b"plain.bin", "D  plain.bin"),
    (b"with space.bin", "D  with space.bin"),
    ("é.bin".encode(), "D  é.bin"),
    (b"back\\slash", "\\D  back\\\\slash"),
    (b"new\nline", "\\D  new\\nline"),
    (b"bad\xffbyte", "\\D  bad\\xffbyte"),
    (b"lone\x80", "\\D  lone\\x80"),  # the lowest byte that cannot start a UTF-8 sequence
    (b"bad\xff\\and\n", "\\D  bad\\xff\\\\and\\n"),
])
def test_a_manifest_line_keeps_every_byte_of_the_name(name: bytes, line: str) -> None:
    assert manifest_line("D", name) == line


def test_manifest_lines_are_b3sums_lines_for_names_b3sum_can_print(tmp_path: Path) -> None:
    for name in ("plain.bin", "with space", "back\\slash", "new\nline", "ünï"):
        (tmp_path / name).write_bytes(name.encode())
        printed = b3sum(name, cwd=tmp_path)
        digest = printed.lstrip("\\")[:64]
        assert manifest_line(digest, name.encode()) + "\n" == printed
        assert b3sum_line(digest, name) + "\n" == printed
    raw = b"lossy\xfe"
    (tmp_path / os.fsdecode(raw)).write_bytes(b"z")
    printed = b3sum(os.fsdecode(raw), cwd=tmp_path)
    assert b3sum_line(printed[:64], raw) + "\n" == printed == printed[:64] + "  lossy\ufffd\n"


def test_trees_whose_names_differ_in_one_byte_never_share_a_digest(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / os.fsdecode(b"w\xfe")).write_bytes(b"same")
    (two / os.fsdecode(b"w\xff")).write_bytes(b"same")
    assert digest_path(one).digest != digest_path(two).digest  # b3sum would print both as "w\ufffd"


def test_walk_follows_symlinks_and_sorts_bytewise(tmp_path: Path) -> None:
    store = tmp_path / "blobs"
    store.mkdir()
    (store / "blob1").write_bytes(b"abc")
    tree = tmp_path / "snapshot"
    (tree / "z").mkdir(parents=True)
    (tree / "z" / "model.bin").symlink_to(store / "blob1")  # a Hugging Face cache snapshot
    (tree / "linked").symlink_to(store, target_is_directory=True)
    (tree / "Z.txt").write_bytes(b"")
    walked = walk_tree(os.fsencode(tree))
    assert [(rel, size) for rel, _, size in walked] == [(b"Z.txt", 0), (b"linked/blob1", 3), (b"z/model.bin", 3)]
    assert walked[2][1] == os.fsencode(tree / "z" / "model.bin")


def test_unusable_paths_are_one_line_each(tmp_path: Path) -> None:
    def problem(path: str | Path) -> str:
        with pytest.raises(InputError) as caught:
            digest_path(path)
        return str(caught.value)

    assert problem("") == "the path is empty: give a file or directory to digest"
    assert problem(tmp_path / "nope") == f"{tmp_path / 'nope'}: no such file or directory"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert problem(fifo) == f"{fifo}: neither a regular file nor a directory"
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / "model.bin").symlink_to(tmp_path / "gone.bin")
    assert problem(dangling) == (f"{dangling / 'model.bin'}: dangling symlink (points at {tmp_path / 'gone.bin'}, "
                                 "which does not exist)")
    looped = tmp_path / "looped"
    (looped / "a").mkdir(parents=True)
    (looped / "a" / "back").symlink_to(looped, target_is_directory=True)
    assert problem(looped) == f"{looped / 'a' / 'back'}: symlink loop (leads back to a directory that contains it)"
    self_link = tmp_path / "self"
    self_link.symlink_to(self_link)
    assert problem(self_link) == f"{self_link}: symlink loop"
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "self").symlink_to(wrapper / "self")
    assert problem(wrapper) == f"{wrapper / 'self'}: symlink loop"
    not_dir = tmp_path / "file-as-dir"
    not_dir.write_bytes(b"x")
    assert problem(not_dir / "child") == f"{not_dir / 'child'}: Not a directory"


def test_the_same_directory_reached_twice_but_not_from_inside_itself_is_no_loop(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "w").write_bytes(b"w")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "first").symlink_to(shared, target_is_directory=True)
    (tree / "second").symlink_to(shared, target_is_directory=True)
    assert [e.relpath for e in digest_path(tree).entries] == [b"first/w", b"second/w"]


# -- files that change, fail or cannot be read while they are hashed ----------------------------------

CHANGED = " changed while it was being hashed (is something still writing it?); hash it again once it is complete"


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` zero bytes that costs no disk: large enough for the mapped path, cheap to make."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def problem_of(call) -> str:
    with pytest.raises(InputError) as caught:
        call()
    return str(caught.value)


def test_a_small_file_touched_while_it_is_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"w" * 1000)
    assert problem_of(lambda: hash_file(path, progress=lambda done, total: os.utime(path, ns=(1, 1)))) == \
        f"{path}{CHANGED}"


def test_a_mapped_file_touched_after_its_last_window_is_refused(tmp_path: Path) -> None:
    path = sparse(tmp_path / "weights.bin", WINDOW + 4)

    def touch_at_the_end(done: int, total: int) -> None:
        if done == total:
            os.utime(path, ns=(1, 1))

    assert problem_of(lambda: hash_file(path, progress=touch_at_the_end)) == f"{path}{CHANGED}"


@pytest.mark.parametrize("keep", [2 * WINDOW, WINDOW + 1], ids=["before-the-last-window", "under-a-mapping"])
def test_a_mapped_file_truncated_while_it_is_hashed_is_refused(tmp_path: Path, keep: int) -> None:
    """Truncated after the first window: the child finds the next window short (exit 3) or touches a
    page past the new end (SIGBUS); either way the file is reported as changed, never hashed as is."""
    path = sparse(tmp_path / "weights.bin", 2 * WINDOW + 4)
    cut: list[int] = []

    def truncate_once(done: int, total: int) -> None:
        if not cut:
            cut.append(done)
            os.truncate(path, keep)

    assert problem_of(lambda: hash_file(path, progress=truncate_once)) == f"{path}{CHANGED}"
    assert cut == [WINDOW]


def test_a_hashing_child_that_fails_is_named_by_its_last_stderr_line(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The mapped path runs in a child interpreter; one whose blake3 cannot load (shadowed here through
    PYTHONPATH) is one line naming the child's last words, or its exit status when it said nothing."""
    path = sparse(tmp_path / "weights.bin", WINDOW)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    (shadow / "blake3.py").write_text(
        "import sys\nsys.stderr.write('first\\nsecond\\n')\nraise SystemExit('blake3 unavailable here')\n")
    assert problem_of(lambda: hash_file(path)) == f"{path}: could not be hashed (blake3 unavailable here)"
    (shadow / "blake3.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert problem_of(lambda: hash_file(path)) == f"{path}: could not be hashed (exit -9)"


def children_of_this_process() -> set[int]:
    """Child pids, running or not yet reaped (a zombie has no cmdline but still has its parent)."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat_line = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat_line.rpartition(")")[2].split()[1]) == me:
                found.add(int(entry))
    return found


def test_a_face_that_stops_hashing_leaves_no_child_behind(tmp_path: Path) -> None:
    """A progress callback that raises (a face giving up) gets its exception, and the hashing child
    is killed and reaped, not left running or as a zombie."""
    path = sparse(tmp_path / "weights.bin", 3 * WINDOW)
    before = children_of_this_process()

    def give_up(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hash_file(path, progress=give_up)
    assert children_of_this_process() - before == set()


def test_a_directory_given_as_a_file_is_one_line(tmp_path: Path) -> None:
    assert problem_of(lambda: hash_file(tmp_path)) == f"{tmp_path}: Is a directory"


def test_what_even_root_may_not_read_is_permission_denied(tmp_path: Path) -> None:
    """/proc/sys/vm/drop_caches is write-only and /proc/1/map_files needs CAP_SYS_ADMIN, for root too."""
    locked_file, locked_dir = "/proc/sys/vm/drop_caches", "/proc/1/map_files"
    try:
        os.close(os.open(locked_file, os.O_RDONLY))
        os.scandir(locked_dir).close()
        pytest.skip("this machine lets us read them")
    except PermissionError:
        pass
    denied = ": permission denied (execsys must read every byte to identify the artifact)"
    assert problem_of(lambda: hash_file(locked_file)) == f"{locked_file}{denied}"
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.bin").write_bytes(b"a")
    (tree / "locked").symlink_to(locked_dir, target_is_directory=True)
    assert problem_of(lambda: digest_path(tree)) == f"{tree / 'locked'}{denied}"


def test_a_small_file_that_grows_while_it_is_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"w" * 1000)

    def append(done: int, total: int) -> None:
        with path.open("ab") as handle:
            handle.write(b"more")

    assert problem_of(lambda: hash_file(path, progress=append)) == f"{path}{CHANGED}"


def test_a_read_file_that_shrinks_while_it_is_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"w" * (READ_CHUNK + 100))  # two reads: the second comes back short
    assert problem_of(lambda: hash_file(path, progress=lambda done, total: os.truncate(path, READ_CHUNK + 1))) == \
        f"{path}{CHANGED}"


def test_a_tree_result_names_the_path_given(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"w")
    assert digest_path(tmp_path).to_json()["path"] == str(tmp_path)
    assert digest_path(os.fsencode(tmp_path)).path == str(tmp_path)


def test_the_progress_of_one_file_reaches_its_size(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"w" * (READ_CHUNK + 10))
    seen: list[tuple[int, int]] = []
    digest_path(path, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(READ_CHUNK, READ_CHUNK + 10), (READ_CHUNK + 10, READ_CHUNK + 10)]


def test_the_progress_of_a_tree_counts_each_files_chunks_from_where_the_last_file_ended(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"1" * 10)
    (tmp_path / "b").write_bytes(b"2" * (READ_CHUNK + 5))
    total = READ_CHUNK + 15
    seen: list[tuple[int, int]] = []
    digest_path(tmp_path, progress=lambda done, total: seen.append((done, total)))
    steps = [step for i, step in enumerate(seen) if i == 0 or step != seen[i - 1]]
    assert steps == [(10, total), (10 + READ_CHUNK, total), (total, total)]
