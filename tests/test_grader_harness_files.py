"""``execsys probe grader --cases`` on what real harnesses wrote: lm-eval samples files, Inspect logs.

Real lm-evaluation-harness and Inspect AI runs against the suite's llama.cpp server write the files
(the harness venv of ``tests/fixtures/harness.py``); the grader probe then grades their outputs again,
each case named by the key ``compare`` gives its outcome. Inspect logs are read with Inspect's own
reader, so those probes run from the harness environment (``execsys[inspect]``), as ``compare``'s do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from execsys import trust
from tests.fixtures.common import run_cli
from tests.fixtures.harness import QUESTIONS

pytest_plugins = ["tests.fixtures.harness"]

# Each case starts real harness processes (lm-eval imports torch and datasets: ~45 s a run on 2 cores).
pytestmark = pytest.mark.timeout(900)

INSPECT_LOG = Path(__file__).parent / "data" / "grader" / "2026-12-01T13-39-52-00-00_tiny-inspect_SzKHAxwn3pAFBQF279rDnP.eval"

RECORD_PAYLOADS = """\
import json, sys
case = json.loads(sys.stdin.read())
with open("payloads.jsonl", "a") as log:
    log.write(json.dumps(case) + "\\n")
print("1" if str(case["expected"]) in case["output"] else "0")
"""

OUTCOME_KEYS = """
import json, sys
from execsys.harnesses.inspect import ADAPTER
print(json.dumps(sorted(ADAPTER.read(__import__("pathlib").Path(sys.argv[1])).outcomes)))
"""

COMPLETIONS = """
import json, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(sys.argv[1])
print(json.dumps({s.id: [s.input, s.output.completion, s.target] for s in log.samples}))
"""


def _declare_graders(root: Path, judge_url: str, alias: str) -> None:
    (root / "grade.py").write_text(RECORD_PAYLOADS)
    with open(root / "execsys.toml", "a") as toml:
        toml.write(f'\n[grader]\ncommand = "{sys.executable} grade.py"\n\n'
                   f'[grader.judge]\nendpoint = "{judge_url}"\nmodel = "{alias}"\nmax_tokens = 8\ntemperature = 0\n')
    trust.trust(root / "execsys.toml")  # the test's own declaration: its grader command may run


def _payloads(root: Path) -> list[dict]:
    path = root / "payloads.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    path.unlink(missing_ok=True)
    return [json.loads(line) for line in lines]


def _harness_python(project, code: str, *args: str) -> str:
    proc = subprocess.run([str(project.venv / "bin" / "python"), "-c", code, *args], capture_output=True, text=True,
                          timeout=120, cwd=project.root, env=project.env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _inspect_probe(project, ledger: Path, log: Path, *extra: str) -> subprocess.CompletedProcess:
    """``execsys probe grader`` from the harness environment, where Inspect's log reader is."""
    return subprocess.run([str(project.venv / "bin" / "execsys"), "probe", "grader", "--cases", str(log),
                           "--via", "command", "--json", *extra], capture_output=True, text=True,
                          cwd=project.root, env=project.env(EXECSYS_LEDGER=str(ledger)), timeout=300)


def _check_inspect_cases(project, ledger: Path, log: Path) -> None:
    graded = _inspect_probe(project, ledger, log)
    assert graded.returncode == 0, graded.stderr[-3000:]
    report = json.loads(graded.stdout)
    assert (report["m"], report["n"]) == (4, 4)
    seen = _payloads(project.root)[:4]
    keys = json.loads(_harness_python(project, OUTCOME_KEYS, str(log)))
    assert sorted(p["id"] for p in seen) == keys == [f"tiny_inspect/q{i}" for i in range(4)]
    samples = json.loads(_harness_python(project, COMPLETIONS, str(log)))
    assert {p["id"]: [p["prompt"], p["output"], p["expected"]] for p in seen} == \
        {f"tiny_inspect/{sid}": value for sid, value in samples.items()}


def test_a_checked_in_inspect_log_is_graded_from_the_harness_environment(eval_project, ledger_path: Path) -> None:
    project = eval_project
    _declare_graders(project.root, project.server.base_url, project.server.alias)
    _check_inspect_cases(project, ledger_path, INSPECT_LOG)


def test_real_lm_eval_samples_and_inspect_logs_are_graded_again(eval_project, ledger_path: Path) -> None:
    project = eval_project
    _declare_graders(project.root, project.server.base_url, project.server.alias)
    env = project.env(EXECSYS_LEDGER=str(ledger_path))
    lm_eval = subprocess.run(project.lm_eval_argv("out"), capture_output=True, text=True, cwd=project.root, env=env,
                             timeout=600)
    assert lm_eval.returncode == 0, lm_eval.stderr[-3000:]
    [samples] = (project.root / "out").glob("*/samples_tiny_qa_*.jsonl")
    [results] = samples.parent.glob("results_*.json")

    # the real llama.cpp server judges lm-eval's outputs (a judge at temperature 0 within one session)
    judged = run_cli("probe", "grader", "--cases", str(samples), "--json", cwd=project.root, env=env, timeout=300)
    assert judged.returncode == 0, judged.stderr
    report = judged.json()
    assert (report["m"], report["n"], report["grader"]["via"]) == (6, 6, "judge")
    # a grader command sees every document: compare's key, the prompt lm-eval sent, what its metric scored
    graded = run_cli("probe", "grader", "--cases", str(samples), "--via", "command", "--json", cwd=project.root,
                     env=env)
    assert graded.returncode == 0, graded.stderr
    seen = _payloads(project.root)[:6]
    from execsys.harnesses.lm_eval import ADAPTER

    assert [p["id"] for p in seen] == sorted(ADAPTER.read(results).outcomes, key=lambda k: int(k.split("/")[1]))
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [(p["prompt"], p["output"], p["expected"]) for p in seen] == \
        [(f"Q: {QUESTIONS[s['doc_id']]}\nA:", s["filtered_resps"][0], s["target"]) for s in lines]

    for log_dir, extra in (("logs", ()), ("logs-json", ("--log-format", "json"))):
        inspect = subprocess.run(project.inspect_argv(log_dir, *extra), capture_output=True, text=True,
                                 cwd=project.root, env=env, timeout=400)
        assert inspect.returncode == 0, inspect.stderr[-3000:]
        [log] = (project.root / log_dir).glob("*.eval" if not extra else "*.json")
        _check_inspect_cases(project, ledger_path, log)
