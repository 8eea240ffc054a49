"""``run_eval``: the seven steps of ``execsys run``, in order, as events; never prints.

The harness is the user's program: it gets the terminal as it is (stdin, stdout, stderr passed
through, so progress bars work), its own session and process group, and ``EXECSYS_RUN_ID``,
``EXECSYS_IDENTITY`` and ``EXECSYS_LOCK`` in its environment. Signals reach it through us: SIGINT,
SIGTERM and SIGHUP are forwarded to its process group (when this runs on the main thread), a
second SIGINT kills the group, and a ``cancel`` (the TUI's stop) sends SIGINT; after a cancel, a
SIGTERM or a SIGHUP the harness has ``grace_s`` to stop before the group gets SIGKILL. Because the
harness has its own session, the SIGHUP a closing terminal or ssh session sends reaches only us:
forwarding it is what keeps the harness from running on orphaned. SIGTERM and SIGHUP are handled
for the whole run: one arriving before the harness starts stops the gate or the identity step
where it is and the harness is never started; one arriving after it exited is ignored while the
run is recorded. So whatever happens, the results it left are digested and the run is recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from execsys.errors import InputError
from execsys.fsutil import prepare_output
from execsys.harnesses import registry
from execsys.identity import (
    Identity,
    VerifyReport,
    pin,
    record_identity,
    superseded_licences,
    verify,
)
from execsys.ledger import ENV_VAR as LEDGER_ENV
from execsys.ledger import Ledger, new_id, now_iso
from execsys.operation import Cancel, OnEvent, emit, new_cancel
from execsys.redact import redact_argv, scrub
from execsys.run import results as results_step
from execsys.run.events import (
    ChildStarted,
    DriftDetected,
    ResultFound,
    RunRecorded,
    SignalForwarded,
    StepFinished,
    StepStarted,
)
from execsys.run.gate import run_gate
from execsys.run.options import JOB_IDENTITY_ENV, JOB_LOCK_ENV, RunOptions
from execsys.run.record import UNVERIFIED, RunRecord, keep_receipts, prepare_receipts, prepare_sidecars
from execsys.run.watch import Watcher

HOOK_DIR_ENV = "EXECSYS_HOOK_DIR"


def run_eval(options: RunOptions, on_event: OnEvent | None = None, cancel: Cancel | None = None) -> RunRecord:
    """Gate, fix the identity, run the harness, watch, verify after, digest the results, record."""
    cancel = new_cancel(cancel)
    adapter = registry.for_command(options.command)
    record = RunRecord(id=new_id("run"), command=redact_argv(options.command), cwd=str(options.cwd),
                       harness=adapter.name, lock_path=str(options.lock_path),
                       shard=options.shard.to_json() if options.shard is not None else None)
    with Ledger.open(options.ledger) as ledger, _held_signals() as held:
        try:
            identity = _gate_and_identity(options, record, ledger, on_event)
        except _Stopped as stopped:  # SIGTERM or a hangup during the gate or the identity: never started
            record.signals.append(signal.Signals(stopped.signum).name)
            emit(on_event, StepFinished("run", "fail", f"not started: {record.signals[0]} received"))
            return _finish(record, ledger, options, on_event)
        if identity is None:
            return _finish(record, ledger, options, on_event)
        held.collect_only()

        # 3 + 4. run, watched
        harness_dirs = adapter.output_dirs(options.command, options.cwd, os.environ)
        finder = results_step.ResultFinder(adapter, harness_dirs, options.results, options.cwd)
        finder.before()
        declared_runtime = options.declaration.component("runtime") or identity.declared("runtime")
        watcher = Watcher(declared_runtime, options.watch_s,
                          on_look=lambda found: emit(on_event, DriftDetected(found[0], tuple(found))))
        argv = adapter.prepare(options.command, identity.id, record.id)
        hook_dir = Path(tempfile.mkdtemp(prefix="execsys-run-hook-")) if adapter.name == "inspect" else None
        try:
            emit(on_event, StepStarted("watch", f"watching the runtime every {options.watch_s:g} s"
                                       if watcher.active else "watch off" if options.watch_s == 0
                                       else "watch off: no [runtime] endpoint or process declared"))
            watcher.start()
            if held:  # a hangup or SIGTERM just before the start: the harness never starts
                record.signals.extend(signal.Signals(s).name for s in held)
                emit(on_event, StepFinished("run", "fail", f"not started: {record.signals[0]} received"))
            else:
                record.started_at = now_iso()
                emit(on_event, StepStarted("run", shlex.join(redact_argv(argv))))
                _run_child(argv, options, identity, record, hook_dir, on_event, cancel, held)
                record.finished_at = now_iso()
        finally:
            watcher.stop()
        cpu_note = {"interval_s": options.watch_s, "observations": watcher.observations,
                    "errors": watcher.errors[:5]}
        record.watch = cpu_note
        record.drift = list(watcher.drift)
        status = "fail" if record.interrupted or record.failed else "ok"
        if record.started_at is not None:
            emit(on_event, StepFinished("run", status, f"harness exited {record.exit_code}"
                                        + (f" after {', '.join(record.signals)}" if record.signals else "")))
        if watcher.active:
            emit(on_event, StepFinished("watch", "warn" if record.drift else "ok",
                                        f"{len(record.drift)} drift event(s) in {watcher.observations} observations"))
        if hook_dir is not None:
            record.hook = _hook_reports(hook_dir)
        vanished = _leave_vanished_cwd(options.cwd)
        if vanished is not None:
            emit(on_event, StepFinished("run", "warn", f"the working directory was deleted during the run; "
                                        f"carrying on from {vanished}"))

        # 5. verify after
        emit(on_event, StepStarted("verify", f"re-observing identity {identity.id[:12]}"))
        try:
            report = verify(identity, declaration=options.declaration, exclude=[options.lock_path, *harness_dirs])
        except (OSError, InputError) as exc:  # what the harness left cannot be observed: said, and recorded
            record.verify_after = {"verdict": UNVERIFIED, "changed": [], "observed_id": None,
                                   "sentence": f"the system could not be re-observed after the run ({exc})"}
            emit(on_event, StepFinished("verify", "warn", f"{UNVERIFIED}: {record.verify_after['sentence']}"))
        else:
            changed = [name for name, check in report.components.items() if check.status != "same"]
            record.verify_after = {"verdict": report.verdict, "changed": changed,
                                   "observed_id": report.observed_id, "sentence": report.sentence}
            emit(on_event, StepFinished("verify", "ok" if report.verdict == "same-system" else "warn",
                                        f"{report.verdict}: {report.sentence}"))

        # 6. results
        emit(on_event, StepStarted("results", "looking for result files written during the run"))
        candidates = finder.found()
        digests = results_step.settled_digests([path for path, _ in candidates])
        for path, harness in candidates:
            blake3 = digests[path]
            if isinstance(blake3, Exception):  # still growing, gone, unreadable: listed, not lost
                record.result_errors.append({"path": str(path), "error": str(blake3)})
                continue
            found = results_step.FoundResult(path, blake3, harness)
            record.results.append(found.to_json())
            emit(on_event, ResultFound(str(path), found.blake3, harness))
        text = f"{len(record.results)} result file(s)"
        if record.result_errors:
            text += "; not digested: " + "; ".join(e["error"] if e["path"] in e["error"] else
                                                   f"{e['path']}: {e['error']}" for e in record.result_errors)
        emit(on_event, StepFinished("results", "ok" if record.results and not record.result_errors else "warn",
                                    text))
        return _finish(record, ledger, options, on_event)


def _gate_and_identity(options: RunOptions, record: RunRecord, ledger: Ledger,
                       on_event: OnEvent | None) -> Identity | None:
    """Steps 1 and 2: the gate, then the identity the run is under; None when either refused."""
    # The lock's verification reads only; it runs beside the doctor (both wait mostly on
    # subprocesses and sockets) and is used only once the gate has let the run through.
    lock = options.lock
    early_verify = _Background(lambda: verify(lock, declaration=options.declaration,
                                              exclude=[options.lock_path])) if lock is not None else None
    # 1. gate
    emit(on_event, StepStarted("gate", "checking the ten hazards" if options.gate != "off"
                               else "doctor skipped (--gate off)"))
    gate = run_gate(options.declaration, options.gate, options.override, ledger, options.lock)
    record.doctor = gate.to_json()
    if gate.refused:
        record.refused = (f"the gate failed ({'; '.join(gate.failing)}): fix it, or run with "
                          "--override REASON (recorded) or --gate warn")
        emit(on_event, StepFinished("gate", "fail", record.refused))
        return None
    if gate.mode == "off":
        emit(on_event, StepFinished("gate", "skip", "doctor skipped (--gate off), recorded"))
    elif gate.failing:
        how = f"overridden: {gate.override}" if gate.overridden else "--gate warn"
        emit(on_event, StepFinished("gate", "warn", f"{len(gate.failing)} failing ({how}): "
                                    + "; ".join(gate.failing)))
    else:
        emit(on_event, StepFinished("gate", "ok", f"doctor {gate.verdict} ({gate.report_id})"))

    # 2. identity
    whose = f" (the job's, from {JOB_LOCK_ENV})" if options.job is not None else ""
    emit(on_event, StepStarted("identity", f"verifying {options.lock_path}{whose}" if options.lock is not None
                               else f"no lock at {options.lock_path}: pinning the system now"))
    identity = _fix_identity(options, record, ledger, early_verify.result() if early_verify else None)
    if identity is None:
        emit(on_event, StepFinished("identity", "fail", record.refused or "refused"))
        return None
    left_behind = (superseded_licences(ledger, options.lock.id, identity.id)
                   if record.identity_how == "repinned" and options.lock is not None else None)
    emit(on_event, StepFinished("identity", "ok" if left_behind is None else "warn",
                                f"identity {identity.id[:12]} {record.identity_how}{whose}"
                                + (f"; {left_behind.sentence()}" if left_behind is not None else "")))
    return identity


def _finish(record: RunRecord, ledger: Ledger, options: RunOptions, on_event: OnEvent | None) -> RunRecord:
    """7. record: the ledger row first, then the sidecars and receipts it names.

    Each sidecar and receipt is written to a temp file beside its target before the row (so one
    that cannot be written, a read-only or full directory or a FIFO at its name, is known and
    stated in the row), and renamed into place after it: neither ever names a run the ledger lacks,
    and one that fails never costs the run its record. Each receipt written is also kept in the
    ledger (a ``receipt`` row under the run), so a later run that replaces the file loses none."""
    emit(on_event, StepStarted("record", "writing the run record"))
    prepared = prepare_sidecars(record.to_json(), record.results, options.sidecar_dir)
    record.sidecars = prepared.paths
    record.sidecar_errors = list(prepared.errors)
    receipts = prepare_receipts(record.to_json(), record.results, options.sidecar_dir, options.signer)
    record.receipts = receipts.paths
    record.receipt_errors = list(receipts.errors)
    try:
        ledger.append("run", dict(record.to_json(), sidecars=record.sidecars, receipts=record.receipts),
                      identity=record.identity_id, record_id=record.id)
    except BaseException:
        prepared.discard()
        receipts.discard()
        raise
    late = prepared.commit()
    if late:  # renamed away under us after the row was written: said in a row of its own, under the run
        record.sidecar_errors.extend(late)
        failed = {e["sidecar"] for e in late}
        record.sidecars = [p for p in record.sidecars if p not in failed]
        ledger.append("run-sidecars", {"run": record.id, "sidecar_errors": late, "sidecars": record.sidecars},
                      identity=record.identity_id, parent=record.id, key="sidecars")
    late_receipts = receipts.commit()
    if late_receipts:
        record.receipt_errors.extend(late_receipts)
        failed = {e["receipt"] for e in late_receipts}
        record.receipts = [p for p in record.receipts if p not in failed]
        ledger.append("run-receipts", {"run": record.id, "receipt_errors": late_receipts,
                                       "receipts": record.receipts},
                      identity=record.identity_id, parent=record.id, key="receipts")
    keep_receipts(ledger, record.id, record.identity_id, receipts)
    problems = record.file_problems()
    if problems:
        emit(on_event, StepFinished("record", "fail", f"{record.id}: recorded in the ledger, but {problems}"))
    else:
        emit(on_event, StepFinished("record", "ok", f"{record.id}: {record.verdict_detail()}"
                                    + _receipts_said(record, options)))
    emit(on_event, RunRecorded(record.id, record.verdict, tuple(record.sidecars)))
    return record


def _receipts_said(record: RunRecord, options: RunOptions) -> str:
    """'; 1 receipt, signed by KEYID' (or 'unsigned'): who vouches for the receipts, said with the record."""
    if not record.receipts:
        return ""
    from execsys.receipt import signed_by_key

    n = len(record.receipts)
    return f"; {n} receipt{'s' if n != 1 else ''}, {signed_by_key(options.signer)}"


def _leave_vanished_cwd(cwd: Path) -> str | None:
    """When the harness deleted the directory this process runs in (its own cwd, shared with us),
    move to the nearest directory above it that still exists, so the steps after (which observe
    the system, and resolve paths) can run; returns where, or None when the cwd is still there."""
    try:
        os.getcwd()
        return None
    except FileNotFoundError:
        pass
    for candidate in (cwd, *cwd.parents):
        try:
            os.chdir(candidate)
            os.getcwd()
            return str(candidate)
        except OSError:
            continue
    os.chdir("/")
    return "/"


class _Background:
    """A function started on a daemon thread now; ``result()`` joins it and returns (or re-raises)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="execsys-run-verify", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _fix_identity(options: RunOptions, record: RunRecord, ledger: Ledger,
                  report: VerifyReport | None = None) -> Identity | None:
    """Verify the lock (refusing a new identity unless --repin), or pin one now."""
    job = options.job
    if job is not None:
        record.identity_from = JOB_LOCK_ENV
    if (job is not None and job.identity_id and options.lock is not None and options.lock.id != job.identity_id
            and not options.repin):
        record.identity_id = options.lock.id
        record.refused = (f"this job started under identity {job.identity_id[:12]} ({JOB_IDENTITY_ENV}), but "
                          f"{options.lock_path} now holds {options.lock.id[:12]}: the node was re-pinned since; "
                          "give --repin to run under the system as it is now")
        return None
    if options.lock is not None:
        if report is None:
            report = verify(options.lock, declaration=options.declaration, exclude=[options.lock_path])
        if report.verdict == "same-system":
            record.identity_id, record.identity_how = options.lock.id, "verified"
            return options.lock
        if not options.repin:
            record.identity_id = options.lock.id
            record.refused = (f"the lock no longer matches this system ({report.sentence}); "
                              "give --repin to pin the system as it is now")
            return None
        how = "repinned"
    else:
        how = "pinned"
    identity = pin(options.declaration, exclude=[options.lock_path])
    # the lock's bytes beside it first, renamed over it once the ledger holds the identity
    with prepare_output(options.lock_path, scrub(identity.to_json()), "the lock") as written:
        record_identity(identity, ledger)
        written.commit()
    record.identity_id, record.identity_how = identity.id, how
    return identity


