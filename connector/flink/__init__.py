"""The Flink layer of dspark-vllm: `'connector' = 'dspark-vllm'` tables, found by Flink itself.

The package ships a Java table factory (`connector_jar()`); with that jar on Flink's classpath, a table
declared with `'connector' = 'dspark-vllm'` works wherever Flink SQL runs: the SQL Client (`-j JAR`), the SQL
Gateway, a SQL runner (`dspark-vllm sql FILE`), a PyFlink program. In a PyFlink program:

    from pyflink.table import EnvironmentSettings, TableEnvironment
    from connector.flink import use_connector

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    use_connector(t_env)        # the jar on 'pipeline.jars', this Python as 'python.client.executable'
    t_env.execute_sql('''
        CREATE TABLE responses (
            id STRING, model STRING, created TIMESTAMP(3),
            usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT>,
            latency_ms DOUBLE METADATA FROM 'request.latency-ms' VIRTUAL,
            WATERMARK FOR created AS created - INTERVAL '5' SECOND
        ) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = 'bodies/')''')

How it runs: the factory asks `connector.plan` (Python, on the client) to check the options and
columns and to plan the pipeline, then builds it on the JVM (`io.dspark.vllm.sql.Pipeline`): the request step
and the parse step (the native core) in the TaskManagers' JVM; with 'parse.backend' = 'gpu' the parse step is a
vectorized Python function (`connector.flink.runtime`, on the workers).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "add_jars",
    "connector_jar",
    "local_environment",
    "prompt_job",
    "register",
    "run_job",
    "run_job_script",
    "served_model",
    "use_connector",
]


def __getattr__(name: str) -> Any:
    # Imported lazily: the planner runs as `python -m connector.plan` and needs no pyflink.
    if name in __all__:
        from connector.flink import env

        return getattr(env, name)
    raise AttributeError(name)
