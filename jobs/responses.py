"""One CSV row per request: the prompts of a file sent to an endpoint, each outcome with its request id (a PyFlink job).

    python jobs/responses.py --endpoint http://127.0.0.1:8000 --prompts prompts.txt --output out
    flink run -d -m host:8081 -py jobs/responses.py --endpoint http://vllm:8000 --prompts /data/p.txt --output /out

Every prompt is one row of the 'dspark-vllm' table `responses` (a failed request or a rejected body is a row
with the metadata column `error` set), written to a filesystem sink (CSV under OUTPUT, committed at
checkpoints): request_id, response_id, model, finish_reason, http_status, attempts, error. Request ids are the
MD5 of the prompt (`connector.flink.planner.request_id_of`), so a prompt sent again after a failover is
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
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompts", help="file or directory of prompts, one per line")
    source.add_argument(
        "--rate", type=int, help="instead: numbered prompts at this rate, with no end (until cancelled)"
    )
    p.add_argument("--output", required=True, help="output directory (CSV part files)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per parallel instance")
    p.add_argument("--checkpoint-interval", type=float, default=10.0, help="seconds; 0 turns checkpoints off")
    p.add_argument("--detached", action="store_true", help="return once submitted (with `flink run -d`)")
    p.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="another option of the 'dspark-vllm' table"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.table import DataTypes, Schema, StreamTableEnvironment, TableDescriptor

    from connector.flink import use_connector

    model = args.model
    if model is None:
        with urllib.request.urlopen(args.endpoint.rstrip("/") + "/v1/models", timeout=30) as response:
            model = str(json.load(response)["data"][0]["id"])
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(int(args.checkpoint_interval * 1000), CheckpointingMode.EXACTLY_ONCE)
    t_env = StreamTableEnvironment.create(env)
    t_env.get_config().set("pipeline.name", "dspark-vllm responses")
    use_connector(t_env)
    responses = (
        TableDescriptor.for_connector("dspark-vllm")
        .schema(
            Schema.new_builder()
            .column("id", DataTypes.STRING())
            .column("model", DataTypes.STRING())
            .column("finish_reason", DataTypes.STRING())
            .column_by_metadata("request_id", DataTypes.STRING(), "request.id", True)
            .column_by_metadata("http_status", DataTypes.INT(), "request.http-status", True)
            .column_by_metadata("attempts", DataTypes.INT(), "request.attempts", True)
            .column_by_metadata("error", DataTypes.STRING(), "error.reason", True)
            .build()
        )
        .option("endpoint", args.endpoint)
        .option("model", model)
        .option("request.concurrency", str(args.concurrency))
    )
    if args.rate is not None:
        responses.option("prompts.rate", str(args.rate))
    else:
        responses.option("prompts.path", str(Path(args.prompts).resolve()))
    for item in args.option:
        key, _, value = item.partition("=")
        responses.option(key.strip(), value.strip())
    t_env.create_temporary_table("responses", responses.build())
    types = {"STRING": DataTypes.STRING(), "INT": DataTypes.INT()}
    sink = Schema.new_builder()
    for name, kind in COLUMNS:
        sink.column(name, types[kind])
    t_env.create_temporary_table(
        "sink_responses",
        TableDescriptor.for_connector("filesystem")
        .schema(sink.build())
        .option("path", str(Path(args.output).resolve()))
        .format("csv")
        .build(),
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
