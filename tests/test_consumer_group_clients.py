"""KIP-848 consumer groups with a real client: librdkafka's ``group.protocol=consumer``
(confluent-kafka) against Exactly's Kafka listener -- consuming, rebalancing a
second member in without two owners of a partition, committing, the group's
description over ConsumerGroupDescribe, ListGroups' type and state filters, and
the group surviving a broker restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.app.spark.kafka_client import KafkaConnection
from tests.kafka_support import KafkaBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

FAST = {"group_consumer_heartbeat_interval_ms": 500}


def _consumer(bootstrap: str, group_id: str = "g") -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["t"])
    return c


def _produce(bootstrap: str, count: int, partitions: int = 4) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        p.produce("t", str(i).encode(), partition=i % partitions)
    assert p.flush(10) == 0


def _drain(consumers: list[Consumer], wanted: int, seen: list[bytes]) -> None:
    def more() -> bool:
        for c in consumers:
            m = c.poll(0.1)
            if m is not None and not m.error():
                seen.append(m.value())
        return len(seen) >= wanted
    eventually(more, 60, f"{wanted} records consumed")


@pytest.fixture
def kafka(tmp_path: Path):
    with KafkaBroker(tmp_path / "data", **FAST) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 4, 1)])["t"].result(10)
        yield broker


def test_a_consumer_group_consumes_and_shares_partitions_without_two_owners(kafka):
    _produce(kafka.bootstrap, 100)
    a = _consumer(kafka.bootstrap)
    seen: list[bytes] = []
    _drain([a], 100, seen)
    assert sorted(int(v) for v in seen) == list(range(100))
    a.commit(asynchronous=False)
    b = _consumer(kafka.bootstrap)

    def shared() -> bool:
        a.poll(0.1)
        b.poll(0.1)
        mine, theirs = {tp.partition for tp in a.assignment()}, {tp.partition for tp in b.assignment()}
        assert not mine & theirs, f"both own {mine & theirs}"
        return len(mine) == 2 and len(theirs) == 2
    eventually(shared, 60, "two members with two partitions each")
    committed = a.committed([TopicPartition("t", p) for p in range(4)], timeout=10)
    assert [tp.offset for tp in committed] == [25, 25, 25, 25]
    _produce(kafka.bootstrap, 40)
    more: list[bytes] = []
    _drain([a, b], 40, more)
    assert sorted(int(v) for v in more) == list(range(40))
    b.close()
    a.close()


def test_tools_see_the_group_as_a_consumer_group(kafka):
    a = _consumer(kafka.bootstrap)
    eventually(lambda: a.poll(0.1) is None and len(a.assignment()) == 4, 60, "assigned")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10)
    assert [(g.group_id, g.type, g.state) for g in listed.valid] == [
        ("g", ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)]
    assert admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(10).valid == []
    described = admin.describe_consumer_groups(["g"]).get("g").result(10)
    assert described.type == ConsumerGroupType.CONSUMER
    assert [sorted(tp.partition for tp in m.assignment.topic_partitions) for m in described.members] == [[0, 1, 2, 3]]
    # DescribeGroups, the classic protocol's, describes it as Kafka 4.4 does: as if unknown
    port = int(kafka.bootstrap.rsplit(":", 1)[1])
    connection = KafkaConnection("127.0.0.1", port, "raw", 10)
    try:
        for version, error in ((5, 0), (6, 69)):  # 69: GROUP_ID_NOT_FOUND
            group = connection.request(15, version, {"groups": ["g"], "include_authorized_operations": False}).groups[0]
            assert (group.error_code.value, group.group_state, group.protocol_type, group.members) == (
                error, "Dead", "", ())
    finally:
        connection.close()
    a.close()


def test_the_group_survives_a_broker_restart(tmp_path: Path):
    data = tmp_path / "data"
    with KafkaBroker(data, **FAST) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 4, 1)])["t"].result(10)
        _produce(broker.bootstrap, 40)
        a = _consumer(broker.bootstrap)
        seen: list[bytes] = []
        _drain([a], 40, seen)
        a.commit(asynchronous=False)
        a.close()
    with KafkaBroker(data, **FAST) as broker:
        _produce(broker.bootstrap, 8)
        b = _consumer(broker.bootstrap)
        after: list[bytes] = []
        _drain([b], 8, after)
        # nothing else arrives: the committed offsets and the group were recovered
        extra = b.poll(1.0)
        assert extra is None or extra.error() is not None
        assert sorted(int(v) for v in after) == list(range(8))
        b.close()
