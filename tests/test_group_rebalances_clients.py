"""Real consumers (confluent-kafka, kafka-python) joining and leaving one group, over the
Kafka listener with the real clock: every membership change is exactly one
rebalance, counted by the members' on_assign callbacks.

The case this guards: a newcomer joins while the incumbent is busy and does not
poll, so the newcomer waits in JoinGroup longer than its own session timeout. Kafka
starts every member's session afresh when the join completes; a coordinator that
counted the wait against the newcomer expired it right after the rebalance, and
a second rebalance followed. Every wait here is on a condition with a deadline;
the incumbent's busy spell is the scenario itself, not a synchronisation.

Static members (KIP-345): a confluent-kafka member with ``group.instance.id`` restarted
within its session timeout gets its partitions back while the others see no revoke
(counted by on_revoke / on_assign); and raw JoinGroup / LeaveGroup requests at the
versions that carry MEMBER_ID_REQUIRED (KIP-394) and removal by instance id.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import ConsumerRebalanceListener, KafkaConsumer

from exactly.app.kafka.api import ApiKey
from exactly.coordinator.group_metadata import GroupMetadata, GroupState
from tests.kafka_support import KafkaBroker, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 4
#: the incumbent's session outlasts its busy spell; the newcomer's does not
INCUMBENT_SESSION_MS = 10_000
NEWCOMER_SESSION_MS = 2_000
ROUNDS = 2


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **{"group.min.session.timeout.ms": 1000}) as k:
        admin = AdminClient({"bootstrap.servers": k.bootstrap, "broker.address.family": "v4"})
        admin.create_topics([NewTopic("t", PARTITIONS, 1)])["t"].result(30)
        yield k


class Member:
    """A confluent-kafka consumer of group ``g`` that counts the rebalances it takes part
    in (assigned, revoked). librdkafka sends its first Heartbeat as soon as its SyncGroup
    is answered. With an ``instance_id`` it is a static member, which sends no
    LeaveGroup when it closes."""

    def __init__(self, kafka: KafkaBroker, name: str, session_ms: int, instance_id: str | None = None) -> None:
        self.assigned = self.revoked = 0
        config = {
            "bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4", "group.id": "g",
            "client.id": name, "session.timeout.ms": session_ms, "heartbeat.interval.ms": session_ms // 5,
            "max.poll.interval.ms": 30_000, "auto.offset.reset": "earliest"}
        if instance_id is not None:
            config["group.instance.id"] = instance_id
        self.consumer = Consumer(config)
        self.consumer.subscribe(["t"], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list) -> None:
        self.assigned += 1

    def _on_revoke(self, consumer: Consumer, partitions: list) -> None:
        self.revoked += 1

    def poll(self) -> None:
        self.consumer.poll(0.05)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonMember(ConsumerRebalanceListener):
    """The same with kafka-python, which -- like Kafka's Java client -- sends its first
    Heartbeat one heartbeat interval after the join: the member a coordinator that
    counted the JoinGroup wait against the session expired for certain."""

    def __init__(self, kafka: KafkaBroker, name: str, session_ms: int) -> None:
        self.assigned = 0
        self.consumer = KafkaConsumer(
            bootstrap_servers=kafka.bootstrap, group_id="g", client_id=name, session_timeout_ms=session_ms,
            heartbeat_interval_ms=session_ms // 4, max_poll_interval_ms=30_000, auto_offset_reset="earliest")
        # the topic's partitions before the join: else the metadata forces a second join
        # that kafka-python 3.0.12 can leave unapplied (tests/test_kafka_python_clients.py)
        assert self.consumer.partitions_for_topic("t")
        self.consumer.subscribe(["t"], listener=self)

    def on_partitions_assigned(self, assigned: list) -> None:
        self.assigned += 1

    def on_partitions_revoked(self, revoked: list) -> None:
        pass

    def poll(self) -> None:
        self.consumer.poll(timeout_ms=50)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def poll_for(members: list[Member], seconds: float) -> None:
    """Keep ``members`` polling (heartbeats, rebalance callbacks) for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for member in members:
            member.poll()


