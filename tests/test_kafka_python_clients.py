"""kafka-python and aiokafka against the listener: produce, consume in a group, and
transactional producers (commit and abort) read by read_committed consumers.

kafka-python negotiates the highest versions both sides serve (Produce 9, Fetch
11, the flexible transaction APIs at v3, FindCoordinator v4 with batched keys);
aiokafka speaks no flexible version and sends the transaction APIs at v0 -- so the
two cover both ends of every advertised range."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from tests.kafka_support import KafkaBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


def subscribed(topic: str, **config: object) -> KafkaConsumer:
    """A kafka-python group consumer of ``topic`` that knows the topic's partitions before
    it joins. kafka-python 3.0.12 can otherwise end with no partitions for good: its first
    assignment, made before the topic's metadata arrived, is empty; the metadata triggers
    a second join, whose assignment already counts as done while its SyncGroup is in
    flight, so a poll whose timeout ends then never applies it (the broker's answers are
    right: JoinGroup, SyncGroup with the partition; reproduced in 3 of 25 runs under load)."""
    consumer = KafkaConsumer(**config)
    assert consumer.partitions_for_topic(topic), f"no metadata for {topic}"
    consumer.subscribe([topic])
    return consumer


def drain(consumer: KafkaConsumer, expected: int, timeout: float = 60) -> list[bytes]:
    """Poll until ``expected`` values arrived (and a short quiet poll finds no more)."""
    values: list[bytes] = []

    def arrived() -> bool:
        for records in consumer.poll(timeout_ms=200).values():
            values.extend(r.value for r in records)
        return len(values) >= expected
    eventually(arrived, timeout, f"{expected} values", interval=0)
    for records in consumer.poll(timeout_ms=500).values():
        values.extend(r.value for r in records)
    return values


# -- kafka-python ------------------------------------------------------------------------------


def test_kafka_python_admin_produce_and_group_consume(kafka: KafkaBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    admin.create_topics([NewTopic("kp", num_partitions=3, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True, acks="all")
    for i in range(30):
        producer.send("kp", b"v%02d" % i, key=b"k%d" % i)
    producer.flush(30)
    producer.close()
    consumer = subscribed("kp", bootstrap_servers=kafka.bootstrap, group_id="kp-group",
                          auto_offset_reset="earliest", enable_auto_commit=False)
    assert sorted(drain(consumer, 30)) == [b"v%02d" % i for i in range(30)]
    consumer.commit()
    committed = {p: consumer.committed(TopicPartition("kp", p)) for p in range(3)}
    assert sum(committed.values()) == 30
    consumer.close()
    assert [g["group_id"] for g in admin.list_groups()] == ["kp-group"]
    admin.delete_topics(["kp"])
    assert "kp" not in kafka.engine.topics.topic_names()
    admin.close()


def test_kafka_python_transactions_commit_and_abort(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("kt", 2)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id="kp-tx")
    producer.init_transactions()
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for p in (0, 1):
            producer.send("kt", f"{outcome}-{p}".encode(), partition=p)
        producer.flush(30)
        getattr(producer, f"{outcome}_transaction")()
    producer.close()
    committed = KafkaConsumer(bootstrap_servers=kafka.bootstrap, isolation_level="read_committed",
                              auto_offset_reset="earliest", enable_auto_commit=False)
    committed.assign([TopicPartition("kt", p) for p in (0, 1)])
    assert sorted(drain(committed, 4)) == sorted([b"commit-0", b"commit-1"] * 2)
    committed.close()
    uncommitted = KafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    uncommitted.assign([TopicPartition("kt", p) for p in (0, 1)])
    assert sorted(drain(uncommitted, 6)).count(b"abort-0") == 1  # the default isolation sees the aborted data
    uncommitted.close()


def test_kafka_python_send_offsets_to_transaction(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("src", 1)
    kafka.broker.create_topic("dst", 1)
    feeder = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    for i in range(5):
        feeder.send("src", b"in-%d" % i, partition=0)
    feeder.flush(30)
    feeder.close()
    consumer = subscribed("src", bootstrap_servers=kafka.bootstrap, group_id="kp-ctp",
                          isolation_level="read_committed", auto_offset_reset="earliest",
                          enable_auto_commit=False)
    records = drain(consumer, 5)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id="kp-ctp")
    producer.init_transactions()
    producer.begin_transaction()
    for value in records:
        producer.send("dst", value.upper(), partition=0)
    producer.send_offsets_to_transaction({TopicPartition("src", 0): OffsetAndMetadata(5, "", -1)},
                                         consumer.group_metadata())  # KIP-447: the generation goes along
    producer.commit_transaction()
    producer.close()
    assert consumer.committed(TopicPartition("src", 0)) == 5
    consumer.close()


def test_kafka_python_admin_describes_transactions_producers_cluster_and_configs(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("ops", 1, {"retention.ms": 1000})
    producer = kafka.broker.producer(transactional_id="ops-tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("ops", b"open", partition=0).get(10)
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    [listing] = [t for listings in admin.list_transactions().values() for t in listings]
    assert (listing.transactional_id, listing.producer_id, listing.state.value) == (
        "ops-tx", producer.producer_id, "Ongoing")
    described = admin.describe_transactions(["ops-tx"])["ops-tx"]
    assert described.topic_partitions == {TopicPartition("ops", 0)} and described.transaction_timeout_ms == 60000
    [state] = admin.describe_producers([TopicPartition("ops", 0)])[TopicPartition("ops", 0)].active_producers
    assert (state.producer_id, state.current_transaction_start_offset) == (producer.producer_id, 0)
    cluster = admin.describe_cluster()
    assert cluster["brokers"][0]["port"] == kafka.port and cluster["cluster_id"] == kafka.broker.cluster_id
    configs = admin.describe_configs([ConfigResource("TOPIC", "ops")])  # only what differs from the defaults
    assert {name: c["value"] for name, c in configs["topic"]["ops"].items()} == {"retention.ms": "1000"}
    admin.close()
    producer.abort_transaction()


# -- aiokafka ----------------------------------------------------------------------------------


def test_aiokafka_produce_consume_in_a_group_and_transactions(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("ak", 2)

    async def scenario() -> tuple[list[bytes], list[bytes], int | None]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True)
        await producer.start()
        for i in range(10):
            await producer.send_and_wait("ak", b"plain-%d" % i, partition=i % 2)
        await producer.stop()

        txn = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id="ak-tx")
        await txn.start()
        async with txn.transaction():
            await txn.send_and_wait("ak", b"committed", partition=0)
        await txn.begin_transaction()
        await txn.send_and_wait("ak", b"aborted", partition=1)
        await txn.abort_transaction()
        await txn.stop()

        consumer = AIOKafkaConsumer("ak", bootstrap_servers=kafka.bootstrap, group_id="ak-group",
                                    isolation_level="read_committed", auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        values: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while len(values) < 11:
                    batches = await consumer.getmany(timeout_ms=200)
                    values.extend(r.value for records in batches.values() for r in records)
            await consumer.commit()
            committed = await consumer.committed(AioTopicPartition("ak", 0))
        finally:
            await consumer.stop()

        uncommitted = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest")
        await uncommitted.start()
        uncommitted.assign([AioTopicPartition("ak", p) for p in (0, 1)])
        raw: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while len(raw) < 12:
                    batches = await uncommitted.getmany(timeout_ms=200)
                    raw.extend(r.value for records in batches.values() for r in records)
        finally:
            await uncommitted.stop()
        return values, raw, committed

    values, raw, committed = asyncio.run(scenario())
    assert sorted(values) == sorted([b"plain-%d" % i for i in range(10)] + [b"committed"])
    assert b"aborted" in raw and b"aborted" not in values
    assert committed == 7  # 5 plain records, the committed one and its marker
