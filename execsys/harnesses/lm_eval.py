"""EleutherAI lm-evaluation-harness: the identity goes into lm-eval's own results JSON.

lm-eval has no plugin hook, but ``--metadata`` (repeatable; each one merged into the last by
lm-eval's ``MergeDictAction``) is copied into every task's config and written back at
``configs.<task>.metadata`` in ``results_<time>.json``. So ``execsys run`` appends one more
``--metadata '{"execsys": {"identity": ID, "run": RUN_ID}}'``: a ``--metadata`` the user gave stays
and is merged, never replaced. Results land under ``--output_path`` (``-o``) as
``<model>/results_<time>.json`` and, with ``--log_samples``, ``samples_<task>_<time>.jsonl`` beside
it: one line per document with ``doc_id`` and one key per metric. ``compare`` reads a case's
outcome as the task's first metric in those lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from execsys.errors import InputError
from execsys.harnesses.base import HarnessResult, flag_value, program_words

NAME = "lm-eval"
PROGRAMS = {"lm_eval", "lm-eval"}
RESULTS_NAME = re.compile(r"^results_.*\.json$")
SAMPLES_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[^_]*)\.jsonl$")


class LmEvalHarness:
    name = NAME

    def matches(self, argv: Sequence[str]) -> bool:
        return any(word in PROGRAMS for word in program_words(argv))

    def prepare(self, argv: Sequence[str], identity_id: str, run_id: str) -> list[str]:
        metadata = json.dumps({"execsys": {"identity": identity_id, "run": run_id}}, sort_keys=True)
        return [*argv, "--metadata", metadata]

    def output_dirs(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> list[Path]:
        value = flag_value(argv, "--output_path", "-o")
        if not value:
            return []
        path = Path(value).expanduser()
        path = path if path.is_absolute() else cwd / path
        # `--output_path results.json` names a file: lm-eval writes beside it
        return [path.parent if path.suffix == ".json" else path]

    def owns(self, path: Path) -> bool:
        if SAMPLES_NAME.match(path.name):
            return True
        if not RESULTS_NAME.match(path.name):
            return False
        head = _json_object(path)
        return head is not None and "results" in head and "configs" in head

    def is_primary(self, path: Path) -> bool:
        return bool(RESULTS_NAME.match(path.name))

    def read(self, path: Path) -> HarnessResult:
        if SAMPLES_NAME.match(path.name):
            raise InputError(f"{path}: a samples file; compare the results_*.json beside it")
        data = _json_object(path)
        if data is None or "results" not in data or "configs" not in data:
            raise InputError(f"{path}: not an lm-eval results file (no 'results' and 'configs')")
        configs = data.get("configs") or {}
        embedded = None
        for config in configs.values():
            found = ((config or {}).get("metadata") or {}).get("execsys")
            if isinstance(found, dict) and found.get("identity"):
                embedded = {"identity": str(found["identity"]), "run": found.get("run")}
                break
        outcomes: dict[str, Any] = {}
        notes: list[str] = []
        stamp = _stamp(path)
        tasks = sorted(configs) or sorted(data.get("results") or {})
        for task in tasks:
            samples = _samples_file(path, task, stamp)
            if samples is None:
                notes.append(f"no samples_{task}_*.jsonl beside {path.name} (run lm-eval with --log_samples)")
                continue
            metric = _first_metric(configs.get(task) or {}, data, task)
            for line_no, line in enumerate(samples.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    sample = json.loads(line)
                except ValueError as exc:
                    raise InputError(f"{samples}:{line_no}: not JSON ({exc})") from None
                if metric is None or metric not in sample:
                    raise InputError(f"{samples}:{line_no}: no value for metric {metric!r}")
                outcomes[f"{task}/{sample.get('doc_id')}"] = sample[metric]
        return HarnessResult(path, NAME, outcomes, embedded, notes)


def _json_object(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _stamp(results: Path) -> str:
    return results.name[len("results_"):-len(".json")]


def _samples_file(results: Path, task: str, stamp: str) -> Path | None:
    exact = results.with_name(f"samples_{task}_{stamp}.jsonl")
    if exact.is_file():
        return exact
    candidates = sorted(results.parent.glob(f"samples_{glob_escape(task)}_*.jsonl"))
    return candidates[-1] if candidates else None


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _first_metric(config: dict[str, Any], data: dict[str, Any], task: str) -> str | None:
    """The task's first declared metric (``metric_list[0].metric``), else the first it reported."""
    metrics = config.get("metric_list") or []
    if metrics and isinstance(metrics[0], dict) and metrics[0].get("metric"):
        return str(metrics[0]["metric"])
    higher = (data.get("higher_is_better") or {}).get(task) or {}
    return next(iter(higher), None)


ADAPTER = LmEvalHarness()
