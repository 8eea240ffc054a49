"""Redaction's rules as tables, in process: which names, flags and fields are secret (and the look-alikes
that are not), what each URL, header, argument list and JSON record becomes, and the length below
which a live secret is too short to scrub by value.

tests/test_redact_properties.py generates secrets and texts (hypothesis); these rows pin the exact
output and the boundaries a slip moves: a password with an ``@`` in it, a ``sig=`` query parameter,
``--env-api-key`` against ``--api-key-env``, a six-character secret.
"""

from __future__ import annotations

import os

import pytest

from execsys import redact
from execsys.redact import (
    REDACTED,
    is_secret_flag,
    is_secret_name,
    is_secret_shaped,
    live_secret_values,
    redact_argv,
    redact_env,
    redact_headers,
    redact_text,
    redact_url,
    register_secret,
    scrub,
    scrub_known_secrets,
)

R = REDACTED


@pytest.mark.parametrize(("name", "secret"), [
    ("HF_TOKEN", True), ("OPENAI_API_KEY", True), ("db_password", True), ("MY_PASS", True), ("GITHUB_PAT", True),
    ("DB_PWD", True), ("AWS_SESSION_TOKEN", True), ("SESSION", True), ("X.PASS", True), ("a-pat", True),
    ("PRIVATE_KEY_FILE", True), ("COOKIE_JAR", True), ("AUTH", True), ("CREDENTIALS", True), ("PASSPHRASE", True),
    ("PATH", False), ("PATTERN", False), ("PASSTHROUGH", False), ("SPWD", False), ("PWDX", False),
    ("PWD", False), ("OLDPWD", False), ("pwd", False), ("XDG_SESSION_TYPE", False), ("DESKTOP_SESSION", False),
    ("SESSION_MANAGER", False), ("DBUS_SESSION_BUS_ADDRESS", False), ("GDMSESSION", False),
    ("XDG_SESSION_PATH", False), ("XDG_SEAT_PATH", False), ("PWD_FILE", True), ("OLDPWD_BACKUP", False),
    ("XDG_SESSION_TOKEN_X", False), ("HOME", False), ("", False),
])
def test_is_secret_name(name, secret) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(("flag", "secret"), [
    ("--api-key", True), ("--hf-token", True), ("--apikey", True), ("--db-password", True), ("--DB_PASSWORD", True),
    ("--pass", True), ("--db-pwd", True), ("--github-pat", True), ("--session", True), ("-token", True),
    ("--client.secret", True), ("--private", True), ("--cookies", True), ("--credentials", True),
    ("--env-api-key", True), ("--api-key-env", False), ("--token-env", False), ("--env", False),
    ("--max-num-batched-tokens", False), ("--tokenizer", False), ("--keyboard", False),
    ("--session-file", False), ("--pat-dir", False), ("--pwd-file", False), ("--passes", False),
    ("--port", False), ("--", False), ("-", False), ("", False), ("--Xpass", False),
])
def test_is_secret_flag(flag, secret) -> None:
    assert is_secret_flag(flag) is secret


@pytest.mark.parametrize(("url", "clean"), [
    pytest.param("https://u:pw@h.example/x", f"https://u:{R}@h.example/x", id="password-redacted-user-kept"),
    pytest.param("https://u:p@ss@h.example/x", f"https://u:{R}@h.example/x", id="an-at-sign-in-the-password"),
    pytest.param("https://u:a:b@h/x", f"https://u:{R}@h/x", id="a-colon-in-the-password"),
    pytest.param("https://ghp_abc@github.com/o/r", f"https://{R}@github.com/o/r", id="a-lone-token"),
    pytest.param("ssh://git@github.com/o/r", "ssh://git@github.com/o/r", id="git-user-kept"),
    pytest.param("https://h/x?api_key=k1&model=m", f"https://h/x?api_key={R}&model=m", id="secret-query"),
    pytest.param("https://h/x?sig=abc&sv=1", f"https://h/x?sig={R}&sv=1", id="an-azure-sas-sig"),
    pytest.param("https://h/x?SIG=abc", f"https://h/x?SIG={R}", id="sig-any-case"),
    pytest.param("https://h/x?signal=1", "https://h/x?signal=1", id="signal-is-not-sig"),
    pytest.param("https://h/x?token=&a=1", f"https://h/x?token={R}&a=1", id="blank-secret-value"),
    pytest.param("https://h/x#frag", "https://h/x#frag", id="nothing-to-hide"),
    pytest.param("https://h:8000/v1", "https://h:8000/v1", id="port-is-not-a-password"),
])
def test_redact_url(url, clean) -> None:
    assert redact_url(url) == clean


