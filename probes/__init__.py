"""Reproducibility-boundary probes: agreement rates across one axis at a time.

A probe sends the same cases twice (or N times) across one axis -- a session, a restart,
concurrent load, hosts, a redeploy -- and reports m of n cases agreeing, with a Wilson 95%
interval, never a pass/fail label.

Modules: ``cases`` (JSON Lines, ``--n`` selection, pass orders), ``client`` (``EndpointClient``,
``CommandClient``, ``Completion``), ``compare`` (digests, extractors, first divergence),
``runner`` (``ProbeOptions.from_sources``, ``run_probe``, ``ProbeInterrupted``), ``events`` (the
typed events a face receives), ``agreement`` (the one fold: cases -> m, n, CI, flipped, errored),
``record`` (``ProbeRecord``, schema ``execsys.probe/1``), ``merge`` (``execsys probe merge``),
``render`` (human output, imported only by the CLI), ``axes`` (``AXES``: one module per axis).
"""
