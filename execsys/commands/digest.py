"""``execsys digest``: the BLAKE3 identity of an artifact, here and on other hosts.

Argument wiring and rendering only: the cross-host verdict is :mod:`execsys.digest_match`."""

from __future__ import annotations

import argparse
import sys

from execsys.cli import add_json, positive_float
from execsys.errors import ExitCode, UsageError

HELP = "BLAKE3 digest of a file or directory tree (b3sum-compatible), optionally on other hosts"
DESCRIPTION = """\
Identify an artifact by its bytes. A file gets the standard BLAKE3 digest (the same hex
`b3sum FILE` prints); a directory gets a manifest of its regular files in b3sum format,
sorted bytewise by path, and the tree digest is the BLAKE3 of that manifest. Symlinks are
followed (Hugging Face caches), a symlink loop is an error.

With --host, the digest is also computed on each remote host over SSH (its b3sum, else its
python blake3, else its execsys) and the artifact digest match rate is reported. Any mismatch
is an integrity defect of the placement: fix it, do not analyse it as data (exit 1). --expect
takes a known digest whole (the 64 hex characters b3sum prints; with or without --host), --lock
the one a lock pinned.

examples:
  execsys digest model.gguf
  execsys digest ~/.cache/huggingface/hub/models--org--name/snapshots/abc123 --manifest > MANIFEST
  cd snapshot && b3sum --check ../MANIFEST          verify the manifest without execsys
  execsys digest /srv/models/llama --host gpu1 --host gpu2
  execsys digest model.gguf --expect af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262

exit codes: 0 digest computed (and every host matched), 1 a mismatch or a host where it could
not be computed, 2 unusable input (missing, unreadable, symlink loop)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="file or directory to digest")
    parser.add_argument("--manifest", action="store_true", help="print the b3sum-format manifest of a directory")
    parser.add_argument("--host", action="append", default=[], metavar="DEST",
                        help="also compute the digest on this SSH destination (repeatable)")
    parser.add_argument("--expect", metavar="DIGEST", help="the digest every site must have (default: the local one)")
    parser.add_argument("--lock", metavar="PATH", help="take the expected digest from this lock's artifact")
    parser.add_argument("--timeout", type=positive_float, default=600.0, help="seconds allowed per remote host (default 600)")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    from execsys import console
    from execsys.console import with_progress_bar
    from execsys.digest import artifact_size, digest_path

    if not args.host and not args.expect and not args.lock:
        # a local digest only: all hashing, no ssh, no verdict (and start-up stays light)
        local = with_progress_bar(lambda progress: digest_path(args.path, progress=progress),
                                  label=f"hashing {args.path}", total_hint=artifact_size(args.path))
        if args.json:
            console.print_json(local.to_json(manifest=args.manifest))
        elif args.manifest and local.kind == "tree":
            sys.stdout.buffer.write(local.manifest.encode("utf-8"))
            sys.stdout.flush()
        else:
            _print_human(local)
        return ExitCode.OK

    from execsys.digest_match import DigestMatchOptions, HashProgress, run_digest_match

    if args.expect and args.lock:
        raise UsageError("give --expect or --lock, not both")
    lock = None
    if args.lock:
        from execsys.identity import load_lock

        lock = load_lock(args.lock)
    options = DigestMatchOptions.from_sources(None, lock, path=args.path, hosts=args.host, expect=args.expect,
                                              timeout=args.timeout)

    def run_match(progress):
        def on_event(event: object) -> None:
            if progress is not None and isinstance(event, HashProgress):
                progress(event.done, event.total)

        return run_digest_match(options, on_event)

    match = with_progress_bar(run_match, label=f"hashing {args.path}", total_hint=artifact_size(args.path))
    if args.json:
        body = match.local.to_json(manifest=args.manifest) if match.local else {"path": args.path, "digest": None}
        body.update(match.to_json())
        console.print_json(body)
    else:
        if match.local:
            _print_human(match.local)
        _print_sites(match.to_json())
    return ExitCode.OK if match.exit_code == 0 else ExitCode.FINDING


def _print_human(result) -> None:
    # plain text, no rich: the digest line is data (b3sum's own shape) and start-up stays light
    if result.kind == "file":
        from execsys.digest import b3sum_line

        sys.stdout.write(b3sum_line(result.digest, result.path) + "\n")  # b3sum's own line, escapes and all
    else:
        sys.stdout.write(f"{result.digest}  {result.path}/  ({result.files} files, {_size(result.size_bytes)}; "
                         "--manifest lists them)\n")
    sys.stdout.flush()


def _print_sites(report: dict) -> None:
    from rich.markup import escape

    from execsys import console

    status_symbol = {"match": ("ok", "match"), "mismatch": ("fail", "MISMATCH"), "unavailable": ("error", "unavailable")}
    for site in report["sites"]:
        key, word = status_symbol[site["status"]]
        detail = site["digest"] or site["error"] or ""
        how = f" via {site['method']}" if site.get("method") and site["host"] != "local" else ""
        console.out().print(f"[{console.STYLES[key]}]{console.symbol(key)}[/] {escape(site['host'])}: {word}{how}  "
                            f"{escape(detail)}")
    rate = report["match_rate"]
    ref = report["reference"]
    console.out().print(f"artifact digest match rate {rate['m']}/{rate['n']} against {ref['source']} "
                        f"({(ref['digest'] or '')[:16]})", markup=False)
    console.out().print(report["sentence"], markup=False)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
