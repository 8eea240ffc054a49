"""``execsys digest``: the BLAKE3 identity of an artifact, here and on other hosts."""

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
is an integrity defect of the placement: fix it, do not analyse it as data (exit 1).

examples:
  execsys digest model.gguf
  execsys digest ~/.cache/huggingface/hub/models--org--name/snapshots/abc123 --manifest > MANIFEST
  cd snapshot && b3sum --check ../MANIFEST          verify the manifest without execsys
  execsys digest /srv/models/llama --host gpu1 --host gpu2
  execsys digest /srv/models/llama --host gpu1 --expect 3f2a...  (compare with a known digest)

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
    from execsys.digest import artifact_size, digest_path, with_progress_bar

    if args.expect and args.lock:
        raise UsageError("give --expect or --lock, not both")
    for host in args.host:
        from execsys.ssh import Destination  # only with --host: a local digest is all hashing

        try:
            Destination.parse(host)
        except ValueError as exc:  # e.g. '-oProxyCommand=...': refused before anything runs, like doctor --host
            raise UsageError(f"--host: {exc}") from None
    expected, expected_source = _expected(args)
    remote_mode = bool(args.host) or expected is not None

    local = None
    local_error = None
    try:
        local = with_progress_bar(lambda progress: digest_path(args.path, progress=progress),
                                  label=f"hashing {args.path}", total_hint=artifact_size(args.path))
    except Exception as exc:
        if not remote_mode or not args.host:
            raise
        local_error = str(exc)  # the artifact may live only on the hosts

    if not remote_mode:
        assert local is not None
        if args.json:
            console.print_json(local.to_json(manifest=args.manifest))
        elif args.manifest and local.kind == "tree":
            sys.stdout.buffer.write(local.manifest.encode("utf-8"))
            sys.stdout.flush()
        else:
            _print_human(local)
        return ExitCode.OK

    report = match_report(args.path, local, local_error, args.host, expected, expected_source, args.timeout)
    if args.json:
        body = local.to_json(manifest=args.manifest) if local else {"path": args.path, "digest": None}
        body.update(report)
        console.print_json(body)
    else:
        if local:
            _print_human(local)
        _print_sites(report)
    return ExitCode.OK if report["verdict"] == "match" else ExitCode.FINDING


def _expected(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.expect:
        value = args.expect.strip().lower()
        if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
            raise UsageError(f"--expect {args.expect!r}: not a BLAKE3 hex digest (64 hex characters)")
        return value, "--expect"
    if args.lock:
        from execsys.identity import load_lock

        identity = load_lock(args.lock)
        digest = identity.components.get("artifact", {}).get("observed", {}).get("digest")
        if not digest:
            raise UsageError(f"{args.lock}: the lock records no artifact digest")
        return digest, f"lock {args.lock}"
    return None, None


def match_report(path: str, local, local_error: str | None, hosts: list[str], expected: str | None,
                 expected_source: str | None, timeout: float) -> dict:
    """Per-site digests and the artifact digest match rate against the reference digest."""
    from concurrent.futures import ThreadPoolExecutor

    from execsys.digest import remote_digest

    sites: list[dict] = []
    if local is not None:
        sites.append({"host": "local", "digest": local.digest, "method": "execsys", "error": None})
    elif local_error:
        sites.append({"host": "local", "digest": None, "method": None, "error": local_error})
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(hosts)))) as pool:
        remote = list(pool.map(lambda h: remote_digest(h, path, timeout), hosts))
    for r in remote:
        sites.append({"host": r.host, "digest": r.digest, "method": r.method, "error": r.error})

    if expected is None:
        reference = local.digest if local is not None else next((s["digest"] for s in sites if s["digest"]), None)
        source = "local" if local is not None else (f"first host ({sites[1]['host']})" if reference else None)
    else:
        reference, source = expected, expected_source
    for site in sites:
        if site["digest"] is None:
            site["status"] = "unavailable"
        else:
            site["status"] = "match" if site["digest"] == reference else "mismatch"
    computed = [s for s in sites if s["digest"] is not None]
    m = sum(1 for s in computed if s["status"] == "match")
    mismatched = [s["host"] for s in sites if s["status"] == "mismatch"]
    unavailable = [s["host"] for s in sites if s["status"] == "unavailable"]
    if mismatched:
        verdict = "integrity-defect"
        sentence = (f"integrity defect: {', '.join(mismatched)} {'does' if len(mismatched) == 1 else 'do'} not hold "
                    "the pinned artifact; fix the placement before running anything there")
    elif unavailable:
        verdict = "unverified"
        sentence = f"not verified on {', '.join(unavailable)}: the digest could not be computed there"
    else:
        verdict = "match"
        sentence = f"every site holds the same artifact ({m}/{len(computed)})"
    return {
        "reference": {"digest": reference, "source": source},
        "sites": sites,
        "match_rate": {"m": m, "n": len(computed), "rate": (m / len(computed)) if computed else None},
        "verdict": verdict,
        "sentence": sentence,
    }


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
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
