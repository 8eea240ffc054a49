"""The grader observed at pin and verify: its script's bytes, its packages, and an LLM judge observed as the runtime is.

A fake judge (stdlib, loopback) pins the exact fields -- an alias resolving to a new snapshot --
beside the real llama.cpp server as the judge.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from tests.fixtures.fake_http import JsonHandler, LoopbackServer


class FakeJudge:
    """An OpenAI-compatible judge whose alias resolves to the snapshot a test sets."""

    def __init__(self) -> None:
        self.snapshot = "gpt-x-2026-05"
        self.fingerprint = "fp_one"
        self.auth: list[str | None] = []
        judge = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self.send_json({"object": "list", "data": [{"id": "gpt-x", "object": "model"}]})
                else:
                    self.send_json({"error": "not found"}, 404)

            def do_POST(self) -> None:
                judge.auth.append(self.headers.get("Authorization"))
                self.read_json()
                self.send_json({"id": "c", "object": "chat.completion", "model": judge.snapshot,
                                "system_fingerprint": judge.fingerprint,
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": "y"},
                                             "finish_reason": "length"}]})

        self.server = LoopbackServer(Handler)
        self.url = self.server.url()

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def judge() -> Iterator[FakeJudge]:
    server = FakeJudge()
    yield server
    server.close()


def _project(tmp_path: Path, grader_toml: str) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "grade.py").write_text("import sys, json\ncase = json.loads(sys.stdin.read())\n"
                                      "print('correct' if case['output'] == case.get('expected') else 'wrong')\n")
    (project / "judge_prompt.txt").write_text("Is {output} a correct answer to {prompt}? Say yes or no.\n")
    (project / "execsys.toml").write_text(grader_toml)
    return project


def test_grader_script_packages_and_judge_observed_then_alias_moves(cli, tmp_path: Path, judge: FakeJudge) -> None:
    project = _project(tmp_path, f"""
[grader]
command = "{sys.executable} grade.py"
packages = ["blake3", "surely-not-installed-dist"]

[grader.judge]
endpoint = "{judge.url}"
model = "gpt-x"
temperature = 0
prompt = "judge_prompt.txt"
""")
    pinned = cli("pin", "--json", cwd=project)
    assert pinned.returncode == 0, pinned.stderr
    grader = pinned.json()["components"]["grader"]["observed"]
    import blake3

    script = grader["command"]["files"]
    assert script == [{"path": str(project / "grade.py"), "digest": blake3.blake3((project / "grade.py").read_bytes()).hexdigest()}]
    assert grader["command"]["interpreter"]["version"]
    assert grader["packages"]["versions"] == {"blake3": metadata.version("blake3"), "surely-not-installed-dist": None}
    assert grader["judge"]["endpoint"]["models"] == ["gpt-x"]
    assert grader["judge"]["completion"] == {"requested_model": "gpt-x", "status": 200, "model": "gpt-x-2026-05",
                                             "system_fingerprint": "fp_one"}
    assert grader["judge"]["prompt"]["digest"] == blake3.blake3((project / "judge_prompt.txt").read_bytes()).hexdigest()

    same = cli("verify", cwd=project)
    assert same.returncode == 0, same.stdout + same.stderr

    judge.snapshot = "gpt-x-2026-08"  # the provider moved the alias
    moved = cli("verify", cwd=project)
    assert moved.returncode == 1
    assert "grader: changed (judge model gpt-x-2026-05 → gpt-x-2026-08)" in moved.stdout
    report = cli("verify", "--json", cwd=project).json()
    assert report["components"]["grader"]["status"] == "changed"
    assert [c["field"] for c in report["components"]["grader"]["changes"]] == ["observed.judge.completion.model"]
    assert all(report["components"][n]["status"] == "same" for n in report["components"] if n != "grader")

    # diff counts the grader as moved: a comparison across a judge change is descriptive unless it is the intervention
    (project / "execsys.lock.json").rename(project / "a.lock.json")
    assert cli("pin", cwd=project).returncode == 0
    diff = cli("diff", "a.lock.json", "execsys.lock.json", "--json", cwd=project).json()
    assert diff["moved"] == ["grader"]
    assert diff["sentence"] == "isolates grader"


def test_grader_script_edited_between_pin_and_verify(cli, tmp_path: Path) -> None:
    project = _project(tmp_path, f'[grader]\ncommand = "{sys.executable} grade.py --strict"\n')
    assert cli("pin", cwd=project).returncode == 0
    (project / "grade.py").write_text((project / "grade.py").read_text().replace("'wrong'", "'incorrect'"))
    result = cli("verify", cwd=project)
    assert result.returncode == 1
    assert "grader: changed (grader script edited)" in result.stdout
    assert "1 changed (grader)" in result.stdout


def test_judge_down_at_pin_is_one_line_and_unverifiable_at_verify(cli, tmp_path: Path, judge: FakeJudge) -> None:
    project = _project(tmp_path, f'[grader.judge]\nendpoint = "{judge.url}"\nmodel = "gpt-x"\n')
    assert cli("pin", cwd=project).returncode == 0
    judge.close()
    result = cli("verify", "--json", cwd=project)
    assert result.returncode == 1
    grader = result.json()["components"]["grader"]
    assert grader["status"] == "unverifiable" and grader["reason"].startswith("judge: endpoint")
    again = cli("pin", cwd=project)
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "[grader.judge] endpoint" in again.stderr
    assert "Traceback" not in again.stderr


def test_no_new_keys_declared_nothing_new_observed(cli, tmp_path: Path) -> None:
    project = _project(tmp_path, '[model]\nname = "m"\n')
    pinned = cli("pin", "--json", cwd=project).json()["components"]
    assert pinned["grader"]["observed"] == {} and pinned["tools"]["observed"] == {}
    assert pinned["workflow"]["observed"] == {}


def test_real_llama_cpp_server_as_the_judge(cli, tmp_path: Path, llama_server) -> None:
    project = _project(tmp_path, f'[grader.judge]\nendpoint = "{llama_server.base_url}"\nmodel = "{llama_server.alias}"\n'
                                 "max_tokens = 4\n")
    pinned = cli("pin", "--json", cwd=project)
    assert pinned.returncode == 0, pinned.stderr
    judge_seen = pinned.json()["components"]["grader"]["observed"]["judge"]
    assert judge_seen["endpoint"]["models"] == [llama_server.alias]
    assert judge_seen["completion"]["status"] == 200
    assert judge_seen["completion"]["model"]  # what the server says answered
    assert judge_seen["process"]["exe"]  # the judge's serving process, as the runtime's is observed
    assert cli("verify", cwd=project).returncode == 0


def test_judge_key_is_sent_never_recorded(cli, tmp_path: Path, judge: FakeJudge, ledger_path: Path) -> None:
    secret = "sk-judge-0123456789abcdef"
    project = _project(tmp_path, f'[grader.judge]\nendpoint = "{judge.url}"\nmodel = "gpt-x"\n'
                                 'api_key_env = "JUDGE_API_KEY"\n')
    pinned = cli("pin", "--json", cwd=project, env={"JUDGE_API_KEY": secret})
    assert pinned.returncode == 0, pinned.stderr
    assert judge.auth and set(judge.auth) == {f"Bearer {secret}"}  # every request to the judge carried it
    assert secret not in pinned.stdout + pinned.stderr
    assert secret not in (project / "execsys.lock.json").read_text()
    assert secret.encode() not in ledger_path.read_bytes()
