"""``files.bounded_run``, the one way the doctor starts a program: real processes that hang, flood,
exit while a grandchild holds their pipe, or print pages of code on their command line.

What an operator notices: the doctor never waits past its bound, never loses what a program
printed before it exited, and names a run in one readable line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from execsys.doctor import files

from execsys import proc


def _gone(pid: int) -> bool:
    """True once ``pid`` is dead: absent, or a zombie nobody has reaped yet (pid 1 in a container)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_a_grandchild_holding_the_pipe_neither_keeps_the_doctor_waiting_nor_loses_the_output():
    start = time.monotonic()
    inv = files.bounded_run(["sh", "-c", "sleep 60 & echo \"background $!\"; echo done"], timeout=10)
    elapsed = time.monotonic() - start
    assert inv.returncode == 0 and inv.ok
    assert inv.output.splitlines()[-1] == "done"
    assert elapsed < 8, f"waited {elapsed:.1f}s for a pipe the program's grandchild held"
    grandchild = int(inv.output.split()[1])
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild), "the grandchild holding the pipe was left running"


def test_output_printed_just_before_exit_is_all_kept(tmp_path):
    """A program that prints a large answer and exits at once: every byte is read, in order."""
    script = tmp_path / "answer.py"
    script.write_text("import sys\nsys.stdout.write(''.join(f'{i:07d}\\n' for i in range(40000)))\n")
    inv = files.bounded_run([sys.executable, str(script)], timeout=20, keep=1 << 20)
    lines = inv.output.splitlines()
    assert inv.ok and len(lines) == 40000 and lines[0] == "0000000" and lines[-1] == "0039999"


def test_a_hanging_program_is_killed_at_its_timeout_with_its_whole_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    start = time.monotonic()
    inv = files.bounded_run(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], timeout=1)
    assert inv.timed_out and inv.returncode is None and not inv.ok
    assert time.monotonic() - start < 5
    assert re.fullmatch(r"sh -c .*: no answer within 1\.\ds \(killed\)", inv.describe()), inv.describe()
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)


def test_a_flood_is_cut_off_and_said_so():
    inv = files.bounded_run(["sh", "-c", "yes flood"], timeout=20, max_output=1 << 20)
    assert inv.flooded and not inv.ok
    assert "flooded its output" in inv.describe()
    assert len(inv.output) <= 8192


def test_a_python_probe_is_named_by_its_interpreter_not_its_code():
    inv = files.python_facts(sys.executable, ["json"], timeout=20)
    assert inv.ok
    described = inv.describe()
    assert described.startswith(f"{sys.executable} -c <code> json: exit 0")
    assert "\n" not in described
    info = files.described(inv)
    assert info is not None and info["executable"] == sys.executable
    assert info["entries"]["json"][0] == 0


def test_a_program_that_cannot_start_is_one_line(tmp_path):
    missing = tmp_path / "nosuch"
    inv = files.bounded_run([str(missing), "--version"], timeout=5)
    assert inv.error and not inv.ok
    assert inv.describe() == f"{missing} --version: could not run ({os.strerror(2)})"


# ``execsys.proc.run`` is the runner under ``bounded_run`` and every other program execsys starts (git,
# ssh, restart scripts, a harness command as a probe target): what it keeps is capped, and so is what
# it holds while reading, so a program that prints hundreds of megabytes costs a page of memory.

_PEAK_OF_A_FLOOD = """
import resource, sys
from execsys import proc
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = proc.run(["sh", "-c", "head -c 300000000 /dev/zero; echo tail >&2"], timeout=120, max_output=1024)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(result.returncode, len(result.stdout), result.truncated, result.stderr.decode().strip(), (after - before) // 1024)
"""


def test_a_program_printing_300_mb_costs_the_caller_no_more_than_what_it_keeps():
    done = subprocess.run([sys.executable, "-c", _PEAK_OF_A_FLOOD], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    code, kept, truncated, stderr, grew_mib = done.stdout.split()
    assert (code, kept, truncated, stderr) == ("0", "1024", "True", "tail")
    # the previous runner read all 300 MB before slicing: its peak grew by about 588 MiB
    assert int(grew_mib) < 64, f"peak memory grew by {grew_mib} MiB while reading a flood it keeps 1 KiB of"


def test_the_runner_s_read_limit_kills_the_flood_and_says_so():
    start = time.monotonic()
    result = proc.run(["sh", "-c", "yes flood"], timeout=30, max_output=100, read_limit=1 << 20)
    assert result.flooded and result.returncode is None and not result.ok
    assert result.stdout == b"flood\n" * 16 + b"floo"
    assert time.monotonic() - start < 25


def test_the_runner_keeps_both_streams_apart_or_as_one():
    script = "echo out; echo err >&2; exit 3"
    apart = proc.run(["sh", "-c", script], timeout=10)
    assert (apart.returncode, apart.stdout, apart.stderr) == (3, b"out\n", b"err\n")
    merged = proc.run(["sh", "-c", script], timeout=10, merge_stderr=True)
    assert (merged.returncode, sorted(merged.stdout.splitlines()), merged.stderr) == (3, [b"err", b"out"], b"")


def test_the_runner_waits_for_a_held_pipe_up_to_its_timeout_unless_told_to_linger_less():
    """A restart script that leaves a server holding its pipe: by default the runner waits (as
    communicate() did) and calls it a timeout; with a linger it kills the holder and keeps the output."""
    script = "sleep 30 & echo started"
    start = time.monotonic()
    waited = proc.run(["sh", "-c", script], timeout=2)
    assert waited.timed_out and waited.stdout == b"started\n" and time.monotonic() - start < 10
    lingered = proc.run(["sh", "-c", script], timeout=20, linger_s=0.5)
    assert lingered.returncode == 0 and not lingered.timed_out and lingered.stdout == b"started\n"


def test_the_runner_feeds_stdin_and_survives_a_child_that_does_not_read_it():
    fed = proc.run(["cat"], timeout=10, input=b"x" * 200000)
    assert fed.returncode == 0 and fed.stdout == b"x" * 200000
    ignored = proc.run(["true"], timeout=10, input=b"x" * (1 << 20))
    assert ignored.returncode == 0
