"""The ``restart`` axis: pass A, restart the server, wait until it is ready, pass B.

A restart reloads weights, re-plans memory and may pick different kernels; cached
prefixes are gone. Before and after the restart the runtime is observed again (model
list, server version, and the foundation's runtime observation where available): when the
engine itself changed across the restart (an upgrade slipped in) the probe says so
instead of calling the disagreement a restart effect. A restart command that fails or a
server that never becomes ready ends the probe with the completed pass kept (resumable). The
serving process (pid and start time) is looked at before and after the command: a command that
returns 0 and restarts nothing is "no restart observed" (exit 1, licenses nothing), and one whose
process cannot be seen from here (another host) leaves the restart unverified.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx

from execsys.errors import UsageError
from execsys.redact import redact_text

from . import Axis, PassSchedule, letters

if TYPE_CHECKING:
    from execsys.probes.record import ProbeRecord
    from execsys.probes.runner import ProbeOptions, RunContext


class RestartAxis(Axis):
    name = "restart"
    summary = "pass A, the restart command (--restart CMD or runtime.restart), readiness, pass B"
    across = "across restarts"
    advice = "scope comparisons to one session"
    stable_advice = "results carry across restarts of this engine"

    def validate(self, options: ProbeOptions) -> None:
        if not options.restart:
            raise UsageError("the restart axis needs a restart command: --restart CMD or runtime.restart in execsys.toml")
        if len(options.endpoints) > 1:
            raise UsageError("the restart axis takes one --endpoint")

    def schedule(self, options: ProbeOptions) -> list[PassSchedule]:
        # Same order on both sides: the restart is the only thing that moves.
        return [PassSchedule(i, letters(i), concurrency=options.concurrency) for i in range(options.repeats)]

    def before_pass(self, ctx: RunContext, schedule: PassSchedule) -> None:
        if schedule.index == 0:
            if ctx.step("observe:0") is None:
                ctx.record_step("observe:0", {"runtime": ctx.observe(schedule.target)})
            return
        key = f"restart:{schedule.index}"
        if ctx.step(key) is not None or ctx.pass_has_results(schedule.index):
            return  # restarted already before this pass (a resumed probe does not restart twice)
        before = ctx.observe(schedule.target)
        process_before, unobservable = ctx.serving_process(schedule.target)
        # the command may carry a token (--token, an Authorization header): redacted like every line
        ctx.note_event(f"restarting the server before pass {schedule.label}: {redact_text(ctx.options.restart or '')}")
        started = time.monotonic()
        result = run_restart(ctx.options.restart or "", ctx.options.ready_timeout)
        if not result.ok:
            ctx.abort(f"restart command failed ({_describe(result)})")
        restart_s = time.monotonic() - started
        ready, detail = wait_ready(ctx, schedule.target, ctx.options.ready, ctx.options.ready_timeout)
        if ctx.cancel.is_set():
            return  # interrupted while waiting: nothing recorded, so a resumed probe restarts again
        if not ready:
            ctx.abort(f"the server did not become ready within {ctx.options.ready_timeout:g}s after the restart ({detail})")
        after = ctx.observe(schedule.target)
        process_after, unobservable_after = ctx.serving_process(schedule.target)
        changed = runtime_changes(before, after)
        if changed:
            ctx.engine_changed("the engine changed across the restart (" + "; ".join(changed) + ")")
        step = {
            "command": ctx.options.restart, "before": before, "after": after, "changed": changed,
            "restart_s": round(restart_s, 3), "ready_s": round(time.monotonic() - started, 3),
            "process_before": process_before, "process_after": process_after,
            "process_unobservable": unobservable or unobservable_after,
        }
        judged = restart_evidence(step, schedule.label)
        if judged["verdict"] == "not-observed":
            ctx.note(judged["sentence"])
        ctx.record_step(key, step)

    def evidence(self, ctx: RunContext, schedules: list[PassSchedule],
                 baseline: ProbeRecord | None) -> dict[str, Any] | None:
        """Observed when every restart step saw the serving process (pid + start time) change."""
        judged = []
        for schedule in schedules[1:]:
            step = ctx.step(f"restart:{schedule.index}")
            if step is not None:
                judged.append(restart_evidence(step, schedule.label))
        if not judged:
            return {"event": "restart", "verdict": "unverified", "sentence": "restart unverified: no restart was "
                    "recorded in this run", "restarts": []}
        for verdict in ("not-observed", "unverified"):
            worst = next((j for j in judged if j["verdict"] == verdict), None)
            if worst is not None:
                return {"event": "restart", "verdict": verdict, "sentence": worst["sentence"], "restarts": judged}
        return {"event": "restart", "verdict": "observed", "sentence": judged[-1]["sentence"], "restarts": judged}


    def served_changed(self, ctx: RunContext, message: str) -> None:
        # a served model or fingerprint that moved across the restart is an engine change, not a
        # restart effect: say so once, in the sentence
        if ctx.engine_change is None:
            ctx.engine_changed(message)
        else:
            ctx.note_once(message)


def restart_evidence(step: dict[str, Any], label: str) -> dict[str, Any]:
    """One restart step judged by the serving process it saw before and after the restart command."""
    from execsys.probes.system import process_words

    before, after = step.get("process_before"), step.get("process_after")
    base = {"pass": label, "before": before, "after": after}
    if not before or not after:
        why = step.get("process_unobservable") or "this restart was recorded before execsys looked at the process"
        return {**base, "verdict": "unverified",
                "sentence": f"restart unverified: the serving process could not be observed ({why})"}
    if (before.get("pid"), before.get("started_at")) == (after.get("pid"), after.get("started_at")):
        return {**base, "verdict": "not-observed",
                "sentence": f"no restart observed: the serving process before pass {label} ({process_words(after)}) "
                            "is the one that served the pass before: the restart command restarted nothing"}
    return {**base, "verdict": "observed",
            "sentence": f"restart observed before pass {label}: {process_words(before)} -> {process_words(after)}"}


def run_restart(command: str, timeout: float):
    from execsys.proc import run

    return run(["sh", "-c", command], timeout=timeout)


def _describe(result: Any) -> str:
    if result.error:
        return f"could not run: {result.error}"
    if result.timed_out:
        return f"no exit within {result.duration_s:.0f}s"
    tail = (result.text("stderr").strip() or result.text().strip()).splitlines()
    return f"exit {result.returncode}" + (f": {tail[-1][:200]}" if tail else "")


def wait_ready(ctx: RunContext, target: int, spec: str | None, timeout: float) -> tuple[bool, str]:
    """Poll ``spec`` (a URL answering 2xx, or a command exiting 0) or, by default, the endpoint's
    ``/models``, until ready or ``timeout`` seconds have passed."""
    from execsys.proc import run

    deadline = time.monotonic() + timeout
    url = spec if spec and spec.startswith(("http://", "https://")) else None
    if spec is None:
        if not ctx.target_url(target):
            return True, "a command target is ready when the restart command has exited 0"
        url = ctx.target_url(target) + "/models"
    last = "not polled yet"
    while time.monotonic() < deadline:
        if ctx.cancel.is_set():
            return False, "cancelled"
        if url:
            try:
                status = httpx.get(url, timeout=min(5.0, max(0.5, deadline - time.monotonic()))).status_code
                if 200 <= status < 300:
                    return True, f"{url} answered {status}"
                last = f"{url} answered {status}"
            except httpx.HTTPError as exc:
                last = f"{url}: {type(exc).__name__}"
        else:
            result = run(["sh", "-c", spec or ""], timeout=max(1.0, min(30.0, deadline - time.monotonic())))
            if result.ok:
                return True, "ready command exited 0"
            last = f"ready command: {_describe(result)}"
        time.sleep(0.2)
    return False, last


def runtime_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What moved between two runtime observations, in words; empty when nothing did."""
    changes = []
    pairs = [(before.get("models"), after.get("models"), "model list"),
             (before.get("server"), after.get("server"), "server version")]
    rb, ra = before.get("runtime") or {}, after.get("runtime") or {}
    for key in sorted(set(rb) | set(ra)):
        pairs.append((rb.get(key), ra.get(key), key.replace("_", " ")))
    for old, new, label in pairs:
        if old is None or new is None or old == new:
            continue
        if isinstance(old, list) and isinstance(new, list) and label != "model list":
            gone = [str(x) for x in old if x not in new]
            came = [str(x) for x in new if x not in old]
            changes.append(f"{label}: " + " ".join([f"-{x}" for x in gone] + [f"+{x}" for x in came]) if gone or came
                           else f"{label}: reordered")
        else:
            changes.append(f"{label}: {_brief(old)} -> {_brief(new)}")
    return changes


def _brief(value: Any) -> str:
    if isinstance(value, dict) and "version" in value:
        return str(value.get("version"))
    if isinstance(value, list):
        return " ".join(map(str, value))
    text = str(value)
    return text if len(text) <= 160 else text[:157] + "..."
