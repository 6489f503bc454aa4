"""The KIP-848 exactly-once scenario on Kafka 4.4 and on Exactly alike: two members of
the transactional consume-transform-produce application (tests/kip848_eos_child.py,
confluent-kafka with ``group.protocol=consumer``), one of them replaced half way, on
the shared fixture; and through broker SIGKILLs, member kills and replacements on a
Kafka of the test's own (``through_kills``, which tests/test_consumer_group_eos.py runs
on Exactly). Every input record is in the output exactly once, in order, and the
group's committed offsets are at the input's end -- and a zombie's TxnOffsetCommit
(group metadata from before a rebalance took its partition) is fenced with
ILLEGAL_GENERATION on both."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.conftest import SHARED_CONFIG
from tests.kafka.differential import Peer
from tests.kafka.real_kafka import RealKafka
from tests.kip848_eos import Member, check_exactly_once, committed, prepare, through_kills
from tests.kip848_eos_child import PARTITIONS
from tests.waiting import eventually

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(300)]
PER_PARTITION = 100


def test_transactional_application_with_consumer_groups_is_exactly_once(kafka_and_exactly: Peer,
                                                                       tmp_path: Path) -> None:
    bootstrap = kafka_and_exactly.bootstrap
    prepare(bootstrap, PER_PARTITION)
    members = [Member(bootstrap, 0, tmp_path), Member(bootstrap, 1, tmp_path)]
    total = PARTITIONS * PER_PARTITION
    try:
        eventually(lambda: committed(bootstrap) >= total // 2, timeout=120, what="half the input committed")
        old = members.pop(0)
        old.stop()
        members.append(Member(bootstrap, old.slot, tmp_path))
        eventually(lambda: committed(bootstrap) == total, timeout=120, what="the whole input committed")
        for member in members:
            member.stop()
        check_exactly_once(bootstrap, PER_PARTITION)
    except BaseException as failure:
        for member in members:
            member.stop()
            failure.add_note(f"member {member.slot} on {kafka_and_exactly.name}: {member.errors()}")
        raise


@pytest.mark.timeout(600)
def test_transactional_application_with_consumer_groups_survives_kafkas_sigkills(tmp_path: Path) -> None:
    # the session and heartbeat of tests/test_consumer_group_eos.py's Exactly (Kafka's minimums are 45 s and 5 s)
    kafka = RealKafka(tmp_path / "kafka", {**SHARED_CONFIG, "group.consumer.session.timeout.ms": 6000,
                                           "group.consumer.min.session.timeout.ms": 6000,
                                           "group.consumer.heartbeat.interval.ms": 500,
                                           "group.consumer.min.heartbeat.interval.ms": 500})
    try:
        kafka.start()
        through_kills(kafka, tmp_path, PER_PARTITION)
    except (AssertionError, pytest.fail.Exception) as failure:  # a stall or a check: Kafka's own defect?
        kafka.xfail_if_markers_skipped()
        failure.add_note(f"Kafka's log: {kafka.log()[-4000:]}")
        raise
    finally:
        kafka.stop()


def _partitions(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_a_zombie_transactional_commit_is_fenced_alike(kafka_and_exactly: Peer) -> None:
    bootstrap = kafka_and_exactly.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("zombie-848", 4, 1)])["zombie-848"].result(30)

    def member() -> Consumer:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "zombie-848", "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe(["zombie-848"])
        return c

    a = member()
    eventually(lambda: a.poll(0.1) is None and _partitions(a) == {0, 1, 2, 3}, 60, "a owns every partition")
    before = a.consumer_group_metadata()
    b = member()

    def split() -> bool:
        a.poll(0.1)
        b.poll(0.1)
        return len(_partitions(a)) == 2 and len(_partitions(b)) == 2
    eventually(split, 90, "the two members to share the partitions")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "zombie-848"})
    producer.init_transactions(30)
    producer.begin_transaction()
    with pytest.raises(KafkaException) as fenced:
        producer.send_offsets_to_transaction([TopicPartition("zombie-848", min(_partitions(b)), 7)], before, 30)
    assert fenced.value.args[0].code() == KafkaError.ILLEGAL_GENERATION
    producer.abort_transaction(30)
    b.close()
    a.close()
