"""Evaluation harnesses execsys knows by name: how to find their results and read them back.

One module per harness (``lm_eval``, ``inspect``, ``other``) and one registry (``registry``).
An adapter recognises the harness in a command line (so ``execsys run`` can put the identity into
the harness's own output and look where it writes), recognises its result files, and reads a
result back as per-case outcomes plus whatever identity it carries (for ``execsys compare``).
The Inspect hook (``inspect_hook``) runs inside the user's Inspect process and imports nothing
from execsys but this package's standard-library parts.
"""
