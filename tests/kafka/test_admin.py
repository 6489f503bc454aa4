"""Admin requests to Apache Kafka and to Exactly, answers compared field by field:
topics, partitions, records, log dirs, configs (their sources and synonyms), ACLs and
SCRAM credentials. Where they must differ, a test here pins the difference that
docs/kafka-clients.md ("Kafka beside Exactly") lists."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest

from tests.kafka.differential import (
    ALTER_CONFIGS,
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_ACLS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    INCREMENTAL_ALTER_CONFIGS,
    METADATA,
    Normalizer,
    Peer,
    compared,
    create_topics,
    retry,
    unique,
)
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import produce

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def settled(asked: Callable[[], bool], timeout: float = 30) -> None:
    """Ask again (``asked`` records its step's answer) until it says the broker has caught
    up with its own last change, or ``timeout``: the comparison then shows the last answer."""
    deadline = time.monotonic() + timeout
    while not asked() and time.monotonic() < deadline:
        time.sleep(0.05)


def answers(peer: Peer, scenario: Any, *args: Any) -> dict[str, Any]:
    """Each request's answer, normalized, by the step's name (asked again while a
    partition's leader is not known yet: Kafka's broker learns of a new topic or
    partition from its controller a moment after the request that made it)."""
    normalize, found = Normalizer(), {}

    def ask(step: str, api: int, version: int, body: dict) -> dict:
        answer = retry(lambda: peer.request(api, version, body))
        found[step] = normalize(answer)
        return answer
    scenario(ask, *args)
    return found


def same(brokers: tuple[Peer, Peer], scenario: Any, prefix: str) -> tuple[dict, dict]:
    """The scenario's answers from each broker, by step."""
    return compared(brokers, lambda peer, name: answers(peer, scenario, name), prefix)


# -- topics, partitions, records, log dirs ------------------------------------------------------


def topics_scenario(ask: Any, t: str) -> None:
    def topic(name: str, partitions: int = 1, replication: int = 1, **configs: str) -> dict:
        return {"name": name, "num_partitions": partitions, "replication_factor": replication,
                "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]}
    ask("create", CREATE_TOPICS, 4, {"timeout": 30_000, "topics": [
        topic(t, 3, retention_ms="1000000"), topic(t + "-rf2", 1, 2), topic(t + "-p0", 0),
        topic(t + "-defaults", -1, -1), topic(t + "-badcfg", cleanup_policy="bogus"),
        topic(t + "-unknowncfg", no_such_config="1"), topic("bad name!"), topic(t + "-one")]})
    ask("create again", CREATE_TOPICS, 4, {"timeout": 30_000, "topics": [topic(t, 3)]})
    ask("validate only", CREATE_TOPICS, 4, {"timeout": 30_000, "validate_only": True, "topics": [topic(t + "-v", 2)]})
    # Kafka's broker learns of the new topics from its controller a moment after
    # CreateTopics answers (on a loaded machine, seconds after): ask until it has
    settled(lambda: {topic["name"]: topic["error_code"] for topic in ask("metadata", METADATA, 8, {
        "allow_auto_topic_creation": False, "topics": [
            {"name": t}, {"name": t + "-missing"}, {"name": t + "-v"}, {"name": t + "-defaults"}]})["topics"]}
        == {t: 0, t + "-missing": 3, t + "-v": 3, t + "-defaults": 0})
    ask("grow", CREATE_PARTITIONS, 3, {"timeout": 30_000, "topics": [
        {"name": t, "count": 5, "assignments": None}, {"name": t + "-one", "count": 1, "assignments": None},
        {"name": t + "-missing", "count": 2, "assignments": None}]})
    ask("shrink", CREATE_PARTITIONS, 3, {"timeout": 30_000, "topics": [{"name": t, "count": 2, "assignments": None}]})
    # Kafka's broker learns of the grown partitions from its controller a moment after
    # CreatePartitions answers (on a loaded machine, after the next Metadata): ask until it has
    settled(lambda: len(ask("metadata after", METADATA, 8, {"allow_auto_topic_creation": False, "topics": [
        {"name": t}]})["topics"][0]["partitions"]) == 5)
    ask("delete records", DELETE_RECORDS, 2, {"timeout": 30_000, "topics": [{"name": t, "partitions": [
        {"partition_index": 0, "offset": 0}, {"partition_index": 1, "offset": 5}, {"partition_index": 2, "offset": -1},
        {"partition_index": 9, "offset": 0}]}]})
    ask("log dirs", DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": t, "partitions": [0, 1]}]})
    ask("delete", DELETE_TOPICS, 3, {"timeout": 30_000, "topic_names": [t, t + "-missing"]})


def test_topics_partitions_records_and_log_dirs_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = same(brokers, topics_scenario, "admin")
    assert exactly == kafka


def test_delete_records_moves_the_log_start_alike(brokers: tuple[Peer, Peer]) -> None:
    def scenario(peer: Peer, t: str) -> dict:
        create_topics(peer, {t: (1, {})})
        connection = peer.connection()
        for i in range(4):
            produce(connection, t, 0, encode_batch([SimpleRecord(b"v%d" % i, key=b"k", timestamp=1000)]))
        moved = [peer.request(DELETE_RECORDS, 2, {"timeout": 30_000, "topics": [{"name": t, "partitions": [
            {"partition_index": 0, "offset": offset}]}]}) for offset in (2, 1, 9, -1)]
        sizes = peer.request(DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": t, "partitions": [0]}]})
        return Normalizer()({"moved": moved, "sizes": sizes})
    kafka, exactly = compared(brokers, scenario, "delete-records")
    assert exactly == kafka


# -- configs --------------------------------------------------------------------------------------


def configs_scenario(ask: Any, t: str) -> None:
    def describe(step: str, name: str, keys: list[str] | None, resource: int = TOPIC) -> dict:
        return ask(step, DESCRIBE_CONFIGS, 2, {"include_synonyms": True, "resources": [
            {"resource_type": resource, "resource_name": name, "configuration_keys": keys}]})

    def incremental(step: str, *changes: tuple[str, int, str | None], name: str = t) -> None:
        ask(step, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{"resource_type": TOPIC, "resource_name": name, "configs": [
            {"name": key, "config_operation": op, "value": value} for key, op, value in changes]}]})
    ask("create", CREATE_TOPICS, 4, {"timeout": 30_000, "topics": [{
        "name": t, "num_partitions": 1, "replication_factor": 1,
        "configs": [{"name": "retention.ms", "value": "1000000"}, {"name": "cleanup.policy", "value": "compact"}]}]})
    keys = ["retention.ms", "cleanup.policy", "max.message.bytes", "segment.ms", "segment.bytes", "compression.type",
            "message.timestamp.type", "min.compaction.lag.ms", "delete.retention.ms", "no.such.config"]
    # Kafka's broker learns of a topic's configs from its controller a moment after the
    # change is answered (on a loaded machine, after the next Describe): ask until it has
    settled(lambda: value_of(describe("described", t, keys), "retention.ms") == "1000000")
    describe("missing topic", t + "-missing", None)
    incremental("incremental", ("cleanup.policy", APPEND, "delete"), ("retention.ms", DELETE, None),
                ("max.message.bytes", SET, "2000"))
    settled(lambda: value_of(describe("after incremental", t, keys), "max.message.bytes") == "2000")
    incremental("subtract", ("cleanup.policy", SUBTRACT, "compact"))
    incremental("not a number", ("max.message.bytes", SET, "abc"))
    incremental("unknown name", ("no.such.config", SET, "1"))
    incremental("append to a non-list", ("retention.ms", APPEND, "1"))
    incremental("missing topic", ("retention.ms", SET, "1"), name=t + "-missing")
    ask("alter", ALTER_CONFIGS, 1, {"resources": [{"resource_type": TOPIC, "resource_name": t, "configs": [
        {"name": "segment.ms", "value": "3600000"}]}]})
    settled(lambda: value_of(describe("after alter", t, keys), "segment.ms") == "3600000")
    describe("broker", "1", ["num.partitions", "auto.create.topics.enable", "message.max.bytes", "log.cleanup.policy",
                             "transaction.max.timeout.ms", "log.retention.ms", "offsets.topic.num.partitions",
                             "log.segment.bytes"], BROKER)
    describe("another broker", "7", None, BROKER)


def value_of(described: dict, name: str) -> str | None:
    """The value of config ``name`` in a DescribeConfigs answer for one resource."""
    return next((c["value"] for c in described["results"][0]["configs"] if c["name"] == name), None)


def test_configs_sources_and_synonyms_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = same(brokers, configs_scenario, "configs")
    for config in kafka["broker"]["results"][0]["configs"]:
        config["read_only"] = True  # pinned below: Exactly's broker configs are all static
    assert exactly == kafka


def test_a_topic_has_kafka_3s_configs_and_kafka_4_adds_remote_storage_and_compression_levels(
        brokers: tuple[Peer, Peer]) -> None:
    """Every topic config both brokers have reads the same; Kafka 4 removed two that
    Exactly keeps from Kafka 3 and added some for features Exactly has not (tiered
    storage, compression levels, a cap on decompressed batches, share groups' dead-letter
    queues); ``flush.ms`` is
    0 on Exactly (every write is fsynced at once) and ``min.insync.replicas`` a
    cluster-wide dynamic default on a Kafka 4 node formatted with ELR (KIP-966); Kafka
    4.0 bounds ``message.timestamp.after.max.ms`` by default (KIP-1030), Exactly keeps
    Kafka 3's unbounded default."""
    def configs(peer: Peer, t: str) -> dict[str, dict]:
        create_topics(peer, {t: (1, {})})
        answer = peer.request(DESCRIBE_CONFIGS, 2, {"include_synonyms": True, "resources": [
            {"resource_type": TOPIC, "resource_name": t, "configuration_keys": None}]})
        return {c["name"]: c for c in Normalizer()(answer)["results"][0]["configs"]}
    t = unique("all-configs")
    kafka, exactly = (configs(peer, t) for peer in brokers)
    assert set(exactly) - set(kafka) == {"message.downconversion.enable", "message.timestamp.difference.max.ms"}
    assert set(kafka) - set(exactly) == {
        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level", "errors.deadletterqueue.group.enable",
        "max.decompressed.message.bytes",
        "local.retention.bytes", "local.retention.ms", "remote.log.copy.disable", "remote.log.delete.on.disable",
        "remote.storage.enable", "remote.copy.lag.bytes", "remote.copy.lag.ms"}
    assert (exactly["flush.ms"]["value"], kafka["flush.ms"]["value"]) == ("0", str(2**63 - 1))
    assert (exactly["min.insync.replicas"]["config_source"], kafka["min.insync.replicas"]["config_source"]) == (5, 3)
    after = "message.timestamp.after.max.ms"  # Kafka 4.0's new default (KIP-1030): 1 hour
    assert (exactly[after]["value"], kafka[after]["value"]) == (str(2**63 - 1), "3600000")
    shared = set(exactly) & set(kafka) - {"flush.ms", "min.insync.replicas", after}
    assert {n: exactly[n] for n in shared} == {n: kafka[n] for n in shared}


def test_broker_configs_are_read_only_on_exactly_where_kafka_changes_some_at_run_time(
        brokers: tuple[Peer, Peer]) -> None:
    def alter(peer: Peer) -> tuple[bool, int]:
        described = peer.request(DESCRIBE_CONFIGS, 2, {"include_synonyms": False, "resources": [
            {"resource_type": BROKER, "resource_name": "1", "configuration_keys": ["log.cleanup.policy"]}]})
        altered = peer.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": True, "resources": [
            {"resource_type": BROKER, "resource_name": "1", "configs": [
                {"name": "log.cleanup.policy", "config_operation": SET, "value": "compact"}]}]})
        return described["results"][0]["configs"][0]["read_only"], altered["responses"][0]["error_code"]
    kafka, exactly = brokers
    assert alter(kafka) == (False, 0)
    assert alter(exactly) == (True, 42)  # INVALID_REQUEST: a restart changes it


