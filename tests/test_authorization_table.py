"""Every served Kafka API is authorized: each has a row in ``exactly/app/kafka/authorization.py``'s
table, and each, sent by a principal no ACL allows anything, is answered with the
denial Kafka gives (or, for a listing, lists nothing). A new handler without a row, or
without a denied request here, fails this test -- so none can skip authorization.

The connections are ``User:ANONYMOUS`` (PLAINTEXT), with the authorizer on and no ACL."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import pytest

from exactly.app.kafka.api import APIS, ApiKey
from exactly.app.kafka.authorization import TABLE
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage import errors
from tests.conftest import data_batch
from tests.kafka_support import KafkaBroker, raw_connection

pytestmark = pytest.mark.timeout(60)

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
TOPIC_DENIED, GROUP_DENIED = errors.TopicAuthorizationFailedError.code, errors.GroupAuthorizationFailedError.code
CLUSTER_DENIED = errors.ClusterAuthorizationFailedError.code
TXN_DENIED = errors.TransactionalIdAuthorizationFailedError.code
#: a listing answered to a principal that may see none of it (checked by :func:`listed`)
FILTERED = "filtered"

T = "t"  # an existing topic
TOPIC_PARTITIONS = [{"name": T, "partitions": [{"partition_index": 0, "committed_offset": 0}]}]

#: API -> (version, request body, the denial code expected in the answer, or FILTERED)
DENIED: dict[int, tuple[int, dict, Any]] = {
    ApiKey.PRODUCE: (7, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": T, "partition_data": [{"index": 0, "records": data_batch([b"v"])}]}]}, TOPIC_DENIED),
    ApiKey.FETCH: (11, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1000, "session_epoch": -1,
                        "topics": [{"topic": T, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                "partition_max_bytes": 1000,
                                                                "current_leader_epoch": -1,
                                                                "log_start_offset": -1}]}]}, TOPIC_DENIED),
    ApiKey.LIST_OFFSETS: (5, {"replica_id": -1, "topics": [{"name": T, "partitions": [
        {"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]}, TOPIC_DENIED),
    ApiKey.METADATA: (8, {"topics": [{"name": T}], "allow_auto_topic_creation": False}, TOPIC_DENIED),
    ApiKey.OFFSET_COMMIT: (7, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                               "topics": TOPIC_PARTITIONS}, GROUP_DENIED),
    ApiKey.OFFSET_FETCH: (7, {"group_id": "g", "topics": [{"name": T, "partition_indexes": [0]}]}, GROUP_DENIED),
    ApiKey.FIND_COORDINATOR: (3, {"key": "g", "key_type": 0}, GROUP_DENIED),
    ApiKey.JOIN_GROUP: (5, {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]},
                        GROUP_DENIED),
    ApiKey.HEARTBEAT: (3, {"group_id": "g", "generation_id": 1, "member_id": "m"}, GROUP_DENIED),
    ApiKey.LEAVE_GROUP: (3, {"group_id": "g", "members": [{"member_id": "m"}]}, GROUP_DENIED),
    ApiKey.SYNC_GROUP: (3, {"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": []},
                        GROUP_DENIED),
    ApiKey.DESCRIBE_GROUPS: (3, {"groups": ["g"], "include_authorized_operations": True}, GROUP_DENIED),
    ApiKey.LIST_GROUPS: (2, {}, FILTERED),
    ApiKey.CREATE_TOPICS: (4, {"topics": [{"name": "new", "num_partitions": 1, "replication_factor": 1,
                                           "assignments": [], "configs": []}], "timeout": 5000}, TOPIC_DENIED),
    ApiKey.DELETE_TOPICS: (3, {"topic_names": [T], "timeout": 5000}, TOPIC_DENIED),
    ApiKey.DELETE_RECORDS: (1, {"topics": [{"name": T, "partitions": [{"partition_index": 0, "offset": 0}]}],
                                "timeout": 5000}, TOPIC_DENIED),
    ApiKey.INIT_PRODUCER_ID: (4, {"transactional_id": "tx", "transaction_timeout": 60000, "producer_id": -1,
                                  "producer_epoch": -1}, TXN_DENIED),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (3, {"replica_id": -1, "topics": [{"topic": T, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, TOPIC_DENIED),
    ApiKey.ADD_PARTITIONS_TO_TXN: (3, {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 1,
                                       "v3_and_below_producer_epoch": 0,
                                       "v3_and_below_topics": [{"name": T, "partitions": [0]}]}, TXN_DENIED),
    ApiKey.ADD_OFFSETS_TO_TXN: (3, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
                                    "group_id": "g"}, TXN_DENIED),
    ApiKey.END_TXN: (3, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "committed": True},
                     TXN_DENIED),
    ApiKey.WRITE_TXN_MARKERS: (1, {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                                                "topics": [{"name": T, "partition_indexes": [0]}],
                                                "coordinator_epoch": 0}]}, CLUSTER_DENIED),
    ApiKey.TXN_OFFSET_COMMIT: (3, {"transactional_id": "tx", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
                                   "generation_id": -1, "member_id": "", "topics": TOPIC_PARTITIONS}, TXN_DENIED),
    ApiKey.DESCRIBE_ACLS: (1, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                               "permission_type": 1}, CLUSTER_DENIED),
    ApiKey.CREATE_ACLS: (1, {"creations": [{"resource_type": 2, "resource_name": T, "resource_pattern_type": 3,
                                            "principal": "User:ANONYMOUS", "host": "*", "operation": 3,
                                            "permission_type": 3}]}, CLUSTER_DENIED),
    ApiKey.DELETE_ACLS: (1, {"filters": [{"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                                          "permission_type": 1}]}, CLUSTER_DENIED),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, {"users": [{"name": "alice"}]}, CLUSTER_DENIED),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, {"deletions": [{"name": "alice", "mechanism": 1}],
                                              "upsertions": []}, CLUSTER_DENIED),
    ApiKey.DESCRIBE_CONFIGS: (2, {"resources": [{"resource_type": 2, "resource_name": T,
                                                 "configuration_keys": None}]}, TOPIC_DENIED),
    ApiKey.ALTER_CONFIGS: (1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": []}]},
                           CLUSTER_DENIED),
    ApiKey.DESCRIBE_LOG_DIRS: (3, {"topics": None}, CLUSTER_DENIED),
    ApiKey.CREATE_PARTITIONS: (2, {"topics": [{"name": T, "count": 2, "assignments": None}], "timeout": 5000},
                               TOPIC_DENIED),
    ApiKey.DELETE_GROUPS: (2, {"groups_names": ["g"]}, GROUP_DENIED),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (1, {"resources": [{"resource_type": 2, "resource_name": T, "configs": []}]},
                                       TOPIC_DENIED),
    ApiKey.OFFSET_DELETE: (0, {"group_id": "g", "topics": [{"name": T, "partitions": [{"partition_index": 0}]}]},
                           GROUP_DENIED),
    ApiKey.LIST_CONFIG_RESOURCES: (1, {"resource_types": []}, CLUSTER_DENIED),
    ApiKey.UPDATE_FEATURES: (1, {"timeout": 5000, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 1, "upgrade_type": 2}], "validate_only": False},
                             CLUSTER_DENIED),
    ApiKey.DESCRIBE_CLUSTER: (1, {"include_cluster_authorized_operations": True, "endpoint_type": 1},
                              CLUSTER_DENIED),
    ApiKey.DESCRIBE_PRODUCERS: (0, {"topics": [{"name": T, "partition_indexes": [0]}]}, TOPIC_DENIED),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, {"transactional_ids": ["tx"]}, TXN_DENIED),
    ApiKey.LIST_TRANSACTIONS: (1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
                               FILTERED),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (1, {"group_id": "g", "member_id": "m1", "member_epoch": 0,
                                          "rebalance_timeout": 30000, "subscribed_topic_names": [T],
                                          "topic_partitions": []}, GROUP_DENIED),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (1, {"group_ids": ["g"], "include_authorized_operations": False}, GROUP_DENIED),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, {"topics": [{"name": T}], "response_partition_limit": 10, "cursor": None},
                                       TOPIC_DENIED),
}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker with the authorizer on and no ACL, holding a topic, a group and a
    transactional id for the denied requests to be about."""
    with KafkaBroker(tmp_path_factory.mktemp("authz") / "data", **STANDARD) as k:
        engine = k.engine
        engine.call(engine.topics.create_topic, T, 1)
        engine.call(engine.groups.commit_offsets, "g", {(T, 0): CommittedOffset(0, "", -1, 0)})
        engine.call(engine.transactions.init_producer_id, "tx", 60_000)
        yield k


