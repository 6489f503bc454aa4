"""TxnOffsetCommit fenced by member epoch (KIP-447 carried over to KIP-848 groups), as
Kafka's OffsetMetadataManager.validateTransactionalOffsetCommit answers it: a
transactional producer sending a consumer's group metadata from before a rebalance
took a partition away -- a zombie's commit -- gets ILLEGAL_GENERATION (TxnOffsetCommit
below v6 has no STALE_MEMBER_EPOCH), an abortable error, and nothing of its offsets is
committed; the same producer with the member's current metadata commits; a producer
that sends no group metadata at all (epoch -1, no member id) is not fenced, as in Kafka."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_support import KafkaBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


def _consumer(bootstrap: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe(["t"])
    return c


def _partitions(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_a_transactional_commit_with_a_stale_member_epoch_is_fenced(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data", group_consumer_heartbeat_interval_ms=300) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 4, 1)])["t"].result(10)
        a = _consumer(broker.bootstrap)
        eventually(lambda: a.poll(0.1) is None and _partitions(a) == {0, 1, 2, 3}, 60, "a owns every partition")
        before = a.consumer_group_metadata()
        b = _consumer(broker.bootstrap)

        def split() -> bool:
            a.poll(0.1)
            b.poll(0.1)
            return len(_partitions(a)) == 2 and len(_partitions(b)) == 2
        eventually(split, 60, "the two members to share the partitions")
        taken = min(_partitions(b))  # a's until the rebalance

        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "zombie-check"})
        producer.init_transactions(10)
        producer.begin_transaction()
        with pytest.raises(KafkaException) as fenced:
            producer.send_offsets_to_transaction([TopicPartition("t", taken, 7)], before, 10)
        error: KafkaError = fenced.value.args[0]
        assert error.code() == KafkaError.ILLEGAL_GENERATION, error
        assert error.txn_requires_abort() and not error.fatal()
        producer.abort_transaction(10)

        # a's current metadata commits a's own partition
        mine = min(_partitions(a))
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition("t", mine, 5)], a.consumer_group_metadata(), 10)
        producer.commit_transaction(10)
        committed = {tp.partition: tp.offset for tp in a.committed([TopicPartition("t", p) for p in range(4)], 10)}
        assert committed[mine] == 5 and committed[taken] < 0  # the zombie's offset never landed
        b.close()
        a.close()


def test_a_transactional_commit_without_group_metadata_is_not_fenced(tmp_path: Path) -> None:
    """Kafka's validateOffsetCommit lets a TxnOffsetCommit with no member id, no instance
    id and epoch -1 through even while the group has members."""
    with KafkaBroker(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 4, 1)])["t"].result(10)
        a = _consumer(broker.bootstrap)
        eventually(lambda: a.poll(0.1) is None and _partitions(a) == {0, 1, 2, 3}, 60, "a owns every partition")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "no-metadata"})
        producer.init_transactions(10)
        producer.begin_transaction()
        probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})  # never joins
        producer.send_offsets_to_transaction([TopicPartition("t", 0, 3)], probe.consumer_group_metadata(), 10)
        producer.commit_transaction(10)
        assert a.committed([TopicPartition("t", 0)], 10)[0].offset == 3
        probe.close()
        a.close()
