"""The whole quant support table against a literal expected table (tests/data/quant_verdicts.tsv).

Every format x scheme x engine x target the table covers (320 combinations) has its verdict written
down, so a rule edit -- or a change to how rules are matched (first match, cc_min inclusive,
cc_below exclusive) -- shows up as the list of verdicts that moved. Regenerate the file with
scripts/quant_verdicts.py only after reviewing that list against the rules' sources."""

from __future__ import annotations

import csv
from pathlib import Path

from execsys import quant

TABLE = Path(__file__).parent / "data" / "quant_verdicts.tsv"
TARGETS = ["sm_80", "sm_89", "sm_90", "sm_100", "sm_120"]


def _expected() -> dict[tuple[str, str, str, str], str]:
    with TABLE.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    table = {(r["format"], r["scheme"], r["engine"], r["target"]): r["verdict"] for r in rows}
    assert len(table) == len(rows), "a combination is listed twice"
    return table


def test_every_verdict_matches_the_expected_table() -> None:
    expected = _expected()
    live: dict[tuple[str, str, str, str], str] = {}
    for fmt, spec in quant.formats().items():
        for scheme in spec["schemes"]:
            for engine in quant.engines():
                for target in TARGETS:
                    verdict = quant.check(fmt, scheme=scheme, engine=engine, target=quant.parse_target(target))
                    live[(fmt, scheme, engine, target)] = verdict.verdict
    moved = [f"{' '.join(key)}: expected {expected.get(key, '(not listed)')}, now {live.get(key, '(not covered)')}"
             for key in sorted(set(expected) | set(live)) if expected.get(key) != live.get(key)]
    assert not moved, "verdicts moved (review against the rules' sources, then regenerate):\n" + "\n".join(moved)


def test_the_table_covers_all_320_combinations() -> None:
    expected = _expected()
    assert len(expected) == 320
    assert {key[3] for key in expected} == set(TARGETS)
    assert {key[2] for key in expected} == {"vllm", "sglang", "trtllm", "llamacpp"}
    # all three verdicts occur: a table flattened to one answer would not
    assert set(expected.values()) == {"native", "fallback", "unsupported"}


def test_the_hand_checked_verdicts_agree_with_the_table() -> None:
    """The verdicts in tests/test_quant.py were written from the cited sources by hand: the generated
    table must not contradict any of them."""
    from tests.test_quant import EXPECTED

    expected = _expected()
    assert {key: expected[key] for key in EXPECTED} == EXPECTED


def test_aliases_and_spellings_reach_the_same_row() -> None:
    expected = _expected()
    cases = [("modelopt_fp4", None, "tensorrt-llm", "B200", ("nvfp4", "W4A4", "trtllm", "sm_100")),
             ("FP8", "blockwise", "vLLM", "A100", ("fp8", "block", "vllm", "sm_80")),
             ("awq_marlin", "int4", "llama.cpp", "9.0", ("awq", "W4A16", "llamacpp", "sm_90")),
             ("fp8-dynamic", None, "sglang", "NVIDIA L40S", ("fp8", "per-tensor", "sglang", "sm_89"))]
    for fmt, scheme, engine, target, key in cases:
        verdict = quant.check(fmt, scheme=scheme, engine=engine, target=quant.parse_target(target))
        assert (verdict.format, verdict.scheme, verdict.engine) == key[:3]
        assert verdict.verdict == expected[key], (fmt, scheme, engine, target)
