"""The online migration of a group between the classic and the consumer protocol (KIP-848),
in the group coordinator (exactly/coordinator/consumer_group_migration.py and the classic
members of consumer_group_coordinator.py): upgrade, classic members inside a consumer
group, downgrade, each ``group.consumer.migration.policy``, and both conversions replayed
after a restart.

Requests are driven one by one on the engine's loop (JoinGroups that wait for each
other as tasks); timeouts by the FakeClock and the coordinator's tick, never by
waiting in real time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.coordinator import consumer_group_records, consumer_protocol
from exactly.coordinator.consumer_group import ClassicMemberMetadata, ConsumerGroup, ConsumerMember, MemberState
from exactly.coordinator.consumer_group_coordinator import Heartbeat, HeartbeatAnswer
from exactly.coordinator.consumer_group_migration import MigrationPolicy
from exactly.coordinator.group_coordinator import JoinResult
from exactly.coordinator.group_metadata import CommittedOffset, GroupMetadata, GroupState
from exactly.storage.errors import KafkaError
from tests.waiting import eventually

DEADLINE_S = 10
SESSION_MS = 10_000
REBALANCE_MS = 20_000
SUBSCRIPTION = consumer_protocol.encode_subscription(["t"])
PROTOCOLS = [("range", SUBSCRIPTION)]


@pytest.fixture
def broker(open_broker) -> Broker:
    b = open_broker()
    b.create_topic("t", partitions=4)
    return b


def call(broker: Broker, fn, *args: Any, **kwargs: Any) -> Any:
    return broker.engine.call(fn, *args, timeout=DEADLINE_S, **kwargs)


def refused(name: str, fn, *args: Any, **kwargs: Any) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        fn(*args, **kwargs)
    assert caught.value.name == name, caught.value
    return caught.value


def partitions(*indexes: int) -> frozenset[tuple[str, int]]:
    return frozenset(("t", p) for p in indexes)


# -- the classic protocol's requests ---------------------------------------------------------------


def join(broker: Broker, member_id: str = "", instance_id: str | None = None,
         protocols: list[tuple[str, bytes]] = PROTOCOLS) -> JoinResult:
    return call(broker, broker.engine.groups.join_group, "g", member_id, "consumer", protocols, SESSION_MS,
                REBALANCE_MS, instance_id)


def sync(broker: Broker, joined: JoinResult, assignments: dict[str, bytes] | None = None,
         instance_id: str | None = None) -> frozenset[tuple[str, int]]:
    assigned = call(broker, broker.engine.groups.sync_group, "g", joined.generation, joined.member_id,
                    assignments, instance_id)
    return frozenset(consumer_protocol.decode_assignment(assigned))


def classic_heartbeat(broker: Broker, member_id: str, generation: int) -> None:
    call(broker, broker.engine.groups.heartbeat, "g", generation, member_id)


def classic_group(broker: Broker, instance_ids: tuple[str | None, str | None] = (None, None)) -> list[JoinResult]:
    """A Stable classic group of two members, as clients form it (the first alone, then
    both), the leader owning t-0 and t-1, the other t-2 and t-3."""
    first = join(broker, instance_id=instance_ids[0])
    sync(broker, first, {first.member_id: b""}, instance_ids[0])

    async def both() -> list[JoinResult]:
        # the newcomer first: its join starts the rebalance the first member then rejoins
        newcomer, rejoined = await asyncio.gather(
            broker.engine.groups.join_group("g", "", "consumer", PROTOCOLS, SESSION_MS, REBALANCE_MS,
                                            instance_ids[1]),
            broker.engine.groups.join_group("g", first.member_id, "consumer", PROTOCOLS, SESSION_MS, REBALANCE_MS,
                                            instance_ids[0]))
        return [rejoined, newcomer]
    joined = call(broker, both)
    leader, follower = sorted(joined, key=lambda j: j.member_id != j.leader)
    leader_id = instance_ids[joined.index(leader)]
    follower_id = instance_ids[joined.index(follower)]
    plan = {leader.member_id: consumer_protocol.encode_assignment(sorted(partitions(0, 1))),
            follower.member_id: consumer_protocol.encode_assignment(sorted(partitions(2, 3)))}

    async def syncs() -> list[bytes]:
        return list(await asyncio.gather(
            broker.engine.groups.sync_group("g", leader.generation, leader.member_id, plan, leader_id),
            broker.engine.groups.sync_group("g", follower.generation, follower.member_id, {}, follower_id)))
    call(broker, syncs)
    assert group_of(broker).state is GroupState.STABLE
    return [leader, follower]


# -- the consumer protocol's -----------------------------------------------------------------------


def heartbeat(broker: Broker, member_id: str, epoch: int, **fields: Any) -> HeartbeatAnswer:
    if epoch == 0:
        fields.setdefault("rebalance_timeout_ms", 60_000)
        fields.setdefault("subscribed_topic_names", ("t",))
        fields.setdefault("owned", frozenset())
    return call(broker, broker.engine.groups.consumer_group_heartbeat, Heartbeat("g", member_id, epoch, **fields))


def group_of(broker: Broker) -> GroupMetadata:
    group = broker.engine.groups.coordinator.describe("g")
    assert group is not None
    return group


def consumer(broker: Broker) -> ConsumerGroup:
    found = group_of(broker).consumer
    assert found is not None, "not a consumer group"
    return found


def commit(broker: Broker, member_id: str, generation: int, version: int = 8) -> None:
    errors = call(broker, broker.engine.groups.commit_offsets, "g", {("t", 0): CommittedOffset(7)},
                  generation, member_id, None, version)
    assert errors == {("t", 0): None}


def tick(broker: Broker) -> None:
    async def run() -> None:
        broker.engine.groups.coordinator.tick()
    call(broker, run)


# -- the policy ------------------------------------------------------------------------------------


def test_the_policy_is_kafkas_key_with_its_values_and_default(open_broker):
    assert [p.value for p in MigrationPolicy] == ["bidirectional", "upgrade", "downgrade", "disabled"]
    assert MigrationPolicy.parse("UpGrade") is MigrationPolicy.UPGRADE  # case-insensitive, as Kafka
    assert open_broker().engine.groups.coordinator.consumer.migration_policy is MigrationPolicy.BIDIRECTIONAL
    with pytest.raises(ValueError, match="group.consumer.migration.policy"):
        MigrationPolicy.parse("sideways")


# -- upgrade ---------------------------------------------------------------------------------------


def test_a_consumer_member_joining_a_classic_group_upgrades_it_and_the_classic_members_keep_their_partitions(
        broker):
    leader, follower = classic_group(broker)
    commit(broker, leader.member_id, leader.generation)
    answer = heartbeat(broker, "a", 0)
    group = consumer(broker)
    assert group_of(broker).members == {}  # no classic group any more
    for joined, owned in ((leader, partitions(0, 1)), (follower, partitions(2, 3))):
        member = group.members[joined.member_id]
        assert member.classic is not None and member.classic.session_timeout_ms == SESSION_MS
        assert member.assigned == owned and member.member_epoch == joined.generation
    # the new member moved the group epoch; its partitions are still the classic members'
    assert group.group_epoch == leader.generation + 1 and answer.member_epoch == group.group_epoch
    assert answer.assignment == frozenset()
    # the offsets stayed
    fetched = call(broker, broker.engine.groups.fetch_offsets, "g", [("t", 0)])
    assert fetched[("t", 0)].offset == 7


def rejoin_until_settled(broker: Broker, joined: JoinResult) -> JoinResult:
    """What an eager classic consumer does: on REBALANCE_IN_PROGRESS it revokes everything,
    rejoins and syncs, until a heartbeat passes; each SyncGroup hands out its current
    assignment. A member that had to revoke needs two rounds (the first only revokes)."""
    for _ in range(3):
        try:
            classic_heartbeat(broker, joined.member_id, joined.generation)
            return joined
        except KafkaError as e:
            assert e.name == "REBALANCE_IN_PROGRESS", e
        joined = join(broker, joined.member_id)
        assert (joined.protocol_type, joined.protocol, joined.leader, joined.members) == ("consumer", "range", "", [])
        member = consumer(broker).members[joined.member_id]
        assert joined.generation == member.member_epoch
        assert sync(broker, joined) == member.assigned
    raise AssertionError(f"{joined.member_id} did not settle")


def test_classic_members_are_told_to_rejoin_and_give_up_partitions_for_the_new_member(broker):
    leader, follower = classic_group(broker)
    heartbeat(broker, "a", 0)
    target = consumer(broker).target["a"]
    assert len(target) == 1  # uniform: 4 partitions, 3 members
    for joined in (leader, follower):
        refused("REBALANCE_IN_PROGRESS", classic_heartbeat, broker, joined.member_id, joined.generation)
    settled = [rejoin_until_settled(broker, joined) for joined in (leader, follower)]
    assert {s.generation for s in settled} == {consumer(broker).group_epoch}
    assert heartbeat(broker, "a", consumer(broker).group_epoch, owned=frozenset()).assignment == target
    owned = [m.assigned for m in consumer(broker).members.values()]
    assert sorted(p for a in owned for p in a) == sorted(partitions(0, 1, 2, 3))
    assert all(m.state is MemberState.STABLE for m in consumer(broker).members.values())


def test_a_classic_member_that_still_owns_a_revoked_partition_stays_at_its_epoch(broker):
    joined = classic_group(broker)
    heartbeat(broker, "a", 0)
    group = consumer(broker)
    # the new member's partition comes from one of the two (which one: the member ids decide)
    giver = next(j for j in joined if group.target[j.member_id] < group.members[j.member_id].assigned)
    owned = sorted(p for _, p in group.members[giver.member_id].assigned)
    still_owned = consumer_protocol.INT16.fmt.pack(1) + consumer_protocol.SUBSCRIPTION_V0.encode(
        {"topics": ["t"], "user_data": None}) + consumer_protocol.SUBSCRIPTION_ADDED[1].encode(
        {"owned_partitions": [{"topic": "t", "partitions": owned}]})
    rejoined = join(broker, giver.member_id, protocols=[("range", still_owned)])
    member = consumer(broker).members[giver.member_id]
    assert member.state is MemberState.UNREVOKED_PARTITIONS and rejoined.generation == giver.generation
    # its SyncGroup hands out what it keeps: it revokes the rest, then rejoins
    assert sync(broker, rejoined) == member.assigned < frozenset(("t", p) for p in owned)


def test_classic_requests_to_a_consumer_group_are_checked_as_kafka_checks_them(broker):
    leader, follower = classic_group(broker)
    heartbeat(broker, "a", 0)
    refused("ILLEGAL_GENERATION", classic_heartbeat, broker, leader.member_id, leader.generation + 5)
    refused("UNKNOWN_MEMBER_ID", classic_heartbeat, broker, "a", 1)  # a member of the consumer protocol
    refused("UNKNOWN_MEMBER_ID", classic_heartbeat, broker, "nobody", 1)
    refused("INCONSISTENT_GROUP_PROTOCOL", join, broker, protocols=[("roundrobin", SUBSCRIPTION)])
    required = refused("MEMBER_ID_REQUIRED", call, broker, broker.engine.groups.join_group, "g", "", "consumer",
                       PROTOCOLS, SESSION_MS, REBALANCE_MS, None, require_known_member_id=True)
    assert required.member_id
    # a classic member commits with its generation (the member epoch), at any OffsetCommit version
    commit(broker, follower.member_id, follower.generation, version=2)
    refused("ILLEGAL_GENERATION", commit, broker, follower.member_id, follower.generation + 1)


def test_a_classic_members_session_is_its_own(broker, clock):
    leader, follower = classic_group(broker)
    heartbeat(broker, "a", 0)
    clock.advance(SESSION_MS - 1)
    refused("REBALANCE_IN_PROGRESS", classic_heartbeat, broker, leader.member_id, leader.generation)
    heartbeat(broker, "a", consumer(broker).group_epoch)
    clock.advance(1)
    tick(broker)
    eventually(lambda: follower.member_id not in consumer(broker).members, DEADLINE_S, "the silent one fenced")
    assert leader.member_id in consumer(broker).members


def test_a_classic_member_that_does_not_rejoin_within_its_rebalance_timeout_is_fenced(broker, clock):
    leader, follower = classic_group(broker)
    heartbeat(broker, "a", 0)
    refused("REBALANCE_IN_PROGRESS", classic_heartbeat, broker, leader.member_id, leader.generation)
    for _ in range(REBALANCE_MS // (SESSION_MS // 2)):
        clock.advance(SESSION_MS // 2)
        heartbeat(broker, "a", consumer(broker).members["a"].member_epoch)
        for joined in (leader, follower):
            try:
                classic_heartbeat(broker, joined.member_id, joined.generation)
            except KafkaError:
                pass
        tick(broker)
    eventually(lambda: leader.member_id not in consumer(broker).members, DEADLINE_S, "fenced for not rejoining")


def test_a_static_classic_member_is_replaced_by_its_consumer_protocol_incarnation(broker):
    leader, follower = classic_group(broker, instance_ids=("i1", "i2"))
    heartbeat(broker, "a", 0)
    epoch = consumer(broker).group_epoch
    back = heartbeat(broker, "a1", 0, instance_id="i1")  # no UNRELEASED_INSTANCE_ID: the classic one never leaves
    members = consumer(broker).members
    assert leader.member_id not in members and members["a1"].classic is None
    assert consumer(broker).group_epoch == epoch  # same subscription: no rebalance
    assert back.member_epoch == epoch
    refused("FENCED_INSTANCE_ID", call, broker, broker.engine.groups.heartbeat, "g", leader.generation,
            leader.member_id, "i1")


@pytest.mark.parametrize("policy", ["downgrade", "disabled"])
def test_the_policy_can_forbid_the_upgrade(open_broker, policy):
    b = open_broker(group_consumer_migration_policy=policy)
    b.create_topic("t", partitions=4)
    leader, _ = classic_group(b)
    refused("GROUP_ID_NOT_FOUND", heartbeat, b, "a", 0)
    assert group_of(b).consumer is None and len(group_of(b).members) == 2
    classic_heartbeat(b, leader.member_id, leader.generation)  # the classic group goes on


# -- downgrade -------------------------------------------------------------------------------------


def test_the_last_consumer_member_leaving_downgrades_the_group_and_a_rebalance_starts(broker):
    leader, follower = classic_group(broker)
    heartbeat(broker, "a", 0)
    epoch = consumer(broker).group_epoch
    target = dict(consumer(broker).target)
    heartbeat(broker, "a", -1)
    group = group_of(broker)
    assert group.consumer is None and group.group_type == "classic"
    # Stable at the group epoch the consumer group had, then a rebalance at once
    assert group.state is GroupState.PREPARING_REBALANCE and group.generation == epoch
    assert set(group.members) == {leader.member_id, follower.member_id}
    assert group.protocol_type == "consumer" and group.protocol == "range"
    for member_id in group.members:
        assert frozenset(consumer_protocol.decode_assignment(group.members[member_id].assignment)) == target[member_id]
    # the classic members learn it on their next heartbeat and rebalance as a classic group
    refused("REBALANCE_IN_PROGRESS", classic_heartbeat, broker, leader.member_id, group.generation)

    async def both() -> list[JoinResult]:
        return list(await asyncio.gather(*(
            broker.engine.groups.join_group("g", m, "consumer", PROTOCOLS, SESSION_MS, REBALANCE_MS)
            for m in (leader.member_id, follower.member_id))))
    rejoined = call(broker, both)
    assert {j.generation for j in rejoined} == {epoch + 1}
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_the_policy_can_forbid_the_downgrade(open_broker):
    b = open_broker(group_consumer_migration_policy="upgrade")
    b.create_topic("t", partitions=4)
    classic_group(b)
    heartbeat(b, "a", 0)
    heartbeat(b, "a", -1)
    assert group_of(b).consumer is not None and len(consumer(b).members) == 2


# -- after a restart -------------------------------------------------------------------------------


def test_both_conversions_are_replayed_after_a_restart(open_broker, broker):
    leader, follower = classic_group(broker)
    commit(broker, leader.member_id, leader.generation)
    heartbeat(broker, "a", 0)
    before = consumer(broker)
    snapshot = (before.group_epoch, before.assignment_epoch, dict(before.members), dict(before.target))
    broker.close()
    reopened = open_broker()
    after = consumer(reopened)
    assert (after.group_epoch, after.assignment_epoch, after.members, after.target) == snapshot
    assert group_of(reopened).members == {}
    assert call(reopened, reopened.engine.groups.fetch_offsets, "g", [("t", 0)])[("t", 0)].offset == 7
    # the classic members go on in the consumer group after the restart
    refused("REBALANCE_IN_PROGRESS", classic_heartbeat, reopened, leader.member_id, leader.generation)
    heartbeat(reopened, "a", -1)
    classic = group_of(reopened)
    value = (classic.generation, classic.protocol, sorted(classic.members),
             {m: classic.members[m].assignment for m in classic.members})
    reopened.close()
    again = open_broker()
    group = group_of(again)
    assert group.consumer is None
    assert (group.generation, group.protocol, sorted(group.members),
            {m: group.members[m].assignment for m in group.members}) == value
    assert call(again, again.engine.groups.fetch_offsets, "g", [("t", 0)])[("t", 0)].offset == 7


def test_a_static_consumer_member_replaced_by_its_classic_incarnation_downgrades_without_a_rebalance(broker):
    leader, follower = classic_group(broker, instance_ids=("i1", "i2"))
    heartbeat(broker, "a", 0, instance_id="i1")  # i1's consumer-protocol incarnation
    assert consumer(broker).static_member("i1").classic is None
    target = consumer(broker).target["a"]
    epoch = consumer(broker).group_epoch
    back = join(broker, instance_id="i1")  # i1 back on the classic protocol
    group = group_of(broker)
    assert group.consumer is None and group.state is GroupState.STABLE and group.generation == epoch
    assert back.generation == epoch and group.static_members["i1"] == back.member_id
    assert sync(broker, back, instance_id="i1") == target  # the replaced member's assignment



# -- the formats -----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(session=st.integers(0, 2**31 - 1),
       protocols=st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=64)), max_size=4),
       classic=st.booleans())
def test_a_members_classic_metadata_goes_through_its_record_and_back(session, protocols, classic):
    member = ConsumerMember("m", instance_id="i", subscribed_topic_names=("t",), rebalance_timeout_ms=5,
                            classic=ClassicMemberMetadata(session, tuple(protocols)) if classic else None)
    rebuilt: dict[str, ConsumerGroup] = {}
    key, value = consumer_group_records.member_metadata_record("g", member)
    consumer_group_records.replay(rebuilt, key, value, lambda _: None)
    assert rebuilt["g"].members["m"] == member


@settings(max_examples=200, deadline=None)
@given(version=st.integers(0, 5), topics=st.lists(st.text(max_size=10), max_size=4),
       owned=st.lists(st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 9)), max_size=6),
       rack=st.none() | st.text(max_size=5))
def test_a_subscription_of_any_version_is_read_with_its_owned_partitions_and_rack(version, topics, owned, rack):
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(owned)):
        by_topic.setdefault(topic, []).append(partition)
    fields = {"topics": topics, "user_data": None, "owned_partitions": [
        {"topic": t, "partitions": p} for t, p in by_topic.items()], "generation_id": 3, "rack_id": rack}
    data = consumer_protocol.INT16.fmt.pack(version) + consumer_protocol.SUBSCRIPTION_V0.encode(fields)
    for added in range(1, min(version, 3) + 1):
        data += consumer_protocol.SUBSCRIPTION_ADDED[added].encode(fields)
    read = consumer_protocol.decode_full_subscription(data + (b"\x00\x07" if version > 3 else b""))
    assert (read.version, read.topics) == (version, tuple(topics))
    assert read.owned_partitions == (frozenset(owned) if version >= 1 else frozenset())
    assert read.rack_id == (rack if version >= 3 else None)


def test_leave_group_removes_a_classic_member_and_an_admin_removes_any_static_member(broker):
    leader, follower = classic_group(broker, instance_ids=("i1", "i2"))
    heartbeat(broker, "a", 0, instance_id="i3")
    leave = broker.engine.groups.leave_group
    refused("UNKNOWN_MEMBER_ID", call, broker, leave, "g", "a")  # a consumer-protocol member heartbeats -1
    refused("FENCED_INSTANCE_ID", call, broker, leave, "g", "someone-else", "i1")
    call(broker, leave, "g", leader.member_id, "i1")
    assert leader.member_id not in consumer(broker).members
    call(broker, leave, "g", "", "i3")  # the admin's removal, by instance id alone: the consumer member
    # only a classic member remains: the group is classic again
    assert group_of(broker).consumer is None and set(group_of(broker).members) == {follower.member_id}


def test_an_upgrade_whose_write_fails_leaves_the_classic_group_as_it_was(open_broker, broker):
    leader, follower = classic_group(broker)
    broker.faults.add(api="Produce", topic="__consumer_offsets", error="KAFKA_STORAGE_ERROR", count=1)
    with pytest.raises(KafkaError):
        heartbeat(broker, "a", 0)
    group = group_of(broker)
    assert group.consumer is None and group.state is GroupState.STABLE
    assert set(group.members) == {leader.member_id, follower.member_id}
    classic_heartbeat(broker, leader.member_id, leader.generation)  # the classic group goes on
    assert sync(broker, follower) == partitions(2, 3)
    heartbeat(broker, "a", 0)  # the retry upgrades it
    assert set(consumer(broker).members) == {leader.member_id, follower.member_id, "a"}
    broker.close()
    assert set(consumer(open_broker()).members) == {leader.member_id, follower.member_id, "a"}
