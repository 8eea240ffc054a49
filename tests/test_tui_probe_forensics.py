"""The TUI's side-by-side view says why a case flipped: both passes' top-K at the first divergent
token, the near-tie verdict and how the passes were sent, from the real engine against an endpoint
whose logprobs are known exactly (real HTTP on loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from execsys.tui.app import ExecsysApp
from textual.widgets import Input, OptionList

from execsys.ledger import Ledger
from tests.test_probe_forensics import LogprobEndpoint
from tests.tui_helpers import settle, text_of, write_cases

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


async def test_side_by_side_shows_both_top_k_and_the_verdict(project: Path, ledger_path: Path) -> None:
    write_cases(project / "cases.jsonl", [("c0", "steady"), ("c1", "near [gap:0.002]"), ("c2", "far [gap:3.9]")])
    with LogprobEndpoint() as endpoint:
        app = ExecsysApp(autostart=False)
        async with app.run_test(size=(140, 50)) as pilot:
            await pilot.press("3")
            screen = app.screen
            screen.query_one("#endpoint", Input).value = endpoint.base_url
            screen.query_one("#cases", Input).value = "cases.jsonl"
            await pilot.pause()
            await pilot.press("ctrl+g", "y")
            screen = app.screen

            def finished() -> bool:
                with Ledger.open(ledger_path) as ledger:
                    return not screen.running and bool(ledger.find(kind="probe"))

            await settle(pilot, finished)
            flipped = screen.query_one("#flipped", OptionList)
            assert [flipped.get_option_at_index(i).id for i in range(flipped.option_count)] == ["c1", "c2"]
            flipped.highlighted = 0
            await pilot.pause()
            near = " ".join(text_of(screen.query_one("#outputs")).split())
            assert "why: near-tie at token 2 (margin 0.002 nats, near-tie at most 0.1)" in near
            assert "pass A top-K" in near and "pass B top-K" in near
            assert "' 4' -0.5000" in near and "' 5' -0.5020" in near  # pass A's distribution
            assert "' 4' -0.5010" in near  # pass B's: the same two tokens, the other way round
            flipped.highlighted = 1
            await pilot.pause()
            far = " ".join(text_of(screen.query_one("#outputs")).split())
            assert "why: not a near-tie at token 2 (margin 3.9 nats" in far
            status = " ".join(text_of(screen.query_one("#probe-status")).split())
            assert "2 flips: 1 at near-tie (median margin 0.002), 1 not a near-tie (c2, 3.9 nats)" in status
