"""One CSV row per request: the prompts of a file sent to an endpoint, each outcome with its request id (a PyFlink job).

    python jobs/responses.py --endpoint http://127.0.0.1:8000 --prompts prompts.txt --output out
    flink run -d -m host:8081 -py jobs/responses.py --endpoint http://vllm:8000 --prompts /data/p.txt --output /out

Every prompt is one row of the 'dspark-vllm' table `responses` (a failed request or a rejected body is a row
with the metadata column `error` set), written to a filesystem sink (CSV under OUTPUT, committed at
checkpoints): request_id, response_id, model, finish_reason, http_status, attempts, error. Request ids are the
MD5 of the prompt (`connector.flink.requests.request_id_of`), so a prompt sent again after a failover is
recognisable: the failover test (tests/test_flink_failover.py) counts them.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

# `python jobs/responses.py` from a checkout: the package is one directory up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COLUMNS = [
    ("request_id", "STRING"),
    ("response_id", "STRING"),
    ("model", "STRING"),
    ("finish_reason", "STRING"),
    ("http_status", "INT"),
    ("attempts", "INT"),
    ("error", "STRING"),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", required=True, help="OpenAI-compatible server")
    p.add_argument("--model", help="model to ask (default: the first of the endpoint's /v1/models)")
    p.add_argument("--prompts", required=True, help="file or directory of prompts, one per line")
    p.add_argument("--output", required=True, help="output directory (CSV part files)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per parallel instance")
    p.add_argument("--checkpoint-interval", type=float, default=10.0, help="seconds; 0 turns checkpoints off")
    p.add_argument("--detached", action="store_true", help="return once submitted (with `flink run -d`)")
    return p.parse_args(argv)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    from connector.flink import use_connector

    model = args.model
    if model is None:
        with urllib.request.urlopen(args.endpoint.rstrip("/") + "/v1/models", timeout=30) as response:
            model = str(json.load(response)["data"][0]["id"])
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(int(args.checkpoint_interval * 1000), CheckpointingMode.AT_LEAST_ONCE)
    t_env = StreamTableEnvironment.create(env)
    t_env.get_config().set("pipeline.name", "dspark-vllm responses")
    use_connector(t_env)
    options = {
        "connector": "dspark-vllm",
        "endpoint": args.endpoint,
        "model": model,
        "prompts.path": str(Path(args.prompts).resolve()),
        "request.concurrency": str(args.concurrency),
        # Small bundles: in-flight requests are drained at each bundle end; rows reach the sink sooner.
        "parse.batch-size": str(max(args.concurrency, 100)),
    }
    with_clause = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in options.items())
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE responses (id STRING, model STRING, finish_reason STRING, "
        "request_id STRING METADATA FROM 'request.id' VIRTUAL, "
        "http_status INT METADATA FROM 'request.http-status' VIRTUAL, "
        "attempts INT METADATA FROM 'request.attempts' VIRTUAL, "
        f"error STRING METADATA FROM 'error.reason' VIRTUAL) WITH ({with_clause})"
    )
    output = Path(args.output).resolve()
    column_ddl = ", ".join(f"`{n}` {k}" for n, k in COLUMNS)
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink_responses ({column_ddl}) WITH ('connector' = 'filesystem', "
        f"'path' = {_literal(str(output))}, 'format' = 'csv')"
    )
    result = t_env.execute_sql(
        "INSERT INTO sink_responses "
        "SELECT request_id, id, model, finish_reason, http_status, attempts, error FROM responses"
    )
    client = result.get_job_client()
    if client is not None:
        print(f"responses: job {client.get_job_id()}", flush=True)
    if not args.detached:
        result.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
