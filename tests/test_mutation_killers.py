"""Tests written for mutants that survived scripts/mutation.sh: each pins an answer the core gives."""

from __future__ import annotations
