"""CreateAcls / DescribeAcls / DeleteAcls on the wire: confluent-kafka's AdminClient
against a served broker with the authorizer on; Kafka's per-binding errors; the
SECURITY_DISABLED answer with it off; and ACLs that survive a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from exactly.app.kafka.api import ApiKey
from exactly.app.security import acl
from exactly.storage import filenames
from exactly.storage.errors import InvalidRequestError, SecurityDisabledError
from tests.conftest import FROZEN
from tests.kafka_support import KafkaBroker, raw_connection

pytestmark = pytest.mark.timeout(120)

#: the test's connections are User:ANONYMOUS (no SASL): a super user, as an operator's
#: admin must be to manage ACLs (ALTER / DESCRIBE on the cluster)
STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS"}
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)
ALICE_WRITES_ORDERS = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.PREFIXED, "User:alice", "*",
                                 AclOperation.WRITE, AclPermissionType.ALLOW)
BOB_MAY_NOT_READ_GROUP = AclBinding(ResourceType.GROUP, "billing", ResourcePatternType.LITERAL, "User:bob",
                                    "10.0.0.1", AclOperation.READ, AclPermissionType.DENY)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **STANDARD) as k:
        yield k


def admin(kafka: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


def create(client: AdminClient, *bindings: AclBinding) -> None:
    for future in client.create_acls(list(bindings)).values():
        assert future.result(30) is None


def describe(client: AdminClient, flt: AclBindingFilter = EVERYTHING) -> set[AclBinding]:
    return set(client.describe_acls(flt).result(30))


def test_admin_client_creates_describes_and_deletes_acls(kafka: KafkaBroker) -> None:
    client = admin(kafka)
    create(client, ALICE_WRITES_ORDERS, BOB_MAY_NOT_READ_GROUP)
    create(client, ALICE_WRITES_ORDERS)  # an existing ACL: success, no second copy
    assert describe(client) == {ALICE_WRITES_ORDERS, BOB_MAY_NOT_READ_GROUP}
    matching_orders_eu = AclBindingFilter(ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None,
                                          AclOperation.ANY, AclPermissionType.ANY)
    assert describe(client, matching_orders_eu) == {ALICE_WRITES_ORDERS}
    assert kafka.engine.access.authorize("User:alice", "10.1.1.1", acl.AclOperation.DESCRIBE, acl.ResourceType.TOPIC,
                                  "orders-eu"), "WRITE implies DESCRIBE"
    assert not kafka.engine.access.authorize("User:alice", "10.1.1.1", acl.AclOperation.READ, acl.ResourceType.TOPIC,
                                      "orders-eu")
    deny_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                   AclPermissionType.DENY)
    deleted = {f: fut.result(30) for f, fut in client.delete_acls([deny_filter, EVERYTHING]).items()}
    assert deleted[deny_filter] == [BOB_MAY_NOT_READ_GROUP]
    assert deleted[EVERYTHING] == [ALICE_WRITES_ORDERS], "an ACL two filters match is the first's"
    assert describe(client) == set()


def test_each_creation_gets_its_own_error(kafka: KafkaBroker) -> None:
    good = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:a",
            "host": "*", "operation": 3, "permission_type": 3}
    bad = [{**good, "resource_pattern_type": 2}, {**good, "principal": "nobody"}, {**good, "resource_name": ""},
           {**good, "operation": 99}, {**good, "resource_type": 1}]
    client = raw_connection(kafka.port)
    try:
        response = client.request(ApiKey.CREATE_ACLS, 3, {"creations": [good, *bad]})
        assert [r.error_code for r in response.results] == [0] + [InvalidRequestError.code] * len(bad)
        described = client.request(ApiKey.DESCRIBE_ACLS, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        assert [(r.resource_name, len(r.acls)) for r in described.resources] == [("t", 1)]
        unknown = client.request(ApiKey.DELETE_ACLS, 3, {"filters": [{
            "resource_type_filter": 0, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]})
        assert unknown.filter_results[0].error_code == InvalidRequestError.code
    finally:
        client.close()


def test_without_an_authorizer_acl_apis_answer_security_disabled(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data") as kafka:
        admin_client = admin(kafka)
        with pytest.raises(KafkaException) as raised:
            next(iter(admin_client.create_acls([ALICE_WRITES_ORDERS]).values())).result(30)
        assert raised.value.args[0].code() == SecurityDisabledError.code
        client = raw_connection(kafka.port)
        try:
            described = client.request(ApiKey.DESCRIBE_ACLS, 3, {
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
            deleted = client.request(ApiKey.DELETE_ACLS, 1, {"filters": [{
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]})
        finally:
            client.close()
        assert described.error_code == SecurityDisabledError.code
        assert deleted.filter_results[0].error_code == SecurityDisabledError.code
        assert kafka.engine.access.authorize("User:anyone", "h", acl.AclOperation.WRITE, acl.ResourceType.TOPIC, "t")
        assert kafka.engine.access.authorized_operations("User:anyone", "h", acl.ResourceType.GROUP, "g") == {
            acl.AclOperation.READ, acl.AclOperation.DESCRIBE, acl.AclOperation.DELETE, acl.AclOperation.DESCRIBE_CONFIGS,
            acl.AclOperation.ALTER_CONFIGS}
        assert "__cluster_metadata" not in kafka.engine.topics.topic_names()


def test_acls_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with KafkaBroker(data, **STANDARD) as kafka:
        client = admin(kafka)
        create(client, ALICE_WRITES_ORDERS, BOB_MAY_NOT_READ_GROUP)
        gone = AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                AclPermissionType.ANY)
        assert next(iter(client.delete_acls([gone]).values())).result(30) == [BOB_MAY_NOT_READ_GROUP]
    with KafkaBroker(data, **STANDARD) as kafka:
        assert describe(admin(kafka)) == {ALICE_WRITES_ORDERS}
        assert kafka.engine.access.authorize("User:alice", "h", acl.AclOperation.WRITE, acl.ResourceType.TOPIC, "orders1")
        assert kafka.engine.access.authorized_operations("User:alice", "h", acl.ResourceType.TOPIC, "orders1") == {
            acl.AclOperation.WRITE, acl.AclOperation.DESCRIBE}
    with KafkaBroker(data) as kafka:  # switched off: ACLs are kept, not applied
        assert kafka.engine.access.authorize("User:bob", "h", acl.AclOperation.WRITE, acl.ResourceType.TOPIC, "x")
    with KafkaBroker(data, **STANDARD) as kafka:
        assert describe(admin(kafka)) == {ALICE_WRITES_ORDERS}


def test_20000_bindings_in_one_create_acls_are_accepted_as_kafka_does(tmp_path: Path) -> None:
    """Kafka's controller writes one request's ACLs as one atomic batch of its metadata log,
    bounded by KRaft's 8 MiB batch, not by a topic's max.message.bytes (which refused this
    whole request with MESSAGE_TOO_LARGE); they are all in force. (FROZEN: the SQLite
    mirror's catching up with 20,000 ACL rows is not this test's subject.)"""
    with KafkaBroker(tmp_path / "data", **STANDARD, **FROZEN) as kafka:
        create_20000(kafka)


def create_20000(kafka: KafkaBroker) -> None:
    client = admin(kafka)
    bindings = [AclBinding(ResourceType.TOPIC, f"topic-{i:05d}", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW) for i in range(20_000)]
    futures = client.create_acls(bindings)
    assert all(future.result(60) is None for future in futures.values())
    assert len(describe(client) - {ALICE_WRITES_ORDERS}) == 20_000
    assert kafka.engine.access.authorize("User:alice", "10.1.1.1", acl.AclOperation.READ, acl.ResourceType.TOPIC,
                                  "topic-19999")


def test_a_cluster_metadata_topic_made_with_the_old_limit_is_raised_to_krafts(tmp_path: Path) -> None:
    """A data directory whose ``__cluster_metadata`` was created with the 1 MB default
    takes the 20,000 ACLs too: its limit is raised at the next change."""
    with KafkaBroker(tmp_path / "data", **STANDARD, **FROZEN) as kafka:
        create(admin(kafka), ALICE_WRITES_ORDERS)
    registry = tmp_path / "data" / filenames.TOPICS_FILE  # as an older Exactly wrote it
    topics = json.loads(registry.read_text())
    topics["__cluster_metadata"]["config"]["max.message.bytes"] = "1048588"
    registry.write_text(json.dumps(topics))
    with KafkaBroker(tmp_path / "data", **STANDARD, **FROZEN) as kafka:
        assert kafka.engine.topics.topic("__cluster_metadata").overrides["max.message.bytes"] == "1048588"
        create_20000(kafka)
