"""The CLI reference, generated from execsys's own argparse parsers at build time.

``render()`` walks :func:`execsys.cli.build_parser`, every subcommand under it (``plan run``,
``ledger show``, ...) and each probe axis's own parser, and returns one Markdown page holding each
one's ``--help`` text verbatim. The MkDocs hook (``docs/hooks.py``) writes it as
``reference/cli.md``; nothing is kept in the repository, so the page cannot drift from ``--help``.
``python docs/gen_cli.py`` prints the page.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

# One width for every build: argparse wraps to the terminal's, and the page must not depend on it.
WIDTH = "100"


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias is the same parser under a second name
                    seen.add(id(sub))
                    yield name, sub


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for name, sub in _subparsers(parser):
        yield from _walk(sub, f"{path} {name}")


def helps() -> list[tuple[str, str]]:
    """(command, its --help text) for the top level, every subcommand and every probe axis."""
    from execsys.cli import build_parser
    from execsys.commands import probe

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        found = [(path, parser.format_help()) for path, parser in _walk(build_parser(), "execsys")]
        axes = [(f"execsys probe {axis}", probe.axis_parser(axis).format_help()) for axis in probe.AXIS_LINES]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    # each probe axis's own help stands in for the combined one's section, after `execsys probe`
    out: list[tuple[str, str]] = []
    for path, text in found:
        out.append((path, text))
        if path == "execsys probe":
            out.extend(axes)
    return out


def _anchor(path: str) -> str:
    return path.replace(" ", "-")


def render() -> str:
    """The reference page: an index of every command, then each one's --help in a text block."""
    pages = helps()
    lines = [
        "# CLI reference",
        "",
        "Generated from the argparse parsers when the site is built (`docs/gen_cli.py`): each block",
        "below is exactly what `--help` prints, at 100 columns. Every command also takes `--ledger PATH`",
        "and `--debug`; exit codes are 0 fine, 1 a finding, 2 a usage or input error.",
        "",
    ]
    lines += [f"- [`{path}`](#{_anchor(path)})" for path, _ in pages]
    for path, text in pages:
        fence = "````" if "```" in text else "```"
        lines += ["", f"## `{path}` {{ #{_anchor(path)} }}", "", f"{fence}text", text.rstrip("\n"), fence]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