# -- ACLs ------------------------------------------------------------------------------------------

LITERAL, PREFIXED, ANY, MATCH = 3, 4, 1, 2
ALLOW, DENY = 3, 2
READ, WRITE = 3, 4
GROUP = 3


def acl(resource_type: int, name: str, pattern: int, principal: str, operation: int, permission: int,
        host: str = "*") -> dict:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": host, "operation": operation, "permission_type": permission}


def acls_scenario(ask: Any, t: str) -> None:
    def describe(step: str, resource_type: int = ANY, name: str | None = None, pattern: int = ANY,
                 principal: str | None = None) -> None:
        ask(step, DESCRIBE_ACLS, 3, {"resource_type_filter": resource_type, "resource_name_filter": name,
                                     "pattern_type_filter": pattern, "principal_filter": principal, "host_filter": None,
                                     "operation": ANY, "permission_type": ANY})
    ask("create", CREATE_ACLS, 3, {"creations": [
        acl(TOPIC, t, LITERAL, "User:alice", READ, ALLOW), acl(TOPIC, t + "-", PREFIXED, "User:bob", WRITE, DENY, "10.0.0.1"),
        acl(GROUP, t + "-g", LITERAL, "User:alice", READ, ALLOW)]})
    for i, invalid in enumerate([acl(TOPIC, t, ANY, "User:alice", READ, ALLOW), acl(TOPIC, t, MATCH, "User:alice", READ, ALLOW),
                                 acl(TOPIC, t, LITERAL, "alice", READ, ALLOW), acl(TOPIC, "", LITERAL, "User:alice", READ, ALLOW),
                                 acl(TOPIC, t, LITERAL, "User:alice", ANY, ALLOW)]):
        ask(f"invalid creation {i}", CREATE_ACLS, 3, {"creations": [invalid]})
    describe("by name", name=t)
    describe("matching", name=t + "-x", pattern=MATCH)
    describe("prefixed", TOPIC, t + "-", PREFIXED)
    describe("by principal", name=t, principal="User:alice")
    describe("groups", GROUP, t + "-g")
    ask("delete", DELETE_ACLS, 3, {"filters": [
        {"resource_type_filter": TOPIC, "resource_name_filter": t, "pattern_type_filter": LITERAL, "principal_filter": None,
         "host_filter": None, "operation": ANY, "permission_type": ANY},
        {"resource_type_filter": ANY, "resource_name_filter": t + "-nothing", "pattern_type_filter": ANY,
         "principal_filter": None, "host_filter": None, "operation": ANY, "permission_type": ANY}]})
    describe("after delete", name=t)
    ask("delete the rest", DELETE_ACLS, 3, {"filters": [
        {"resource_type_filter": ANY, "resource_name_filter": name, "pattern_type_filter": ANY, "principal_filter": None,
         "host_filter": None, "operation": ANY, "permission_type": ANY} for name in (t + "-", t + "-g")]})


