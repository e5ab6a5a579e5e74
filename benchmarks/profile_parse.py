"""Where `parse_batch`'s time goes, finer than `ParseResult.stats`: a py-spy profile split by phase.

    pip install py-spy
    py-spy record --format raw -r 250 -o parse.txt -- python benchmarks/profile_parse.py --seconds 20
    python benchmarks/profile_parse.py --report parse.txt

The first command parses one 10k batch of the benchmark corpus (coder profile; `--json-share 0.0` for free
text) over and over under py-spy; the second prints each phase's share of the samples inside `parse_batch`.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (phase, a frame that marks it), the first that a sample's stack holds wins.
PHASES = [
    ("bodies: the native core (bodies, content JSON and x-extract)", "read_bodies", "read ("),
    ("bodies: verdicts, filters", "read_bodies", ""),
    ("bodies: joined buffer", "_joined", ""),
]


def report(path: Path) -> None:
    shares: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "parse_batch (" not in stack:
            continue
        total += int(count)
        phase = next(
            (name for name, outer, inner in PHASES if outer in stack and inner in stack),
            "other (errors table, order, output table)",
        )
        shares[phase] += int(count)
    print(f"{total} samples in parse_batch")
    for name, count in shares.most_common():
        print(f"{count / max(total, 1):6.0%}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="print the shares of a py-spy raw profile")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json-share", type=float, default=0.8)
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    from connector.parse import parse_batch
    from connector.profiles import load_profile
    from connector.simulator.responses import make_corpus

    bodies = make_corpus(10_000, "coder", seed=7, json_share=args.json_share)
    profile = load_profile("coder")
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        parse_batch(bodies, profile, "cpu")


if __name__ == "__main__":
    main()