@pytest.mark.parametrize(("url", "clean"), [
    pytest.param("not a url api_key=sk-" + "a" * 24, f"not a url api_key={R}", id="no-scheme-is-text"),
    pytest.param("http://[::1", "http://[::1", id="unparsable-is-text"),
])
def test_redact_url_falls_back_to_text(url, clean) -> None:
    assert redact_url(url) == clean


@pytest.mark.parametrize(("text", "clean"), [
    pytest.param("see https://u:pw@h/x now", f"see https://u:{R}@h/x now", id="url-userinfo"),
    pytest.param("git clone https://tok123@h/r", f"git clone https://{R}@h/r", id="lone-userinfo"),
    pytest.param("ssh://git@h/r", "ssh://git@h/r", id="git-kept"),
    pytest.param("see https://u:pa:ss@h/x", f"see https://u:{R}@h/x", id="url-password-with-a-colon"),
    pytest.param("Authorization: Bearer abcdefgh123", f"Authorization: {R}", id="authorization-header"),
    pytest.param("x-api-key=abc, next", f"x-api-key={R}, next", id="api-key-header-to-the-comma"),
    pytest.param("Cookie: a=1; b=2", f"Cookie: {R}; b=2", id="cookie-to-the-semicolon"),
    pytest.param("use bearer abcdefgh123 here", f"use bearer {R} here", id="bearer"),
    pytest.param("token abcdefgh", f"token {R}", id="token-8-chars"),
    pytest.param("token abcdefg", "token abcdefg", id="token-7-chars-kept"),
    pytest.param("GET /x?a=1&access_token=zz9 HTTP", f"GET /x?a=1&access_token={R} HTTP", id="query-in-text"),
    pytest.param("GET /x?sig=zz9", f"GET /x?sig={R}", id="sig-in-text"),
    pytest.param("GET /x?page=2&q=3", "GET /x?page=2&q=3", id="plain-query-kept"),
    pytest.param("key sk-" + "A" * 20 + " end", f"key {R} end", id="openai-shaped"),
    pytest.param("sk-" + "A" * 19, "sk-" + "A" * 19, id="too-short-to-be-a-key"),
    pytest.param("hf_" + "a" * 20, R, id="hf-shaped"),
    pytest.param("AKIA" + "A" * 16, R, id="aws-key-id"),
    pytest.param("AKIA" + "A" * 17, "AKIA" + "A" * 17, id="aws-key-id-too-long"),
    pytest.param("env HF_TOKEN=abc vllm serve", f"env HF_TOKEN={R} vllm serve", id="env-assignment"),
    pytest.param("max_tokens=512", "max_tokens=512", id="lowercase-assignment-kept"),
    pytest.param("PWD=/home/u ls", "PWD=/home/u ls", id="innocent-assignment-kept"),
    pytest.param("python eval.py --api-key sk-live-1 --port 8000",
                 f"python eval.py --api-key {R} --port 8000", id="flag-value"),
    pytest.param("python eval.py --db-pwd hunter2x", f"python eval.py --db-pwd {R}", id="db-pwd-value"),
    pytest.param("run --hf-token='a b c' x", f"run --hf-token={R} x", id="quoted-value"),
    pytest.param("run -a --api-key X", f"run -a --api-key {R}", id="after-a-short-flag"),
    pytest.param("run --api-key --port 1", "run --api-key --port 1", id="a-flag-is-not-a-value"),
    pytest.param("run --tokenizer t", "run --tokenizer t", id="not-a-secret-flag"),
    pytest.param("", "", id="empty"),
])
def test_redact_text(text, clean) -> None:
    assert redact_text(text) == clean


