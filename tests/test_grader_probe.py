"""`execsys probe grader`: the same outputs graded twice (or N times) by the declared grader.

A fake judge (stdlib, loopback) that flips a known subset of verdicts pins the arithmetic (m/n
exact, the Wilson interval, the flipped cases with both verdicts and rationales) beside the real
llama.cpp server as the judge on outputs it generated itself, and a real grader command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from execsys import trust
from execsys.stats import wilson
from tests.fixtures.fake_http import JsonHandler, LoopbackServer

FLIPPING = {"c1", "c4", "c7"}


class FlippingJudge:
    """Answers ``correct`` for every case, except that cases in FLIPPING alternate correct/incorrect per call.

    With ``hold_after`` K, the grading request after the K-th answered one is held (``holding`` set)
    until ``release``; then answered, or, with ``drop_held`` set when it came, closed unanswered (the
    grader that sent it was killed). ``calls`` counts answered gradings only."""

    def __init__(self, hold_after: int | None = None) -> None:
        self.calls: dict[str, int] = {}
        self.hold_after = hold_after
        self.drop_held = False
        self.holding = threading.Event()
        self.release = threading.Event()
        judge = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                self.send_json({"object": "list", "data": [{"id": "judge-1", "object": "model"}]})

            def do_POST(self) -> None:
                body = self.read_json()
                found = re.search(r"Case (\w+):", body["messages"][0]["content"])
                if found is None:  # pin's one-token observation of the judge, not a grading
                    self.send_json({"id": "o", "object": "chat.completion", "model": "judge-1", "choices": [
                        {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "o"}}]})
                    return
                case = found.group(1)
                if judge.hold_after is not None and judge.answered >= judge.hold_after:
                    drop = judge.drop_held  # as it was when the request came
                    judge.holding.set()
                    judge.release.wait(60)
                    if drop:
                        return
                count = judge.calls[case] = judge.calls.get(case, 0) + 1
                verdict = "incorrect" if case in FLIPPING and count % 2 == 0 else "correct"
                self.send_json({"id": "x", "object": "chat.completion", "model": "judge-1",
                                "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant",
                                                         "content": f"The answer {verdict} because of reason {count}."}}]})

        self.server = LoopbackServer(Handler)
        self.url = self.server.url()

    @property
    def answered(self) -> int:
        return sum(self.calls.values())

    def close(self) -> None:
        self.release.set()  # a held request must end for the server to close
        self.server.close()


@pytest.fixture
def flipping_judge() -> Iterator[FlippingJudge]:
    server = FlippingJudge()
    yield server
    server.close()


def _cases(path: Path, outputs: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": cid, "prompt": f"question {cid}", "output": out, "expected": "4"}) + "\n"
                            for cid, out in outputs.items()))
    return path


def _judge_project(tmp_path: Path, url: str, model: str, extra: str = "") -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "judge.txt").write_text("Case {id}: is '{output}' right for '{prompt}' (reference {expected})?\n")
    (project / "execsys.toml").write_text(f'[grader.judge]\nendpoint = "{url}"\nmodel = "{model}"\n'
                                          f'prompt = "judge.txt"\n{extra}')
    return project


def test_flipping_judge_pins_the_arithmetic_and_scope_states_the_grader_boundary(cli, tmp_path: Path,
                                                                                 flipping_judge: FlippingJudge) -> None:
    project = _judge_project(tmp_path, flipping_judge.url, "judge-1")
    cases = _cases(project / "graded.jsonl", {f"c{i}": str(i) for i in range(10)})
    assert cli("pin", cwd=project).returncode == 0
    result = cli("probe", "grader", "--cases", str(cases), "--extract", r"regex:\b(correct|incorrect)\b", "--json",
                 cwd=project)
    assert result.returncode == 1, result.stderr
    report = result.json()
    assert (report["axis"], report["m"], report["n"], report["repeats"]) == ("grader", 7, 10, 2)
    assert report["ci95"] == list(wilson(7, 10))
    assert {c["id"]: c["verdicts"] for c in report["flipped"]} == {c: ["correct", "incorrect"] for c in sorted(FLIPPING)}
    assert report["flipped"][0]["rationales"] == ["The answer correct because of reason 1.",
                                                  "The answer incorrect because of reason 2."]
    assert report["sentence"].startswith("verdicts agree 7/10 (0.70, 95% CI 0.40-0.89) across 2 gradings")
    assert report["sentence"].endswith("a 30-point score difference is within grader noise")

    scope = cli("scope", "--json", cwd=project)
    body = scope.json()
    assert body["grader"]["m"] == 7 and body["grader"]["n"] == 10
    assert "Grader: verdicts agree 7/10 (0.70) across repeats: a 30-point difference is within grader noise." \
        in body["statement"]
    assert "grader" not in body["unmeasured"]  # the grader is stated beside the axes, not as a serving axis
    assert cli("scope", "--contract", str(project / "contract.md"), cwd=project).returncode in (0, 1)
    assert "Grader: verdicts agree 7/10 (0.70) across repeats" in (project / "contract.md").read_text()

    # all-N agreement: with 3 gradings a flipping case still disagrees (correct, incorrect, correct)
    three = cli("probe", "grader", "--cases", str(cases), "--repeats", "3", "--extract",
                r"regex:\b(correct|incorrect)\b", "--json", cwd=project).json()
    assert (three["m"], three["n"], three["agreement"]) == (7, 10, "all-N")
    assert three["flipped"][0]["verdicts"] == ["correct", "incorrect", "correct"]
    human = cli("probe", "grader", "--cases", str(cases), "--extract", r"regex:\b(correct|incorrect)\b", cwd=project)
    # c1 was graded 5 times already: its 6th and 7th gradings flip the other way round
    assert "\u25b8 c1: 'incorrect' | 'correct'\n    1: The answer incorrect because of reason 6." in human.stdout
    assert "verdicts agree 7/10" in human.stdout


def test_grader_command_gets_the_case_on_stdin(cli, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "grade.py").write_text(
        "import json, sys\ncase = json.loads(sys.stdin.read())\n"
        "assert set(case) == {'id', 'prompt', 'output', 'expected'}\n"
        "print('1' if case['output'].strip() == str(case['expected']) else '0')\n")
    (project / "execsys.toml").write_text(f'[grader]\ncommand = "{sys.executable} grade.py"\n')
    trust.trust(project / "execsys.toml")  # the test's own declaration: its author trusts it
    cases = _cases(project / "graded.jsonl", {"a": "4", "b": "5", "c": " 4"})
    result = cli("probe", "grader", "--cases", str(cases), "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert (report["m"], report["n"], report["flipped"], report["grader"]["via"]) == (3, 3, [], "command")
    assert report["sentence"].endswith("every verdict repeated; score differences are not grader flips at this n")


def test_no_grader_declared_and_bad_cases_are_one_line(cli, tmp_path: Path) -> None:
    cases = _cases(tmp_path / "graded.jsonl", {"a": "4"})
    none = cli("probe", "grader", "--cases", str(cases), cwd=tmp_path)
    assert none.returncode == 2 and "no grader declared" in none.stderr and none.stderr.count("\n") == 1
    (tmp_path / "execsys.toml").write_text('[grader]\ncommand = "cat"\n')
    trust.trust(tmp_path / "execsys.toml")  # the test's own declaration: its author trusts it
    (tmp_path / "bad.jsonl").write_text('{"id": "a", "prompt": "q"}\n')
    bad = cli("probe", "grader", "--cases", "bad.jsonl", cwd=tmp_path)
    assert bad.returncode == 2 and '"output"' in bad.stderr and "Traceback" not in bad.stderr


def test_real_llama_cpp_server_judges_its_own_outputs(cli, tmp_path: Path, llama_server) -> None:
    outputs = {}
    for i in range(4):
        response = httpx.post(llama_server.base_url + "/completions", timeout=60,
                              json={"model": llama_server.alias, "prompt": f"2 + {i} =", "max_tokens": 6,
                                    "temperature": 0})
        outputs[f"q{i}"] = response.json()["choices"][0]["text"]
    project = _judge_project(tmp_path, llama_server.base_url, llama_server.alias, "max_tokens = 8\ntemperature = 0\n")
    cases = _cases(project / "graded.jsonl", outputs)
    assert cli("pin", cwd=project).returncode == 0
    result = cli("probe", "grader", "--cases", str(cases), "--json", cwd=project, timeout=300)
    assert result.returncode in (0, 1), result.stderr
    report = result.json()
    assert report["n"] == 4 and report["grader"]["model"] == llama_server.alias
    assert report["m"] + len(report["flipped"]) == 4
    # llama.cpp at temperature 0 within one session repeats itself byte for byte (see test_probe_llama)
    assert report["m"] == 4
    scope = cli("scope", "--json", cwd=project).json()
    assert scope["grader"]["n"] == 4 and "Grader: verdicts agree 4/4" in scope["statement"]


# -- resumable: every grading is in the ledger as soon as it is made ---------------------------------

EXTRACT = r"regex:\b(correct|incorrect)\b"
DATA = Path(__file__).parent / "data" / "grader"
LM_EVAL_SAMPLES = DATA / "samples_tiny_qa_2026-12-01T13-39-34.056034.jsonl"
INSPECT_LOG = DATA / "2026-12-01T13-39-52-00-00_tiny-inspect_SzKHAxwn3pAFBQF279rDnP.eval"


def _gradings(ledger_path: Path, run_id: str) -> list[tuple[str, dict]]:
    with sqlite3.connect(ledger_path) as db:
        rows = db.execute("SELECT key, body FROM records WHERE kind = 'probe-grading' AND parent = ? ORDER BY seq",
                          (run_id,)).fetchall()
    return [(key, json.loads(body)) for key, body in rows]


def _kinds(ledger_path: Path, kind: str) -> int:
    with sqlite3.connect(ledger_path) as db:
        return db.execute("SELECT COUNT(*) FROM records WHERE kind = ?", (kind,)).fetchone()[0]


def _start(project: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, COLUMNS="120")
    return subprocess.Popen([sys.executable, "-m", "execsys", "probe", "grader", *args], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _comparable(report: dict) -> dict:
    """The result, without what names the run or the judge's port (the system check observes the judge at
    its port and the prompt beside the project: its verdict is compared instead)."""
    kept = {k: v for k, v in report.items() if k not in ("record_id", "run", "grader", "system_check")}
    return {**kept, "system_verdict": (report.get("system_check") or {}).get("verdict")}


def test_a_grader_probe_killed_mid_way_resumes_to_the_uninterrupted_result(cli, tmp_path: Path, ledger_path: Path,
                                                                         flipping_judge: FlippingJudge) -> None:
    cases = _cases(tmp_path / "graded.jsonl", {f"c{i}": str(i) for i in range(10)})
    (tmp_path / "reference").mkdir()
    reference_project = _judge_project(tmp_path / "reference", flipping_judge.url, "judge-1")
    reference = cli("probe", "grader", "--cases", str(cases), "--extract", EXTRACT, "--json", cwd=reference_project)
    assert reference.returncode == 1, reference.stderr
    assert (reference.json()["m"], reference.json()["n"]) == (7, 10)

    judge = FlippingJudge(hold_after=13)  # all of repeat 1, then c0, c1, c2 of repeat 2 (c1's flip among them)
    judge.drop_held = True
    try:
        (tmp_path / "killed").mkdir()
        project = _judge_project(tmp_path / "killed", judge.url, "judge-1")
        proc = _start(project, "--cases", str(cases), "--extract", EXTRACT, "--json")
        try:
            assert judge.holding.wait(60), "the grader never reached its 14th grading"
            proc.send_signal(signal.SIGKILL)  # no handler, no finally: only what is already in the ledger survives
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == -signal.SIGKILL
        [run_id] = re.findall(r"grading into run (\S+)", stderr)
        kept = _gradings(ledger_path, run_id)
        assert [key for key, _ in kept] == [f"1:c{i}" for i in range(10)] + ["2:c0", "2:c1", "2:c2"]
        assert kept[11][1]["verdict"] == "incorrect" and kept[11][1]["reply"].endswith("reason 2.")
        assert _kinds(ledger_path, "probe") == 1  # the reference's only: the killed run never finished
        judge.hold_after = None
        judge.release.set()

        # other parameters than the killed run's: refused in one line, nothing graded
        other = cli("probe", "grader", "--cases", str(cases), "--extract", EXTRACT, "--repeats", "3",
                    "--resume", run_id, cwd=project)
        assert other.returncode == 2 and other.stderr.count("\n") == 1 and "Traceback" not in other.stderr
        assert f"--resume {run_id}: that run was started with different parameters (repeats)" in other.stderr
        not_a_run = cli("probe", "grader", "--cases", str(cases), "--extract", EXTRACT, "--resume",
                        reference.json()["record_id"], cwd=project)
        assert not_a_run.returncode == 2 and "is a probe, not a grader probe run" in not_a_run.stderr
        assert judge.answered == 13

        resumed = cli("probe", "grader", "--cases", str(cases), "--extract", EXTRACT, "--resume", run_id, "--json",
                      cwd=project)
        assert resumed.returncode == 1, resumed.stderr
        report = resumed.json()
        assert _comparable(report) == _comparable(reference.json())  # 7/10, the same flips, verdicts, rationales
        assert report["run"] == run_id
        assert judge.calls == {f"c{i}": 2 for i in range(10)}  # only the 7 missing gradings were asked for
        assert len(_gradings(ledger_path, run_id)) == 20

        # a finished run resumed again: its stored record, nothing graded
        again = cli("probe", "grader", "--cases", str(cases), "--extract", EXTRACT, "--resume", run_id, "--json",
                    cwd=project)
        assert again.returncode == 1 and again.json() == report and judge.answered == 20
        # without a run id: the newest unfinished run with these parameters; there is none, so a new probe
        fresh = cli("probe", "grader", "--cases", str(cases), "--extract", EXTRACT, "--resume", "--json", cwd=project)
        assert "nothing unfinished to resume with these parameters" in fresh.stderr
        assert fresh.json()["run"] != run_id and judge.answered == 40
    finally:
        judge.close()


def test_ctrl_c_keeps_the_gradings_and_prints_the_resume_command(cli, tmp_path: Path, ledger_path: Path) -> None:
    judge = FlippingJudge(hold_after=5)
    try:
        project = _judge_project(tmp_path, judge.url, "judge-1")
        cases = _cases(project / "graded.jsonl", {f"c{i}": str(i) for i in range(10)})
        proc = _start(project, "--cases", "graded.jsonl", "--extract", EXTRACT)
        try:
            assert proc.stderr is not None
            assert proc.stderr.readline().startswith("grading into run probe-run-")
            assert judge.holding.wait(60)
            proc.send_signal(signal.SIGINT)
            assert proc.stderr.readline().startswith("stopping after the grading in flight")
            judge.hold_after = None
            judge.release.set()  # the grading in flight is answered, recorded, and then the run stops
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, stderr
        [line, command] = stderr.strip().splitlines()[-2:]
        assert re.fullmatch(r"execsys probe grader: interrupted: 6 of 20 gradings saved in run probe-run-\S+", line)
        assert command.startswith("resume with: execsys probe grader --cases graded.jsonl --extract ")
        assert stdout == ""
        argv = shlex.split(command.removeprefix("resume with: execsys "))
        resumed = cli(*argv, "--json", cwd=project)
        assert resumed.returncode == 1, resumed.stderr
        assert (resumed.json()["m"], resumed.json()["n"]) == (7, 10)
        assert judge.calls == {f"c{i}": 2 for i in range(10)}
        assert cases.exists()
    finally:
        judge.close()


GRADE_UNTIL_FIXED = """\
import json, pathlib, sys
case = json.loads(sys.stdin.read())
with open("calls.log", "a") as log:
    log.write(case["id"] + "\\n")
