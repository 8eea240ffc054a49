"""No secret reaches an output, a lock file or the ledger file, whichever command runs.

Secrets are planted where they really occur: environment variables (HF_TOKEN,
OPENAI_API_KEY, a password), the declaration (credentials in the endpoint URL, an
``--api-key`` flag, an Authorization header in the restart command, a password among
the declared variables), a git remote URL, and the serving process's own command line
and environment. Then every command's stdout and stderr, the lock files and the raw
bytes of the SQLite ledger (and its WAL) are searched for each secret value.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.git_repo import git, make_repo

SECRETS = {
    "HF_TOKEN": "hf_PlantedTokenValue0001",
    "OPENAI_API_KEY": "sk-planted-openai-key-0002",
    "DB_PASSWORD": "planted-db-password-0003",
}
TOML_ONLY = {
    "endpoint_password": "planted-endpoint-pw-0004",
    "flag_key": "sk-planted-flag-key-0005",
    "restart_bearer": "planted-bearer-token-0006",
    "declared_password": "planted-declared-pw-0007",
    "git_remote_password": "s3cret-planted-remote-0008",
    "process_argv_key": "sk-planted-process-argv-0009",
    "process_env_key": "planted-process-env-0010",
    "harness_command_key": "sk-planted-harness-command-0011",
}
ALL = list(SECRETS.values()) + list(TOML_ONLY.values())

SERVER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def _send(self, body, status=200):
        data = json.dumps(body).encode()
        self.send_response(status); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path == "/v1/models": self._send({"data": [{"id": "m"}]})
        elif self.path == "/version": self._send({"version": "1.0"})
        else: self._send({}, 404)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0)); self._send({"choices": []})

HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def serving_process(tmp_path: Path):
    """A separate serving process launched the careless way: key on the command line and in its env."""
    import os

    port = _free_port()
    script = tmp_path / "serve.py"
    script.write_text(SERVER)
    env = dict(os.environ, VLLM_API_KEY=TOML_ONLY["process_env_key"])
    proc = subprocess.Popen([sys.executable, str(script), str(port), "--api-key", TOML_ONLY["process_argv_key"]],
                            env=env)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield port
    proc.kill()
    proc.wait()


def test_no_secret_in_any_output_lock_or_ledger(cli, tmp_path: Path, ledger_path: Path, serving_process: int) -> None:
    repo = make_repo(tmp_path / "evals", remote=f"https://alice:{TOML_ONLY['git_remote_password']}@git.example.org/evals.git")
    (repo / "model.bin").write_bytes(b"weights")
    (repo / ".gitignore").write_text("*.json\nexecsys.toml\nmodel.bin\n")
    git("add", ".gitignore", cwd=repo)
    git("commit", "-q", "-m", "ignore", cwd=repo)
    (repo / "execsys.toml").write_text(f"""
[artifact]
path = "model.bin"

[runtime]
engine = "vllm"
endpoint = "http://svc:{TOML_ONLY['endpoint_password']}@127.0.0.1:{serving_process}/v1"
api_key_env = "OPENAI_API_KEY"
flags = ["--api-key", "{TOML_ONLY['flag_key']}", "--max-model-len=4096", "--max-num-batched-tokens", "8192",
         "--tokenizer", "org/tok"]
restart = "curl -H 'Authorization: Bearer {TOML_ONLY['restart_bearer']}' http://127.0.0.1/restart"

[harness]
commands = ["python eval.py --api-key {TOML_ONLY['harness_command_key']} --max-tokens 64"]

