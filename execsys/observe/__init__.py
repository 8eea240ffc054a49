"""Observers for the execution-system components: what this machine shows, beside what was declared.

One module per component family (artifact, runtime, hardware, harness, environment); each
returns plain JSON-ready dicts of stable facts, redacted, so that the identity id computed
over them is the same for the same system on every run.
"""
