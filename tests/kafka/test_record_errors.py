"""KIP-467 per-record errors, on Apache Kafka and on Exactly: a batch of 100 records of
which 10 have no key, to a compacted topic. Kafka refuses the whole batch, INVALID_RECORD,
and names the 10 in the answer's RecordErrors; librdkafka fails those 10 with
INVALID_RECORD and the other 90 with its own _INVALID_DIFFERENT_RECORD (its test 0011),
and with one record per batch only the 10 fail."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import Peer, compared, create_topics, produce, unique

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]
COUNT = 100


def key(i: int) -> bytes | None:
    """Every tenth record has no key (librdkafka's 0011)."""
    return None if i % 10 == 0 else b"k%d" % i


def refused(peer: Peer, t: str) -> dict:
    create_topics(peer, {t: (1, {"cleanup.policy": "compact"})})
    now = int(time.time() * 1000)
    return produce(peer.connection(), t, 0, encode_batch([SimpleRecord(b"v", key=key(i), timestamp=now)
                                                         for i in range(COUNT)]))


def test_the_keyless_records_of_a_batch_are_named_as_kafka_names_them(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, refused, "record-errors")
    assert (kafka["error_code"], [e["batch_index"] for e in kafka["record_errors"]]) == (87, list(range(0, COUNT, 10)))
    assert exactly == kafka  # the messages too: they name the same topic


@pytest.mark.parametrize("batch_size", [None, 1], ids=["one batch", "a batch per record"])
def test_librdkafka_fails_only_the_keyless_records(kafka_and_exactly: Peer, batch_size: int | None) -> None:
    """librdkafka's test 0011, ``test_message_single_partition_record_fail``."""
    t = unique("record-errors-0011")
    create_topics(kafka_and_exactly, {t: (1, {"cleanup.policy": "compact"})})
    config = kafka_and_exactly.config(**{"linger.ms": 200, "batch.num.messages": COUNT})
    if batch_size is not None:
        config["batch.size"] = batch_size
    outcomes: Counter[str] = Counter()
    producer = Producer(config)
    for i in range(COUNT):
        producer.produce(t, value=b"v%d" % i, key=key(i), partition=0,
                         on_delivery=lambda error, _: outcomes.update([error.name() if error else "delivered"]))
    assert producer.flush(60) == 0
    del producer
    others = "delivered" if batch_size == 1 else "_INVALID_DIFFERENT_RECORD"
    assert outcomes == {"INVALID_RECORD": COUNT // 10, others: COUNT - COUNT // 10}
