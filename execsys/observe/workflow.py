"""Observe the workflow component: the agent framework and the configuration that drives it.

An agent's loop is code too: a LangGraph, smolagents or DSPy release changes how turns are
planned, retried and truncated, and a workflow config file edited between two runs is a
different workflow. ``[workflow] packages`` records the installed version of each named
distribution (read from the harness's interpreter's import directories, never by importing),
and ``[workflow] config`` the BLAKE3 of each named file, resolved beside the declaration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _config_digest(path_text: str, base_dir: Path | None) -> dict[str, Any]:
    from execsys.digest import digest_path
    from execsys.errors import InputError
    from execsys.observe.artifact import resolve

    path = resolve(path_text, base_dir or Path.cwd())
    if not path.exists():
        return {"path": str(path), "digest": None, "note": "not found on this machine"}
    try:
        return {"path": str(path), "digest": digest_path(path).digest}
    except InputError as exc:
        return {"path": str(path), "digest": None, "note": str(exc)}


def observe_workflow(declared: dict[str, Any], *, base_dir: Path | None,
                     harness_interpreter: str | None = None) -> dict[str, Any]:
    """``packages`` (installed versions) and ``config`` (file digests) as declared; nothing else."""
    from execsys.observe.grader import default_interpreter, observe_packages

    observed: dict[str, Any] = {}
    if declared.get("packages"):
        observed["packages"] = observe_packages(list(declared["packages"]),
                                                harness_interpreter or default_interpreter())
    if declared.get("config"):
        observed["config"] = [_config_digest(str(item), base_dir) for item in declared["config"]]
    return observed
