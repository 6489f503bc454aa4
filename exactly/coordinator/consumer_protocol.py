"""The "consumer" group protocol's metadata and the range assignor.

The group coordinator treats member metadata and assignments as opaque bytes; the
consumers agree on their layout. These are Kafka's ``ConsumerProtocolSubscription``
and ``ConsumerProtocolAssignment`` version 0, so an embedded consumer and a Kafka
client can share a group::

    Subscription => Version(int16) [Topic(string)] UserData(bytes?)
    Assignment   => Version(int16) [Topic(string) [Partition(int32)]] UserData(bytes?)

The range assignor is Kafka's ``RangeAssignor``: per topic, partitions in order are
cut into contiguous ranges, one per subscribed member in member-id order, the first
``partitions % members`` members getting one extra.
"""

from __future__ import annotations

from exactly.coordinator.schema import INT16, INT32, NULLABLE_BYTES, STRING, Array, Schema, SchemaError

PROTOCOL_TYPE = "consumer"
RANGE = "range"
VERSION = 0

SUBSCRIPTION_V0 = Schema(("topics", Array(STRING)), ("user_data", NULLABLE_BYTES))
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


def encode_assignment(partitions: list[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return INT16.fmt.pack(VERSION) + ASSIGNMENT_V0.encode({
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
