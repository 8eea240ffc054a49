"""Redaction by property: a generated secret, given the way docs/concepts/safety.md's "Secrets are never recorded or
printed" paragraph and execsys/redact.py's rule say secrets are given -- a secret-named flag
(``--x VALUE``, ``--x=VALUE``), a secret-named variable (``NAME=VALUE``), a URL's userinfo or
secret-named query parameter, or a well-known key shape (``sk-``, ``ghp_``/``github_pat_``, ``hf_``,
``xoxb-``/``xoxp-``, ``AKIA``, JWTs) -- and embedded anywhere in generated text never survives
``redact_text``, ``redact_argv`` or ``scrub``. Text with no secret in it comes back unchanged.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from execsys.redact import REDACTED, redact_argv, redact_text, scrub

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ALNUM = string.ascii_letters + string.digits
# Surrounding prose: words of letters and digits with spaces and plain punctuation between them
# (whitespace on both sides of the secret, as in a log line or a command line).
WORD = st.text(alphabet=ALNUM + ".,;()!?'", min_size=0, max_size=12)
PROSE = st.lists(WORD, max_size=6).map(" ".join)
# A secret value: what an operator pastes; long enough that it cannot be in the prose by chance.
SECRET = st.text(alphabet=ALNUM + "+/._~", min_size=10, max_size=40).filter(
    lambda s: s[0] in ALNUM and not s.startswith("-"))

# -- names, per the rule -------------------------------------------------------------------------------

SUBSTRING_WORDS = ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH", "COOKIE",
                   "PRIVATE"]
WHOLE_PART_WORDS = ["PASS", "PAT", "PWD", "SESSION"]
PART = st.text(alphabet=string.ascii_uppercase + string.digits, min_size=1, max_size=6).filter(
    lambda p: p[0].isalpha())


@st.composite
def secret_env_names(draw) -> str:
    """Environment-variable names the rule calls secret: a substring word anywhere, or a whole-part word."""
    if draw(st.booleans()):
        word = draw(st.sampled_from(SUBSTRING_WORDS))
        return draw(st.sampled_from(["", "HF_", "MY_", "X"])) + word + draw(st.sampled_from(["", "_FILE", "S", "_2"]))
    word = draw(st.sampled_from(WHOLE_PART_WORDS))
    before = draw(st.lists(PART, max_size=2))
    after = draw(st.lists(PART, max_size=1))
    name = "_".join([*before, word, *after])
    assume(name not in ("PWD", "OLDPWD") and not name.startswith(("XDG_SESSION_", "DBUS_SESSION")))
    assume(name not in ("DESKTOP_SESSION", "SESSION_MANAGER", "GDMSESSION"))
    return name


FLAG_WORDS = ["key", "keys", "token", "secret", "secrets", "password", "passwd", "passphrase", "credential",
              "credentials", "auth", "authorization", "cookie", "cookies", "private", "apikey", "pass", "pat", "pwd",
              "session"]


@st.composite
def secret_flags(draw) -> str:
    """``--api-key``, ``--hf-token``, ``--db-pwd``: a secret word as the flag's last word."""
    words = draw(st.lists(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6), max_size=2))
    assume(not words or words[-1] != "env")
    return "--" + "-".join([*words, draw(st.sampled_from(FLAG_WORDS))])


# -- the secret key shapes -------------------------------------------------------------------------------

def _shape(prefix: str, alphabet: str, low: int, high: int):
    return st.text(alphabet=alphabet, min_size=low, max_size=high).map(lambda body: prefix + body)


B64URL = ALNUM + "_-"
KEY_SHAPES = st.one_of(
    _shape("sk-", ALNUM + "_-", 20, 48),
    _shape("sk-ant-", ALNUM, 20, 40),
    st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]).flatmap(lambda p: _shape(p, ALNUM, 30, 40)),
    _shape("github_pat_", ALNUM + "_", 22, 82),
    _shape("hf_", ALNUM, 20, 40),
    st.sampled_from(["xoxb-", "xoxp-", "xoxa-", "xoxs-"]).flatmap(lambda p: _shape(p, ALNUM + "-", 10, 40)),
    _shape("AKIA", string.ascii_uppercase + string.digits, 16, 16),
    st.tuples(*(st.text(alphabet=B64URL, min_size=5, max_size=30) for _ in range(3))).map(
        lambda parts: f"eyJ{parts[0]}.{parts[1]}.{parts[2]}"),
)