def _run_child(argv: list[str], options: RunOptions, identity: Identity, record: RunRecord,
               hook_dir: Path | None, on_event: OnEvent | None, cancel: Cancel, held: list[int]) -> None:
    env = dict(os.environ)
    env.update({"EXECSYS_RUN_ID": record.id, "EXECSYS_IDENTITY": identity.id,
                "EXECSYS_LOCK": str(options.lock_path)})
    if options.ledger is not None:  # the harness, and an execsys it starts, see the run's own ledger
        env[LEDGER_ENV] = str(options.ledger)
    if hook_dir is not None:
        env[HOOK_DIR_ENV] = str(hook_dir)
    stdout = sys.stderr.fileno() if options.child_stdout_to_stderr else None
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    proc = subprocess.Popen(argv, cwd=options.cwd, env=env, stdout=stdout, start_new_session=True)
    emit(on_event, ChildStarted(proc.pid, tuple(redact_argv(argv))))
    received = held  # SIGTERM/SIGHUP land here already; SIGINT too while the harness runs
    restore = _forward_signals(received, (signal.SIGINT,))
    handled = 0
    kill_at: float | None = None
    try:
        while True:
            try:
                proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            while handled < len(received):
                signum = received[handled]
                handled += 1
                second_interrupt = signum == signal.SIGINT and signal.SIGINT in received[:handled - 1]
                sent = signal.SIGKILL if second_interrupt else signum
                _signal_group(proc, sent, record, on_event)
                if signum in BOUNDED_SIGNALS and kill_at is None:  # the user is gone or the host is stopping
                    kill_at = time.monotonic() + options.grace_s
            if cancel.is_set() and kill_at is None:
                _signal_group(proc, signal.SIGINT, record, on_event)
                kill_at = time.monotonic() + options.grace_s
            if kill_at is not None and time.monotonic() > kill_at:
                _signal_group(proc, signal.SIGKILL, record, on_event)
                kill_at = float("inf")
    finally:
        restore()
        if proc.poll() is None:  # we are leaving through an exception: leave nothing running
            _signal_group(proc, signal.SIGKILL, record, on_event)
            proc.wait(timeout=10)
    record.exit_code = proc.returncode


