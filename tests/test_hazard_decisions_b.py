"""Five hazards as decision tables, in-process, on planted evidence: which binary runs (real executables,
copies and symlinks on a PATH made in a temp directory, pins by path and digest), execute bits lost in a
real git repository (real mode bits), which prefix packages come from (a ``python3`` and a ``pip`` on PATH
that answer as a given interpreter would), the model names a real HTTP server answers, and who listens on
a port (real sockets, from this process and a child).

Each row asserts the status, the finding ids and the exact summary a user reads. No execsys code is
replaced: the evidence is planted where the hazard looks for it.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from execsys.doctor import files
from execsys.doctor.context import Context, DoctorOptions
from execsys.doctor.hazards import (
    binary_aliasing,
    lost_mode_bits,
    model_name_honesty,
    package_prefixes,
    port_collisions,
)

# -- helpers ------------------------------------------------------------------------------------------------


def program(directory: Path, name: str, body: str = "echo 1.0", mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(mode)
    return path


def ctx(**options) -> Context:
    options.setdefault("shell_aliases", False)
    options.setdefault("timeout", 2.0)
    options.setdefault("evidence_digests", False)
    return Context(DoctorOptions(**options))


def ids(result) -> list[str]:
    return [f.id for f in result.findings if f.active]


# -- binary-aliasing ------------------------------------------------------------------------------------------

BA = "binary-aliasing"


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """Directories a, b, c put on PATH in that order."""
    dirs = [tmp_path / d for d in ("a", "b", "c")]
    for d in dirs:
        d.mkdir()
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, dirs)))
    return dirs


def test_one_program_is_ok(on_path) -> None:
    program(on_path[0], "tool")
    result = binary_aliasing.check(ctx(commands=["tool"]))
    assert (result.status, result.summary, ids(result)) == ("ok", "1 command: one program each on PATH", [])
    assert result.evidence[0] == f"tool [1] {on_path[0] / 'tool'}  not hashed"
    assert result.evidence[1] == f"tool runs: {on_path[0] / 'tool'} --version: exit 0: 1.0"
    assert result.evidence[2].startswith("shell aliases not checked: a node check runs under a daemon")
    assert result.fix == ""


def test_two_commands_are_counted(on_path) -> None:
    program(on_path[0], "tool")
    program(on_path[1], "other")
    result = binary_aliasing.check(ctx(commands=["tool", "other", "tool"]))
    assert result.summary == "2 commands: one program each on PATH"


def test_a_pinned_command_that_runs_is_ok_as_pinned(on_path) -> None:
    tool = program(on_path[0], "tool")
    result = binary_aliasing.check(ctx(commands=["tool"], pins={"tool": {"path": str(tool)}}))
    assert (result.status, result.summary) == ("ok", "1 command: one program each, as pinned")


def test_a_declared_command_not_on_path_fails(on_path) -> None:
    result = binary_aliasing.check(ctx(commands=["absent-tool"]))
    assert (result.status, ids(result)) == ("fail", ["binary-aliasing/not-on-path"])
    assert result.summary == "absent-tool: not found on PATH"
    assert "absent-tool: not found on PATH" in result.evidence
    assert result.fix.startswith("Call the program by absolute path in run scripts")


def test_a_default_command_not_on_path_is_no_finding(on_path) -> None:
    program(on_path[0], "python3")
    result = binary_aliasing.check(ctx(evidence_digests=False))  # the defaults: python3 is the only one here
    assert (result.status, result.summary) == ("ok", "1 command: one program each on PATH")


def test_a_pinned_default_command_not_on_path_fails(on_path) -> None:
    result = binary_aliasing.check(ctx(pins={"vllm": {"path": "/opt/vllm"}}))
    assert ids(result) == ["binary-aliasing/not-on-path"] and result.summary == "vllm: not found on PATH"


def test_nothing_on_path_is_a_skip(on_path) -> None:
    result = binary_aliasing.check(ctx())
    assert (result.status, result.summary) == ("skip", "none of the commands is on PATH")


def test_two_different_programs_by_one_name_warn_with_their_digests(on_path) -> None:
    first = program(on_path[0], "tool", "echo first")
    second = program(on_path[2], "tool", "echo second")
    result = binary_aliasing.check(ctx(commands=["tool"], evidence_digests=False))
    assert (result.status, ids(result)) == ("warn", ["binary-aliasing/several-programs"])
    assert result.summary == "tool: 2 different programs on PATH"
    digest_a, digest_b = files.digest(str(first)), files.digest(str(second))
    assert f"tool [1] {first}  {digest_a[:23]}" in result.evidence
    assert f"tool [2] {second}  {digest_b[:23]}" in result.evidence
    assert f"tool runs: {first} --version: exit 0: first" in result.evidence


def test_two_copies_of_one_program_are_one_program(on_path) -> None:
    program(on_path[0], "tool")
    program(on_path[1], "tool")
    result = binary_aliasing.check(ctx(commands=["tool"]))
    assert (result.status, result.summary) == ("ok", "1 command: one program each on PATH")


def test_a_symlink_to_the_same_file_is_shown_resolved_and_not_hashed(on_path) -> None:
    real = program(on_path[0], "tool")
    (on_path[1] / "tool").symlink_to(real)
    result = binary_aliasing.check(ctx(commands=["tool"], evidence_digests=False))
    assert result.status == "ok"
    assert f"tool [2] {on_path[1] / 'tool'} -> {real}  not hashed" in result.evidence


def test_evidence_digests_hash_even_one_program(on_path) -> None:
    tool = program(on_path[0], "tool")
    result = binary_aliasing.check(ctx(commands=["tool"], evidence_digests=True))
    assert result.evidence[0] == f"tool [1] {tool}  {files.digest(str(tool))[:23]}"


def test_a_pinned_path_that_is_not_first_fails(on_path, tmp_path) -> None:
    first = program(on_path[0], "tool")
    pinned = program(on_path[1], "tool")
    result = binary_aliasing.check(ctx(commands=["tool"], pins={"tool": {"path": str(pinned)}}))
    assert "binary-aliasing/pinned-path-differs" in ids(result) and result.status == "fail"
    assert result.summary == f"tool: PATH runs {first}, execsys.toml pins {pinned}"


def test_a_pinned_path_reached_through_a_symlink_is_the_pinned_one(on_path, tmp_path) -> None:
    real = program(tmp_path / "opt", "tool")
    (on_path[0] / "tool").symlink_to(real)
    result = binary_aliasing.check(ctx(commands=["tool"], pins={"tool": {"path": str(real)}}))
    assert result.status == "ok"


def test_a_pinned_path_under_home_is_expanded(on_path, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    program(on_path[0], "tool")
    (tmp_path / "x").mkdir()
    result = binary_aliasing.check(ctx(commands=["tool"], pins={"tool": {"path": "~/x/tool"}}))
    assert result.summary == f"tool: PATH runs {on_path[0] / 'tool'}, execsys.toml pins {tmp_path}/x/tool"


def test_the_pinned_digest_is_the_first_match_s(on_path) -> None:
    first = program(on_path[0], "tool", "echo first")
    program(on_path[1], "tool", "echo second")
    result = binary_aliasing.check(ctx(commands=["tool"], pins={"tool": {"digest": files.digest(str(first))}}))
    assert ids(result) == ["binary-aliasing/several-programs"]


def test_a_pinned_digest(on_path) -> None:
    tool = program(on_path[0], "tool")
    digest = files.digest(str(tool))
    same = binary_aliasing.check(ctx(commands=["tool"], pins={"tool": {"digest": digest}}))
    assert (same.status, same.summary) == ("ok", "1 command: one program each, as pinned")
    algo = digest.split(":")[0]
    other = f"{algo}:{'0' * 64}"
    differs = binary_aliasing.check(ctx(commands=["tool"], pins={"tool": {"digest": other}}))
    assert (differs.status, ids(differs)) == ("fail", ["binary-aliasing/pinned-digest-differs"])
    assert differs.summary == f"tool: {tool} is {digest[:23]}, execsys.toml pins {other[:23]}"
    foreign = "md5:" + "0" * 32
    elsewhere = binary_aliasing.check(ctx(commands=["tool"], pins={"tool": {"digest": foreign}}))
    assert elsewhere.status == "ok"
    assert f"tool: pinned md5 digest not comparable here ({algo} only)" in elsewhere.evidence


def test_withheld_commands_only_are_a_skip_naming_why(on_path) -> None:
    result = binary_aliasing.check(ctx(commands=[], withheld_commands=["./tool"], untrusted="not trusted: x"))
    assert (result.status, result.summary, result.evidence[-1]) == ("skip", "not trusted: x",
                                                                    "./tool: not run (not trusted: x)")
    default = binary_aliasing.check(ctx(commands=[], withheld_commands=["./t"]))
    assert default.summary == "declaration not trusted"


def test_withheld_commands_beside_checked_ones_are_listed(on_path) -> None:
    program(on_path[0], "tool")
    result = binary_aliasing.check(ctx(commands=["tool"], withheld_commands=["./x"]))
    assert result.status == "ok" and "./x: not run (declaration not trusted)" in result.evidence


def test_withheld_commands_beside_a_missing_one_still_fail(on_path) -> None:
    result = binary_aliasing.check(ctx(commands=["absent-tool"], withheld_commands=["./x"]))
    assert result.status == "fail"


def shell_answering(tmp_path, monkeypatch, name: str, body: str) -> None:
    """A login shell of the given name that answers the doctor's `type`/`whence` loop from ``body``."""
    import shellingham

    shell = program(tmp_path / "shells", name, body)
    monkeypatch.setattr(shellingham, "detect_shell", lambda: (name, str(shell)))


