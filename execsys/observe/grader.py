"""Observe the grader component: the script that scores, the packages it scores with, the judge model.

A grader is an execution system of its own. An LLM judge behind an unpinned alias changes its
verdicts when the provider moves the snapshot; an edited ``grade.py`` or a new ``math-verify``
release re-scores the same outputs differently. So ``pin`` records, for ``[grader]``:

- ``command``: what it runs (its program and interpreter, resolved exactly as the harness's
  commands are, :func:`execsys.observe.harness.observe_command`) plus the BLAKE3 of every file
  the command names (``python grade.py`` -> ``grade.py`` resolved beside the declaration);
- ``packages``: the installed version of each named distribution, read from the grader's
  interpreter's import directories (``*.dist-info/METADATA``, never by importing);
- ``[grader.judge]``: the endpoint observed as ``[runtime]`` is (model list, ``/version``,
  ``/openapi.json``, the serving process), plus one cheap completion (``max_tokens`` 1) whose
  response names the model that actually answered and its ``system_fingerprint`` -- an alias
  resolving to a new snapshot moves the identity -- and the judge's prompt template digested.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

from execsys.errors import InputError
from execsys.redact import REDACTED, redact_text, redact_url, register_secret

JUDGE_TIMEOUT_S = 30.0
JUDGE_KEYS = ("endpoint", "model", "api_key_env", "temperature", "seed", "max_tokens", "prompt")


def normalise_name(name: str) -> str:
    """PEP 503 spelling, as :func:`execsys.observe.harness.installed_distributions` records names."""
    return re.sub(r"[-_.]+", "-", name).lower()


def default_interpreter() -> str | None:
    """``python3`` as the doctor resolves it through PATH (the interpreter a bare command would run)."""
    from execsys.doctor import files

    found = files.which_all("python3") or files.which_all("python")
    return os.path.abspath(found[0]) if found else None


def observe_packages(names: list[Any], interpreter: str | None) -> dict[str, Any]:
    """``{"interpreter": ..., "versions": {name: version | None}}`` for declared distribution names,
    read from ``interpreter``'s import directories without importing anything."""
    from execsys.observe.harness import interpreter_facts

    wanted = [str(name) for name in names]
    if interpreter is None:
        return {"interpreter": None, "versions": {n: None for n in wanted},
                "note": "no Python interpreter found to read installed packages from"}
    _info, dists, note = interpreter_facts(interpreter)
    installed = {}
    for dist in dists:
        key, _, version = dist.partition("==")
        installed[key] = version
    observed: dict[str, Any] = {"interpreter": os.path.realpath(interpreter),
                                "versions": {n: installed.get(normalise_name(n)) for n in wanted}}
    if note:
        observed["note"] = note
    return observed


def named_files(command: str, base_dir: Path | None) -> list[dict[str, Any]]:
    """Every existing file a command's arguments name, resolved beside the declaration, with its BLAKE3."""
    from execsys.digest import digest_path

    try:
        words = shlex.split(command.replace(REDACTED, "redacted"))
    except ValueError:
        return []
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    for word in words[1:]:
        if word.startswith("-") and "=" in word:
            word = word.split("=", 1)[1]  # --rubric=rubric.md
        if not word or word.startswith("-"):
            continue
        path = Path(os.path.expanduser(word))
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file() or str(path) in seen:
            continue
        seen.add(str(path))
        try:
            digest = digest_path(path).digest
        except InputError as exc:
            found.append({"path": str(path), "digest": None, "note": str(exc)})
            continue
        found.append({"path": str(path), "digest": digest})
    return found


def _file_digest(path_text: str, base_dir: Path | None) -> dict[str, Any]:
    from execsys.digest import digest_path
    from execsys.observe.artifact import resolve

    path = resolve(path_text, base_dir or Path.cwd())
    if not path.exists():
        return {"path": str(path), "digest": None, "note": "not found on this machine"}
    return {"path": str(path), "digest": digest_path(path).digest}


def observe_command(command: str, base_dir: Path | None) -> dict[str, Any]:
    """The grader command as the harness's are observed, plus the digests of the files it names."""
    from execsys.observe.harness import observe_command as observe_program

    record = observe_program(command, base_dir=base_dir)
    record["files"] = named_files(command, base_dir)
    return record


def command_interpreter(observed_command: dict[str, Any]) -> str | None:
    from execsys.observe.harness import interpreter_to_run

    return interpreter_to_run(observed_command.get("interpreter") or {})


def judge_completion(endpoint: str, model: str | None, *, api_key: str | None, seed: Any = None,
                     timeout: float = JUDGE_TIMEOUT_S) -> dict[str, Any]:
    """One chat completion of one token: the ``model`` that answered and its ``system_fingerprint``.

    The model list says what an endpoint offers; only a response says which snapshot an alias
    resolved to now. ``model`` None asks for the first model listed."""
    import httpx

    from execsys.observe.http import observation_client
    from execsys.observe.vocabulary import api_and_root

    api, _root = api_and_root(endpoint)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0}
    if seed is not None:
        body["seed"] = seed
    try:
        with observation_client(api, timeout=timeout, headers=headers) as client:
            if model is None:
                listed = client.get(f"{api}/models").json().get("data") or []
                model = str(listed[0].get("id")) if listed and isinstance(listed[0], dict) else None
            body["model"] = model
            response = client.post(f"{api}/chat/completions", json=body)
            if response.status_code != 200:
                return {"requested_model": model, "status": response.status_code, "model": None,
                        "system_fingerprint": None}
            data = response.json()
    except (httpx.HTTPError, ValueError, AttributeError, TypeError) as exc:
        return {"requested_model": model, "error": redact_text(f"{type(exc).__name__}: {exc}")[:200]}
    if not isinstance(data, dict):
        return {"requested_model": model, "error": "the completion was not a JSON object"}
    fingerprint = data.get("system_fingerprint")
    return {"requested_model": model, "status": 200,
            "model": str(data["model"]) if data.get("model") is not None else None,
            "system_fingerprint": str(fingerprint) if fingerprint else None}


