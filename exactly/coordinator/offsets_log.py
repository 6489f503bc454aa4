"""Records of ``__consumer_offsets``, the group coordinator's log (docs/formats.md §14).

The layouts of Kafka's ``OffsetCommitKey``/``Value`` and ``GroupMetadataKey``/``Value``
(every key and value prefixed by its int16 version)::

    OffsetCommitKey   v1 => Group(string) Topic(string) Partition(int32)
    OffsetCommitValue v3 => Offset(int64) LeaderEpoch(int32) Metadata(string)
                            CommitTimestamp(int64)
    GroupMetadataKey  v2 => Group(string)
    GroupMetadataValue v3 => ProtocolType(string) Generation(int32) Protocol(string?)
                             Leader(string?) CurrentStateTimestamp(int64)
                             [MemberId GroupInstanceId? ClientId ClientHost
                              RebalanceTimeout(int32) SessionTimeout(int32)
                              Subscription(bytes) Assignment(bytes)]

A null value is a tombstone (offsets of a deleted group or partition). An offset
commit written inside a transaction sits in a transactional batch of the producer:
it is *pending* until that producer's COMMIT marker (then it becomes the committed
offset) or ABORT marker (then it is dropped) -- the seed's Consumer Coordinator
Startup. The partition of a group is Kafka's ``abs(hash(group)) % offsets.topic.num.partitions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exactly.coordinator.schema import (
    INT16,
    INT32,
    INT64,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    STRING,
    Array,
    Schema,
    SchemaError,
    decode_versioned,
    versioned,
)

TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

OFFSET_COMMIT_KEY = Schema(("group", STRING), ("topic", STRING), ("partition", INT32))
OFFSET_COMMIT_VALUE_V3 = Schema(
    ("offset", INT64),
    ("leader_epoch", INT32),
    ("metadata", STRING),
    ("commit_timestamp", INT64),
)
GROUP_METADATA_KEY = Schema(("group", STRING))
MEMBER_V3 = Schema(
    ("member_id", STRING),
    ("group_instance_id", NULLABLE_STRING),
    ("client_id", STRING),
    ("client_host", STRING),
    ("rebalance_timeout", INT32),
    ("session_timeout", INT32),
    ("subscription", NULLABLE_BYTES),
    ("assignment", NULLABLE_BYTES),
)
GROUP_METADATA_VALUE_V3 = Schema(
    ("protocol_type", STRING),
    ("generation", INT32),
    ("protocol", NULLABLE_STRING),
    ("leader", NULLABLE_STRING),
    ("current_state_timestamp", INT64),
    ("members", Array(MEMBER_V3)),
)


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes | None
    assignment: bytes | None


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return INT16.fmt.pack(OFFSET_KEY_VERSION) + OFFSET_COMMIT_KEY.encode(
        {"group": group, "topic": topic, "partition": partition})


def encode_offset_value(value: OffsetValue) -> bytes:
    return INT16.fmt.pack(OFFSET_VALUE_VERSION) + OFFSET_COMMIT_VALUE_V3.encode(
        {"offset": value.offset, "leader_epoch": value.leader_epoch, "metadata": value.metadata,
         "commit_timestamp": value.commit_timestamp})


def encode_group_key(group: str) -> bytes:
    return INT16.fmt.pack(GROUP_KEY_VERSION) + GROUP_METADATA_KEY.encode({"group": group})


def encode_group_value(value: GroupValue) -> bytes:
    return INT16.fmt.pack(GROUP_VALUE_VERSION) + GROUP_METADATA_VALUE_V3.encode({
        "protocol_type": value.protocol_type, "generation": value.generation,
        "protocol": value.protocol, "leader": value.leader,
        "current_state_timestamp": value.current_state_timestamp,
        "members": [_member_dict(m) for m in value.members],
    })


def _member_dict(member: MemberRecord) -> dict[str, Any]:
    return {name: getattr(member, name) for name in MEMBER_V3.names}


def decode_key(key: bytes | None) -> OffsetKey | GroupKey:
    """The key of a ``__consumer_offsets`` record; SchemaError if unknown."""
    version, body = versioned(key)
    if version in (0, 1):
        k = OFFSET_COMMIT_KEY.decode_all(body)
        return OffsetKey(k["group"], k["topic"], k["partition"])
    if version == GROUP_KEY_VERSION:
        return GroupKey(GROUP_METADATA_KEY.decode_all(body)["group"])
    raise SchemaError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(value: bytes | None) -> OffsetValue | None:
    """None for a tombstone."""
    if value is None:
        return None
    v = decode_versioned(value, OFFSET_VALUE_VERSION, OFFSET_COMMIT_VALUE_V3, "offset commit value")
    return OffsetValue(v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"])


def decode_group_value(value: bytes | None) -> GroupValue | None:
    """None for a tombstone."""
    if value is None:
        return None
    v = decode_versioned(value, GROUP_VALUE_VERSION, GROUP_METADATA_VALUE_V3, "group metadata value")
    members = tuple(MemberRecord(**m) for m in v["members"] or ())
    return GroupValue(v["protocol_type"], v["generation"], v["protocol"], v["leader"],
                      v["current_state_timestamp"], members)