@pytest.mark.parametrize(("shell", "answer", "found"), [
    pytest.param("bash", r'printf "tool\talias\nother\tfile\nls\tfunction\n"', {"tool": "alias"}, id="bash-alias"),
    pytest.param("zsh", r'printf "tool\ttool: function\nother\tother: command\n"', {"tool": "function"},
                 id="zsh-function"),
    pytest.param("bash", "exit 0", {}, id="nothing-shadowed"),
])
def test_shell_shadows(tmp_path, monkeypatch, on_path, shell, answer, found) -> None:
    shell_answering(tmp_path, monkeypatch, shell, answer)
    program(on_path[0], "tool")
    program(on_path[0], "other")
    result = binary_aliasing.check(ctx(commands=["tool", "other"], shell_aliases=True))
    shadows = [f for f in result.findings if f.id == "binary-aliasing/shell-shadow"]
    assert [f.text for f in shadows] == [f"{n}: a shell {k} shadows the binary in interactive shells"
                                         for n, k in found.items()]
    assert result.status == ("warn" if found else "ok")


def test_the_shell_is_asked_with_the_names_and_no_history(tmp_path, monkeypatch) -> None:
    shell_answering(tmp_path, monkeypatch, "bash", f'printf "%s|" "$HISTFILE" "$@" > {tmp_path}/asked')
    kinds, note = binary_aliasing._shell_shadows(ctx(), ["a", "b"])
    assert (kinds, note) == ({}, None)
    script = 'for n in "$@"; do printf "%s\\t%s\\n" "$n" "$(type -t -- "$n" 2>/dev/null)"; done'
    assert (tmp_path / "asked").read_text() == f"/dev/null|-ic|{script}|execsys-doctor|a|b|"


@pytest.mark.parametrize(("name", "note"), [
    ("fish", "shell fish: aliases not checked (bash and zsh are)"),
    ("dash", "shell dash: aliases not checked (bash and zsh are)"),
])
def test_other_shells_are_not_asked(tmp_path, monkeypatch, name, note) -> None:
    shell_answering(tmp_path, monkeypatch, name, "exit 0")
    assert binary_aliasing._shell_shadows(ctx(), ["a"]) == ({}, note)


def test_a_shell_that_hangs_is_noted(tmp_path, monkeypatch) -> None:
    shell_answering(tmp_path, monkeypatch, "bash", "exec sleep 20")
    kinds, note = binary_aliasing._shell_shadows(ctx(timeout=0.5), ["a"])
    assert kinds == {} and note is not None
    assert note.startswith("bash -i did not answer (") and note.endswith("); aliases not checked")


def test_no_detectable_shell_falls_back_to_SHELL(tmp_path, monkeypatch) -> None:
    import shellingham

    def fails():
        raise shellingham.ShellDetectionFailure()

    monkeypatch.setattr(shellingham, "detect_shell", fails)
    monkeypatch.delenv("SHELL", raising=False)
    assert binary_aliasing._shell_shadows(ctx(), ["a"]) == ({}, "operator's shell unknown; aliases not checked")
    shell = program(tmp_path / "s", "zsh", r'printf "a\ta: alias\n"')
    monkeypatch.setenv("SHELL", str(shell))
    assert binary_aliasing._shell_shadows(ctx(), ["a"]) == ({"a": "alias"}, None)


# -- lost-mode-bits ------------------------------------------------------------------------------------------

LMB = "lost-mode-bits"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "harness"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "core.fileMode", "true")
    return root


