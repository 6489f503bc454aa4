"""Exactly-once with KIP-848 groups through crashes: two members of a transactional
consume-transform-produce application (confluent-kafka, ``group.protocol=consumer``,
tests/kip848_eos_child.py) on a served Exactly (``run.py``) that is SIGKILLed and
restarted three times on its data directory, while members are SIGKILLed, restarted
and replaced (``tests/kip848_eos.py``'s ``through_kills``, run on Kafka 4.4 too by
tests/kafka/test_consumer_group_eos.py). Then every input record is in the output
exactly once, in order, and the group's committed offsets are at the input's end."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kip848_eos import through_kills
from tests.kip848_eos_child import client_config
from tests.test_kafka_crash import ServedBroker
from tests.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PER_PARTITION = 150
#: members fenced within seconds of a SIGKILL; heartbeats often, so reconciliation is quick
GROUP_CONFIG = {"group.consumer.session.timeout.ms": 6000, "group.consumer.heartbeat.interval.ms": 500}


def test_transactional_application_with_consumer_groups_survives_broker_and_member_kills(tmp_path: Path) -> None:
    broker = ServedBroker(tmp_path / "data", GROUP_CONFIG)
    try:
        through_kills(broker, tmp_path, PER_PARTITION)
    finally:
        broker.stop()


def test_offsets_join_a_transaction_right_after_a_broker_sigkill(tmp_path: Path) -> None:
    """What the members' client config (``client_config``) works around: after its only
    broker was SIGKILLed and restarted, a transactional producer sends the group's offsets
    of its next transaction within the call's timeout. With librdkafka's default
    ``metadata.recovery.strategy`` (rebootstrap) the call never returns."""
    broker = ServedBroker(tmp_path / "data", GROUP_CONFIG)
    try:
        config = client_config(broker.bootstrap)
        admin = AdminClient(config)
        admin.create_topics([NewTopic("after-kill", 1, 1)])["after-kill"].result(30)
        consumer = Consumer({**config, "group.id": "after-kill", "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["after-kill"])
        eventually(lambda: consumer.poll(0.1) is None and consumer.assignment(), 60, "the member's assignment")
        producer = Producer({**config, "transactional.id": "after-kill"})
        producer.init_transactions(30)
        outcome: list[object] = []

        def transaction(offset: int) -> None:
            try:
                producer.begin_transaction()
                producer.produce("after-kill", b"v", partition=0)
                producer.send_offsets_to_transaction([TopicPartition("after-kill", 0, offset)],
                                                     consumer.consumer_group_metadata(), 10)
                producer.commit_transaction(30)
                outcome.append("committed")
            except KafkaException as e:
                outcome.append(e)

        transaction(1)  # the group's coordinator is now in the producer's cache
        assert outcome == ["committed"]
        broker.kill()
        broker.start()

        def group_offset() -> int | None:
            consumer.poll(0.1)
            try:
                return consumer.committed([TopicPartition("after-kill", 0)], 5)[0].offset
            except KafkaException:  # the restarted broker does not serve the group yet
                return None

        eventually(lambda: group_offset() == 1, 60, "the restarted broker to serve the group")
        threading.Thread(target=transaction, args=(2,), daemon=True).start()  # a hung call is left behind
        eventually(lambda: consumer.poll(0.1) is None and len(outcome) == 2, 60,
                   "send_offsets_to_transaction to return (it has a 10 s timeout)")
        assert outcome[1] == "committed"
        assert group_offset() == 2
        consumer.close()
    finally:
        broker.stop()
