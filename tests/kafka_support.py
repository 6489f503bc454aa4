"""Test support for the Kafka listener: a served broker on 127.0.0.1, and a raw
protocol connection to it (``exactly/app/spark/kafka_client.py``'s, for what real clients
never send: exact versions, pipelining, bad frames)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from confluent_kafka import KafkaException

from exactly.app import Broker
from exactly.app.kafka import KafkaListener, attach
from exactly.app.listeners import bind
from exactly.app.spark.kafka_client import KafkaConnection

#: internal topics of 3 partitions instead of 50, as tests/conftest.py does
CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}
#: KIP-939 two-phase commit, off by default as in Kafka: what the Spark sink's brokers need
TWO_PHASE_COMMIT = {"transaction.two.phase.commit.enable": True}


def free_port() -> int:
    """A 127.0.0.1 port free at the time of asking (for a broker in another process)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaBroker:
    """A broker on ``data_dir`` with its Kafka listener on a free 127.0.0.1 port."""

    def __init__(self, data_dir: Path, **config: Any) -> None:
        self.broker = Broker(data_dir, **{**CONFIG, **config})
        self.engine = self.broker.engine
        self._sock = bind("127.0.0.1", 0, "Kafka")
        self.port = self._sock.getsockname()[1]
        self.listener: KafkaListener = attach(self.engine, self._sock)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()
        self.broker.close()
        self._sock.close()
        spark_admins = sys.modules.get("exactly.app.spark.kafka_admin")
        if spark_admins is not None:  # the Spark sink keeps an admin client per address
            spark_admins.forget(self.bootstrap)

    def __enter__(self) -> "KafkaBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: a v3+ ApiVersions body: KIP-511's software name and version, as Kafka validates them
SOFTWARE = {"client_software_name": "raw-test", "client_software_version": "1.0"}


def outcomes(futures: Mapping[Any, Any]) -> dict[str, Any]:
    """Each name's outcome of a confluent-kafka AdminClient call (keyed by name or by
    ConfigResource): None (done) or its KafkaError, never raised -- a traceback would
    keep the client alive."""
    result = {}
    for key, future in futures.items():
        error = future.exception(timeout=60)
        result[getattr(key, "name", key)] = error.args[0] if isinstance(error, KafkaException) else error
    return result


def raw_connection(port: int, client_id: str | None = "raw-test", timeout: float = 10) -> KafkaConnection:
    """A raw protocol connection to a broker on 127.0.0.1 (the Spark sink's own)."""
    return KafkaConnection("127.0.0.1", port, client_id, timeout)


def read_to_end(consumer_config: Mapping[str, Any], topic: str, partitions: int,
                timeout: float = 30, select: Callable[[Any], Any] = lambda message: message.value()) -> list:
    """Every value (or ``select(message)``) a fresh confluent-kafka consumer with
    ``consumer_config`` reads from the start of ``topic``'s ``partitions`` to their end
    (partition EOF), in poll order."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({**consumer_config, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values, at_end = [], set()
    deadline = time.monotonic() + timeout
    while len(at_end) < partitions:
        assert time.monotonic() < deadline, f"read {len(values)} values of {topic}, no end"
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            at_end.add(message.partition())
            continue
        at_end.discard(message.partition())
        values.append(select(message))
    consumer.close()
    return values
