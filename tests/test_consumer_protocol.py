"""The "consumer" protocol's metadata (Kafka's ConsumerProtocol v0) and the range assignor.

Byte layouts are written out by hand from Kafka's ``ConsumerProtocolSubscription``
and ``ConsumerProtocolAssignment`` schemas, so an embedded consumer and a Kafka
client in one group read each other's metadata. The range assignor is checked
against the examples in Kafka's ``RangeAssignor`` Javadoc and, with Hypothesis,
against its invariants.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.coordinator import consumer_protocol as cp
from exactly.coordinator.schema import SchemaError


def kstring(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


# -- byte layout ------------------------------------------------------------------------------


def test_subscription_v0_layout_is_version_topics_and_null_user_data():
    expected = (struct.pack(">h", 0)            # version
                + struct.pack(">i", 2)          # [topics]
                + kstring("t0") + kstring("t1")
                + struct.pack(">i", -1))        # user_data: null
    assert cp.encode_subscription(["t1", "t0"]) == expected


def test_assignment_v0_layout_groups_partitions_by_topic():
    expected = (struct.pack(">h", 0)                                  # version
                + struct.pack(">i", 2)                                # [assigned_partitions]
                + kstring("a") + struct.pack(">i", 2) + struct.pack(">ii", 0, 2)
                + kstring("b") + struct.pack(">i", 1) + struct.pack(">i", 1)
                + struct.pack(">i", -1))                              # user_data: null
    assert cp.encode_assignment([("b", 1), ("a", 2), ("a", 0)]) == expected


def test_empty_assignment_encodes_no_topics_and_decodes_back_to_nothing():
    encoded = cp.encode_assignment([])
    assert encoded == struct.pack(">hii", 0, 0, -1)
    assert cp.decode_assignment(encoded) == []
    assert cp.decode_assignment(b"") == []  # a member the leader left out of SyncGroup


def test_kafka_v1_subscription_with_owned_partitions_decodes_its_topics():
    # ConsumerProtocolSubscription v1 adds OwnedPartitions after UserData; a v0 reader
    # must read the topics and ignore what follows (Kafka's forward compatibility).
    v1 = (struct.pack(">h", 1) + struct.pack(">i", 1) + kstring("orders")
          + struct.pack(">i", 3) + b"abc"                              # user_data
          + struct.pack(">i", 1) + kstring("orders") + struct.pack(">ii", 1, 4))
    assert cp.decode_subscription(v1) == ["orders"]


def test_kafka_v1_assignment_decodes_its_partitions():
    v1 = (struct.pack(">h", 1) + struct.pack(">i", 1) + kstring("orders")
          + struct.pack(">i", 2) + struct.pack(">ii", 3, 5) + struct.pack(">i", -1))
    assert cp.decode_assignment(v1) == [("orders", 3), ("orders", 5)]


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x00\x00\x05\x00"])
def test_truncated_subscription_is_a_schema_error(data):
    with pytest.raises(SchemaError):
        cp.decode_subscription(data)


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x00\x00\x00\x00\x01\x00\x02t"])
def test_truncated_assignment_is_a_schema_error(data):
    with pytest.raises(SchemaError):
        cp.decode_assignment(data)


topic_names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=20)


@given(st.lists(topic_names, max_size=8, unique=True))
def test_subscription_round_trip(topics):
    encoded = cp.encode_subscription(topics)
    assert cp.decode_subscription(encoded) == sorted(topics)
    assert encoded[:2] == b"\x00\x00"


@given(st.sets(st.tuples(topic_names, st.integers(0, 2**31 - 1)), max_size=30))
def test_assignment_round_trip(partitions):
    encoded = cp.encode_assignment(list(partitions))
    decoded = cp.decode_assignment(encoded)
    assert decoded == sorted(partitions)
    # and nothing is left over: the encoding is exactly the v0 struct
    value, end = cp.ASSIGNMENT_V0.decode(encoded[2:])
    assert end == len(encoded) - 2


# -- the range assignor: Kafka's documented examples ------------------------------------------


def test_range_example_two_members_two_topics_three_partitions_each():
    # RangeAssignor Javadoc: C0, C1 both subscribe t0 and t1, 3 partitions each.
    got = cp.range_assign({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert sorted(got["C0"]) == [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)]
    assert sorted(got["C1"]) == [("t0", 2), ("t1", 2)]


def test_range_example_three_members_uneven_topics():
    # Three members, t0 with 4 partitions and t1 with 2: the first members get the extra ones.
    got = cp.range_assign({"C0": ["t0", "t1"], "C1": ["t0", "t1"], "C2": ["t0", "t1"]},
                          {"t0": 4, "t1": 2})
    assert sorted(got["C0"]) == [("t0", 0), ("t0", 1), ("t1", 0)]
    assert sorted(got["C1"]) == [("t0", 2), ("t1", 1)]
    assert sorted(got["C2"]) == [("t0", 3)]


def test_range_only_subscribers_of_a_topic_share_it():
    got = cp.range_assign({"a": ["t0"], "b": ["t0", "t1"], "c": ["t1"]}, {"t0": 3, "t1": 2})
    assert got == {"a": [("t0", 0), ("t0", 1)], "b": [("t0", 2), ("t1", 0)], "c": [("t1", 1)]}


def test_range_orders_members_by_member_id_not_insertion():
    got = cp.range_assign({"m-2": ["t"], "m-1": ["t"]}, {"t": 3})
    assert got == {"m-1": [("t", 0), ("t", 1)], "m-2": [("t", 2)]}


def test_range_more_members_than_partitions_leaves_some_empty():
    got = cp.range_assign({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 2})
    assert got == {"a": [("t", 0)], "b": [("t", 1)], "c": []}


def test_range_ignores_topics_that_do_not_exist():
    assert cp.range_assign({"a": ["missing", "t"]}, {"t": 1}) == {"a": [("t", 0)]}


# -- the range assignor: invariants -------------------------------------------------------------


@st.composite
def group_subscriptions(draw):
    topics = draw(st.lists(st.sampled_from(["t0", "t1", "t2", "t3"]), min_size=1, max_size=4, unique=True))
    counts = {t: draw(st.integers(0, 12)) for t in topics}
    members = draw(st.lists(st.text("abcdefgh-0123", min_size=1, max_size=6), min_size=1, max_size=7,
                            unique=True))
    subscriptions = {m: draw(st.lists(st.sampled_from(topics), unique=True)) for m in members}
    return subscriptions, counts


@settings(max_examples=300, deadline=None)
@given(group_subscriptions())
def test_range_assigns_every_partition_once_and_balances_each_topic(case):
    subscriptions, counts = case
    got = cp.range_assign(subscriptions, counts)
    assert set(got) == set(subscriptions)
    owners: dict[tuple[str, int], str] = {}
    for member, partitions in got.items():
        for tp in partitions:
            assert tp not in owners, f"{tp} assigned to {owners[tp]} and {member}"
            assert tp[0] in subscriptions[member], f"{member} got {tp} without subscribing"
            owners[tp] = member
    subscribed = {t for ts in subscriptions.values() for t in ts}
    assert set(owners) == {(t, p) for t in subscribed for p in range(counts[t])}
    for topic in subscribed:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        sizes = [sum(1 for tp in got[m] if tp[0] == topic) for m in members]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True), "the first members in id order get the extras"
        # each member's share is one contiguous range, in member-id order
        flat = [p for m in members for (t, p) in got[m] if t == topic]
        assert flat == list(range(counts[topic]))