def check_judge(judge: Any) -> dict[str, Any]:
    """``[grader.judge]`` with its keys' types checked (the declaration checks the table, not inside it)."""
    if not isinstance(judge, dict):
        raise InputError("'grader.judge' must be a table ([grader.judge])")
    types: dict[str, tuple[type, ...]] = {"endpoint": (str,), "model": (str,), "api_key_env": (str,),
                                          "temperature": (int, float), "seed": (int,), "max_tokens": (int,),
                                          "prompt": (str,)}
    for key, value in judge.items():
        if key in types and (isinstance(value, bool) or not isinstance(value, types[key])):
            raise InputError(f"'grader.judge.{key}' must be {'a string' if types[key] == (str,) else 'a number'}, "
                             f"not {type(value).__name__}")
    return judge


def observe_judge(judge: dict[str, Any], base_dir: Path | None, *, require_endpoint: bool) -> dict[str, Any]:
    """The judge endpoint as ``[runtime]`` is observed, the model that answered, the prompt's digest."""
    from execsys.observe.runtime import observe_runtime

    check_judge(judge)
    observed: dict[str, Any] = {}
    endpoint = judge.get("endpoint")
    if endpoint:
        api_key = os.environ.get(judge["api_key_env"]) if judge.get("api_key_env") else None
        register_secret(api_key)
        try:
            served = observe_runtime({"endpoint": endpoint, "api_key_env": judge.get("api_key_env")},
                                     require_endpoint=True)
        except InputError as exc:
            if require_endpoint:
                raise InputError(f"[grader.judge] {exc}") from None
            observed["endpoint"] = {"url": redact_url(endpoint), "error": str(exc)}
        else:
            served.pop("numerics_env", None)  # the pinning shell's, not the judge's (as for the runtime)
            served.pop("engine", None)  # a judge is known by what it serves, not by a package installed here
            observed.update(served)
            observed["completion"] = judge_completion(endpoint, judge.get("model"), api_key=api_key,
                                                      seed=judge.get("seed"))
    if judge.get("prompt"):
        observed["prompt"] = _file_digest(str(judge["prompt"]), base_dir)
    return observed


def observe_grader(declared: dict[str, Any], *, base_dir: Path | None, harness_interpreter: str | None = None,
                   require_endpoint: bool = True) -> dict[str, Any]:
    """What ``[grader]`` names, observed. Nothing declared, nothing observed (the id stays as it was)."""
    observed: dict[str, Any] = {}
    interpreter: str | None = None
    if declared.get("command"):
        observed["command"] = observe_command(str(declared["command"]), base_dir)
        interpreter = command_interpreter(observed["command"])
    if declared.get("packages"):
        observed["packages"] = observe_packages(list(declared["packages"]),
                                                interpreter or harness_interpreter or default_interpreter())
    if declared.get("judge"):
        observed["judge"] = observe_judge(declared["judge"], base_dir, require_endpoint=require_endpoint)
    return observed


def judge_error(observed: dict[str, Any]) -> str | None:
    """Why the judge could not be observed (verify: the grader is then unverifiable, not changed)."""
    endpoint = (observed.get("judge") or {}).get("endpoint") or {}
    error = endpoint.get("error") if isinstance(endpoint, dict) else None
    return f"judge: {error}" if error else None


def _short(value: Any) -> str:
    text = str(value)
    return text[:16] + "…" if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


def change_summary(changes: list[dict[str, Any]]) -> str | None:
    """``judge model gpt-x-2026-05 → gpt-x-2026-08; grade.py edited`` from verify's field changes."""
    parts: list[str] = []
    for change in changes:
        field = str(change.get("field") or "")
        old, new = change.get("old"), change.get("new")
        phrase = None
        if field == "observed.judge.completion.model":
            phrase = f"judge model {old} → {new}"
        elif field == "observed.judge.completion.system_fingerprint":
            phrase = f"judge system_fingerprint {old} → {new}"
        elif field == "observed.judge.endpoint.models":
            phrase = "the judge endpoint lists other models"
        elif field.startswith("observed.judge.prompt"):
            phrase = "judge prompt template edited"
        elif field.startswith("observed.command.files") and field.endswith(".digest"):
            phrase = "grader script edited"
        elif field.startswith("observed.packages.versions."):
            phrase = f"{field.rsplit('.', 1)[1]} {old} → {new}"
        elif field.startswith("observed.command.interpreter"):
            phrase = "the grader's interpreter or its packages changed"
        elif field.startswith("declared."):
            phrase = f"declared {field.removeprefix('declared.')} {_short(old)} → {_short(new)}"
        if phrase and phrase not in parts:
            parts.append(phrase)
    return "; ".join(parts) or None
