"""Probe forensics against endpoints whose behaviour is known exactly (real HTTP on loopback).

The logprob endpoint below answers with top-K logprobs chosen by the test, so the margin at the
first divergent token, the near-tie verdict and the sentence's split are pinned to the digit;
the flip endpoint's repeat behaviour pins TARr@N / TARa@N; ``probe size`` is checked against
Wilson widths worked out by hand. The real llama.cpp counterpart is in test_probe_llama.py.
"""

from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path

import pytest

from execsys.ledger import Ledger
from tests.fixtures.fake_http import JsonHandler, LoopbackServer

from .fixtures.llama import FlipEndpoint

# case id -> (pass A's logprobs of the two tokens, pass B's): ("4", "5") at token 2
NEAR = {"c01": 0.001, "c03": 0.002, "c05": 0.003, "c07": 0.003, "c09": 0.003, "c11": 0.004, "c13": 0.005}
FAR = {"c14": 3.9}


class LogprobEndpoint(LoopbackServer):
    """An OpenAI-compatible endpoint with exactly known logprobs.

    A prompt ``... [gap:X]`` is answered ``The answer 4`` on its first call and ``The answer 5``
    later; at the third token pass A's top-3 is ``4`` at -0.5, ``5`` at -0.5-X, ``6`` at -6, and a
    later call's is ``5`` at -0.5, ``4`` at -0.5-X/2. ``[out]``: the other token is outside the top-K.
    ``[nolp]``: no logprobs at all. Other prompts always get the same answer. With
    ``reject_logprobs`` any request asking for logprobs is refused with HTTP 400."""

    def __init__(self, *, reject_logprobs: bool = False):
        self.reject_logprobs = reject_logprobs
        self.calls: dict[str, int] = {}
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        endpoint = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                self.send_json({"object": "list", "data": [{"id": "lp", "object": "model"}]})

            def do_POST(self) -> None:
                request = self.read_json()
                chat = self.path.rstrip("/").endswith("/chat/completions")
                prompt = str(request["messages"][-1]["content"]) if chat else str(request.get("prompt"))
                with endpoint._lock:
                    endpoint.bodies.append(request)
                if endpoint.reject_logprobs and request.get("logprobs"):
                    self.send_json({"error": {"message": "logprobs are not supported"}}, 400)
                    return
                with endpoint._lock:
                    endpoint.calls[prompt] = call = endpoint.calls.get(prompt, 0) + 1
                self.send_json(endpoint.answer(prompt, call, chat, request))

        super().__init__(Handler)
        self.base_url = self.url()

    @staticmethod
    def answer(prompt: str, call: int, chat: bool, request: dict) -> dict:
        gap = re.search(r"\[gap:([\d.]+)\]", prompt)
        later = call >= 2 and gap is not None
        last = " 5" if later else " 4"
        tokens = ["The", " answer", last]
        top = [[["The", -0.01], [" A", -5.0]], [[" answer", -0.02], [" result", -4.0]]]
        x = float(gap.group(1)) if gap else 3.0
        if not later:
            third = [[" 4", -0.5], [" 5", -0.5 - x], [" 6", -6.0]]
        else:
            third = [[" 5", -0.5], [" 4", -0.5 - x / 2], [" 6", -6.0]]
        if "[out]" in prompt:
            third = [[last, -0.5], [" 7", -0.6], [" 8", -0.7]]  # the other pass's token is not listed
        top.append(third)
        k = request.get("top_logprobs") if chat else request.get("logprobs")
        wants = bool(request.get("logprobs")) and "[nolp]" not in prompt
        text = "".join(tokens)
        if chat:
            choice: dict = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            if wants:
                choice["logprobs"] = {"content": [
                    {"token": t, "logprob": alts[0][1], "top_logprobs": [{"token": a, "logprob": lp}
                                                                         for a, lp in alts[: int(k or 0)]]}
                    for t, alts in zip(tokens, top, strict=True)]}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "stop"}
            if wants:
                choice["logprobs"] = {"tokens": tokens, "token_logprobs": [alts[0][1] for alts in top],
                                      "top_logprobs": [dict(alts[: int(k)]) for alts in top]}
        return {"id": f"x-{call}", "object": "text_completion", "model": "lp", "choices": [choice]}


