"""scripts/mutation_report.py: the score a maintainer reads, and what a re-check keeps.

A re-check runs only the survivors without a reason; mutmut then resets every other mutant to "not
checked", and the merged results must keep their earlier verdicts, or the score silently drops them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "mutation_report.py"


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_a_recheck_keeps_the_verdicts_of_the_mutants_it_did_not_run(tmp_path: Path) -> None:
    before = tmp_path / "before.txt"
    before.write_text("    m.x_f__mutmut_1: killed\n    m.x_f__mutmut_2: survived\n    m.x_f__mutmut_3: survived\n")
    after = tmp_path / "after.txt"
    after.write_text("    m.x_f__mutmut_1: not checked\n    m.x_f__mutmut_2: killed\n    m.x_f__mutmut_3: not checked\n")
    names = tmp_path / "names.txt"
    names.write_text("m.x_f__mutmut_2\n")
    merged = _report("--merge", str(before), str(after), str(names))
    assert merged.returncode == 0
    assert merged.stdout == "    m.x_f__mutmut_1: killed\n    m.x_f__mutmut_2: killed\n    m.x_f__mutmut_3: survived\n"


def test_a_survivor_without_a_reason_fails_and_an_equivalent_one_counts_as_killed(tmp_path: Path) -> None:
    results = tmp_path / "results.txt"
    results.write_text("".join(f"    m.x_f__mutmut_{i}: killed\n" for i in range(1, 9))
                       + "    m.x_f__mutmut_9: survived\n    m.x_f__mutmut_10: survived\n")
    reasons = tmp_path / "equivalent.tsv"
    reasons.write_text("# name\twhy\nm.x_f__mutmut_9\tsame value either way\n")
    report = _report(str(results), str(reasons))
    assert report.returncode == 1
    assert "m.x_f__mutmut_10: NOT KILLED: add a test" in report.stdout
    assert "1 survivor(s) without a reason" in report.stdout
    reasons.write_text("m.x_f__mutmut_9\tsame value either way\nm.x_f__mutmut_10\tleft: needs a GPU\n")
    report = _report(str(results), str(reasons))
    # 8 killed + 1 equivalent of 10 covered: 90%; the left: one still counts as surviving
    assert report.returncode == 0 and "90%" in report.stdout.splitlines()[1]
    assert "m.x_f__mutmut_10: LEFT -- needs a GPU" in report.stdout


def test_a_package_row_counts_only_its_own_equivalent_survivors(tmp_path: Path) -> None:
    # the package's own mutants (p.x_...) share their name's prefix with a submodule's (p.sub.x_...)
    results = tmp_path / "results.txt"
    results.write_text("    p.x_f__mutmut_1: killed\n    p.x_f__mutmut_2: killed\n"
                       "    p.sub.x_g__mutmut_1: killed\n    p.sub.x_g__mutmut_2: survived\n"
                       "    p.sub.x_g__mutmut_3: survived\n")
    reasons = tmp_path / "equivalent.tsv"
    reasons.write_text("p.sub.x_g__mutmut_2\tsame value either way\np.sub.x_g__mutmut_3\tleft: timing only\n")
    report = _report(str(results), str(reasons))
    assert report.returncode == 1  # p.sub's 67% is under the goal
    rows = {line.split()[0]: line.split()[1:] for line in report.stdout.splitlines() if line.startswith(("p", "all"))}
    # mutants killed survived equiv. no-tests killed% score not-run
    assert rows["p"] == ["2", "2", "0", "0", "0", "100%", "100%", "0"]
    assert rows["p.sub"] == ["3", "1", "2", "1", "0", "33%", "67%", "0"]
    assert rows["all"] == ["5", "3", "2", "1", "0", "60%", "80%", "0"]
