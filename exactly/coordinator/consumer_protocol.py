"""The "consumer" group protocol's metadata and the range assignor.

The group coordinator treats member metadata and assignments as opaque bytes; the
consumers agree on their layout. These are Kafka's ``ConsumerProtocolSubscription``
and ``ConsumerProtocolAssignment`` version 0, so an embedded consumer and a Kafka
client can share a group::

    Subscription => Version(int16) [Topic(string)] UserData(bytes?)
                    v1+: [OwnedPartitions: Topic(string) [Partition(int32)]]
                    v2+: GenerationId(int32)   v3+: RackId(string?)
    Assignment   => Version(int16) [Topic(string) [Partition(int32)]] UserData(bytes?)

(An assignment's layout is the same in versions 0 to 3; it is written with the version
of the subscription it answers, as Kafka does.)

The range assignor is Kafka's ``RangeAssignor``: per topic, partitions in order are
cut into contiguous ranges, one per subscribed member in member-id order, the first
``partitions % members`` members getting one extra.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactly.coordinator.schema import (
    INT16,
    INT32,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    STRING,
    Array,
    Schema,
    SchemaError,
)

PROTOCOL_TYPE = "consumer"
RANGE = "range"
VERSION = 0

SUBSCRIPTION_V0 = Schema(("topics", Array(STRING)), ("user_data", NULLABLE_BYTES))
TOPIC_PARTITIONS = Schema(("topic", STRING), ("partitions", Array(INT32)))
#: what each version adds to the subscription, after the fields of the previous ones
SUBSCRIPTION_ADDED = {1: Schema(("owned_partitions", Array(TOPIC_PARTITIONS))),
                      2: Schema(("generation_id", INT32)),
                      3: Schema(("rack_id", NULLABLE_STRING))}
#: the newest version whose fields are known (a newer one's extra fields are ignored)
HIGHEST_VERSION = 3
ASSIGNMENT_V0 = Schema(
    ("assigned_partitions", Array(Schema(("topic", STRING), ("partitions", Array(INT32))))),
    ("user_data", NULLABLE_BYTES),
)

TopicPartition = tuple[str, int]


def encode_subscription(topics: list[str]) -> bytes:
    return INT16.fmt.pack(VERSION) + SUBSCRIPTION_V0.encode({"topics": sorted(topics), "user_data": None})


def decode_subscription(data: bytes) -> list[str]:
    """Topics of a subscription; newer versions' extra fields are ignored."""
    if len(data) < 2:
        raise SchemaError("subscription too short")
    value, _ = SUBSCRIPTION_V0.decode(data[2:])
    return value["topics"] or []


@dataclass(frozen=True)
class Subscription:
    """A ``ConsumerProtocolSubscription`` as a group coordinator reads it."""

    version: int
    topics: tuple[str, ...]
    owned_partitions: frozenset[TopicPartition]
    rack_id: str | None


def decode_full_subscription(data: bytes) -> Subscription:
    """Every field of a subscription up to :data:`HIGHEST_VERSION` (SchemaError if malformed)."""
    if len(data) < 2:
        raise SchemaError("subscription too short")
    version = INT16.fmt.unpack_from(data)[0]
    if version < 0:
        raise SchemaError(f"subscription version {version}")
    fields, pos = SUBSCRIPTION_V0.decode(data[2:])
    for added in range(1, min(version, HIGHEST_VERSION) + 1):
        more, pos = SUBSCRIPTION_ADDED[added].decode(data[2:], pos)
        fields.update(more)
    owned = frozenset((tp["topic"], p) for tp in fields.get("owned_partitions") or ()
                      for p in tp["partitions"] or ())
    return Subscription(version, tuple(fields["topics"] or ()), owned, fields.get("rack_id"))


def encode_assignment(partitions: list[TopicPartition], version: int = VERSION) -> bytes:
    """An assignment of ``version`` (0 to 3: the same fields)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return INT16.fmt.pack(min(max(version, 0), HIGHEST_VERSION)) + ASSIGNMENT_V0.encode({
        "assigned_partitions": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
        "user_data": None})


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data:
        return []
    if len(data) < 2:
        raise SchemaError("assignment too short")
    value, _ = ASSIGNMENT_V0.decode(data[2:])
    return [(tp["topic"], p) for tp in value["assigned_partitions"] or () for p in tp["partitions"] or ()]


def range_assign(subscriptions: dict[str, list[str]],
                 partitions_per_topic: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: member id -> its partitions."""
    assignment: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    topics = sorted({topic for topics in subscriptions.values() for topic in topics})
    for topic in topics:
        count = partitions_per_topic.get(topic, 0)
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members or not count:
            continue
        per_member, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = per_member + (1 if i < extra else 0)
            assignment[member].extend((topic, p) for p in range(start, start + size))
            start += size
    return assignment
