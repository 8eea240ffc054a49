"""Running the registered paired plan inside the TUI (issue 13): ctrl+n on the Scope step.

The plan is registered on the screen (ctrl+g), then run through the same engine `execsys plan
run` uses, against a real llama.cpp server on loopback (both arms) and, to stop one half-way,
the fake endpoint with a delay. What is asserted is what the operator reads on the screen and
what the ledger and the executed log hold afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from execsys.tui.app import ExecsysApp
from textual.widgets import Input, ProgressBar, Static

from execsys.ledger import Ledger
from execsys.plan import read_log
from tests.fixtures.llama import FlipEndpoint, LlamaServer
from tests.tui_helpers import settle, text_of, while_running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


def write_cases(path: Path, expected: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": cid, "prompt": f"Question {cid}?", "expected": answer,
                                        "max_tokens": 8}) + "\n" for cid, answer in expected.items()))
    return path


def llama_answers(server: LlamaServer, ids: list[str]) -> dict[str, str]:
    from execsys.probes.cases import Case
    from execsys.probes.client import EndpointClient

    with EndpointClient(server.base_url, timeout=60) as client:
        model = client.resolve_model(None)
        return {cid: client.complete(Case(id=cid, prompt=f"Question {cid}?", max_tokens=8),
                                     {"temperature": 0, "max_tokens": 32, "model": model}).text.strip()
                for cid in ids}


async def register(pilot, cases: Path) -> str:
    """Register an A/B plan from ``cases`` on the Scope step (overriding the unrun doctor's gate)."""
    app = pilot.app
    await settle(pilot, lambda: app.identity_id is not None)
    await pilot.press("f4")
    await pilot.pause()
    screen = app.screen
    screen.query_one("#arm-a", Input).value = "A"
    screen.query_one("#arm-b", Input).value = "B"
    screen.query_one("#plan-cases", Input).value = str(cases)
    await pilot.press("ctrl+o", "y")
    await pilot.pause()
    assert "Run plan" not in offered(screen)  # nothing registered yet
    await pilot.press("ctrl+g")
    await settle(pilot, lambda: "registered" in text_of(screen.query_one("#plan-result", Static)))
    assert "ctrl+n" in text_of(screen.query_one("#plan-result", Static))
    assert "Run plan" in offered(screen) and "Stop plan run" not in offered(screen)
    return text_of(screen.query_one("#plan-result", Static))


def screen_text(app: ExecsysApp) -> str:
    """Every cell of the terminal as plain text, one line per row: exactly what fits on screen."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def offered(screen) -> set[str]:
    """The keys the footer and the help show on this screen now."""
    return {str(active.binding.description) for active in screen.active_bindings.values()}


def plan_runs(ledger_path: Path) -> list:
    with Ledger.open(ledger_path) as ledger:
        return ledger.find(kind="plan-run")


async def test_ctrl_n_runs_the_registered_plan_against_a_real_server(
        demo: Path, ledger_path: Path, llama_server: LlamaServer) -> None:
    ids = [f"c{i}" for i in range(6)]
    answers = llama_answers(llama_server, ids)
    # right on c0-c2, wrong on c3-c5 (for both arms: they are the same server)
    expected = {cid: (answers[cid] if i < 3 else answers[cid] + " (not this)") for i, cid in enumerate(ids)}
    cases = write_cases(demo / "paired.jsonl", expected)
    app = ExecsysApp(autostart=False, ledger=ledger_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await register(pilot, cases)
        screen = app.screen
        await pilot.press("ctrl+n")  # no endpoints yet: says what is missing, runs nothing
        await pilot.pause()
        assert not screen.plan_running and not plan_runs(ledger_path)
        screen.query_one("#url-a", Input).value = llama_server.base_url
        screen.query_one("#url-b", Input).value = llama_server.base_url
        await pilot.press("ctrl+n")
        result = screen.query_one("#plan-run-result", Static)
        await settle(pilot, lambda: bool(text_of(result)))
        shown = text_of(result)
        await pilot.pause()
        on_screen = screen_text(app)  # at 80x24 the outcome is scrolled into view, label to sentence
        assert "✓ causal" in on_screen and "exact McNemar p" in on_screen, on_screen
        bar = screen.query_one("#plan-run-progress", ProgressBar)
        assert (bar.progress, bar.total) == (12, 12)  # every step of the registered sequence, both arms
        assert "finished: causal" in text_of(screen.query_one("#plan-run-status", Static))
        assert shown.startswith("✓ causal"), shown
        assert "A 0.500 vs B 0.500 over 6 paired cases" in " ".join(shown.split())
        for name in ("registered-first", "order", "window", "identity", "pinned-identity"):
            assert f"✓ {name}" in shown
        runs = plan_runs(ledger_path)
        assert len(runs) == 1 and f"recorded {runs[0].id}" in shown
        body = runs[0].body
        assert body["label"] == "causal" and not body["cancelled"] and body["identity"] == app.identity_id
        assert body["paired"]["n"] == 6 and body["arms"]["A"]["correct"] == 3
        with Ledger.open(ledger_path) as ledger:  # the override that let it through, under the run
            overrides = ledger.find(kind="gate-override", parent=runs[0].id)
        assert len(overrides) == 1 and overrides[0].body["for"] == "plan-run"
        _, events = read_log(demo / "plan.json.executed.jsonl")
        assert sum(e["event"] == "case" for e in events) == 12 and events[-1]["event"] == "window-end"


async def test_esc_stops_a_plan_run_after_the_case_in_hand_and_says_cancelled(
        demo: Path, ledger_path: Path) -> None:
    ids = [f"c{i}" for i in range(10)]
    expected = {cid: FlipEndpoint.answer(f"Question {cid}?", 1) for cid in ids}
    cases = write_cases(demo / "paired.jsonl", expected)
    with FlipEndpoint(delay=0.3) as endpoint:
        app = ExecsysApp(autostart=False, ledger=ledger_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await register(pilot, cases)
            screen = app.screen
            screen.query_one("#url-a", Input).value = endpoint.base_url
            screen.query_one("#url-b", Input).value = endpoint.base_url
            await pilot.press("ctrl+n")
            bar = screen.query_one("#plan-run-progress", ProgressBar)
            await while_running(pilot, lambda: bar.progress >= 3)
            assert "Stop plan run" in offered(screen) and "Run plan" not in offered(screen)
            await pilot.press("escape")
            result = screen.query_one("#plan-run-result", Static)
            await settle(pilot, lambda: bool(text_of(result)))
            assert text_of(screen.query_one("#plan-run-status", Static)).startswith("cancelled")
            shown = text_of(result)
            assert shown.startswith("– cancelled after"), shown
            assert "✗ complete" in shown
            assert "Stop plan run" not in offered(screen)
            assert not screen.query_one("#run-plan").disabled  # it can be run again
    runs = plan_runs(ledger_path)
    assert len(runs) == 1
    body = runs[0].body
    assert body["cancelled"] and body["label"] == "descriptive"
    # nothing half-written: the log reads back whole, closes its window, and every case it started
    # ran on both arms (the run stops between cases, never between the two arms of one)
    _, events = read_log(demo / "plan.json.executed.jsonl")
    case_events = [e for e in events if e["event"] == "case"]
    assert events[-1]["event"] == "window-end"
    assert 4 <= len(case_events) < 20 and len(case_events) % 2 == 0
    assert body["paired"]["n"] == len(case_events) // 2
    assert f"cancelled after {len(case_events) // 2} of 10 cases" in shown


@pytest.mark.expects_error_notification
async def test_a_plan_run_the_engine_refuses_keeps_its_reason_in_the_pane(demo: Path, ledger_path: Path) -> None:
    """Cases without an expected answer: refused before any request, the reason stays on the screen."""
    app = ExecsysApp(autostart=False, ledger=ledger_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await register(pilot, demo / "cases.jsonl")  # the demo's probe cases: no "expected"
        screen = app.screen
        screen.query_one("#url-a", Input).value = "http://127.0.0.1:9/v1"
        screen.query_one("#url-b", Input).value = "http://127.0.0.1:9/v1"
        await pilot.press("ctrl+n")
        status = screen.query_one("#plan-run-status", Static)
        await settle(pilot, lambda: text_of(status).startswith("✗"))
        assert 'the plan run stopped: case' in text_of(status) and 'has no "expected" answer' in text_of(status)
        assert not screen.plan_running and "Run plan" in offered(screen)
        assert text_of(screen.query_one("#plan-run-result", Static)) == ""
    assert not plan_runs(ledger_path)
