"""ListOffsets on Apache Kafka and on Exactly, answers compared field by field: a time
inside a batch finds its record (librdkafka's 0054), the record with the largest
timestamp (-3, KIP-734), the local log start (-4) and tiered storage's -5 and -6, at
every version from 1 to 11 (a timestamp older versions do not know is
UNSUPPORTED_VERSION); LogAppendTime; a transaction's records and its marker, which
carries the time it was written; a partition asked for twice. And the topic config
Kafka 4 removed, ``message.format.version``, refused with Kafka's error and words."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import (
    ADD_PARTITIONS_TO_TXN,
    ALTER_CONFIGS,
    CREATE_TOPICS,
    DESCRIBE_CONFIGS,
    END_TXN,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_OFFSETS,
    Normalizer,
    Peer,
    compared,
    create_topics,
    init_producer_id,
    plain,
    produce,
    retry,
    unique,
)
from tests.kafka.test_admin import DELETE, SET, TOPIC
from tests.waiting import eventually

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]
#: the issue's batch: Kafka answers offset 1 for the second record's time
TIMES = [1234, 999999999999, 1500000000000]
ASKED = [0, 1234, 1235, 999999999999, 1000000000000, 1500000000000, 1500000000001, -1, -2, -3, -4, -5, -6, -7, -100]
DAY = 86_400_000


def list_offsets(peer: Peer, topic: str, timestamp: int, version: int = 11, isolation_level: int = 0,
                 partitions: tuple[int, ...] = (0,)) -> Any:
    """The answer of one ListOffsets request at ``version``, its broker-made times as ``<now>``."""
    answer = peer.request(LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": isolation_level,
                                                  "timeout": 10_000, "topics": [{"name": topic, "partitions": [
                                                      {"partition_index": p, "timestamp": timestamp,
                                                       "current_leader_epoch": -1} for p in partitions]}]})
    found = answer["topics"][0]["partitions"]
    for entry in found:
        if abs(entry["timestamp"] - time.time() * 1000) < DAY:
            entry["timestamp"] = "<now>"
    return found if len(partitions) > 1 else found[0]


def by_time(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (1, {}), t + "-appended": (1, {"message.timestamp.type": "LogAppendTime"})})
    connection = peer.connection()
    steps: dict[str, Any] = {}
    produce(connection, t, 0, encode_batch([SimpleRecord(b"v%d" % i, timestamp=ts) for i, ts in enumerate(TIMES)]))
    produce(connection, t, 0, encode_batch([SimpleRecord(b"tie", timestamp=TIMES[-1]),
                                            SimpleRecord(b"old", timestamp=5)]))
    produce(connection, t + "-appended", 0, encode_batch([SimpleRecord(b"a", timestamp=1),
                                                          SimpleRecord(b"b", timestamp=2)]))
    for version in (1, 5, 6, 7, 8, 9, 10, 11):
        for timestamp in ASKED:
            steps[f"v{version} at {timestamp}"] = list_offsets(peer, t, timestamp, version)
    steps["log append time, max"] = list_offsets(peer, t + "-appended", -3)
    steps["log append time, at 0"] = list_offsets(peer, t + "-appended", 0)
    steps["asked twice"] = list_offsets(peer, t, -3, partitions=(0, 0))
    steps["missing topic"] = list_offsets(peer, t + "-missing", -3)
    return steps


def test_lookups_by_time_and_max_timestamp_answer_alike_at_every_version(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, by_time, "by-time")
    assert kafka["v11 at 999999999999"]["offset"] == 1, "the record, not its batch"
    assert kafka["v11 at -3"]["offset"] == 2, "the first record of the largest timestamp"
    assert exactly == kafka


def in_a_transaction(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (1, {})})
    connection = peer.connection()
    steps: dict[str, Any] = {}
    init = init_producer_id(connection, t + "-tx")
    pid, epoch = init["producer_id"], init["producer_epoch"]
    retry(lambda: plain(connection.request(ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": t + "-tx", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": t, "partitions": [0]}]})))
    produce(connection, t, 0, encode_batch([SimpleRecord(b"a", timestamp=1000), SimpleRecord(b"b", timestamp=3000)],
                                           producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True),
            transactional_id=t + "-tx")
    for isolation in (0, 1):
        steps[f"open, max, isolation {isolation}"] = list_offsets(peer, t, -3, isolation_level=isolation)
        steps[f"open, at 2000, isolation {isolation}"] = list_offsets(peer, t, 2000, isolation_level=isolation)
    retry(lambda: plain(connection.request(END_TXN, 3, {"transactional_id": t + "-tx", "producer_id": pid,
                                                        "producer_epoch": epoch, "committed": True})))
    # Kafka answers EndTxn before its marker is written
    eventually(lambda: list_offsets(peer, t, -1, isolation_level=1)["offset"] == 3, 30,
               f"{peer.name}'s COMMIT marker")
    for timestamp in (-3, 2000, 3001):
        steps[f"committed, at {timestamp}"] = list_offsets(peer, t, timestamp, isolation_level=1)
    return steps


def test_a_marker_is_found_by_its_time_alike(brokers: tuple[Peer, Peer]) -> None:
    """A marker carries the time it was written, and both brokers answer it for a time
    after the transaction's records (and as the largest timestamp); a record of an open
    transaction is beyond a read_committed reader (-1)."""
    kafka, exactly = compared(brokers, in_a_transaction, "by-time-txn")
    assert kafka["committed, at 3001"]["offset"] == 2, "the COMMIT marker"
    assert exactly == kafka


def message_format_version(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (1, {})})
    steps: dict[str, Any] = {}
    old = {"name": "message.format.version", "value": "3.0-IV1"}
    for validate_only in (False, True):
        steps[f"create, validate only {validate_only}"] = peer.request(CREATE_TOPICS, 4, {
            "timeout": 30_000, "validate_only": validate_only, "topics": [
                {"name": t + "-old", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                 "configs": [old]}]})
    steps["alter"] = peer.request(ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": TOPIC, "resource_name": t, "configs": [old, {"name": "retention.ms", "value": "1000"}]}]})
    for op in (SET, DELETE):
        steps[f"incremental {op}"] = peer.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": TOPIC, "resource_name": t, "configs": [{**old, "config_operation": op}]}]})
    steps["described"] = peer.request(DESCRIBE_CONFIGS, 2, {"include_synonyms": True, "resources": [
        {"resource_type": TOPIC, "resource_name": t,
         "configuration_keys": ["message.format.version", "retention.ms"]}]})
    messages = [r.get("error_message") for step in steps.values()
                for r in step.get("topics", step.get("responses", []))]
    return {**Normalizer()(steps), "messages": messages}


def test_message_format_version_is_refused_as_kafka_4_refuses_it(brokers: tuple[Peer, Peer]) -> None:
    """Kafka 4 removed ``message.format.version`` (KIP-724): setting it is INVALID_CONFIG
    (40) "Unknown topic config name", deleting it succeeds, DescribeConfigs leaves it
    out -- on Exactly as on Kafka 4.4 (Kafka 3 took it, deprecated)."""
    kafka, exactly = compared(brokers, message_format_version, "format-version")
    assert kafka["alter"]["responses"][0]["error_code"] == 40
    assert exactly == kafka


def test_a_consumer_seeking_by_time_starts_at_the_record(kafka_and_exactly: Peer) -> None:
    """librdkafka's test 0054 with confluent-kafka: ``offsets_for_times`` in the middle of
    a batch answers the record's offset, so the consumer reads nothing older."""
    t = unique("seek-by-time")
    create_topics(kafka_and_exactly, {t: (1, {})})
    produce(kafka_and_exactly.connection(), t, 0,
            encode_batch([SimpleRecord(b"v%d" % i, timestamp=ts) for i, ts in enumerate(TIMES)]))
    consumer = Consumer(kafka_and_exactly.config(**{"group.id": t, "enable.auto.commit": False}))
    try:
        found = [consumer.offsets_for_times([TopicPartition(t, 0, ts)], timeout=30)[0]
                 for ts in (TIMES[1], TIMES[2] + 1)]
        assert [(p.offset, p.error) for p in found] == [(1, None), (-1, None)]
        consumer.assign([found[0]])
        first = consumer.poll(30)
        assert (first.offset(), first.value(), first.timestamp()[1]) == (1, b"v1", TIMES[1])
    finally:
        consumer.close()