@pytest.mark.parametrize(("argv", "clean"), [
    pytest.param(["vllm", "--api-key", "k1", "--port", "8000"], ["vllm", "--api-key", R, "--port", "8000"],
                 id="flag-then-value"),
    pytest.param(["x", "--hf-token=abc"], ["x", f"--hf-token={R}"], id="flag-equals-value"),
    pytest.param(["x", "--api-key", "--port", "1"], ["x", "--api-key", "--port", "1"], id="a-switch-takes-no-flag"),
    pytest.param(["x", "--no-auth", "--port", "8000"], ["x", "--no-auth", "--port", "8000"], id="no-auth-switch"),
    pytest.param(["x", "--api-key", "k", "k"], ["x", "--api-key", R, "k"], id="only-the-next-one"),
    pytest.param(["env", "HF_TOKEN=abc", "cmd"], ["env", f"HF_TOKEN={R}", "cmd"], id="env-assignment"),
    pytest.param(["env", "PWD=/x"], ["env", "PWD=/x"], id="innocent-assignment"),
    pytest.param(["lm_eval", "--model_args", "pretrained=m,api_key=sk1,max_tokens=5"],
                 ["lm_eval", "--model_args", f"pretrained=m,api_key={R},max_tokens=5"], id="key-value-list"),
    pytest.param(["x", "https://u:pw@h/x"], ["x", f"https://u:{R}@h/x"], id="a-url-argument"),
    pytest.param(["x", "--max-num-batched-tokens", "8192"], ["x", "--max-num-batched-tokens", "8192"],
                 id="numerics-flag-kept"),
    pytest.param(["x", "-e", "--api-key=1=2"], ["x", "-e", f"--api-key={R}"], id="value-with-equals"),
    pytest.param(["env", "db_password=hunter2"], ["env", f"db_password={R}"], id="lowercase-secret-assignment"),
    pytest.param(["x", "--api-key-env=OPENAI_API_KEY"], ["x", "--api-key-env=OPENAI_API_KEY"],
                 id="a-flag-naming-a-variable-kept"),
    pytest.param(["lm_eval", "pretrained=m,api_key=sk=1,n=2"], ["lm_eval", f"pretrained=m,api_key={R},n=2"],
                 id="key-value-list-value-with-equals"),
])
def test_redact_argv(argv, clean) -> None:
    assert redact_argv(argv) == clean


def test_redact_env_and_headers() -> None:
    env = {"HF_TOKEN": "abc", "PWD": "/home/u", "XDG_SESSION_TYPE": "wayland", "URL": "https://u:pw@h/x", "N": "1"}
    assert redact_env(env) == {"HF_TOKEN": R, "PWD": "/home/u", "XDG_SESSION_TYPE": "wayland",
                               "URL": f"https://u:{R}@h/x", "N": "1"}
    assert redact_headers({"X-Api-Key": "k", "Accept": "a", "Via": "https://u:pw@h"}) == {
        "X-Api-Key": R, "Accept": "a", "Via": f"https://u:{R}@h"}


def test_secret_shaped() -> None:
    assert is_secret_shaped("xx ghp_" + "a" * 30)
    assert not is_secret_shaped("ghp_" + "a" * 29)
    assert is_secret_shaped("eyJabcde.fghij12.klmno34")


@pytest.mark.parametrize(("value", "scrubbed"), [
    pytest.param("abcdef", True, id="six-characters-scrubbed"),
    pytest.param("abcde", False, id="five-too-short"),
])
def test_the_shortest_live_secret_scrubbed(monkeypatch, value, scrubbed) -> None:
    monkeypatch.setenv("EXECSYS_TEST_TOKEN", value)
    assert (value in live_secret_values({"EXECSYS_TEST_TOKEN": value})) is scrubbed
    assert (scrub_known_secrets(f"x {value} y") == f"x {R} y") is scrubbed


def test_live_secrets_longest_first_so_overlaps_scrub_whole(monkeypatch) -> None:
    assert live_secret_values({"A_TOKEN": "abcdef", "B_TOKEN": "abcdefgh", "NAME": "abcdefghij"}) == [
        "abcdefgh", "abcdef"]
    monkeypatch.setenv("A_TOKEN", "abcdef")
    monkeypatch.setenv("B_TOKEN", "abcdefgh")
    assert scrub_known_secrets("abcdefgh") == R
    monkeypatch.setenv("A_TOKEN", "abcdeX")  # the cache notices the environment changed
    assert scrub_known_secrets("abcdef abcdeX") == f"abcdef {R}"


