"""`execsys probe grader`: the same outputs graded twice (or N times) by the declared grader.

A fake judge (stdlib, loopback) that flips a known subset of verdicts pins the arithmetic (m/n
exact, the Wilson interval, the flipped cases with both verdicts and rationales) beside the real
llama.cpp server as the judge on outputs it generated itself, and a real grader command.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from execsys.stats import wilson

FLIPPING = {"c1", "c4", "c7"}


class FlippingJudge:
    """Answers ``correct`` for every case, except that cases in FLIPPING alternate correct/incorrect per call."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send({"object": "list", "data": [{"id": "judge-1", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                found = re.search(r"Case (\w+):", body["messages"][0]["content"])
                if found is None:  # pin's one-token observation of the judge, not a grading
                    self._send({"id": "o", "object": "chat.completion", "model": "judge-1", "choices": [
                        {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "o"}}]})
                    return
                case = found.group(1)
                count = judge.calls[case] = judge.calls.get(case, 0) + 1
                verdict = "incorrect" if case in FLIPPING and count % 2 == 0 else "correct"
                self._send({"id": "x", "object": "chat.completion", "model": "judge-1",
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant",
                                                     "content": f"The answer {verdict} because of reason {count}."}}]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


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