def write_cases(path: Path, prompts: dict[str, str], chat: set[str] = frozenset()) -> Path:  # type: ignore[assignment]
    with path.open("w") as handle:
        for case_id, prompt in prompts.items():
            if case_id in chat:
                handle.write(json.dumps({"id": case_id, "messages": [{"role": "user", "content": prompt}]}) + "\n")
            else:
                handle.write(json.dumps({"id": case_id, "prompt": prompt, "max_tokens": 8}) + "\n")
    return path


def twenty_cases() -> dict[str, str]:
    prompts = {}
    for i in range(20):
        case_id = f"c{i:02d}"
        marker = f" [gap:{NEAR.get(case_id, FAR.get(case_id))}]" if case_id in NEAR or case_id in FAR else ""
        prompts[case_id] = f"question {i}{marker}"
    return prompts


def test_margin_arithmetic_and_the_near_tie_split_in_the_sentence(cli, tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl", twenty_cases(), chat={"c03", "c14", "c00"})
    with LogprobEndpoint() as endpoint:
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json")
        bodies = list(endpoint.bodies)
    assert result.returncode == 1, result.stderr
    record = result.json()
    # chat asks logprobs=true + top_logprobs=5, completions logprobs=5
    chat_body = next(b for b in bodies if "messages" in b)
    assert (chat_body["logprobs"], chat_body["top_logprobs"]) == (True, 5)
    assert next(b for b in bodies if "prompt" in b)["logprobs"] == 5
    assert sorted(record["flipped"]) == sorted(NEAR | FAR)
    by_id = {c["id"]: c for c in record["cases"]}
    for case_id, gap in (NEAR | FAR).items():
        margin = by_id[case_id]["first_divergence"]["logprobs"]
        assert margin["token"] == 2 and (margin["token_a"], margin["token_b"]) == (" 4", " 5")
        assert margin["margin_a"] == pytest.approx(gap, abs=1e-12)
        assert margin["margin_b"] == pytest.approx(gap / 2, abs=1e-12)
        assert margin["margin"] == pytest.approx(gap, abs=1e-12)
        assert margin["bound"] == "exact"
        assert margin["verdict"] == ("near-tie" if case_id in NEAR else "not a near-tie")
        assert [t for t, _ in margin["top_a"]] == [" 4", " 5", " 6"]
        assert [t for t, _ in margin["top_b"]] == [" 5", " 4", " 6"]
    assert record["sentence"].endswith(
        "8 flips: 7 at near-ties (median margin 0.003), 1 not a near-tie (c14, 3.9 nats)")
    assert record["sentence"].startswith("session agreement 12/20 = 0.60 (95% CI 0.39–0.78) — unstable")
    lp = record["logprobs"]
    assert (lp["status"], lp["k"], lp["tie_margin"]) == ("ok", 5, 0.1)
    assert (lp["flips"], lp["near_ties"], lp["not_near_ties"]) == (8, 7, 1)
    assert lp["median_near_tie_margin"] == pytest.approx(0.003, abs=1e-12)


def test_tie_margin_moves_the_split_and_table_shows_both_top_k(cli, tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl", twenty_cases())
    with LogprobEndpoint() as endpoint:
        record = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                     "--tie-margin", "0.0025").json()
        text = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases),
                   "--tie-margin", "0.0025", "--resume", record["run"]).stdout
    # margins 0.001 and 0.002 are at most 0.0025; 0.003 .. 0.005 and 3.9 are not
    assert record["logprobs"]["near_ties"] == 2 and record["logprobs"]["not_near_ties"] == 6
    assert "8 flips: 2 at near-ties (median margin 0.0015), 6 not a near-tie (c05, 0.003 nats; " in record["sentence"]
    flat = " ".join(text.split())
    assert "near-tie (margin 0.001 nats)" in flat
    assert "' 4' -0.500, ' 5' -0.501, ' 6' -6.000" in flat  # c01: pass A's top-3
    assert "' 5' -0.500, ' 4' -0.50" in flat  # and pass B's


