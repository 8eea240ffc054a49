"""Inspect AI (UK AISI): the identity goes into the eval log's metadata through execsys's hook.

``inspect eval`` writes one log per task under ``--log-dir`` (``$INSPECT_LOG_DIR``, else
``./logs``): a ``.eval`` zip, or ``.json`` with ``--log-format json``. The hook in
:mod:`execsys.harnesses.inspect_hook` (installed with ``execsys[inspect]``, found through the
``inspect_ai`` entry point) writes ``{"execsys": {...}}`` into the eval's metadata when
``EXECSYS_LOCK`` is set, so ``execsys run`` changes nothing on the command line. Logs are read back
with Inspect's own reader; a sample's outcome is its first score's value (``C``/``I`` as
right/wrong), keyed ``<task>/<id>`` plus ``#<epoch>`` past the first epoch. ``probe grader`` reads
the same samples as the outputs to grade again (:func:`graded_samples`).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from execsys.errors import InputError
from execsys.fsutil import read_head, require_regular
from execsys.harnesses.base import HarnessResult, SampleOutput, flag_value, program_words

NAME = "inspect"
MISSING_EXTRA = ("reading Inspect logs needs Inspect AI installed here: pip install 'execsys[inspect]' "
                 "(or run execsys from the environment that has inspect_ai)")


class InspectHarness:
    name = NAME

    def matches(self, argv: Sequence[str]) -> bool:
        words = program_words(argv)
        return any(w == "inspect" or w.startswith("inspect_ai") for w in words) and \
            any(w in ("eval", "eval-set", "eval-retry") for w in (*words, *argv))

    def task(self, argv: Sequence[str]) -> str:
        """``inspect eval TASK ...``: the argument after the subcommand (a file, ``file@task`` or a name)."""
        words = list(argv)
        for i, word in enumerate(words[:-1]):
            if word in ("eval", "eval-set", "eval-retry") and not words[i + 1].startswith("-"):
                return words[i + 1]
        return "(no task named)"

    def prepare(self, argv: Sequence[str], identity_id: str, run_id: str) -> list[str]:
        return list(argv)  # the hook reads EXECSYS_LOCK and EXECSYS_RUN_ID from the environment

    def output_dirs(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> list[Path]:
        value = flag_value(argv, "--log-dir") or env.get("INSPECT_LOG_DIR") or "./logs"
        path = Path(value).expanduser()
        return [path if path.is_absolute() else cwd / path]

    def owns(self, path: Path) -> bool:
        if path.suffix not in (".eval", ".json"):
            return False
        try:
            # through the bounded reader: a FIFO named like a log is not one, and never blocks
            head_bytes = read_head(path, 4096, "Inspect log")
        except (OSError, InputError):
            return False
        if path.suffix == ".eval":
            return zipfile.is_zipfile(path)
        head = head_bytes.decode("utf-8", "ignore")
        return '"eval"' in head and ('"version"' in head or '"status"' in head) and '"results"' not in head[:20]

    def is_primary(self, path: Path) -> bool:
        return True

    def read(self, path: Path) -> HarnessResult:
        log = _read_log(path)
        metadata = dict(log.eval.metadata or {})
        metadata.update(getattr(log, "metadata", None) or {})  # edits recorded in log_updates
        found = metadata.get("execsys")
        embedded = ({"identity": str(found["identity"]), "run": found.get("run")}
                    if isinstance(found, dict) and found.get("identity") else None)
        outcomes: dict[str, Any] = {}
        for sample in log.samples or []:
            if not sample.scores:
                continue
            score = next(iter(sample.scores.values()))
            outcomes[sample_key(log, sample)] = score_outcome(score.value)
        return HarnessResult(path, NAME, outcomes, embedded)


def graded_samples(path: Path) -> list[SampleOutput]:
    """An Inspect log's samples as the outputs its scorer graded: id ``<task>/<id>`` (``#<epoch>`` past
    the first epoch: the key :meth:`InspectHarness.read` gives the outcome), the sample's input (a chat
    input as its messages' role and text in JSON), the model's completion and the sample's target.
    A sample that errored has no output to grade and is left out."""
    log = _read_log(path)
    samples: list[SampleOutput] = []
    for sample in log.samples or []:
        if getattr(sample, "error", None) is not None or sample.output is None:
            continue
        given = sample.input
        prompt = given if isinstance(given, str) else json.dumps(
            [{"role": message.role, "content": message.text} for message in given], ensure_ascii=False)
        samples.append(SampleOutput(sample_key(log, sample), prompt, sample.output.completion, sample.target))
    return samples


def sample_key(log: Any, sample: Any) -> str:
    """``<task>/<sample id>``, plus ``#<epoch>`` past the first epoch: one case's name in every reader."""
    return f"{log.eval.task}/{sample.id}" + (f"#{sample.epoch}" if sample.epoch and sample.epoch > 1 else "")


def _read_log(path: Path) -> Any:
    """The whole log, through Inspect's own reader (execsys[inspect]); InputError when it cannot be read."""
    try:
        from inspect_ai.log import read_eval_log  # pyright: ignore[reportMissingImports]  (execsys[inspect])
    except ImportError:
        raise InputError(f"{path}: {MISSING_EXTRA}") from None
    try:
        require_regular(path, "Inspect log")  # Inspect's own reader would block on a FIFO
    except FileNotFoundError:
        raise InputError(f"{path}: not found") from None
    try:
        return read_eval_log(str(path))
    except Exception as exc:  # noqa: BLE001 - Inspect raises many kinds for a bad file
        raise InputError(f"{path}: not a readable Inspect log ({type(exc).__name__}: {exc})") from None


def score_outcome(value: Any) -> Any:
    """Inspect's ``C``/``I`` as right/wrong; other values (numbers, partial credit) unchanged."""
    if value == "C":
        return True
    if value == "I":
        return False
    return value


ADAPTER = InspectHarness()
