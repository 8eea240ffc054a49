"""MkDocs hooks: the pages that are made from something else at build time, never kept as copies.

- ``reference/cli.md``: every ``--help``, from the argparse parsers (``docs/gen_cli.py``);
- ``QUICKSTART.md`` and ``examples/``: the repository's own files, so the quickstart the test suite
  executes is the one the site shows (its links to the README and into ``docs/`` point at the
  site's own pages);
- ``screenshots/``: the TUI's SVGs, which the TUI page shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))

import gen_cli  # noqa: E402  (beside this file, not an installed module)


def _repository_file(config, path: Path) -> File:
    relative = path.relative_to(ROOT).as_posix()
    if path.suffix == ".md":
        text = path.read_text(encoding="utf-8").replace("](README.md)", "](index.md)").replace("](docs/", "](")
        return File.generated(config, relative, content=text)
    return File.generated(config, relative, abs_src_path=str(path))


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "reference/cli.md", content=gen_cli.render()))
    files.append(_repository_file(config, ROOT / "QUICKSTART.md"))
    for folder in ("examples", "screenshots"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files.append(_repository_file(config, path))
    return files
