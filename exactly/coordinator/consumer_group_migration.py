"""The online migration of a group between the classic and the consumer protocol (KIP-848).

``group.consumer.migration.policy`` (Kafka's key, values and default, ``bidirectional``)
says which way a group with members may change type:

* **upgrade** -- a classic group whose members use the ``consumer`` protocol type
  becomes a consumer group when a member of the consumer protocol heartbeats into it
  with epoch 0 (Kafka's validateOnlineUpgrade / ConsumerGroup.fromClassicGroup): each
  classic member becomes a member of the consumer group with its classic metadata
  (session timeout, JoinGroup protocols) and keeps its assignment -- its member epoch,
  the group epoch and the assignment epoch are the classic generation, its target is
  what it owns. The joining member then moves the group epoch and the classic members
  are asked to rejoin (REBALANCE_IN_PROGRESS) to give partitions up.
* **downgrade** -- when a member leaves or is fenced and every remaining member uses the
  classic protocol, the consumer group becomes a classic group again (Kafka's
  validateOnlineDowngradeWithFencedMember / ClassicGroup.fromConsumerGroup): generation
  the group epoch, each member's assignment its target assignment, Stable, and a
  rebalance is started at once.

Classic members inside a consumer group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
are served by ``consumer_group_coordinator.py`` whatever the policy, as in Kafka; the
policy only decides whether the group changes type. The records of a conversion are
Kafka's: the old type's tombstones, then the new type's records, in one append.
"""

from __future__ import annotations

import enum
import uuid
from typing import Callable

from exactly.coordinator import consumer_protocol
from exactly.coordinator.consumer_group import ClassicMemberMetadata, ConsumerGroup, ConsumerMember
from exactly.coordinator.group_metadata import GroupMetadata, GroupState, Member
from exactly.coordinator.schema import SchemaError
from exactly.storage.errors import GroupIdNotFoundError


class MigrationPolicy(enum.Enum):
    """Kafka's ``ConsumerGroupMigrationPolicy``."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, value: str) -> MigrationPolicy:
        """The policy named ``value``, case-insensitively (Kafka's CaseInsensitiveValidString)."""
        for policy in cls:
            if policy.value == value.strip().lower():
                return policy
        raise ValueError(f"group.consumer.migration.policy: {value!r} is not one of "
                         f"{', '.join(p.value for p in cls)}")

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


def may_upgrade(policy: MigrationPolicy, group: GroupMetadata) -> bool:
    """Kafka's validateOnlineUpgrade: the policy allows it and the classic group's members
    use the ``consumer`` protocol type (the layout the broker can read)."""
    return (policy.upgrade_enabled and bool(group.members)
            and group.protocol_type == consumer_protocol.PROTOCOL_TYPE)


def may_downgrade(policy: MigrationPolicy, group: ConsumerGroup) -> bool:
    """Kafka's validateOnlineDowngrade: the policy allows it, members remain and every
    one of them uses the classic protocol (``group`` is the state once the member left)."""
    return (policy.downgrade_enabled and bool(group.members)
            and all(m.classic is not None for m in group.members.values()))


def from_classic(group: GroupMetadata, topic_id: Callable[[str], uuid.UUID | None]) -> ConsumerGroup:
    """The consumer group a classic group becomes (Kafka's ConsumerGroup.fromClassicGroup):
    every member Stable at the generation, its target what its last assignment gave it
    (topics that no longer exist left out). A member whose metadata is not the consumer
    protocol's is GROUP_ID_NOT_FOUND, as Kafka answers a malformed embedded protocol."""
    consumer = ConsumerGroup(group.group_id, group_epoch=group.generation, assignment_epoch=group.generation)
    for member in group.members.values():
        try:
            subscription = consumer_protocol.decode_full_subscription(member.metadata_for(group.protocol or ""))
            assigned = frozenset(tp for tp in consumer_protocol.decode_assignment(member.assignment)
                                 if topic_id(tp[0]) is not None)
        except SchemaError as e:
            raise GroupIdNotFoundError(
                f"Cannot upgrade the classic group {group.group_id} to consumer group because the embedded "
                f"consumer protocol is malformed: {e}.") from None
        consumer.members[member.member_id] = ConsumerMember(
            member.member_id, instance_id=member.group_instance_id, rack_id=subscription.rack_id,
            client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            rebalance_timeout_ms=member.rebalance_timeout_ms, member_epoch=group.generation,
            previous_member_epoch=group.generation, assigned=assigned,
            classic=ClassicMemberMetadata(member.session_timeout_ms, tuple(member.protocols)))
        consumer.target[member.member_id] = assigned
    return consumer


def to_classic(consumer: ConsumerGroup, generation: int, now_ms: int) -> GroupMetadata:
    """The classic group a consumer group of classic members becomes (Kafka's
    ClassicGroup.fromConsumerGroup): Stable at ``generation`` (the group epoch before the
    member left), the first member its leader, the protocol the members vote for, each
    member's assignment its target assignment, written in the version of its subscription."""
    group = GroupMetadata(consumer.group_id, state=GroupState.STABLE, generation=generation,
                          protocol_type=consumer_protocol.PROTOCOL_TYPE, state_timestamp_ms=now_ms)
    for m in consumer.members.values():
        assert m.classic is not None
        group.members[m.member_id] = Member(
            m.member_id, m.instance_id, m.client_id, m.client_host, m.classic.session_timeout_ms,
            m.rebalance_timeout_ms, consumer_protocol.PROTOCOL_TYPE, list(m.classic.protocols),
            session_deadline_ms=now_ms + m.classic.session_timeout_ms)
        if m.instance_id is not None:
            group.static_members[m.instance_id] = m.member_id
    group.protocol = group.select_protocol()
    group.leader = next(iter(group.members), None)
    for member in group.members.values():
        version = subscription_version(member.metadata_for(group.protocol or ""))
        member.assignment = consumer_protocol.encode_assignment(
            sorted(consumer.target.get(member.member_id, frozenset())), version)
    return group


def subscription_version(metadata: bytes) -> int:
    """The version a subscription is written in (0 when unreadable): an assignment answers in it."""
    return int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
