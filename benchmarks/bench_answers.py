"""What typing an answer's fields costs: the same answers read as five typed answer fields, and as `content` alone.

    python benchmarks/bench_answers.py [--bodies 400000] [--rows 6000] [--rounds 3]

Two measures, each taking turns in one process (the machines are noisy: compare within a run, not across runs):
- replay: a 'dspark-vllm' table over `--bodies` captured answers (each a JSON object of the five fields below, as
  the simulator writes them for the schema) declaring the five answer fields, against the same table declaring
  `content STRING` (the parse step's cost of typing and checking them), into a blackhole, parallelism 1;
- ML_PREDICT: `--rows` rows against the simulator (zero latency), a model with the five answer fields against the
  same model asking for the same schema through a profile and reading `content` only (the same requests, bodies
  and server work: what differs is the typing).
Prints rows/s of each run and the ratio typed / content (medians over the rounds, after one warm-up round).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

FIELDS = "sentiment VARCHAR(8), score INT, ok BOOLEAN, tags ARRAY<VARCHAR(6)>, summary STRING"
OPTIONS = {"answer.sentiment.enum": "positive;negative;neutral", "answer.tags.max-items": "3"}


def _schema() -> dict:
    from connector.types.answer import AnswerField, answer_schema

    def t(sql: str, root: str, **more):
        return {"sql": sql, "root": root, **more}

    text = t("VARCHAR(2147483647)", "VARCHAR", length=2147483647)
    fields = [
        AnswerField("sentiment", t("VARCHAR(8)", "VARCHAR", length=8)),
        AnswerField("score", t("INT", "INTEGER")),
        AnswerField("ok", t("BOOLEAN", "BOOLEAN")),
        AnswerField("tags", t("ARRAY<VARCHAR(6)>", "ARRAY", element=t("VARCHAR(6)", "VARCHAR", length=6))),
        AnswerField("summary", text),
    ]
    return answer_schema(fields, OPTIONS)


def _timed(t_env, statement: str, rows: int) -> float:
    started = time.perf_counter()
    t_env.execute_sql(statement).wait()
    return rows / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=400_000)
    parser.add_argument("--rows", type=int, default=6_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import yaml

    from connector.flink import local_environment
    from connector.simulator import testing
    from connector.simulator.responses import make_body

    schema = _schema()
    with_options = ", ".join(f"'{k}' = '{v}'" for k, v in OPTIONS.items())
    rates: dict[str, list[float]] = {"replay typed": [], "replay content": [], "model typed": [], "model content": []}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        request = {
            "model": "m",
            "messages": [{"role": "user", "content": "Classify."}],
            "max_tokens": 400,
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
        }
        rng = random.Random(5)
        samples = [json.dumps(make_body(rng, "openai", request)).encode() for _ in range(2_000)]
        (root / "bodies").mkdir()
        with open(root / "bodies" / "a.jsonl", "wb") as out:
            for i in range(args.bodies):
                out.write(samples[i % len(samples)] + b"\n")
        profile = root / "answers.yaml"
        profile.write_text(yaml.safe_dump({"name": "answers", "extends": "openai", "content": schema}))

        _, t_env = local_environment()
        t_env.get_config().set("parallelism.default", "1")
        replay = f"'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / 'bodies'}'"
        t_env.execute_sql(f"CREATE TEMPORARY TABLE typed ({FIELDS}) WITH ({replay}, {with_options})")
        t_env.execute_sql(f"CREATE TEMPORARY TABLE content_only (content STRING) WITH ({replay})")
        t_env.execute_sql(f"CREATE TEMPORARY TABLE sink_typed ({FIELDS}) WITH ('connector' = 'blackhole')")
        t_env.execute_sql("CREATE TEMPORARY TABLE sink_content (content STRING) WITH ('connector' = 'blackhole')")
        rows = ", ".join(f"({i})" for i in range(args.rows))
        t_env.execute_sql(
            f"CREATE TEMPORARY VIEW asks AS SELECT CONCAT('Classify review ', CAST(i AS STRING)) AS q "
            f"FROM (VALUES {rows}) AS r(i)"
        )
        with testing.serve_simulator(mode="process", profiles=("openai",), seed=3, workers=2) as sim:
            served = json.load(__import__("urllib.request").request.urlopen(sim.url + "/v1/models"))["data"][0]["id"]
            common = (
                f"'provider' = 'dspark-vllm', 'endpoint' = '{sim.url}', 'model' = '{served}', "
                "'request.max-tokens' = '400', 'request.concurrency' = '64'"
            )
            t_env.execute_sql(
                f"CREATE TEMPORARY MODEL judge_typed INPUT (q STRING) OUTPUT ({FIELDS}) WITH ({common}, {with_options})"
            )
            t_env.execute_sql(
                f"CREATE TEMPORARY MODEL judge_content INPUT (q STRING) OUTPUT (content STRING) "
                f"WITH ({common}, 'profile' = '{profile}', 'request.structured-output' = 'true')"
            )
            names = "sentiment, score, ok, tags, summary"
            predict = "MAP['async', 'true', 'max-concurrent-operations', '64']"
            for round_ in range(args.rounds + 1):  # the first warms the JVM up and is not counted
                rates["replay typed"].append(_timed(t_env, "INSERT INTO sink_typed SELECT * FROM typed", args.bodies))
                rates["replay content"].append(
                    _timed(t_env, "INSERT INTO sink_content SELECT * FROM content_only", args.bodies)
                )
                rates["model typed"].append(
                    _timed(
                        t_env,
                        f"INSERT INTO sink_typed SELECT {names} FROM ML_PREDICT("
                        f"TABLE asks, MODEL judge_typed, DESCRIPTOR(q), {predict})",
                        args.rows,
                    )
                )
                rates["model content"].append(
                    _timed(
                        t_env,
                        "INSERT INTO sink_content SELECT content FROM ML_PREDICT("
                        f"TABLE asks, MODEL judge_content, DESCRIPTOR(q), {predict})",
                        args.rows,
                    )
                )
                print(
                    "warm-up:" if round_ == 0 else "round:",
                    ", ".join(f"{k} {v[-1]:,.0f} rows/s" for k, v in rates.items()),
                    flush=True,
                )
                if round_ == 0:
                    for v in rates.values():
                        v.clear()
    median = {k: statistics.median(v) for k, v in rates.items()}
    print(
        f"replay, {args.bodies} answers: typed {median['replay typed']:,.0f} rows/s, content "
        f"{median['replay content']:,.0f} rows/s: {median['replay typed'] / median['replay content']:.2f}x"
    )
    print(
        f"ML_PREDICT, {args.rows} rows: typed {median['model typed']:,.0f} rows/s, content "
        f"{median['model content']:,.0f} rows/s: {median['model typed'] / median['model content']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
