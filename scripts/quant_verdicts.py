"""Write the expected quant verdict table: every format x scheme x engine x target the table covers.

    python scripts/quant_verdicts.py > tests/data/quant_verdicts.tsv

Run it only when a rule in execsys/data/quant_support.toml changed on purpose, then review the diff of
verdicts (`git diff tests/data/quant_verdicts.tsv`) against each changed rule's cited source: the test
tests/test_quant_table_golden.py compares the live table with this file, so a rule edit shows as the
rows whose verdict moved.
"""

from __future__ import annotations

import sys

from execsys import quant

# The five deployment generations the table speaks for: Ampere, Ada, Hopper, Blackwell DC, Blackwell consumer.
TARGETS = ["sm_80", "sm_89", "sm_90", "sm_100", "sm_120"]
HEADER = ("format", "scheme", "engine", "target", "verdict")


def rows() -> list[tuple[str, str, str, str, str]]:
    table = []
    for fmt, spec in quant.formats().items():
        for scheme in spec["schemes"]:
            for engine in quant.engines():
                for target in TARGETS:
                    verdict = quant.check(fmt, scheme=scheme, engine=engine, target=quant.parse_target(target))
                    table.append((fmt, scheme, engine, target, verdict.verdict))
    return table


def main() -> int:
    sys.stdout.write("\t".join(HEADER) + "\n")
    for row in rows():
        sys.stdout.write("\t".join(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
