"""One CSV row per request: the prompts of a file sent to an endpoint, each outcome with its request id (a PyFlink job).

    python jobs/responses.py --endpoint http://127.0.0.1:8000 --prompts prompts.txt --output out
    flink run -d -m host:8081 -py jobs/responses.py --endpoint http://vllm:8000 --prompts /data/p.txt --output /out

Every prompt is one row of the 'dspark-vllm' table `responses` (a failed request or a rejected body is a row
with the metadata column `error` set), written to a filesystem sink (CSV under OUTPUT, committed at
checkpoints): request_id, response_id, model, finish_reason, http_status, attempts, error. Request ids are made
of the prompt's file, line number and line (the jar's `io.dspark.vllm.sql.FileLines.requestId`), so a prompt
sent again after a failover is recognisable: the failover test (tests/test_flink_failover.py) counts them.
"""

from __future__ import annotations

import argparse
import sys
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


def more_arguments(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompts", help="file or directory of prompts, one per line")
    source.add_argument(
        "--rate", type=int, help="instead: numbered prompts at this rate, with no end (until cancelled)"
    )


def main(argv: list[str] | None = None) -> int:
    from pyflink.table import DataTypes, Schema, TableDescriptor

    from connector.flink import prompt_job, run_job

    args, t_env, model = prompt_job("responses", __doc__.split("\n\n")[0], argv, more_arguments)
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
    for key, value in args.option:
        responses.option(key, value)
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
    return run_job("responses", result, args.detached)


if __name__ == "__main__":
    from connector.flink import run_job_script

    sys.exit(run_job_script("responses", main))
