"""confluent-kafka (librdkafka) against the listener: admin, the idempotent producer,
read_committed consumers, transactions with consume-transform-produce, fencing, a
transaction timed out by the broker, and a consumer group that rebalances."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_support import KafkaBroker, read_to_end
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


def config(kafka: KafkaBroker, **extra: object) -> dict:
    return {"bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4", **extra}


def create_topics(kafka: KafkaBroker, **partitions: int) -> None:
    admin = AdminClient(config(kafka))
    for future in admin.create_topics([NewTopic(name, count, 1) for name, count in partitions.items()]).values():
        future.result(30)


def feed(kafka: KafkaBroker, topic: str, values: list[bytes], partitions: int) -> None:
    producer = Producer(config(kafka, **{"enable.idempotence": True}))
    for i, value in enumerate(values):
        producer.produce(topic, value, key=b"k%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def read_all(kafka: KafkaBroker, topic: str, partitions: int, isolation_level: str = "read_committed",
             timeout: float = 30) -> list[bytes]:
    """Every value of ``topic`` a fresh consumer at this isolation level reads, up to the end."""
    return read_to_end(config(kafka, **{"group.id": "reader", "enable.auto.commit": False,
                                        "isolation.level": isolation_level}), topic, partitions, timeout)


def test_admin_creates_and_deletes_topics(kafka: KafkaBroker) -> None:
    admin = AdminClient(config(kafka))
    for future in admin.create_topics([NewTopic("orders", 3, 1), NewTopic("bad", 1, 3)]).values():
        try:
            future.result(30)
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert kafka.engine.topics.topic("orders").partitions == 3
    assert "bad" not in kafka.engine.topics.topic_names()
    topics = admin.list_topics(timeout=10).topics
    assert len(topics["orders"].partitions) == 3
    for future in admin.delete_topics(["orders"]).values():
        future.result(30)
    assert "orders" not in kafka.engine.topics.topic_names()


def test_idempotent_producer_with_five_requests_in_flight_writes_each_record_once(kafka: KafkaBroker) -> None:
    create_topics(kafka, events=2)
    producer = Producer(config(kafka, **{"enable.idempotence": True, "max.in.flight": 5, "linger.ms": 1,
                                         "batch.num.messages": 20}))
    delivered: list[tuple[int, int]] = []

    def on_delivery(error, message) -> None:
        assert error is None, error
        delivered.append((message.partition(), message.offset()))

    for i in range(2000):
        producer.produce("events", b"%05d" % i, partition=i % 2, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(delivered) == 2000 and len(set(delivered)) == 2000
    values = read_all(kafka, "events", 2, isolation_level="read_uncommitted")
    assert sorted(values) == [b"%05d" % i for i in range(2000)]
    for partition in (0, 1):  # in order within each partition
        mine = [v for v in values if int(v) % 2 == partition]
        assert mine == sorted(mine)


def test_read_committed_sees_committed_transactions_only_and_lso_watermarks(kafka: KafkaBroker) -> None:
    create_topics(kafka, t=1)
    producer = Producer(config(kafka, **{"transactional.id": "writer"}))
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce("t", f"{outcome}-{i}".encode(), partition=0)
        assert producer.flush(30) == 0  # abort_transaction would purge what is still queued
        getattr(producer, f"{outcome}_transaction")(30)
    producer.begin_transaction()
    producer.produce("t", b"open", partition=0)
    assert producer.flush(30) == 0

    assert read_all(kafka, "t", 1) == [b"commit-0", b"commit-1", b"commit-2"] * 2
    assert b"abort-0" in read_all(kafka, "t", 1, isolation_level="read_uncommitted")
    committed = Consumer(config(kafka, **{"group.id": "w", "isolation.level": "read_committed"}))
    uncommitted = Consumer(config(kafka, **{"group.id": "w", "isolation.level": "read_uncommitted"}))
    # 3 x (3 records + a marker) = 12: the open transaction starts there, its record is offset 12
    assert committed.get_watermark_offsets(TopicPartition("t", 0), timeout=10, cached=False) == (0, 12)
    assert uncommitted.get_watermark_offsets(TopicPartition("t", 0), timeout=10, cached=False) == (0, 13)
    producer.abort_transaction(30)
    committed.close()
    uncommitted.close()


def test_consume_transform_produce_is_exactly_once_with_aborts(kafka: KafkaBroker) -> None:
    """Every third transaction is aborted and its input re-read from the committed
    offsets: the output, read read_committed, holds each input exactly once, and the
    group's committed offsets are the end of the input."""
    create_topics(kafka, **{"in": 3, "out": 3})
    inputs = [b"order-%03d" % i for i in range(90)]
    feed(kafka, "in", inputs, 3)
    consumer = Consumer(config(kafka, **{"group.id": "ctp", "enable.auto.commit": False,
                                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"}))
    consumer.subscribe(["in"])
    producer = Producer(config(kafka, **{"transactional.id": "ctp-1"}))
    producer.init_transactions(30)
    transactions, aborted = 0, 0

    def done() -> bool:
        committed = consumer.committed([TopicPartition("in", p) for p in range(3)], timeout=10)
        return sum(max(tp.offset, 0) for tp in committed) == len(inputs)

    def transform() -> bool:
        """One transaction of the loop (every third aborted and rewound); True once done."""
        nonlocal transactions, aborted
        if done():
            return True
        messages = [m for m in consumer.consume(num_messages=7, timeout=0.5) if not m.error()]
        if not messages:
            return False
        producer.begin_transaction()
        for message in messages:
            producer.produce("out", message.value().upper(), key=message.key(), partition=message.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        transactions += 1
        if transactions % 3 == 0:
            assert producer.flush(30) == 0  # the aborted output reaches the log first
            producer.abort_transaction(30)
            aborted += 1
            for tp in consumer.committed(consumer.assignment(), timeout=10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        else:
            producer.commit_transaction(30)
        return False
    eventually(transform, 90, "the pipeline to finish", interval=0)
    consumer.close()
    assert aborted >= 1
    output = read_all(kafka, "out", 3)
    assert sorted(output) == sorted(v.upper() for v in inputs)
    assert len(read_all(kafka, "out", 3, isolation_level="read_uncommitted")) > len(inputs)  # aborted data is there


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kafka: KafkaBroker) -> None:
    create_topics(kafka, t=1)
    zombie = Producer(config(kafka, **{"transactional.id": "fenced"}))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("t", b"zombie", partition=0)
    assert zombie.flush(30) == 0
    successor = Producer(config(kafka, **{"transactional.id": "fenced"}))
    successor.init_transactions(30)  # aborts the zombie's transaction
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    successor.begin_transaction()
    successor.produce("t", b"successor", partition=0)
    successor.commit_transaction(30)
    assert read_all(kafka, "t", 1) == [b"successor"]


def test_a_transaction_open_past_its_timeout_is_aborted_and_the_client_told(kafka: KafkaBroker) -> None:
    create_topics(kafka, t=1)
    producer = Producer(config(kafka, **{"transactional.id": "slow", "transaction.timeout.ms": 1000,
                                         "message.timeout.ms": 1000}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("t", b"too-late", partition=0)
    assert producer.flush(30) == 0
    engine = kafka.engine
    eventually(lambda: engine.call(engine.jobs.abort_timed_out_transactions) == ["slow"], what="the timeout abort")
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    assert read_all(kafka, "t", 1) == []


def test_a_group_of_read_committed_consumers_rebalances_as_members_come_and_go(kafka: KafkaBroker) -> None:
    create_topics(kafka, work=6)

    def member(name: str) -> Consumer:
        consumer = Consumer(config(kafka, **{"group.id": "workers", "client.id": name, "isolation.level": "read_committed",
                                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                                             "auto.offset.reset": "earliest"}))
        consumer.subscribe(["work"])
        return consumer

    def settle(members: list[Consumer]) -> list[set[int]]:
        """Poll every member until their assignments split the six partitions among them."""
        def split() -> list[set[int]] | None:
            for consumer in members:
                consumer.poll(0.05)
            assignments = [{tp.partition for tp in consumer.assignment()} for consumer in members]
            return assignments if sorted(p for a in assignments for p in a) == list(range(6)) and all(assignments) \
                else None
        return eventually(split, 60, f"{len(members)} members to split the six partitions", interval=0)

    first, second = member("c1"), member("c2")
    assert [len(a) for a in settle([first, second])] == [3, 3]
    third = member("c3")
    assert [len(a) for a in settle([first, second, third])] == [2, 2, 2]
    first.close()  # LeaveGroup
    assert sorted(len(a) for a in settle([second, third])) == [3, 3]
    second.close()
    third.close()
