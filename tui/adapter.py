"""The TUI's calls into the engines, in one place.

Each function here is a thin call to the same engine function the CLI command uses, plus the
small amount of reshaping a screen needs (a hazard list as (id, title) pairs, a licence line).
Nothing here imports textual, and nothing here decides anything the engines do not: when an
engine changes its names, this is the one module that follows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.tui.state import Paths

from execsys.operation import OnEvent

if TYPE_CHECKING:
    from execsys.doctor.model import DoctorReport
    from execsys.doctor.runner import DoctorOptions

    from execsys.scope import ScopeOptions

# -- doctor ------------------------------------------------------------------


def hazard_list() -> list[tuple[str, str]]:
    """The nine hazards in the doctor's own order, as (id, title)."""
    from execsys.doctor.registry import HAZARDS

    return [(hazard.id, hazard.title) for hazard in HAZARDS]


def declared_doctor_hosts(paths: Paths) -> list[str]:
    """The remote hosts the declaration asks the doctor to check ([doctor] hosts or [environment] hosts)."""
    from execsys.doctor.runner import DoctorOptions

    try:
        decl = load_declaration(paths)
        return list(DoctorOptions.from_sources(decl).hosts)
    except Exception:  # a broken declaration is reported when the checks run, not here
        return []


def doctor_options(paths: Paths, hosts: list[str], only: list[str] | None = None) -> DoctorOptions:
    """The options `execsys doctor --config ... --lock ... --host ... --only ...` would build."""
    from execsys.doctor.runner import DoctorOptions

    from execsys.sources import load_sources

    sources = load_sources(paths.config if paths.config.exists() else None,
                           paths.lock if paths.lock.exists() else None)
    return DoctorOptions.from_sources(sources.declaration, sources.lock, hosts=list(hosts),
                                      only=list(only) if only else None)


def run_doctor(options: DoctorOptions, on_event: OnEvent, cancel: threading.Event,
               include_local: bool = True) -> DoctorReport:
    """Run the doctor; ``include_local=False`` checks only the remote hosts (a re-run on one remote column)."""
    from execsys.doctor.runner import run_doctor as _run

    return _run(options, on_event, cancel, include_local=include_local)


def record_doctor(paths: Paths, report: DoctorReport) -> str:
    """Store the report in the ledger, as `execsys doctor` does."""
    from execsys.ledger import Ledger

    with Ledger.open(paths.ledger) as ledger:
        return ledger.append("doctor", report.to_json())


# -- identity ----------------------------------------------------------------


def current_identity_id(paths: Paths) -> str | None:
    """The identity this session speaks for: the lock beside the declaration, if there is one."""
    try:
        lock = last_lock(paths)
    except Exception:  # an unreadable lock is shown as "not pinned"; the Identity step says why
        return None
    return lock.id if lock is not None else None


# -- scope ---------------------------------------------------------------------


def scope_options(paths: Paths, identity_id: str) -> ScopeOptions:
    """The options `execsys scope --config ...` builds: the lock beside the declaration when it is the
    identity in question (its components name the host and fill the contract), else the id itself."""
    from execsys.scope import ScopeOptions

    try:
        lock = last_lock(paths)
    except Exception:  # an unreadable lock: the identity is still known by its id (the Identity step says why)
        lock = None
    if lock is not None and lock.id == identity_id:
        return ScopeOptions.from_sources(None, lock, ledger=paths.ledger)
    return ScopeOptions.from_sources(None, None, identity=identity_id, ledger=paths.ledger)


def licence_for(paths: Paths, identity_id: str | None) -> str:
    """A few words for the header: the widest boundary licensed under this identity, and what is unstable."""
    if not identity_id:
        return "none (no pinned identity)"
    from execsys.scope import run_scope

    return licence_line(run_scope(scope_options(paths, identity_id)))