def tracked(repo: Path, path: str, content: str, mode: int) -> Path:
    full = repo / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(content)
    full.chmod(mode)
    git(repo, "add", path)
    return full


def test_matching_bits_are_ok(repo) -> None:
    tracked(repo, "run.sh", "#!/bin/sh\n", 0o755)
    tracked(repo, "README", "text\n", 0o644)
    result = lost_mode_bits.check(ctx(repos=[str(repo)]))
    assert (result.status, result.summary) == ("ok", "1 repository: execute bits match git")
    assert f"{repo}: 2 tracked files compared with the index" in result.evidence
    assert any(e.startswith(f"{repo}: on ") and "(mounted at " in e for e in result.evidence)


def test_two_repositories_are_counted(repo, tmp_path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    result = lost_mode_bits.check(ctx(repos=[str(repo), str(other)]))
    assert result.summary == "2 repositories: execute bits match git"


def test_a_lost_execute_bit_fails(repo) -> None:
    script = tracked(repo, "run.sh", "#!/bin/sh\n", 0o755)
    script.chmod(0o644)
    result = lost_mode_bits.check(ctx(repos=[str(repo)]))
    assert (result.status, ids(result)) == ("fail", ["lost-mode-bits/execute-bit-lost"])
    assert result.summary == f"{repo}: 1 file(s) are 100755 in git but not executable here: run.sh"
    assert result.fix.startswith("Restore the bits (`chmod +x FILE`")


def test_only_the_first_eight_are_named(repo) -> None:
    for i in range(9):
        tracked(repo, f"s{i}", "x\n", 0o755).chmod(0o644)
    result = lost_mode_bits.check(ctx(repos=[str(repo)]))
    assert result.summary == (f"{repo}: 9 file(s) are 100755 in git but not executable here: "
                              + ", ".join(f"s{i}" for i in range(8)) + " ...")


def test_exactly_eight_are_all_named(repo) -> None:
    for i in range(8):
        tracked(repo, f"s{i}", "x\n", 0o755).chmod(0o644)
    result = lost_mode_bits.check(ctx(repos=[str(repo)]))
    assert result.summary.endswith(", ".join(f"s{i}" for i in range(8)))


def test_a_gained_bit_and_an_unbitted_script_warn(repo) -> None:
    tracked(repo, "data.txt", "x\n", 0o644).chmod(0o755)
    tracked(repo, "bin/tool", "#!/bin/sh\n", 0o644)
    tracked(repo, "notes.txt", "#!/bin/sh\n", 0o644)  # a shebang, but not where scripts live: not read
    tracked(repo, "plain.sh", "echo\n", 0o644)  # a script's name, no shebang
    result = lost_mode_bits.check(ctx(repos=[str(repo)]))
    assert result.status == "warn"
    assert ids(result) == ["lost-mode-bits/execute-bit-gained", "lost-mode-bits/script-without-execute-bit"]
    texts = [f.text for f in result.findings]
    assert texts == [f"{repo}: 1 file(s) are 100644 in git but executable here: data.txt",
                     f"{repo}: 1 script(s) with a shebang and no execute bit: bin/tool"]
    assert result.summary == texts[0] + " (+1 more)"


@pytest.mark.parametrize(("path", "script"), [
    ("run.sh", True), ("x.bash", True), ("x.zsh", True), ("x.ksh", True), ("Makefile", True),
    ("scripts/go.py", True), ("bin/go.py", True), ("lib/go.py", False), ("go.py", False), ("sh", True),
])
def test_what_looks_like_a_script(path, script) -> None:
    assert lost_mode_bits._looks_like_script(path) is script


def test_core_filemode_false_warns(repo) -> None:
    git(repo, "config", "core.fileMode", "false")
    result = lost_mode_bits.check(ctx(repos=[str(repo)]))
    assert (result.status, ids(result)) == ("warn", ["lost-mode-bits/core-filemode-false"])
    assert result.summary == f"{repo}: core.fileMode=false -- git will not show execute bits that are lost"
    git(repo, "config", "core.fileMode", "FALSE")
    assert lost_mode_bits.check(ctx(repos=[str(repo)])).status == "warn"


def test_not_a_repository_fails(tmp_path) -> None:
    result = lost_mode_bits.check(ctx(repos=[str(tmp_path)]))
    assert (result.status, ids(result)) == ("fail", ["lost-mode-bits/not-a-repository"])
    assert result.summary.startswith(f"{tmp_path}: not a git repository (fatal: not a git repository")
    assert result.evidence[1:] == []


def test_symlinks_and_submodule_entries_are_not_compared(repo) -> None:
    tracked(repo, "target.sh", "#!/bin/sh\n", 0o755)
    (repo / "link").symlink_to("target.sh")
    git(repo, "add", "link")
    result = lost_mode_bits.check(ctx(repos=[str(repo)]))
    assert f"{repo}: 1 tracked files compared with the index" in result.evidence
    assert result.status == "ok"


def test_a_deleted_tracked_file_is_skipped(repo) -> None:
    tracked(repo, "gone.sh", "#!/bin/sh\n", 0o755).unlink()
    tracked(repo, "dir/x", "x", 0o644)
    (repo / "dir" / "x").unlink()
    (repo / "dir" / "x").mkdir()
    result = lost_mode_bits.check(ctx(repos=[str(repo)]))
    assert result.status == "ok"


def test_nothing_to_look_at_is_a_skip(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = lost_mode_bits.check(ctx(repos=[]))
    assert (result.status, result.summary) == ("skip", "not in a git repository and no --repo/--path given")


def test_a_declared_path_is_named_with_its_filesystem(tmp_path) -> None:
    from execsys.doctor import sysinfo

    result = lost_mode_bits.check(ctx(repos=[], paths=[str(tmp_path)]))
    fs = sysinfo.mount_fstype(str(tmp_path))
    assert fs is not None and fs[0] not in lost_mode_bits.MODELESS_FS
    assert result.evidence == [f"{tmp_path}: on {fs[0]}"]
    assert (result.status, result.summary) == ("ok", "0 repositories: execute bits match git")


def test_the_modeless_filesystems() -> None:
    assert {"9p", "drvfs", "vfat", "ntfs", "fuse.sshfs", "virtiofs", "cifs"} <= lost_mode_bits.MODELESS_FS
    assert not {"ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs"} & lost_mode_bits.MODELESS_FS


# -- model-name-honesty ----------------------------------------------------------------------------------------

class Engine(http.server.BaseHTTPRequestHandler):
    """Answers from the server's ``script``: path -> (status, body); records what it was asked."""

    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.asked.append((self.command, self.path, dict(self.headers), body))  # type: ignore[attr-defined]
        status, data = self.server.script.get(self.path, (404, b'{"error": {"message": "no route"}}'))  # type: ignore[attr-defined]
        payload = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _answer
    do_POST = _answer


@pytest.fixture
def engine():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    server.script = {}  # type: ignore[attr-defined]
    server.asked = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def endpoint_of(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


MODELS = {"data": [{"id": "llama-3-8b"}, {"id": "qwen"}]}
ANSWERED = {"model": "execsys-unlisted-model-name-check", "choices": [{"message": {"content": "hello"}}]}


def test_no_endpoint_is_a_skip() -> None:
    result = model_name_honesty.check(ctx())
    assert (result.status, result.summary) == ("skip", "no endpoint declared ([runtime] endpoint)")


def test_an_engine_that_answers_any_name_warns(engine) -> None:
    engine.script.update({"/v1/models": (200, MODELS), "/v1/chat/completions": (200, ANSWERED)})
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine)))
    assert (result.status, ids(result)) == ("warn", ["model-name-honesty/answers-any-name"])
    assert result.summary == model_name_honesty.ANSWERS_ANY_NAME
    base = f"{endpoint_of(engine)}/v1"
    assert result.evidence[-2:] == [
        "asked for the unlisted model 'execsys-unlisted-model-name-check': HTTP 200, answered as "
        "'execsys-unlisted-model-name-check', saying 'hello'", f"{base} lists: llama-3-8b, qwen"]
    assert result.fix.startswith("Check the model name every harness sends")
    method, path, headers, body = engine.asked[1]
    assert (method, path) == ("POST", "/v1/chat/completions")
    sent = json.loads(body)
    assert sent == {"model": "execsys-unlisted-model-name-check", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 1, "temperature": 0}
    assert headers["Content-Type"] == "application/json" and headers["Accept"] == "application/json"
    assert "Authorization" not in headers
    assert engine.asked[0][:2] == ("GET", "/v1/models")


