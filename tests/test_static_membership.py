"""Static membership (KIP-345) and MEMBER_ID_REQUIRED (KIP-394) over the Kafka listener,
with the real clock: confluent-kafka consumers with ``group.instance.id``, one of them
restarted within its session timeout, and raw JoinGroup / LeaveGroup requests at the
versions that carry these rules. Rebalances are counted by the members' own
``on_assign`` / ``on_revoke`` callbacks; every wait is on a condition with a deadline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from app.kafka.api import ApiKey
from tests.kafka_support import KafkaBroker, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 6
#: long enough for a consumer to restart inside it, short for a fast test
SESSION_MS = 5_000
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID = 79, 82, 25


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **{"group.min.session.timeout.ms": 1000}) as k:
        admin = AdminClient({"bootstrap.servers": k.bootstrap, "broker.address.family": "v4"})
        admin.create_topics([NewTopic("t", PARTITIONS, 1)])["t"].result(30)
        yield k


class StaticMember:
    """A confluent-kafka consumer of group ``g`` with a ``group.instance.id``, counting
    the partitions it is given and the ones it loses."""

    def __init__(self, kafka: KafkaBroker, instance_id: str) -> None:
        self.assigned = self.revoked = 0
        self.closed = False
        self.consumer = Consumer({
            "bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4", "group.id": "g",
            "group.instance.id": instance_id, "client.id": instance_id,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range", "auto.offset.reset": "earliest"})
        self.consumer.subscribe(["t"], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list) -> None:
        self.assigned += 1

    def _on_revoke(self, consumer: Consumer, partitions: list) -> None:
        self.revoked += 1

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def counts(self) -> tuple[int, int]:
        return self.assigned, self.revoked

    def close(self) -> None:
        """Close once (a static member sends no LeaveGroup: the group waits for it)."""
        if not self.closed:
            self.closed = True
            self.consumer.close()


@pytest.fixture
def static_member(kafka: KafkaBroker) -> Iterator[Callable[[str], StaticMember]]:
    """Open static members of group ``g``; every one is closed when the test ends."""
    opened: list[StaticMember] = []

    def open_(instance_id: str) -> StaticMember:
        opened.append(StaticMember(kafka, instance_id))
        return opened[-1]
    yield open_
    for member in opened:
        member.close()


def poll_for(members: list[StaticMember], seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for member in members:
            member.consumer.poll(0.05)


def group_generation(kafka: KafkaBroker, group_id: str = "g") -> tuple[str, int, int] | None:
    """The group's (state, generation, number of members)."""
    async def read() -> tuple[str, int, int] | None:
        group = kafka.engine._group_coordinator.describe(group_id)
        return None if group is None else (group.state.value, group.generation, len(group.members))
    return kafka.engine.call(read, timeout=10)


def instance_owner(kafka: KafkaBroker, instance_id: str) -> str | None:
    """The member id group ``g`` knows ``instance_id`` by."""
    async def read() -> str | None:
        group = kafka.engine._group_coordinator.describe("g")
        return None if group is None else group.static_members.get(instance_id)
    return kafka.engine.call(read, timeout=10)


def settle(kafka: KafkaBroker, members: list[StaticMember]) -> list[set[int]]:
    """Poll until the group is Stable with these members and their assignments split
    the partitions among all of them."""
    def split() -> list[set[int]] | None:
        poll_for(members, 0.05)
        assignments = [m.partitions() for m in members]
        whole = sorted(p for a in assignments for p in a) == list(range(PARTITIONS))
        stable = (group_generation(kafka) or ("", 0, 0))[0::2] == ("Stable", len(members))
        return assignments if whole and stable and all(assignments) else None
    return eventually(split, timeout=30, what="a settled assignment")


def test_a_static_member_restarting_within_its_session_timeout_gets_its_partitions_back(
        kafka, static_member) -> None:
    """Kafka's KIP-345 promise: the restarted member rejoins under a new member id and
    gets its old partitions; the group's generation stays and the other members are
    neither revoked nor assigned anything."""
    members = [static_member(f"instance-{i}") for i in range(3)]
    before = settle(kafka, members)
    poll_for(members, 1)  # heartbeats: the group stays as it is
    generation = group_generation(kafka)
    counts = [m.counts() for m in members]
    old_member_id = instance_owner(kafka, "instance-1")

    members[1].close()
    restarted = static_member("instance-1")
    members[1] = restarted
    after = settle(kafka, members)
    assert instance_owner(kafka, "instance-1") not in (None, old_member_id)
    # past the old incarnation's session timeout: nothing of it is left to expire
    poll_for(members, SESSION_MS / 1000 + 1)
    assert after == before and [m.partitions() for m in members] == before
    assert group_generation(kafka) == generation
    assert [members[0].counts(), members[2].counts()] == [counts[0], counts[2]]
    assert restarted.counts() == (1, 0)


def test_join_group_v4_asks_for_a_member_id_and_admits_the_member_that_comes_back_with_it(kafka) -> None:
    raw = raw_connection(kafka.port, client_id="raw")
    join = {"group_id": "raw", "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS,
            "member_id": "", "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    first = raw.request(ApiKey.JOIN_GROUP, 4, join)
    assert first.error_code == MEMBER_ID_REQUIRED and first.member_id.startswith("raw-")
    assert first.generation_id == -1
    joined = raw.request(ApiKey.JOIN_GROUP, 4, {**join, "member_id": first.member_id})
    assert (joined.error_code, joined.member_id, joined.leader, joined.generation_id) == (
        0, first.member_id, first.member_id, 1)
    # JoinGroup v3 (before KIP-394) is admitted at once
    older = raw.request(ApiKey.JOIN_GROUP, 3, {**join, "group_id": "raw-v3"})
    assert (older.error_code, older.generation_id) == (0, 1)


def test_leave_group_v3_by_instance_id_and_v5_batches(kafka) -> None:
    raw = raw_connection(kafka.port, client_id="raw")
    join = {"group_id": "raw", "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS,
            "member_id": "", "group_instance_id": "i-a", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}
    a = raw.request(ApiKey.JOIN_GROUP, 5, join)
    assert a.error_code == 0
    # the same instance again: the old member id is fenced
    again = raw.request(ApiKey.JOIN_GROUP, 5, join)
    assert again.error_code == 0 and again.member_id != a.member_id
    fenced = raw.request(ApiKey.HEARTBEAT, 3, {"group_id": "raw", "generation_id": a.generation_id,
                                               "member_id": a.member_id, "group_instance_id": "i-a"})
    assert fenced.error_code == FENCED_INSTANCE_ID
    left = raw.request(ApiKey.LEAVE_GROUP, 3, {"group_id": "raw", "members": [
        {"member_id": "", "group_instance_id": "i-a"}]})
    assert left.error_code == 0 and [(m.group_instance_id, m.error_code) for m in left.members] == [("i-a", 0)]
    batch = raw.request(ApiKey.LEAVE_GROUP, 5, {"group_id": "raw", "members": [
        {"member_id": "", "group_instance_id": "i-a", "reason": "gone"},
        {"member_id": again.member_id, "group_instance_id": None, "reason": "gone"}]})
    assert batch.error_code == 0
    assert [m.error_code for m in batch.members] == [UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID]
    assert group_generation(kafka, "raw") == ("Empty", again.generation_id + 1, 0)