[environment]
variables = {{ DB_PASSWORD = "{SECRETS['DB_PASSWORD']}", SERVICE_PASSWORD = "{TOML_ONLY['declared_password']}", OMP_NUM_THREADS = "2" }}
""")
    env = dict(SECRETS, OMP_NUM_THREADS="2")
    outputs = []

    def run(*args: str, expect: tuple[int, ...] = (0,)) -> None:
        result = cli(*args, cwd=repo, env=env)
        assert result.returncode in expect, (args, result.stderr)
        outputs.append((args, result.stdout + result.stderr))

    run("init", "--config", "other.toml")
    run("pin")
    run("pin", "--json", "--out", "b.lock.json")
    run("verify")
    run("verify", "--json", "--lock", "b.lock.json")
    run("diff", "execsys.lock.json", "b.lock.json")
    run("diff", "execsys.lock.json", "b.lock.json", "--json")
    run("digest", "model.bin", "--json")
    run("ledger", "list")
    run("ledger", "list", "--json")
    records = cli("ledger", "list", "--json", cwd=repo, env=env).json()
    run("ledger", "show", records[0]["id"])
    run("ledger", "show", records[0]["id"], "--json")
    run("ledger", "export")
    run("ledger", "export", "--json")
    # an error path that echoes the endpoint: the server is gone
    bad = repo / "bad.toml"
    bad.write_text(f'[runtime]\nendpoint = "http://svc:{TOML_ONLY["endpoint_password"]}@127.0.0.1:9/v1"\n')
    run("pin", "--config", str(bad), "--out", "never.json", expect=(2,))

    # the redaction really saw the secrets (so the searches below are not vacuous)
    lock_text = (repo / "execsys.lock.json").read_text()
    assert "<redacted>" in lock_text
    assert "--api-key" in lock_text and "DB_PASSWORD" in lock_text and "SERVICE_PASSWORD" in lock_text
    assert "https://git.example.org/evals.git" in lock_text
    assert '"VLLM_API_KEY": "<redacted>"' in lock_text  # the serving process's env was read, value hidden
    # over-redaction is a defect too: flags that change numerics stay visible in the identity
    import json

    declared = json.loads(lock_text)["components"]
    assert declared["runtime"]["declared"]["flags"][2:] == [
        "--max-model-len=4096", "--max-num-batched-tokens", "8192", "--tokenizer", "org/tok"]
    assert declared["harness"]["declared"]["commands"] == ["python eval.py --api-key <redacted> --max-tokens 64"]

    files = [repo / "execsys.lock.json", repo / "b.lock.json", repo / "other.toml"]
    files += sorted(ledger_path.parent.glob(ledger_path.name + "*"))  # the database, -wal, -shm
    assert not (repo / "never.json").exists()
    for secret in ALL:
        for args, text in outputs:
            assert secret not in text, f"{secret!r} printed by execsys {' '.join(args)}"
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"{secret!r} found in {path.name}"


@pytest.mark.parametrize(("argv", "expected"), [
    (["vllm", "serve", "m", "--max-num-batched-tokens", "8192", "--tokenizer", "org/tok"],
     ["vllm", "serve", "m", "--max-num-batched-tokens", "8192", "--tokenizer", "org/tok"]),
    (["srv", "--api-key", "sk-1", "--hf-token=hf_2", "--apikey", "k3"],
     ["srv", "--api-key", "<redacted>", "--hf-token=<redacted>", "--apikey", "<redacted>"]),
    (["srv", "--no-auth", "--port", "8000"], ["srv", "--no-auth", "--port", "8000"]),
    (["srv", "--api-key", "-dash-first-secret"], ["srv", "--api-key", "<redacted>"]),
    (["probe", "--api-key-env", "OPENAI_API_KEY"], ["probe", "--api-key-env", "OPENAI_API_KEY"]),
])
def test_flags_are_redacted_by_word_not_by_substring(argv: list[str], expected: list[str]) -> None:
    # "tokens" in --max-num-batched-tokens is no token: an identity must keep numerics flags visible
    from execsys.redact import redact_argv, redact_text

    assert redact_argv(argv) == expected
    assert redact_text(" ".join(argv)) == " ".join(expected)


# -- every name style of the secret rule, and secret-shaped values under innocent names -----------------

NAME_STYLES = {
    "MY_PASS": "planted-my-pass-0101",
    "GITHUB_PAT": "planted-github-pat-0102",
    "VLLM_PASS": "planted-vllm-pass-0103",  # a VLLM_ variable: recorded as numerics environment
    "DB_PWD": "planted-db-pwd-0104",
    "APP_CREDENTIALS": "planted-app-credentials-0105",
    "WORKER_SESSION": "planted-worker-session-0106",
}
SHAPED = {  # innocent names, values in well-known key formats
    "VLLM_SETTING": "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2",
    "LLAMA_NOTE": "ghp_" + "a" * 36,
    "CUDA_HINT": "hf_" + "B" * 34,
    "NCCL_EXTRA": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}
FLAG_SECRETS = {"pass_flag": "planted-pass-flag-0107", "k_flag": "sk-" + "Z9y8X7w6V5u4T3s2R1q0P9o8",
                "aws_key": "AKIA" + "ABCDEFGHIJKLMNOP", "slack": "xoxb-" + "1234567890-abcdefghij"}


def test_every_name_style_and_key_shaped_value_is_redacted(cli, tmp_path: Path, ledger_path: Path) -> None:
    (tmp_path / "engine.env").write_text("".join(f"{k}={v}\n" for k, v in {**NAME_STYLES, **SHAPED}.items()))
    (tmp_path / "execsys.toml").write_text(f"""
