"""Keep secrets out of every record, output and ledger row.

Names are kept so a reader can see that a variable was set; values of anything
that looks secret become ``<redacted>``. Two layers: structural redaction of
things known to carry secrets (environment mappings, URLs, headers, argv), and a
last-line scrub that replaces any live secret value found anywhere in a record.
The same rule serves every output: the lock, the ledger, ``--json`` and every
line printed (``execsys.console`` passes stdout and stderr through
:func:`redact_text`).

The rule, in full:

* A *secret name* (environment variable, header, query parameter, ``NAME=value``
  argument) contains ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``,
  ``PASSPHRASE``, ``CREDENTIAL``, ``AUTH``, ``COOKIE`` or ``PRIVATE`` anywhere, or
  has ``PASS``, ``PAT``, ``PWD`` or ``SESSION`` as a whole part (parts are split at
  ``_ - .``: ``MY_PASS``, ``GITHUB_PAT``, ``DB_PWD``, ``AWS_SESSION_TOKEN``; not
  ``PATH``, ``PATTERN``, ``PASSTHROUGH``). Variables that only look like it are
  exempt: ``PWD``/``OLDPWD`` (the working directory) and the desktop-session
  variables (``XDG_SESSION_*``, ``DESKTOP_SESSION``, ``SESSION_MANAGER``,
  ``DBUS_SESSION_BUS_ADDRESS``, ``GDMSESSION``).
* A *secret flag* has one of those words as a word of its own (``--api-key``,
  ``--hf-token=``, ``--pass``, ``--db-pwd``); ``--max-num-batched-tokens``,
  ``--tokenizer`` and ``--api-key-env`` (it names a variable) are not.
* A *secret-shaped value* is redacted wherever it appears, whatever it is called:
  OpenAI/Anthropic-style ``sk-...``, GitHub ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``
  and ``github_pat_...``, Hugging Face ``hf_...``, Slack ``xoxb-``/``xoxp-...``, AWS
  access key ids ``AKIA...``, and JWTs ``eyJ....<payload>.<signature>``.
* Credentials in URLs (``https://user:pw@host``, a lone ``https://token@host``),
  ``Authorization``/``Cookie``/``X-Api-Key`` headers, ``Bearer``/``Basic``/``token``
  values and secret-named query parameters.

Every pattern here runs in time linear in its input: each can only start at the
beginning of a run of the characters it consumes (a look-behind), so no run is
rescanned from each of its positions.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"

SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|PRIVATE"
    # whole parts only: PATH, PATTERN and PASSTHROUGH are not secrets
    r"|(?:^|[_.\-])(?:PASS|PAT|PWD|SESSION)(?:$|[_.\-])", re.IGNORECASE
)
# Names that match the rule but hold no secret: the working directory and desktop-session plumbing
# (their values -- a path, "wayland" -- would otherwise be scrubbed out of every record).
_INNOCENT_NAMES = re.compile(
    r"(?:OLD)?PWD|XDG_SESSION_\w*|DESKTOP_SESSION|SESSION_MANAGER|DBUS_SESSION_BUS_ADDRESS|GDMSESSION"
    r"|XDG_SESSION_PATH|XDG_SEAT_PATH", re.IGNORECASE)
# Values shorter than this are too likely to occur innocently to scrub by value.
_MIN_SCRUB_LEN = 6

# The look-behind lets a scheme start only where a run of scheme characters starts: without it a
# 1 MB run of letters is rescanned from each of its positions (quadratic: 160 KB took 10 s).
_URL_WITH_USERINFO = re.compile(r"(?<![a-zA-Z0-9+.\-])([a-zA-Z][a-zA-Z0-9+.\-]*://)([^/\s@]+)@")
_HEADER_SECRET = re.compile(
    r"(?i)\b(authorization|proxy-authorization|cookie|set-cookie|x-api-key|api-key)(\s*[:=]\s*)([^\r\n,;]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=\-]{8,}")
# A quoted value is at most a few KiB: an unclosed quote must not make every later flag rescan the
# rest of the text.
# Written to start with a literal '-' (the look-behind comes after it), so the regex engine jumps
# from '-' to '-' instead of trying a look-behind at every position.
_FLAG_VALUE = re.compile(r"""(-(?<![\w-]-)-?[A-Za-z][\w.-]*)(=|\s+)('[^'\n]{0,4096}'|"[^"\n]{0,4096}"|[^\s'"]+)""")
# The parameter name is matched as a whole (no '?' inside it, so runs of '?' are not rescanned) and
# judged by a function, not by backtracking through it for a keyword.
_QUERY_PARAM = re.compile(r"([?&])([^=&?\s#]{1,256})=([^&\s#]+)")
_QUERY_SECRET_NAME = re.compile(r"(?i)key|token|secret|password|passwd|auth|sig")
# Well-known key formats, redacted under any name. Each starts only where a run of key characters
# starts (look-behind), so matching stays linear.
_KEY_SHAPED = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-[A-Za-z0-9_\-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{22,}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|xox[bpas]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}(?![A-Za-z0-9])"
    r"|eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}"
    r")"
)