def test_acls_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = same(brokers, acls_scenario, "acls")
    for crashes in ("invalid creation 0", "invalid creation 1", "invalid creation 4"):  # pinned below
        assert kafka.pop(crashes) == {"results": [{"error_code": -1}]}
        assert exactly.pop(crashes) == {"results": [{"error_code": 42}]}
    assert exactly == kafka


@pytest.mark.parametrize("invalid", [dict(pattern=ANY), dict(pattern=MATCH), dict(permission=ANY)])
def test_an_acl_of_a_filter_value_is_invalid_request_where_kafka_fails_the_whole_request(
        brokers: tuple[Peer, Peer], invalid: dict) -> None:
    """Kafka 4.4 throws (IllegalArgumentException in AclApis) on a creation whose
    pattern type is ANY or MATCH, or whose permission type is ANY (filter values, not
    an ACL's), answering UNKNOWN_SERVER_ERROR for every creation of the request;
    Exactly answers INVALID_REQUEST for that creation alone and makes the others."""
    t = unique("acl-any")
    bad = acl(TOPIC, t, invalid.get("pattern", LITERAL), "User:alice", READ, invalid.get("permission", ALLOW))
    creations = {"creations": [bad, acl(TOPIC, t, LITERAL, "User:alice", READ, ALLOW)]}
    kafka, exactly = (peer.request(CREATE_ACLS, 3, creations)["results"] for peer in brokers)
    assert [r["error_code"] for r in kafka] == [-1, -1]
    assert [r["error_code"] for r in exactly] == [42, 0]
    brokers[1].request(DELETE_ACLS, 3, {"filters": [{"resource_type_filter": ANY, "resource_name_filter": t, "pattern_type_filter": ANY,
                                                     "principal_filter": None, "host_filter": None, "operation": ANY,
                                                     "permission_type": ANY}]})


