"""The execsys Textual app: doctor, identity, probes, scope and plan in one place."""
