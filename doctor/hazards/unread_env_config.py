"""unread-env-config: the serving process never read the configuration you edited.

An env file changed after the engine started, a variable exported in one shell
but not the service's, a systemd ``EnvironmentFile`` that was never reloaded,
the model path on the engine's command line that is not the declared artifact:
the declaration says one thing and the process serving requests runs another.
This compares the declared environment (``--env-file``, ``[environment]
variables``, the unit's ``EnvironmentFile``) and artifact with the live
process's real environment and argv, read from ``/proc`` (via psutil). Values
of secret-named variables are never shown, only whether they match.
"""

from __future__ import annotations

import os
import shlex
import time

from execsys.doctor import files, sysinfo
from execsys.doctor.model import Finding, HazardResult, fold

from execsys.errors import InputError
from execsys.redact import REDACTED, is_secret_name, redact_argv

ID = "unread-env-config"
TITLE = "Declared vs live environment"
FINDINGS = ("env-file-missing", "env-file-unreadable", "environ-unreadable", "variable-missing", "variable-differs",
            "env-file-newer-than-process", "artifact-differs")

FIX = ("Restart the serving process from the declared environment (for systemd: `systemctl daemon-reload && "
       "systemctl restart UNIT`), or update the declaration to what is actually served; start engines with the "
       "declared artifact path.")

# Process start times derive from the boot time, which the kernel reports in whole seconds.
START_TIME_SLACK_S = 1.0
_MODEL_FLAGS = ("--model", "-m", "--model-path", "--model-dir", "--model_path", "--model-id", "--served-model-path")
_MODEL_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".onnx", ".ggml")
# [environment] variables mean the serving process's environment; without one found, only execsys's own can be
# read. The same words as pin's (execsys.observe.environment.OWN_ENVIRONMENT): this module ships alone to hosts.
OWN_ENVIRONMENT = "checked in execsys's own environment (no serving process found)"


def parse_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines as systemd and docker read them: comments, ``export``, single/double quotes."""
    # here: tempfile comes with it, and most nodes declare no env file
    from execsys.fsutil import ENV_FILE_LIMIT, read_bounded

    return parse_env_text(read_bounded(path, ENV_FILE_LIMIT, "env file").decode("utf-8"))


def parse_env_text(text: str) -> dict[str, str]:
    """:func:`parse_env_file` on text already read."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key] = value
    return env


def _show(name: str, value: str | None) -> str:
    if value is None:
        return "(unset)"
    return REDACTED if is_secret_name(name) else repr(value)


def _systemd_env_files(pid: int, timeout: float) -> list[str]:
    """EnvironmentFile= of the unit the process belongs to (empty when it is not a systemd service)."""
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            cgroup = fh.read()
    except OSError:
        return []
    unit = next((part for line in cgroup.splitlines() for part in line.split("/")
                 if part.endswith(".service")), None)
    if not unit or not files.which_all("systemctl"):
        return []
    inv = files.bounded_run(["systemctl", "show", "-p", "EnvironmentFiles", "--value", unit], timeout)
    if not inv.ok:
        return []
    paths = []
    for line in inv.output.splitlines():
        word = line.strip().split(" ")[0] if line.strip() else ""
        if word:
            paths.append(word.lstrip("-"))
    return paths


def _artifact_args(argv: list[str]) -> list[str]:
    found: list[str] = []
    for i, arg in enumerate(argv[1:], start=1):
        if "=" in arg and arg.split("=", 1)[0] in _MODEL_FLAGS:
            found.append(arg.split("=", 1)[1])
        elif argv[i - 1] in _MODEL_FLAGS or arg.lower().endswith(_MODEL_SUFFIXES) and not arg.startswith("-"):
            found.append(arg)
    return list(dict.fromkeys(found))


