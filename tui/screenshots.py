"""Screenshots of each step, taken from the real app: ``python -m execsys.tui.screenshots``.

Writes ``screenshots/<n>-<step>.svg`` at 120x40 (``--size 80x24`` for the small-terminal view).
Each step is driven the way an operator would drive it, in a throw-away project directory with
its own ledger: the Doctor first runs the real checks on this machine (or replays a recorded
report, ``--recorded FILE``, for pictures that do not depend on the machine); Identity shows a pinned
lock; Probes runs a real probe (a small harness command as the target, two cases flipping on
their second call, so the flipped list and the side-by-side view have something to show);
Scope & plan reads the probe records of that identity. The same scenes feed the snapshot tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

DECLARATION = """\
[model]
name = "tiny-llama-eval"
family = "llama"

[runtime]
engine = "llama.cpp"

[hardware]
gpu = "NVIDIA H200"

[budget]
temperature = 0.0
max_tokens = 32
seed = 7

[probe]
cases = "cases.jsonl"
"""

# A harness in the command-target shape (one case as JSON on stdin, the output on stdout). Its
# answers are fixed, except that the cases marked "near-tie" change their wording on the second
# call -- the way a greedy decode flips on a floating-point near-tie.
HARNESS = '''\
import json, pathlib, sys
case = json.load(sys.stdin)
calls = pathlib.Path(".harness-calls")
calls.mkdir(exist_ok=True)
counter = calls / case["id"]
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
answers = {
    "add": "2 + 3 = 5. The answer is 5.",
    "capital": "The capital of France is Paris.",
    "tie-1": "Counting the letters in strawberry gives three r's, so the answer is 3.",
    "primes": "The primes below 10 are 2, 3, 5 and 7.",
    "tie-2": "Sorting [3, 1, 2] ascending gives [1, 2, 3]; the first element is 1.",
    "units": "One kilometre is 1000 metres.",
}
flipped = {
    "tie-1": "Counting the letters in strawberry gives two r's in berry and one in straw: 3.",
    "tie-2": "Sorting [3, 1, 2] ascending gives [1, 2, 3], so the smallest is 1.",
}
text = flipped[case["id"]] if n >= 2 and case["id"] in flipped else answers[case["id"]]
sys.stdout.write(text)
'''

CASES = ["add", "capital", "tie-1", "primes", "tie-2", "units"]


def demo_identity() -> Any:
    """A pinned identity with fixed observations (so its id, and every picture, is the same everywhere)."""
    from execsys import COMPONENTS, declaration
    from execsys.canonical import content_id
    from execsys.identity import Identity

    declared = declaration.parse(DECLARATION).tables
    observed: dict[str, dict[str, Any]] = {name: {} for name in COMPONENTS}
    observed["runtime"] = {"engine": {"name": "llama-cpp-python", "version": "0.3.16"}}
    # Recorded by `execsys pin` on a real NVIDIA H200 box (execsys's GPU check, 2026-11-30).
    observed["hardware"] = {
        "hostname": "vm", "os": {"id": "ubuntu", "version": "24.04.3"}, "kernel": "6.18.44-fc-v657-gpu",
        "cpu": {"model": "Intel(R) Xeon(R) Processor", "logical_cores": 16}, "gpus": [
            {"name": "NVIDIA H200", "uuid": "GPU-73b1e10b-c9e7-0efd-e256-35f5d7cf7cb9",
             "memory_total_bytes": 150754820096, "compute_capability": "9.0", "driver_version": "580.159.04",
             "cuda_version": "13.0", "mig_mode": "disabled", "ecc_mode": "enabled"}],
    }
    observed["environment"] = {"python": {"version": "3.11.7"}, "shell": {"name": "bash"}, "container": None,
                               "locale": "C.UTF-8", "timezone": "UTC"}
    observed["harness"] = {"git": False, "note": "no git repository"}
    components = {name: {"declared": declared.get(name, {}), "observed": observed[name]} for name in COMPONENTS}
    return Identity(id=content_id(components), recorded_at="2026-11-30T09:00:00.000Z", components=components,
                    declaration={"path": "execsys.toml", "base_dir": "."})


def prepare_project(root: Path, ledger_path: Path) -> str:
    """Write the declaration, the harness, the cases and the lock into ``root``; seed the ledger.

    The ledger gets the identity record and three earlier probe records for it (session and
    concurrency probes that agreed, a restart probe that did not), so the Scope step has boundaries.
    Returns the identity id.
    """
    from execsys.identity import record_identity, write_lock
    from execsys.ledger import Ledger
    from execsys.stats import wilson

    root.mkdir(parents=True, exist_ok=True)
    (root / "execsys.toml").write_text(DECLARATION, encoding="utf-8")
    (root / "harness.py").write_text(HARNESS, encoding="utf-8")
    (root / "cases.jsonl").write_text(
        "".join(json.dumps({"id": case, "prompt": f"Question {case}?"}) + "\n" for case in CASES), encoding="utf-8")
    identity = demo_identity()
    write_lock(identity, root / "execsys.lock.json")
    with Ledger.open(ledger_path) as ledger:
        record_identity(identity, ledger)
        for axis, m, n in (("session", 30, 30), ("restart", 17, 20), ("concurrency", 20, 20)):
            body = {"schema": "execsys.probe/1", "axis": axis, "identity": identity.id, "n": n, "m": m,
                    "agreement_rate": m / n, "ci95": list(wilson(m, n) or ()), "flipped": [], "cases": []}
            ledger.append("probe", body, identity=identity.id)
    return identity.id


# -- scenes: drive the app to the state each picture shows ----------------------------------------


async def _settle(pilot, predicate: Callable[[], bool], timeout: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    from textual.worker import WorkerCancelled, WorkerFailed

    while True:
        # a failure is already reported by the app (a notification); a cancelled worker was superseded by a newer one
        with contextlib.suppress(WorkerFailed, WorkerCancelled):
            await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if predicate() or loop.time() > deadline:
            return
        await asyncio.sleep(0.05)


def recorded_results(path: Path) -> list[Any]:
    """Hazard results from a stored ``execsys.doctor/1`` report."""
    from execsys.doctor.model import HazardResult

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [HazardResult.from_json(h) for h in data["hazards"]]


async def doctor_scene(pilot, recorded: list[Any] | None = None) -> None:
    """The Doctor step after a full check: live on this machine, or a recorded report replayed
    through the same messages the live checks send."""
    app = pilot.app
    screen = app.screen
    if recorded is None:
        await _settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
    else:
        from execsys.doctor.model import DoctorReport, HostReport

        screen._run += 1
        run = screen._run
        app.doctor.running = True
        for result in recorded:
            screen.post_message(screen.HazardChecked(run, "local", result))
        report = DoctorReport([HostReport("local", {}, list(recorded))])
        screen.post_message(screen.DoctorFinished(run, report, None))
        await _settle(pilot, lambda: not app.doctor.running)
    from textual.widgets import DataTable

    table = screen.query_one("#hazards", DataTable)
    failing = [i for i, (hazard_id, _) in enumerate(screen._hazards)
               if getattr(app.doctor.results.get("local", {}).get(hazard_id), "status", "") in ("fail", "warn")]
    table.move_cursor(row=failing[0] if failing else 0, column=1)
    await pilot.pause()


async def identity_scene(pilot) -> None:
    from textual.widgets import OptionList, Static

    app = pilot.app
    await pilot.press("2")
    screen = app.screen
    await _settle(pilot, lambda: "observed:" in str(screen.query_one("#identity-status", Static).content))
    screen.query_one("#components", OptionList).highlighted = 3  # hardware: declared beside observed
    await pilot.pause()


async def probes_scene(pilot) -> None:
    from textual.widgets import Input, OptionList

    app = pilot.app
    await pilot.press("3")
    screen = app.screen
    screen.query_one("#command", Input).value = "python3 harness.py"
    await pilot.pause()
    await pilot.press("ctrl+g")
    await pilot.pause()
    if app.screen is not screen:  # the gate asks (the doctor has not given a clean verdict): override
        await pilot.press("y")
    await _settle(pilot, lambda: not screen.running and screen.query_one("#flipped", OptionList).option_count > 0)
    screen.query_one("#flipped", OptionList).highlighted = 0
    screen.query_one("#flipped", OptionList).focus()
    await pilot.pause()


async def scope_scene(pilot) -> None:
    from textual.widgets import Input, Static

    app = pilot.app
    await pilot.press("4")
    screen = app.screen
    # the statement, not its placeholder (which names "the Identity step" too): scope reads the ledger in a worker
    await _settle(pilot, lambda: app.identity_id is not None and
                  str(screen.query_one("#statement", Static).content).startswith(f"Identity {app.identity_id[:12]}"))
    screen.query_one("#arm-a", Input).value = "base"
    screen.query_one("#arm-b", Input).value = "tuned"
    screen.set_focus(None)
    await pilot.pause()


SCENES: dict[str, Callable[..., Awaitable[None]]] = {
    "doctor": doctor_scene, "identity": identity_scene, "probes": probes_scene, "scope": scope_scene,
}


def no_cursor_blink() -> None:
    """Inputs draw a steady cursor (pictures and snapshots must not depend on the blink phase)."""
    from textual.widgets import Input

    Input.cursor_blink = False  # type: ignore[assignment]


# -- the command --------------------------------------------------------------------------------------


async def capture(step: str, size: tuple[int, int], out: Path, recorded: Path | None) -> Path:
    from execsys.tui.app import ExecsysApp
    from execsys.tui.state import STEPS

    number = [mode for mode, _ in STEPS].index(step) + 1
    with tempfile.TemporaryDirectory(prefix="execsys-shot-") as tmp:
        project, ledger = Path(tmp) / "project", Path(tmp) / "ledger.sqlite3"
        prepare_project(project, ledger)
        previous = os.getcwd()
        os.chdir(project)
        try:
            app = ExecsysApp(ledger=ledger, autostart=recorded is None)
            async with app.run_test(size=size) as pilot:
                await pilot.pause()
                # every picture shows the session after a doctor run (live, or the recorded report)
                await doctor_scene(pilot, recorded_results(recorded) if recorded else None)
                if step != "doctor":
                    await SCENES[step](pilot)
                await pilot.pause()
                target = out / f"{number}-{step}.svg"
                app.save_screenshot(filename=target.name, path=str(out))
        finally:
            os.chdir(previous)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m execsys.tui.screenshots", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default="screenshots", help="directory for the SVGs (default: screenshots/)")
    parser.add_argument("--size", default="120x40", help="terminal size COLSxROWS (default 120x40)")
    parser.add_argument("--recorded", metavar="FILE",
                        help="replay this execsys.doctor/1 report instead of checking this machine")
    parser.add_argument("--step", action="append", choices=list(SCENES), help="only these steps (default: all)")
    args = parser.parse_args(argv)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    no_cursor_blink()
    for step in args.step or list(SCENES):
        target = asyncio.run(capture(step, (cols, rows), out, Path(args.recorded).resolve() if args.recorded else None))
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
