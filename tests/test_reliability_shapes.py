"""Inputs of unexpected shape: a finding or one line, never an internal error or a silent pass.

``compare`` reads an lm-eval ``results_*.json`` and the ``samples_<task>_*.jsonl`` beside it;
``probe grader`` reads the samples. Fields of an unexpected type (``"configs": [1]``,
``"metadata": "x"``), samples that are not UTF-8 or not JSON objects, task names that cannot be
file names, unhashable ``filter`` values: each is read as absent or refused with one line, exit 2
-- they were AttributeError, TypeError, UnicodeDecodeError or ValueError (exit 3) before. A
``fleet --expected-digest`` that is no digest is refused, not matched against nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

STAMP = "2026-12-01T10-00-00"
GOOD = {"results": {"gsm8k": {"exact_match,none": 0.5}},
        "configs": {"gsm8k": {"metric_list": [{"metric": "exact_match"}]}}}
SAMPLE = b'{"doc_id": 0, "exact_match": 1}\n'


def _side(root: Path, name: str, results: object, samples: bytes, task: str = "gsm8k") -> str:
    side = root / name
    side.mkdir()
    (side / f"results_{STAMP}.json").write_text(json.dumps(results))
    (side / f"samples_{task}_{STAMP}.jsonl").write_bytes(samples)
    return str(side / f"results_{STAMP}.json")


@pytest.mark.parametrize(("results", "samples", "expected"), [
    ({"results": {"gsm8k": {}}, "configs": [1]}, SAMPLE, "names no metric"),
    ({**GOOD, "configs": {"gsm8k": {"metadata": "x", "metric_list": [{"metric": "exact_match"}]}}}, SAMPLE, None),
    ({**GOOD, "configs": {"gsm8k": {"metadata": {"execsys": "x"}, "metric_list": "x"}}}, SAMPLE, "names no metric"),
    ({"results": [1], "configs": {"gsm8k": 5}, "higher_is_better": [1]}, SAMPLE, "names no metric"),
    ({**GOOD, "higher_is_better": {"gsm8k": 3}, "configs": {"gsm8k": {}}}, SAMPLE, "names no metric"),
    (GOOD, b'{"doc_id": 0, "exact_match": 1, "x": "\xff"}\n', "not UTF-8"),
    (GOOD, b'"exact_match"\n', "not an lm-eval sample"),
    (GOOD, b"[1]\n", "not an lm-eval sample"),
    (GOOD, b'{"doc_id": [1], "exact_match": {"a": NaN}}\n', None),
    ({"results": {}, "configs": {"a/b": {}, "..": {}, "[": {}}}, SAMPLE, "no per-case outcomes"),
], ids=["configs-list", "metadata-str", "metric_list-str", "results-list", "higher_is_better-int",
        "samples-not-utf8", "sample-a-string", "sample-a-list", "odd-values", "task-names-not-files"])
def test_compare_reads_any_lm_eval_shape_or_refuses_in_one_line(cli, tmp_path: Path, ledger_path: Path,
                                                                results: object, samples: bytes,
                                                                expected: str | None) -> None:
    a = _side(tmp_path, "a", results, samples)
    b = _side(tmp_path, "b", GOOD, SAMPLE)
    result = cli("compare", a, b, cwd=tmp_path, timeout=60)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    if expected is None:
        assert result.returncode in (0, 1), result.stderr  # compared: a finding, descriptive or not
    else:
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert expected in line, line


def test_probe_grader_reads_samples_whose_filter_is_not_a_string(cli, tmp_path: Path, ledger_path: Path) -> None:
    (tmp_path / "execsys.toml").write_text('[grader]\ncommand = "echo correct"\n')
    samples = tmp_path / f"samples_t_{STAMP}.jsonl"
    samples.write_text('{"doc_id": 0, "arguments": [["ctx", {}]], "filtered_resps": ["a"], "filter": ["x"]}\n'
                       '{"doc_id": 1, "arguments": [["ctx", {}]], "filtered_resps": ["b"], "filter": "y"}\n')
    result = cli("probe", "grader", "--trust", "--cases", str(samples), "--json", cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.json()["n"] == 2


@pytest.mark.parametrize("digest", ["", "zz", "A" * 63, "\x1b]0;x\x07"])
def test_fleet_expected_digest_that_is_no_digest_is_refused(cli, tmp_path: Path, ledger_path: Path,
                                                            digest: str) -> None:
    """A digest the fleet is held to that cannot be one matched no host, silently ("the fleet
    agrees", exit 0); now refused as ``digest --expect`` refuses it, the value shown escaped."""
    assert cli("pin", cwd=tmp_path, timeout=60).returncode == 0
    result = cli("fleet", "execsys.lock.json", "--expected-digest", digest, cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stdout
    [line] = result.stderr.strip().splitlines()
    assert "not a BLAKE3 hex digest" in line and "\x1b" not in line
    ok = cli("fleet", "execsys.lock.json", "--expected-digest", "AF" + "0" * 62, cwd=tmp_path, timeout=60)
    assert ok.returncode in (0, 1), ok.stderr  # upper case is a digest too