def error_codes(entity: Any) -> set[int]:
    """Every error code anywhere in a response (fields named ``*error_code``)."""
    codes: set[int] = set()
    if dataclasses.is_dataclass(entity):
        for f in dataclasses.fields(entity):
            value = getattr(entity, f.name)
            if f.name.endswith("error_code"):
                codes.add(int(value))
            else:
                codes |= error_codes(value)
    elif isinstance(entity, tuple):
        for item in entity:
            codes |= error_codes(item)
    return codes


def listed(response: Any) -> tuple:
    """What a listing answered: ListGroups' groups, ListTransactions' transactions."""
    return getattr(response, "groups", None) or getattr(response, "transaction_states", ())


def test_every_served_api_has_a_row() -> None:
    missing = sorted(ApiKey(key).name for key in APIS if key not in TABLE)
    assert not missing, f"served APIs without a row in exactly/app/kafka/authorization.py's TABLE: {missing}"


def test_every_authorized_api_has_a_denied_request_here() -> None:
    missing = sorted(ApiKey(key).name for key in APIS if TABLE.get(key) and key not in DENIED)
    assert not missing, f"add a denied request to DENIED for: {missing}"


@pytest.mark.parametrize("api", sorted(DENIED), ids=lambda key: ApiKey(key).name)
def test_a_principal_without_acls_is_denied(kafka: KafkaBroker, api: int) -> None:
    version, body, expected = DENIED[api]
    client = raw_connection(kafka.port)
    try:
        response = client.request(api, version, body)
    finally:
        client.close()
    if expected == FILTERED:
        assert listed(response) == (), response
    else:
        assert expected in error_codes(response), response
    assert not kafka.engine.topics.topic_info("new"), "CreateTopics denied created nothing"


