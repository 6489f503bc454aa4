"""exactly.replication.factor.ignore: off (the default), a replication factor above 1
is INVALID_REPLICATION_FACTOR, as Kafka answers on one broker; on, the topic is created
with its one replica, the CreateTopics answer's message and one log line saying so, on
the Kafka port and through the HTTP API alike."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from exactly.app.config import BrokerConfig
from exactly.app.http import create_app
from tests.kafka_support import KafkaBroker, outcomes

pytestmark = pytest.mark.timeout(120)


def create(kafka: KafkaBroker, *topics: NewTopic, validate_only: bool = False) -> dict[str, KafkaError | None]:
    """Each topic's outcome through confluent-kafka: None (created) or its error."""
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    return outcomes(client.create_topics(list(topics), validate_only=validate_only, request_timeout=30))


def create_raw(kafka: KafkaBroker, name: str, replication_factor: int) -> dict:
    """The CreateTopics answer's entry as kafka-python hands it over, message included."""
    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=30_000)
    try:
        answer = client.create_topics({name: {"num_partitions": 2, "replication_factor": replication_factor}},
                                      raise_errors=False)
    finally:
        client.close()
    (topic,) = answer["topics"]
    return topic


def http_create(kafka: KafkaBroker, **topic: object):
    client = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
    return client.post(f"/v3/clusters/{kafka.broker.cluster_id}/topics", json=topic)


def notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "exactly.replication.factor.ignore" in r.getMessage()]


def test_off_by_default_a_factor_above_one_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert BrokerConfig().exactly_replication_factor_ignore is False
    with KafkaBroker(tmp_path / "data") as kafka:
        answer = create(kafka, NewTopic("orders", 3, 3), NewTopic("plain", 1, 1))
        assert answer["orders"].code() == KafkaError.INVALID_REPLICATION_FACTOR
        assert answer["plain"] is None
        refused = http_create(kafka, topic_name="orders", replication_factor=3)
        assert (refused.status_code, refused.json["error_name"]) == (400, "INVALID_REPLICATION_FACTOR")
        assert set(kafka.engine.topics.topic_names()) >= {"plain"} and "orders" not in kafka.engine.topics.topic_names()
    assert not notes(caplog)


def test_on_a_factor_above_one_gets_the_one_replica_and_says_so(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="exactly.app.engine.engine")
    with KafkaBroker(tmp_path / "data", **{"exactly.replication.factor.ignore": "true"}) as kafka:
        assert create(kafka, NewTopic("checked", 1, 3), validate_only=True) == {"checked": None}
        assert "checked" not in kafka.engine.topics.topic_names() and not notes(caplog)
        assert create(kafka, NewTopic("orders", 3, 3)) == {"orders": None}
        assert kafka.engine.topics.partition_count("orders") == 3
        assert len(notes(caplog)) == 1 and "orders" in notes(caplog)[0]
        topic = create_raw(kafka, "events", 3)
        assert topic["error_code"] == 0 and "replication factor 3 requested" in topic["error_message"]
        created = http_create(kafka, topic_name="http", partitions_count=2, replication_factor=3)
        assert created.status_code == 201 and created.json["replication_factor"] == 1
        assert kafka.engine.topics.partition_count("http") == 2
        assert len(notes(caplog)) == 3
        for bad in (0, -2):  # never a replication factor, whatever the setting
            assert create_raw(kafka, f"bad{-bad}", bad)["error_code"] == KafkaError.INVALID_REPLICATION_FACTOR
        assert http_create(kafka, topic_name="bad", replication_factor=0).status_code == 400
