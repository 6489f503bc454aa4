"""CreatePartitions (37) on the Kafka port, through confluent-kafka's AdminClient and
kcat: a topic grows at once (Metadata, kcat and the HTTP API see the new partitions,
which take records), only grows, on this node only, within the partition limits."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from exactly.app.http import create_app
from tests.kafka_support import KafkaBroker, outcomes

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", exactly_max_partitions=20) as k:
        client = admin(k)  # referenced until the answers are in: its handle ends with it
        for future in client.create_topics([NewTopic("t", 1, 1), NewTopic("u", 2, 1)]).values():
            future.result(timeout=30)
        yield k


def admin(kafka: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


def grow(kafka: KafkaBroker, *wanted: NewPartitions, validate_only: bool = False) -> dict[str, KafkaError | None]:
    """Each topic's outcome of one CreatePartitions request: None (grown) or its error."""
    client = admin(kafka)
    return outcomes(client.create_partitions(list(wanted), validate_only=validate_only, request_timeout=30))


def partitions(kafka: KafkaBroker, name: str) -> int:
    return len(admin(kafka).list_topics(name, timeout=30).topics[name].partitions)


def test_a_topic_grows_at_once_for_every_face(kafka: KafkaBroker) -> None:
    assert grow(kafka, NewPartitions("t", 3)) == {"t": None}
    assert partitions(kafka, "t") == 3
    listed = subprocess.run(["kcat", "-b", kafka.bootstrap, "-L", "-t", "t"], capture_output=True, text=True,
                            timeout=60, check=True).stdout
    assert "3 partitions" in listed, listed
    http = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
    answer = http.get(f"/v3/clusters/{kafka.broker.cluster_id}/topics/t")
    assert answer.json["partitions_count"] == 3
    delivered: list = []
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    producer.produce("t", b"new", partition=2, on_delivery=lambda error, message: delivered.append((error, message)))
    assert producer.flush(30) == 0
    (error, message), = delivered
    assert error is None and (message.partition(), message.offset()) == (2, 0)


def test_a_topic_only_grows(kafka: KafkaBroker) -> None:
    answer = grow(kafka, NewPartitions("u", 2), NewPartitions("t", 1), NewPartitions("missing", 4))
    assert answer["u"].code() == KafkaError.INVALID_PARTITIONS
    assert answer["t"].code() == KafkaError.INVALID_PARTITIONS
    assert answer["missing"].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert grow(kafka, NewPartitions("u", 1))["u"].code() == KafkaError.INVALID_PARTITIONS
    assert (partitions(kafka, "t"), partitions(kafka, "u")) == (1, 2)


def test_validate_only_checks_and_grows_nothing(kafka: KafkaBroker) -> None:
    assert grow(kafka, NewPartitions("t", 4), validate_only=True) == {"t": None}
    assert grow(kafka, NewPartitions("t", 1), validate_only=True)["t"].code() == KafkaError.INVALID_PARTITIONS
    assert partitions(kafka, "t") == 1


def test_new_partitions_may_be_assigned_to_this_node_only(kafka: KafkaBroker) -> None:
    node = kafka.engine.topics.node_id
    assert grow(kafka, NewPartitions("t", 3, [[node], [node]])) == {"t": None}
    other = grow(kafka, NewPartitions("t", 4, [[node + 1]]))["t"]
    assert other.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    too_few = grow(kafka, NewPartitions("u", 5, [[node]]))["u"]
    assert too_few.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "by 3 but 1" in too_few.str()
    assert (partitions(kafka, "t"), partitions(kafka, "u")) == (3, 2)


def test_the_partition_limits_are_policy_violation(kafka: KafkaBroker) -> None:
    held = grow(kafka, NewPartitions("t", 100))["t"]
    assert held.code() == KafkaError.POLICY_VIOLATION and "exactly.max.partitions" in held.str()
    answer = grow(kafka, NewPartitions("t", 6_000), NewPartitions("u", 6_000))  # 11,997 in one request
    assert {name: error.code() for name, error in answer.items()} == {"t": KafkaError.POLICY_VIOLATION,
                                                                      "u": KafkaError.POLICY_VIOLATION}
    assert "Excessively large number of partitions" in answer["u"].str()
    assert grow(kafka, NewPartitions("t", 10)) == {"t": None}
    assert partitions(kafka, "t") == 10
