"""The grader observer as decision tables (issue 26): the files a grader command names, the package
versions read from planted dist-info directories, the judge's one-token completion against loopback
fakes (every non-200, non-JSON and missing-field branch), the judge table's type checks, and verify's
change summary -- in milliseconds, no mocks."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3
import pytest

from execsys.digest import digest_path
from execsys.errors import InputError
from execsys.observe.grader import (
    _file_digest,
    _short,
    change_summary,
    check_judge,
    command_interpreter,
    default_interpreter,
    judge_completion,
    judge_error,
    named_files,
    normalise_name,
    observe_command,
    observe_grader,
    observe_judge,
    observe_packages,
)
from execsys.redact import REDACTED
from tests.fixtures.fake_http import JsonHandler, LoopbackServer

PYTHON = os.path.realpath(sys.executable)


# -- names and files -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "normal"), [("Math_Verify", "math-verify"), ("a.b-_c", "a-b-c"),
                                              ("x--y", "x-y"), ("plain", "plain")])
def test_names_are_pep_503(name: str, normal: str) -> None:
    assert normalise_name(name) == normal


def exe(path: Path, body: str = "true") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_the_default_interpreter_is_python3_then_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    exe(b / "python")
    monkeypatch.setenv("PATH", f"{a}:{b}")
    assert default_interpreter() == str(b / "python")
    exe(a / "python3")
    exe(b / "python3")
    assert default_interpreter() == str(a / "python3")
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert default_interpreter() is None


def test_named_files_table(tmp_path: Path) -> None:
    (tmp_path / "grade.py").write_text("print(1)\n")
    (tmp_path / "rubric.md").write_text("r\n")
    (tmp_path / "sub").mkdir()
    absolute = tmp_path / "abs.txt"
    absolute.write_text("a")
    d = {name: digest_path(tmp_path / name).digest for name in ("grade.py", "rubric.md", "abs.txt")}
    cmd = f"python grade.py --rubric=rubric.md -v --out missing.json sub grade.py {absolute} --x= ''"
    assert named_files(cmd, tmp_path) == [
        {"path": str(tmp_path / "grade.py"), "digest": d["grade.py"]},
        {"path": str(tmp_path / "rubric.md"), "digest": d["rubric.md"]},
        {"path": str(absolute), "digest": d["abs.txt"]}]


def test_the_first_word_is_the_program_not_a_named_file(tmp_path: Path) -> None:
    (tmp_path / "grade.py").write_text("")
    assert named_files("grade.py", tmp_path) == []
    assert [f["path"] for f in named_files("./grade.py grade.py", tmp_path)] == [str(tmp_path / "grade.py")]


def test_named_files_bad_quoting_and_redaction(tmp_path: Path) -> None:
    assert named_files("python 'grade.py", tmp_path) == []
    (tmp_path / "redacted").write_text("x")
    assert [f["path"] for f in named_files(f"python {REDACTED}", tmp_path)] == [str(tmp_path / "redacted")]


def test_without_a_base_a_named_file_is_the_cwd_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "grade.py").write_text("")
    assert named_files("python grade.py", None) == [{"path": "grade.py", "digest": digest_path("grade.py").digest}]


def test_a_named_file_that_cannot_be_hashed_is_a_note(tmp_path: Path) -> None:
    fifo_free = tmp_path / "loop"
    os.symlink(fifo_free, fifo_free)  # is_file() is False for a loop: not named
    assert named_files("python loop", tmp_path) == []


def test_a_file_digest_says_when_it_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "p.txt").write_text("prompt")
    assert _file_digest("p.txt", tmp_path) == {"path": str(tmp_path / "p.txt"),
                                               "digest": digest_path(tmp_path / "p.txt").digest}
    assert _file_digest("q.txt", tmp_path) == {"path": str(tmp_path / "q.txt"), "digest": None,
                                               "note": "not found on this machine"}
    monkeypatch.chdir(tmp_path)
    assert _file_digest("p.txt", None)["path"] == str(tmp_path / "p.txt")


def test_the_grader_command_is_a_harness_command_plus_its_files(tmp_path: Path) -> None:
    (tmp_path / "grade.py").write_text("x")
    record = observe_command(f"{PYTHON} grade.py", tmp_path)
    assert record["program"] == PYTHON and record["interpreter"]["executable"] == PYTHON
    assert record["files"] == [{"path": str(tmp_path / "grade.py"), "digest": digest_path(tmp_path / "grade.py").digest}]
    assert command_interpreter(record) == PYTHON
    assert command_interpreter({"program": "x"}) is None
    assert command_interpreter({"interpreter": None}) is None


# -- packages ------------------------------------------------------------------------------------------


def fake_python(tmp_path: Path, site: Path) -> Path:
    info = {"executable": str(tmp_path / "py" / "python3"), "version": "3.12.0", "implementation": "CPython",
            "prefix": "/p", "base_prefix": "/p", "path": [str(site)]}
    return exe(tmp_path / "py" / "python3", f"echo '{json.dumps(info)}'")


def plant(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")


def test_package_versions_are_read_from_the_interpreter_s_directories(tmp_path: Path) -> None:
    site = tmp_path / "site"
    plant(site, "math_verify", "0.5.2")
    plant(site, "numpy", "2.1.0")
    interp = fake_python(tmp_path, site)
    assert observe_packages(["Math-Verify", "numpy", "absent-pkg", 7], str(interp)) == {
        "interpreter": str(interp), "versions": {"Math-Verify": "0.5.2", "numpy": "2.1.0", "absent-pkg": None,
                                                 "7": None}}


def test_no_interpreter_means_no_versions_and_a_note() -> None:
    assert observe_packages(["a", "b"], None) == {
        "interpreter": None, "versions": {"a": None, "b": None},
        "note": "no Python interpreter found to read installed packages from"}


def test_an_interpreter_that_cannot_say_leaves_versions_empty_with_its_reason(tmp_path: Path) -> None:
    broken = exe(tmp_path / "python3", "exit 9")
    got = observe_packages(["a"], str(broken))
    assert got["interpreter"] == str(broken) and got["versions"] == {"a": None}
    assert str(broken) in got["note"] and "9" in got["note"]


# -- the judge's completion ------------------------------------------------------------------------------


class Judge:
    """A loopback judge: what it lists and answers is the test's."""

    def __init__(self) -> None:
        self.models: Any = {"object": "list", "data": [{"id": "gpt-x"}, {"id": "other"}]}
        self.status = 200
        self.answer: Any = {"model": "gpt-x-2026-05", "system_fingerprint": "fp_1"}
        self.raw: bytes | None = None
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        judge = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                judge.auth.append(self.headers.get("Authorization"))
                if self.path == "/v1/models":
                    self.send_json(judge.models)
                else:
                    self.send_json({"error": "not found"}, 404)

            def do_POST(self) -> None:
                judge.auth.append(self.headers.get("Authorization"))
                judge.bodies.append(self.read_json())
                if judge.raw is not None:
                    self.send_bytes(judge.raw, judge.status)
                else:
                    self.send_json(judge.answer, judge.status)

        self.server = LoopbackServer(Handler)
        self.url = self.server.url()