def _same_path(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    except OSError:
        return False


def _pick_process(ctx) -> tuple[sysinfo.ProcessInfo | None, list[str]]:
    opts = ctx.options
    notes: list[str] = []
    if opts.pid:
        info = sysinfo.process(int(opts.pid))
        if info.error == "no such process":
            return None, [f"pid {opts.pid}: no such process"]
        return info, [f"process: pid {opts.pid} (--pid)"]
    if opts.process:
        found = sysinfo.find_processes(opts.process)
        if not found:
            return None, [f"no process named {opts.process!r}"]
        if len(found) > 1:
            notes.append(f"{len(found)} processes match {opts.process!r} (pids "
                         f"{', '.join(str(p.pid) for p in found[:8])}); checking the oldest")
        return found[0], [*notes, f"process: pid {found[0].pid} ({opts.process!r})"]
    port = opts.endpoint_port
    if port:
        listening, _ = sysinfo.listeners([port])
        pids = sorted({pid for lst in listening for pid in lst.pids})
        if pids:
            return sysinfo.process(pids[0]), [f"process: pid {pids[0]}, the listener on port {port}"]
        return None, [f"nothing (visible) listens on the declared endpoint port {port}"]
    return None, []


def check(ctx) -> HazardResult:
    opts = ctx.options
    declared: dict[str, str] = {}
    sources: list[str] = []
    env_files: list[str] = []
    evidence: list[str] = []
    if opts.env_file:
        env_files.append(os.path.expanduser(opts.env_file))
    proc, notes = _pick_process(ctx)
    evidence += notes
    if proc is not None:
        for extra in _systemd_env_files(proc.pid, ctx.timeout):
            if extra not in env_files:
                env_files.append(extra)
                evidence.append(f"systemd EnvironmentFile: {extra}")
    for path in env_files:
        try:
            declared.update(parse_env_file(path))
            sources.append(path)
        except FileNotFoundError:
            return fold(ID, [Finding("fail", f"env file {path} does not exist", f"{ID}/env-file-missing")],
                        ok=f"env file {path} does not exist", evidence=evidence, accept=ctx.accept, listed=True,
                        fix="Point --env-file / [runtime] env_file at the file the service reads.")
        except (OSError, UnicodeDecodeError, InputError) as exc:
            return fold(ID, [Finding("error", f"cannot read env file {path}: {exc}", f"{ID}/env-file-unreadable")],
                        ok="", fix="", evidence=evidence, listed=True)
    if opts.declared_env:
        declared.update(opts.declared_env)
        sources.append("[environment] variables")
    artifact = opts.artifact_path
    if not declared and not artifact:
        return HazardResult(ID, "skip", "no declared environment (--env-file, [environment] variables) or artifact",
                            evidence, "")
    if proc is None:
        if opts.declared_env:
            return _in_own_environment(ctx, opts.declared_env, evidence)
        why = notes[-1] if notes else "no serving process given (--pid, --process, [runtime] process or endpoint)"
        return HazardResult(ID, "skip", why, evidence, "")
    evidence.append(f"pid {proc.pid} argv: {shlex.join(redact_argv(proc.cmdline))[:400]}")
    findings: list[Finding] = []
    if declared:
        try:
            live = sysinfo.process_environ(proc.pid)
        except (PermissionError, ProcessLookupError) as exc:
            return fold(ID, [Finding("warn", f"cannot read the environment of pid {proc.pid}: {exc}",
                                     f"{ID}/environ-unreadable")],
                        ok=f"the environment of pid {proc.pid} was not compared", evidence=evidence,
                        accept=ctx.accept, listed=True,
                        fix="Run the doctor as the service's user (or root) to compare its environment.")
        for name, value in sorted(declared.items()):
            got = live.get(name)
            if got is None:
                findings.append(Finding("fail", f"{name}: declared, missing in pid {proc.pid}", f"{ID}/variable-missing"))
            elif got != value:
                findings.append(Finding("fail", f"{name}: declared {_show(name, value)}, pid {proc.pid} has "
                                        f"{_show(name, got)}", f"{ID}/variable-differs"))
        evidence.append(f"{len(declared)} declared variable(s) from {', '.join(sources)}; "
                        f"{len(declared) - len(findings)} match")
        for path in env_files:
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            if proc.create_time and mtime > proc.create_time + START_TIME_SLACK_S:
                findings.append(Finding("warn", f"{path} changed {_ago(mtime)}, after pid {proc.pid} started "
                                        f"{_ago(proc.create_time)} -- it may serve the old config",
                                        f"{ID}/env-file-newer-than-process"))
    if artifact:
        on_argv = _artifact_args(proc.cmdline)
        if any(_same_path(a, artifact) for a in on_argv) or artifact in proc.cmdline:
            evidence.append(f"artifact {artifact} is on pid {proc.pid}'s command line")
        elif on_argv:
            findings.append(Finding("fail", f"artifact: declared {artifact}, pid {proc.pid} serves "
                                    f"{', '.join(on_argv)}", f"{ID}/artifact-differs"))
        else:
            evidence.append(f"artifact {artifact}: no model path on pid {proc.pid}'s command line to compare")
    def summary(top: list[Finding]) -> str:
        if top[0].level == "warn":
            return top[0].text
        return "; ".join(f.text for f in top[:3]) + (" ..." if len(top) > 3 else "")

    return fold(ID, findings, ok=f"pid {proc.pid} runs with the declared environment", fix=FIX, evidence=evidence,
                accept=ctx.accept, summary=summary)


def _in_own_environment(ctx, variables: dict[str, str], evidence: list[str]) -> HazardResult:
    """``[environment] variables`` with no serving process to read: checked where execsys runs (a
    harness reaching a remote endpoint or a provider's API runs there too), and said so in every line."""
    findings: list[Finding] = []
    for name, value in sorted(variables.items()):
        got = os.environ.get(name)
        if got is None:
            findings.append(Finding("warn", f"{name}: declared, missing ({OWN_ENVIRONMENT})", f"{ID}/variable-missing"))
        elif got != value:
            findings.append(Finding("warn", f"{name}: declared {_show(name, value)}, has {_show(name, got)} "
                                    f"({OWN_ENVIRONMENT})", f"{ID}/variable-differs"))
    evidence.append(f"{len(variables)} declared variable(s) from [environment] variables; "
                    f"{len(variables) - len(findings)} match ({OWN_ENVIRONMENT})")
    return fold(ID, findings, ok=f"the declared [environment] variables hold ({OWN_ENVIRONMENT})", fix=FIX,
                evidence=evidence, accept=ctx.accept,
                summary=lambda top: "; ".join(f.text for f in top[:3]) + (" ..." if len(top) > 3 else ""))


def _ago(ts: float) -> str:
    delta = time.time() - ts
    if delta < 120:
        return f"{delta:.0f}s ago"
    if delta < 7200:
        return f"{delta / 60:.0f}min ago"
    return f"{delta / 3600:.1f}h ago"
