"""``execsys init``: write a commented execsys.toml pre-filled with what this machine shows."""

from __future__ import annotations

import argparse
from pathlib import Path

from execsys.errors import ExitCode, InputError

HELP = "write a commented execsys.toml declaring the twelve components, pre-filled from this machine"
DESCRIPTION = """\
Write execsys.toml: one commented table per component of the execution system, with the
host, GPUs, git repository, serving engine and endpoint filled in where they can be
detected. Edit it to say what you intend, then run `execsys pin`. An existing file is
never overwritten without --force. The file written is trusted (see `execsys trust`); once
you have edited it, `execsys trust` it again before the commands it declares can run.

examples:
  execsys init
  execsys init --config eval/execsys.toml
  execsys init --force                    replace an existing declaration

exit codes: 0 written, 2 the file exists (use --force) or cannot be written
"""

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH",
                        help="where to write (default: $EXECSYS_CONFIG, else ./execsys.toml: where pin looks)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")


def run(args: argparse.Namespace) -> int:
    from execsys import console, sources
    from execsys.fsutil import write_output
    from execsys.scaffold import detect, portable_repo_path, render_template

    target = sources.config_path(args.config)
    if target.is_dir():
        raise InputError(f"{target} is a directory; give the path of the declaration file (e.g. {target / 'execsys.toml'})")
    if target.exists() and not args.force:
        raise InputError(f"{target} already exists; use --force to overwrite it")
    found = detect()
    if found.get("repo"):
        found["repo"] = portable_repo_path(Path(found["repo"]), target)
    text = render_template(found)
    write_output(target, text, "the declaration")
    from execsys import trust

    try:
        trust.trust(target, text.encode("utf-8"))  # what execsys wrote for you is yours: its commands may run
    except InputError as exc:
        console.warn(f"{exc}; run 'execsys trust' before its declared commands can run")
    detected = ", ".join(f"{k} {v}" for k, v in found.items()) or "nothing"
    console.out().print(f"wrote {target} (detected: {detected})", markup=False)
    console.out().print("next: edit it, then run 'execsys pin'", markup=False)
    return ExitCode.OK
