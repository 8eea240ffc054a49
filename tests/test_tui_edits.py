"""A TUI that never loses an edit (issue 30): quitting asks, Esc leaves a field, keys answer, the status is current.

Every test drives the real app with Pilot in the screenshots' demo project (a real declaration, a
real lock, a temporary ledger) or an empty one, and reads what the screen shows as plain text: what
an operator reads under NO_COLOR or on a monochrome terminal.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from execsys.doctor.registry import HAZARDS
from execsys.tui import screenshots
from execsys.tui.app import ExecsysApp
from execsys.tui.screens import dialogs
from execsys.tui.screens.help import HelpScreen
from execsys.tui.widgets.divergence import marked
from execsys.tui.widgets.fields import FieldLabel
from textual.widgets import DataTable, Input, OptionList, Select, Static

from tests.tui_helpers import header_state, settle, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

REPORT = Path(__file__).parent / "fixtures" / "tui_doctor_report.json"
SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])


async def identity_ready(pilot) -> None:
    app = pilot.app
    await pilot.press("f2")
    await settle(pilot, lambda: "observed:" in text_of(app.screen.query_one("#identity-status", Static)))


async def type_into(pilot, field_id: str, text: str) -> Input:
    """Show the field's component, focus the field and type ``text`` at its end, key by key."""
    screen = pilot.app.screen
    component = field_id.split("-")[1]
    options = screen.query_one("#components", OptionList)
    options.highlighted = [options.get_option_at_index(i).id for i in range(options.option_count)].index(component)
    await pilot.pause()
    field = screen.query_one(f"#{field_id}", Input)
    field.focus()
    await pilot.pause()
    await pilot.press(*text)
    await pilot.pause()
    return field


def status(app: ExecsysApp) -> str:
    return text_of(app.screen.query_one("#identity-status", Static))


# -- ctrl+q: never an edit lost unasked ----------------------------------------------------------------


async def test_ctrl_q_with_nothing_unsaved_quits_at_once(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)  # the form is filled from the declaration: nothing is unsaved
        assert app.unsaved_edits() is None
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert not isinstance(app.screen, dialogs.QuitDialog)
        assert app.return_code == 0