@pytest.fixture
def judge() -> Iterator[Judge]:
    server = Judge()
    yield server
    server.server.close()


def test_the_answering_model_and_fingerprint_are_recorded(judge: Judge) -> None:
    assert judge_completion(judge.url, "gpt-x", api_key="k-123", seed=7) == {
        "requested_model": "gpt-x", "status": 200, "model": "gpt-x-2026-05", "system_fingerprint": "fp_1"}
    assert judge.bodies == [{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0,
                             "seed": 7, "model": "gpt-x"}]
    assert judge.auth == ["Bearer k-123"]


def test_no_seed_and_no_key_send_neither(judge: Judge) -> None:
    judge_completion(judge.url, "gpt-x", api_key=None)
    assert "seed" not in judge.bodies[0] and judge.auth == [None]
    judge_completion(judge.url, "gpt-x", api_key="", seed=0)
    assert judge.bodies[1]["seed"] == 0 and judge.auth[1] is None


def test_no_model_asks_for_the_first_listed(judge: Judge) -> None:
    assert judge_completion(judge.url, None, api_key=None)["requested_model"] == "gpt-x"
    assert judge.bodies[0]["model"] == "gpt-x"
    judge.models = {"data": []}
    assert judge_completion(judge.url, None, api_key=None)["requested_model"] is None
    judge.models = {"data": ["gpt-x"]}
    assert judge_completion(judge.url, None, api_key=None)["requested_model"] is None
    judge.models = {"data": [{"id": 5}]}
    assert judge_completion(judge.url, None, api_key=None)["requested_model"] == "5"


