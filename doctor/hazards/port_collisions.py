"""port-collisions: more than one process answers on the port the harness calls.

Two engines bound with ``SO_REUSEPORT`` split requests between them; an old
server on ``0.0.0.0`` and a new one on ``[::]`` both listen, and ``localhost``
reaches whichever the resolver tries first; a leftover process holds the port
and the engine you restarted never bound it. Every result then mixes two
systems. For each declared port this lists every listening TCP socket across
addresses and families with the owning pids and (redacted) command lines. When
sockets of other users cannot be attributed (not root), it says so rather than
claiming the port is clean. A process named with ``--process``/``--pid`` that is not running at all
is a finding too: the ports are then answered by nothing, or by something else, never by what was declared.
"""

from __future__ import annotations

import shlex

from execsys.doctor import sysinfo
from execsys.doctor.model import Finding, HazardResult, fold, headline

from execsys.redact import redact_argv

ID = "port-collisions"
TITLE = "Who answers on the declared ports"
FINDINGS = ("several-listeners", "unseen-second-listener", "listener-not-visible", "not-the-declared-engine",
            "declared-process-not-running")

FIX = ("Stop the stray listener (kill the extra pid), bind the engine to one explicit address and family "
       "(e.g. --host 127.0.0.1), do not start engines with SO_REUSEPORT, and point the harness at "
       "127.0.0.1 rather than localhost.")


def _describe(pid: int) -> str:
    info = sysinfo.process(pid)
    if info.error and not info.cmdline:
        return f"pid {pid} ({info.error})"
    return f"pid {pid} {info.username or ''}: {shlex.join(redact_argv(info.cmdline))[:300]}".replace("  ", " ")


def _declared_matcher(ctx):
    """A predicate for "this pid is the declared engine", and what was declared (None when nothing was)."""
    opts = ctx.options
    if opts.pid:
        wanted = int(opts.pid)

        def by_pid(pid: int) -> bool:
            if pid == wanted:
                return True
            try:
                import psutil

                return wanted in {p.pid for p in psutil.Process(pid).parents()}
            except Exception:  # noqa: BLE001 - psutil missing or process gone
                return False

        return by_pid, f"pid {wanted}"
    tokens: tuple[str, ...] = ()
    what = None
    if opts.process:
        tokens, what = (opts.process,), f"process {opts.process!r}"
    elif opts.engine:
        tokens, what = sysinfo.engine_tokens(opts.engine), f"engine {opts.engine!r}"
    if not tokens:
        return None, None

    def by_name(pid: int) -> bool:
        return sysinfo.process(pid).matches(tokens)

    return by_name, what


def _declared_process_missing(opts) -> str | None:
    """A sentence when the process the operator named (not one derived from the engine's name) runs nowhere."""
    if opts.pid:
        if sysinfo.process(int(opts.pid)).error == "no such process":
            return f"the declared pid {int(opts.pid)} is not running"
    elif opts.process and not sysinfo.find_processes(opts.process):
        return f"the declared process {opts.process!r} is not running"
    return None


def check(ctx) -> HazardResult:
    ports = ctx.ports()
    if not ports:
        return HazardResult(ID, "skip", "no declared port and no engine process listening (--port, [runtime] endpoint)",
                            [], "")
    found, hidden = ctx.listeners(ports)
    is_declared, declared = _declared_matcher(ctx)
    findings: list[Finding] = []
    evidence: list[str] = []
    for port in ports:
        sockets = [s for s in found if s.port == port]
        if not sockets:
            evidence.append(f"port {port}: nothing listening")
            continue
        pids = sorted({pid for s in sockets for pid in s.pids})
        for s in sockets:
            owners = ", ".join(str(p) for p in s.pids) or "owner not visible"
            evidence.append(f"port {port}: {s.family} {s.where()} -> {owners}")
        for pid in pids:
            evidence.append(f"port {port}: {_describe(pid)}")
        unattributed = [s for s in sockets if not s.pids]
        if len(pids) > 1:
            families = sorted({s.family for s in sockets})
            how = "IPv4 and IPv6 held by different processes" if len(families) > 1 and all(
                len({p for s in sockets if s.family == f for p in s.pids}) == 1 for f in families) else "shared"
            findings.append(Finding("fail", f"port {port}: {len(pids)} processes listen ({how}; pids "
                                    f"{', '.join(map(str, pids))})", f"{ID}/several-listeners"))
        elif unattributed and pids:
            findings.append(Finding("fail", f"port {port}: pid {pids[0]} and {len(unattributed)} socket(s) of an "
                                    "unseen process listen", f"{ID}/unseen-second-listener"))
        elif unattributed:
            findings.append(Finding("warn", f"port {port}: {len(unattributed)} listening socket(s) whose process is "
                                    "not visible (run as root to see it)", f"{ID}/listener-not-visible"))
        if is_declared is not None and pids:
            strangers = [p for p in pids if not is_declared(p)]
            if strangers:
                findings.append(Finding("fail", f"port {port}: pid {', '.join(map(str, strangers))} is not the "
                                        f"declared {declared}", f"{ID}/not-the-declared-engine"))
    if hidden:
        evidence.append(f"{hidden} process(es) of other users could not be inspected (sockets are still listed)")
    missing = _declared_process_missing(ctx.options)
    if missing:
        findings.append(Finding("fail", missing, f"{ID}/declared-process-not-running"))

    def summary(top: list[Finding]) -> str:
        return headline([f.text for f in top]) if top[0].level == "fail" else top[0].text

    return fold(ID, findings, ok=f"{len(ports)} port{'s' if len(ports) != 1 else ''}: at most one listener each",
                fix=FIX, evidence=evidence, accept=ctx.accept, summary=summary)