def _gone(secret: str, *outputs: str) -> None:
    for output in outputs:
        assert secret not in output, output


@SETTINGS
@given(before=PROSE, after=PROSE, flag=secret_flags(), secret=SECRET, eq=st.booleans())
@example(before="connect", after="now", flag="--db-pwd", secret="hunter2hunter2", eq=False)
@example(before="", after="", flag="--db-pwd", secret="hunter2hunter2", eq=True)
def test_a_secret_flag_s_value_never_survives(before, after, flag, secret, eq) -> None:
    assume(secret not in before + after and secret not in flag)
    given_as = f"{flag}={secret}" if eq else f"{flag} {secret}"
    text = " ".join(p for p in (before, given_as, after) if p)
    argv = [*before.split(), *([given_as] if eq else [flag, secret]), *after.split()]
    # scrub judges each string alone: argv is redacted as argv (redact_argv) before it is recorded
    _gone(secret, redact_text(text), " ".join(redact_argv(argv)), str(scrub({"line": text})))


@SETTINGS
@given(before=PROSE, after=PROSE, name=secret_env_names(), secret=SECRET)
@example(before="env", after="vllm serve", name="DB_PWD", secret="hunter2hunter2")
def test_a_secret_variable_s_value_never_survives(before, after, name, secret) -> None:
    assume(secret not in before + after and secret not in name)
    assignment = f"{name}={secret}"
    text = " ".join(p for p in (before, assignment, after) if p)
    argv = [*before.split(), assignment, *after.split()]
    scrubbed = scrub({name: secret, "env": {name: secret}, "line": text})
    assert scrubbed[name] == REDACTED and scrubbed["env"][name] == REDACTED
    _gone(secret, redact_text(text), " ".join(redact_argv(argv)), str(scrubbed))


SCHEMES = st.sampled_from(["https", "http", "git+https", "postgresql", "redis", "s3"])
HOST = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=10).map(lambda h: h + ".example.org")
USER = st.text(alphabet=ALNUM, min_size=1, max_size=10).filter(lambda u: u != "git")
QUERY_NAMES = st.sampled_from(["api_key", "key", "token", "access_token", "secret", "password", "passwd", "auth",
                               "sig", "X-Amz-Signature", "apiKey"])


@SETTINGS
@given(before=PROSE, after=PROSE, scheme=SCHEMES, user=USER, host=HOST, secret=SECRET,
       form=st.sampled_from(["user-password", "lone-token", "query-first", "query-later"]), qname=QUERY_NAMES)
@example(before="", after="", scheme="https", user="u", host="h.example.org", secret="hunter2hunter2",
         form="user-password", qname="key")
def test_a_credential_in_a_url_never_survives(before, after, scheme, user, host, secret, form, qname) -> None:
    assume("/" not in secret and "+" not in secret)  # a query value or userinfo as it would be written
    assume(secret not in before + after + user + host + qname)
    url = {
        "user-password": f"{scheme}://{user}:{secret}@{host}/v1",
        "lone-token": f"{scheme}://{secret}@{host}/v1",
        "query-first": f"{scheme}://{host}/v1?{qname}={secret}&model=m",
        "query-later": f"{scheme}://{host}/v1?model=m&{qname}={secret}",
    }[form]
    text = " ".join(p for p in (before, url, after) if p)
    _gone(secret, redact_text(text), " ".join(redact_argv([*before.split(), url])),
          str(scrub({"endpoint": url, "line": text})))


@SETTINGS
@given(before=PROSE, after=PROSE, key=KEY_SHAPES, sep=st.sampled_from([" ", "\n", "\t", " '", ' "', " (", ": "]))
@example(before="using", after="today", key="sk-" + "a" * 20, sep=" ")
@example(before="", after="", key="AKIA" + "A" * 16, sep=" ")
@example(before="", after="", key="github_pat_" + "0" * 22, sep=" ")  # leaked: "github" has no "gh" in it
def test_a_key_shaped_value_never_survives_under_any_name(before, after, key, sep) -> None:
    assume(key not in before + after)
    text = f"{before}{sep}{key} {after}"
    _gone(key, redact_text(text), " ".join(redact_argv([*before.split(), key])),
          str(scrub({"whatever": key, "note": text, "list": [key]})))