def test_an_alter_configs_naming_a_resource_twice_is_never_answered_by_kafka(brokers: tuple[Peer, Peer]) -> None:
    """Kafka 4.4 leaves an AlterConfigs naming one resource twice unanswered (the
    connection waits); Exactly answers INVALID_REQUEST for it, as Kafka's
    IncrementalAlterConfigs does ("Duplicate resource in request")."""
    twice = {"validate_only": True, "resources": [{"resource_type": TOPIC, "resource_name": "twice", "configs": []}] * 2}
    kafka, exactly = brokers
    with pytest.raises(TimeoutError):
        kafka.connection(timeout=5).request(ALTER_CONFIGS, 2, twice)
    assert [r["error_code"] for r in exactly.request(ALTER_CONFIGS, 2, twice)["responses"]] == [42, 42]


# -- SCRAM credentials, the cluster ------------------------------------------------------------------


SHA_256, SHA_512 = 1, 2


def scram_scenario(ask: Any, user: str) -> None:
    def upsertion(name: str, mechanism: int, iterations: int = 8192) -> dict:
        return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": b"saltsalt",
                "salted_password": b"x" * (32 if mechanism == SHA_256 else 64)}
    ask("add", ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [
        upsertion(user, SHA_256), upsertion(user + "-512", SHA_512, 4096), upsertion(user + "-few", SHA_256, 100),
        upsertion(user + "-unknown", 0), upsertion("", SHA_256)]})
    ask("twice in one request", ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [
        upsertion(user + "-twice", SHA_256), upsertion(user + "-twice", SHA_512)]})
    # Kafka's broker learns of credentials from its controller a moment after they are
    # altered (on a loaded machine, after the next Describe): ask until it has
    settled(lambda: ask("described", DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [
        {"name": user}, {"name": user + "-512"}, {"name": user + "-twice"}, {"name": user + "-none"}]}
    )["results"][0]["error_code"] == 0)
    ask("delete and re-add", ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [{"name": user, "mechanism": SHA_256}],
                                                               "upsertions": [upsertion(user, SHA_256)]})
    ask("delete", ALTER_USER_SCRAM_CREDENTIALS, 0, {"upsertions": [], "deletions": [
        {"name": user, "mechanism": SHA_256}, {"name": user + "-512", "mechanism": SHA_512},
        {"name": user + "-none", "mechanism": SHA_256}]})
    settled(lambda: ask("described after", DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": user}]}
                        )["results"][0]["error_code"] != 0)
    ask("cluster", DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})


def test_scram_credentials_and_the_cluster_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = same(brokers, scram_scenario, "scram")
    assert exactly == kafka
