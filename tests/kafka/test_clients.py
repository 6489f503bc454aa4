"""Scenarios written once with real clients (confluent-kafka, kafka-python), run against
Apache Kafka and against Exactly (``kafka_and_exactly``): what a test asserts holds on
Kafka, so a test that fails on Exactly only is a defect of Exactly's."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.differential import Peer, unique
from tests.kafka_support import read_to_end

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]


def create(peer: Peer, topic: str, partitions: int = 1) -> None:
    admin = AdminClient(peer.config())
    for future in admin.create_topics([NewTopic(topic, partitions)]).values():
        future.result(30)


def test_a_zombie_is_fenced_and_only_the_new_instances_output_is_committed(kafka_and_exactly: Peer) -> None:
    peer, t = kafka_and_exactly, unique("zombie")
    create(peer, t)
    zombie = Producer(peer.config(**{"transactional.id": t}))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(t, b"zombie", partition=0)
    assert zombie.flush(30) == 0
    fresh = Producer(peer.config(**{"transactional.id": t}))
    fresh.init_transactions(30)  # fences the zombie and aborts its open transaction
    fresh.begin_transaction()
    fresh.produce(t, b"fresh", partition=0)
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() and fenced.value.args[0].code() == KafkaError._FENCED
    del fenced, zombie  # a fenced producer's threads would go on reconnecting to a stopped broker
    committed = {"group.id": t, "isolation.level": "read_committed"}
    assert read_to_end(peer.config(**committed), t, 1) == [b"fresh"]
    assert read_to_end(peer.config(**{**committed, "isolation.level": "read_uncommitted"}), t, 1) == [
        b"zombie", b"fresh"]


def test_kafka_python_reads_committed_records_past_an_aborted_transaction(kafka_and_exactly: Peer) -> None:
    from kafka import KafkaConsumer, TopicPartition

    peer, t = kafka_and_exactly, unique("kafka-python")
    create(peer, t)
    producer = Producer(peer.config(**{"transactional.id": t}))
    producer.init_transactions(30)
    for value, commit in ((b"kept 1", True), (b"aborted", False), (b"kept 2", True)):
        producer.begin_transaction()
        producer.produce(t, value, partition=0)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    consumer = KafkaConsumer(bootstrap_servers=peer.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(t, 0)])
    consumer.seek_to_beginning()
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 2:
            break
    consumer.close()
    assert values == [b"kept 1", b"kept 2"]