@pytest.mark.parametrize("status", [201, 400, 404, 500])
def test_a_refused_completion_keeps_its_status(judge: Judge, status: int) -> None:
    judge.status = status
    assert judge_completion(judge.url, "m", api_key=None) == {"requested_model": "m", "status": status,
                                                              "model": None, "system_fingerprint": None}


@pytest.mark.parametrize(("answer", "model", "fingerprint"), [
    ({"model": None, "system_fingerprint": None}, None, None),
    ({}, None, None),
    ({"model": 3, "system_fingerprint": 0}, "3", None),
    ({"model": "", "system_fingerprint": ""}, "", None),
    ({"model": "m", "system_fingerprint": 12}, "m", "12"),
])
def test_missing_fields_are_none(judge: Judge, answer: dict, model: str | None, fingerprint: str | None) -> None:
    judge.answer = answer
    assert judge_completion(judge.url, "x", api_key=None) == {"requested_model": "x", "status": 200, "model": model,
                                                              "system_fingerprint": fingerprint}


def test_a_completion_that_is_not_an_object_is_an_error(judge: Judge) -> None:
    judge.answer = ["model"]
    assert judge_completion(judge.url, "x", api_key=None) == {"requested_model": "x",
                                                              "error": "the completion was not a JSON object"}


def test_a_completion_that_is_not_json_is_an_error(judge: Judge) -> None:
    judge.raw = b"<html>" + b"x" * 400
    got = judge_completion(judge.url, "x", api_key=None)
    assert got == {"requested_model": "x", "error": "JSONDecodeError: Expecting value: line 1 column 1 (char 0)"}


def test_a_model_list_that_is_not_an_object_is_an_error(judge: Judge) -> None:
    judge.models = ["gpt-x"]
    got = judge_completion(judge.url, None, api_key=None)
    assert got == {"requested_model": None, "error": "AttributeError: 'list' object has no attribute 'get'"}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_endpoint_that_refuses_is_an_error_with_the_key_never_shown() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    got = judge_completion(url, "m", api_key="sk-abcdefghijklmnopqrstuvwxyz0123")
    assert set(got) == {"requested_model", "error"} and got["error"].startswith("ConnectError: ")


# -- the judge table ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("judge", "message"), [
    ("gpt", "'grader.judge' must be a table ([grader.judge])"),
    (["x"], "'grader.judge' must be a table ([grader.judge])"),
    ({"endpoint": 5}, "'grader.judge.endpoint' must be a string, not int"),
    ({"model": True}, "'grader.judge.model' must be a string, not bool"),
    ({"api_key_env": None}, "'grader.judge.api_key_env' must be a string, not NoneType"),
    ({"prompt": ["p"]}, "'grader.judge.prompt' must be a string, not list"),
    ({"temperature": "0"}, "'grader.judge.temperature' must be a number, not str"),
    ({"temperature": False}, "'grader.judge.temperature' must be a number, not bool"),
    ({"seed": 1.5}, "'grader.judge.seed' must be a number, not float"),
    ({"seed": True}, "'grader.judge.seed' must be a number, not bool"),
    ({"max_tokens": "1"}, "'grader.judge.max_tokens' must be a number, not str"),
])
def test_judge_keys_are_type_checked(judge: Any, message: str) -> None:
    with pytest.raises(InputError) as caught:
        check_judge(judge)
    assert str(caught.value) == message


