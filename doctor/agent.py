"""The remote side of ``execsys doctor --host``: runs on the far host from stdin, writes nothing.

The local side sends a one-line program through ``python3 -u -c`` (a fixed bootstrap
is the only thing that crosses the remote shell); the program installs the doctor's
modules from memory (never on disk) and calls :func:`main`. The conversation on
stdin/stdout is line-based:

- ``T`` -> ``T <time_ns>``: clock samples, so the local side can bound skew by RTT/2;
- ``GO`` -> ``H <host facts json>``, then ``R <hazard result json>`` per check as it finishes,
  then ``END``.
"""

from __future__ import annotations

import json
import sys
import threading
import time


def _say(line: str, lock: threading.Lock) -> None:
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main(payload: dict) -> None:
    from execsys.doctor import sysinfo
    from execsys.doctor.context import DoctorOptions
    from execsys.doctor.runner import HazardChecked, run_local

    lock = threading.Lock()
    while True:
        line = sys.stdin.readline()
        if not line:
            return  # the local side went away: nothing to do, nothing left behind
        word = line.strip()
        if word == "T":
            _say(f"T {time.time_ns()}", lock)
        elif word == "GO":
            break
    options = DoctorOptions.from_payload(payload)
    _say("H " + json.dumps(sysinfo.host_facts()), lock)
    def send(event: object) -> None:
        if isinstance(event, HazardChecked):
            _say("R " + json.dumps({**event.result.to_json(), "duration_s": event.result.duration_s}), lock)

    run_local(options, send)
    _say("END", lock)