@pytest.mark.parametrize(("value", "kept"), [("12345", True), ("123456", False), (None, True), ("", True)])
def test_a_registered_secret_is_scrubbed_from_six_characters(monkeypatch, value, kept) -> None:
    monkeypatch.setattr(redact, "_extra_secrets", set())
    register_secret(value)
    text = f"key {value or 'nothing'} end"
    assert (scrub_known_secrets(text) == text) is kept


def test_scrub_a_record() -> None:
    record = {"HF_TOKEN": "abc", "password": "p", "Token": "t", "max_tokens": 512, "api_key_env": "OPENAI_KEY",
              "hf_token": "lower", "empty": {"HF_TOKEN": ""}, "args": ["--api-key", "k"],
              "url": "https://u:pw@h", 7: "seven", "nested": [{"secret": "s"}]}
    assert scrub(record) == {"HF_TOKEN": R, "password": R, "Token": R, "max_tokens": 512,
                             "api_key_env": "OPENAI_KEY", "hf_token": "lower", "empty": {"HF_TOKEN": ""},
                             "args": ["--api-key", "k"], "url": f"https://u:{R}@h", 7: "seven",
                             "nested": [{"secret": R}]}


def test_keys_that_redact_alike_stay_apart() -> None:
    key = "sk-" + "a" * 24
    other = "sk-" + "b" * 24
    third = "sk-" + "c" * 24
    assert scrub({key: 1, other: 2, third: 3, "plain": 4}) == {R: 1, f"{R}#2": 2, f"{R}#3": 3, "plain": 4}
    assert scrub({"a=1&token=x?": 1}) == {f"a=1&token={R}": 1}  # a key with "=" gets the full redactor
    assert scrub((1, "https://u:pw@h")) == [1, f"https://u:{R}@h"]
    assert scrub({"token abcdefgh123": 1}) == {f"token {R}": 1}  # a key with a space gets the full redactor


@pytest.mark.parametrize(("key", "clean"), [
    pytest.param("--db-pwd\thunter2hunter2", f"--db-pwd\t{R}", id="a-tab-before-the-value"),
    pytest.param("--api-key\nhunter2hunter2", f"--api-key\n{R}", id="a-newline-before-the-value"),
    pytest.param("token\tabcdefXYZ1", f"token {R}", id="a-token-after-a-tab"),
    pytest.param("https://u:pw@h", f"https://u:{R}@h", id="a-url"),
    pytest.param("max_tokens", "max_tokens", id="a-field-name"),
])
def test_a_key_is_redacted_whatever_whitespace_it_holds(key, clean) -> None:
    assert scrub({key: 1}) == {clean: 1}


def test_a_scheme_relative_url_keeps_no_password() -> None:
    assert redact_url("//alice:hunter22@host/x") == f"//alice:{REDACTED}@host/x"
    assert redact_url("//ghp_abcdefghijklmnop@github.com/o/r") == f"//{REDACTED}@github.com/o/r"


def test_a_header_shaped_key_is_redacted_like_the_header() -> None:
    """A key such as ``authorization:abc`` (a header line used as a JSON key) is the header's text."""
    assert scrub({"authorization:abc": 1}) == {f"authorization:{REDACTED}": 1}
    assert scrub({"runtime.process:pid": 1}) == {"runtime.process:pid": 1}


# -- the live secrets: os.environ read once per change, a copy handed out ----------------------------------


def test_live_secrets_come_from_the_environment_when_none_is_given(monkeypatch) -> None:
    monkeypatch.setattr(redact, "_live_cache", None)  # a first call, nothing remembered
    monkeypatch.setenv("EXECSYS_LIVE_TOKEN", "live-value-1")
    monkeypatch.setenv("EXECSYS_LIVE_NAME", "not-a-secret-1")
    first = live_secret_values()
    assert "live-value-1" in first and "not-a-secret-1" not in first
    assert live_secret_values() == first  # the remembered answer
    monkeypatch.setenv("EXECSYS_LIVE_TOKEN", "live-value-22")
    again = live_secret_values()
    assert "live-value-22" in again and "live-value-1" not in again
    monkeypatch.delenv("EXECSYS_LIVE_TOKEN")
    assert "live-value-22" not in live_secret_values()


