"""Score per module from `mutmut results --all true`, and every surviving mutant with its reason.

    python scripts/mutation_report.py RESULTS_TXT EQUIVALENT_TSV
    python scripts/mutation_report.py --merge BEFORE_TXT AFTER_TXT NAMES_TXT   # (what --recheck writes)

A mutant is killed when a test failed (or timed out) with it applied. The score counts killed among
the mutants some test covers; "no tests" (covered only through subprocesses, or not at all) is shown
beside it. A survivor listed in EQUIVALENT_TSV (mutant name, tab, why no test can tell) is an
equivalent mutant, unless its reason starts with "left:" (a real difference no fast test here can
reach, e.g. the NVML branch on a machine without a GPU): that one still counts as surviving. Any other
survivor is a missing test, and makes the exit status 1.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

GOAL = 0.85
KILLED = {"killed", "timeout", "caught by type check", "segfault"}


def _module_of(name: str) -> str:
    """The module a mutant belongs to: its name up to the mangled function (``.x_f`` or ``.xǁClassǁf``)."""
    return name.split(".x_")[0].split(".xǁ")[0]


def main(results: str, equivalent: str) -> int:
    reasons: dict[str, str] = {}
    for line in Path(equivalent).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition("\t")
            reasons[name.strip()] = why.strip()
    left = {name for name, why in reasons.items() if why.startswith("left:")}
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: list[str] = []
    for line in Path(results).read_text(encoding="utf-8").splitlines():
        found = re.match(r"\s*(\S+): (.+)$", line)
        if not found:
            continue
        name, status = found.groups()
        module = _module_of(name)
        by_module[module][status] += 1
        if status == "survived":
            survivors.append(name)
    worst = 1.0
    totals: Counter[str] = Counter()
    print(f"{'module':28} {'mutants':>7} {'killed':>7} {'survived':>8} {'equiv.':>6} {'no tests':>8} "
          f"{'killed%':>7} {'score':>6} {'not run':>7}")
    for module in sorted(by_module):
        counts = by_module[module]
        killed = sum(counts[s] for s in KILLED)
        # the survivors of this module only: a package's own mutants (execsys.probes.axes.x_...) are named
        # with the prefix of its submodules' (execsys.probes.axes.restart.x_...)
        equivalent_here = sum(1 for s in survivors if _module_of(s) == module and s in reasons and s not in left)
        covered = killed + counts["survived"]
        score = (killed + equivalent_here) / covered if covered else 1.0
        worst = min(worst, score)
        total = sum(counts.values())
        totals.update({"mutants": total, "killed": killed, "survived": counts["survived"],
                       "equivalent": equivalent_here, "no tests": counts["no tests"],
                       "not checked": counts["not checked"]})
        print(f"{module:28} {total:>7} {killed:>7} {counts['survived']:>8} {equivalent_here:>6} "
              f"{counts['no tests']:>8} {killed / covered if covered else 1.0:>7.0%} {score:>6.0%} "
              f"{counts['not checked']:>7}")
    covered_all = totals["killed"] + totals["survived"]
    if len(by_module) > 1 and covered_all:
        print(f"{'all':28} {totals['mutants']:>7} {totals['killed']:>7} {totals['survived']:>8} "
              f"{totals['equivalent']:>6} {totals['no tests']:>8} {totals['killed'] / covered_all:>7.0%} "
              f"{(totals['killed'] + totals['equivalent']) / covered_all:>6.0%} {totals['not checked']:>7}")
    print("killed% = killed / (killed + survived); score counts the equivalent survivors as killed; "
          "'no tests': reached by no in-process test (SSH and remote paths, or only through subprocesses); "
          "'not run': a run stopped before reaching them")
    missing = [s for s in survivors if s not in reasons]
    if survivors:
        print("\nsurviving mutants:")
        for name in survivors:
            if name in left:
                print(f"  {name}: LEFT -- {reasons[name][len('left:'):].strip()}")
            else:
                print(f"  {name}: " + (f"equivalent -- {reasons[name]}" if name in reasons else "NOT KILLED: add a test"))
    print(f"\nlowest score {worst:.0%} (goal {GOAL:.0%}, equivalent mutants counted as killed); "
          f"{len(missing)} survivor(s) without a reason")
    return 0 if not missing and worst >= GOAL else 1


def merge(before: str, after: str, rechecked: str) -> int:
    """Print BEFORE's results with the verdicts of the mutants named in RECHECKED taken from AFTER.

    A run of named mutants after the tests changed re-collects mutmut's test stats, which resets every
    other mutant to "not checked"; their earlier verdicts still stand (the mutated code is the same and
    tests were only added), so a re-check keeps them."""
    names = set(Path(rechecked).read_text(encoding="utf-8").split())
    fresh: dict[str, str] = {}
    for line in Path(after).read_text(encoding="utf-8").splitlines():
        found = re.match(r"\s*(\S+): (.+)$", line)
        if found and found.group(1) in names:
            fresh[found.group(1)] = found.group(2)
    for line in Path(before).read_text(encoding="utf-8").splitlines():
        found = re.match(r"(\s*)(\S+): (.+)$", line)
        if found and found.group(2) in fresh:
            line = f"{found.group(1)}{found.group(2)}: {fresh[found.group(2)]}"
        print(line)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--merge"]:
        raise SystemExit(merge(*sys.argv[2:5]))
    raise SystemExit(main(*sys.argv[1:3]))
