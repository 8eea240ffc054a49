"""clock-skew: the clocks of the machines in a run disagree.

Timestamps order requests, name ledger records and decide which log line came
first; a host whose kernel clock is unsynchronised, or a guest on an unstable
clocksource, drifts by seconds and silently reorders events across hosts. This
reads the kernel's synchronisation state with ``adjtimex`` (read-only: modes=0),
the clocksource (tsc vs kvm-clock/hyperv/xen, and tsc demoted as unstable),
and the virtualisation. Across ``--host`` the runner measures each remote clock
against this one over SSH, with half the round-trip time as the error bound.
"""

from __future__ import annotations

import ctypes
import os
import sys

from execsys.doctor import sysinfo
from execsys.doctor.model import Finding, HazardResult, fold

ID = "clock-skew"
TITLE = "Clock synchronisation"
# The last two are measured by the local side against each --host (execsys.doctor.remote.apply_skew).
FINDINGS = ("kernel-clock-unsynchronised", "tsc-unstable", "slow-clocksource", "inter-host-skew",
            "inter-host-skew-uncertain")

FIX = ("Run a time daemon (chrony or systemd-timesyncd) on every host and wait for it to synchronise "
       "(`chronyc tracking`); in VMs prefer the hypervisor clock (kvm-clock/hyperv) with PTP/NTP on top.")

STA_UNSYNC = 0x0040
STA_NANO = 0x2000
TIME_ERROR = 5
CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0"


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Timex(ctypes.Structure):
    _fields_ = [
        ("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
        ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
        ("time", _Timeval), ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int), ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long), ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int),
        ("_padding", ctypes.c_int * 11),
    ]


def _libc() -> ctypes.CDLL:
    """glibc by its soname first: ``ctypes.util.find_library`` starts ``ldconfig -p`` (a process on every
    node check) only to answer ``libc.so.6`` there; other C libraries are still found through it."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        from ctypes.util import find_library

        return ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True)


def kernel_sync() -> dict | None:
    """adjtimex(2) with modes=0 (reads, changes nothing): state, status bits, max error, offset."""
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    tx = _Timex()
    tx.modes = 0
    state = libc.adjtimex(ctypes.byref(tx))
    if state < 0:
        return {"error": os.strerror(ctypes.get_errno())}
    offset_us = tx.offset / 1000.0 if tx.status & STA_NANO else float(tx.offset)
    return {
        "state": state,
        "unsynchronised": bool(tx.status & STA_UNSYNC) or state == TIME_ERROR,
        "maxerror_us": tx.maxerror,
        "esterror_us": tx.esterror,
        "offset_us": offset_us,
    }


def clocksource() -> tuple[str | None, list[str]]:
    def read(name: str) -> str | None:
        try:
            with open(os.path.join(CLOCKSOURCE, name)) as fh:
                return fh.read().strip()
        except OSError:
            return None

    current = read("current_clocksource")
    available = (read("available_clocksource") or "").split()
    return current, available


def check(ctx) -> HazardResult:
    findings: list[Finding] = []
    evidence: list[str] = []
    sync = kernel_sync()
    if sync is None:
        evidence.append("kernel synchronisation state: not readable on this OS (adjtimex is Linux-only)")
    elif "error" in sync:
        evidence.append(f"adjtimex failed: {sync['error']}")
    else:
        evidence.append(f"adjtimex: state {sync['state']}, maxerror {sync['maxerror_us'] / 1000:.1f} ms, "
                        f"esterror {sync['esterror_us'] / 1000:.1f} ms, offset {sync['offset_us'] / 1000:.3f} ms")
        if sync["unsynchronised"]:
            findings.append(Finding("warn", "kernel clock is not synchronised (no NTP/PTP discipline: STA_UNSYNC)",
                                    f"{ID}/kernel-clock-unsynchronised"))
    current, available = clocksource()
    if current:
        evidence.append(f"clocksource: {current} (available: {' '.join(available) or '?'})")
        if current != "tsc" and "tsc" not in available and current in ("hpet", "acpi_pm", "jiffies"):
            findings.append(Finding("warn", f"clocksource is {current}: tsc was probably marked unstable by the kernel",
                                    f"{ID}/tsc-unstable"))
        elif current in ("hpet", "acpi_pm", "jiffies") and "tsc" in available:
            findings.append(Finding("warn", f"clocksource is {current} although tsc is available",
                                    f"{ID}/slow-clocksource"))
    virt = sysinfo.virtualization()
    if virt:
        evidence.append(f"virtualisation: {', '.join(virt)}")
        if current == "tsc" and "hypervisor" in virt:
            evidence.append("tsc inside a VM: fine when the host exposes an invariant TSC; kvm-clock/hyperv otherwise")
    return fold(ID, findings, ok=f"kernel clock synchronised, clocksource {current or 'unknown'}", fix=FIX,
                evidence=evidence, accept=ctx.accept, summary=lambda top: top[0].text)
