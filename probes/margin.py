"""Why a case flipped: the logprob margin at the first divergent token, and the near-tie verdict.

At temperature 0 a flip is either numeric reordering at a near-tie (the two tokens were practically
tied, so a different summation order picks the other one: the chapter's mechanism, answered by a
paired control) or something that is not noise at all (a cache, a template, a different engine:
fix it). Both passes of a flipped case are in the ledger with their top-K logprobs, so the margin
at the first divergent token says which: the gap between the two chosen tokens in pass A's
distribution, and in pass B's. A margin at most ``tie_margin`` nats is a ``near-tie``.

A token outside a pass's top-K has a logprob of at most the K-th one, so its margin is a lower
bound there (``bound: "at least"``); a lower bound is never called a near-tie.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_TOP_K = 5
DEFAULT_TIE_MARGIN = 0.1  # nats
NEAR_TIE = "near-tie"
NOT_NEAR_TIE = "not a near-tie"


@dataclass(frozen=True)
class PassTokens:
    """One pass's generated tokens with their top-K logprobs (``[[token, logprob], ...]`` per token)."""

    tokens: Sequence[str] | None
    top: Sequence[Sequence[Sequence[Any]]] | None
    chosen: Sequence[float | None] | None = None


def pack_logprobs(tokens: Sequence[str] | None, chosen: Sequence[float | None] | None,
                  top: Sequence[Sequence[Sequence[Any]]]) -> dict[str, str]:
    """One case's tokens and top-K for its ledger row, as two compact JSON strings: the token strings
    (``[tokens, top-K tokens per position]``) and the numbers (``[chosen, top-K logprobs per
    position]``). Two strings instead of a few hundred nested values keep the row's write cheap: the
    ledger's secret scrub walks every value of a row, and that walk cost a probe asking for logprobs
    more CPU than parsing the response did."""
    words = json.dumps([list(tokens or []), [[t for t, _ in alternatives] for alternatives in top]],
                       ensure_ascii=False, separators=(",", ":"))
    values = json.dumps([list(chosen or []), [[lp for _, lp in alternatives] for alternatives in top]],
                        separators=(",", ":"))
    return {"tokens": words, "values": values}


def unpack_logprobs(body: dict[str, Any]) -> PassTokens:
    """A probe-case row's tokens and top-K (``tokens`` kept by --tokens wins for the token list). Rows
    written before the numbers were packed (``chosen`` and ``top`` as lists) read the same."""
    packed = body.get("logprobs")
    if not isinstance(packed, dict):
        return PassTokens(body.get("tokens"), None, None)
    try:
        tokens, top_tokens = json.loads(packed.get("tokens") or "[[], []]")
        if "values" in packed:
            chosen, values = json.loads(packed["values"])
        else:
            chosen, values = packed.get("chosen"), packed.get("top") or []
    except (json.JSONDecodeError, ValueError, TypeError):  # altered by redaction: treat as none kept
        return PassTokens(body.get("tokens"), None, None)
    top = [[[t, lp] for t, lp in zip(words, lps, strict=False)] for words, lps in zip(top_tokens, values, strict=False)]
    return PassTokens(body.get("tokens") if body.get("tokens") is not None else tokens, top, chosen)


def _gap(top: Sequence[Sequence[Any]], own: str, other: str, own_logprob: float | None) -> tuple[float | None, bool]:
    """logprob(own) - logprob(other) in one distribution; (gap, exact). ``other`` outside the top-K:
    its logprob is at most the smallest listed, so the gap is a lower bound. ``other`` listed more than
    once (distinct tokens with one text: vLLM's chat entries name every lone byte of a multi-byte
    character ``""``): the gap to the likeliest of them, a lower bound too."""
    table: dict[str, float] = {}
    listed: dict[str, int] = {}
    for t, lp in top:
        key = str(t)
        table[key] = max(float(lp), table.get(key, float("-inf")))
        listed[key] = listed.get(key, 0) + 1
    mine = own_logprob if own_logprob is not None else table.get(own)
    if mine is None:
        return None, False
    if other in table:
        return max(0.0, mine - table[other]), listed[other] == 1
    if not table:
        return None, False
    return max(0.0, mine - min(table.values())), False


