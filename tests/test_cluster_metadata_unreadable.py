"""``__cluster_metadata`` holds every user's salt, iterations, StoredKey and ServerKey:
enough to check passwords offline. Kafka's metadata log is no topic to clients, so no
option may open it: per option that could (``allow.everyone.if.no.acl.found``, ACLs
on every topic, a prefix ACL, ClusterAction, a super user, no authorizer at all),
Metadata does not list it and Fetch, ListOffsets, OffsetForLeaderEpoch,
DescribeConfigs and DescribeProducers are refused (TOPIC_AUTHORIZATION_FAILED); the
HTTP face neither lists nor reads it."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from exactly.app.http import HttpSettings, create_app
from exactly.app.kafka.api import ApiKey
from exactly.app.security import acl as model
from exactly.app.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.app.security.scram import ScramMechanism, new_credential
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.coordinator import cluster_metadata
from tests.kafka_support import KafkaBroker, raw_connection

pytestmark = pytest.mark.timeout(60)

TOPIC = cluster_metadata.TOPIC
STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
TOPIC_AUTHORIZATION_FAILED = 29
O, R = AclOperation, ResourceType


def acl(resource_type: ResourceType, name: str, operation: AclOperation,
        pattern: PatternType = PatternType.LITERAL) -> model.AclBinding:
    return model.AclBinding(model.ResourcePattern(resource_type, name, pattern),
                            model.AccessControlEntry("User:ANONYMOUS", "*", operation, AclPermissionType.ALLOW))


#: option -> (broker config, ACLs for User:ANONYMOUS): each could have opened the topic
OPTIONS = {
    "allow.everyone.if.no.acl.found": ({**STANDARD, "allow.everyone.if.no.acl.found": True}, []),
    "ALL on every topic and the cluster": (STANDARD, [acl(R.TOPIC, "*", O.ALL), acl(R.CLUSTER, CLUSTER_NAME, O.ALL)]),
    "a prefix ACL on __": (STANDARD, [acl(R.TOPIC, "__", O.ALL, PatternType.PREFIXED)]),
    "a literal ACL on the topic": (STANDARD, [acl(R.TOPIC, TOPIC, O.READ), acl(R.TOPIC, TOPIC, O.DESCRIBE_CONFIGS)]),
    "ClusterAction on the cluster": (STANDARD, [acl(R.TOPIC, "*", O.READ),
                                                acl(R.CLUSTER, CLUSTER_NAME, O.CLUSTER_ACTION)]),
    "a super user": ({**STANDARD, "super.users": "User:ANONYMOUS"}, []),
    "no authorizer": ({}, []),
}


def refusals(raw: KafkaConnection) -> dict[str, int]:
    """Each API's error for the topic (0: served)."""
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100_000, "current_leader_epoch": -1,
                 "log_start_offset": -1}
    fetch = raw.request(ApiKey.FETCH, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 100_000,
                                           "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [partition]}]})
    offsets = raw.request(ApiKey.LIST_OFFSETS, 5, {"topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    epochs = raw.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -1, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    configs = raw.request(ApiKey.DESCRIBE_CONFIGS, 2, {"resources": [
        {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}], "include_synonyms": False})
    producers = raw.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    fetched = fetch.responses[0].partitions[0]
    assert not fetched.records
    return {"Fetch": fetched.error_code, "ListOffsets": offsets.topics[0].partitions[0].error_code,
            "OffsetForLeaderEpoch": epochs.topics[0].partitions[0].error_code,
            "DescribeConfigs": configs.results[0].error_code,
            "DescribeProducers": producers.topics[0].partitions[0].error_code}


@pytest.mark.parametrize("option", OPTIONS)
def test_no_option_opens_the_credentials_to_clients(tmp_path: Path, option: str) -> None:
    config, acls = OPTIONS[option]
    with KafkaBroker(tmp_path / "data", **config) as kafka, closing(raw_connection(kafka.port)) as raw:
        engine = kafka.engine
        engine.call(engine.access.alter_scram_credentials, [],
                    [new_credential("alice", ScramMechanism.SCRAM_SHA_256, "alice-secret")])
        if acls:
            assert engine.call(engine.access.create_acls, acls) == [None] * len(acls)
        assert engine.partitions.partition_offsets(TOPIC, 0).high_watermark > 0, "the topic holds the credential"
        listed = raw.request(ApiKey.METADATA, 8, {"topics": None, "allow_auto_topic_creation": False})
        assert TOPIC not in {t.name for t in listed.topics}
        named = raw.request(ApiKey.METADATA, 8, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
        assert named.topics[0].error_code == TOPIC_AUTHORIZATION_FAILED
        assert refusals(raw) == dict.fromkeys(
            ("Fetch", "ListOffsets", "OffsetForLeaderEpoch", "DescribeConfigs", "DescribeProducers"),
            TOPIC_AUTHORIZATION_FAILED)

        api = create_app(engine, HttpSettings(), test_config={"TESTING": True}).test_client()
        cluster = engine.topics.cluster_id
        topics = api.get(f"/v3/clusters/{cluster}/topics")
        assert topics.status_code == 200 and TOPIC not in {t["topic_name"] for t in topics.json["data"]}
        read = api.get(f"/v3/clusters/{cluster}/topics/{TOPIC}/partitions/0/records")
        assert read.status_code == 403 and read.json["error_name"] == "TOPIC_AUTHORIZATION_FAILED"
        assert b"alice" not in read.data
