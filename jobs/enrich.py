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
import sys
from pathlib import Path

# `python jobs/enrich.py` from a checkout: the package is one directory up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def more_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", required=True, help="file or directory of prompts, one per line")


def main(argv: list[str] | None = None) -> int:
    from connector.flink import prompt_job, run_job
    from connector.types.flink_types import sql_literal

    args, t_env, model = prompt_job("enrich", __doc__.split("\n\n")[0], argv, more_arguments)
    prompts = sql_literal(str(Path(args.prompts).resolve()))
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE lines (line STRING) WITH ('connector' = 'filesystem', 'path' = {prompts}, "
        "'format' = 'raw')"
    )
    t_env.execute_sql("CREATE TEMPORARY VIEW questions AS SELECT MD5(line) AS `key`, line AS question FROM lines")
    more = "".join(f", {sql_literal(key)} = {sql_literal(value)}" for key, value in args.option)
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
    return run_job("enrich", result, args.detached)


if __name__ == "__main__":
    from connector.flink import run_job_script

    sys.exit(run_job_script("enrich", main))
