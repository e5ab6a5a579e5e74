"""`dspark-vllm parse` against today's script as whole processes on two file sizes: what each body past the
first costs, without the start-up that every run pays once (Python, the imports, the profile).

    python benchmarks/cli_per_body.py [--small 50000] [--large 200000] [--repeat 2]

Writes the benchmark corpus (coder profile, 80% JSON content) as two NDJSON files, runs today's script
(connector/bench.py's: json.loads, pandas, to_parquet) and `dspark-vllm parse --backend cpu` on each, taking
turns, and prints the best CPU seconds (user + system) of each, the ratio at each size, and the ratio of the
CPU time per body between the two sizes.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from connector.bench import today_script  # noqa: E402
from connector.profiles import load_profile  # noqa: E402
from connector.simulator.responses import make_corpus  # noqa: E402


def _cpu(command: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, capture_output=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=50_000)
    parser.add_argument("--large", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    props = ",".join(p.name for p in load_profile("coder").content_properties)
    bodies = make_corpus(args.large, "coder", seed=7, json_share=0.8)
    best: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "today.py"
        script.write_text(today_script())
        for n in (args.small, args.large):
            (Path(tmp) / f"{n}.ndjson").write_bytes(b"\n".join(bodies[:n]) + b"\n")
        for _ in range(args.repeat):
            for n in (args.small, args.large):
                source, out = str(Path(tmp) / f"{n}.ndjson"), str(Path(tmp) / "out.parquet")
                commands = {
                    "today": [sys.executable, str(script), source, out, props],
                    "ours": [sys.executable, "-m", "connector.cli", "parse", source, "--profile", "coder",
                             "--backend", "cpu", "--output", out],
                }  # fmt: skip
                for name, command in commands.items():
                    seconds = _cpu(command)
                    best[(name, n)] = min(best.get((name, n), float("inf")), seconds)
    for n in (args.small, args.large):
        today, ours = best[("today", n)], best[("ours", n)]
        print(
            f"{n:>9,} bodies: today's script {today:.2f} s, dspark-vllm parse {ours:.2f} s of CPU: {today / ours:.1f}x"
        )
    extra = args.large - args.small
    per_today = (best[("today", args.large)] - best[("today", args.small)]) / extra
    per_ours = (best[("ours", args.large)] - best[("ours", args.small)]) / extra
    ratio = f"{per_today / per_ours:.1f}x" if per_ours > 0 and per_today > 0 else "not measurable: larger files"
    print(
        f"each body past the first {args.small:,}: today's script {per_today * 1e6:.1f} us, dspark-vllm parse "
        f"{per_ours * 1e6:.1f} us: {ratio}"
    )


if __name__ == "__main__":
    main()