_HEADER_WORDS = ("authorization", "cookie", "api-key")
_KEY_PREFIXES = ("sk-", "gh", "github_pat_", "hf_", "xox", "AKIA", "eyJ")  # "github" holds no "gh"
# NAME=value inside a command line ('env HF_TOKEN=hf_... vllm serve'): environment-variable-shaped names
# only, so prose such as 'max_tokens=512' stays readable; starts only where a word starts (linear).
_ENV_ASSIGNMENT = re.compile(r"""(?<![\w-])([A-Z][A-Z0-9_]*=)('[^'\n]{0,4096}'|"[^"\n]{0,4096}"|[^\s'"]+)""")


def is_secret_name(name: str) -> bool:
    """Whether a variable, header or parameter called ``name`` holds a secret (see the module docstring)."""
    return bool(SECRET_NAME.search(name)) and not _INNOCENT_NAMES.fullmatch(name)


def is_secret_shaped(value: str) -> bool:
    """Whether ``value`` contains a well-known key format (``sk-...``, ``ghp_...``, ``hf_...``, a JWT...)."""
    return _KEY_SHAPED.search(value) is not None


# A flag is secret when one of its words ends in a secret word: --api-key, --hf-token, --apikey,
# --db-password. Word-wise, so vLLM's --max-num-batched-tokens and --tokenizer (they change numerics
# and must stay visible in an identity) and --keyboard are not.
_SECRET_FLAG_WORD = re.compile(
    r"(key|keys|token|secret|secrets|password|passwd|passphrase|credential|credentials|auth|authorization"
    r"|cookie|cookies|private)$"
)
# Short words that are secrets only as a flag's last word: --pass, --db-pwd, --github-pat, --session
# (but --session-file and --pat-dir name files).
_SECRET_FLAG_LAST_WORD = {"pass", "pat", "pwd", "session"}


def is_secret_flag(flag: str) -> bool:
    """``--api-key``, ``--hf-token=``, ``--db-password``: yes; ``--max-num-batched-tokens``, ``--tokenizer``,
    ``--api-key-env`` (it names a variable, it holds no secret): no."""
    words = [w for w in re.split(r"[-_.]+", flag.lstrip("-").lower()) if w]
    if words and words[-1] == "env":
        return False
    return any(_SECRET_FLAG_WORD.search(w) for w in words) or bool(words and words[-1] in _SECRET_FLAG_LAST_WORD)


def redact_url(url: str) -> str:
    """Strip credentials from a URL: ``https://u:p@h/x?api_key=k`` -> ``https://u:<redacted>@h/x?api_key=<redacted>``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if not parts.netloc:  # a scheme-relative ``//user:pw@host/x`` has a netloc: its userinfo is redacted too
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{REDACTED}@{host}"
        else:
            # A lone userinfo (``https://ghp_xxx@github.com``) is usually a token.
            netloc = f"{REDACTED}@{host}" if userinfo not in ("git",) else netloc
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if is_secret_name(k) or k.lower() == "sig" else v) for k, v in pairs], safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Redact credentials inside free text: URLs with userinfo, auth headers, bearer tokens, secret query params."""

    def _userinfo(match: re.Match[str]) -> str:
        scheme, userinfo = match.group(1), match.group(2)
        if ":" in userinfo:
            return f"{scheme}{userinfo.split(':', 1)[0]}:{REDACTED}@"
        if userinfo == "git":
            return match.group(0)
        return f"{scheme}{REDACTED}@"

    def _query(match: re.Match[str]) -> str:
        if _QUERY_SECRET_NAME.search(match.group(2)):
            return f"{match.group(1)}{match.group(2)}={REDACTED}"
        return match.group(0)

    # Each pattern runs only where a plain substring test says it can match: a megabyte of model
    # output costs a few fast scans, not six regex passes.
    lowered = text.lower()
    if "://" in text:
        text = _URL_WITH_USERINFO.sub(_userinfo, text)
    if any(word in lowered for word in _HEADER_WORDS):
        text = _HEADER_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if "bearer" in lowered or "basic" in lowered or "token" in lowered:
        text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    if "=" in text and ("?" in text or "&" in text):
        text = _QUERY_PARAM.sub(_query, text)
    if any(prefix in text for prefix in _KEY_PREFIXES):
        text = _KEY_SHAPED.sub(REDACTED, text)
    if "=" in text:
        text = _ENV_ASSIGNMENT.sub(
            lambda m: f"{m.group(1)}{REDACTED}" if is_secret_name(m.group(1)[:-1]) else m.group(0), text)
    if "-" not in text:
        return scrub_known_secrets(text)
    # a command line written as one string: 'python eval.py --api-key sk-...'
    return scrub_known_secrets(_redact_flag_values(text))


