"""OffsetCommit and OffsetFetch v10 (KIP-848's topic ids instead of names) on Kafka 4.4
and on Exactly, compared: a topic named by its id commits and fetches; an id no topic
has is UNKNOWN_TOPIC_ID for each of its partitions (and nothing else of the request
fails); "all offsets" answers by id. The topic's id is each broker's own: the answers
name it ``tid``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.kafka.differential import METADATA, OFFSET_COMMIT, OFFSET_FETCH, Peer, compared, create_topics, plain, retry

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]
NOBODYS = uuid.UUID("5f1b7a58-0c5e-4b7e-9d1b-000000000848")


def offsets_by_id(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (2, {})})
    connection = peer.connection()
    metadata = plain(connection.request(METADATA, 12, {"topics": [{"name": t, "topic_id": None}],
                                                        "allow_auto_topic_creation": False,
                                                        "include_topic_authorized_operations": False}))
    topic_id = metadata["topics"][0]["topic_id"]

    def ask(api: int, version: int, body: dict) -> dict:
        answer = retry(lambda: plain(connection.request(api, version, body)))
        return _named(answer, {topic_id: "tid", str(NOBODYS): "nobody's"})

    tid = uuid.UUID(topic_id)
    group = t + "-g"
    steps = {"commit": ask(OFFSET_COMMIT, 10, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                     "committed_leader_epoch": -1, "committed_metadata": "m"}]},
                   {"topic_id": NOBODYS, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                         "committed_leader_epoch": -1, "committed_metadata": None}]}]})}
    steps["fetch"] = ask(OFFSET_FETCH, 10, {"require_stable": False, "groups": [{
        "group_id": group, "member_id": None, "member_epoch": -1,
        "topics": [{"topic_id": tid, "partition_indexes": [0, 1]}, {"topic_id": NOBODYS, "partition_indexes": [3]}]}]})
    steps["fetch all"] = ask(OFFSET_FETCH, 10, {"require_stable": False, "groups": [{
        "group_id": group, "member_id": None, "member_epoch": -1, "topics": None}]})
    return steps


def _named(value: Any, names: dict[str, str]) -> Any:
    """Topic ids by name, and every list of topics in the order of those names."""
    if isinstance(value, dict):
        return {k: names.get(v, v) if k == "topic_id" else _named(v, names) for k, v in value.items()
                if k != "throttle_time_ms"}
    if isinstance(value, list):
        items = [_named(v, names) for v in value]
        return sorted(items, key=lambda v: str(v.get("topic_id"))) if all(
            isinstance(v, dict) and "topic_id" in v for v in items) else items
    return value


def test_offsets_by_topic_id_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, offsets_by_id, "offsets-by-id")
    assert exactly == kafka
    assert kafka["commit"]["topics"] == [
        {"topic_id": "nobody's", "partitions": [{"partition_index": 0, "error_code": 100}]},
        {"topic_id": "tid", "partitions": [{"partition_index": 0, "error_code": 0}]}]

