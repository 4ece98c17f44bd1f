"""Text summary of a py-spy ``--format raw`` (folded stacks) profile: the functions holding the most
samples, inclusive and self. Used for the profiles kept in docs/benchmarks/profiles/.

Usage: .venv/bin/python benchmarks/fold_summary.py PROFILE.raw [--top 25] [--title TEXT]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path


def summarize(text: str, top: int) -> str:
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        # "function (path/to/file.py:line)": keep the function and file, drop the line number.
        frames = [re.sub(r":\d+\)$", ")", frame.strip()) for frame in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    out = [f"{total} samples", "", "inclusive (share of samples with the function on the stack):"]
    out += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)]
    out += ["", "self (share of samples in the function itself):"]
    out += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    text = summarize(Path(args.profile).read_text(), args.top)
    sys.stdout.write((args.title + "\n\n" if args.title else "") + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