def settle(members: list[Member]) -> list[set[int]]:
    """Poll ``members`` until their assignments split the partitions among all of them."""
    def split() -> list[set[int]] | None:
        poll_for(members, 0.05)
        assignments = [m.partitions() for m in members]
        whole = sorted(p for a in assignments for p in a) == list(range(PARTITIONS))
        return assignments if whole and all(assignments) else None
    return eventually(split, timeout=30, what="a settled assignment")


def group_state(kafka: KafkaBroker, group_id: str = "g") -> tuple[GroupState, int] | None:
    """The group's state and number of members."""
    return described(kafka, group_id, lambda group: (group.state, len(group.members)))


def described(kafka: KafkaBroker, group_id: str, what: Callable[[GroupMetadata], Any]) -> Any:
    """``what`` of the group as the coordinator has it (None for no group), read on its loop."""
    async def read() -> Any:
        group = kafka.engine.groups.coordinator.describe(group_id)
        return None if group is None else what(group)
    return kafka.engine.call(read, timeout=10)


@pytest.mark.parametrize("newcomer_client", [Member, KafkaPythonMember], ids=["confluent-kafka", "kafka-python"])
def test_members_joining_while_the_incumbent_is_busy_rebalance_once_each(kafka: KafkaBroker, newcomer_client) -> None:
    incumbent = Member(kafka, "incumbent", INCUMBENT_SESSION_MS)
    settle([incumbent])
    assert incumbent.assigned == 1
    for round_ in range(ROUNDS):
        newcomer = newcomer_client(kafka, f"newcomer-{round_}", NEWCOMER_SESSION_MS)

        def newcomer_waits_in_join() -> bool:
            newcomer.poll()
            return group_state(kafka) == (GroupState.PREPARING_REBALANCE, 2)
        eventually(newcomer_waits_in_join, timeout=30, what="the newcomer's JoinGroup")
        # the incumbent is busy (does not poll, so does not rejoin) for 2.5 newcomer sessions
        poll_for([newcomer], 2.5 * NEWCOMER_SESSION_MS / 1000)
        assert [len(a) for a in settle([incumbent, newcomer])] == [PARTITIONS // 2] * 2
        # two newcomer sessions later nobody has rebalanced again
        poll_for([incumbent, newcomer], 2 * NEWCOMER_SESSION_MS / 1000)
        assert [len(a) for a in (incumbent.partitions(), newcomer.partitions())] == [PARTITIONS // 2] * 2
        assert (incumbent.assigned, newcomer.assigned) == (2 * round_ + 2, 1)
        assert group_state(kafka) == (GroupState.STABLE, 2)
        newcomer.close()  # LeaveGroup: one more rebalance for the incumbent
        settle([incumbent])
        poll_for([incumbent], NEWCOMER_SESSION_MS / 1000)
        assert incumbent.assigned == 2 * round_ + 3
    incumbent.close()


# -- static members (KIP-345), MEMBER_ID_REQUIRED (KIP-394) ---------------------------------------

#: long enough for a consumer to restart inside it, short for a fast test
STATIC_SESSION_MS = 5_000
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID = 79, 82, 25


def test_a_static_member_restarting_within_its_session_timeout_gets_its_partitions_back(kafka) -> None:
    """Kafka's KIP-345 promise: the restarted member rejoins under a new member id and
    gets its old partitions; the group's generation stays and the other members are
    neither revoked nor assigned anything -- not even once the old incarnation's
    session timeout has passed."""
    members = [Member(kafka, f"m{i}", STATIC_SESSION_MS, f"instance-{i}") for i in range(3)]
    try:
        before = settle(members)
        eventually(lambda: group_state(kafka) == (GroupState.STABLE, 3), timeout=30, what="a Stable group")
        poll_for(members, 1)  # heartbeats: the group stays as it is
        generation = described(kafka, "g", lambda group: group.generation)
        counts = [(m.assigned, m.revoked) for m in members]
        old_member_id = described(kafka, "g", lambda group: group.static_members["instance-1"])

        members[1].close()  # a static member sends no LeaveGroup: the group waits for it
        members[1] = restarted = Member(kafka, "m1-again", STATIC_SESSION_MS, "instance-1")
        after = settle(members)
        assert described(kafka, "g", lambda group: group.static_members["instance-1"]) != old_member_id
        poll_for(members, STATIC_SESSION_MS / 1000 + 1)
        assert after == before and [m.partitions() for m in members] == before
        assert described(kafka, "g", lambda group: (group.state, group.generation)) == (GroupState.STABLE,
                                                                                       generation)
        assert [(m.assigned, m.revoked) for m in (members[0], members[2])] == [counts[0], counts[2]]
        assert (restarted.assigned, restarted.revoked) == (1, 0)
    finally:
        for member in members:
            member.close()


def test_join_group_v4_asks_for_a_member_id_and_admits_the_member_that_comes_back_with_it(kafka) -> None:
    raw = raw_connection(kafka.port, client_id="raw")
    join = {"group_id": "raw", "session_timeout": STATIC_SESSION_MS, "rebalance_timeout": STATIC_SESSION_MS,
            "member_id": "", "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    first = raw.request(ApiKey.JOIN_GROUP, 4, join)
    assert (first.error_code, first.generation_id) == (MEMBER_ID_REQUIRED, -1)
    assert first.member_id.startswith("raw-")
    joined = raw.request(ApiKey.JOIN_GROUP, 4, {**join, "member_id": first.member_id})
    assert (joined.error_code, joined.member_id, joined.leader, joined.generation_id) == (
        0, first.member_id, first.member_id, 1)
    # JoinGroup v3 (before KIP-394) is admitted at once
    older = raw.request(ApiKey.JOIN_GROUP, 3, {**join, "group_id": "raw-v3"})
    assert (older.error_code, older.generation_id) == (0, 1)


def test_leave_group_v3_by_instance_id_and_v5_batches(kafka) -> None:
    raw = raw_connection(kafka.port, client_id="raw")
    join = {"group_id": "raw", "session_timeout": STATIC_SESSION_MS, "rebalance_timeout": STATIC_SESSION_MS,
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
    assert group_state(kafka, "raw") == (GroupState.EMPTY, 0)


def test_join_group_v9_tells_a_restarted_static_leader_to_skip_assigning(kafka) -> None:
    """JoinGroup v9 / SyncGroup v5 (the versions Java clients send): the restarted
    leader learns it leads, skips the assignment, and gets its old one at SyncGroup."""
    raw = raw_connection(kafka.port, client_id="raw")
    join = {"group_id": "raw", "session_timeout": STATIC_SESSION_MS, "rebalance_timeout": STATIC_SESSION_MS,
            "member_id": "", "group_instance_id": "i-a", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}], "reason": "test"}
    sync = {"group_id": "raw", "group_instance_id": "i-a", "protocol_type": "consumer", "protocol_name": "range"}
    first = raw.request(ApiKey.JOIN_GROUP, 9, join)
    assert (first.error_code, first.leader, first.protocol_type, first.skip_assignment) == (
        0, first.member_id, "consumer", False)
    synced = raw.request(ApiKey.SYNC_GROUP, 5, {**sync, "generation_id": first.generation_id,
                                                "member_id": first.member_id,
                                                "assignments": [{"member_id": first.member_id, "assignment": b"A"}]})
    assert (synced.error_code, synced.assignment, synced.protocol_type, synced.protocol_name) == (
        0, b"A", "consumer", "range")
    restarted = raw.request(ApiKey.JOIN_GROUP, 9, join)
    assert (restarted.error_code, restarted.generation_id, restarted.leader, restarted.skip_assignment) == (
        0, first.generation_id, restarted.member_id, True)
    assert [m.member_id for m in restarted.members] == [restarted.member_id]
    again = raw.request(ApiKey.SYNC_GROUP, 5, {**sync, "generation_id": restarted.generation_id,
                                               "member_id": restarted.member_id, "assignments": []})
    assert (again.error_code, again.assignment) == (0, b"A")
    beat = raw.request(ApiKey.HEARTBEAT, 4, {"group_id": "raw", "generation_id": restarted.generation_id,
                                             "member_id": restarted.member_id, "group_instance_id": "i-a"})
    assert beat.error_code == 0