def test_live_secrets_are_longest_first_from_the_environment(monkeypatch) -> None:
    monkeypatch.setattr(redact, "_live_cache", None)
    monkeypatch.setattr(os, "environ", os._Environ(  # type: ignore[attr-defined]
        {b"A_TOKEN": b"abcdef", b"B_TOKEN": b"abcdefghij", b"C_KEY": b"abcdefgh", b"D_TOKEN": b"abcde"},
        os.environ.encodekey, os.environ.decodekey, os.environ.encodevalue, os.environ.decodevalue))
    assert live_secret_values() == ["abcdefghij", "abcdefgh", "abcdef"]
    assert live_secret_values() == ["abcdefghij", "abcdefgh", "abcdef"]  # the remembered answer likewise


def test_what_the_caller_does_with_the_list_does_not_change_the_next_answer(monkeypatch) -> None:
    monkeypatch.setattr(redact, "_live_cache", None)
    monkeypatch.setenv("EXECSYS_LIVE_TOKEN", "live-value-3")
    for _ in range(3):  # the first answer (just computed) and the remembered ones alike
        values = live_secret_values()
        assert "live-value-3" in values
        values.clear()
    assert scrub_known_secrets("x live-value-3 y") == f"x {R} y"


def test_an_explicit_mapping_is_not_remembered_as_the_environment(monkeypatch) -> None:
    monkeypatch.setattr(redact, "_live_cache", None)
    monkeypatch.delenv("EXECSYS_LIVE_TOKEN", raising=False)
    assert live_secret_values({"EXECSYS_LIVE_TOKEN": "mapping-only-1"}) == ["mapping-only-1"]
    assert "mapping-only-1" not in live_secret_values()
    assert scrub_known_secrets("mapping-only-1") == "mapping-only-1"
    monkeypatch.setenv("EXECSYS_LIVE_TOKEN", "env-value-44")
    live_secret_values()  # remembered now
    assert live_secret_values({"OTHER_TOKEN": "mapping-only-2"}) == ["mapping-only-2"]  # not the remembered one


def test_registered_and_live_secrets_scrub_together_longest_first(monkeypatch) -> None:
    monkeypatch.setattr(redact, "_extra_secrets", set())
    monkeypatch.setattr(redact, "_live_cache", None)
    monkeypatch.setenv("EXECSYS_LIVE_TOKEN", "abcdefgh")
    register_secret("abcdefghijkl")
    register_secret("xyzxyz")
    assert scrub_known_secrets("abcdefghijkl abcdefgh xyzxyz abcdefg") == f"{R} {R} {R} abcdefg"
    assert scrub_known_secrets("nothing here") == "nothing here"
    assert scrub_known_secrets("") == ""


@pytest.mark.parametrize(("key", "secret"), [
    ("authorization", True), ("Authorization", True), ("api_key", True), ("APIKEY", True), ("password", True),
    ("passwd", True), ("token", True), ("secret", True), ("cookie", True), ("private_key", True),
    ("HF_TOKEN", True), ("DB_PWD", True), ("X1_SECRET", True), ("HF_TOKEN ", False), ("1_TOKEN", False),
    ("Hf_TOKEN", False), ("_TOKEN", False), ("max_tokens", False), ("api_key_env", False), ("PWD", False),
    ("PATH", False), ("tokens", False), ("", False),
])
def test_which_record_fields_hold_a_secret(key, secret) -> None:
    assert (scrub({key: "value-1"}) == {key: R}) is secret


def test_longest_first_is_by_length_not_by_spelling(monkeypatch) -> None:
    monkeypatch.setattr(redact, "_live_cache", None)
    monkeypatch.setattr(redact, "_extra_secrets", set())
    monkeypatch.setattr(os, "environ", os._Environ(  # type: ignore[attr-defined]
        {b"A_TOKEN": b"zzzzzz", b"B_TOKEN": b"aaaaaaaa"},
        os.environ.encodekey, os.environ.decodekey, os.environ.encodevalue, os.environ.decodevalue))
    assert live_secret_values() == ["aaaaaaaa", "zzzzzz"]
    register_secret("bcdefg")
    register_secret("abcdefg")  # holds the other, and sorts before it by spelling
    assert scrub_known_secrets("x abcdefg y") == f"x {R} y"