def test_a_well_typed_judge_passes_as_it_is() -> None:
    judge = {"endpoint": "http://x/v1", "model": "m", "api_key_env": "K", "temperature": 0, "seed": 3,
             "max_tokens": 1, "prompt": "p.txt", "extra": object()}
    assert check_judge(judge) is judge
    assert check_judge({"temperature": 0.7}) == {"temperature": 0.7}
    assert check_judge({}) == {}


# -- the judge observed ---------------------------------------------------------------------------------


def test_an_unreachable_judge_is_refused_at_pin_and_recorded_at_verify(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(InputError, match=r"^\[grader\.judge\] "):
        observe_judge({"endpoint": url}, tmp_path, require_endpoint=True)
    observed = observe_judge({"endpoint": url}, tmp_path, require_endpoint=False)
    assert observed["endpoint"]["url"] == url and observed["endpoint"]["error"]
    assert "completion" not in observed
    assert judge_error({"judge": observed}) == f"judge: {observed['endpoint']['error']}"


def test_a_judge_prompt_alone_is_digested(tmp_path: Path) -> None:
    (tmp_path / "prompt.txt").write_text("Is {output} right?")
    assert observe_judge({"prompt": "prompt.txt", "model": "m"}, tmp_path, require_endpoint=True) == {
        "prompt": {"path": str(tmp_path / "prompt.txt"), "digest": blake3.blake3(b"Is {output} right?").hexdigest()}}
    assert observe_judge({"prompt": ""}, tmp_path, require_endpoint=True) == {}


def test_a_badly_typed_judge_is_refused_before_anything_is_asked(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="must be a number"):
        observe_judge({"endpoint": "http://127.0.0.1:1/v1", "seed": "7"}, tmp_path, require_endpoint=False)


def test_a_judge_is_observed_as_a_runtime_plus_its_completion(tmp_path: Path, judge: Judge,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECSYS_T_JUDGE_KEY", "judge-key-0123456789")
    observed = observe_judge({"endpoint": judge.url, "model": "gpt-x", "api_key_env": "EXECSYS_T_JUDGE_KEY",
                              "seed": 11}, tmp_path, require_endpoint=True)
    assert "numerics_env" not in observed and "engine" not in observed
    assert observed["endpoint"]["models"] == ["gpt-x", "other"]
    assert observed["completion"] == {"requested_model": "gpt-x", "status": 200, "model": "gpt-x-2026-05",
                                      "system_fingerprint": "fp_1"}
    assert judge.bodies[-1]["seed"] == 11
    assert set(judge.auth) == {"Bearer judge-key-0123456789"}


# -- the grader observed ----------------------------------------------------------------------------------


def test_nothing_declared_nothing_observed(tmp_path: Path) -> None:
    assert observe_grader({}, base_dir=tmp_path) == {}
    assert observe_grader({"command": "", "packages": [], "judge": {}}, base_dir=tmp_path) == {}


def test_packages_are_read_from_the_command_s_interpreter_first(tmp_path: Path) -> None:
    site = tmp_path / "site"
    plant(site, "rouge_score", "0.1.2")
    interp = fake_python(tmp_path, site)
    observed = observe_grader({"command": f"{interp} grade.py", "packages": ["rouge-score"]}, base_dir=tmp_path,
                              harness_interpreter=PYTHON)
    assert observed["packages"]["interpreter"] == str(interp)
    assert observed["packages"]["versions"] == {"rouge-score": "0.1.2"}


def test_without_a_command_packages_come_from_the_harness_s_interpreter(tmp_path: Path) -> None:
    site = tmp_path / "site"
    plant(site, "rouge_score", "0.1.3")
    interp = fake_python(tmp_path, site)
    observed = observe_grader({"packages": ["rouge_score"]}, base_dir=tmp_path, harness_interpreter=str(interp))
    assert observed == {"packages": {"interpreter": str(interp), "versions": {"rouge_score": "0.1.3"}}}


def test_a_command_that_is_no_python_falls_back_to_the_harness_s(tmp_path: Path) -> None:
    site = tmp_path / "site"
    plant(site, "x", "1")
    interp = fake_python(tmp_path, site)
    observed = observe_grader({"command": "nosuch-grader run", "packages": ["x"]}, base_dir=tmp_path,
                              harness_interpreter=str(interp))
    assert observed["packages"]["versions"] == {"x": "1"}


def test_with_no_interpreter_named_the_path_s_python3_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    plant(site, "y", "2")
    interp = fake_python(tmp_path, site)
    monkeypatch.setenv("PATH", str(interp.parent))
    assert observe_grader({"packages": ["y"]}, base_dir=tmp_path)["packages"]["versions"] == {"y": "2"}


def test_a_judge_is_observed_with_the_grader_s_pin_or_verify_choice(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(InputError):
        observe_grader({"judge": {"endpoint": url}}, base_dir=tmp_path)
    observed = observe_grader({"judge": {"endpoint": url}}, base_dir=tmp_path, require_endpoint=False)
    assert observed["judge"]["endpoint"]["error"]


@pytest.mark.parametrize(("observed", "error"), [
    ({}, None), ({"judge": None}, None), ({"judge": {}}, None), ({"judge": {"endpoint": "http://x"}}, None),
    ({"judge": {"endpoint": {"url": "u"}}}, None), ({"judge": {"endpoint": {"error": ""}}}, None),
    ({"judge": {"endpoint": {"error": "refused"}}}, "judge: refused"),
])
def test_judge_error_table(observed: dict, error: str | None) -> None:
    assert judge_error(observed) == error


# -- verify's summary -------------------------------------------------------------------------------------


HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(("value", "shown"), [
    (HEX, "0123456789abcdef…"), (HEX[:-1], HEX[:-1]), (HEX + "0", HEX + "0"), (HEX.upper(), HEX.upper()),
    ("g" * 64, "g" * 64), (None, "None"), (5, "5"),
])
def test_only_a_64_hex_digest_is_shortened(value: Any, shown: str) -> None:
    assert _short(value) == shown


@pytest.mark.parametrize(("changes", "summary"), [
    ([], None),
    ([{"field": "observed.judge.completion.model", "old": "a", "new": "b"}], "judge model a → b"),
    ([{"field": "observed.judge.completion.system_fingerprint", "old": "f1", "new": "f2"}],
     "judge system_fingerprint f1 → f2"),
    ([{"field": "observed.judge.endpoint.models"}], "the judge endpoint lists other models"),
    ([{"field": "observed.judge.prompt.digest"}], "judge prompt template edited"),
    ([{"field": "observed.command.files.0.digest"}], "grader script edited"),
    ([{"field": "observed.command.files.0.path"}], None),
    ([{"field": "observed.packages.versions.math-verify", "old": "0.5", "new": "0.6"}], "math-verify 0.5 → 0.6"),
    ([{"field": "observed.command.interpreter.distributions_blake3"}],
     "the grader's interpreter or its packages changed"),
    ([{"field": "declared.command", "old": "a", "new": HEX}], "declared command a → 0123456789abcdef…"),
    ([{"field": "observed.other"}, {"field": None}, {}], None),
    ([{"field": "observed.judge.prompt.digest"}, {"field": "observed.judge.prompt.path"},
      {"field": "observed.command.files.1.digest"}], "judge prompt template edited; grader script edited"),
])
def test_change_summary_table(changes: list, summary: str | None) -> None:
    assert change_summary(changes) == summary
