"""EleutherAI lm-evaluation-harness: the identity goes into lm-eval's own results JSON.

lm-eval has no plugin hook, but ``--metadata`` (repeatable; each one merged into the last by
lm-eval's ``MergeDictAction``) is copied into every task's config and written back at
``configs.<task>.metadata`` in ``results_<time>.json``. So ``execsys run`` appends one more
``--metadata '{"execsys": {"identity": ID, "run": RUN_ID}}'``: a ``--metadata`` the user gave stays
and is merged, never replaced. Results land under ``--output_path`` (``-o``) as
``<model>/results_<time>.json`` and, with ``--log_samples``, ``samples_<task>_<time>.jsonl`` beside
it: one line per document with ``doc_id`` and one key per metric. ``compare`` reads a case's
outcome as the task's first metric in those lines; ``probe grader`` reads the same lines as the
outputs to grade again (:func:`graded_samples`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from execsys.errors import InputError
from execsys.fsutil import RECORD_FILE_LIMIT, read_bounded, read_json_object
from execsys.harnesses.base import HarnessResult, SampleOutput, flag_value, program_words

NAME = "lm-eval"
PROGRAMS = {"lm_eval", "lm-eval"}
RESULTS_NAME = re.compile(r"^results_.*\.json$")
SAMPLES_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[^_]*)\.jsonl$")


class LmEvalHarness:
    name = NAME

    def matches(self, argv: Sequence[str]) -> bool:
        return any(word in PROGRAMS for word in program_words(argv))

    def task(self, argv: Sequence[str]) -> str:
        return flag_value(argv, "--tasks", "-t") or "(no --tasks)"

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
        head = read_json_object(path, "lm-eval results file")
        return head is not None and "results" in head and "configs" in head

    def is_primary(self, path: Path) -> bool:
        return bool(RESULTS_NAME.match(path.name))

    def read(self, path: Path) -> HarnessResult:
        """The per-case outcomes of a results file. Any JSON shape is read or refused in one line: a
        field of an unexpected type (``"configs": [1]``, ``"metadata": "x"``) is taken as absent, a
        task whose name cannot be a file name has no samples, a samples line that is not a JSON
        object with the metric is an InputError naming the line."""
        if SAMPLES_NAME.match(path.name):
            raise InputError(f"{path}: a samples file; compare the results_*.json beside it")
        data = read_json_object(path, "lm-eval results file")
        if data is None or "results" not in data or "configs" not in data:
            raise InputError(f"{path}: not an lm-eval results file (no 'results' and 'configs')")
        configs = _object(data.get("configs"))
        embedded = None
        for config in configs.values():
            found = _object(_object(config).get("metadata")).get("execsys")
            if isinstance(found, dict) and found.get("identity"):
                embedded = {"identity": str(found["identity"]), "run": found.get("run")}
                break
        outcomes: dict[str, Any] = {}
        notes: list[str] = []
        sources: list[Path] = []
        stamp = _stamp(path)
        tasks = sorted(configs) or sorted(_object(data.get("results")))
        for task in tasks:
            samples = _samples_file(path, task, stamp)
            if samples is None:
                notes.append(f"no samples_{_shown(task)}_*.jsonl beside {path.name} (run lm-eval with --log_samples)")
                continue
            sources.append(samples)
            metric = _first_metric(_object(configs.get(task)), data, task)
            if metric is None:
                raise InputError(f"{path}: task {_shown(task)} names no metric (no configs.<task>.metric_list, "
                                 "no higher_is_better.<task>): its samples cannot be scored")
            for line_no, line in enumerate(_sample_lines(samples), 1):
                if not line.strip():
                    continue
                try:
                    sample = json.loads(line)
                except (ValueError, RecursionError) as exc:
                    raise InputError(f"{samples}:{line_no}: not JSON ({exc})") from None
                if not isinstance(sample, dict):
                    raise InputError(f"{samples}:{line_no}: not an lm-eval sample (a JSON object per line)")
                if metric not in sample:
                    raise InputError(f"{samples}:{line_no}: no value for metric {metric!r}")
                outcomes[f"{task}/{sample.get('doc_id')}"] = sample[metric]
        return HarnessResult(path, NAME, outcomes, embedded, notes, sources)


def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one: a field of another shape is absent."""
    return value if isinstance(value, dict) else {}


def _shown(text: str) -> str:
    """A task name from the file, for one line of a note."""
    return " ".join(text.split())[:120]


def graded_samples(path: Path) -> list[SampleOutput]:
    """A ``samples_<task>_<time>.jsonl`` file as the outputs lm-eval graded, one per document: id
    ``<task>/<doc_id>`` (the key :meth:`LmEvalHarness.read` gives its outcome; ``<task>/<doc_id>:<filter>``
    when the task scored its responses through several filters), the prompt lm-eval sent (the first
    request's context), the response its metric scored (``filtered_resps``, else the raw ``resps``)
    and the document's ``target``. A task that generated no text (loglikelihood, multiple choice) has
    nothing for a grader to judge: InputError naming the line."""
    found = SAMPLES_NAME.match(path.name)
    if found is None:
        raise InputError(f"{path}: not an lm-eval samples file (samples_<task>_<time>.jsonl)")
    task = found.group("task")
    lines = _sample_lines(path)
    rows: list[tuple[Any, str, str, Any, Any]] = []
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{line_no}: not JSON ({exc})") from None
        if not isinstance(sample, dict) or "doc_id" not in sample:
            raise InputError(f"{path}:{line_no}: not an lm-eval sample (no 'doc_id')")
        prompt, generated = _first_request(sample.get("arguments"))
        output = _scored_response(sample) if generated else None
        if output is None:
            raise InputError(f"{path}:{line_no}: doc {sample['doc_id']}: its response is not generated text "
                             "(a loglikelihood or multiple-choice task): nothing for a grader to judge")
        filt = sample.get("filter")
        filt = filt if filt is None or isinstance(filt, str) else json.dumps(filt, sort_keys=True)  # hashable
        rows.append((sample["doc_id"], prompt, output, sample.get("target"), filt))
    several = len({row[4] for row in rows}) > 1
    return [SampleOutput(f"{task}/{doc}" + (f":{filt}" if several else ""), prompt, output, target)
            for doc, prompt, output, target, filt in rows]