def licence_line(report: Any) -> str:
    if report is None:
        return "none (no pinned identity)"
    parts = []
    if report.licence:
        m = report.measured[report.licence]
        parts.append(f"{report.licence} ({m.m}/{m.n})")
    elif report.licensed:
        parts.append("no boundary (agreed: " + ", ".join(report.licensed) + ")")
    elif report.measured:
        parts.append("none (no axis agreed fully)")
    else:
        parts.append("none (nothing probed)")
    if report.unstable:
        parts.append("unstable: " + ", ".join(report.unstable))
    return "; ".join(parts)


def declared(paths: Paths, table: str, key: str) -> Any:
    """One declared setting, or None (no declaration, or not declared)."""
    try:
        decl = load_declaration(paths)
    except Exception:  # a broken declaration is reported on the Identity step, not here
        return None
    return decl.get(table, key)


def scope_axes() -> tuple[str, ...]:
    from execsys.scope import AXES

    return AXES


def scope_and_contract(paths: Paths, identity_id: str | None) -> tuple[Any, str]:
    """The scope report for this identity and its contract section (both None/'' without an identity)."""
    if not identity_id:
        return None, ""
    from execsys.scope import contract_markdown, run_scope

    report = run_scope(scope_options(paths, identity_id))
    return report, contract_markdown(report, report.ref)


def save_text(path: str | Path, text: str) -> Path:
    from execsys.fsutil import atomic_write_text

    target = Path(path).expanduser()
    atomic_write_text(target, text)
    return target


# -- identity: declare, observe, pin ----------------------------------------------


def identity_id_of(identity: Any) -> str | None:
    return getattr(identity, "id", None)


def load_declaration(paths: Paths):
    from execsys import declaration

    return declaration.load(paths.config if paths.config.exists() else None)


def declared_components(paths: Paths) -> tuple[dict[str, dict[str, Any]], str]:
    """The twelve tables for the form, and a line saying where they came from."""
    from execsys import COMPONENTS

    if paths.config.exists():
        decl = load_declaration(paths)
        note = f"declaration: {paths.config}"
        if decl.warnings:
            note += f" ({len(decl.warnings)} warning{'s' if len(decl.warnings) != 1 else ''}: {decl.warnings[0]})"
        return {name: decl.component(name) for name in COMPONENTS}, note
    detected = detected_tables()
    return ({name: detected.get(name, {}) for name in COMPONENTS},
            f"no {paths.config} yet: the form is pre-filled from what this machine shows; save writes it")


def detected_tables() -> dict[str, dict[str, Any]]:
    """What ``execsys init`` would write for this machine, as declaration tables."""
    from execsys import declaration
    from execsys.scaffold import detect, render_template

    return declaration.parse(render_template(detect())).tables


def observe(paths: Paths, on_event: OnEvent | None = None) -> tuple[dict[str, dict[str, Any]], Any]:
    """What this machine observes now, per component, as ``execsys pin`` would record it (no endpoint
    required, nothing written); and, when a lock exists, the diff from the lock to now (``execsys diff``'s
    report). ``on_event`` receives pin's events (ComponentObserved, ArtifactHashed)."""
    from execsys.identity import PinOptions, run_pin

    try:
        lock = last_lock(paths)
    except Exception:  # an unreadable lock: nothing to compare with (the status line says so)
        lock = None
    options = PinOptions.from_sources(load_declaration(paths), lock, lock_path=paths.lock, record=False)
    report = run_pin(options, on_event=on_event)
    observed = {name: value.get("observed", {}) for name, value in report.identity.components.items()}
    return observed, report.diff


def last_lock(paths: Paths) -> Any:
    """The lock beside the declaration (an Identity), or None when there is none."""
    if not paths.lock.exists():
        return None
    from execsys.identity import load_lock

    return load_lock(paths.lock)


def save_declaration(paths: Paths, tables: dict[str, dict[str, Any]]) -> Path:
    """Write the form's twelve tables into the declaration in place: only changed keys move; comments,
    order, unknown keys and the other tables (doctor, probe, ...) stay as the operator wrote them."""
    from execsys import declaration
    from execsys.declaration_edit import edit_declaration_text

    if paths.config.exists():
        text = edit_declaration_text(paths.config.read_text(encoding="utf-8"), tables)
    else:
        from execsys.tui.widgets.values import declaration_text

        text = declaration_text(tables)
    declaration.parse(text, paths.config)  # what is written must load back
    return save_text(paths.config, text)


