"""The layered-environment doctor: ten hazards checked before any run counts.

Public API (the CLI and the TUI are both thin faces over it)::

    from execsys.doctor.runner import DoctorOptions, run_doctor, run_hazard
    from execsys.doctor.registry import HAZARDS      # ordered (id, title, module)

    sources = execsys.sources.load_sources(config, lock)
    options = DoctorOptions.from_sources(sources.declaration, sources.lock, ports=[8000])
    report = run_doctor(options, on_event=print, cancel=threading.Event())   # HazardChecked, HostFinished, ...
    report.verdict, report.failed, report.to_json()   # schema execsys.doctor/1

Findings are typed (``model.Finding(level, text, id)``, ids like ``lost-mode-bits/core-filemode-false``)
and folded into each hazard's status by ``model.fold``; ``[doctor] accept = ["<id>"]`` silences one
kind of finding, which stays visible, marked as accepted.

Everything under this package except ``remote`` and ``render`` is stdlib-only at
import time: it is also shipped, in memory, to hosts checked over SSH.
"""
