"""The files in ``examples/`` work as shipped: the declaration loads and declares what it says, the
cases load with their expectations, and the Inspect task runs clean under ``execsys run`` against the
suite's real llama.cpp server (the lm-eval task runs in ``tests/test_quickstart.py``, as the
quickstart runs it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.common import run_cli

pytest_plugins = ["tests.fixtures.harness"]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_example_declaration_declares_the_local_llama_cpp_server_and_its_restart():
    from execsys import declaration

    loaded = declaration.parse((EXAMPLES / "execsys.toml").read_text(), EXAMPLES / "execsys.toml")
    assert not loaded.warnings, loaded.warnings
    assert loaded.get("runtime", "engine") == "llama-cpp-python"
    assert loaded.get("runtime", "endpoint") == "http://127.0.0.1:8000/v1"
    assert loaded.get("runtime", "restart") == "bash llama-server.sh restart"
    assert loaded.get("artifact", "path") == "models/tiny.gguf"
    assert (EXAMPLES / "llama-server.sh").exists() and (EXAMPLES / "make_tiny_model.py").exists()


def test_the_example_cases_load_each_with_an_expectation():
    from execsys.probes.cases import load_cases

    cases = list(load_cases(EXAMPLES / "cases.jsonl"))
    assert len(cases) == 20 and len({c.id for c in cases}) == 20
    assert all(c.prompt and c.expected not in (None, "") and c.max_tokens for c in cases)


def test_the_example_lm_eval_task_reads_its_local_data():
    import yaml

    task = yaml.safe_load((EXAMPLES / "lm_eval" / "tiny_qa.yaml").read_text())
    assert task["task"] == "tiny_qa" and task["dataset_path"] == "json"
    data = task["dataset_kwargs"]["data_files"]["test"]
    # relative to the directory lm-eval runs in: the one holding lm_eval/ (the quickstart's)
    rows = [json.loads(line) for line in (EXAMPLES / data).read_text().splitlines()]
    assert rows and all(set(row) == {"question", "answer"} for row in rows)


def test_the_restart_script_refuses_an_unknown_action(tmp_path):
    import subprocess

    proc = subprocess.run(["bash", str(EXAMPLES / "llama-server.sh"), "reload"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=30)
    assert proc.returncode == 2 and "usage: bash llama-server.sh start|stop|restart" in proc.stderr


@pytest.mark.timeout(900)
def test_the_example_inspect_task_runs_clean_under_execsys_run(tmp_path, llama_server, harness_venv, tiny_gguf,
                                                              ledger_path):
    from tests.fixtures.harness import write_project

    project = write_project(tmp_path / "project", llama_server, harness_venv, tiny_gguf)
    shutil.copy(EXAMPLES / "inspect_task.py", project.root / "inspect_task.py")  # the example, not the fixture's
    env = project.env(EXECSYS_LEDGER=str(ledger_path))
    result = run_cli("run", "--json", "--watch", "0", "--", str(harness_venv / "bin" / "inspect"), "eval",
                     "inspect_task.py", "--model", f"openai-api/local/{llama_server.alias}", "--log-dir", "logs",
                     "--max-tokens", "8", "--temperature", "0", "--display", "plain",
                     cwd=project.root, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    record = json.loads(result.stdout)
    assert record["verdict"] == "clean", record["verdict_detail"]
    [report] = record["hook"]["reports"]
    assert report["recorded"] and report["model_calls"] == 8  # the eight inline samples
    assert record["hook"]["mismatches"] == 0