def _signal_group(proc: subprocess.Popen, signum: int, record: RunRecord, on_event: OnEvent | None) -> None:
    name = signal.Signals(signum).name
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)
    record.signals.append(name)
    emit(on_event, SignalForwarded(name, proc.pid))


# Signals that mean "stop now and record": forwarded, then the harness gets grace_s before SIGKILL.
BOUNDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _forward_signals(received: list[int], signums: tuple[int, ...]):
    """Collect ``signums`` into ``received`` for the wait loop to forward, until the returned function
    restores the previous handlers; only the main thread may install handlers (elsewhere: a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}
    for signum in signums:
        previous[signum] = signal.signal(signum, lambda s, _frame: received.append(s))

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


class _Stopped(BaseException):
    """SIGTERM or SIGHUP before the harness started: unwinds the gate or the identity step (which can
    take minutes hashing an artifact) like Ctrl-C would, so the run is recorded as never started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Held(list):
    """The SIGTERM/SIGHUP received during a run, in order. Until :meth:`collect_only` each one also
    raises :class:`_Stopped` where the main thread is; after it they are only collected, for the
    wait loop to forward to the harness."""

    raising = True

    def collect_only(self) -> None:
        self.raising = False


@contextlib.contextmanager
def _held_signals() -> Iterator[_Held]:
    """SIGTERM and SIGHUP, handled for the whole run: their default action would end this process
    before the run is recorded, and would leave the harness (in a session of its own) running."""
    held = _Held()
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def handler(signum: int, _frame: object) -> None:
        held.append(signum)
        if held.raising:
            raise _Stopped(signum)

    previous = {signum: signal.signal(signum, handler) for signum in BOUNDED_SIGNALS}
    try:
        yield held
    finally:
        for signum, handler_before in previous.items():
            signal.signal(signum, handler_before)


def _hook_reports(hook_dir: Path) -> dict[str, Any]:
    """What the Inspect hook wrote, one JSON file per task; the directory is ours and goes afterwards."""
    reports: list[dict[str, Any]] = []
    for path in sorted(hook_dir.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            reports.append(json.loads(path.read_text(encoding="utf-8")))
    shutil.rmtree(hook_dir, ignore_errors=True)
    return {"reports": reports, "model_calls": sum(int(r.get("model_calls") or 0) for r in reports),
            "mismatches": sum(int(r.get("mismatches") or 0) for r in reports)}
