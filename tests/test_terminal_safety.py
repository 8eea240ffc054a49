"""Strings execsys did not write reach the terminal escaped, never obeyed (issue 28, terminal injection).

A model id, a host name, a file name or an engine's version is someone else's text: an OSC sequence in
it sets the terminal's title, a newline forges an output line, a right-to-left override shows it
backwards. Every case here puts the hostile string where a user would meet it, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execsys.termsafe import neutralise, shown

OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
RLO = "\u202e"


@pytest.mark.parametrize(("raw", "visible"), [
    ("tiny", "tiny"),
    ("ünïcode ✓ model", "ünïcode ✓ model"),  # printable text is never touched
    (f"m{OSC_TITLE}", "m\\x1b]0;pwned\\x07"),
    ("a\n✓ same system", "a\\n✓ same system"),
    ("tab\tcr\rnul\x00del\x7fc1\x9b", "tab\\tcr\\rnul\\x00del\\x7fc1\\x9b"),
    (f"gpu{RLO}1", "gpu\\u202e1"),
    ("iso\u2066x\u2069 ls\u2028ps\u2029", "iso\\u2066x\\u2069 ls\\u2028ps\\u2029"),
], ids=["plain", "unicode", "osc-title", "newline", "c0-c1-del", "rlo", "isolates-separators"])
def test_shown_keeps_a_value_on_its_line_with_every_control_visible(raw: str, visible: str) -> None:
    assert shown(raw) == visible
    assert shown(123) == "123"


def test_neutralise_keeps_the_output_layer_s_own_sequences_and_escapes_the_rest() -> None:
    ours = "\x1b[1;32m✓\x1b[0m ok\n\x1b[?25l\x1b[2K\x1b[1A\r\tdone"
    assert neutralise(ours) == ours  # colour, cursor moves, line structure: what rich writes itself
    assert neutralise(f"model {OSC_TITLE}{CLEAR}\n") == "model \\x1b]0;pwned\\x07\\x1b[2J\n"
    assert neutralise(f"\x1b[31mred{RLO}\x1b[0m") == "\x1b[31mred\\u202e\x1b[0m"


def test_fleet_host_names_cannot_forge_a_line_or_drive_the_terminal(cli, tmp_path: Path) -> None:
    from tests.test_fleet import doctor_json, write

    hostile = f"gpu-1\nverdict    the fleet agrees{OSC_TITLE}"
    reports = [write(tmp_path, "a.json", doctor_json(hostile, failing="clock-skew")),
               write(tmp_path, "b.json", doctor_json(f"gpu{RLO}2", failing="port-collisions"))]
    done = cli("fleet", *reports)
    assert done.returncode == 1, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and RLO not in done.stdout
    lines = done.stdout.splitlines()
    assert lines.count("verdict    the fleet agrees") == 0  # the forged line is not a line of its own
    assert lines[-1] == "verdict    the fleet disagrees"
    assert any("gpu-1\\nverdict    the fleet agrees\\x1b]0;pwned\\x07" in line for line in lines)
    assert any("gpu\\u202e2" in line for line in lines)


def test_an_error_line_naming_a_hostile_file_stays_one_visible_line(cli, tmp_path: Path) -> None:
    name = f"lock{OSC_TITLE}\n✓ same system.json"
    done = cli("verify", "--lock", str(tmp_path / name), cwd=tmp_path)
    assert done.returncode == 2
    line, = done.stderr.splitlines()
    assert line.startswith("execsys verify: error:") and "\x1b" not in line and "\x07" not in line
    assert "lock\\x1b]0;pwned\\x07" in line


def test_ledger_list_shows_a_hostile_summary_escaped(cli, ledger_path: Path) -> None:
    from execsys.ledger import Ledger

    with Ledger.open(ledger_path) as ledger:
        ledger.append("doctor", {"schema": "execsys.doctor/1", "host": {"hostname": f"h{OSC_TITLE}"},
                                 "hazards": [], "verdict": f"clean\n{CLEAR}"})
    done = cli("ledger", "list")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    json.dumps(done.stdout)


@pytest.mark.integration
def test_pin_shows_a_hostile_model_id_from_a_real_server_escaped(cli, tmp_path: Path, tiny_gguf: Path) -> None:
    """llama.cpp serves whatever --alias says as the model id of /v1/models: a real engine's hostile answer."""
    from tests.fixtures.llama import start_llama_server

    server = start_llama_server(tiny_gguf, alias=f"tiny{OSC_TITLE}{RLO}")
    try:
        (tmp_path / "execsys.toml").write_text(
            f'[artifact]\npath = "{tiny_gguf}"\n[runtime]\nengine = "llama-cpp-python"\nendpoint = "{server.base_url}"\n')
        done = cli("pin", cwd=tmp_path)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert "\x1b]" not in done.stdout and "\x07" not in done.stdout and RLO not in done.stdout
    assert "tiny\\x1b]0;pwned\\x07\\u202e" in done.stdout