[runtime]
engine = "vllm"
env_file = "engine.env"
flags = ["--pass", "{FLAG_SECRETS['pass_flag']}", "-k", "{FLAG_SECRETS['k_flag']}", "--max-model-len", "4096"]

[harness]
commands = ["python eval.py --pass {FLAG_SECRETS['pass_flag']} --aws {FLAG_SECRETS['aws_key']}"]

[environment]
variables = {{ MY_PASS = "{NAME_STYLES['MY_PASS']}", GITHUB_PAT = "{NAME_STYLES['GITHUB_PAT']}", NOTE = "{FLAG_SECRETS['slack']}" }}
""")
    env = {**NAME_STYLES, **SHAPED}
    outputs = []
    for args in (["pin", "--json"], ["pin"], ["doctor", "-v", "--env-file", "engine.env"],
                 ["doctor", "--json", "--env-file", "engine.env"], ["verify", "--json"], ["ledger", "export"]):
        result = cli(*args, cwd=tmp_path, env=env)
        assert result.returncode in (0, 1), (args, result.stderr)
        outputs.append((args, result.stdout + result.stderr))
    lock = (tmp_path / "execsys.lock.json").read_text()
    assert '"VLLM_PASS": "<redacted>"' in lock  # the variable is named, its value is not
    assert "--max-model-len" in lock and "4096" in lock  # numerics flags stay visible
    files = [tmp_path / "execsys.lock.json", *sorted(ledger_path.parent.glob(ledger_path.name + "*"))]
    assert any(path.name.endswith("-wal") for path in files) or ledger_path.exists()
    for secret in [*NAME_STYLES.values(), *SHAPED.values(), *FLAG_SECRETS.values()]:
        for args, text in outputs:
            assert secret not in text, f"{secret!r} printed by execsys {' '.join(args)}"
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"{secret!r} found in {path.name}"


@pytest.mark.parametrize(("name", "secret"), [
    ("MY_PASS", True), ("GITHUB_PAT", True), ("DB_PWD", True), ("APP_CREDENTIALS", True), ("AWS_SESSION_TOKEN", True),
    ("my-pass", True), ("PWD", False), ("OLDPWD", False), ("PATH", False), ("LD_LIBRARY_PATH", False),
    ("PATTERN", False), ("PASSTHROUGH", False), ("XDG_SESSION_TYPE", False), ("DESKTOP_SESSION", False),
])
def test_the_secret_name_rule_by_whole_parts(name: str, secret: bool) -> None:
    from execsys.redact import is_secret_name

    assert is_secret_name(name) is secret


def test_every_line_printed_goes_through_redaction(capsys: pytest.CaptureFixture[str]) -> None:
    """The consoles every command prints through redact like the ledger does (a restart command echoed
    on stderr, a warning quoting a flag): one mechanism, whoever prints."""
    from execsys import console

    console._stdout_console = console._stderr_console = None
    console.err().print("restarting the server before pass B: curl -H 'Authorization: Bearer planted-bearer-0201' "
                        "--token planted-token-0202 http://u:planted-pw-0203@h/x", markup=False)
    console.out().print(f"[bold]key[/] {FLAG_SECRETS['k_flag']} and --pass planted-pass-0204")
    console.warn(f"restart failed: {SHAPED['LLAMA_NOTE']}")
    captured = capsys.readouterr()
    text = captured.out + captured.err
    for secret in ("planted-bearer-0201", "planted-token-0202", "planted-pw-0203", FLAG_SECRETS["k_flag"],
                   "planted-pass-0204", SHAPED["LLAMA_NOTE"]):
        assert secret not in text
    assert "restarting the server before pass B" in text and "<redacted>" in text and "warning: restart failed" in text
    console._stdout_console = console._stderr_console = None