async def test_an_edit_typed_back_to_what_is_saved_is_not_unsaved(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        field = await type_into(pilot, "f-budget-temperature", "0")  # 0.00 is the declared 0.0
        assert field.value == "0.00"
        assert app.unsaved_edits() is None
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert app.return_code == 0


async def test_ctrl_q_with_an_unsaved_edit_asks_and_stay_keeps_it(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        field = await type_into(pilot, "f-model-name", "-v2")
        await pilot.press("f4")  # the edit is on another step now: still unsaved, still asked about
        await pilot.pause()
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert isinstance(app.screen, dialogs.QuitDialog), "quit at once with an unsaved edit"
        assert app.return_code is None
        assert "model.name" in text_of(app.screen.query_one("#quit-fields", Static))
        await pilot.press("ctrl+q")  # asked once, not a dialog on a dialog, and not quitting either
        await pilot.pause()
        assert len(app.screen_stack) == 2 and app.return_code is None
        await pilot.press("escape")  # stay
        await pilot.pause()
        assert not isinstance(app.screen, dialogs.QuitDialog) and app.return_code is None
        assert field.value == "tiny-llama-eval-v2"


async def test_quit_dialog_discard_quits_without_writing(demo: Path) -> None:
    before = (demo / "execsys.toml").read_text()
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        await type_into(pilot, "f-model-name", "-v2")
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert isinstance(app.screen, dialogs.QuitDialog)
        await pilot.press("d")
        await pilot.pause()
        assert app.return_code == 0
    assert (demo / "execsys.toml").read_text() == before


async def test_quit_dialog_save_writes_the_edit_then_quits(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        await type_into(pilot, "f-model-name", "-v2")
        await pilot.press("ctrl+q")
        await pilot.pause()
        await pilot.press("s")
        await settle(pilot, lambda: app.return_code is not None, timeout=60)
        assert app.return_code == 0
    text = (demo / "execsys.toml").read_text()
    assert 'name = "tiny-llama-eval-v2"' in text and "[probe]" in text  # the rest of the file kept


@pytest.mark.expects_error_notification
async def test_quit_dialog_save_that_is_rejected_stays_and_says_why(demo: Path) -> None:
    before = (demo / "execsys.toml").read_text()
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        await type_into(pilot, "f-retrieval-enabled", "maybe")
        await pilot.press("f1")
        await pilot.pause()
        await pilot.press("ctrl+q")
        await pilot.pause()
        await pilot.press("s")
        await settle(pilot, lambda: True)
        assert app.return_code is None  # nothing was written: the edit is still on screen
        assert app.current_mode == "identity"  # shown where the status line says why
        assert status(app).startswith("✗ not saved: retrieval.enabled: must be true or false"), status(app)
    assert (demo / "execsys.toml").read_text() == before


# -- the status line says what happened last -----------------------------------------------------------


@pytest.mark.expects_error_notification
async def test_a_rejected_save_or_pin_replaces_the_last_saved_line(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot, lambda: status(app).startswith("✓ saved"))
        await type_into(pilot, "f-retrieval-enabled", "maybe")
        await pilot.press("ctrl+s")
        await settle(pilot, lambda: True)
        assert status(app).startswith("✗ not saved: retrieval.enabled: must be true or false"), status(app)
        assert "✓ saved" not in status(app)
        await pilot.press("ctrl+l")
        await settle(pilot, lambda: True)
        assert status(app).startswith("✗ not pinned: retrieval.enabled"), status(app)


# -- Esc leaves a field; F1-F4 and ? answer wherever they should -------------------------------------------


async def test_on_identity_esc_leaves_the_field_and_question_mark_types_or_helps(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        screen = app.screen
        field = await type_into(pilot, "f-model-family", "?")
        assert field.value == "llama?" and not isinstance(app.screen, HelpScreen)  # typed, no help over typing
        await pilot.press("escape")
        await pilot.pause()
        assert app.focused is screen.query_one("#components", OptionList)  # the step has the focus, not nobody
        assert app.current_mode == "identity" and field.value == "llama?"
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen


async def test_on_probes_esc_leaves_the_field_and_question_mark_types_or_helps(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        await pilot.pause()
        screen = app.screen
        field = screen.query_one("#cases", Input)
        field.focus()
        await pilot.pause()
        await pilot.press("end", "question_mark")
        await pilot.pause()
        assert field.value == "cases.jsonl?" and app.screen is screen
        await pilot.press("escape")
        await pilot.pause()
        assert app.focused is not None and not isinstance(app.focused, Input)
        assert app.focused is screen.query_one("#probe-form")
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f2")  # over the help, a step key closes it and switches
        await pilot.pause()
        assert app.current_mode == "identity" and not isinstance(app.screen, HelpScreen)


async def test_question_mark_opens_help_from_lists_tables_and_selects(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for step, selector, kind in (("f1", "#hazards", DataTable), ("f2", "#components", OptionList),
                                     ("f3", "#axis", Select), ("f3", "#flipped", OptionList)):
            await pilot.press(step)
            await pilot.pause()
            app.screen.query_one(selector, kind).focus()
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen), f"? with the focus on {selector}"
            await pilot.press("question_mark")  # ? closes it again
            await pilot.pause()
            assert not isinstance(app.screen, HelpScreen)
        axis = app.screen.query_one("#axis", Select)  # the open list of a select is no text field either
        axis.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert axis.expanded
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen), "? with a select's list open"


async def test_function_keys_switch_steps_wherever_the_focus_is(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        places = (("f2", "#f-model-name", Input), ("f2", "#components", OptionList), ("f3", "#cases", Input),
                  ("f3", "#axis", Select), ("f4", "#seed", Input), ("f1", "#hazards", DataTable))
        for step, selector, kind in places:
            await pilot.press(step)
            await pilot.pause()
            app.screen.query_one(selector, kind).focus()
            await pilot.pause()
            for key, mode in (("f1", "doctor"), ("f4", "scope"), ("f3", "probes"), ("f2", "identity")):
                where = app.current_mode
                await pilot.press(key)
                await pilot.pause()
                assert app.current_mode == mode, f"{key} from {selector} on {where}"
                await pilot.press(step)  # back to the place, the focus where it was
                await pilot.pause()
                assert app.focused is app.screen.query_one(selector, kind)


async def test_integer_and_number_fields_refuse_other_characters_as_typed(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await identity_ready(pilot)
        seed = await type_into(pilot, "f-budget-seed", "1x2.")
        assert seed.value == "712"  # declared 7, then 1 and 2; x and . refused
        gpus = await type_into(pilot, "f-hardware-gpu_count", "4a")
        assert gpus.value == "4"
        temperature = await type_into(pilot, "f-budget-temperature", "5z")
        assert temperature.value == "0.05"
        await pilot.press("f3")
        await pilot.pause()
        n = app.screen.query_one("#n", Input)
        n.value = ""
        n.focus()
        await pilot.press(*"2o0")
        await pilot.pause()
        assert n.value == "20"


# -- the header and the summary count alike; the help lists the registry --------------------------------------


async def test_header_counts_and_names_what_blocks_as_the_summary_does(project: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*"ssh://nobody@127.0.0.1:1")  # refuses at once: every check on it is an error
        await pilot.press("enter")
        await settle(pilot, lambda: app.doctor.finished_once and not app.doctor.running)
        summary = text_of(app.screen.query_one("#doctor-status", Static))
        header = header_state(app)
        in_summary = dict((status, int(n)) for n, status in re.findall(r"(\d+) (fail|error)\b", summary))
        in_header = dict((status, int(n)) for n, status in re.findall(r"(\d+) (fail|error)\b", header))
        assert in_summary.get("error", 0) >= len(HAZARDS), summary  # the unreachable host's rows
        assert in_header == in_summary, (header, summary)
        assert "failing" not in header


async def test_doctor_help_lists_exactly_the_registrys_hazards(project: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        shown = text_of(app.screen.query_one("#help-text", Static))
        purpose = shown.split("Symbols:")[0]
        assert f"these {len(HAZARDS)} " in purpose
        listed = [line.split()[0] for line in purpose.splitlines()[1:] if line.startswith("  ")]
        assert listed == [hazard.id for hazard in HAZARDS]
        assert "ten hazards" not in purpose  # a number written apart from the list drifts from it


# -- marks that are not colour alone ----------------------------------------------------------------------


async def test_the_doctor_cell_cursor_shows_without_colour(demo: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await screenshots.doctor_scene(pilot, screenshots.recorded_results(REPORT))
        table = app.screen.query_one("#hazards", DataTable)
        table.move_cursor(row=2, column=1)
        await pilot.pause()
        labels = [column.label.plain for column in table.columns.values()]
        assert labels[1].startswith("▸ local") and not labels[0].startswith("▸")  # the column, in text
        assert table.get_cell_at((2, 0)).plain.startswith("▸ ")  # the row, in text
        cursor = table.get_component_rich_style("datatable--cursor")
        assert cursor.reverse and cursor.bold  # the cell itself: reverse and bold survive NO_COLOR
        drawn = [segment for segment in table.render_line(1 + 2) if "cannot run" in segment.text]  # header, rows
        assert drawn and all(segment.style is not None and segment.style.reverse for segment in drawn)
        others = [segment for segment in table.render_line(1 + 3) if segment.text.strip()]
        assert others and not any(segment.style is not None and segment.style.reverse for segment in others)
        table.move_cursor(row=2, column=0)
        await pilot.pause()
        labels = [column.label.plain for column in table.columns.values()]
        assert labels[0].startswith("▸ Hazard") and not labels[1].startswith("▸")


def test_the_first_divergence_is_marked_in_the_text() -> None:
    a, b = "The answer is 3.", "The answer is three."
    assert marked(a, 14).plain == "The answer is ▼3."
    assert marked(b, 14).plain == "The answer is ▼three."
    assert marked("same", None).plain == "same"
    assert marked("short", 5).plain == "short▼⟂(output ends here)"


@SIZES
async def test_form_labels_keep_a_blank_cell_before_their_values(demo: Path, size: tuple[int, int]) -> None:
    def crowded() -> list[str]:
        found = []
        for label in app.screen.query(FieldLabel).results(FieldLabel):
            if not label.region.width:
                continue  # on a hidden panel
            longest = len(FieldLabel._text(label.text, True))
            if longest >= label.region.width:
                found.append(f"{label.text} ({longest} in {label.region.width})")
        return found

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=size) as pilot:
        await identity_ready(pilot)
        options = app.screen.query_one("#components", OptionList)
        for index in range(options.option_count):
            options.highlighted = index
            await pilot.pause()
            assert crowded() == [], options.get_option_at_index(index).id
        await pilot.press("f4")
        await settle(pilot, lambda: True)
        assert crowded() == []


async def test_in_a_dialog_esc_in_its_field_still_cancels_the_dialog(project: Path) -> None:
    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, dialogs.AddHostDialog)
        assert isinstance(app.focused, Input)
        await pilot.press(*"gpu?1")  # ? is typed into the dialog's field, no help over it
        await pilot.pause()
        assert app.focused.value == "gpu?1" and isinstance(app.screen, dialogs.AddHostDialog)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, dialogs.AddHostDialog)
        assert app.doctor.hosts == ["local"]  # cancelled, nothing added
