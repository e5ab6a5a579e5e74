"""The core's slow path on a large body: CPU time and memory per MiB, against Python's json.loads.

A body the fast pass leaves (here a repeated `id`, which the plan reads) is decided by the slow path
(native/dspark_exact.cpp), which builds the whole body as a tree (native/dspark_json.h's JValue) as Python's
json.loads does. The worst case for the tree is many small values: an array of n one-digit numbers. Each size
runs in a fresh process, so the peak memory (ru_maxrss, less the process's before the body) is that body's:

    python benchmarks/bench_slow_path.py [--mib 4 16 64]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

_ONE = """
import json, resource, sys, time
mib, how = int(sys.argv[1]), sys.argv[2]
from connector.parse import parse_batch
parse_batch([b'{"id":"a"}'], "openai", "cpu")
body = b'{"id":"a","id":"b","x":[' + b"1," * (mib << 19) + b'1]}'
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.process_time()
if how == "core":
    result = parse_batch([body], "openai", "cpu")
    assert result.table.num_rows == 1, result.errors.to_pylist()
else:
    json.loads(body)
seconds = time.process_time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(seconds, peak / 1024)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[4, 16, 64])
    args = parser.parse_args()
    print(f"{'body':>8}  {'slow path: s':>12} {'MB more':>8} {'per MiB':>8}   {'json.loads: s':>13} {'MB more':>8}")
    for mib in args.mib:
        figures = {}
        for how in ("core", "json.loads"):
            done = subprocess.run([sys.executable, "-c", _ONE, str(mib), how], capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-2000:])
            figures[how] = [float(x) for x in done.stdout.split()]
        (s, mb), (ps, pmb) = figures["core"], figures["json.loads"]
        print(f"{mib:>5} MiB  {s:>12.2f} {mb:>8.0f} {mb / mib:>8.0f}   {ps:>13.2f} {pmb:>8.0f}")


if __name__ == "__main__":
    main()
