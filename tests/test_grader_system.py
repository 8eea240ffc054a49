"""`execsys probe grader` observes its grader at the start and end and compares it with the lock.

A real grader command (a small Python script the test writes, declared as ``[grader] command`` and
trusted): pinned and probed unchanged it matches the lock and its agreement counts in scope; edited
after the pin, or editing itself mid-probe, the probe says so on stderr, records ``identity: null``
and scope lists it as ignored instead of stating its noise as the pinned grader's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from execsys import trust

GRADE = """\
import json, pathlib, sys
case = json.loads(sys.stdin.read())
calls = pathlib.Path("calls.log")
with calls.open("a") as log:
    log.write(case["id"] + "\\n")
EDIT_AFTER = None
if EDIT_AFTER is not None and len(calls.read_text().split()) == EDIT_AFTER:
    # the grader is changed while the probe runs (a deploy, a colleague's fix): its own file moves
    with open(__file__, "a") as me:
        me.write("# edited mid-probe\\n")
print("1" if case["output"].strip() == str(case["expected"]) else "0")
"""


def _project(tmp_path: Path, edit_after: int | None = None) -> tuple[Path, Path]:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "grade.py").write_text(GRADE.replace("EDIT_AFTER = None", f"EDIT_AFTER = {edit_after!r}"))
    (project / "execsys.toml").write_text(f'[grader]\ncommand = "{sys.executable} grade.py"\n')
    trust.trust(project / "execsys.toml")  # the test's own declaration: its author trusts it
    cases = project / "graded.jsonl"
    cases.write_text("".join(json.dumps({"id": cid, "prompt": f"q {cid}", "output": out, "expected": "4"}) + "\n"
                             for cid, out in {"a": "4", "b": "5", "c": " 4"}.items()))
    return project, cases


def test_an_unchanged_grader_matches_the_lock_and_counts_in_scope(cli, tmp_path: Path) -> None:
    project, cases = _project(tmp_path)
    assert cli("pin", cwd=project).returncode == 0
    result = cli("probe", "grader", "--cases", str(cases), "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert report["schema"] == "execsys.probe-grader/2"
    check = report["system_check"]
    assert (check["verdict"], check["differences"], check["sentence"]) == ("matches-lock", [], None)
    assert check["lock"] == report["identity"] is not None
    # the grader as pin records it, before the first grading and after the last
    assert [Path(f["path"]).name for f in check["at_start"]["command"]["files"]] == ["grade.py"]
    assert check["at_start"] == check["at_end"]
    assert "not the pinned one" not in result.stderr

    scope = cli("scope", "--json", cwd=project).json()
    assert scope["grader"]["records"] == [report["record_id"]]
    assert "Grader: verdicts agree 3/3" in scope["statement"]
    assert scope["ignored"]["another_system"] == []


def test_a_grader_edited_after_the_pin_differs_and_scope_ignores_it(cli, tmp_path: Path) -> None:
    project, cases = _project(tmp_path)
    assert cli("pin", cwd=project).returncode == 0
    lock_id = json.loads((project / "execsys.lock.json").read_text())["id"]
    with (project / "grade.py").open("a") as script:
        script.write("# a fix after the pin\n")
    result = cli("probe", "grader", "--cases", str(cases), "--json", cwd=project)
    assert result.returncode == 1, result.stderr  # every verdict repeated, but of another grader
    said = [line for line in result.stderr.splitlines() if "not the pinned one" in line]
    assert said == ["the grader answering this probe is not the pinned one: grader.command.files grade.py changed"]
    report = result.json()
    check = report["system_check"]
    assert check["verdict"] == "differs" and check["lock"] == lock_id
    assert {d["at"] for d in check["differences"]} == {"start", "end"}
    assert all(d["field"].startswith("observed.command.files[0]") for d in check["differences"])
    assert report["identity"] is None
    assert report["identity_reason"].startswith("the grader answering this probe is not the pinned one: "
                                                "grader.command.files grade.py changed")

    scope = cli("scope", "--json", cwd=project).json()
    assert scope["grader"] is None  # its 3/3 is not the pinned grader's noise
    assert "Grader:" not in scope["statement"]
    assert scope["ignored"]["another_system"] == [
        {"record": report["record_id"], "axis": "grader", "reason": check["sentence"]}]
    assert "1 grader probe record taken under this lock graded with another grader" in scope["statement"]
    again = cli("probe", "grader", "--cases", str(cases), cwd=project)
    assert again.returncode == 1
    assert "(identity " in again.stdout and "this grader probe counts toward no identity" in again.stdout
    human = cli("scope", cwd=project)
    assert f"ignored      grader {report['record_id']}: the grader answering this probe is not the pinned one" \
        in human.stdout


def test_a_grader_edited_mid_probe_differs_at_the_end(cli, tmp_path: Path) -> None:
    project, cases = _project(tmp_path, edit_after=3)  # 3 cases x 2 gradings: edited half-way
    assert cli("pin", cwd=project).returncode == 0
    result = cli("probe", "grader", "--cases", str(cases), "--json", cwd=project)
    assert result.returncode == 1, result.stderr
    assert (project / "calls.log").read_text().split() == ["a", "b", "c", "a", "b", "c"]
    report = result.json()
    check = report["system_check"]
    assert check["verdict"] == "differs"
    assert {d["at"] for d in check["differences"]} == {"end"}  # the start was the pinned grader
    assert check["at_start"]["command"]["files"][0]["digest"] != check["at_end"]["command"]["files"][0]["digest"]
    assert [o["verdict"] for o in check["observations"]] == ["matches-lock", "differs"]
    assert "the grader answering this probe is not the pinned one: grader.command.files grade.py changed" \
        in result.stderr
    assert report["identity"] is None
    assert cli("scope", "--json", cwd=project).json()["grader"] is None