def pin(paths: Paths, tables: dict[str, dict[str, Any]], on_event: OnEvent | None = None):
    """Save the declaration, then pin it as ``execsys pin`` does; returns (identity, diff vs the previous lock)."""
    from execsys.identity import PinOptions, run_pin

    save_declaration(paths, tables)
    try:
        previous = last_lock(paths)
    except Exception:  # an unreadable old lock is replaced; there is nothing to diff against
        previous = None
    options = PinOptions.from_sources(load_declaration(paths), previous, lock_path=paths.lock, ledger=paths.ledger)
    report = run_pin(options, on_event=on_event)
    return report.identity, report.diff


# -- probes ----------------------------------------------------------------------------


def probe_axes() -> tuple[str, ...]:
    try:
        from execsys.probes.axes import AXES
    except ImportError:
        return scope_axes()
    return tuple(AXES)


def probe_defaults(paths: Paths) -> dict[str, Any]:
    """Form defaults from the declaration: endpoint, cases, n, restart and ready commands."""
    try:
        decl = load_declaration(paths)
    except Exception:  # a broken declaration is reported by the steps that use it
        return {}
    return {
        "endpoint": decl.get("runtime", "endpoint"),
        "cases": decl.get("probe", "cases"),
        "n": decl.get("probe", "n"),
        "restart": decl.get("runtime", "restart"),
        "ready": decl.get("runtime", "ready"),
    }


def probe_form_problem(form: dict[str, Any]) -> str | None:
    """The first thing that keeps the form from making a probe, said as the CLI would say it."""
    if bool(form.get("endpoint")) == bool(form.get("command")):
        return "give an endpoint or a command (one of the two)"
    if not form.get("cases"):
        return "give a cases file (JSON Lines, one case per line)"
    if form.get("n") is not None and form["n"] < 1:
        return "n must be at least 1"
    return None


class LiveAgreement:
    """The running tally shown while a probe runs; the record's figures replace it when it ends."""

    def __init__(self) -> None:
        self.agree: dict[str, bool] = {}
        self.errored: set[str] = set()

    def add(self, case_id: str, agree: bool) -> None:
        self.agree[case_id] = agree
        self.errored.discard(case_id)

    def add_error(self, case_id: str) -> None:
        self.errored.add(case_id)

    def line(self) -> str:
        n = len(self.agree)
        m = sum(self.agree.values())
        if not n:
            return "agreement so far: no case compared yet"
        text = f"agreement so far {m}/{n} = {m / n:.2f}"
        flipped = n - m
        if flipped:
            text += f" · ✗ {flipped} flipped"
        if self.errored:
            text += f" · ? {len(self.errored)} errored (excluded)"
        return text


def record_line(record: Any) -> str:
    """The finished record's figures: m/n, rate, interval, errored."""
    if not record.n:
        return f"no case completed on every pass ({record.errored} errored)"
    text = f"agreement {record.m}/{record.n} = {record.agreement_rate:.2f}"
    if record.ci95:
        text += f" (95% CI {record.ci95[0]:.2f}–{record.ci95[1]:.2f})"
    if record.errored:
        text += f" · ? {record.errored} errored (excluded from n)"
    return text


def probe_argv(paths: Paths, form: dict[str, Any]) -> list[str]:
    """The `execsys probe` command line the form stands for (flags are the CLI's public names)."""
    argv = [form["axis"]]
    for endpoint in (e.strip() for e in (form.get("endpoint") or "").split(",")):
        if endpoint:
            argv += ["--endpoint", endpoint]
    for flag, key in (("--command", "command"), ("--cases", "cases"), ("--n", "n"), ("--restart", "restart"),
                      ("--ready", "ready"), ("--load", "load"), ("--baseline", "baseline")):
        if form.get(key) not in (None, ""):
            argv += [flag, str(form[key])]
    if paths.lock.exists():
        argv += ["--lock", str(paths.lock)]
    if form.get("resume"):
        argv.append("--resume")
    return argv


