"""What a lock records of a declaration: each component's credentials redacted by that component's
own rule, the rest kept as written, and the declaration itself left as it was.

Each secret below is one that the final scrub alone would miss (a flag's next word, a lowercase
variable name, a `pass=` query, user:token in a repo URL), so only the per-component rule hides it.
"""

from __future__ import annotations

from execsys.identity import (
    sanitize_declared,
)


def test_the_runtime_table_loses_its_credentials_and_keeps_the_rest() -> None:
    table = {"engine": "vllm", "endpoint": "http://eval:hunter2@127.0.0.1:8000/v1?pass=opensesame&x=a",
             "flags": ["--api-key", "plainvalue", "--ctx-size", 8192],
             "restart": "restart-engine --api-key plainvalue --now", "ready": "curl http://u:pw@h/health"}
    assert sanitize_declared("runtime", table) == {
        "engine": "vllm", "endpoint": "http://eval:<redacted>@127.0.0.1:8000/v1?pass=<redacted>&x=a",
        "flags": ["--api-key", "<redacted>", "--ctx-size", "8192"],
        "restart": "restart-engine --api-key <redacted> --now", "ready": "curl http://u:<redacted>@h/health"}
    assert table["flags"][1] == "plainvalue"  # the declaration itself is left as it was
    # the same keys in another table are that table's own words, not the runtime's flags
    assert sanitize_declared("workflow", {"flags": ["--api-key", "plainvalue"], "endpoint": "http://h/v1?pass=x"}) == {
        "flags": ["--api-key", "plainvalue"], "endpoint": "http://h/v1?pass=x"}


def test_environment_variables_are_redacted_by_name_and_recorded_as_text() -> None:
    assert sanitize_declared("environment", {"variables": {"my_token": "abc", "OMP_NUM_THREADS": 8},
                                             "source_modules": ["m"]}) == {
        "variables": {"my_token": "<redacted>", "OMP_NUM_THREADS": "8"}, "source_modules": ["m"]}
    assert sanitize_declared("workflow", {"variables": {"my_token": "abc", "n": 8}}) == {
        "variables": {"my_token": "abc", "n": 8}}


def test_the_harness_repo_and_commands_lose_their_credentials() -> None:
    table = {"name": "lm-eval", "repo": "https://ci:ghtoken123@git.example.com/evals.git",
             "commands": ["python eval.py --api-key plainvalue", "lm_eval --tasks gsm8k"]}
    assert sanitize_declared("harness", table) == {
        "name": "lm-eval", "repo": "https://git.example.com/evals.git",
        "commands": ["python eval.py --api-key <redacted>", "lm_eval --tasks gsm8k"]}
    assert sanitize_declared("harness", {"commands": ["lm_eval", 2]}) == {"commands": ["lm_eval", "2"]}
    assert sanitize_declared("model", {"repo": "https://ci:ghtoken123@git.example.com/m.git", "commands": [1]}) == {
        "repo": "https://ci:<redacted>@git.example.com/m.git", "commands": [1]}


def test_the_grader_command_and_judge_endpoint_lose_their_credentials() -> None:
    table = {"name": "judge", "command": "python grade.py --api-key plainvalue",
             "judge": {"endpoint": "http://127.0.0.1:9/v1?pass=opensesame", "model": "m"}}
    assert sanitize_declared("grader", table) == {
        "name": "judge", "command": "python grade.py --api-key <redacted>",
        "judge": {"endpoint": "http://127.0.0.1:9/v1?pass=<redacted>", "model": "m"}}
    assert sanitize_declared("grader", {"name": "exact-match"}) == {"name": "exact-match"}
    assert sanitize_declared("grader", {"judge": {"model": "m"}}) == {"judge": {"model": "m"}}


def test_each_mcp_server_loses_its_credentials() -> None:
    table = {"enabled": ["search"], "mcp": [
        {"name": "web", "url": "http://127.0.0.1:9/mcp?pass=opensesame"},
        {"name": "local", "command": ["server", "--api-key", "plainvalue", 3]},
        "not a table"]}
    assert sanitize_declared("tools", table) == {"enabled": ["search"], "mcp": [
        {"name": "web", "url": "http://127.0.0.1:9/mcp?pass=<redacted>"},
        {"name": "local", "command": ["server", "--api-key", "<redacted>", "3"]},
        "not a table"]}
    assert table["mcp"][1]["command"][2] == "plainvalue"
    assert sanitize_declared("workflow", {"mcp": [{"url": "http://h/mcp?pass=x"}]}) == {
        "mcp": [{"url": "http://h/mcp?pass=x"}]}
