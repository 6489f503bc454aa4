"""Kafka 4.4's API versions and topic ids, Exactly beside the real Kafka: the versions
Exactly advertises for the APIs raised to Kafka 4's (issue 31) are Kafka's, and the
answers that carry topic ids -- Metadata v12, DescribeTopicPartitions, CreateTopics v7,
DeleteTopics v6, Fetch v13+ -- have the same shape and errors (whether an id is given,
not which: each broker draws its own)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.kafka.differential import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_ACLS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    FETCH,
    METADATA,
    Normalizer,
    Peer,
    compared,
    create_topics,
    led,
    retry,
)
from tests.kafka.test_admin import settled

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(180)]

API_VERSIONS, DESCRIBE_TOPIC_PARTITIONS = 18, 75
#: the APIs issue 31 raised here (the others' are the other pieces'), by Kafka's key
RAISED = {
    "Metadata": METADATA, "Fetch": FETCH, "CreateTopics": CREATE_TOPICS, "DeleteTopics": DELETE_TOPICS,
    "DeleteRecords": DELETE_RECORDS, "CreateAcls": 30, "DescribeAcls": DESCRIBE_ACLS, "DeleteAcls": 31,
    "DescribeConfigs": DESCRIBE_CONFIGS, "AlterConfigs": 33, "DescribeLogDirs": DESCRIBE_LOG_DIRS,
    "SaslHandshake": 17, "SaslAuthenticate": 36, "CreatePartitions": CREATE_PARTITIONS,
    "IncrementalAlterConfigs": 44, "DescribeUserScramCredentials": 50, "AlterUserScramCredentials": 51,
    "DescribeCluster": DESCRIBE_CLUSTER, "DescribeProducers": 61, "DescribeTransactions": 65,
    "ListTransactions": 66, "DescribeTopicPartitions": DESCRIBE_TOPIC_PARTITIONS, "OffsetForLeaderEpoch": 23,
}


def _versions(peer: Peer) -> dict[int, tuple[int, int]]:
    answer = peer.request(API_VERSIONS, 3, {"client_software_name": "raw-test", "client_software_version": "1.0"})
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}


def test_the_raised_apis_are_served_at_kafka_4s_versions(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = (_versions(peer) for peer in brokers)
    assert {name: exactly.get(key) for name, key in RAISED.items()} == \
        {name: kafka.get(key) for name, key in RAISED.items()}


def ids_shown(value: Any) -> Any:
    """``value`` with each topic id as whether one is given ("id") or not (None): each
    broker draws its own, both must give one where Kafka does."""
    if isinstance(value, dict):
        return {k: ("id" if v not in (None, str(uuid.UUID(int=0))) else None) if k == "topic_id" else ids_shown(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [ids_shown(v) for v in value]
    return value


def _normalized(answer: dict) -> Any:
    """The answer normalized as the other differential tests do, its topic ids kept as
    :func:`ids_shown` shows them."""
    normalize = Normalizer()
    normalize.drop = normalize.drop - {"topic_id"}
    return normalize(ids_shown(answer))


def topic_ids_scenario(peer: Peer, t: str) -> dict[str, Any]:
    """Create, describe by name and by id, page through, fetch by id, delete by id, and
    ask again with the id of the deleted topic."""
    steps: dict[str, Any] = {}

    def ask(step: str, api: int, version: int, body: dict) -> dict:
        answer = retry(lambda: peer.request(api, version, body))
        steps[step] = _normalized(_known_configs(answer) if api == CREATE_TOPICS else answer)
        return answer

    created = ask("create", CREATE_TOPICS, 7, {"timeout": 30_000, "topics": [
        {"name": t, "num_partitions": 3, "replication_factor": 1, "configs": [
            {"name": "retention.ms", "value": "1000000"}]},
        {"name": t + "-b", "num_partitions": 1, "replication_factor": 1, "configs": []}]})
    ask("validate only", CREATE_TOPICS, 7, {"timeout": 30_000, "validate_only": True, "topics": [
        {"name": t + "-v", "num_partitions": 2, "replication_factor": 1, "configs": [
            {"name": "cleanup.policy", "value": "compact"}]}]})
    topic_id = uuid.UUID(next(r["topic_id"] for r in created["topics"] if r["name"] == t))
    led(peer, {t: 3, t + "-b": 1})
    ask("metadata", METADATA, 12, {"allow_auto_topic_creation": False, "topics": [
        {"name": t}, {"name": t + "-missing"}]})
    ask("metadata by id", METADATA, 12, {"allow_auto_topic_creation": False, "topics": [
        {"name": None, "topic_id": topic_id}]})
    ask("metadata v13", METADATA, 13, {"allow_auto_topic_creation": False, "topics": [{"name": t + "-b"}]})
    ask("describe partitions", DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [
        {"name": t}, {"name": t + "-b"}, {"name": t + "-missing"}], "response_partition_limit": 2})
    ask("describe partitions, page 2", DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [
        {"name": t}, {"name": t + "-b"}], "response_partition_limit": 2,
        "cursor": {"topic_name": t, "partition_index": 2}})
    fetched = {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "topics": [
        {"topic_id": topic_id, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    ask("fetch by id", FETCH, 16, fetched)
    ask("delete by id", DELETE_TOPICS, 6, {"timeout": 30_000, "topics": [{"name": None, "topic_id": topic_id},
                                                                         {"name": t + "-b", "topic_id": None}]})
    gone = {"allow_auto_topic_creation": False, "topics": [{"name": None, "topic_id": topic_id}]}
    # Kafka's broker learns of the deletion from its controller a moment after DeleteTopics answers
    settled(lambda: peer.request(METADATA, 12, gone)["topics"][0]["error_code"] != 0)
    ask("metadata of the deleted id", METADATA, 12, gone)
    ask("fetch the deleted id", FETCH, 16, fetched)
    ask("delete the deleted id", DELETE_TOPICS, 6, {"timeout": 30_000, "topics": [{"name": None, "topic_id": topic_id}]})
    return steps


def differences(kafka: Any, exactly: Any, path: str = "") -> list[str]:
    """Where two normalized answers differ, one line each: ``path: kafka's != exactly's``."""
    if isinstance(kafka, dict) and isinstance(exactly, dict):
        return [line for key in sorted(kafka.keys() | exactly.keys())
                for line in differences(kafka.get(key, "<absent>"), exactly.get(key, "<absent>"), f"{path}.{key}")]
    if isinstance(kafka, list) and isinstance(exactly, list) and len(kafka) == len(exactly):
        return [line for i, (k, e) in enumerate(zip(kafka, exactly)) for line in differences(k, e, f"{path}[{i}]")]
    return [] if kafka == exactly else [f"{path}: {kafka!r} != {exactly!r}"]


#: topic configs both brokers know and take from the same place (Kafka has more, and
#: Kafka 4 formats min.insync.replicas as a dynamic cluster default)
CONFIGS = frozenset({"cleanup.policy", "retention.ms", "segment.bytes", "max.message.bytes", "compression.type",
                     "message.timestamp.type", "delete.retention.ms"})


def _known_configs(answer: dict) -> dict:
    """A CreateTopics answer with only the :data:`CONFIGS` of each topic."""
    return {**answer, "topics": [{**t, "configs": t["configs"] if t.get("configs") is None else
                                  [c for c in t["configs"] if c["name"] in CONFIGS]} for t in answer["topics"]]}


def test_topic_ids_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, topic_ids_scenario, "topic-ids")
    found = {step: differences(kafka[step], exactly[step]) for step in kafka}
    assert not any(found.values()), "\n".join(f"{step}: {line}" for step, lines in found.items() for line in lines)


#: broker configs of every type both brokers know
BROKER_CONFIGS = ["log.segment.bytes", "log.retention.ms", "log.cleanup.policy", "log.cleaner.min.cleanable.ratio",
                  "auto.create.topics.enable", "num.partitions", "group.min.session.timeout.ms",
                  "transaction.max.timeout.ms", "log.retention.check.interval.ms", "sasl.enabled.mechanisms",
                  "listeners", "connections.max.idle.ms", "log.flush.interval.messages", "advertised.listeners",
                  "listener.security.protocol.map", "max.connections.per.ip.overrides", "ssl.keystore.type",
                  "ssl.key.password", "authorizer.class.name", "compression.type", "min.insync.replicas"]


def test_describe_configs_v4_gives_kafkas_type_of_each_config(brokers: tuple[Peer, Peer]) -> None:
    def scenario(peer: Peer, t: str) -> dict:
        create_topics(peer, {t: (1, {})})
        topic = peer.request(DESCRIBE_CONFIGS, 4, {"include_synonyms": False, "include_documentation": False,
                                                   "resources": [{"resource_type": 2, "resource_name": t,
                                                                  "configuration_keys": sorted(CONFIGS)}]})
        broker = peer.request(DESCRIBE_CONFIGS, 4, {"include_synonyms": False, "include_documentation": False,
                                                    "resources": [{"resource_type": 4, "resource_name": "1",
                                                                   "configuration_keys": BROKER_CONFIGS}]})
        return {"topic": Normalizer()(topic),
                "broker types": {c["name"]: (c["config_type"], c["documentation"])
                                 for c in broker["results"][0]["configs"]}}
    kafka, exactly = compared(brokers, scenario, "config-types")
    assert differences(kafka, exactly) == []


def test_describe_configs_documentation_is_kafkas_text_and_null_on_exactly(brokers: tuple[Peer, Peer]) -> None:
    """Asked for (v3+), Kafka gives each config's documentation; Exactly has none to
    give (docs/operations.md describes its settings) and answers null."""
    def scenario(peer: Peer, t: str) -> list:
        answer = peer.request(DESCRIBE_CONFIGS, 4, {"include_synonyms": False, "include_documentation": True,
                                                    "resources": [{"resource_type": 4, "resource_name": "1",
                                                                   "configuration_keys": ["log.retention.ms"]}]})
        return [c["documentation"] for c in answer["results"][0]["configs"]]
    kafka, exactly = compared(brokers, scenario, "config-docs")
    assert len(kafka) == 1 and "log" in kafka[0] and exactly == [None]
