"""A KIP-848 member's topics and the authorizer, as Kafka 4.4 checks them: a topic
subscribed by name that the principal may not Describe fails the heartbeat with
TOPIC_AUTHORIZATION_FAILED; a regex subscription matches only the topics the principal
may Describe (Kafka's TopicRegexResolver), and a topic it is granted later comes into
the assignment when the regex is matched again (a new topic, or the refresh interval)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.app.kafka.api import ApiKey
from exactly.app.security import acl as model
from exactly.app.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.storage.errors import TopicAuthorizationFailedError
from tests.kafka_support import KafkaBroker, raw_connection

pytestmark = pytest.mark.timeout(60)
STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}


def allow(resource_type: ResourceType, name: str, operation: AclOperation,
          pattern: PatternType = PatternType.LITERAL) -> model.AclBinding:
    return model.AclBinding(model.ResourcePattern(resource_type, name, pattern),
                            model.AccessControlEntry("User:ANONYMOUS", "*", operation, AclPermissionType.ALLOW))


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **STANDARD) as k:
        for name in ("orders-eu", "orders-us", "payments"):
            k.engine.call(k.engine.topics.create_topic, name, 1)
        k.engine.call(k.engine.access.create_acls, [allow(ResourceType.GROUP, "g", AclOperation.READ),
                                                    allow(ResourceType.TOPIC, "orders-eu", AclOperation.DESCRIBE)])
        yield k


def heartbeat(kafka: KafkaBroker, member: str, epoch: int, **subscription: Any) -> Any:
    client = raw_connection(kafka.port)
    try:
        return client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": "g", "member_id": member, "member_epoch": epoch, "rebalance_timeout": 30_000,
            "topic_partitions": [] if epoch == 0 else None, **subscription})
    finally:
        client.close()


def assigned(kafka: KafkaBroker, answer: Any) -> set[str]:
    return {kafka.engine.groups.topic_name(t.topic_id) for t in answer.assignment.topic_partitions}


def test_a_regex_matches_only_the_topics_the_member_may_describe(kafka: KafkaBroker) -> None:
    member = uuid.uuid4().hex
    joined = heartbeat(kafka, member, 0, subscribed_topic_regex="orders-.*")
    assert joined.error_code == 0
    assert assigned(kafka, joined) == {"orders-eu"}  # orders-us matches but is not describable
    kafka.engine.call(kafka.engine.access.create_acls, [allow(ResourceType.TOPIC, "orders-us", AclOperation.READ)])
    kafka.engine.call(kafka.engine.topics.create_topic, "orders-asia", 1)  # the topics change: matched again
    again = heartbeat(kafka, member, joined.member_epoch, subscribed_topic_regex="orders-.*")
    assert again.error_code == 0 and assigned(kafka, again) == {"orders-eu", "orders-us"}


def test_a_topic_subscribed_by_name_must_be_describable(kafka: KafkaBroker) -> None:
    refused = heartbeat(kafka, uuid.uuid4().hex, 0, subscribed_topic_names=["orders-eu", "payments"])
    assert refused.error_code == TopicAuthorizationFailedError.code
    assert kafka.engine.groups.describe_group("g") is None or not kafka.engine.groups.describe_group("g").consumer
    joined = heartbeat(kafka, uuid.uuid4().hex, 0, subscribed_topic_names=["orders-eu"])
    assert joined.error_code == 0 and assigned(kafka, joined) == {"orders-eu"}


def describe(kafka: KafkaBroker) -> Any:
    client = raw_connection(kafka.port)
    try:
        group, = client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["g"]}).groups
        return group
    finally:
        client.close()


def test_a_group_assigned_a_topic_the_principal_may_not_describe_is_not_described(kafka: KafkaBroker) -> None:
    """ConsumerGroupDescribe of a group with a topic the principal may not Describe is
    TOPIC_AUTHORIZATION_FAILED, with nothing of the group (Kafka 4.4, KAFKA-18813)."""
    kafka.engine.call(kafka.engine.access.create_acls, [allow(ResourceType.TOPIC, "orders-us", AclOperation.DESCRIBE)])
    joined = heartbeat(kafka, uuid.uuid4().hex, 0, subscribed_topic_names=["orders-eu", "orders-us"])
    assert joined.error_code == 0 and assigned(kafka, joined) == {"orders-eu", "orders-us"}
    assert describe(kafka).error_code == 0
    kafka.engine.call(kafka.engine.access.delete_acls, [model.AclBindingFilter(ResourceType.TOPIC, "orders-us")])

    refused = describe(kafka)
    assert refused.error_code == TopicAuthorizationFailedError.code
    assert refused.members == () and refused.group_epoch == 0  # nothing of the group, as Kafka 4.4
    kafka.engine.call(kafka.engine.access.create_acls, [allow(ResourceType.TOPIC, "orders-us", AclOperation.DESCRIBE)])
    described = describe(kafka)
    assert described.error_code == 0
    assert {t.topic_name for m in described.members for t in m.assignment.topic_partitions} == {"orders-eu", "orders-us"}
