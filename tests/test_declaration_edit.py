"""Saving the declaration edits it in place: comments, order, unknown keys and other tables stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from execsys.tui.app import ExecsysApp
from textual.widgets import Input, Static

from execsys import declaration
from execsys.declaration_edit import edit_declaration_text
from tests.tui_helpers import settle, text_of

COMMENTED = """\
# our eval box -- keep this note
[model]
name = "llama-3-8b"  # the model under test
revision = "abc"
house_label = "team-a"   # not an execsys key: must survive

# how it is served
[runtime]
engine = "vllm"
endpoint = "http://127.0.0.1:8000/v1"

[doctor]
ports = [8000]
"""


def test_only_changed_keys_move() -> None:
    text = edit_declaration_text(COMMENTED, {
        "model": {"name": "llama-3-8b", "revision": "def"},
        "runtime": {"engine": "vllm"},  # endpoint cleared in the form: no longer declared
    })
    assert text.startswith("# our eval box -- keep this note\n")
    assert 'name = "llama-3-8b"  # the model under test' in text  # unchanged: byte for byte
    assert 'revision = "def"' in text and 'revision = "abc"' not in text
    assert 'house_label = "team-a"   # not an execsys key: must survive' in text
    assert "# how it is served" in text
    assert "endpoint" not in text
    assert "[doctor]\nports = [8000]" in text
    parsed = declaration.parse(text)
    assert parsed.get("model", "revision") == "def"
    assert parsed.get("runtime", "endpoint") is None


def test_a_new_table_is_appended_and_types_are_kept() -> None:
    text = edit_declaration_text(COMMENTED, {"budget": {"temperature": 0.0, "stop": ["\n", "END"], "seed": 7}})
    parsed = declaration.parse(text)
    assert parsed.get("budget", "stop") == ["\n", "END"]
    assert parsed.get("budget", "seed") == 7
    assert text.index("[doctor]") < text.index("[budget]")


def test_an_unchanged_form_changes_nothing() -> None:
    parsed = declaration.parse(COMMENTED)
    tables = {name: {k: v for k, v in parsed.component(name).items() if k in declaration.SCHEMA[name]}
              for name in ("model", "runtime")}
    assert edit_declaration_text(COMMENTED, tables) == COMMENTED


@pytest.mark.anyio
@pytest.mark.timeout(300)
async def test_tui_save_keeps_the_commented_file_execsys_init_wrote(
        tmp_path: Path, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    subprocess.run([sys.executable, "-m", "execsys", "init"], check=True, capture_output=True, timeout=120)
    config = tmp_path / "execsys.toml"
    before = config.read_text(encoding="utf-8").replace(
        "[workflow]\n", '[workflow]\nname = "single-turn"\nhouse_key = "kept"  # operator note\n', 1)
    config.write_text(before, encoding="utf-8")
    comments_before = [line for line in before.splitlines() if line.lstrip().startswith("#")]
    assert len(comments_before) > 20  # init writes a commented file: the test needs one

    app = ExecsysApp(autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        screen = app.screen
        await settle(pilot, lambda: "observed:" in text_of(screen.query_one("#identity-status", Static)))
        screen.query_one("#f-model-name", Input).value = "saved-from-the-form"
        await pilot.press("ctrl+s")
        await settle(pilot, lambda: "saved-from-the-form" in config.read_text(encoding="utf-8"))

    after = config.read_text(encoding="utf-8")
    assert [line for line in after.splitlines() if line.lstrip().startswith("#")] == comments_before
    assert 'house_key = "kept"  # operator note' in after
    assert declaration.parse(after).get("model", "name") == "saved-from-the-form"
    # nothing but the edited key differs
    import difflib

    moved = [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:2] in ("+ ", "- ")]
    assert moved == ['+ name = "saved-from-the-form"']


