"""The layered-environment doctor: nine hazards checked before any run counts."""