def _sample_lines(path: Path) -> list[str]:
    """A samples file's lines, read bounded (a FIFO or device named like one is refused, never read
    forever); InputError for a file that is missing, unreadable or not UTF-8."""
    try:
        return read_bounded(path, RECORD_FILE_LIMIT, "lm-eval samples file").decode("utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"{path}: not found") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"lm-eval samples file {path}: not UTF-8 text (byte {exc.start})") from None


def _first_request(arguments: Any) -> tuple[str, bool]:
    """The context of a sample's first request and whether it asked for generated text (its second
    argument is generation kwargs, not a continuation to score): ``{"gen_args_0": {"arg_0": CONTEXT,
    "arg_1": {...}}}`` as lm-eval 0.4 logs it, or ``[[CONTEXT, {...}], ...]``."""
    first: Any = None
    if isinstance(arguments, dict) and arguments:
        first = next(iter(arguments.values()))
        first = [first.get(f"arg_{i}") for i in range(len(first))] if isinstance(first, dict) else None
    elif isinstance(arguments, list) and arguments:
        first = arguments[0]
    if not isinstance(first, list) or not first:
        return "", False
    context = first[0] if isinstance(first[0], str) else ""
    return context, len(first) > 1 and isinstance(first[1], dict)


def _scored_response(sample: dict[str, Any]) -> str | None:
    """The text lm-eval's metric scored: the first filtered response, else the first raw one."""
    for field_name, depth in (("filtered_resps", 1), ("resps", 2)):
        value: Any = sample.get(field_name)
        for _ in range(depth):
            value = value[0] if isinstance(value, list) and value else None
        if isinstance(value, list) and value and isinstance(value[0], str):  # several generations per document
            value = value[0]
        if isinstance(value, str):
            return value
    return None


def _stamp(results: Path) -> str:
    return results.name[len("results_"):-len(".json")]


def _samples_file(results: Path, task: str, stamp: str) -> Path | None:
    if not task or "/" in task or "\0" in task or task in (".", ".."):
        return None  # not a name lm-eval could have written a samples file under
    exact = results.with_name(f"samples_{task}_{stamp}.jsonl")
    if exact.is_file():
        return exact
    # the glob for task ``arc`` also matches ``samples_arc_easy_<time>.jsonl``: only a name whose task
    # part is this task exactly is this task's (the stamp has no ``_``, so the task is all before it)
    candidates = sorted(path for path in results.parent.glob(f"samples_{glob_escape(task)}_*.jsonl")
                        if (named := SAMPLES_NAME.match(path.name)) and named["task"] == task)
    return candidates[-1] if candidates else None


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _first_metric(config: dict[str, Any], data: dict[str, Any], task: str) -> str | None:
    """The task's first declared metric (``metric_list[0].metric``), else the first it reported."""
    metrics = config.get("metric_list")
    if isinstance(metrics, list) and metrics and isinstance(metrics[0], dict) and metrics[0].get("metric"):
        return str(metrics[0]["metric"])
    higher = _object(_object(data.get("higher_is_better")).get(task))
    return next(iter(higher), None)


ADAPTER = LmEvalHarness()


def choice_gaps(path: Path, case_ids: Sequence[str]) -> dict[str, float]:
    """For the cases ``<task>/<doc_id>`` of the results file ``path`` that lm-eval scored by loglikelihood
    (a multiple-choice task: ``filtered_resps`` holds one ``[loglikelihood, is_greedy]`` per choice), the
    gap in nats between the best choice and the runner-up: how near the choice came to going the other
    way. Cases scored on generated text have no gap and are left out. Lines are read one at a time."""
    wanted: dict[str, set[str]] = {}
    for case in case_ids:
        task, _, doc = case.rpartition("/")
        wanted.setdefault(task, set()).add(doc)
    gaps: dict[str, float] = {}
    stamp = _stamp(path)
    for task, docs in wanted.items():
        samples = _samples_file(path, task, stamp) if task else None
        if samples is None:
            continue
        with samples.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    sample = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(sample, dict) or str(sample.get("doc_id")) not in docs:
                    continue
                gap = _top_two_gap(sample.get("filtered_resps"))
                if gap is not None:
                    gaps[f"{task}/{sample.get('doc_id')}"] = gap
    return gaps


def _top_two_gap(responses: Any) -> float | None:
    """best - second-best loglikelihood among ``[[loglikelihood, is_greedy], ...]`` (values may be strings)."""
    if not isinstance(responses, list) or len(responses) < 2:
        return None
    values = []
    for response in responses:
        if not isinstance(response, (list, tuple)) or not response or isinstance(response[0], bool):
            return None
        try:
            values.append(float(response[0]))
        except (TypeError, ValueError):
            return None
    first, second = sorted(values, reverse=True)[:2]
    return first - second
