"""The README is the front door (issue 30), and these tests keep it one.

It stays under 200 lines and opens with exactly the set-up commands (install and run the doctor; run
the tests), which ``.ci/run`` also runs; the procedure fits in ten lines; every link in it resolves; and
its performance and mutation tables hold figures, not paragraphs. Everything else lives in the
documentation site under ``docs/``: the tables are repeated there row for row, with the method and each
row's caveats, and a row added to one and not the other fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

INSTALL = ("python3 -m venv ~/.local/share/execsys-venv && ~/.local/share/execsys-venv/bin/pip install . "
           "&& ~/.local/share/execsys-venv/bin/execsys doctor")
TEST = "bash scripts/test.sh"
FAST_LOOP = 'bash scripts/test.sh -m "not integration"'  # may follow the two, as a third block

MAX_LINES = 200
MAX_CELL = 70  # characters: a figure with its unit and a short qualifier, never a sentence

FENCE = re.compile(r"^```(\w*)\s*$")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number of the opening fence, language, body) of each fenced code block."""
    blocks: list[tuple[int, str, str]] = []
    opened: tuple[int, str] | None = None
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence and opened is None:
            opened, body = (number, fence.group(1)), []
        elif fence and opened is not None:
            blocks.append((opened[0], opened[1], "\n".join(body).strip()))
            opened = None
        elif opened is not None:
            body.append(line)
    assert opened is None, f"a code block opened on line {opened[0]} is never closed"
    return blocks


def section(text: str, heading: str) -> str:
    """The text under a ``## heading``, up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(heading)}\s*$", text, re.MULTILINE)
    assert match, f"no '## {heading}' section"
    rest = text[match.end():]
    following = re.search(r"^## ", rest, re.MULTILINE)
    return rest[:following.start()] if following else rest


def tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table as rows of stripped cells (header first, the |---| line left out)."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def test_the_readme_is_under_200_lines() -> None:
    lines = _readme().splitlines()
    assert len(lines) < MAX_LINES, (f"README.md has {len(lines)} lines; the front door stays under {MAX_LINES}: "
                                    "move prose into a docs/ page and link it")


def test_the_readme_opens_with_exactly_the_set_up_commands() -> None:
    """The first code blocks, before any section, are the install-and-doctor command and the test command
    (and at most the fast loop after them), one command per block, in that order."""
    text = _readme()
    first_section = re.search(r"^## ", text, re.MULTILINE)
    assert first_section, "the README has no sections"
    top = text[:first_section.start()]
    commands = [body for _, _, body in fenced_blocks(top)]
    assert commands[:2] == [INSTALL, TEST], commands
    assert commands[2:] in ([], [FAST_LOOP]), f"only the set-up commands belong at the top: {commands[2:]}"
    assert all(language == "bash" for _, language, _ in fenced_blocks(top))
    assert fenced_blocks(text)[0][0] == fenced_blocks(top)[0][0]


def test_ci_runs_the_readmes_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert any(line.strip() == TEST or line.strip().startswith(TEST + " ") for line in ci), \
        f".ci/run does not run the README's test command `{TEST}`"


def test_the_procedure_fits_in_ten_lines() -> None:
    blocks = fenced_blocks(section(_readme(), "The procedure"))
    assert blocks, "the procedure has no code block"
    lines = blocks[0][2].splitlines()
    assert len(lines) <= 10, lines
    for step in ("execsys doctor", "execsys pin", "execsys probe", "execsys scope", "execsys run --"):
        assert any(step in line for line in lines), step


def test_every_link_in_the_readme_resolves() -> None:
    """The quickstart and the docs pages the README sends a reader to exist."""
    text = _readme()
    targets = [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]
    assert "QUICKSTART.md" in targets and "docs/index.md" in targets, targets
    assert sum(target.startswith("docs/") for target in targets) >= 10, "the README links the docs for the rest"
    missing = [target for target in targets if not (ROOT / target.split("#")[0]).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def _figure_tables() -> dict[str, list[list[list[str]]]]:
    text = _readme()
    return {"Performance": tables(section(text, "Performance")),
            "Mutation testing": tables(section(text, "Mutation testing"))}


def test_the_readme_tables_hold_figures_not_paragraphs() -> None:
    found = _figure_tables()
    assert len(found["Performance"]) == 1 and len(found["Mutation testing"]) >= 1, found
    for name, in_section in found.items():
        for table in in_section:
            header, rows = table[0], table[1:]
            assert rows, f"{name}: a table without rows"
            for row in rows:
                assert len(row) == len(header), f"{name}: {row[0]} has {len(row)} cells, the header {len(header)}"
                long = [cell for cell in row if len(cell) > MAX_CELL]
                assert not long, f"{name}: a cell is prose, not a figure (move it to the docs page): {long}"
                assert any(re.search(r"\d", cell) for cell in row[1:]), f"{name}: {row[0]} holds no figure"


def test_the_readme_tables_are_the_docs_tables() -> None:
    """docs/reference/performance.md and mutation.md repeat the README's tables row for row (and add the
    method and each row's notes): a measurement added to one and not the other fails here."""
    found = _figure_tables()
    pages = {"Performance": ROOT / "docs" / "reference" / "performance.md",
             "Mutation testing": ROOT / "docs" / "reference" / "mutation.md"}
    for name, page in pages.items():
        in_docs = tables(page.read_text(encoding="utf-8"))
        assert in_docs[:len(found[name])] == found[name], f"the README's {name} tables differ from {page.name}'s"


def test_the_helpers_read_markdown_as_written() -> None:
    """The parsers above find the code blocks, sections and tables of a sample page as written."""
    sample = "intro\n```bash\na\n```\n\n```bash\nb\n```\n## S\n| x | y |\n|---|---|\n| r | 1 |\n| q | " + \
             "w" * 80 + " |\n\ntext\n"
    assert [body for _, _, body in fenced_blocks(sample)] == ["a", "b"]
    assert tables(section(sample, "S")) == [[["x", "y"], ["r", "1"], ["q", "w" * 80]]]
