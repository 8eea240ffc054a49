"""Any other harness: results named with ``--result PATH|GLOB``, digested and recorded as they are.

execsys cannot put the identity inside a file format it does not know, so the sidecar beside
the file is the only record; ``compare`` reads such a file when it is an ``execsys.result/1``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from execsys.errors import InputError
from execsys.harnesses.base import HarnessResult, script_name

NAME = "other"


class OtherHarness:
    name = NAME

    def matches(self, argv: Sequence[str]) -> bool:
        return True

    def task(self, argv: Sequence[str]) -> str:
        return script_name(argv)

    def prepare(self, argv: Sequence[str], identity_id: str, run_id: str) -> list[str]:
        return list(argv)

    def output_dirs(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> list[Path]:
        return []

    def owns(self, path: Path) -> bool:
        return True

    def is_primary(self, path: Path) -> bool:
        return True

    def read(self, path: Path) -> HarnessResult:
        raise InputError(f"{path}: not a result format execsys reads (lm-eval results_*.json, an Inspect "
                         "log, or execsys.result/1)")


ADAPTER = OtherHarness()
