"""The canonical JSON spelling and the content id are contracts: every identity id and plan digest in
existence depends on them. A change here must fail loudly (and bump the identity schema)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from execsys.canonical import canonical_json, content_id, short

OBJECT = {"model": {"declared": {"name": "llama-3-8b", "temperature": 0.0}, "observed": {}},
          "b": [1, 2.5, True, None, "é\n"]}
SPELLING = '{"b":[1,2.5,true,null,"é\\n"],"model":{"declared":{"name":"llama-3-8b","temperature":0.0},"observed":{}}}'
CONTENT_ID = "bcec7f221ad360ae38f51cd0d46cb6351c815a70e43abc897e1337a77f5bd519"


def test_canonical_spelling_is_fixed() -> None:
    assert canonical_json(OBJECT) == SPELLING.encode("utf-8")


def test_content_id_is_a_literal() -> None:
    assert content_id(OBJECT) == CONTENT_ID


@pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum is installed by scripts/test.sh")
def test_content_id_is_b3sum_of_the_spelling() -> None:
    done = subprocess.run(["b3sum", "--no-names"], input=SPELLING.encode("utf-8"), capture_output=True,
                          timeout=30, check=True)
    assert done.stdout.decode().strip() == CONTENT_ID


def test_nan_has_no_canonical_spelling() -> None:
    with pytest.raises(ValueError):
        canonical_json({"temperature": float("nan")})


def test_an_id_is_shown_by_its_first_twelve_characters() -> None:
    # the short form every table and sentence prints; a lock without an id prints nothing, not "None"
    assert short(CONTENT_ID) == "bcec7f221ad3"
    assert short(CONTENT_ID, 8) == "bcec7f22"
    assert short(None) == "" and short("") == ""