def test_token_outside_the_top_k_is_a_lower_bound_never_a_near_tie(cli, tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl", {"c00": "q [gap:0.01] [out]", "c01": "steady"})
    with LogprobEndpoint() as endpoint:
        record = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json").json()
    margin = record["cases"][0]["first_divergence"]["logprobs"]
    # " 5" is not in A's top-3: its logprob is at most -0.7, the gap at least 0.2
    assert margin["bound"] == "at least" and margin["margin_a"] == pytest.approx(0.2)
    assert margin["verdict"] == "not a near-tie"
    assert "1 not a near-tie (c00, ≥0.2 nats)" in record["sentence"]


@pytest.mark.parametrize("reject", [False, True])
def test_engine_without_logprobs_is_recorded_unsupported_never_an_error(cli, tmp_path, reject):
    prompts = {"c00": "a [gap:0.01] [nolp]", "c01": "b [nolp]"} if not reject else {"c00": "a [gap:0.01]", "c01": "b"}
    cases = write_cases(tmp_path / "cases.jsonl", prompts)
    with LogprobEndpoint(reject_logprobs=reject) as endpoint:
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json")
        record = result.json()
        human = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--resume",
                    record["run"])
    assert result.returncode == 1 and (record["n"], record["errored"]) == (2, 0)
    assert record["logprobs"]["status"] == "unsupported"
    assert record["cases"][0]["first_divergence"]["logprobs"] == "unsupported"
    assert "flips:" not in record["sentence"]
    assert "logprobs: unsupported" in human.stdout


def test_logprobs_zero_asks_for_none(cli, tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl", {"c00": "a [gap:0.01]"}, chat={"c00"})
    with LogprobEndpoint() as endpoint:
        record = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                     "--logprobs", "0").json()
        assert all("logprobs" not in b and "top_logprobs" not in b for b in endpoint.bodies)
    assert record["logprobs"]["status"] == "off"
    assert "logprobs" not in (record["cases"][0]["first_divergence"] or {})


def test_bad_logprobs_and_tie_margin_are_one_line_exit_2(cli, tmp_path):
    cases = write_cases(tmp_path / "cases.jsonl", {"c00": "a"})
    for flag, value in (("--logprobs", "-1"), ("--tie-margin", "-0.5"), ("--until-width", "0"),
                        ("--max-n", "5")):
        result = cli("probe", "session", "--endpoint", "http://127.0.0.1:9/v1", "--cases", str(cases), flag, value)
        assert result.returncode == 2, (flag, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_pass_conditions_are_recorded_next_to_the_flip(cli, tmp_path):
    # c00 and c01 are twins (same prompt; the endpoint answers 4 on the prompt's first call only):
    # c00 flips, and its pass B (order c01, c00) went out right after its twin
    cases = write_cases(tmp_path / "cases.jsonl", {"c00": "same [gap:0.01]", "c01": "same [gap:0.01]"})
    with LogprobEndpoint() as endpoint:
        record = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json").json()
        text = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--resume",
                   record["run"]).stdout
    assert record["flipped"] == ["c00"]
    c00 = record["cases"][0]
    sent = {s["pass"]: s for s in c00["first_divergence"]["sent"]}
    assert sent[0] == {"pass": 0, "after_twin": False, "in_flight_with": 0}
    assert sent[1] == {"pass": 1, "after_twin": True, "in_flight_with": 0}
    assert "pass B sent after its twin" in " ".join(text.split())


# -- TARr@N / TARa@N --------------------------------------------------------------

