"""Flink's own 'openai' model provider (flink-model-openai 2.3.0, from Maven Central: deploy/maven) in a PyFlink job
against the project's simulator: `CREATE MODEL ... WITH ('provider' = 'openai')` + `ML_PREDICT` answers every
prompt, through `tests.maven.use_openai_model` (what the benchmarks use to run Flink's model beside ours)."""

from __future__ import annotations

import json
import urllib.request

import pytest

pytest.importorskip("pyflink")

from connector.simulator import testing  # noqa: E402
from tests.maven import MavenUnavailable, use_openai_model  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]

PROMPTS = 12


def test_flinks_openai_model_answers_every_prompt_from_the_simulator():
    from connector.flink import local_environment

    with testing.serve_simulator(mode="process", profiles=("coder",), seed=5) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        env, t_env = local_environment()
        try:
            jar = use_openai_model(t_env)
        except MavenUnavailable as exc:
            pytest.skip(str(exc))
        assert jar.name == "flink-model-openai-2.3.0.jar"
        t_env.execute_sql(
            "CREATE TEMPORARY VIEW questions AS SELECT * FROM (VALUES "
            + ", ".join(f"({n}, 'Write function number {n}')" for n in range(PROMPTS))
            + ") AS t(n, question)"
        )
        t_env.execute_sql(f"""
            CREATE TEMPORARY MODEL coder INPUT (question STRING) OUTPUT (answer STRING) WITH (
                'provider' = 'openai', 'endpoint' = '{sim.url}/v1/chat/completions',
                'api-key' = 'not-checked', 'model' = '{model}', 'max-tokens' = '64')""")
        rows = list(
            t_env.sql_query(
                "SELECT n, question, answer FROM ML_PREDICT(TABLE questions, MODEL coder, DESCRIPTOR(question))"
            )
            .execute()
            .collect()
        )
        stats = sim.stats()
    assert sorted(r[0] for r in rows) == list(range(PROMPTS))  # every prompt once, its columns carried through
    for n, question, answer in rows:
        assert question == f"Write function number {n}"
        assert isinstance(answer, str) and answer.strip(), (n, answer)
    assert stats["requests /v1/chat/completions"] == PROMPTS