@SETTINGS
@given(before=PROSE, after=PROSE, scheme=st.sampled_from(["Bearer", "bearer", "Basic", "token"]), secret=SECRET,
       header=st.sampled_from(["Authorization", "authorization", "Proxy-Authorization", "Cookie", "X-Api-Key"]))
def test_a_credential_in_a_header_never_survives(before, after, scheme, secret, header) -> None:
    assume(len(secret) >= 8 and secret not in before + after)
    for line in (f"{header}: {scheme} {secret}", f"{header}: {secret}", f"{scheme} {secret}"):
        if line.startswith(scheme) and scheme in ("Basic", "token") and not set(secret) <= set(ALNUM + "._~+/=-"):
            continue
        text = " ".join(p for p in (before, line, after) if p)
        _gone(secret, redact_text(text), str(scrub({"line": text})))


# -- innocent text comes back unchanged ------------------------------------------------------------------

def _innocent(text: str) -> bool:
    lowered = text.lower()
    return not any(w in lowered for w in ("bearer", "basic", "token", "authorization", "cookie", "api-key")) and \
        "AKIA" not in text


INNOCENT_TEXT = st.text(alphabet=ALNUM + " \n\t.,;()!?'\"#%*+<>[]{}|", max_size=200).filter(_innocent)


@SETTINGS
@given(text=INNOCENT_TEXT)
def test_text_without_a_secret_comes_back_unchanged(text) -> None:
    assert redact_text(text) == text
    assert redact_argv(text.split()) == text.split()
    assert scrub({"line": text, "words": text.split()}) == {"line": text, "words": text.split()}


INNOCENT_COMMANDS = [
    "vllm serve /srv/m --max-num-batched-tokens 8192 --tokenizer /srv/tok --port 8000",
    "lm_eval --model local-completions --model_args model=m,max_tokens=512,base_url=http://127.0.0.1:8000/v1",
    "python eval.py --api-key-env OPENAI_API_KEY --limit 10",
    "PATH=/usr/bin:/bin LANG=C.UTF-8 python -m bench",
    "git clone git@github.com:org/repo.git && cd repo",
    "curl https://host.example.org/v1/models?limit=5&order=asc",
    "--keyboard us --passthrough --pattern '*.json' --pat-dir /srv --session-file s.json",
    "ssh git@host.example.org",
]


@pytest.mark.parametrize("command", INNOCENT_COMMANDS, ids=[f"command-{i}" for i in range(len(INNOCENT_COMMANDS))])
def test_innocent_command_lines_come_back_unchanged(command) -> None:
    assert redact_text(command) == command
    assert redact_argv(command.split()) == command.split()


@SETTINGS
@given(words=st.lists(st.sampled_from(["--port", "8000", "--tokenizer", "t", "--max-tokens", "16", "--model", "m",
                                       "--no-auth", "--host", "127.0.0.1", "PATH=/bin", "-v"]),
                      max_size=12))
def test_innocent_flags_in_any_order_come_back_unchanged(words) -> None:
    # a secret-worded switch takes the next non-option word as its value
    assume(all(i + 1 == len(words) or words[i + 1].startswith("--") for i, w in enumerate(words) if w == "--no-auth"))
    assert redact_argv(words) == words


@SETTINGS
@given(flag=secret_flags(), secret=SECRET, sep=st.sampled_from([" ", "\t", "\n", "=", "  "]))
@example(flag="--db-pwd", secret="hunter2hunter2", sep="\t")
def test_a_secret_flag_s_value_in_a_key_never_survives(flag, secret, sep) -> None:
    """A command line used as a JSON key (a record keyed by the argv that ran) is redacted as text is,
    whatever whitespace separates the flag from its value."""
    assume(secret not in flag)
    _gone(secret, str(scrub({f"{flag}{sep}{secret}": 1, "nested": {f"run {flag}{sep}{secret}": 2}})))