def _redact_flag_values(text: str) -> str:
    """The value after each secret flag, redacted. A flag that is not secret gives back what its match
    took as its value, which may be the next flag ('-a --api-key X'): scanning resumes right after it."""
    out: list[str] = []
    pos = 0
    while (match := _FLAG_VALUE.search(text, pos)) is not None:
        if is_secret_flag(match.group(1)) and not _LONG_OPTION.match(match.group(3)):
            out += [text[pos:match.start(3)], REDACTED]
            pos = match.end(3)
        else:
            out.append(text[pos:match.end(1)])
            pos = match.end(1)
    out.append(text[pos:])
    return "".join(out)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of an environment mapping with secret-looking values replaced and URLs cleaned."""
    out: dict[str, str] = {}
    for name, value in env.items():
        out[name] = REDACTED if is_secret_name(name) else redact_text(str(value))
    return out


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else redact_text(v)) for k, v in headers.items()}


_LONG_OPTION = re.compile(r"--[A-Za-z][A-Za-z0-9-]*(=|$)")


def redact_argv(argv: Iterable[str]) -> list[str]:
    """Redact values of secret-looking flags (``--api-key X``, ``--hf-token=X``) and credentials in any argument."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not _LONG_OPTION.match(arg):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False  # `--no-auth --port 8000`: a switch with a secret word takes no value
        if arg.startswith("-") and is_secret_flag(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide_next = True
            continue
        if "=" in arg and not arg.startswith("-") and is_secret_name(arg.split("=", 1)[0]):
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)  # NAME=value as in `env NAME=value cmd`
            continue
        out.append(redact_text(_redact_key_value_list(arg) if "," in arg and "=" in arg else arg))
    return out


def _redact_key_value_list(arg: str) -> str:
    """``model=m,api_key=sk-...,base_url=...``: harnesses take credentials inside comma-separated
    ``key=value`` lists (lm-eval's ``--model_args``), one argument that holds several settings. A key is
    judged word-wise like a flag, so ``max_tokens=512`` and ``tokenizer=...`` stay visible."""
    parts = arg.split(",")
    for index, part in enumerate(parts):
        key, eq, _value = part.partition("=")
        if eq and is_secret_flag(key):
            parts[index] = f"{key}={REDACTED}"
    return ",".join(parts)


_live_cache: tuple[dict, list[str]] | None = None


def live_secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named variables in the environment, longest first (so overlaps scrub fully)."""
    global _live_cache
    raw = getattr(os.environ, "_data", None) if environ is None else None
    # Every ledger append scrubs every string: re-scan os.environ only when it actually changed
    # (an exact dict comparison at C speed instead of a regex per variable per string).
    if raw is not None and _live_cache is not None and _live_cache[0] == raw:
        return list(_live_cache[1])
    env = os.environ if environ is None else environ
    values = sorted({v for k, v in env.items() if is_secret_name(k) and len(v) >= _MIN_SCRUB_LEN},
                    key=len, reverse=True)
    if raw is not None:
        _live_cache = (dict(raw), values)
    return list(values)


_extra_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret this process handles (an API key read from a named variable) so no output shows it."""
    if value and len(value) >= _MIN_SCRUB_LEN:
        _extra_secrets.add(value)


def scrub_known_secrets(text: str) -> str:
    for value in sorted(set(live_secret_values()) | _extra_secrets, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def scrub(obj: Any) -> Any:
    """Walk a JSON-like structure: redact values under secret-named variables and any live secret value
    anywhere -- keys included: a declaration's ``[environment.variables] "sk-live-..." = "x"`` puts a
    key-shaped string where a name belongs, and the lock, the ledger and ``--json`` all keep the keys."""
    if isinstance(obj, Mapping):
        result = {}
        for key, value in obj.items():
            shown_key = _scrub_key(key, result) if isinstance(key, str) else key
            if isinstance(key, str) and isinstance(value, str) and value and _is_secret_field(key):
                result[shown_key] = REDACTED
            else:
                result[shown_key] = scrub(value)
        return result
    if isinstance(obj, (list, tuple)):
        return [scrub(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


# Where a pattern of redact_text can start in a key: a URL's "://" and a header's ":", an "=", or any
# whitespace (a flag's value or a Bearer token after a tab or a newline is redacted as after a space).
_KEY_MAY_HIDE = re.compile(r"[:=\s]")


def _scrub_key(key: str, taken: Mapping[str, Any]) -> str:
    """``key`` redacted as any text is; two keys that redact alike stay two (``<redacted>``,
    ``<redacted>#2``) so no value is lost. The common key (a field name) costs one substring scan."""
    # a field name is rarely more than a word: the full redactor only where a pattern could start
    may_hide = _KEY_MAY_HIDE.search(key) is not None or any(prefix in key for prefix in _KEY_PREFIXES)
    clean = redact_text(key) if may_hide else scrub_known_secrets(key)
    if clean == key:
        return key
    if clean not in taken:
        return clean
    n = 2
    while f"{clean}#{n}" in taken:
        n += 1
    return f"{clean}#{n}"


_SECRET_FIELDS = {"authorization", "api_key", "apikey", "password", "passwd", "token", "secret", "cookie", "private_key"}


def _is_secret_field(key: str) -> bool:
    # Only environment-variable-shaped names (HF_TOKEN) and well-known secret fields: our own
    # schemas use words like "max_tokens" and "api_key_env" (the *name* of a variable).
    if key.lower() in _SECRET_FIELDS:
        return True
    return bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", key)) and is_secret_name(key)
