"""A replay scan whose columns are declared as other types than the profile's (casts), timed.

    python benchmarks/bench_casts.py [--bodies 800000] [--rounds 1]

800k coder bodies (the simulator's corpus) read by a 'dspark-vllm' table declaring `id VARCHAR(40)`, `created
TIMESTAMP_LTZ(3)`, `prompt_tokens STRING`, `tokens_per_second DECIMAL(12, 3)`, `completion_tokens INT` and
`language STRING`, into a blackhole, at parallelism 1; prints the seconds of each scan (job submission
included). To compare two releases, run it in each tree's environment in turns (the machines are noisy).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

DECLARED = (
    "id VARCHAR(40), created TIMESTAMP_LTZ(3), prompt_tokens STRING, tokens_per_second DECIMAL(12, 3), "
    "completion_tokens INT, `language` STRING"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=800_000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    from connector.flink import local_environment
    from connector.simulator.responses import make_corpus

    with tempfile.TemporaryDirectory() as folder:
        bodies = make_corpus(20_000, "coder", seed=5)
        path = Path(folder) / "bodies"
        path.mkdir()
        with open(path / "a.jsonl", "wb") as out:
            for i in range(args.bodies):
                out.write(bodies[i % len(bodies)] + b"\n")
        _, t_env = local_environment()
        t_env.get_config().set("parallelism.default", "1")
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE responses ({DECLARED}) WITH (
                'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{path}', 'profile' = 'coder',
                'parse.backend' = 'cpu')""")
        t_env.execute_sql(f"CREATE TEMPORARY TABLE sink_rows ({DECLARED}) WITH ('connector' = 'blackhole')")
        for _ in range(args.rounds):
            started = time.perf_counter()
            t_env.execute_sql("INSERT INTO sink_rows SELECT * FROM responses").wait()
            seconds = time.perf_counter() - started
            print(f"{args.bodies} bodies, columns cast: {seconds:.1f} s ({args.bodies / seconds:,.0f} rows/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
