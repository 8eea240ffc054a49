"""Start to first paint: ``execsys tui`` vs a minimal Textual "hello" app, side by side, in one run.

Each run starts a fresh Python process in a pseudo-terminal (so Textual drives a real terminal
driver, as over SSH) with ``EXECSYS_TUI_EXIT_AFTER_PAINT=1``: the app writes ``time.time()`` to
``EXECSYS_TUI_PAINT_STAMP`` right after its first screen refresh and exits. Start to first paint
is that stamp minus the moment the process was spawned (the doctor's checks, which start after
the first paint, are not waited for). The reference is the smallest Textual app that paints one Static, run
the same way, so the ratio shows what execsys adds on top of Textual itself.

    python benchmarks/bench_tui_startup.py [--runs 7]

Target (issue 6): execsys tui first paint <= 1 s on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HELLO = """
import os
from textual.app import App
from textual.widgets import Static

class Hello(App):
    def compose(self):
        yield Static("hello")
    def on_mount(self):
        self.call_after_refresh(self.painted)

    def painted(self):
        import time
        stamp = os.environ.get("EXECSYS_TUI_PAINT_STAMP")
        if stamp:
            with open(stamp, "w") as fh:
                fh.write(repr(time.time()))
        if os.environ.get("EXECSYS_TUI_EXIT_AFTER_PAINT") == "1":
            self.exit()

Hello().run()
"""


def time_in_pty(argv: list[str], env: dict[str, str], cwd: str, timeout: float = 30.0) -> float:
    """Seconds from spawn to first paint of ``argv`` with a pty as its terminal (output drained, discarded)."""
    stamp = Path(cwd) / "paint.stamp"
    stamp.unlink(missing_ok=True)
    env = dict(env, EXECSYS_TUI_PAINT_STAMP=str(stamp))
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    spawned_at = time.time()
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True)
    os.close(slave)
    deadline = start + timeout
    try:
        while proc.poll() is None:
            if time.perf_counter() > deadline:
                proc.kill()
                raise TimeoutError(f"{argv} did not exit within {timeout}s")
            ready, _, _ = select.select([master], [], [], 0.02)
            if ready:
                try:
                    os.read(master, 65536)
                except OSError:
                    pass
    finally:
        os.close(master)
    if proc.returncode != 0 or not stamp.exists():
        raise RuntimeError(f"{argv} exited {proc.returncode} without painting")
    return float(stamp.read_text()) - spawned_at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        hello = Path(tmp) / "hello.py"
        hello.write_text(HELLO)
        env = dict(os.environ, EXECSYS_TUI_EXIT_AFTER_PAINT="1", TERM="xterm-256color", COLUMNS="120", LINES="40",
                   EXECSYS_LEDGER=str(Path(tmp) / "ledger.sqlite3"))
        commands = {
            "execsys tui": [sys.executable, "-m", "execsys", "tui"],
            "textual hello": [sys.executable, str(hello)],
        }
        for argv in commands.values():  # warm the page cache and .pyc files
            time_in_pty(argv, env, tmp)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():  # interleaved, so both see the same machine state
                times[name].append(time_in_pty(argv, env, tmp))
    ours = statistics.median(times["execsys tui"])
    ref = statistics.median(times["textual hello"])
    print(f"{'':16}{'median':>10}{'min':>10}{'max':>10}")
    for name, values in times.items():
        print(f"{name:16}{statistics.median(values):>9.3f}s{min(values):>9.3f}s{max(values):>9.3f}s")
    print(f"ratio execsys tui / textual hello: {ours / ref:.2f}x   target: execsys tui <= 1.0 s "
          f"({'met' if ours <= 1.0 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