if case["id"] == "b" and not pathlib.Path("fixed").exists():
    sys.exit("grader: no rubric for b yet")
print("1" if case["output"].strip() == str(case["expected"]) else "0")
"""


def test_retry_errored_grades_only_the_errored_gradings_again(cli, tmp_path: Path, ledger_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "grade.py").write_text(GRADE_UNTIL_FIXED)
    (project / "execsys.toml").write_text(f'[grader]\ncommand = "{sys.executable} grade.py"\n')
    trust.trust(project / "execsys.toml")  # the test's own declaration: its author trusts it
    cases = _cases(project / "graded.jsonl", {"a": "4", "b": "5", "c": " 4"})
    assert cli("pin", cwd=project).returncode == 0
    first = cli("probe", "grader", "--cases", str(cases), "--json", cwd=project)
    assert first.returncode == 0, first.stderr
    report = first.json()
    assert (report["m"], report["n"]) == (2, 2)
    assert cli("scope", "--json", cwd=project).json()["grader"]["n"] == 2
    assert report["errored"] == [{"id": "b", "errors": ["grader command exited 1: grader: no rubric for b yet"] * 2}]

    alone = cli("probe", "grader", "--cases", str(cases), "--retry-errored", cwd=project)
    assert alone.returncode == 2 and "--retry-errored goes with --resume" in alone.stderr
    assert alone.stderr.count("\n") == 1

    (project / "fixed").write_text("")
    retried = cli("probe", "grader", "--cases", str(cases), "--resume", "--retry-errored", "--json", cwd=project)
    assert retried.returncode == 0, retried.stderr
    body = retried.json()
    assert (body["m"], body["n"], body["errored"], body["run"]) == (3, 3, [], report["run"])
    assert (project / "calls.log").read_text().split() == ["a", "b", "c", "a", "b", "c", "b", "b"]
    assert [key for key, _ in _gradings(ledger_path, report["run"])][-2:] == ["1:b#retry1", "2:b#retry1"]
    assert _kinds(ledger_path, "probe") == 2  # the first final stays; the retry's final is the newer one
    # scope counts the run once, by its newest record: 3/3, not the 5/5 of both records pooled
    grader = cli("scope", "--json", cwd=project).json()["grader"]
    assert (grader["m"], grader["n"], grader["records"]) == (3, 3, [body["record_id"]])


# -- cases from a harness's own files ---------------------------------------------------------------

RECORD_PAYLOADS = """\
import json, sys
case = json.loads(sys.stdin.read())
with open("payloads.jsonl", "a") as log:
    log.write(json.dumps(case) + "\\n")
