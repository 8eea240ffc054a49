"""``execsys doctor --host DEST``: the same checks on another machine, over the system ssh.

The remote needs python3 >= 3.9 and nothing else. The doctor's own modules (this
package's hazards plus ``execsys.redact``; stdlib-only, psutil/blake3/pyelftools
used where the remote has them) are bundled into one compressed line and sent on
stdin to a fixed bootstrap, ``python3 -u -c 'import sys;exec(sys.stdin.readline())'``.
No program text crosses the remote shell as arguments (that would be hazard 2),
nothing is written on the remote, and the same connection then measures the clock:
local send/receive times around each remote timestamp give the offset from the
midpoint with half the round-trip as its error bound (best of several samples).

Uses ``execsys.ssh`` for the ssh command line (BatchMode, ``EXECSYS_SSH_CONFIG``).
The conversation is interactive, so this drives the ssh process itself -- with a
hard deadline and a process-group kill, as ``execsys.proc.run`` does.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass

from execsys.doctor import registry
from execsys.doctor.context import DoctorOptions
from execsys.doctor.model import Finding, HazardResult, HostReport, mark_accepted, status_of
from execsys.doctor.runner import HazardChecked, error_result, selected_ids

from execsys import ssh
from execsys.operation import OnEvent, emit

BOOTSTRAP = "import sys;exec(sys.stdin.readline())"
CLOCK_SAMPLES = 5
MIN_PYTHON = (3, 9)

# Module name -> is it a package. Order does not matter; the in-memory importer finds them by name.
BUNDLED = {
    "execsys.redact": False,
    "execsys.operation": False,
    "execsys.errors": False, "execsys.fsutil": False,  # bounded reads of env files (fsutil.read_bounded)
    "execsys.proc": False,  # files.bounded_run is the one process runner
    "execsys.doctor": True,
    "execsys.doctor.model": False,
    "execsys.doctor.files": False,
    "execsys.doctor.sysinfo": False,
    "execsys.doctor.context": False,
    "execsys.doctor.registry": False,
    "execsys.doctor.runner": False,
    "execsys.doctor.agent": False,
    "execsys.doctor.hazards": True,
    **{f"execsys.doctor.hazards.{h.module}": False for h in registry.HAZARDS},
}

_LOADER = r'''
import sys, json, importlib.abc, importlib.util
if sys.version_info < %(min)r:
    sys.stderr.write("execsys doctor needs python3 >= %(min_text)s on the remote, found %%s\n" %% sys.version.split()[0])
    sys.exit(3)
SOURCES = json.loads(%(sources)r)
class _Memory(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the doctor's modules from this string: nothing is written to the remote disk."""
    def find_spec(self, name, path=None, target=None):
        if name in SOURCES:
            return importlib.util.spec_from_loader(name, self, is_package=SOURCES[name][0])
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(compile(SOURCES[module.__name__][1], "<execsys>/" + module.__name__, "exec"), module.__dict__)
sys.meta_path.insert(0, _Memory())
sys.dont_write_bytecode = True
from execsys.doctor import agent
agent.main(json.loads(%(payload)r))
'''


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise RuntimeError(f"cannot find the source of {module}")
    with open(spec.origin, encoding="utf-8") as fh:
        return fh.read()


_bundle_cache: dict[str, str] = {}


def bundle_sources() -> dict[str, list[object]]:
    sources: dict[str, list[object]] = {"execsys": [True, f"__version__ = {_version()!r}\n"]}
    for module, is_pkg in BUNDLED.items():
        if module not in _bundle_cache:
            _bundle_cache[module] = _source(module)
        sources[module] = [is_pkg, _bundle_cache[module]]
    return sources


def _version() -> str:
    from execsys import __version__

    return __version__


def program_line(options: DoctorOptions) -> bytes:
    """The whole remote program as one line of Python (compressed, base64): what the bootstrap execs."""
    code = _LOADER % {"min": MIN_PYTHON, "min_text": ".".join(map(str, MIN_PYTHON)),
                      "sources": json.dumps(bundle_sources()), "payload": json.dumps(options.for_remote().to_payload())}
    packed = base64.b64encode(zlib.compress(code.encode("utf-8"), 9)).decode("ascii")
    return (f"import base64,zlib;exec(compile(zlib.decompress(base64.b64decode('{packed}')),"
            f"'<execsys-doctor>','exec'))\n").encode("ascii")


@dataclass
class ClockSample:
    offset_s: float  # remote minus local, at the local midpoint
    bound_s: float  # half the round trip: the true offset lies within offset_s +/- bound_s
    rtt_s: float
    samples: int


def unreachable_report(dest: str, options: DoctorOptions, reason: str,
                       partial: dict[str, HazardResult] | None = None,
                       facts: dict[str, object] | None = None) -> HostReport:
    """A host that could not be (fully) inspected: each missing check is an ``error`` naming why."""
    partial = partial or {}
    hazards = [partial.get(h) or error_result(h, "host-not-inspected", f"host not inspected: {reason}",
                                              [f"{dest}: {reason}"],
                                              "Check that `ssh DEST python3 -V` works non-interactively "
                                              "(keys/agent, BatchMode) and that python3 >= 3.9 is installed.")
               for h in selected_ids(options)]
    host = {"name": dest, "destination": dest, **(facts or {})}
    return HostReport(dest, host, hazards, 0.0, error=reason, strict=options.strict)


def _describe(returncode: int | None, stderr: str, timed_out: bool, elapsed: float) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    if timed_out:
        return f"no answer within {elapsed:.0f}s"
    if returncode == 255:
        return f"ssh failed: {last or 'connection error'}"
    missing = next((line.strip() for line in lines if "python3" in line and (
        "not found" in line or "No such file" in line)), None)
    if returncode == 127 or missing:
        return f"remote has no usable python3 ({missing or last or 'exit 127'})"
    if returncode == 3 and "needs python3" in last:
        return last
    return f"remote doctor exited {returncode}: {last or 'no output'}"


def run_remote_doctor(dest: str, options: DoctorOptions, on_event: OnEvent | None = None,
                      cancel: threading.Event | None = None) -> HostReport:
    """Inspect one host; never raises, never waits past the host timeout.

    Emits ``HazardChecked(dest, result)`` for every selected hazard (the clock-skew row once the
    inter-host skew is folded in); the caller (:func:`execsys.doctor.runner.run_doctor`) says when
    the host is done."""
    start = time.monotonic()
    cancel = cancel or threading.Event()
    timeout = options.effective_host_timeout
    try:
        destination = ssh.Destination.parse(dest)
    except ValueError as exc:
        return unreachable_report(dest, options, str(exc))
    remote_cmd = " ".join(shlex.quote(a) for a in ["python3", "-u", "-c", BOOTSTRAP])
    argv = [*ssh.base_argv(destination, connect_timeout=int(min(10, max(2, timeout / 3)))), remote_cmd]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        return unreachable_report(dest, options, f"ssh could not start ({exc.strerror or exc})")
    lines: queue.Queue[str | None] = queue.Queue()
    err_chunks: list[bytes] = []

    def _read_out() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
        lines.put(None)

    def _read_err() -> None:
        assert proc.stderr is not None
        total = 0
        for raw in proc.stderr:
            if total < 65536:
                err_chunks.append(raw)
            total += len(raw)

    threading.Thread(target=_read_out, daemon=True).start()
    err_thread = threading.Thread(target=_read_err, daemon=True)
    err_thread.start()
    deadline = start + timeout
    timed_out = False
    eof = False

    def _next_line(limit: float) -> str | None:
        nonlocal timed_out, eof
        while True:
            if cancel.is_set():
                return None
            remaining = min(limit, deadline) - time.monotonic()
            if remaining <= 0:
                timed_out = time.monotonic() >= deadline
                return None
            try:
                item = lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                continue
            if item is None:
                eof = True
            return item

    def _send(data: bytes) -> bool:
        try:
            assert proc.stdin is not None
            proc.stdin.write(data)
            proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    best: tuple[int, int, int] | None = None  # (rtt, local midpoint, remote) in ns
    samples = 0
    facts: dict[str, object] = {}
    results: dict[str, HazardResult] = {}
    finished = False
    if _send(program_line(options)):
        for _ in range(CLOCK_SAMPLES):
            sent = time.time_ns()
            if not _send(b"T\n"):
                break
            line = _next_line(deadline)
            received = time.time_ns()
            if not line or not line.startswith("T "):
                break
            samples += 1
            rtt = received - sent
            if best is None or rtt < best[0]:
                best = (rtt, (sent + received) // 2, int(line.split()[1]))
        if samples == CLOCK_SAMPLES and _send(b"GO\n"):
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
            while True:
                line = _next_line(deadline)
                if line is None:
                    break
                if line.startswith("H "):
                    facts = json.loads(line[2:])
                elif line.startswith("R "):
                    result = HazardResult.from_json(json.loads(line[2:]))
                    results[result.id] = result
                    if result.id != "clock-skew":
                        emit(on_event, HazardChecked(dest, result))
                elif line == "END":
                    finished = True
                    break
    if not finished and not eof:
        _kill(proc)  # timed out or cancelled; after EOF the remote is exiting by itself with its reason
    try:
        returncode = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _kill(proc)
        returncode = None
    err_thread.join(timeout=1)
    stderr = b"".join(err_chunks).decode("utf-8", "replace")
    clock = None
    if best is not None:
        rtt, midpoint, remote_ns = best
        clock = ClockSample((remote_ns - midpoint) / 1e9, rtt / 2e9, rtt / 1e9, samples)
    if not finished:
        reason = "cancelled" if cancel.is_set() else _describe(returncode, stderr, timed_out,
                                                               time.monotonic() - start)
        if results:
            reason = f"connection ended early: {reason}"
        report = unreachable_report(dest, options, reason, results, facts)
    else:
        facts = {"name": dest, "destination": dest, **facts}
        report = HostReport(dest, facts, [results.get(h) or error_result(h, "no-remote-result",
                                                                       "no result from the remote", [], "")
                                          for h in selected_ids(options)],
                            time.monotonic() - start, strict=options.strict)
    if clock is not None:
        report.host["clock_offset_ms"] = round(clock.offset_s * 1000, 3)
        report.host["clock_bound_ms"] = round(clock.bound_s * 1000, 3)
    skew = report.result("clock-skew")
    if skew is not None and clock is not None and skew.status != "error":
        apply_skew(skew, clock, options.clock_skew_threshold_ms, options.accept)
    for result in report.hazards:  # every row the caller has not seen yet (all of them for a dead host)
        if result.id == "clock-skew" or results.get(result.id) is not result:
            emit(on_event, HazardChecked(dest, result))
    report.duration_s = time.monotonic() - start
    return report


def apply_skew(result: HazardResult, clock: ClockSample, threshold_ms: float,
               accept: tuple[str, ...] | list[str] = ()) -> None:
    """Fold the measured inter-host skew into the remote host's clock-skew result.

    The skew is one more finding (``clock-skew/inter-host-skew`` over the threshold,
    ``clock-skew/inter-host-skew-uncertain`` when the RTT bound straddles it), and the status is
    refolded from all the row's findings by the same rule every hazard uses."""
    skew_ms, bound_ms = clock.offset_s * 1000, clock.bound_s * 1000
    line = (f"clock vs local: {skew_ms:+.1f} ms ± {bound_ms:.1f} ms (RTT {clock.rtt_s * 1000:.1f} ms, "
            f"best of {clock.samples}); threshold {threshold_ms:.0f} ms")
    result.evidence.insert(0, line)
    finding = None
    if abs(skew_ms) - bound_ms > threshold_ms:
        finding = Finding("fail", f"clock is {skew_ms:+.0f} ms off the local clock (± {bound_ms:.0f} ms), over "
                          f"{threshold_ms:.0f} ms", "clock-skew/inter-host-skew")
    elif abs(skew_ms) + bound_ms > threshold_ms:
        finding = Finding("warn", f"clock is {skew_ms:+.0f} ms off the local clock, but ± {bound_ms:.0f} ms RTT bound "
                          f"straddles the {threshold_ms:.0f} ms threshold", "clock-skew/inter-host-skew-uncertain")
    if finding is not None:
        finding = mark_accepted([finding], accept)[0]
        result.findings.append(finding)
        if finding.accepted:
            result.evidence.insert(1, finding.shown())
    if finding is not None and finding.active:
        result.status = status_of(result.findings)
        result.summary = finding.text
        if finding.level == "fail":
            result.fix = ("Synchronise both clocks to the same time source (chrony/NTP/PTP); until then, do not "
                          "order events across these hosts by timestamp.")
    else:
        result.summary = f"skew {skew_ms:+.1f} ms ± {bound_ms:.1f} ms vs local; {result.summary}"


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(OSError):
            proc.kill()
