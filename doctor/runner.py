"""Run the hazard checks: concurrently, each one fenced, locally and on every ``--host``.

Each hazard runs in its own daemon thread. An exception inside a check becomes
status ``error`` with the reason; a check that outlives its deadline is reported
as ``error`` ("did not finish") and abandoned -- the report never waits on it,
and a daemon thread cannot keep the process alive. Remote hosts run at the same
time as the local checks (bounded), each with its own timeout; see ``remote``.

Public API (the CLI and the TUI both use it)::

    options = DoctorOptions.from_sources(declaration, lock, ports=[8000])
    report = run_doctor(options, on_event=print, cancel=threading.Event())
    result = run_hazard("port-collisions", options)

Events, in order per host: ``DoctorStarted`` once, ``HazardChecked(host, result)`` as each check
finishes (every selected hazard of every host, including the ``error`` rows of a host that
could not be inspected), then ``HostFinished(host, report)`` or ``HostUnreachable(host, reason,
report)``. Every event reaches the caller's callback on whichever thread produced it.

This module is stdlib-only at import time because it also runs on remote hosts.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from execsys.doctor import registry, sysinfo
from execsys.doctor.context import Context, DoctorOptions
from execsys.doctor.model import DoctorReport, Finding, HazardResult, HostReport

from execsys.operation import Event, OnEvent, emit, new_cancel

__all__ = ["DoctorOptions", "DoctorStarted", "HazardChecked", "HostFinished", "HostUnreachable", "run_doctor",
           "run_hazard", "run_local", "selected_ids", "hazard_deadline"]

LOCAL = "local"


@dataclass(frozen=True)
class DoctorStarted(Event):
    """The run began: these hosts (``local`` first when it is checked) and these hazards, in order."""

    hosts: tuple[str, ...]
    hazards: tuple[str, ...]


@dataclass(frozen=True)
class HazardChecked(Event):
    """One hazard finished on one host (``local`` or the ``--host`` destination as given)."""

    host: str
    result: HazardResult


@dataclass(frozen=True)
class HostFinished(Event):
    """Every selected hazard of one host has a result."""

    host: str
    report: HostReport


@dataclass(frozen=True)
class HostUnreachable(Event):
    """A host could not be (fully) inspected; ``report`` holds an ``error`` row for each missing check."""

    host: str
    reason: str
    report: HostReport


def _host_done(on_event: OnEvent | None, report: HostReport) -> None:
    if report.error:
        emit(on_event, HostUnreachable(report.name, report.error, report))
    else:
        emit(on_event, HostFinished(report.name, report))


def error_result(hazard_id: str, kind: str, summary: str, evidence: list[str], fix: str) -> HazardResult:
    """A row for a check that could not look (crashed, never finished, host not inspected): status
    ``error``, with the finding that says why. Such findings cannot be accepted."""
    return HazardResult(hazard_id, "error", summary, evidence, fix,
                        findings=[Finding("error", summary, f"{hazard_id}/{kind}")])


def selected_ids(options: DoctorOptions) -> list[str]:
    """The hazards to run, in registry order; raises KeyError naming an unknown ``--only`` id."""
    for hazard_id in options.only:
        registry.get(hazard_id)
    return [h.id for h in registry.HAZARDS if not options.only or h.id in options.only]


def hazard_deadline(options: DoctorOptions) -> float:
    """How long one check may take: its own bounded invocations run in parallel, plus slack."""
    return options.timeout * 3 + 5.0


def _run_one(hazard_id: str, ctx: Context) -> HazardResult:
    start = time.monotonic()
    try:
        result = registry.load(hazard_id).check(ctx)
        if not isinstance(result, HazardResult):
            raise TypeError(f"check returned {type(result).__name__}, not HazardResult")
    except Exception as exc:  # noqa: BLE001 - the doctor never crashes; the failure is the finding
        result = error_result(hazard_id, "check-failed", f"the check itself failed: {type(exc).__name__}: {exc}",
                              [f"{type(exc).__name__}: {exc}"],
                              "This is a bug in the check or an unusual host; run with --debug and report it.")
    result.duration_s = time.monotonic() - start
    return result


def run_hazard(hazard_id: str, options: DoctorOptions, ctx: Context | None = None) -> HazardResult:
    """Run one hazard locally (the TUI's "re-run this row"); never raises for a failing check."""
    registry.get(hazard_id)
    return _run_one(hazard_id, ctx or Context(options))


def run_local(options: DoctorOptions, on_event: OnEvent | None = None, cancel: threading.Event | None = None,
              *, host_name: str = LOCAL) -> HostReport:
    """All selected hazards on this machine, concurrently, each within ``hazard_deadline``.

    Emits ``HazardChecked`` per hazard as it finishes (not ``HostFinished``: :func:`run_doctor` does)."""
    start = time.monotonic()
    cancel = new_cancel(cancel)
    ctx = Context(options, cancel)
    ids = selected_ids(options)
    done: queue.Queue[HazardResult] = queue.Queue()
    for hazard_id in ids:
        threading.Thread(target=lambda h=hazard_id: done.put(_run_one(h, ctx)), name=f"doctor-{hazard_id}",
                         daemon=True).start()
    facts_box: dict[str, object] = {}
    facts_thread = threading.Thread(target=lambda: facts_box.update(sysinfo.host_facts()), daemon=True)
    facts_thread.start()
    deadline = start + hazard_deadline(options)
    results: dict[str, HazardResult] = {}
    while len(results) < len(ids):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or cancel.is_set():
            break
        try:
            result = done.get(timeout=min(remaining, 0.1))
        except queue.Empty:
            continue
        results[result.id] = result
        emit(on_event, HazardChecked(host_name, result))
    for hazard_id in ids:
        if hazard_id not in results:
            why = "cancelled" if cancel.is_set() else f"did not finish within {hazard_deadline(options):.0f}s"
            result = error_result(hazard_id, "check-did-not-finish", f"the check {why}; abandoned",
                                  [f"{hazard_id}: {why}"],
                                  "Something it runs hangs beyond its own timeout; run with --only "
                                  f"{hazard_id} -v to see which.")
            results[hazard_id] = result
            emit(on_event, HazardChecked(host_name, result))
    facts_thread.join(timeout=2)
    return HostReport(host_name, facts_box, [results[h] for h in ids], time.monotonic() - start,
                      strict=options.strict)


def run_doctor(options: DoctorOptions, on_event: OnEvent | None = None, cancel: threading.Event | None = None,
               *, include_local: bool = True) -> DoctorReport:
    """The local host and every ``options.hosts`` entry, concurrently; local first in the report.

    ``include_local=False`` checks only ``options.hosts`` (the TUI re-running one hazard on one
    remote column must not re-check this machine too); the report then starts with the first
    remote host, whose ``host.name`` says which one it is. The CLI always includes this machine.
    """
    start = time.monotonic()
    cancel = new_cancel(cancel)
    ids = selected_ids(options)  # unknown --only ids fail before anything starts
    if not include_local and not options.hosts:
        raise ValueError("include_local=False needs at least one remote host in options.hosts")
    emit(on_event, DoctorStarted(((LOCAL,) if include_local else ()) + tuple(options.hosts), tuple(ids)))
    remote_reports: dict[int, HostReport] = {}
    threads: list[threading.Thread] = []
    if options.hosts:
        from execsys.doctor import remote

        gate = threading.Semaphore(max(1, options.max_parallel_hosts))

        def _one(index: int, dest: str) -> None:
            with gate:
                try:
                    report = remote.run_remote_doctor(dest, options, on_event, cancel)
                except Exception as exc:  # noqa: BLE001 - one host's trouble must not sink the others
                    report = remote.unreachable_report(
                        dest, options, f"the doctor failed for this host: {type(exc).__name__}: {exc}")
                    for result in report.hazards:
                        emit(on_event, HazardChecked(dest, result))
                remote_reports[index] = report
                _host_done(on_event, report)

        for index, dest in enumerate(options.hosts):
            t = threading.Thread(target=_one, args=(index, dest), name=f"doctor-host-{index}", daemon=True)
            t.start()
            threads.append(t)
    local = run_local(options, on_event, cancel) if include_local else None
    if local is not None:
        _host_done(on_event, local)
    host_deadline = time.monotonic() + options.effective_host_timeout + 10
    for t in threads:
        t.join(timeout=max(0.0, host_deadline - time.monotonic()))
    hosts = [local] if local is not None else []
    for index, dest in enumerate(options.hosts):
        report = remote_reports.get(index)
        if report is None:
            from execsys.doctor import remote

            report = remote.unreachable_report(dest, options, "no answer within the host timeout")
            for result in report.hazards:
                emit(on_event, HazardChecked(dest, result))
            _host_done(on_event, report)
        hosts.append(report)
    return DoctorReport(hosts, time.monotonic() - start, strict=options.strict, remote=bool(options.hosts))
