"""Each step's styles stay on its own screen: visiting one step never changes another's layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from execsys.tui.app import ExecsysApp
from textual.widgets import Static

from tests.tui_helpers import settle

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


def _label_widths(app: ExecsysApp) -> set[int]:
    return {label.size.width for label in app.screen.query(".field-name").results(Static) if label.size.width}


async def test_identity_labels_keep_their_width_after_visiting_scope(
        tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f2")
        await settle(pilot, lambda: bool(_label_widths(app)))
        before = _label_widths(app)
        assert before == {19}, before  # identity.tcss: .field-name is 19 wide
        await pilot.press("f4")
        await pilot.pause()
        await pilot.press("f2")
        await settle(pilot, lambda: bool(_label_widths(app)))
        assert _label_widths(app) == before


async def test_digits_typed_into_a_field_stay_in_it(tmp_path: Path, ledger_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import Input

    monkeypatch.chdir(tmp_path)
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")  # no field has the focus yet: a bare digit switches steps
        assert app.current_mode == "identity"
        field = app.screen.query_one("#f-budget-max_tokens", Input)
        field.focus()
        field.value = ""
        await pilot.pause()
        await pilot.press("4", "1", "3")
        await pilot.pause()
        assert app.current_mode == "identity"
        assert field.value == "413"
        await pilot.press("f4")  # function keys always switch
        assert app.current_mode == "scope"
        await pilot.press("alt+2")
        assert app.current_mode == "identity"


async def test_question_mark_opens_help_for_the_step_and_esc_closes_it(
        tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from execsys.tui.screens.help import HelpScreen

    from tests.tui_helpers import text_of

    monkeypatch.chdir(tmp_path)
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f1")
        await pilot.press("question_mark")
        await pilot.pause()
        doctor_help = text_of(app.screen.query_one("#help-text", Static))
        assert "Re-run all" in doctor_help  # the step's own keys, read from its live bindings
        await pilot.press("escape")
        await pilot.press("f3")
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = text_of(app.screen.query_one("#help-text", Static))
        assert text.startswith("Step 3, Probes")
        for symbol in "✓!✗–?▸●○◇≠=":
            assert f"  {symbol}  " in text
        assert "Esc closes this help." in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        assert app.current_mode == "probes"


@pytest.mark.parametrize("step", ["f1", "f3", "f4"])
async def test_the_palette_keys_panel_closes_with_esc(
        tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """The palette's Keys entry opens Textual's keys panel; Esc closes it (and does nothing else:
    on the Probes step Esc also stops a probe, which must not be what the first Esc does)."""
    from textual.widgets import HelpPanel

    monkeypatch.chdir(tmp_path)
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(step)
        await pilot.pause()
        mode = app.current_mode
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Keys", "enter")
        await settle(pilot, lambda: bool(app.screen.query(HelpPanel)))
        await pilot.press("escape")
        await pilot.pause()
        assert not app.screen.query(HelpPanel)
        assert app.current_mode == mode
        await settle(pilot, lambda: True)