def probe_options(paths: Paths, form: dict[str, Any]):
    """The ProbeOptions `execsys probe ...` builds: the CLI's own parser and option builder, fed the form."""
    import argparse

    from execsys.commands import probe as probe_command

    parser = argparse.ArgumentParser(prog="execsys probe", exit_on_error=False)
    probe_command.add_arguments(parser)
    try:
        args = parser.parse_args(probe_argv(paths, form))
    except (argparse.ArgumentError, SystemExit) as exc:
        from execsys.errors import UsageError

        raise UsageError(f"the probe form does not make a valid command: {exc}") from None
    # the session's declaration, not ./execsys.toml: `execsys tui --config PATH` probes with PATH's defaults
    return probe_command.build_options(args, declaration_path=paths.config if paths.config.exists() else None)


class ProbeWatcher:
    """Turns the probe engine's events into what the screen shows, on the probe's own thread.

    The engine records each case in the ledger before it reports it, so the watcher reads the
    output text (for the side-by-side view) and the live agreement of a case from those records;
    the finished record's figures replace the live tally at the end.
    """

    def __init__(self, ledger, options, override: dict[str, Any] | None) -> None:
        self.ledger = ledger
        self.options = options
        self.override = override
        self.run_id: str | None = None
        self.passes = 0
        self.sent_passes: set[int] = set()
        self.override_recorded = False

    def view(self, event: Any) -> dict[str, Any]:
        from execsys.probes import runner as probe_engine

        kind = type(event).__name__
        view: dict[str, Any] = {"kind": kind}
        if isinstance(event, probe_engine.Note):
            view["text"] = event.message
            if event.message.startswith("resuming run "):
                self.run_id = event.message.split()[2]
        elif isinstance(event, probe_engine.PassStarted):
            self._find_run()
            self.passes = max(self.passes, event.pass_index + 1)
            self.sent_passes.add(event.pass_index)
            view.update(pass_index=event.pass_index, label=event.label, total=event.total, done=event.done)
        elif isinstance(event, probe_engine.CaseDone):
            view.update(pass_index=event.pass_index, case_id=event.case_id, done=event.done, total=event.total,
                        error=event.error)
            view.update(self._case(event.pass_index, event.case_id))
        elif isinstance(event, probe_engine.PassFinished):
            view.update(pass_index=event.pass_index, label=event.label, completed=event.completed,
                        errored=event.errored)
        elif isinstance(event, probe_engine.ProbeFinished):
            view["record"] = event.record
        self._record_override()
        return view

    def _find_run(self) -> None:
        """The run this probe appends to: named in the 'resuming' note, else the newest run with its parameters."""
        if self.run_id is not None:
            return
        for run in self.ledger.iter(kind="probe-run", newest_first=True, limit=20):
            params = run.body.get("parameters", {})
            if params.get("axis") == self.options.axis and params.get("identity") == self.options.identity \
                    and self.ledger.child(run.id, "final") is None:
                self.run_id = run.id
                return

    def _case(self, pass_index: int, case_id: str) -> dict[str, Any]:
        if self.run_id is None:
            return {}
        row = self.ledger.child(self.run_id, f"{pass_index}:{case_id}")
        found: dict[str, Any] = {"output": row.body.get("text") if row else None}
        if pass_index == 0 or 0 not in self.sent_passes:
            return found
        digests = []
        for index in range(pass_index + 1):
            other = row if index == pass_index else self.ledger.child(self.run_id, f"{index}:{case_id}")
            if other is None or other.body.get("error"):
                found["agree"] = None if other is None else "errored"
                return found
            digests.append(other.body.get("digest"))
        found["agree"] = len(set(digests)) == 1
        return found

    def _record_override(self) -> None:
        """The gate override travels with the run: a ledger record under the probe-run, said once."""
        if self.override is None or self.override_recorded or self.run_id is None:
            return
        self.ledger.append("gate-override", {**self.override, "for": "probe", "run": self.run_id},
                           identity=self.options.identity, parent=self.run_id, key="gate-override")
        self.override_recorded = True

    def finish(self) -> None:
        """A run that never opened (it failed early) still leaves the override on record."""
        if self.override is not None and not self.override_recorded and self.run_id is not None:
            self._record_override()


