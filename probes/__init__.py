"""Reproducibility-boundary probes: agreement rates across one axis at a time."""