def test_an_answer_without_choices_still_warns(engine) -> None:
    engine.script.update({"/v1/models": (200, MODELS), "/v1/chat/completions": (200, {"model": "qwen"})})
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine)))
    assert result.status == "warn"
    assert result.evidence[-2] == ("asked for the unlisted model 'execsys-unlisted-model-name-check': HTTP 200, "
                                   "answered as 'qwen'")


def test_an_unlisted_name_is_never_a_listed_one(engine) -> None:
    name = model_name_honesty.UNLISTED_MODEL_NAME
    engine.script.update({"/v1/models": (200, {"data": [{"id": name}, {"id": name + "-x"}]}),
                          "/v1/chat/completions": (404, {"message": "model not found"})})
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine)))
    assert json.loads(engine.asked[1][3])["model"] == name + "-x-x"
    assert result.status == "ok"


@pytest.mark.parametrize(("status", "body", "said"), [
    pytest.param(404, {"error": {"message": "The model `x` does not exist."}}, "The model `x` does not exist.",
                 id="openai-error-message"),
    pytest.param(400, {"error": "bad  model\nname"}, "bad model name", id="error-string"),
    pytest.param(404, {"message": "no such model"}, "no such model", id="vllm-message"),
    pytest.param(422, {"detail": "unknown model"}, "unknown model", id="fastapi-detail"),
    pytest.param(404, {"error": {"message": ""}, "detail": "fallback"}, "fallback", id="empty-message-falls-through"),
    pytest.param(400, b"plain   text\nrefusal", "plain text refusal", id="not-json"),
    pytest.param(400, [1, 2], "[1, 2]", id="json-not-an-object"),
    pytest.param(400, {"other": 1}, '{"other": 1}', id="no-message-field"),
])
def test_an_engine_that_refuses_is_ok(engine, status, body, said) -> None:
    engine.script.update({"/v1/models": (200, MODELS), "/v1/chat/completions": (status, body)})
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine)))
    base = f"{endpoint_of(engine)}/v1"
    assert (result.status, result.summary) == ("ok", f"{base} refuses a model name it does not serve (HTTP {status})")
    assert result.evidence == [f"asked for the unlisted model 'execsys-unlisted-model-name-check': HTTP {status}: "
                               f"{said}", f"{base} lists: llama-3-8b, qwen"]


def test_a_long_message_is_cut_at_160() -> None:
    assert model_name_honesty._message(json.dumps({"message": "y" * 300}).encode()) == "y" * 160
    assert model_name_honesty._message(b"z" * 300) == "z" * 160


def test_more_than_eight_models_are_elided(engine) -> None:
    listed = [f"m{i}" for i in range(9)]
    engine.script.update({"/v1/models": (200, {"data": [{"id": m} for m in listed]}),
                          "/v1/chat/completions": (404, {"message": "no"})})
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine)))
    assert result.evidence[-1] == f"{endpoint_of(engine)}/v1 lists: " + ", ".join(listed[:8]) + " …"
    engine.script["/v1/models"] = (200, {"data": [{"id": m} for m in listed[:8]]})
    assert model_name_honesty.check(ctx(endpoint=endpoint_of(engine))).evidence[-1].endswith("m7")


@pytest.mark.parametrize(("status", "body", "summary"), [
    pytest.param(401, {}, "refused the model list (HTTP 401): declare [runtime] api_key_env", id="401"),
    pytest.param(403, MODELS, "refused the model list (HTTP 403): declare [runtime] api_key_env", id="403"),
    pytest.param(200, {"data": []}, "lists no models (GET /models: HTTP 200)", id="empty-list"),
    pytest.param(200, b"not json", "lists no models (GET /models: HTTP 200)", id="not-json"),
    pytest.param(200, [1], "lists no models (GET /models: HTTP 200)", id="not-an-object"),
    pytest.param(200, {"data": [{"name": "x"}, "y", {"id": None}]}, "lists no models (GET /models: HTTP 200)",
                 id="entries-without-ids"),
    pytest.param(500, MODELS, "lists no models (GET /models: HTTP 500)", id="server-error"),
])
def test_a_model_list_that_cannot_be_used_is_a_skip(engine, status, body, summary) -> None:
    engine.script["/v1/models"] = (status, body)
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine)))
    assert (result.status, result.summary) == ("skip", f"endpoint {endpoint_of(engine)}/v1 {summary}")
    assert len(engine.asked) == 1


