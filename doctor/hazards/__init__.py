"""One module per hazard, each with ``ID``, ``TITLE`` and ``check(ctx) -> HazardResult``.

Listed, in order, in ``execsys.doctor.registry``. A check reads and never writes;
it runs programs only through ``files.bounded_run`` (timeout, capped output,
process-group kill) and must work with the standard library alone, because it
also runs on remote hosts where only python3 is guaranteed.
"""
