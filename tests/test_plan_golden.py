"""Golden values for plan digests and schedules, computed before ``execsys/plan.py`` became a package.

A registered plan is identified by its digest (the ledger record id derives from it) and
``plan check``/``plan run`` refuse a plan whose content no longer hashes to it. So a change to the
digest body, to the canonical JSON or to the seeded schedule silently turns every plan file in
existence into a "tampered" one. These literals were computed once, from the code as it was; a
test that recomputed them with the function under test could not fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.canonical import canonical_json
from execsys.plan import new_plan


def test_plan_digest_from_case_ids_with_placement_and_identity() -> None:
    plan = new_plan(["A", "B"], [f"c{i}" for i in range(9)], "abba", 7, {"A": "gpu1"}, identity="f" * 64)
    assert plan.digest == "08c97dce03cc6404f3b3a9ea198b268c87c075f1bbd6f3100e84305dace16658"
    assert plan.record_id == "plan-08c97dce03cc6404f3b3a9ea"
    assert plan.order == [
        {"case": "c5", "first": "A"}, {"case": "c0", "first": "B"}, {"case": "c4", "first": "B"},
        {"case": "c7", "first": "A"}, {"case": "c2", "first": "A"}, {"case": "c1", "first": "B"},
        {"case": "c8", "first": "B"}, {"case": "c3", "first": "A"}, {"case": "c6", "first": "A"},
    ]


def test_random_design_with_a_string_seed() -> None:
    plan = new_plan(["base", "tuned"], [f"c{i}" for i in range(7)], "random", "seed-x")
    assert plan.digest == "4fc34b1f0ea661d76fd6edcaa553dffe35759c198a8cfa531476a159e1d75bb5"
    assert [(e["case"], e["first"]) for e in plan.order] == [
        ("c5", "base"), ("c3", "base"), ("c1", "tuned"), ("c2", "tuned"), ("c0", "base"), ("c4", "base"),
        ("c6", "tuned"),
    ]


def test_plan_digest_from_a_cases_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [json.dumps({"id": f"c{i}", "prompt": f"Item {i} says", "max_tokens": 8, "expected": "nothing"})
            for i in range(5)]
    (tmp_path / "cases.jsonl").write_text("\n".join(rows) + "\n")
    monkeypatch.chdir(tmp_path)
    plan = new_plan(["A", "B"], "cases.jsonl", "abba", 3)
    assert plan.cases == {"file": "cases.jsonl", "n": 5,
                          "digest": "0f351c230b6e019450b207d5ccf9722af373aa3e2243c64e4dea3f059a6b622d"}
    assert plan.digest == "4b08408ab76372e2b991fd1190a33e85c7c0950c162d3e830c9ec008acb86e39"


def test_the_canonical_digest_body_is_byte_identical() -> None:
    plan = new_plan(["A", "B"], ["x", "y", "z"], "abba", 1, {"A": "gpu1"}, identity="e" * 64)
    assert canonical_json(plan.digest_body()) == (
        b'{"arms":["A","B"],"cases":{"digest":"a4aab1a828cb6a0da3c3f96291c5cb4e4b45a775c127dca1d1d9592132f3d53a",'
        b'"file":null,"n":3},"design":"abba","identity":"' + b"e" * 64 + b'","order":[{"case":"y","first":"A"},'
        b'{"case":"x","first":"B"},{"case":"z","first":"B"}],"placement":{"A":"gpu1"},"schema":"execsys.plan/1",'
        b'"seed":1}'
    )
    assert plan.digest == "52eb1eec3e2e24009579889a3da73d4a95f79d35a32cb19ffd0785224c85b295"