def test_listed_ids_are_taken_as_text(engine) -> None:
    engine.script.update({"/v1/models": (200, {"data": [{"id": 7}, {"id": "a"}]}),
                          "/v1/chat/completions": (404, {"message": "no"})})
    assert model_name_honesty.check(ctx(endpoint=endpoint_of(engine))).evidence[-1].endswith(" lists: 7, a")


@pytest.mark.parametrize("status", [401, 403, 500, 503])
def test_a_completion_that_could_not_be_asked_is_a_skip(engine, status) -> None:
    engine.script.update({"/v1/models": (200, MODELS), "/v1/chat/completions": (status, {"message": "busy"})})
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine)))
    base = f"{endpoint_of(engine)}/v1"
    assert (result.status, result.summary) == ("skip", f"endpoint {base} could not be asked (HTTP {status}: busy)")
    assert result.evidence == [f"{base} lists: llama-3-8b, qwen"]


@pytest.mark.parametrize("status", [400, 404, 422, 499])
def test_a_client_error_is_a_refusal(engine, status) -> None:
    engine.script.update({"/v1/models": (200, MODELS), "/v1/chat/completions": (status, {"message": "no"})})
    assert model_name_honesty.check(ctx(endpoint=endpoint_of(engine))).status == "ok"


def test_the_api_key_is_sent_and_never_shown(engine, monkeypatch) -> None:
    monkeypatch.setenv("ENGINE_KEY", "sk-test-abcdef")
    engine.script.update({"/v1/models": (200, MODELS), "/v1/chat/completions": (404, {"message": "no"})})
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine), api_key_env="ENGINE_KEY"))
    assert [a[2]["Authorization"] for a in engine.asked] == ["Bearer sk-test-abcdef"] * 2
    assert "sk-test-abcdef" not in json.dumps(result.to_json())
    monkeypatch.delenv("ENGINE_KEY")
    model_name_honesty.check(ctx(endpoint=endpoint_of(engine), api_key_env="ENGINE_KEY"))
    assert "Authorization" not in engine.asked[-1][2]


def test_userinfo_in_the_endpoint_is_redacted(engine) -> None:
    port = engine.server_address[1]
    result = model_name_honesty.check(ctx(endpoint=f"http://user:hunter2@127.0.0.1:{port}/v1"))
    assert "hunter2" not in result.summary and result.status == "skip"


@pytest.mark.parametrize(("declared", "base"), [
    ("http://h:8000", "http://h:8000/v1"), ("http://h:8000/", "http://h:8000/v1"),
    ("http://h:8000/v1/", "http://h:8000/v1"), ("h:8000", "http://h:8000/v1"),
    ("https://h/api/v2", "https://h/api/v2"),
])
def test_the_api_base(declared, base) -> None:
    assert model_name_honesty._base(declared) == base


def test_a_closed_port_is_a_skip_naming_why() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = model_name_honesty.check(ctx(endpoint=f"http://127.0.0.1:{port}"))
    assert result.status == "skip"
    assert result.summary.startswith(f"endpoint http://127.0.0.1:{port}/v1 did not answer (/models: ")
    assert "ConnectionRefusedError" in result.summary


def test_a_completion_that_never_answers_is_a_skip(engine) -> None:
    hold = threading.Event()

    class Slow(Engine):
        def do_POST(self) -> None:
            hold.wait(10)

    slow = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    slow.script = {"/v1/models": (200, MODELS)}  # type: ignore[attr-defined]
    slow.asked = []  # type: ignore[attr-defined]
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    try:
        result = model_name_honesty.check(ctx(endpoint=endpoint_of(slow), timeout=0.5))
        assert result.status == "skip"
        assert result.summary == (f"endpoint {endpoint_of(slow)}/v1 did not answer a one-token request "
                                  "(/chat/completions: no answer in the time allowed)")
    finally:
        hold.set()
        slow.shutdown()
        slow.server_close()


def test_a_body_over_the_limit_is_not_read(engine) -> None:
    engine.script["/v1/models"] = (200, b"x" * (model_name_honesty.BODY_LIMIT + 1))
    result = model_name_honesty.check(ctx(endpoint=endpoint_of(engine)))
    assert result.summary == f"endpoint {endpoint_of(engine)}/v1 did not answer (/models answered more than 1 MiB)"
    engine.script["/v1/models"] = (200, b"x" * model_name_honesty.BODY_LIMIT)
    assert "lists no models" in model_name_honesty.check(ctx(endpoint=endpoint_of(engine))).summary


def test_no_time_left_is_unanswered() -> None:
    import time

    with pytest.raises(model_name_honesty._Unanswered, match="no time left"):
        model_name_honesty._left(time.monotonic() - 0.001)
    assert model_name_honesty._left(time.monotonic() + 5) > 4


# -- package-prefixes -------------------------------------------------------------------------------------------

