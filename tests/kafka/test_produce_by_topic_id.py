"""Produce v13 (KIP-516) on Apache Kafka 4.4 and on Exactly: a batch to a topic named by
its id is appended and answered under that id; an id no topic has is UNKNOWN_TOPIC_ID
and nothing is written -- answers compared field by field."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import METADATA, PRODUCE, Normalizer, Peer, compared, create_topics, plain, retry

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]


def by_id_scenario(peer: Peer, name: str) -> dict[str, Any]:
    create_topics(peer, {name: (1, {})})
    normalize = Normalizer()
    connection = peer.connection()
    described = plain(connection.request(METADATA, 12, {"topics": [{"name": name}],
                                                         "allow_auto_topic_creation": False}))
    topic_id = uuid.UUID(str(described["topics"][0]["topic_id"]))
    steps: dict[str, Any] = {}
    for step, target in (("known-id", topic_id), ("unknown-id", uuid.uuid4())):
        batch = encode_batch([SimpleRecord(step.encode(), timestamp=1_700_000_000_000)])
        answer = retry(lambda: plain(connection.request(PRODUCE, 13, {
            "transactional_id": None, "acks": -1, "timeout": 30_000,
            "topic_data": [{"topic_id": target, "partition_data": [{"index": 0, "records": batch}]}]})))
        answered_id = answer["responses"][0]["topic_id"]
        steps[step + "-answered-under-its-id"] = uuid.UUID(str(answered_id)) == target
        steps[step] = normalize(answer)
    return steps


def test_produce_v13_by_topic_id_is_answered_the_same(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, by_id_scenario, "produce-v13")
    assert kafka["unknown-id"]["responses"][0]["partition_responses"][0]["error_code"] == 100
    assert kafka["known-id-answered-under-its-id"] and kafka["unknown-id-answered-under-its-id"]
    assert exactly == kafka