print("1" if case["output"].strip() == str(case["expected"]) else "0")
"""


def _payload_project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "grade.py").write_text(RECORD_PAYLOADS)
    (project / "execsys.toml").write_text(f'[grader]\ncommand = "{sys.executable} grade.py"\n')
    trust.trust(project / "execsys.toml")  # the test's own declaration: its author trusts it
    return project


def test_cases_from_an_lm_eval_samples_file(cli, tmp_path: Path) -> None:
    project = _payload_project(tmp_path)
    result = cli("probe", "grader", "--cases", str(LM_EVAL_SAMPLES), "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert (result.json()["m"], result.json()["n"]) == (6, 6)
    samples = [json.loads(line) for line in LM_EVAL_SAMPLES.read_text().splitlines()]
    seen = [json.loads(line) for line in (project / "payloads.jsonl").read_text().splitlines()]
    # the key compare gives each document's outcome, the prompt lm-eval sent, what its metric scored
    assert seen[:6] == [{"id": f"tiny_qa/{s['doc_id']}", "prompt": s["arguments"]["gen_args_0"]["arg_0"],
                         "output": s["filtered_resps"][0], "expected": s["target"]} for s in samples]
    assert seen[0]["prompt"] == "Q: what is 0+0?\nA:" and seen[5]["expected"] == "10"


def test_a_multiple_choice_samples_file_and_a_log_without_inspect_are_one_line(cli, tmp_path: Path) -> None:
    project = _payload_project(tmp_path)
    mc = tmp_path / "samples_tiny_mc_2026-12-01T10-00-00.000000.jsonl"
    mc.write_text(json.dumps({"doc_id": 0, "target": "1", "arguments": {
        "gen_args_0": {"arg_0": "Q: pick", "arg_1": " A"}, "gen_args_1": {"arg_0": "Q: pick", "arg_1": " B"}},
        "resps": [[["-1.5", "False"]], [["-0.5", "True"]]], "filtered_resps": [["-1.5", "False"], ["-0.5", "True"]],
        "filter": "none", "acc": 1.0}) + "\n")
    refused = cli("probe", "grader", "--cases", str(mc), cwd=project)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "doc 0: its response is not generated text (a loglikelihood or multiple-choice task)" in refused.stderr
    # execsys's own environment has no inspect_ai (test_grader_harness_files reads the log with it)
    inspect = cli("probe", "grader", "--cases", str(INSPECT_LOG), cwd=project)
    assert inspect.returncode == 2 and inspect.stderr.count("\n") == 1 and "execsys[inspect]" in inspect.stderr
    assert not (project / "payloads.jsonl").exists()


def test_an_unrecorded_probe_cancelled_reports_the_cases_graded_every_time(tmp_path: Path,
                                                                            ledger_path: Path) -> None:
    from execsys.probes.grader import CaseGraded, GraderProbeOptions, run_grader_probe

    from execsys.declaration import load

    (tmp_path / "execsys.toml").write_text('[grader]\ncommand = "cat"\n')
    trust.trust(tmp_path / "execsys.toml")  # the test's own declaration: its author trusts it
    cases = _cases(tmp_path / "graded.jsonl", {"a": "4", "b": "5", "c": "6"})
    options = GraderProbeOptions.from_sources(load(tmp_path / "execsys.toml"), None, cases=str(cases), record=False)
    cancel = threading.Event()
    seen: list[tuple[str, int]] = []

    def on_event(event: object) -> None:
        if isinstance(event, CaseGraded):
            seen.append((event.case_id, event.repeat))
            if event.done == 4:
                cancel.set()

    report = run_grader_probe(options, on_event=on_event, cancel=cancel)
    assert seen == [("a", 1), ("b", 1), ("c", 1), ("a", 2)]
    assert (report.m, report.n, report.run, report.record_id) == (1, 1, None, None)
    assert not ledger_path.exists()


def test_cases_from_a_probe_grade_what_the_model_answered_on_its_first_pass(cli, tmp_path: Path, ledger_path: Path,
                                                                           llama_server) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    cases = project / "cases.jsonl"
    cases.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"2 + {i} =", "max_tokens": 6, "expected": str(2 + i)})
                             + "\n" for i in range(4)))
    probe = cli("probe", "session", "--endpoint", llama_server.base_url, "--cases", str(cases), "--json",
                cwd=project, timeout=300)
    assert probe.returncode in (0, 1), probe.stderr
    run_id = probe.json()["run"]
    first_pass = {row["body"]["case"]: row["body"]["text"]
                  for row in cli("ledger", "export", "--kind", "probe-case", "--json", cwd=project).json()
                  if row["parent"] == run_id and row["body"]["pass"] == 0}
    assert set(first_pass) == {"q0", "q1", "q2", "q3"}

    # a grader command that writes down what it was given, and grades the answer against the expectation
    seen = project / "seen.jsonl"
    (project / "grade.py").write_text(
        "import json, sys\ncase = json.loads(sys.stdin.read())\n"
        f"open({str(seen)!r}, 'a').write(json.dumps(case) + '\\n')\n"
        "print('1' if case['expected'] in case['output'] else '0')\n")
    (project / "execsys.toml").write_text(f'[grader]\ncommand = "{sys.executable} grade.py"\n')
    trust.trust(project / "execsys.toml")  # the test's own declaration: its author trusts it
    graded = cli("probe", "grader", "--cases", run_id, "--json", cwd=project)
    assert graded.returncode == 0, graded.stderr
    assert graded.json()["n"] == 4
    given = [json.loads(line) for line in seen.read_text().splitlines()]
    assert {c["id"]: c["output"] for c in given} == first_pass  # both gradings saw the probe's own answers
    assert {c["id"]: (c["prompt"], c["expected"]) for c in given} == {f"q{i}": (f"2 + {i} =", str(2 + i))
                                                                      for i in range(4)}
    # the probe's record id names the same run
    record_id = probe.json()["id"]
    again = cli("probe", "grader", "--cases", record_id, "--json", cwd=project)
    assert again.returncode == 0 and again.json()["n"] == 4

    # a cases file edited since the probe no longer belongs to its answers; a non-probe record is not cases
    cases.write_text(cases.read_text().replace("2 + 0 =", "2 + 0 = ?"))
    changed = cli("probe", "grader", "--cases", run_id, cwd=project)
    assert changed.returncode == 2 and "has changed since that probe ran" in changed.stderr
    assert len(changed.stderr.strip().splitlines()) == 1
    case_row_id = cli("ledger", "export", "--kind", "probe-case", "--json", cwd=project).json()[0]["id"]
    wrong = cli("probe", "grader", "--cases", case_row_id, cwd=project)
    assert wrong.returncode == 2 and "not a probe run" in wrong.stderr
