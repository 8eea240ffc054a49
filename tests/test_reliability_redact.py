"""Redaction is linear in its input: a 1 MB answer without spaces is redacted at once, and right.

The URL-with-userinfo pattern used to rescan a run of scheme characters from each of
its positions (160 KB took 10.8 s, 1 MB about 7 minutes). No timed assertion: the
test's own timeout is the bound, and the output is checked exactly. What is written past the
console's redactor (a node check's line, log and ``--json``) is redacted where it is made.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from execsys.redact import REDACTED, redact_text, scrub

MB = 1 << 20


@pytest.mark.timeout(60)
@pytest.mark.parametrize("unit", ["a", "a1+.-", "a://", "?", "?key", "-a '", "&a=b", "eyJaaaaa.", "sk-", "token "])
def test_a_megabyte_without_spaces_is_redacted_in_linear_time(unit: str) -> None:
    text = unit * (MB // len(unit))
    out = redact_text(text)
    if unit == "sk-":  # one run of a key's shape: one key
        assert out == REDACTED
    elif unit == "eyJaaaaa.":  # JWT-shaped segments: every one goes, the dots between them stay
        assert "eyJ" not in out and out.startswith(REDACTED + ".") and set(out.replace(REDACTED, "")) == {"."}
    else:  # innocent text, however pathological for the patterns, comes back byte for byte
        assert out == text


@pytest.mark.timeout(60)
def test_secrets_inside_a_megabyte_run_are_still_found() -> None:
    run = "x" * MB
    text = f"{run} https://alice:hunter22@host/x {run}=sk-{'A' * 30} http://{'b' * MB}@h/"
    out = redact_text(text)
    assert "hunter22" not in out and "https://alice:" + REDACTED + "@host/x" in out
    assert "sk-" + "A" * 30 not in out
    assert out.startswith(run)  # innocent bytes untouched
    assert scrub({"answer": "z" * MB})["answer"] == "z" * MB


def test_credentials_inside_a_key_value_list_argument_are_redacted_and_settings_stay_readable() -> None:
    from execsys.redact import redact_argv

    argv = ["lm_eval", "--model_args", "model=m,api_key=plain-secret-1,max_tokens=512,tokenizer=t",
            "--model_args=pretrained=x,token=plain-secret-2,hf_token=plain-secret-3", "--batch_size", "4"]
    out = redact_argv(argv)
    assert out == ["lm_eval", "--model_args", f"model=m,api_key={REDACTED},max_tokens=512,tokenizer=t",
                   f"--model_args=pretrained=x,token={REDACTED},hf_token={REDACTED}", "--batch_size", "4"]


KEY = "sk-abcdefghijklmnopqrstuvwx1234"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["npd", "slurm"])
def test_a_node_checks_line_log_and_json_are_redacted_and_terminal_safe(cli, tmp_path: Path, ledger_path: Path,
                                                                       mode: str) -> None:
    """The node-check line, its log line and ``--json`` are written past the console (NPD and Slurm read
    them raw): a key-shaped string in an ``--env-from`` path reached all three, and an ESC in it the
    terminal. Now: ``<redacted>`` and a visible ``\\x1b``."""
    secret_dir = tmp_path / KEY
    secret_dir.mkdir()
    (secret_dir / "env").write_text("PATH=/usr/bin:/bin\n")
    for env_from in (f"{KEY}/missing", f"{KEY}/env", f"{KEY}/a\x1b]0;title\x07b"):
        for extra in ([], ["--json"]):
            result = cli("doctor", "--node-check", mode, "--env-from", env_from, *extra, cwd=tmp_path, timeout=100)
            assert result.returncode in (0, 1, 2), result.stderr
            assert "Traceback" not in result.stderr
            both = result.stdout + result.stderr
            assert KEY not in both and "\x1b" not in both and "\x07" not in both, both[-600:]
            if not extra and "missing" in env_from:
                assert "<redacted>/missing" in result.stdout


def test_a_secret_shaped_declaration_key_reaches_no_lock_ledger_or_json(cli, tmp_path: Path, ledger_path: Path) -> None:
    """Only values were redacted: a key-shaped TOML *key* went into the lock, the ledger row and
    ``pin --json`` as written. Two such keys stay two entries."""
    live, other = "sk-live-abcdefghijklmnop123456", "sk-live-zyxwvutsrqponmlk654321"
    (tmp_path / "execsys.toml").write_text(f'[environment.variables]\n"{live}" = "x"\n"{other}" = "y"\n')
    result = cli("pin", "--json", cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    lock = (tmp_path / "execsys.lock.json").read_text()
    import sqlite3

    with sqlite3.connect(ledger_path) as db:
        rows = " ".join(str(row) for row in db.execute("SELECT * FROM records"))
    for where, text in (("stdout", result.stdout), ("stderr", result.stderr), ("lock", lock), ("ledger", rows)):
        assert live not in text and other not in text, where
    assert REDACTED in lock and f"{REDACTED}#2" in lock


def test_scrub_redacts_keys_and_keeps_colliding_ones_apart() -> None:
    body = {"sk-live-abcdefghijklmnop123456": 1, "sk-live-zyxwvutsrqponmlk654321": 2, "max_tokens": 3,
            "https://user:pw@host/x": 4, "nested": [{"hf_abcdefghijklmnopqrstuvwx": "v"}]}
    assert scrub(body) == {REDACTED: 1, f"{REDACTED}#2": 2, "max_tokens": 3, f"https://user:{REDACTED}@host/x": 4,
                           "nested": [{REDACTED: "v"}]}
