"""The records of KIP-848 consumer groups in ``__consumer_offsets`` (docs/formats.md §14).

Kafka's coordinator records: the key's leading int16 is the record type, the key
itself is not flexible; the value's leading int16 is its version (0), and the
value is flexible (compact strings and arrays, tagged fields)::

    3 ConsumerGroupMetadata            key: GroupId
        value: Epoch(int32) [tag 0: MetadataHash(int64)]
    5 ConsumerGroupMemberMetadata      key: GroupId MemberId
        value: InstanceId? RackId? ClientId ClientHost [SubscribedTopicNames]
               SubscribedTopicRegex? RebalanceTimeoutMs(int32) ServerAssignor?
               [tag 0: ClassicMemberMetadata? = SessionTimeoutMs(int32)
                       [SupportedProtocols: Name Metadata(bytes)]]
    6 ConsumerGroupTargetAssignmentMetadata  key: GroupId
        value: AssignmentEpoch(int32)
    7 ConsumerGroupTargetAssignmentMember    key: GroupId MemberId
        value: [TopicId(uuid) [Partitions(int32)]]
    8 ConsumerGroupCurrentMemberAssignment   key: GroupId MemberId
        value: MemberEpoch(int32) PreviousMemberEpoch(int32) State(int8)
               AssignedPartitions [TopicId [Partitions]]
               PartitionsPendingRevocation [TopicId [Partitions]]

A null value is a tombstone. Partitions are named by topic id, so an assignment of a
topic deleted (and perhaps re-created) while the broker was down names an id that
no longer exists and is dropped on load. Type 4 (ConsumerGroupPartitionMetadata)
is not written: Kafka 4.1 replaced it by the MetadataHash above. The hash is
Exactly's own (of each subscribed topic's name and partition count), not Kafka's
murmur3 of the topic image: the field means the same -- "the subscribed topics
changed" -- but its value is not comparable with Kafka's.

:func:`records_between` derives the records from the state before and after a
change, in the order Kafka writes them; :func:`replay` applies one record to a group.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import replace
from typing import Any, Callable, Mapping, Protocol

from exactly.coordinator.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    Partitions,
)
from exactly.coordinator.schema import (
    INT8,
    INT16,
    INT32,
    INT64,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    STRING,
    UUID,
    Array,
    NullableStruct,
    Schema,
    SchemaError,
    TaggedField,
    decode_versioned,
    flexible,
    versioned,
)

GROUP_METADATA = 3
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
#: the record types this module reads (``offsets_log`` reads 0-2)
TYPES = frozenset({GROUP_METADATA, MEMBER_METADATA, TARGET_ASSIGNMENT_METADATA, TARGET_ASSIGNMENT_MEMBER,
                   CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0

GROUP_KEY = Schema(("group_id", STRING))
MEMBER_KEY = Schema(("group_id", STRING), ("member_id", STRING))
TOPIC_PARTITIONS = Schema(("topic_id", UUID), ("partitions", Array(INT32)))

GROUP_METADATA_VALUE = flexible(Schema(("epoch", INT32)), tagged=(
    TaggedField(0, "metadata_hash", INT64, 0),))
#: a member of the classic protocol: its session timeout and JoinGroup protocols (null: a KIP-848 member)
CLASSIC_MEMBER_METADATA = NullableStruct(flexible(Schema(
    ("session_timeout_ms", INT32),
    ("supported_protocols", Array(Schema(("name", STRING), ("metadata", NULLABLE_BYTES)))),
)))
MEMBER_METADATA_VALUE = flexible(Schema(
    ("instance_id", NULLABLE_STRING),
    ("rack_id", NULLABLE_STRING),
    ("client_id", STRING),
    ("client_host", STRING),
    ("subscribed_topic_names", Array(STRING)),
    ("subscribed_topic_regex", NULLABLE_STRING),
    ("rebalance_timeout_ms", INT32),
    ("server_assignor", NULLABLE_STRING),
), tagged=(TaggedField(0, "classic_member_metadata", CLASSIC_MEMBER_METADATA, None),))
TARGET_ASSIGNMENT_METADATA_VALUE = flexible(Schema(("assignment_epoch", INT32)))
TARGET_ASSIGNMENT_MEMBER_VALUE = flexible(Schema(("topic_partitions", Array(TOPIC_PARTITIONS))))
CURRENT_MEMBER_ASSIGNMENT_VALUE = flexible(Schema(
    ("member_epoch", INT32),
    ("previous_member_epoch", INT32),
    ("state", INT8),
    ("assigned_partitions", Array(TOPIC_PARTITIONS)),
    ("partitions_pending_revocation", Array(TOPIC_PARTITIONS)),
))

Record = tuple[bytes, bytes | None]
#: topic name -> its id (None: the topic is gone); topic id -> its name
TopicIds = Callable[[str], uuid.UUID | None]
TopicNames = Callable[[uuid.UUID], str | None]


def metadata_hash(partitions: Mapping[str, int]) -> int:
    """A signed 64-bit hash of the subscribed topics and their partition counts."""
    text = "\0".join(f"{topic}:{count}" for topic, count in sorted(partitions.items()))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


def record_type(key: bytes | None) -> int:
    """The record type of a ``__consumer_offsets`` key (0-2: ``offsets_log``'s)."""
    return versioned(key)[0]


def _key(kind: int, group_id: str, member_id: str | None = None) -> bytes:
    if member_id is None:
        return INT16.fmt.pack(kind) + GROUP_KEY.encode({"group_id": group_id})
    return INT16.fmt.pack(kind) + MEMBER_KEY.encode({"group_id": group_id, "member_id": member_id})


def _value(schema: Schema, fields: dict[str, Any]) -> bytes:
    return INT16.fmt.pack(VALUE_VERSION) + schema.encode(fields)


def _topic_partitions(partitions: Partitions, topic_id: TopicIds) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    entries = []
    for topic, indexes in by_topic.items():
        found = topic_id(topic)
        if found is not None:
            entries.append({"topic_id": found.bytes, "partitions": indexes})
    return entries


def _partitions(entries: list[dict[str, Any]] | None, topic_name: TopicNames) -> Partitions:
    result: set[tuple[str, int]] = set()
    for entry in entries or ():
        name = topic_name(uuid.UUID(bytes=entry["topic_id"]))
        if name is not None:
            result.update((name, p) for p in entry["partitions"] or ())
    return frozenset(result)


def _classic(value: dict[str, Any] | None) -> ClassicMemberMetadata | None:
    if value is None:
        return None
    return ClassicMemberMetadata(value["session_timeout_ms"], tuple(
        (p["name"], p["metadata"] or b"") for p in value["supported_protocols"] or ()))


def member_metadata_record(group_id: str, member: ConsumerMember) -> Record:
    return _key(MEMBER_METADATA, group_id, member.member_id), _value(MEMBER_METADATA_VALUE, {
        "instance_id": member.instance_id, "rack_id": member.rack_id, "client_id": member.client_id,
        "client_host": member.client_host, "subscribed_topic_names": list(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "rebalance_timeout_ms": member.rebalance_timeout_ms, "server_assignor": member.server_assignor,
        "classic_member_metadata": None if member.classic is None else {
            "session_timeout_ms": member.classic.session_timeout_ms,
            "supported_protocols": [{"name": n, "metadata": m} for n, m in member.classic.protocols]}})


def records_between(old: ConsumerGroup | None, new: ConsumerGroup | None, topic_id: TopicIds) -> list[Record]:
    """The records that take the log from ``old`` to ``new`` (None: no group), in
    Kafka's order: member metadata, group epoch, target members, assignment epoch,
    current assignments; a removed member's records and a removed group's go as
    tombstones."""
    group_id = (new or old).group_id  # type: ignore[union-attr]
    before = old.members if old else {}
    after = new.members if new else {}
    records: list[Record] = []
    gone = [m for m in before if m not in after]
    for member_id in gone:
        records.append((_key(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None))
    for member_id in [m for m in (old.target if old else {}) if m not in (new.target if new else {})]:
        records.append((_key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None))
    for member_id in gone:
        records.append((_key(MEMBER_METADATA, group_id, member_id), None))
    if new is None:
        records.append((_key(TARGET_ASSIGNMENT_METADATA, group_id), None))
        records.append((_key(GROUP_METADATA, group_id), None))
        return records
    for member_id, member in after.items():
        was = before.get(member_id)
        if was is None or was.metadata() != member.metadata():
            records.append(member_metadata_record(group_id, member))
    if old is None or (old.group_epoch, old.subscription_hash) != (new.group_epoch, new.subscription_hash):
        records.append((_key(GROUP_METADATA, group_id), _value(GROUP_METADATA_VALUE, {
            "epoch": new.group_epoch, "metadata_hash": new.subscription_hash})))
    for member_id, partitions in new.target.items():
        if old is None or old.target.get(member_id) != partitions:
            records.append((_key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id), _value(
                TARGET_ASSIGNMENT_MEMBER_VALUE, {"topic_partitions": _topic_partitions(partitions, topic_id)})))
    if old is None or old.assignment_epoch != new.assignment_epoch:
        records.append((_key(TARGET_ASSIGNMENT_METADATA, group_id), _value(
            TARGET_ASSIGNMENT_METADATA_VALUE, {"assignment_epoch": new.assignment_epoch})))
    for member_id, member in after.items():
        was = before.get(member_id)
        if was is None or was.current_assignment() != member.current_assignment():
            records.append((_key(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), _value(
                CURRENT_MEMBER_ASSIGNMENT_VALUE, {
                    "member_epoch": member.member_epoch, "previous_member_epoch": member.previous_member_epoch,
                    "state": member.state.value,
                    "assigned_partitions": _topic_partitions(member.assigned, topic_id),
                    "partitions_pending_revocation": _topic_partitions(member.pending_revocation, topic_id)})))
    return records


class Groups(Protocol):
    """Where :func:`replay` finds, adds and removes groups (the group coordinator's)."""

    def get(self, group_id: str) -> ConsumerGroup | None: ...

    def __setitem__(self, group_id: str, group: ConsumerGroup) -> None: ...

    def __delitem__(self, group_id: str) -> None: ...


def replay(groups: Groups, key: bytes | None, value: bytes | None,
           topic_name: TopicNames) -> None:
    """Apply one record of types :data:`TYPES` to ``groups`` (group id -> group), as
    Kafka's replay does: a group epoch tombstone deletes the group."""
    kind, body = versioned(key)
    if kind in (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA):
        group_id, member_id = GROUP_KEY.decode_all(body)["group_id"], None
    elif kind in TYPES:
        k = MEMBER_KEY.decode_all(body)
        group_id, member_id = k["group_id"], k["member_id"]
    else:
        raise SchemaError(f"not a consumer group record type: {kind}")
    group = groups.get(group_id)
    if group is None:
        if value is None:
            return
        group = groups[group_id] = ConsumerGroup(group_id)
    if kind == GROUP_METADATA:
        if value is None:
            del groups[group_id]
            return
        v = decode_versioned(value, VALUE_VERSION, GROUP_METADATA_VALUE, "consumer group metadata")
        group.group_epoch, group.subscription_hash = v["epoch"], v["metadata_hash"]
    elif kind == TARGET_ASSIGNMENT_METADATA:
        if value is not None:
            v = decode_versioned(value, VALUE_VERSION, TARGET_ASSIGNMENT_METADATA_VALUE, "assignment epoch")
            group.assignment_epoch = v["assignment_epoch"]
    elif kind == TARGET_ASSIGNMENT_MEMBER:
        assert member_id is not None
        if value is None:
            group.target.pop(member_id, None)
        else:
            v = decode_versioned(value, VALUE_VERSION, TARGET_ASSIGNMENT_MEMBER_VALUE, "target assignment")
            group.target[member_id] = _partitions(v["topic_partitions"], topic_name)
    elif kind == MEMBER_METADATA:
        assert member_id is not None
        if value is None:
            group.members.pop(member_id, None)
            return
        v = decode_versioned(value, VALUE_VERSION, MEMBER_METADATA_VALUE, "member metadata")
        member = group.members.get(member_id) or ConsumerMember(member_id)
        group.members[member_id] = replace(
            member, instance_id=v["instance_id"], rack_id=v["rack_id"], client_id=v["client_id"],
            client_host=v["client_host"], subscribed_topic_names=tuple(v["subscribed_topic_names"] or ()),
            subscribed_topic_regex=v["subscribed_topic_regex"], rebalance_timeout_ms=v["rebalance_timeout_ms"],
            server_assignor=v["server_assignor"], classic=_classic(v["classic_member_metadata"]))
    else:  # CURRENT_MEMBER_ASSIGNMENT
        assert member_id is not None
        member = group.members.get(member_id) or ConsumerMember(member_id)
        if value is None:
            group.members[member_id] = replace(member, member_epoch=0, previous_member_epoch=-1,
                                               state=MemberState.STABLE, assigned=frozenset(),
                                               pending_revocation=frozenset())
            return
        v = decode_versioned(value, VALUE_VERSION, CURRENT_MEMBER_ASSIGNMENT_VALUE, "current assignment")
        group.members[member_id] = replace(
            member, member_epoch=v["member_epoch"], previous_member_epoch=v["previous_member_epoch"],
            state=MemberState(v["state"]), assigned=_partitions(v["assigned_partitions"], topic_name),
            pending_revocation=_partitions(v["partitions_pending_revocation"], topic_name))
