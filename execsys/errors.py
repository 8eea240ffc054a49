"""Exit codes and the errors that become them.

stdout carries data, stderr carries diagnostics; every command ends in one of
these codes so that scripts can branch on them.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FINDING = 1  # drift, a hazard, instability: the tool worked and found something
    USAGE = 2  # bad flags or bad input: nothing was measured
    INTERNAL = 3  # a bug in execsys itself (run with --debug for the traceback)


class ExecsysError(Exception):
    """A problem with the user's input or environment, reported as one line, exit 2."""

    exit_code: ExitCode = ExitCode.USAGE


class UsageError(ExecsysError):
    """Flags or arguments that do not make sense together."""


class InputError(ExecsysError):
    """A file, directory, endpoint or record that cannot be used as given."""
