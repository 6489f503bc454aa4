"""Frozen views the engine hands to its faces: copies of coordinator and partition
state taken on the loop, so a face can read them on any thread and can never
change the state they were taken from (Tansu's ``Storage`` trait returns values the
same way). Transactions are already seen as frozen ``TxnTransitMetadata``."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from exactly.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState, ConsumerMember, Partitions
from exactly.coordinator.group_metadata import GroupMetadata, GroupState


class ConfigSource(enum.Enum):
    """Where a config's value comes from: the name Kafka's Admin API and the REST proxy
    show, and the id DescribeConfigs sends (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Kafka's three offsets of one partition."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: the member's metadata for the group's chosen protocol (b"" if none)
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ConsumerGroupView:
    """A KIP-848 consumer group: its epochs, members (immutable values) and target assignment."""

    state: ConsumerGroupState
    group_epoch: int
    assignment_epoch: int
    members: tuple[ConsumerMember, ...]
    target: dict[str, Partitions]

    @classmethod
    def of(cls, group: ConsumerGroup) -> "ConsumerGroupView":
        return cls(group.state, group.group_epoch, group.assignment_epoch, tuple(group.members.values()),
                   dict(group.target))


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: GroupState
    generation: int
    protocol_type: str | None
    protocol: str | None
    members: tuple[MemberView, ...]
    #: the consumer group protocol's side, for a group of type "consumer"
    consumer: ConsumerGroupView | None = None

    @classmethod
    def of(cls, group: GroupMetadata) -> "GroupView":
        """A copy of ``group`` as it is now (on the loop)."""
        return cls(group.group_id, group.state, group.generation, group.protocol_type, group.protocol,
                   tuple(MemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.metadata_for(group.protocol or ""), m.assignment)
                         for m in group.members.values()),
                   ConsumerGroupView.of(group.consumer) if group.consumer is not None else None)

    @property
    def group_type(self) -> str:
        """Kafka's group type: ``consumer`` (KIP-848) or ``classic``."""
        return "consumer" if self.consumer is not None else "classic"

    @property
    def state_name(self) -> str:
        """The state Kafka reports for the group, of its type's state machine."""
        return self.consumer.state.value if self.consumer is not None else self.state.value

    @property
    def live(self) -> bool:
        """Not being deleted (ListGroups leaves Dead groups out)."""
        return self.state is not GroupState.DEAD