PP = "package-prefixes"


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("PYTHONPATH", "PYTHONHOME", "CONDA_PREFIX", "VIRTUAL_ENV", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT",
                "PIP_USER", "PIP_CONFIG_FILE", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    return bindir


def interpreter(bindir: Path, tmp_path: Path, **facts) -> dict:
    """A python3 on PATH that describes itself as ``facts`` (over a plain interpreter in tmp_path/env)."""
    prefix = str(tmp_path / "env")
    site = f"{prefix}/lib/python3.11/site-packages"
    os.makedirs(site, exist_ok=True)
    info = {"executable": f"{prefix}/bin/python3", "prefix": prefix, "base_prefix": prefix, "version": "3.11.7",
            "path": [f"{prefix}/lib/python311.zip", site], "usersite": f"{tmp_path}/home/.local/lib/site-packages",
            "user_enabled": True, "dists": {site: {"numpy": "1.26.0"}}, "entries": {}}
    info.update(facts)
    answer = tmp_path / "python3-answer"
    answer.write_text(f"{info!r}\n")
    # shell builtins only: PATH holds nothing but the planted programs
    program(bindir, "python3", f"while IFS= read -r line; do printf '%s\\n' \"$line\"; done < {answer}")
    return info


def pip(bindir: Path, location: str, name: str = "pip") -> None:
    program(bindir, name, f'echo "pip 24.0 from {location}/pip (python 3.11)"')


def test_one_prefix_is_ok(clean_env, tmp_path) -> None:
    info = interpreter(clean_env, tmp_path)
    pip(clean_env, info["path"][1])
    result = package_prefixes.check(ctx())
    assert (result.status, result.summary) == ("ok", f"python3 and pip share {info['prefix']}; one copy of each "
                                                     "distribution")
    assert result.evidence == [
        f"python3 ({clean_env}/python3): {info['executable']} 3.11.7, prefix {info['prefix']}",
        f"pip ({clean_env}/pip): pip 24.0 installs into {info['path'][1]} (python 3.11)"]


def test_pip_installing_elsewhere_fails(clean_env, tmp_path) -> None:
    info = interpreter(clean_env, tmp_path)
    pip(clean_env, "/usr/lib/python3/dist-packages", "pip3")
    result = package_prefixes.check(ctx())
    assert (result.status, ids(result)) == ("fail", ["package-prefixes/pip-installs-elsewhere"])
    assert result.summary == (f"pip3 installs into /usr/lib/python3/dist-packages (python 3.11), which python3 "
                              f"({info['executable']}, 3.11.7) does not import from")
    assert result.fix.startswith("Install with the interpreter that runs")


def test_a_pip_that_does_not_say_where_is_evidence(clean_env, tmp_path) -> None:
    interpreter(clean_env, tmp_path)
    program(clean_env, "pip", "echo something else")
    result = package_prefixes.check(ctx())
    assert result.status == "ok"
    assert result.evidence[-1] == f"pip: {clean_env}/pip --version: exit 0: something else"


def test_python3_missing_is_a_skip(clean_env) -> None:
    result = package_prefixes.check(ctx())
    assert (result.status, result.summary) == ("skip", "python3 is not on PATH")


def test_python3_missing_with_findings_keeps_them(clean_env, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/x")
    result = package_prefixes.check(ctx())
    assert result.status == "warn"
    assert result.summary == "PYTHONPATH=/x is set: it changes what every interpreter imports"


def test_a_silent_python3_is_an_error(clean_env) -> None:
    program(clean_env, "python3", "echo nothing useful; exit 1")
    result = package_prefixes.check(ctx())
    assert (result.status, ids(result)) == ("error", ["package-prefixes/python3-silent"])
    assert result.summary == (f"python3 did not describe itself: {clean_env}/python3 -c <code>: exit 1: "
                              "nothing useful")


@pytest.mark.parametrize(("env", "finding", "text"), [
    ({"PYTHONPATH": "/extra"}, "pythonpath-set", "PYTHONPATH=/extra is set: it changes what every interpreter imports"),
    ({"PYTHONHOME": "/home"}, "pythonhome-set", "PYTHONHOME=/home is set: it changes what every interpreter imports"),
    ({"CONDA_PREFIX": "/conda", "VIRTUAL_ENV": "/venv"}, "venv-on-conda",
     "a venv (/venv) is active on top of conda (/conda): two package worlds"),
    ({"PIP_TARGET": "/t"}, "pip-redirected", "PIP_TARGET=/t is set"),
    ({"PIP_PREFIX": "/p"}, "pip-redirected", "PIP_PREFIX=/p is set"),
    ({"PIP_ROOT": "/r"}, "pip-redirected", "PIP_ROOT=/r is set"),
    ({"PIP_USER": "yes"}, "pip-redirected", "PIP_USER is set: installs go to the user site"),
    ({"PIP_USER": "On"}, "pip-redirected", "PIP_USER is set: installs go to the user site"),
])
def test_the_environment_s_warnings(clean_env, tmp_path, monkeypatch, env, finding, text) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    interpreter(clean_env, tmp_path)
    result = package_prefixes.check(ctx())
    assert (result.status, ids(result), result.summary) == ("warn", [f"package-prefixes/{finding}"], text)


@pytest.mark.parametrize("value", ["0", "false", "", "no"])
def test_pip_user_off_is_no_finding(clean_env, tmp_path, monkeypatch, value) -> None:
    monkeypatch.setenv("PIP_USER", value)
    assert package_prefixes.pip_redirects() == []


def test_only_conda_or_only_a_venv_is_one_world(clean_env, monkeypatch) -> None:
    monkeypatch.setenv("CONDA_PREFIX", "/conda")
    result = package_prefixes.check(ctx())
    assert result.status == "skip"
    monkeypatch.delenv("CONDA_PREFIX")
    monkeypatch.setenv("VIRTUAL_ENV", "/venv")
    assert package_prefixes.check(ctx()).status == "skip"


def without_etc(found: list[str]) -> list[str]:
    """The files found, less this machine's own /etc/pip.conf (checked to be listed where it exists)."""
    assert ("/etc/pip.conf" in found) is os.path.isfile("/etc/pip.conf")
    return [f for f in found if f != "/etc/pip.conf"]


def test_pip_configuration_files(clean_env, tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text("[global]\ntarget = /t\n[install]\nuser = true\n")
    (home / ".pip").mkdir()
    (home / ".pip" / "pip.conf").write_text("[install]\nprefix = /p\nroot = /r\n[other]\ntarget = /x\n")
    (tmp_path / "xdg" / "pip").mkdir(parents=True)
    (tmp_path / "xdg" / "pip" / "pip.conf").write_text("[global]\nuser = no\n")
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pip.conf").write_text("[global]\nuser = 1\n")
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    named = tmp_path / "named.conf"
    named.write_text("[install]\ntarget = /named\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(named))
    assert without_etc(package_prefixes.pip_config_files()) == [
        str(tmp_path / "xdg/pip/pip.conf"), str(home / ".pip/pip.conf"), str(home / ".config/pip/pip.conf"),
        str(venv / "pip.conf"), str(named)]
    assert package_prefixes.pip_redirects() == [
        f"{home}/.pip/pip.conf: [install] prefix = /p", f"{home}/.pip/pip.conf: [install] root = /r",
        f"{home}/.config/pip/pip.conf: [global] target = /t",
        f"{home}/.config/pip/pip.conf: [install] user = true (installs go to the user site)",
        f"{venv}/pip.conf: [global] user = true (installs go to the user site)",
        f"{named}: [install] target = /named"]


def test_pip_config_file_devnull_and_xdg_config_home(clean_env, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    xdg = tmp_path / "cfg"
    (xdg / "pip").mkdir(parents=True)
    (xdg / "pip" / "pip.conf").write_text("[global]\nroot = /r\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert without_etc(package_prefixes.pip_config_files()) == [str(xdg / "pip" / "pip.conf")]


def test_an_empty_xdg_config_dirs_names_no_relative_file(clean_env, tmp_path, monkeypatch) -> None:
    (tmp_path / "pip").mkdir()
    (tmp_path / "pip" / "pip.conf").write_text("[global]\ntarget = /t\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_DIRS", "")
    assert without_etc(package_prefixes.pip_config_files()) == []


def test_an_unreadable_pip_configuration_is_skipped(clean_env, tmp_path) -> None:
    conf = tmp_path / "home" / ".pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_bytes(b"[global\ntarget = /t\n")
    assert package_prefixes.pip_redirects() == []
    conf.write_bytes(b"[global]\ntarget = \xff\n")
    assert package_prefixes.pip_redirects() == []


def test_a_venv_on_a_conda_base_warns(clean_env, tmp_path) -> None:
    base = tmp_path / "conda"
    (base / "conda-meta").mkdir(parents=True)
    info = interpreter(clean_env, tmp_path, base_prefix=str(base))
    result = package_prefixes.check(ctx())
    assert (result.status, ids(result)) == ("warn", ["package-prefixes/venv-on-conda"])
    assert result.summary == f"the venv {info['prefix']} is layered on a conda base ({base})"
    assert f"python3 is a venv on {base}" in result.evidence


def test_a_venv_on_a_plain_base_is_only_evidence(clean_env, tmp_path) -> None:
    interpreter(clean_env, tmp_path, base_prefix="/usr")
    result = package_prefixes.check(ctx())
    assert result.status == "ok" and "python3 is a venv on /usr" in result.evidence


def sites(tmp_path: Path, *names: str) -> list[str]:
    out = []
    for name in names:
        path = tmp_path / name
        path.mkdir(parents=True, exist_ok=True)
        out.append(str(path))
    return out


def test_a_user_site_copy_shadowing_fails(clean_env, tmp_path) -> None:
    user, env = sites(tmp_path, "user", "env")
    interpreter(clean_env, tmp_path, path=[user, env], usersite=user,
                dists={user: {"torch": "2.1.0"}, env: {"torch": "2.3.0"}})
    result = package_prefixes.check(ctx())
    assert (result.status, ids(result)) == ("fail", ["package-prefixes/user-site-shadows"])
    assert result.summary == f"torch: user site 2.1.0 shadows the environment's 2.3.0 (2.1.0 in {user}, 2.3.0 in {env})"
    assert f"user site {user} is active with 1 distribution(s)" in result.evidence


def test_a_user_site_that_is_off_is_not_active(clean_env, tmp_path) -> None:
    user, env = sites(tmp_path, "user", "env")
    interpreter(clean_env, tmp_path, path=[user, env], usersite=user, user_enabled=False,
                dists={user: {"a": "1"}, env: {"b": "1"}})
    result = package_prefixes.check(ctx())
    assert not any(e.startswith("user site") for e in result.evidence)


def test_twice_with_different_versions_fails_and_names_the_one_imported(clean_env, tmp_path) -> None:
    first, second = sites(tmp_path, "one", "two")
    interpreter(clean_env, tmp_path, path=[first, second], usersite=second,
                dists={first: {"numpy": "1.26.0"}, second: {"numpy": "2.0.0"}})
    result = package_prefixes.check(ctx())
    assert (result.status, ids(result)) == ("fail", ["package-prefixes/installed-twice-different-versions"])
    assert result.summary == (f"numpy: installed twice on sys.path with different versions (1.26.0 in {first}, "
                              f"2.0.0 in {second}); 1.26.0 imports")


def test_twice_with_one_version_warns(clean_env, tmp_path) -> None:
    user, env = sites(tmp_path, "user", "env")
    interpreter(clean_env, tmp_path, path=[user, env], usersite=user,
                dists={user: {"numpy": "1.26.0", "b": "1"}, env: {"numpy": "1.26.0", "a": "1"}})
    result = package_prefixes.check(ctx())
    assert (result.status, ids(result)) == ("warn", ["package-prefixes/installed-twice"])
    assert result.summary == f"numpy: installed twice on sys.path (1.26.0 in {user}, 1.26.0 in {env})"
    assert f"user site {user} is active with 2 distribution(s)" in result.evidence


def test_a_python3_answering_on_its_second_try_says_so(clean_env, tmp_path) -> None:
    marker = tmp_path / "tried"
    info = interpreter(clean_env, tmp_path)
    script = clean_env / "python3"
    body = script.read_text().split("\n", 1)[1]
    script.write_text(f"#!/bin/sh\nif [ ! -e {marker} ]; then : > {marker}; exec /bin/sleep 10; fi\n{body}")
    result = package_prefixes.check(ctx(timeout=0.5))
    assert result.status == "ok"
    assert result.evidence[1] == "python3 gave no answer within 0.5s at first; it answered when asked again"
    assert info["prefix"] in result.summary


# -- port-collisions -------------------------------------------------------------------------------------------

def listening(family: int = socket.AF_INET, address: str = "127.0.0.1", port: int = 0,
              reuse: bool = False) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    if reuse:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((address, port))
    s.listen()
    return s


@pytest.fixture
def child_listener():
    """Start a child process listening on (family, address, port) with SO_REUSEPORT; returns its pid."""
    children: list[subprocess.Popen] = []

    def start(port: int, family: str = "AF_INET", address: str = "127.0.0.1") -> int:
        code = (f"import socket,sys,time\ns=socket.socket(socket.{family});"
                "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
                + ("s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n" if family == "AF_INET6" else "")
                + f"s.bind(({address!r}, {port})); s.listen(); print('up', flush=True); time.sleep(60)")
        argv = [sys.executable, "-c", code]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
        children.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
        return proc.pid

    yield start
    for proc in children:
        proc.kill()
        proc.wait()


def test_no_port_is_a_skip() -> None:
    result = port_collisions.check(ctx(ports=[]))
    assert (result.status, result.summary) == ("skip", "no declared port and no engine process listening (--port, "
                                                       "[runtime] endpoint)")


def test_one_listener_is_ok() -> None:
    with listening() as s:
        port = s.getsockname()[1]
        result = port_collisions.check(ctx(ports=[port]))
    assert (result.status, result.summary) == ("ok", "1 port: at most one listener each")
    me = os.getpid()
    assert result.evidence[0] == f"port {port}: IPv4 127.0.0.1:{port} -> {me}"
    assert result.evidence[1].startswith(f"port {port}: pid {me} ")


def test_nothing_listening_is_said_and_ok() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = port_collisions.check(ctx(ports=[port, port]))
    assert (result.status, result.summary, result.evidence) == ("ok", "1 port: at most one listener each",
                                                                [f"port {port}: nothing listening"])


def test_two_ports_are_counted() -> None:
    with listening() as a, listening() as b:
        result = port_collisions.check(ctx(ports=[a.getsockname()[1], b.getsockname()[1]]))
    assert result.summary == "2 ports: at most one listener each"


def test_two_processes_sharing_a_port_fail(child_listener) -> None:
    with listening(reuse=True) as s:
        port = s.getsockname()[1]
        other = child_listener(port)
        result = port_collisions.check(ctx(ports=[port]))
    pids = sorted([os.getpid(), other])
    assert (result.status, ids(result)) == ("fail", ["port-collisions/several-listeners"])
    assert result.summary == f"port {port}: 2 processes listen (shared; pids {pids[0]}, {pids[1]})"
    assert result.fix.startswith("Stop the stray listener")


def v6_listener_free_on_v4(reuse: bool = False) -> socket.socket:
    """A socket listening on [::1]:P where 127.0.0.1:P is free too (the ephemeral port is chosen for IPv6 only:
    another process on the machine may hold it on IPv4)."""
    for _ in range(50):
        s = listening(socket.AF_INET6, "::1", reuse=reuse)
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", s.getsockname()[1]))
            return s
        except OSError:
            s.close()
        finally:
            probe.close()
    raise AssertionError("no port free on both families")


def test_ipv4_and_ipv6_held_by_different_processes(child_listener) -> None:
    with v6_listener_free_on_v4() as s:
        port = s.getsockname()[1]
        other = child_listener(port)
        result = port_collisions.check(ctx(ports=[port]))
    pids = sorted([os.getpid(), other])
    assert result.summary == (f"port {port}: 2 processes listen (IPv4 and IPv6 held by different processes; pids "
                              f"{pids[0]}, {pids[1]})")
    assert f"port {port}: IPv6 [::1]:{port} -> {os.getpid()}" in result.evidence


def test_two_families_one_shared_is_shared(child_listener) -> None:
    with v6_listener_free_on_v4(reuse=True) as s:
        port = s.getsockname()[1]
        child_listener(port)
        child_listener(port, "AF_INET6", "::1")
        result = port_collisions.check(ctx(ports=[port]))
    assert "3 processes listen (shared; pids " in result.summary


@pytest.fixture
def stranger():
    """A running process that is neither this one nor an ancestor of it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_listener_that_is_not_the_declared_pid_fails(stranger) -> None:
    with listening() as s:
        port = s.getsockname()[1]
        result = port_collisions.check(ctx(ports=[port], pid=stranger))
    assert (result.status, ids(result)) == ("fail", ["port-collisions/not-the-declared-engine"])
    assert result.summary == f"port {port}: pid {os.getpid()} is not the declared pid {stranger}"


def test_the_declared_pid_and_its_children_are_the_engine(child_listener) -> None:
    with listening() as s:
        port = s.getsockname()[1]
        assert port_collisions.check(ctx(ports=[port], pid=os.getpid())).status == "ok"
    with listening(reuse=True) as s:
        port = s.getsockname()[1]
        child_listener(port)
        result = port_collisions.check(ctx(ports=[port], pid=os.getpid()))  # the child's parent is declared
    assert ids(result) == ["port-collisions/several-listeners"]


def test_a_declared_process_name(child_listener) -> None:
    with listening() as s:
        port = s.getsockname()[1]
        mine = port_collisions.check(ctx(ports=[port], process="python"))
        other = port_collisions.check(ctx(ports=[port], process="vllm-no-such-engine"))
    assert "port-collisions/not-the-declared-engine" not in ids(mine)
    assert ids(other) == ["port-collisions/not-the-declared-engine", "port-collisions/declared-process-not-running"]
    assert [f.text for f in other.findings] == [
        f"port {port}: pid {os.getpid()} is not the declared process 'vllm-no-such-engine'",
        "the declared process 'vllm-no-such-engine' is not running"]
    assert other.summary.startswith(f"port {port}: pid {os.getpid()} is not the declared process") and \
        other.summary.endswith(" (+1 more)")


def test_a_declared_engine(child_listener) -> None:
    with listening() as s:
        port = s.getsockname()[1]
        result = port_collisions.check(ctx(ports=[port], engine="sglang"))
    assert [f.text for f in result.findings] == [f"port {port}: pid {os.getpid()} is not the declared engine 'sglang'"]


def test_a_declared_pid_that_is_gone_fails() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    result = port_collisions.check(ctx(ports=[1], pid=gone.pid))
    assert result.status == "fail"
    assert result.summary == f"the declared pid {gone.pid} is not running"


def test_nothing_declared_is_no_matcher() -> None:
    matcher, what = port_collisions._declared_matcher(ctx())
    assert (matcher, what) == (None, None)
    assert port_collisions._declared_process_missing(DoctorOptions()) is None


def test_the_description_of_a_gone_pid() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert port_collisions._describe(gone.pid) == f"pid {gone.pid} (no such process)"


def test_the_description_redacts_the_command_line() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--api-key", "sk-live-abcdef123456"])
    try:
        import time

        for _ in range(50):
            text = port_collisions._describe(proc.pid)
            if "--api-key" in text:
                break
            time.sleep(0.05)
        assert "sk-live-abcdef123456" not in text and "--api-key" in text
        assert text.startswith(f"pid {proc.pid} root: ") or text.startswith(f"pid {proc.pid} ")
        assert "  " not in text
    finally:
        proc.kill()
        proc.wait()


def test_several_findings_on_the_fail_level_are_headlined(child_listener, stranger) -> None:
    with listening(reuse=True) as s, listening() as t:
        port, port2 = s.getsockname()[1], t.getsockname()[1]
        child_listener(port)
        result = port_collisions.check(ctx(ports=[port, port2], pid=stranger))
    assert result.status == "fail"
    assert result.summary.endswith(" (+2 more)")
    assert len([f for f in result.findings if f.level == "fail"]) == 3



def test_zsh_is_asked_with_whence(tmp_path, monkeypatch) -> None:
    shell_answering(tmp_path, monkeypatch, "zsh", f'printf "%s|" "$@" > {tmp_path}/asked')
    binary_aliasing._shell_shadows(ctx(), ["a"])
    script = 'for n in "$@"; do printf "%s\\t%s\\n" "$n" "$(whence -w -- "$n" 2>/dev/null)"; done'
    assert (tmp_path / "asked").read_text() == f"-ic|{script}|execsys-doctor|a|"


def test_the_shell_s_note_reaches_the_evidence(tmp_path, monkeypatch, on_path) -> None:
    shell_answering(tmp_path, monkeypatch, "fish", "exit 0")
    program(on_path[0], "tool")
    result = binary_aliasing.check(ctx(commands=["tool"], shell_aliases=True))
    assert result.evidence[-1] == "shell fish: aliases not checked (bash and zsh are)"
    quiet = binary_aliasing.check(ctx(commands=["tool"]))
    assert quiet.evidence[-1] == ("shell aliases not checked: a node check runs under a daemon, which starts no "
                                  "interactive shell (`execsys doctor` checks them)")
