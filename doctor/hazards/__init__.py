"""One module per hazard, each with ``ID``, ``TITLE``, ``FINDINGS`` and ``check(ctx) -> HazardResult``.

A check collects typed findings (``model.Finding(level, text, "<ID>/<kind>")``, one kind per
entry of ``FINDINGS``: never a path or a host in the id) and returns ``model.fold(...)`` of them,
passing ``ctx.accept`` -- so the status rule and ``[doctor] accept`` are the same for all nine.

Listed, in order, in ``execsys.doctor.registry``. A check reads and never writes;
it runs programs only through ``files.bounded_run`` (timeout, capped output,
process-group kill) and must work with the standard library alone, because it
also runs on remote hosts where only python3 is guaranteed.
"""