def test_an_offset_fetch_v1_denied_answers_the_denial_per_partition(kafka: KafkaBroker) -> None:
    """v1 has no top-level error code: the group's denial is each partition's, as Kafka
    answers it, and the connection stays open."""
    client = raw_connection(kafka.port)
    try:
        body = {"group_id": "g", "topics": [{"name": T, "partition_indexes": [0, 1]}]}
        response = client.request(ApiKey.OFFSET_FETCH, 1, body)
        assert [(p.partition_index, p.committed_offset, p.error_code) for t in response.topics
                for p in t.partitions] == [(0, -1, GROUP_DENIED), (1, -1, GROUP_DENIED)]
        assert client.request(ApiKey.OFFSET_FETCH, 1, body).topics  # the same connection answers again
    finally:
        client.close()


def test_denials_are_counted_by_resource_type_and_operation(kafka: KafkaBroker) -> None:
    client = raw_connection(kafka.port)
    try:
        before = dict(kafka.engine.counters.authorization_denials)
        version, body, _ = DENIED[ApiKey.FETCH]
        client.request(ApiKey.FETCH, version, body)
    finally:
        client.close()
    after = kafka.engine.counters.authorization_denials
    assert after[("TOPIC", "READ")] == before.get(("TOPIC", "READ"), 0) + 1


def test_the_table_refuses_a_check_it_does_not_declare() -> None:
    from exactly.app.kafka.authorization import rule
    from exactly.app.security.acl import AclOperation, ResourceType

    assert rule(ApiKey.FETCH, ResourceType.TOPIC).operation is AclOperation.READ
    with pytest.raises(LookupError):
        rule(ApiKey.FETCH, ResourceType.GROUP)
