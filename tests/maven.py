"""JVM artifacts from Maven Central for tests and benchmarks: the sets of deploy/maven (fetch.sh, cached), and
`use_openai_model(t_env)`, which gives a PyFlink job Flink's own 'openai' model provider (flink-model-openai).

    from tests.maven import use_openai_model
    use_openai_model(t_env)
    t_env.execute_sql("CREATE MODEL m INPUT (q STRING) OUTPUT (a STRING) WITH ('provider' = 'openai', "
                      "'endpoint' = 'http://127.0.0.1:8000/v1/chat/completions', 'model' = '...', 'api-key' = 'x')")
    t_env.sql_query("SELECT * FROM ML_PREDICT(TABLE qs, MODEL m, DESCRIPTOR(q))")
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FETCH = ROOT / "deploy" / "maven" / "fetch.sh"


class MavenUnavailable(RuntimeError):
    """A set of deploy/maven could not be fetched; the message is fetch.sh's one line."""


def maven_set(name: str) -> list[Path]:
    """The jars of deploy/maven/NAME.pom.xml, fetched from Maven Central into the cache the first time."""
    done = subprocess.run(["bash", str(FETCH), name], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise MavenUnavailable(lines[-1] if lines else f"fetch.sh {name} failed")
    return sorted(Path(done.stdout.strip()).glob("*.jar"))


def openai_model_jar() -> Path:
    """flink-model-openai at the wheel's Flink version (deploy/maven/flink-model-openai.pom.xml)."""
    (jar,) = maven_set("flink-model-openai")
    return jar


def use_openai_model(t_env: Any) -> Path:
    """Let `t_env` (a PyFlink TableEnvironment) use `CREATE MODEL ... WITH ('provider' = 'openai')`: ADD JAR of
    flink-model-openai (as use_connector adds ours: Flink finds factories in the environment's class loader,
    which ADD JAR extends and 'pipeline.jars' set later does not). Returns the jar."""
    jar = openai_model_jar()
    t_env.execute_sql("ADD JAR '" + str(jar).replace("'", "''") + "'")
    return jar
