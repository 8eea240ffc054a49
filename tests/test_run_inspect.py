"""``execsys run`` around a real Inspect AI eval, its hook, and ``compare`` between two Inspect runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.common import run_cli

pytest_plugins = ["tests.fixtures.harness"]

# Each case starts real harness processes (lm-eval imports torch and datasets: ~45 s a run on 2 cores).
pytestmark = pytest.mark.timeout(900)

READ_LOG = """
import json, pathlib, sys
from inspect_ai.log import list_eval_logs, read_eval_log
log = read_eval_log(sys.argv[1])
print(json.dumps({"eval_metadata": log.eval.metadata, "metadata": log.metadata,
                  "updates": [u.provenance.author for u in log.log_updates or []],
                  "scores": {f"{s.id}": next(iter(s.scores.values())).value for s in log.samples},
                  "listed": [read_eval_log(info.name, header_only=True).eval.task
                             for info in list_eval_logs(str(pathlib.Path(sys.argv[1]).parent))]}))
"""


def _read_log(project, path: Path) -> dict:
    return json.loads(project.harness_python(READ_LOG.replace("sys.argv[1]", repr(str(path)))))


def test_inspect_run_is_clean_with_the_identity_in_the_log_and_compares_with_a_second_run(eval_project,
                                                                                          ledger_path):
    project = eval_project
    env = project.env(EXECSYS_LEDGER=str(ledger_path))
    result = run_cli("run", "--json", "--watch", "5", "--", *project.inspect_argv("logs"), cwd=project.root,
                     env=env, timeout=400)
    assert result.returncode == 0, result.stderr[-4000:]
    record = json.loads(result.stdout)
    assert record["verdict"] == "clean", record["verdict_detail"]
    assert record["command"]["harness"] == "inspect"
    identity = json.loads(project.lock.read_text())["id"]
    [log_entry] = record["results"]
    log_path = Path(log_entry["path"])
    assert log_path.parent == project.root / "logs" and log_path.suffix == ".eval"
    assert log_entry["harness"] == "inspect"

    # the hook ran inside Inspect: one report per task, every model call checked, recorded in the log
    [report] = record["hook"]["reports"]
    assert report["recorded"] and report["error"] is None and report["model_calls"] == 4
    assert record["hook"]["mismatches"] == 0 and record["hook"]["problem"] is None
    log = _read_log(project, log_path)
    assert log["eval_metadata"]["execsys"] == {"identity": identity, "run": record["id"]}
    assert log["metadata"]["execsys"]["verdict"] == "consistent"
    assert log["metadata"]["execsys"]["model_calls"] == 4
    assert log["updates"] == ["execsys"]
    assert log["listed"] == ["tiny_inspect"]  # Inspect lists the log dir as before: the sidecar is not a log  # Inspect's own edit history, not a silent rewrite
    # beside the log, named so that Inspect's own log listing does not take it for a log
    sidecar = json.loads(log_path.with_name(f"execsys-{log_path.name}.execsys.json").read_text())
    assert sidecar["id"] == record["id"] and sidecar["result"]["blake3"] == log_entry["blake3"]
    # the receipt too (issue 31), and Inspect's listing above still holds the one log
    receipt = log_path.with_name(f"execsys-{log_path.name}.execsys.intoto.json")
    assert record["receipts"] == [str(receipt)]
    assert run_cli("receipt", "verify", str(receipt), cwd=project.root, env=env).returncode == 0

    # Inspect namespaces a package's hook with the package name: `execsys/execsys` is what users require
    required = dict(env, INSPECT_REQUIRED_HOOKS="execsys/execsys")
    second = run_cli("run", "--json", "--watch", "0", "--", *project.inspect_argv("logs2"), cwd=project.root,
                     env=required, timeout=400)
    assert second.returncode == 0, second.stderr[-4000:]
    assert json.loads(second.stdout)["hook"]["problem"] is None
    log2_path = Path(json.loads(second.stdout)["results"][0]["path"])

    # hand count over the two logs' samples
    a = log["scores"]
    b = _read_log(project, log2_path)["scores"]
    assert set(a) == set(b) == {"q0", "q1", "q2", "q3"}
    hand_b = sum(1 for k in a if a[k] == "C" and b[k] != "C")
    hand_c = sum(1 for k in a if b[k] == "C" and a[k] != "C")
    # compare needs Inspect's log reader: from the harness's environment (execsys[inspect]) it works ...
    compared = subprocess.run([str(project.venv / "bin" / "execsys"), "compare", str(log_path), str(log2_path),
                               "--json"], capture_output=True, text=True, cwd=project.root, env=env, timeout=120)
    assert compared.returncode in (0, 1), compared.stderr
    body = json.loads(compared.stdout)
    assert body["paired"]["kind"] == "paired"
    assert (body["paired"]["n"], body["paired"]["b"], body["paired"]["c"]) == (4, hand_b, hand_c)
    assert body["a"]["rate"] == sum(v == "C" for v in a.values()) / 4
    assert body["identities"] == [identity]
    # ... and from an environment without Inspect, the error names the extra
    without = run_cli("compare", str(log_path), str(log2_path), cwd=project.root, env=env)
    assert without.returncode == 2 and "execsys[inspect]" in without.stderr
    assert len(without.stderr.strip().splitlines()) == 1


def test_model_calls_answered_by_another_model_than_the_pinned_one_are_counted_and_drift(eval_project,
                                                                                         ledger_path):
    project = eval_project
    env = project.env(EXECSYS_LEDGER=str(ledger_path))
    argv = project.inspect_argv("logs")
    argv[argv.index("--model") + 1] = "openai-api/local/not-the-pinned-model"  # the server answers as that
    result = run_cli("run", "--json", "--watch", "0", "--", *argv, cwd=project.root, env=env, timeout=400)
    assert result.returncode == 1, result.stderr[-4000:]
    record = json.loads(result.stdout)
    assert record["verdict"] == "drifted" and record["drift"] == [] and record["exit_code"] == 0
    assert record["hook"]["model_calls"] == 4 and record["hook"]["mismatches"] == 4
    assert "4 model call(s) answered by another model" in record["verdict_detail"]
    log = _read_log(project, Path(record["results"][0]["path"]))
    assert log["metadata"]["execsys"]["verdict"] == "model-mismatch"
    assert log["metadata"]["execsys"]["mismatches"] == 4


def test_a_failing_hook_never_breaks_the_eval_and_says_it_could_not_record(eval_project, tmp_path):
    project = eval_project
    broken_lock = tmp_path / "broken.lock.json"
    broken_lock.write_text("{this is not a lock")
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    env = dict(os.environ, **project.env(EXECSYS_LOCK=str(broken_lock), EXECSYS_RUN_ID="run-x",
                                         EXECSYS_HOOK_DIR=str(hook_dir)))
    proc = subprocess.run(project.inspect_argv("logs-broken"), capture_output=True, text=True, cwd=project.root,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]  # the user's eval still ran to the end
    [log_path] = (project.root / "logs-broken").glob("*.eval")
    assert len(_read_log(project, log_path)["scores"]) == 4
    [report] = [json.loads(p.read_text()) for p in hook_dir.glob("*.json")]
    assert report["recorded"] is False and "task end" in report["error"]

    from execsys.run.record import RunRecord

    record = RunRecord(id="run-x", command=["inspect"], cwd=".", exit_code=0, hook={"reports": [report]})
    assert record.verdict == "clean"
    assert "the Inspect hook could not record" in record.verdict_detail()


# -- the hook's mismatch is a real mismatch (unit level: Inspect's event shapes, no Inspect run) ------

def _model_event(model: str, output_model: str | None, response: dict | None = None, **fields):
    from types import SimpleNamespace

    call = SimpleNamespace(response=response) if response is not None else None
    return SimpleNamespace(event="model", model=model, output=SimpleNamespace(model=output_model), call=call,
                           **fields)


def test_a_provider_qualified_name_is_the_served_model_without_its_qualifier():
    from execsys.harnesses.inspect_names import served_model, unqualified

    requested = "openai-api/local/tiny"
    # Inspect's own label (a placeholder, a retried attempt's output) against the served `tiny`
    assert served_model(_model_event(requested, requested), None) == "tiny"
    assert served_model(_model_event(requested, "tiny"), None) == "tiny"
    # the endpoint's own answer wins over the output's label when Inspect kept the response
    event = _model_event(requested, requested, {"model": "tiny-v2"})
    assert served_model(event, event.call.response) == "tiny-v2"
    # an error response names nothing: the output's name is used
    errored = _model_event(requested, "tiny", {"error": {"message": "busy"}, "model": "x"})
    assert served_model(errored, errored.call.response) == "tiny"
    # a real other model stays other; only the requested qualifier is taken off, longest first
    assert unqualified("openai-api/local/not-the-pinned-model", "openai-api/local/not-the-pinned-model") == \
        "not-the-pinned-model"
    assert unqualified("meta-llama/Llama-3", "openai-api/local/meta-llama/Llama-3") == "meta-llama/Llama-3"
    assert unqualified("openai-api/local/meta-llama/Llama-3", "openai-api/local/meta-llama/Llama-3") == \
        "meta-llama/Llama-3"
    assert unqualified("tiny", None) == "tiny" and unqualified("a/b", "tiny") == "a/b"
    assert served_model(_model_event(requested, None), None) is None


def test_the_run_verdict_names_the_watchs_drift_before_a_per_call_count():
    from execsys.run.record import RunRecord

    drift = [{"at": "2026-12-02T10:00:01Z", "component": "runtime.process.argv",
              "before": ["python", "-m", "llama_cpp.server"], "after": None},
             {"at": "2026-12-02T10:00:03Z", "component": "runtime.process.argv", "before": None,
              "after": ["python", "-m", "llama_cpp.server", "--n_batch", "7"]}]
    hook = {"reports": [{"recorded": True, "mismatches": 1}], "model_calls": 4, "mismatches": 1}
    record = RunRecord(id="run-1", command=["inspect"], cwd=".", exit_code=0, drift=drift, hook=hook)
    detail = record.verdict_detail()
    # the restart is named by what it changed (the process came back with +--n_batch 7), not by the
    # moment the process was gone
    assert detail.startswith("drifted: the runtime changed during the run (runtime.process.argv at "
                             "2026-12-02T10:00:03Z: +--n_batch 7; 2 drift events)")
    assert detail.index("the runtime changed") < detail.index("1 model call(s) answered by another model")
    assert detail.endswith(": compare this result causally with nothing")
    # a per-call count alone is the cause when the watch saw nothing; verify-after's new identity after that
    alone = RunRecord(id="run-2", command=["inspect"], cwd=".", exit_code=0, hook=hook)
    assert alone.verdict_detail().startswith("drifted: 1 model call(s) answered by another model")
    after = RunRecord(id="run-3", command=["x"], cwd=".", exit_code=0,
                      verify_after={"verdict": "new-identity", "sentence": "1 changed (runtime)"})
    assert after.verdict_detail() == ("drifted: the system after the run is not the pinned one (1 changed "
                                      "(runtime)): compare this result causally with nothing")
