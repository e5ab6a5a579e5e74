"""The Flink layer of dspark-vllm: `register(t_env)` makes `'connector' = 'dspark-vllm'` tables queryable.

    from pyflink.table import EnvironmentSettings, TableEnvironment
    from connector.flink import register

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    register(t_env)
    t_env.execute_sql('''
        CREATE TABLE responses (
            id STRING, model STRING, created TIMESTAMP(3),
            usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT>,
            latency_ms DOUBLE METADATA FROM 'request.latency-ms',
            WATERMARK FOR created AS created - INTERVAL '5' SECOND
        ) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = 'bodies/')''')
    t_env.execute_sql("SELECT model, usage.prompt_tokens FROM responses").print()

Flink has no Python table sources, so the table is not built by a Flink factory: `register` reads the
declared tables back from the catalog and replaces each, under the same name, by our pipeline (see
`connector.flink.pipeline`). Tables declared before the call are replaced at once; tables declared after it
are replaced when they are created through the same environment (`execute_sql`, `create_table`,
`create_temporary_table` are wrapped). This works in PyFlink programs, locally and with `flink run -py`; it
cannot work in the SQL Client or the SQL Gateway, where no Python program runs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from pyflink.table import TableEnvironment

from connector.flink.catalog import declared_tables
from connector.flink.env import apply_settings, local_environment, ship_package
from connector.flink.pipeline import Built, build
from connector.options import CONNECTOR, validate

__all__ = ["Built", "Registry", "local_environment", "register"]

log = logging.getLogger(__name__)
_WRAPPED = ("execute_sql", "create_table", "create_temporary_table")


class Registry:
    """What `register` did for one environment: the tables it replaced (`built`) and how to re-scan."""

    def __init__(self, t_env: TableEnvironment) -> None:
        self.t_env = t_env
        self.built: dict[str, Built] = {}
        self._scanning = False

    def scan(self) -> list[Built]:
        """Replace every 'dspark-vllm' table of the current catalog and database not yet replaced."""
        if self._scanning:  # our own DDL goes through the wrapped methods too
            return []
        self._scanning = True
        try:
            return self._scan()
        finally:
            self._scanning = False

    def _scan(self) -> list[Built]:
        done = []
        for declared in list(declared_tables(self.t_env, CONNECTOR)):
            try:
                options = validate(declared.options)
            except Exception as exc:
                raise type(exc)(f"Table '{declared.name}': {exc}") from None
            ship_package(self.t_env)
            apply_settings(self.t_env, options)
            built = build(self.t_env, declared, options)
            self.built[declared.name] = built
            log.info(
                "dspark-vllm: table %s -> %s mode, errors in %s",
                declared.name,
                options["mode"],
                built.errors_table,
            )
            done.append(built)
        return done

    def _hook(self) -> None:
        for name in _WRAPPED:
            setattr(self.t_env, name, self._then_scan(getattr(self.t_env, name)))

    def _then_scan(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`original`, then a scan for tables declared by it."""

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            self.scan()
            return result

        return wrapper


def register(t_env: TableEnvironment) -> Registry:
    """Make the tables declared with `'connector' = 'dspark-vllm'` queryable, before and after this call.

    Returns the `Registry` (its `built` maps each table to its errors table and internal views). Calling it
    twice on one environment returns the first registry.
    """
    existing = getattr(t_env, "_dspark_registry", None)
    if existing is not None:
        existing.scan()
        return existing
    registry = Registry(t_env)
    registry.scan()
    registry._hook()
    t_env._dspark_registry = registry  # type: ignore[attr-defined]
    return registry
