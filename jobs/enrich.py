"""Enrichment: a file of prompts through ML_PREDICT with a 'dspark-vllm' model, one CSV row per line (a PyFlink job).

    python jobs/enrich.py --endpoint http://127.0.0.1:8000 --prompts prompts.txt --output out
    flink run -d -m host:8081 -py jobs/enrich.py --endpoint http://vllm:8000 --prompts /data/p.txt --output /out

Each line of the prompts file is a row of the table `questions` (its text and its MD5 as a key); `ML_PREDICT`
adds the model's OUTPUT columns beside them, and every row is written to a filesystem sink (CSV under OUTPUT,
committed at checkpoints): key, response_id, model, http_status, attempts, error. The failover test
(tests/test_flink_failover.py, its `ml_predict` route) kills the TaskManager mid-run and counts the keys.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

# `python jobs/enrich.py` from a checkout: the package is one directory up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", required=True, help="OpenAI-compatible server")
    p.add_argument("--model", help="model to ask (default: the first of the endpoint's /v1/models)")
    p.add_argument("--prompts", required=True, help="file or directory of prompts, one per line")
    p.add_argument("--output", required=True, help="output directory (CSV part files)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per parallel instance")
    p.add_argument("--checkpoint-interval", type=float, default=10.0, help="seconds; 0 turns checkpoints off")
    p.add_argument("--detached", action="store_true", help="return once submitted (with `flink run -d`)")
    p.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="another option of the 'dspark-vllm' model"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    from connector.flink import use_connector
    from connector.flink.planner import sql_literal

    model = args.model
    if model is None:
        with urllib.request.urlopen(args.endpoint.rstrip("/") + "/v1/models", timeout=30) as response:
            model = str(json.load(response)["data"][0]["id"])
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(int(args.checkpoint_interval * 1000), CheckpointingMode.EXACTLY_ONCE)
    t_env = StreamTableEnvironment.create(env)
    t_env.get_config().set("pipeline.name", "dspark-vllm enrich")
    use_connector(t_env)
    prompts = sql_literal(str(Path(args.prompts).resolve()))
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE lines (line STRING) WITH ('connector' = 'filesystem', 'path' = {prompts}, "
        "'format' = 'raw')"
    )
    t_env.execute_sql("CREATE TEMPORARY VIEW questions AS SELECT MD5(line) AS `key`, line AS question FROM lines")
    more = "".join(
        f", {sql_literal(k.strip())} = {sql_literal(v.strip())}" for k, _, v in (o.partition("=") for o in args.option)
    )
    t_env.execute_sql(
        "CREATE TEMPORARY MODEL answerer INPUT (question STRING) "
        "OUTPUT (id STRING, model STRING, `request.http-status` INT, `request.attempts` INT, `error.reason` STRING) "
        f"WITH ('provider' = 'dspark-vllm', 'endpoint' = {sql_literal(args.endpoint)}, 'model' = {sql_literal(model)}, "
        f"'request.concurrency' = '{args.concurrency}'{more})"
    )
    out = sql_literal(str(Path(args.output).resolve()))
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE answers (`key` STRING, response_id STRING, model STRING, http_status INT, "
        f"attempts INT, error STRING) WITH ('connector' = 'filesystem', 'path' = {out}, 'format' = 'csv')"
    )
    result = t_env.execute_sql(
        "INSERT INTO answers SELECT `key`, id, model, `request.http-status`, `request.attempts`, `error.reason` "
        "FROM ML_PREDICT(TABLE questions, MODEL answerer, DESCRIPTOR(question), MAP['async', 'true', "
        f"'output-mode', 'ALLOW_UNORDERED', 'max-concurrent-operations', '{args.concurrency}'])"
    )
    client = result.get_job_client()
    if client is not None:
        print(f"enrich: job {client.get_job_id()}", flush=True)
    if not args.detached:
        result.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