def test_total_agreement_rates_over_every_output_of_a_case(cli, tmp_path, flip_endpoint):
    # [flip]: calls 2.. give another number; [flipnum]: other words, same number (Atil et al.: TARr
    # counts raw strings, TARa parsed answers)
    markers = {f"c{i:02d}": " [flip]" for i in (1, 2, 3, 4)} | {f"c{i:02d}": " [flipnum]" for i in (5, 6, 7, 8)}
    prompts = {f"c{i:02d}": f"question {i}{markers.get(f'c{i:02d}', '')}" for i in range(20)}
    cases = write_cases(tmp_path / "cases.jsonl", prompts)
    record = cli("probe", "session", "--endpoint", flip_endpoint.base_url, "--cases", str(cases), "--json",
                 "--repeats", "3", "--extract", "last-number").json()
    assert record["tar_n"] == 3
    assert record["tarr"] == pytest.approx(12 / 20)
    assert record["tara"] == pytest.approx(16 / 20)
    assert (record["m"], record["n"]) == (12, 20)  # beside m/n, at the output level the same count
    with FlipEndpoint() as fresh:
        without = cli("probe", "session", "--endpoint", fresh.base_url, "--cases", str(cases), "--json").json()
    assert (without["tar_n"], without["tara"]) == (2, None)
    assert without["tarr"] == pytest.approx(12 / 20)  # [flipnum] differs in raw output already at pass 2


# -- how many cases -----------------------------------------------------------------

def wilson_width_by_hand(p: float, n: int) -> float:
    z = 1.959963984540054
    return 2 * z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)


def test_probe_size_against_hand_computed_wilson_widths(cli):
    # at p = 1 the width is z^2 / (n + z^2): <= 0.10 from n >= 9 z^2 = 34.57, so 35
    for expect, width, n in ((0.95, 0.10, 83), (1.0, 0.10, 35), (0.5, 0.10, 381), (0.9, 0.2, 37)):
        result = cli("probe", "size", "--expect", str(expect), "--width", str(width), "--json")
        assert result.returncode == 0, result.stderr
        assert result.json() == {"n": n, "expect": expect, "width": width}
        assert wilson_width_by_hand(expect, n) <= width < wilson_width_by_hand(expect, n - 1)
    human = cli("probe", "size", "--expect", "0.95", "--width", "0.10")
    assert human.stdout.startswith("83 cases")
    for bad in (["--expect", "1.5", "--width", "0.1"], ["--expect", "0.9", "--width", "0"], ["--expect", "0.9"]):
        result = cli("probe", "size", *bad)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_until_width_stops_at_the_first_n_that_satisfies_it(cli, tmp_path, ledger_path):
    prompts = {f"c{i:02d}": f"question {i}" for i in range(40)}
    cases = write_cases(tmp_path / "cases.jsonl", prompts)
    with FlipEndpoint() as endpoint:
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                     "--until-width", "0.3")
        calls = endpoint.total_calls
        record = result.json()
        human = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases),
                    "--until-width", "0.3", "--resume", record["run"])
    # every case agrees: the width at n is z^2/(n+z^2), 0.324 at 8 and 0.299 at 9
    assert record["n"] == 9 and record["m"] == 9
    assert record["stopped"]["reason"] == "width" and record["stopped"]["early"] is True
    assert record["stopped"]["width"] == pytest.approx(3.841458820694124 / (9 + 3.841458820694124))
    assert calls == 18  # 9 cases on two passes, nothing more
    assert "stopped early at n = 9" in human.stdout


def test_until_width_that_hits_max_n_says_the_width_it_reached(cli, tmp_path):
    prompts = {f"c{i:02d}": f"question {i}" for i in range(40)}
    cases = write_cases(tmp_path / "cases.jsonl", prompts)
    with FlipEndpoint() as endpoint:
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                     "--until-width", "0.05", "--max-n", "12")
        text = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases),
                   "--until-width", "0.05", "--max-n", "12").stdout
    record = result.json()
    assert record["n"] == 12 and record["stopped"]["reason"] == "max-n"
    assert record["stopped"]["width"] == pytest.approx(3.841458820694124 / (12 + 3.841458820694124))
    assert "reached --max-n 12 before the interval was 0.05 wide: it is 0.242 wide at n = 12" in " ".join(text.split())


