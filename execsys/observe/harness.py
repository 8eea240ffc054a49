"""Observe the harness component: which code fed the prompts in, exactly.

A commit alone is not enough -- evaluations are often run from a working tree with
edits in it -- so the record carries the dirty flag and a BLAKE3 of the diff
against HEAD (tracked files, binary-safe), plus branch and the remote URL with any
credentials removed (a token in a clone URL must never reach a record, and removing
it keeps the identity stable when the token rotates).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from execsys.redact import redact_text


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
    """Git facts of the declared repo (default: the working directory's repository).

    ``exclude`` names files left out of the diff (the lock file being written cannot
    be part of the identity it records).
    """
    import blake3

    start = Path(os.path.expanduser(declared["repo"])) if declared.get("repo") else (base_dir or Path.cwd())
    if not start.is_absolute() and base_dir is not None:
        start = base_dir / start
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
        diff = repo.git.diff("HEAD", "--binary", "--no-ext-diff", "--no-color", "--no-textconv", *pathspec,
                             stdout_as_string=False, strip_newline_in_stdout=False)
    observed["dirty"] = bool(diff)
    observed["diff_blake3"] = blake3.blake3(diff).hexdigest() if diff else None
    return observed
