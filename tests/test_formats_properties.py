"""Properties of the formats, over generated inputs: a tree manifest that `b3sum --check` accepts
for any file names (spaces, unicode, newlines, backslashes), and redaction that is idempotent and
never lets a generated secret through."""

from __future__ import annotations

import os
import shutil
import string
import subprocess
import tempfile
from pathlib import Path

import blake3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execsys.digest import digest_path
from execsys.redact import REDACTED, redact_argv, redact_text, redact_url, scrub

# -- manifests --------------------------------------------------------------------------------

# Names a Linux filesystem accepts, as UTF-8: anything but "/" and NUL, and not "." or "..".
_NAME_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00")
_NAME = st.one_of(
    st.text(_NAME_CHARS, min_size=1, max_size=12),
    st.sampled_from(["with space", " lead", "trail ", "new\nline", "back\\slash", "\\n literally", "é ü 中文 🤖",
                     "tab\there", "both\\and\nnewline", "-dash", "*star?"]),
).filter(lambda n: n not in (".", "..") and len(n.encode()) <= 200)
_TREE = st.dictionaries(
    keys=st.lists(_NAME, min_size=1, max_size=3).map(tuple),
    values=st.binary(max_size=300),
    min_size=1, max_size=8,
)


def _build(root: Path, tree: dict[tuple[str, ...], bytes]) -> dict[bytes, bytes]:
    """Write the tree (a path that is a prefix of another becomes a directory); the files written."""
    written: dict[bytes, bytes] = {}
    for parts, content in sorted(tree.items(), key=lambda item: len(item[0])):
        path = root.joinpath(*parts)
        if any(root.joinpath(*parts[:i]).is_file() for i in range(1, len(parts))):
            continue  # a file already sits where this path needs a directory
        if path.exists():
            continue  # already a directory for a deeper path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        written[os.fsencode(os.path.join(*parts))] = content
    return written


@pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum is installed by scripts/test.sh")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_TREE)
def test_any_tree_manifest_passes_b3sum_check(tree: dict[tuple[str, ...], bytes]) -> None:
    with tempfile.TemporaryDirectory(prefix="execsys-manifest-") as tmp:
        root = Path(tmp) / "snapshot"
        root.mkdir()
        written = _build(root, tree)
        result = digest_path(root)
        manifest = result.manifest.encode("utf-8")
        assert result.files == len(written) == manifest.count(b"\n")
        # every file listed once, with the BLAKE3 of its own bytes
        assert sorted(e.relpath for e in result.entries) == sorted(written)
        for entry in result.entries:
            assert entry.digest == blake3.blake3(written[entry.relpath]).hexdigest()
        # b3sum itself, run from inside the tree, finds every line correct
        check = subprocess.run(["b3sum", "--check", "-"], input=manifest, cwd=root, capture_output=True,
                               timeout=60)
        assert check.returncode == 0, (manifest, check.stdout, check.stderr)
        assert check.stdout.count(b": OK\n") == len(written)
        # and the tree's digest is b3sum of the manifest bytes
        whole = subprocess.run(["b3sum", "--no-names"], input=manifest, capture_output=True, timeout=60,
                               check=True)
        assert whole.stdout.decode().strip() == result.digest


# -- redaction --------------------------------------------------------------------------------

# a secret always holds a digit or a capital, which plain text never does: it cannot occur there by chance
_SECRET = st.text(string.ascii_letters + string.digits + "_-", min_size=10, max_size=24).filter(
    lambda s: s[0].isalnum() and any(c.isdigit() or c.isupper() for c in s))
_PLAIN = st.text(string.ascii_lowercase + " .,:/=-_", max_size=20)


@st.composite
def _text_with_secrets(draw) -> tuple[str, list[str]]:
    pieces: list[str] = []
    secrets: list[str] = []
    for _ in range(draw(st.integers(1, 5))):
        secret = draw(_SECRET)
        shape = draw(st.sampled_from([
            "https://user:{s}@example.org/v1", "Authorization: Bearer {s}", "--api-key {s}", "--hf-token={s}",
            "https://host/path?token={s}&x=1", "HF_TOKEN={s}", "bearer {s}",
        ]))
        pieces.append(draw(_PLAIN))
        pieces.append(shape.format(s=secret))
        secrets.append(secret)
    pieces.append(draw(_PLAIN))
    return " ".join(pieces), secrets


@settings(max_examples=200, deadline=None)
@given(case=_text_with_secrets())
def test_redacting_text_is_idempotent_and_hides_every_secret(case: tuple[str, list[str]]) -> None:
    text, secrets = case
    once = redact_text(text)
    assert redact_text(once) == once
    for secret in secrets:
        assert secret not in once, (text, once)
    assert REDACTED in once


@settings(max_examples=200, deadline=None)
@given(argv=st.lists(st.one_of(_PLAIN, st.sampled_from(["--api-key", "--token", "--port", "8000", "--no-auth"]),
                               _SECRET.map(lambda s: f"--hf-token={s}"), _SECRET.map(lambda s: f"OPENAI_API_KEY={s}"),
                               _SECRET.map(lambda s: f"https://u:{s}@h/x")), max_size=10))
def test_redacting_argv_is_idempotent(argv: list[str]) -> None:
    once = redact_argv(argv)
    assert len(once) == len(argv)
    assert redact_argv(once) == once


@settings(max_examples=200, deadline=None)
@given(secret=_SECRET, user=st.text(string.ascii_lowercase, min_size=1, max_size=8),
       path=st.text(string.ascii_lowercase + "/", max_size=12))
def test_redacting_a_url_is_idempotent(secret: str, user: str, path: str) -> None:
    url = f"https://{user}:{secret}@models.example.org/{path}?sig={secret}&revision=main"
    once = redact_url(url)
    assert redact_url(once) == once and secret not in once
    assert once.startswith(f"https://{user}:{REDACTED}@models.example.org/") and "revision=main" in once


@settings(max_examples=150, deadline=None)
@given(value=st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), _PLAIN, _text_with_secrets().map(lambda c: c[0])),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.sampled_from(["HF_TOKEN", "name", "api_key", "max_tokens", "url"]),
                                               children, max_size=4)),
    max_leaves=12))
def test_scrub_is_idempotent(value) -> None:
    once = scrub(value)
    assert scrub(once) == once


def test_a_secret_assigned_inside_a_declared_command_stays_out_of_the_lock() -> None:
    """Found by the property above: `NAME=value` inside a command line was recorded as written."""
    from execsys.identity import sanitize_declared

    runtime = sanitize_declared("runtime", {"restart": "env HF_TOKEN=hf_Abc123456789 systemctl restart vllm",
                                            "ready": "curl -sf http://127.0.0.1:8000/health"})
    assert runtime["restart"] == f"env HF_TOKEN={REDACTED} systemctl restart vllm"
    harness = sanitize_declared("harness", {"commands": ["OPENAI_API_KEY='sk-Live 42' python eval.py --limit 5"]})
    assert harness["commands"] == [f"OPENAI_API_KEY={REDACTED} python eval.py --limit 5"]
    assert redact_text("CUDA_VISIBLE_DEVICES=0 max_tokens=512 python x.py") == \
        "CUDA_VISIBLE_DEVICES=0 max_tokens=512 python x.py"
