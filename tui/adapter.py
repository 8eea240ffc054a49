"""The TUI's calls into the engines, in one place.

Each function here is a thin call to the same engine function the CLI command uses, plus the
small amount of reshaping a screen needs (a hazard list as (id, title) pairs, a licence line).
Nothing here imports textual, and nothing here decides anything the engines do not: when an
engine changes its names, this is the one module that follows.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from execsys.tui.state import Paths

from execsys.operation import OnEvent

if TYPE_CHECKING:
    from execsys.doctor.model import DoctorReport
    from execsys.doctor.runner import DoctorOptions

    from execsys.plan import PlanRun
    from execsys.scope import ScopeOptions
    from execsys.sources import Sources

T = TypeVar("T")

BACKGROUND_NICE = 10
"""How much lower than the UI a long observation or pin runs (nice steps, Linux; capped at 19)."""


def at_background_priority(work: Callable[[], T]) -> T:
    """``work()`` in a fresh thread ``BACKGROUND_NICE`` steps below the UI; waits and returns its result.

    Pinning a large artifact hashes it in a child process that keeps every core busy (BLAKE3's own
    threads), so on a small box the UI's event loop waits behind it for a time slice and a keypress
    takes hundreds of milliseconds to repaint. On Linux each thread has its own nice value and a
    process started from it inherits it: the hash then yields to the UI whenever both want a core,
    and runs at full speed when nothing else does. A fresh thread, not the worker's own: worker
    threads are pooled, and an unprivileged process cannot take a raised nice value back."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        with contextlib.suppress(OSError, AttributeError):  # no per-thread nice here: run as we are
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE))
        try:
            outcome["value"] = work()
        except BaseException as error:  # re-raised in the caller's thread, where the worker reports it
            outcome["error"] = error

    thread = threading.Thread(target=run, name="execsys-background", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# -- doctor ------------------------------------------------------------------


@dataclass(frozen=True)
class UntrustedDeclaration:
    """The session's declaration, not trusted: the line to show, the commands it declares, and the
    exact bytes shown (what is trusted if the operator says yes: a file changed since stays untrusted)."""

    path: Path
    line: str
    commands: list[tuple[str, str]]
    data: bytes


def untrusted_declaration(paths: Paths) -> UntrustedDeclaration | None:
    """The declaration when it declares commands and is not trusted (execsys.trust), else None."""
    from execsys import declaration, trust
    from execsys.fsutil import DECLARATION_LIMIT, read_bounded
    from execsys.redact import redact_text

    try:
        data = read_bounded(paths.config, DECLARATION_LIMIT, "declaration")
        decl = declaration.parse(data.decode("utf-8"), paths.config)
    except Exception:  # noqa: BLE001 - missing or broken: the steps that use it say so
        return None
    commands = trust.declared_commands(decl)
    if not commands or trust.is_trusted(paths.config, data):
        return None
    return UntrustedDeclaration(paths.config, trust.hint(paths.config),
                                [(key, redact_text(command)) for key, command in commands], data)


def trust_declaration(untrusted: UntrustedDeclaration) -> None:
    """`execsys trust` for the bytes the operator was shown."""
    from execsys import trust

    trust.trust(untrusted.path, untrusted.data)


def hazard_list() -> list[tuple[str, str]]:
    """The hazards in the doctor's own order, as (id, title)."""
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

    sources = session_sources(paths)
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


def session_sources(paths: Paths) -> Sources:
    """This session's declaration and lock, read at its paths (:func:`execsys.sources.sources_at`): a
    declaration not saved yet is an empty one, a lock not pinned yet is None."""
    from execsys.sources import sources_at

    return sources_at(paths.config, paths.lock, ledger=paths.ledger)


def load_declaration(paths: Paths):
    """The declaration half of :func:`session_sources`, for a step that needs no lock."""
    from execsys.sources import declaration_at

    return declaration_at(paths.config)


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
    report = at_background_priority(lambda: run_pin(options, on_event=on_event))
    observed = {name: value.get("observed", {}) for name, value in report.identity.components.items()}
    return observed, report.diff


def last_lock(paths: Paths) -> Any:
    """The lock half of :func:`session_sources` (an Identity), or None when there is none."""
    from execsys.sources import lock_at

    return lock_at(paths.lock)


def save_declaration(paths: Paths, tables: dict[str, dict[str, Any]]) -> Path:
    """Write the form's twelve tables into the declaration in place: only changed keys move; comments,
    order, unknown keys and the other tables (doctor, probe, ...) stay as the operator wrote them."""
    from execsys import declaration, trust
    from execsys.declaration_edit import edit_declaration_text

    if paths.config.exists():
        try:
            # an edit made here keeps the file's trust: a trusted file stays trusted, an untrusted one does not
            # become trusted by being saved
            was_trusted = load_declaration(paths).trusted
        except Exception:  # noqa: BLE001 - unreadable now: not trusted
            was_trusted = False
        text = edit_declaration_text(paths.config.read_text(encoding="utf-8"), tables)
    else:
        from execsys.tui.widgets.values import declaration_text

        was_trusted = True  # written by execsys for the operator, as `execsys init` does
        text = declaration_text(tables)
    declaration.parse(text, paths.config)  # what is written must load back
    written = save_text(paths.config, text)
    if was_trusted:
        trust.trust(paths.config, text.encode("utf-8"))
    return written


def pin(paths: Paths, tables: dict[str, dict[str, Any]], on_event: OnEvent | None = None):
    """Save the declaration, then pin it as ``execsys pin`` does; returns (identity, diff vs the previous lock,
    the licences a new identity leaves behind or None)."""
    from execsys.identity import PinOptions, run_pin

    save_declaration(paths, tables)
    try:
        previous = last_lock(paths)
    except Exception:  # an unreadable old lock is replaced; there is nothing to diff against
        previous = None
    options = PinOptions.from_sources(load_declaration(paths), previous, lock_path=paths.lock, ledger=paths.ledger)
    report = at_background_priority(lambda: run_pin(options, on_event=on_event))
    return report.identity, report.diff, report.superseded


# -- probes ----------------------------------------------------------------------------


def probe_axes() -> tuple[str, ...]:
    from execsys.probes.axes import AXES

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
        # a form value is the operator's own command: an untrusted declaration's commands are not
        # offered as one (left empty, the probe takes the declared one and refuses it, naming execsys trust)
        "restart": decl.get("runtime", "restart") if decl.trusted else None,
        "ready": decl.get("runtime", "ready") if decl.trusted else None,
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


def live_line(tally: Any) -> str:
    """The running agreement a probe event carries, as the screen shows it while cases arrive."""
    if not tally.n:
        text = "agreement so far: no case compared yet"
    else:
        text = f"agreement so far {tally.text()}"
        if tally.n - tally.m:
            text += f" · ✗ {tally.n - tally.m} flipped"
    if tally.errored:
        text += f" · ? {tally.errored} errored (excluded)"
    return text


def record_line(record: Any) -> str:
    """The finished record's figures: m/n, rate, interval, errored."""
    from execsys.stats import rate_with_ci

    if not record.n:
        return f"no case completed on every pass ({record.errored} errored)"
    text = f"agreement {rate_with_ci(record.m, record.n, record.ci95)}"
    if record.errored:
        text += f" · ? {record.errored} errored (excluded from n)"
    return text


def sent_lines(divergence: dict[str, Any], labels: list[str]) -> list[str]:
    """How a flipped case's passes went out (after its twin, with others in flight), as the engine says it."""
    from execsys.probes.margin import sent_phrases

    return sent_phrases(divergence, labels)


def probe_options(paths: Paths, form: dict[str, Any]):
    """The form's values as overrides over this session's declaration and lock: the very
    ``ProbeOptions.from_sources`` the CLI calls with its flags."""
    from execsys.probes.runner import ProbeOptions

    endpoints = [e.strip() for e in (form.get("endpoint") or "").split(",") if e.strip()]
    return ProbeOptions.from_sources(
        session_sources(paths),
        axis=form["axis"], endpoints=endpoints, command=form.get("command") or None,
        cases=form.get("cases") or None, n=form.get("n"), restart=form.get("restart") or None,
        ready=form.get("ready") or None, load=form.get("load"), baseline=form.get("baseline") or None,
        resume=True if form.get("resume") else None,
    )


def run_probe(paths: Paths, form: dict[str, Any], *, override: dict[str, Any] | None,
              on_event: Callable[[Any], None], cancel) -> Any:
    """Run (or resume) the probe as ``execsys probe`` does, handing each engine event to ``on_event``;
    returns the record, or None when stopped (the RunOpened event named the run to resume).

    A gate override travels with the run: written under the probe-run as soon as the run is open."""
    from execsys.probes.events import RunOpened
    from execsys.probes.runner import ProbeInterrupted
    from execsys.probes.runner import run_probe as engine_run_probe

    options = probe_options(paths, form)

    def forward(event: Any) -> None:
        if override is not None and isinstance(event, RunOpened):
            record_override(paths, override, event.run_id, options.identity)
        on_event(event)

    try:
        return engine_run_probe(options, on_event=forward, cancel=cancel)
    except ProbeInterrupted:
        return None


def record_override(paths: Paths, override: dict[str, Any], run_id: str, identity: str | None) -> None:
    """The gate override under the probe-run it let through (a repeat for a resumed run is a no-op)."""
    from execsys.ledger import Ledger

    with Ledger.open(paths.ledger) as ledger:
        ledger.append("gate-override", {**override, "for": "probe", "run": run_id},
                      identity=identity, parent=run_id, key="gate-override")


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


def run_registered_plan(paths: Paths, plan_file: str, endpoints: dict[str, str], *,
                        override: dict[str, Any] | None, on_event: OnEvent, cancel: threading.Event) -> PlanRun:
    """`execsys plan run PLAN --arm A=URL --arm B=URL` in this session (its declaration, lock and
    ledger), each engine event handed to ``on_event``; returns the ``PlanRun`` report (``cancelled``
    when ``cancel`` stopped it after the case in hand: then it is recorded as descriptive).

    A gate override is recorded under the plan-run record it let through, as registration does."""
    from execsys.ledger import Ledger
    from execsys.plan import PlanRunOptions, load_plan
    from execsys.plan import run_plan as engine_run_plan
    sources = session_sources(paths)
    options = PlanRunOptions.from_sources(sources.declaration, sources.lock, plan=load_plan(plan_file),
                                          endpoints=endpoints, plan_path=plan_file, lock_path=sources.lock_path,
                                          ledger=paths.ledger)
    run = engine_run_plan(options, on_event=on_event, cancel=cancel)
    if override is not None and run.record is not None:
        with Ledger.open(paths.ledger) as ledger:
            ledger.append("gate-override", {**override, "for": "plan-run", "plan-run": run.record},
                          identity=run.plan.identity, parent=run.record, key="gate-override")
    return run


# -- runs --------------------------------------------------------------------------------


def recent_runs(paths: Paths, limit: int = 10) -> list[Any]:
    """The newest `execsys run` records (``execsys.run.history.RunSummary``), newest first."""
    from execsys.ledger import Ledger
    from execsys.run.history import recent_runs as engine_recent_runs

    with Ledger.open(paths.ledger) as ledger:
        return engine_recent_runs(ledger, limit=limit)


def body_of_run(paths: Paths, run_id: str) -> dict[str, Any]:
    """One run record's body (``execsys.run/1``: verdict, drift events, result files), as `execsys ledger show`."""
    from execsys.ledger import Ledger

    with Ledger.open(paths.ledger) as ledger:
        return dict(ledger.get(run_id).body)


# -- explain -------------------------------------------------------------------------------


def explain_runs(paths: Paths, a: str, b: str) -> Any:
    """`execsys explain A B` in this session's ledger: why the two results' scores differ (the
    ``ExplainReport``). ``a`` and ``b`` are anything explain accepts (here: two run ids)."""
    from execsys.explain import ExplainOptions, run_explain

    return run_explain(ExplainOptions.from_sources(None, None, a=a, b=b, ledger=paths.ledger))


def explain_lines(report: Any) -> list[tuple[str, str]]:
    """The report's lines as the CLI prints them, ``(kind, text)``: the TUI draws the same wording."""
    from execsys.explain import report_lines

    return report_lines(report)