def margin_at(a: PassTokens, b: PassTokens, index: int | None, *, tie_margin: float = DEFAULT_TIE_MARGIN
              ) -> dict[str, Any] | None:
    """The margin dict at token ``index`` (the first divergent token), or None when it cannot be told
    (no logprobs on a side, or one output is a prefix of the other)."""
    if index is None or a.tokens is None or b.tokens is None or a.top is None or b.top is None:
        return None
    if index >= len(a.tokens) or index >= len(b.tokens) or index >= len(a.top) or index >= len(b.top):
        return None
    token_a, token_b = a.tokens[index], b.tokens[index]
    chosen_a = a.chosen[index] if a.chosen is not None and index < len(a.chosen) else None
    chosen_b = b.chosen[index] if b.chosen is not None and index < len(b.chosen) else None
    gap_a, exact_a = _gap(a.top[index], token_a, token_b, chosen_a)
    gap_b, exact_b = _gap(b.top[index], token_b, token_a, chosen_b)
    known = [g for g in (gap_a, gap_b) if g is not None]
    if not known:
        return None
    # The larger of the two gaps: a near-tie only when both passes saw the two tokens practically tied.
    margin = max(known)
    exact = (exact_a or gap_a is None) and (exact_b or gap_b is None)
    verdict = NEAR_TIE if exact and margin <= tie_margin else NOT_NEAR_TIE
    return {
        "token": index, "token_a": token_a, "token_b": token_b,
        "top_a": [list(p) for p in a.top[index]], "top_b": [list(p) for p in b.top[index]],
        "margin_a": gap_a, "margin_b": gap_b, "margin": margin, "bound": "exact" if exact else "at least",
        "verdict": verdict, "tie_margin": tie_margin,
    }


def sent_phrases(divergence: dict[str, Any], labels: Sequence[str]) -> list[str]:
    """``pass B sent after its twin``, ``pass B in flight with 3 others``: how a flip's passes went out
    (the two causes found on llama.cpp: cached-prefix reuse and batch composition)."""
    phrases = []
    for side in divergence.get("sent") or []:
        k = int(side.get("pass") or 0)
        label = labels[k] if k < len(labels) and labels[k] else str(k)
        if side.get("after_twin"):
            phrases.append(f"pass {label} sent after its twin")
        others = int(side.get("in_flight_with") or 0)
        if others:
            phrases.append(f"pass {label} in flight with {others} other{'s' if others != 1 else ''}")
    return phrases


def nats(value: float) -> str:
    """A margin as the sentence writes it: two significant digits (0.003, 0.0015, 3.9)."""
    return f"{value:.2g}"


def split_summary(flips: Sequence[tuple[str, dict[str, Any] | None]]) -> dict[str, Any]:
    """The near-tie split over the flipped cases: counts, median near-tie margin, the others named."""
    near = [m["margin"] for _, m in flips if m and m.get("verdict") == NEAR_TIE]
    others = [(case_id, m) for case_id, m in flips if m and m.get("verdict") == NOT_NEAR_TIE]
    unknown = [case_id for case_id, m in flips if not m]
    return {
        "flips": len(flips), "near_ties": len(near), "not_near_ties": len(others), "unknown": len(unknown),
        "median_near_tie_margin": statistics.median(near) if near else None,
        "not_near_tie_cases": [{"id": case_id, "margin": m["margin"], "bound": m["bound"]} for case_id, m in others],
    }


def split_sentence(summary: dict[str, Any], max_named: int = 3) -> str | None:
    """``8 flips: 7 at near-ties (median margin 0.003), 1 not a near-tie (c14, 3.9 nats)``; None when no
    flip has a margin."""
    if not summary["flips"] or summary["near_ties"] + summary["not_near_ties"] == 0:
        return None
    flips = summary["flips"]
    parts = []
    if summary["near_ties"]:
        parts.append(f"{summary['near_ties']} at near-tie{'s' if summary['near_ties'] != 1 else ''} "
                     f"(median margin {nats(summary['median_near_tie_margin'])})")
    if summary["not_near_ties"]:
        named = summary["not_near_tie_cases"][:max_named]
        listed = "; ".join(f"{c['id']}, {'≥' if c['bound'] != 'exact' else ''}{nats(c['margin'])} nats" for c in named)
        more = f"; {summary['not_near_ties'] - len(named)} more" if summary["not_near_ties"] > len(named) else ""
        parts.append(f"{summary['not_near_ties']} not a near-tie ({listed}{more})")
    if summary["unknown"]:
        parts.append(f"{summary['unknown']} without logprobs at the divergence")
    return f"{flips} flip{'s' if flips != 1 else ''}: " + ", ".join(parts)
