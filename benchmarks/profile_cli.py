"""Where `dspark-vllm parse`'s CPU time goes, step by step, in one process (the command's own steps).

    python benchmarks/profile_cli.py [--bodies 50000] [--profile coder]

Writes the benchmark corpus as a file, then does what `dspark-vllm parse FILE --backend cpu --output OUT`
does, in its order, printing the CPU seconds (user + system, all threads) of each step: the imports, the
profile, reading and cutting the file into lines, the core with the Python around it, Parquet writing.
The corpus is made in a child process so that its imports do not count here. Run it a few times: the
figures are a single run's, on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=50_000)
    parser.add_argument("--profile", default="coder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.ndjson"
        make = (
            "import sys\nfrom connector.simulator.responses import make_corpus\n"
            f"bodies = make_corpus({args.bodies}, {args.profile!r}, seed=7, json_share=0.8)\n"
            f"open({str(corpus)!r}, 'wb').write(b'\\n'.join(bodies) + b'\\n')\n"
        )
        subprocess.run([sys.executable, "-c", make], check=True, cwd=ROOT)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `dspark-vllm parse` does
        marks = [("start", _cpu())]
        import pyarrow.parquet as pq

        marks.append(("import pyarrow.parquet (and numpy)", _cpu()))
        from connector.parse import parse_batch
        from connector.profiles import load_profile
        from connector.types.columns import output_schema

        marks.append(("import the rest (connector.parse...)", _cpu()))
        profile = load_profile(args.profile)
        schema = output_schema(profile)
        marks.append(("load the profile", _cpu()))
        from connector.cli.parse import line_batches

        with corpus.open("rb") as stream:
            batches = list(line_batches(stream, 10_000))
        marks.append(("read the file, cut it into lines", _cpu()))
        results = [parse_batch(batch, profile, "cpu") for batch in batches]
        marks.append(("parse_batch (join, the core, assembly)", _cpu()))
        writer = pq.ParquetWriter(Path(tmp) / "out.parquet", schema)
        for result in results:
            writer.write_table(result.table)
        writer.close()
        marks.append(("write Parquet", _cpu()))
    for (_, before), (step, after) in zip(marks, marks[1:], strict=False):
        print(f"{step:42s} {after - before:6.3f} s")
    print(f"{'total':42s} {marks[-1][1]:6.3f} s (the process's CPU, start-up included)")


if __name__ == "__main__":
    main()