def run_probe(paths: Paths, form: dict[str, Any], *, override: dict[str, Any] | None,
              on_view: Callable[[dict[str, Any]], None], cancel) -> Any:
    """Run (or resume) the probe as `execsys probe` does; returns the record, or None when stopped."""
    from execsys.probes.runner import ProbeInterrupted
    from execsys.probes.runner import run_probe as engine_run_probe

    from execsys.ledger import Ledger

    options = probe_options(paths, form)
    with Ledger.open(paths.ledger) as ledger:
        watcher = ProbeWatcher(ledger, options, override)
        try:
            return engine_run_probe(options, ledger, on_event=lambda event: on_view(watcher.view(event)),
                                    cancel=cancel)
        except ProbeInterrupted as stopped:
            watcher.run_id = watcher.run_id or stopped.run_id
            on_view({"kind": "Stopped", "run_id": stopped.run_id, "saved": stopped.saved, "total": stopped.total})
            return None
        finally:
            watcher.finish()


def case_outputs(paths: Paths, record: Any) -> dict[str, dict[int, str | None]]:
    """The stored output text of each flipped case, per pass, from the run's ledger records."""
    if not record.run:
        return {}
    from execsys.ledger import Ledger

    found: dict[str, dict[int, str | None]] = {}
    with Ledger.open(paths.ledger) as ledger:
        for case_id in record.flipped:
            for index in range(record.repeats):
                row = ledger.child(record.run, f"{index}:{case_id}")
                if row is not None:
                    found.setdefault(case_id, {})[index] = row.body.get("text")
    return found


# -- plan ------------------------------------------------------------------------------


def plan_designs() -> tuple[str, ...]:
    from execsys.plan import DESIGNS

    return tuple(DESIGNS)


def plan_run_command(paths: Paths, plan_file: str, arms: list[str]) -> str:
    """The `execsys plan run` command line for a registered plan in this session (its declaration,
    lock and ledger named where they are not the defaults), each arm's endpoint left as URL."""
    import shlex

    from execsys.sources import config_path, lock_path

    argv = ["execsys", "plan", "run", plan_file]
    for arm in arms:
        argv += ["--arm", f"{arm}=URL"]
    if paths.config != config_path(None):
        argv += ["--config", str(paths.config)]
    if paths.lock != lock_path(None, paths.config):
        argv += ["--lock", str(paths.lock)]
    if paths.ledger is not None:
        argv += ["--ledger", str(paths.ledger)]
    return shlex.join(argv)


def register_plan(paths: Paths, *, arms: list[str], cases: str, design: str, seed: int, out: str | None,
                  identity_id: str | None, override: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """`execsys plan new --arms A B --cases FILE --design D --seed S [--out FILE]`, plus the gate override.

    ``identity_id`` is the identity this session speaks for (the header's); without one the plan
    records ``identity_reason``, naming the lock that was looked for."""
    from execsys.fsutil import atomic_write_json
    from execsys.ledger import Ledger
    from execsys.plan import NewPlanOptions, make_plan

    options = NewPlanOptions.from_sources(None, None, arms=arms, cases=cases, design=design, seed=seed,
                                          identity=identity_id, lock_path=paths.lock)
    with Ledger.open(paths.ledger) as ledger:
        plan = make_plan(options, ledger).plan
        if override is not None:
            ledger.append("gate-override", {**override, "for": "plan", "plan": plan.record_id},
                          identity=identity_id, parent=plan.record_id, key="gate-override")
    data = plan.to_json()
    if out:
        atomic_write_json(out, data)
    return data, plan.record_id
