"""'format' = 'dspark-vllm': what only the format has, its 'fail' choice and its option check.

The format's rows and error rows ('on-error' = 'column' and 'skip') are checked beside the other routes of
the parse step in tests/test_flink_parse.py; Kafka's table in tests/test_kafka.py.
"""

from __future__ import annotations

import pytest

from tests.flink_support import mixed_bodies

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.flink, pytest.mark.slow]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("format")
    (root / "in").mkdir()
    (root / "in" / "bodies.jsonl").write_bytes(b"\n".join(mixed_bodies(25)) + b"\n")
    return root


def test_fail_fails_the_job_with_the_reason(root):
    from connector.flink import local_environment

    env, t_env = local_environment()
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE failing (id STRING) WITH (
            'connector' = 'filesystem', 'path' = '{root / "in"}', 'format' = 'dspark-vllm',
            'dspark-vllm.profile' = 'coder', 'dspark-vllm.on-error' = 'fail'
        )""")
    # PyFlink raises its Py4J error; the text is checked.
    with pytest.raises(Exception) as caught, t_env.execute_sql("SELECT id FROM failing").collect() as rows:  # noqa: PT011
        for _ in rows:
            pass
    assert "a rejected body ('dspark-vllm.on-error' = 'fail')" in str(caught.value)


def test_a_misspelt_format_option_is_refused_when_planned(root):
    """Every 'dspark-vllm.*' key reaches the planner: 'dspark-vllm.on-eror' = 'fail' was ignored (the default
    'column' kept, the user never told) and 'dspark-vllm.foo' accepted."""
    from connector.flink import local_environment

    env, t_env = local_environment()
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE misspelt (id STRING, error_reason STRING) WITH (
            'connector' = 'filesystem', 'path' = '{root / "in"}', 'format' = 'dspark-vllm',
            'dspark-vllm.on-eror' = 'fail', 'dspark-vllm.foo' = '1'
        )""")
    with pytest.raises(Exception) as caught:  # noqa: PT011 - PyFlink raises its Py4J error; the text is checked
        t_env.sql_query("SELECT id FROM misspelt").explain()
    assert "'format' = 'dspark-vllm' has no option 'dspark-vllm.foo', 'dspark-vllm.on-eror'" in str(caught.value)
