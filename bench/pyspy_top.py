#!/usr/bin/env python3
"""Sum a py-spy raw profile (`py-spy record -f raw`) by function: each frame's share of the samples
that pass through it (inclusive), most first (prints figures; not a test).

    python3 bench/pyspy_top.py PROFILE.txt [--top 40] [--grep multipart]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path


def inclusive(path: Path) -> tuple[Counter[str], int]:
    """Samples through each frame of the raw profile at `path`, and the samples in all."""
    through: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        total += int(n)
        for frame in set(stack.split(";")):
            through[frame] += int(n)
    return through, total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--grep", default="", help="only frames containing this text")
    args = ap.parse_args()
    through, total = inclusive(args.profile)
    print(f"{total} samples")
    shown = [(f, n) for f, n in through.most_common() if args.grep in f]
    for frame, n in shown[: args.top]:
        print(f"{100 * n / max(total, 1):5.1f}%  {frame[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