# -- hosts at one instant, retrying errored cases ------------------------------------

def test_hosts_passes_are_sent_at_the_same_instant(cli, tmp_path):
    prompts = {f"c{i:02d}": f"question {i}" for i in range(8)}
    cases = write_cases(tmp_path / "cases.jsonl", prompts)
    with FlipEndpoint(delay=0.1) as one, FlipEndpoint(delay=0.1) as two:
        result = cli("probe", "hosts", "--endpoint", one.base_url, "--endpoint", two.base_url, "--cases",
                     str(cases), "--json")
    record = result.json()
    assert result.returncode == 0, result.stderr
    a, b = (p["window"] for p in record["passes"])
    assert a["start_unix"] < b["end_unix"] and b["start_unix"] < a["end_unix"]  # the windows overlap
    # each took about 8 x 0.1 s; one after the other the probe would take twice that
    overlap = min(a["end_unix"], b["end_unix"]) - max(a["start_unix"], b["start_unix"])
    assert overlap > 0.5 * (a["end_unix"] - a["start_unix"])
    assert a["start"].endswith("Z")


def test_resume_retry_errored_retries_only_the_errored_cases(cli, tmp_path, ledger_path):
    prompts = {f"c{i:02d}": f"question {i}" for i in range(6)} | {"c06": "question 6 [err500x2]"}
    cases = write_cases(tmp_path / "cases.jsonl", prompts)
    with FlipEndpoint() as endpoint:
        first = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                    "--retries", "0").json()
        assert (first["n"], first["errored"], first["errored_cases"]) == (6, 1, ["c06"])
        calls_before = dict(endpoint.calls)
        again = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--json",
                    "--retries", "0", "--resume", "--retry-errored")
        calls_after = dict(endpoint.calls)
    record = again.json()
    assert again.returncode == 0, again.stderr
    assert record["run"] == first["run"]
    assert (record["n"], record["m"], record["errored"]) == (7, 7, 0)
    retried = {p for p in calls_after if calls_after[p] != calls_before.get(p)}
    assert retried == {"question 6 [err500x2]"}  # the completed cases were not sent again
    assert calls_after["question 6 [err500x2]"] == 4
    with Ledger.open(ledger_path) as ledger:
        assert ledger.child(first["run"], "0:c06").body["error"]  # the errored row is kept
        assert ledger.child(first["run"], "0:c06#retry1").body["error"] is None
    assert cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(cases), "--retry-errored"
               ).returncode == 2


def test_logprob_rows_round_trip_and_rows_written_before_the_numbers_were_packed_read_the_same():
    from execsys.probes.margin import margin_at, pack_logprobs, unpack_logprobs

    tokens = ["The", " answer", " 4"]
    top = [[["The", -0.01]], [[" answer", -0.02]], [[" 4", -0.5], [" 5", -0.5000021], [" 6", -6.0]]]
    packed = pack_logprobs(tokens, [-0.01, -0.02, -0.5], top)
    assert set(packed) == {"tokens", "values"} and all(isinstance(v, str) for v in packed.values())
    new = unpack_logprobs({"logprobs": packed})
    words, _ = json.loads(packed["tokens"])
    old = unpack_logprobs({"logprobs": {"tokens": packed["tokens"], "chosen": [-0.01, -0.02, -0.5],
                                        "top": [[lp for _, lp in alts] for alts in top]}})
    assert words == tokens and new == old and [list(map(list, alts)) for alts in new.top] == top
    other = unpack_logprobs({"logprobs": pack_logprobs(["The", " answer", " 5"], [-0.01, -0.02, -0.5],
                                                       [top[0], top[1], [[" 5", -0.5], [" 4", -0.5000011]]])})
    margin = margin_at(new, other, 2)
    assert margin is not None and margin["margin_a"] == pytest.approx(2.1e-6, abs=1e-15)
    # a packed string altered by redaction is treated as no logprobs kept, never a crash
    assert unpack_logprobs({"logprobs": {"tokens": packed["tokens"], "values": "[REDACTED]"}}).top is None
