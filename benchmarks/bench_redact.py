"""Redaction time against input size, beside a trivial pass over the same text in the same run.

The reference is ``str.replace`` of a substring that never occurs plus one ``re.sub`` of a trivial
pattern (both linear, near memory speed); the ratio redaction/reference must stay roughly constant
from 1 KB to 8 MB -- a quadratic pattern shows as a ratio that grows with the size. Each size is
measured on three inputs: prose with a few secrets, one run without spaces (the old worst case),
and many URL schemes without userinfo.

Run: python benchmarks/bench_redact.py [--max-mib 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import time

from execsys.redact import redact_text

TRIVIAL = re.compile(r"\x00")


def inputs(size: int) -> dict[str, str]:
    prose = ("The model answered 42 after https://alice:pw@h/x and Bearer abcdefghijkl; --api-key sk-"
             + "A" * 24 + " then nothing much. ")
    return {
        "prose": (prose * (size // len(prose) + 1))[:size],
        "no-spaces": ("abc123+.-" * (size // 9 + 1))[:size],
        "schemes": ("a://" * (size // 4 + 1))[:size],
    }


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-mib", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [1 << 10]
    while sizes[-1] < args.max_mib << 20:
        sizes.append(sizes[-1] * 8 if sizes[-1] < 1 << 20 else sizes[-1] * 2)
    print(f"{'input':<10} {'size':>8} {'redact s':>10} {'reference s':>12} {'ratio':>8} {'MB/s':>8}")
    for size in sizes:
        for name, text in inputs(size).items():
            ours = best(lambda text=text: redact_text(text), args.repeat)
            reference = best(lambda text=text: (text.replace("\x01never\x01", ""), TRIVIAL.sub("", text)),
                             args.repeat)
            label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
            print(f"{name:<10} {label:>8} {ours:>10.4f} {reference:>12.5f} {ours / reference:>8.1f} "
                  f"{size / ours / 1e6:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
