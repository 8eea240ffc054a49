"""The layered-environment doctor: nine hazards checked before any run counts.

Public API (the CLI and the TUI are both thin faces over it)::

    from execsys.doctor.runner import DoctorOptions, run_doctor, run_hazard
    from execsys.doctor.registry import HAZARDS      # ordered (id, title, module)

    options = DoctorOptions.from_declaration(execsys.declaration.load(), ports=[8000])
    report = run_doctor(options, on_result=lambda host, result: ..., cancel=threading.Event())
    report.verdict, report.failed, report.to_json()   # schema execsys.doctor/1

Everything under this package except ``remote`` and ``render`` is stdlib-only at
import time: it is also shipped, in memory, to hosts checked over SSH.
"""
