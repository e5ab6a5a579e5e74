"""A real Kafka broker for the `kafka` tests: deploy/kafka/start.sh on a free 127.0.0.1 port, and a client
(confluent-kafka: librdkafka, the reference client outside the JVM, with transactions, `read_committed`,
headers, tombstones and record timestamps) to make topics, write records and read them back.

The session fixture `kafka` (tests/conftest.py) starts one broker for the whole run and stops it by pid;
where Java, Maven (for the first fetch of the jars) or the client is missing the `kafka` tests skip with
one line saying why.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / "deploy" / "kafka" / "start.sh"
STOP = ROOT / "deploy" / "kafka" / "stop.sh"
FETCH = ROOT / "deploy" / "maven" / "fetch.sh"


class Unavailable(Exception):
    """What a `kafka` test needs cannot be had here (the one line is the skip's reason)."""


def maven_set(name: str) -> Path:
    """The folder of a pinned jar set of deploy/maven (fetched once a machine, cached)."""
    done = subprocess.run(["bash", str(FETCH), name], capture_output=True, text=True)
    if done.returncode != 0:
        raise Unavailable(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"fetch.sh {name} failed")
    return Path(done.stdout.strip())


def flink_kafka_jars() -> list[Path]:
    """Flink's Kafka SQL connector and what it needs beside it (deploy/maven/flink-kafka.pom.xml)."""
    jars = sorted(maven_set("flink-kafka").glob("*.jar"))
    if not any(j.name.startswith("flink-sql-connector-kafka-") for j in jars):
        raise Unavailable("deploy/maven/flink-kafka gave no flink-sql-connector-kafka jar")
    return jars


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    """A broker started by deploy/kafka/start.sh from `folder` (its pid in folder/kafka.pid)."""

    folder: Path
    bootstrap: str
    login: dict[str, str] = field(default_factory=dict)  # a SASL broker's client settings

    @property
    def client(self) -> dict[str, str]:
        """librdkafka's settings to reach this broker."""
        return {"bootstrap.servers": self.bootstrap, **self.login}

    @classmethod
    def start(cls, folder: Path, sasl_plain: str | None = None) -> Broker:
        """`sasl_plain` = "user:password": clients must log in with SASL PLAIN as that user (SASL_PLAINTEXT)."""
        env = {**os.environ, "KAFKA_SASL_PLAIN": sasl_plain} if sasl_plain else None
        done = subprocess.run(
            ["bash", str(START), str(folder), str(free_port())], capture_output=True, text=True, timeout=600, env=env
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip() or f"deploy/kafka/start.sh exited {done.returncode}")
        login = {}
        if sasl_plain:
            user, password = sasl_plain.split(":", 1)
            login = {
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
                "sasl.password": password,
            }  # fmt: skip
        return cls(folder, done.stdout.strip().splitlines()[-1], login)

    def stop(self) -> None:
        subprocess.run(["bash", str(STOP), str(self.folder)], capture_output=True, timeout=120)

    @property
    def pid(self) -> int | None:
        pidfile = self.folder / "kafka.pid"
        return int(pidfile.read_text()) if pidfile.exists() else None

    def create_topic(self, name: str, partitions: int = 1, **config: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({**self.client})
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)], operation_timeout=60)
        futures[name].result(timeout=90)

    def produce(self, topic: str, records: Iterable[dict[str, Any]], **config: Any) -> None:
        """Write `records` ({"value", "key", "partition", "timestamp" (ms), "headers"}; value None: a tombstone),
        each acknowledged by the broker (acks=all, idempotent), in order."""
        from confluent_kafka import Producer

        errors: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        producer = Producer({**self.client, "enable.idempotence": True, **config})
        for record in records:
            producer.produce(topic, on_delivery=delivered, **record)
            producer.poll(0)
        left = producer.flush(120)
        assert left == 0 and not errors, f"{left} records not delivered to {topic}; errors: {errors[:3]}"

    def consume(self, topic: str, expect: int, isolation: str = "read_committed", timeout: float = 120) -> list[Any]:
        """Every record of `topic` from the start, read until `expect` records came and a further second brought
        none (so a duplicate past `expect` is seen too), or `timeout` seconds passed."""
        import time

        from confluent_kafka import Consumer, KafkaError

        consumer = Consumer(
            {
                **self.client,
                "group.id": f"dspark-test-{topic}-{time.monotonic_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": isolation,
            }
        )
        records: list[Any] = []
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + timeout
            quiet_since = None
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    if len(records) >= expect:
                        quiet_since = quiet_since or time.monotonic()
                        if time.monotonic() - quiet_since > 1.0:
                            break
                    continue
                quiet_since = None
                if message.error():
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"reading {topic}: {message.error()}")
                records.append(message)
        finally:
            consumer.close()
        return records

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's end (high watermark): the offset the next record will get."""
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka.admin import AdminClient

        partitions = AdminClient({**self.client}).list_topics(topic, timeout=30).topics[topic]
        consumer = Consumer({**self.client, "group.id": f"dspark-test-ends-{topic}"})
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in partitions.partitions
            }
        finally:
            consumer.close()
