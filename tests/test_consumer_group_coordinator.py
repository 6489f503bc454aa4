"""KIP-848 consumer groups in the group coordinator (exactly/coordinator/consumer_group_coordinator.py):
heartbeats, epochs, reconciliation, fencing, offsets by member epoch, recovery from the log.

Heartbeats are driven one by one on the engine's loop; session timeouts by the FakeClock
and the coordinator's tick, never by waiting in real time.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.coordinator import consumer_group_records
from exactly.coordinator.assignors import range_, uniform
from exactly.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState, MemberState
from exactly.coordinator.consumer_group_coordinator import Heartbeat, HeartbeatAnswer
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage.errors import KafkaError
from tests.waiting import eventually

DEADLINE_S = 10
SESSION_MS = 45_000


@pytest.fixture
def broker(open_broker) -> Broker:
    b = open_broker()
    b.create_topic("t", partitions=4)
    return b


def heartbeat(broker: Broker, member_id: str, epoch: int, group_id: str = "g", **fields: Any) -> HeartbeatAnswer:
    if epoch == 0:
        fields.setdefault("rebalance_timeout_ms", 60_000)
        fields.setdefault("subscribed_topic_names", ("t",))
        fields.setdefault("owned", frozenset())
    return broker.engine.call(broker.engine.groups.consumer_group_heartbeat,
                              Heartbeat(group_id, member_id, epoch, **fields), timeout=DEADLINE_S)


def refused(broker: Broker, name: str, member_id: str, epoch: int, **fields: Any) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        heartbeat(broker, member_id, epoch, **fields)
    assert caught.value.name == name, caught.value
    return caught.value


def consumer(broker: Broker, group_id: str = "g") -> ConsumerGroup:
    group = broker.engine.groups.coordinator.describe(group_id)
    assert group is not None and group.consumer is not None
    return group.consumer


def tick(broker: Broker) -> None:
    async def run() -> None:
        broker.engine.groups.coordinator.tick()
    broker.engine.call(run, timeout=DEADLINE_S)


def partitions(*indexes: int, topic: str = "t") -> frozenset[tuple[str, int]]:
    return frozenset((topic, p) for p in indexes)


# -- joining and reconciling ----------------------------------------------------------------------


def test_the_first_member_gets_every_partition_at_epoch_one(broker):
    answer = heartbeat(broker, "a", 0)
    assert answer.member_epoch == 1
    assert answer.assignment == partitions(0, 1, 2, 3)
    assert answer.heartbeat_interval_ms == 5_000
    assert consumer(broker).state is ConsumerGroupState.STABLE


def test_a_partition_moves_to_a_new_member_only_after_its_owner_revoked_it(broker):
    heartbeat(broker, "a", 0)
    joined = heartbeat(broker, "b", 0)
    # b is at the new epoch, but a still owns what b is to get: nothing yet
    assert joined.member_epoch == 2 and joined.assignment == frozenset()
    assert consumer(broker).members["b"].state is MemberState.UNRELEASED_PARTITIONS
    # a must revoke half before it may move on: its epoch stays
    revoking = heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3))
    assert revoking.member_epoch == 1 and len(revoking.assignment) == 2
    given_up = partitions(0, 1, 2, 3) - revoking.assignment
    assert heartbeat(broker, "b", 2).assignment is None  # still owned by a: unchanged
    # a says it revoked them: it moves to epoch 2, and b gets them on its next heartbeat
    assert heartbeat(broker, "a", 1, owned=revoking.assignment).member_epoch == 2
    assert heartbeat(broker, "b", 2).assignment == given_up
    assert consumer(broker).state is ConsumerGroupState.STABLE


def test_a_member_that_has_not_revoked_keeps_its_epoch_while_it_still_reports_them(broker):
    heartbeat(broker, "a", 0)
    heartbeat(broker, "b", 0)
    heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3))
    again = heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3))
    assert again.member_epoch == 1
    assert consumer(broker).members["a"].state is MemberState.UNREVOKED_PARTITIONS


def test_leaving_frees_the_partitions_for_the_others(broker):
    heartbeat(broker, "a", 0)
    heartbeat(broker, "b", 0)
    kept = heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3)).assignment
    heartbeat(broker, "a", 1, owned=kept)
    left = heartbeat(broker, "b", -1)
    assert left.member_epoch == -1
    after = heartbeat(broker, "a", 2, owned=kept)
    assert after.member_epoch == 3 and after.assignment == partitions(0, 1, 2, 3)


def test_range_assignor_gives_contiguous_ranges(broker):
    heartbeat(broker, "a", 0, server_assignor="range")
    heartbeat(broker, "b", 0, server_assignor="range")
    assert consumer(broker).target == {"a": partitions(0, 1), "b": partitions(2, 3)}


def test_a_regex_subscription_follows_topics_created_later(broker):
    answer = heartbeat(broker, "a", 0, subscribed_topic_names=None, subscribed_topic_regex="orders-.*")
    assert answer.assignment == frozenset()
    broker.create_topic("orders-eu", partitions=2)
    broker.create_topic("other", partitions=2)
    again = heartbeat(broker, "a", answer.member_epoch)
    assert again.assignment == partitions(0, 1, topic="orders-eu")
    assert again.member_epoch == answer.member_epoch + 1


# -- what a heartbeat is refused for ---------------------------------------------------------------


def test_invalid_heartbeats_are_answered_with_kafkas_errors(broker):
    refused(broker, "INVALID_REQUEST", "", 0)
    refused(broker, "INVALID_REQUEST", "a", 0, rebalance_timeout_ms=-1)
    refused(broker, "INVALID_REQUEST", "a", 0, subscribed_topic_names=None)
    refused(broker, "INVALID_REQUEST", "a", 0, owned=partitions(0))
    refused(broker, "INVALID_REQUEST", "a", -2)
    refused(broker, "UNSUPPORTED_ASSIGNOR", "a", 0, server_assignor="sticky")
    refused(broker, "INVALID_REGULAR_EXPRESSION", "a", 0, subscribed_topic_names=None, subscribed_topic_regex="(")
    refused(broker, "GROUP_ID_NOT_FOUND", "a", 3)


def test_epochs_ahead_or_stale_are_fenced_and_unknown_members_refused(broker):
    heartbeat(broker, "a", 0)
    refused(broker, "FENCED_MEMBER_EPOCH", "a", 2)
    refused(broker, "UNKNOWN_MEMBER_ID", "zombie", 1)
    heartbeat(broker, "b", 0)  # moves the group to epoch 2
    heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3))
    kept = consumer(broker).members["a"].assigned
    assert heartbeat(broker, "a", 1, owned=kept).member_epoch == 2
    # the answer that moved a to epoch 2 may have been lost: its previous epoch is accepted
    assert heartbeat(broker, "a", 1, owned=kept).member_epoch == 2
    refused(broker, "FENCED_MEMBER_EPOCH", "a", 1, owned=partitions(0, 1, 2, 3))


def test_a_classic_group_with_members_of_another_protocol_type_is_not_a_consumer_group(broker):
    # (one of the "consumer" protocol type is upgraded: tests/test_consumer_group_migration.py)
    async def join() -> None:
        broker.engine.groups.coordinator.groups["classic"] = gm = broker.engine.groups.coordinator._group("classic")
        gm.members["m"] = None  # type: ignore[assignment]
        gm.protocol_type = "connect"
    broker.engine.call(join, timeout=DEADLINE_S)
    refused(broker, "GROUP_ID_NOT_FOUND", "a", 0, group_id="classic")


# -- timers ----------------------------------------------------------------------------------------


def test_a_member_without_heartbeats_for_the_session_timeout_is_fenced(broker, clock):
    heartbeat(broker, "a", 0)
    heartbeat(broker, "b", 0)
    clock.advance(SESSION_MS - 1)
    heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3))
    clock.advance(1)
    tick(broker)
    eventually(lambda: "b" not in consumer(broker).members, DEADLINE_S, "b fenced")
    assert "a" in consumer(broker).members
    assert consumer(broker).group_epoch == 3


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced(broker, clock):
    heartbeat(broker, "a", 0, rebalance_timeout_ms=1_000)
    heartbeat(broker, "b", 0)
    heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3))  # told to revoke
    clock.advance(1_000)
    heartbeat(broker, "b", 2)  # b's session is fine
    tick(broker)
    eventually(lambda: "a" not in consumer(broker).members, DEADLINE_S, "a fenced")


def test_the_next_deadline_is_the_earliest_session(broker, clock):
    heartbeat(broker, "a", 0)
    assert broker.engine.groups.coordinator.next_deadline_ms() == clock.now_ms() + SESSION_MS


# -- static members --------------------------------------------------------------------------------


def test_a_static_member_back_under_a_new_id_keeps_its_assignment_without_a_rebalance(broker):
    first = heartbeat(broker, "a1", 0, instance_id="i")
    refused(broker, "UNRELEASED_INSTANCE_ID", "a2", 0, instance_id="i")
    assert heartbeat(broker, "a1", -2, instance_id="i").member_epoch == -2
    epoch = consumer(broker).group_epoch
    back = heartbeat(broker, "a2", 0, instance_id="i")
    assert back.member_epoch == first.member_epoch and back.assignment == first.assignment
    assert consumer(broker).group_epoch == epoch
    refused(broker, "FENCED_INSTANCE_ID", "a1", 1, instance_id="i")


# -- offsets ---------------------------------------------------------------------------------------


def commit(broker: Broker, member_id: str, epoch: int, version: int = 9) -> None:
    errors = broker.engine.call(broker.engine.groups.commit_offsets, "g", {("t", 0): CommittedOffset(5)},
                                epoch, member_id, None, version, timeout=DEADLINE_S)
    assert errors == {("t", 0): None}


def test_offset_commits_are_fenced_by_the_member_epoch(broker):
    heartbeat(broker, "a", 0)
    commit(broker, "a", 1)
    for member_id, epoch, version, name in (("a", 0, 9, "STALE_MEMBER_EPOCH"), ("x", 1, 9, "UNKNOWN_MEMBER_ID"),
                                            ("a", 1, 8, "UNSUPPORTED_VERSION")):
        with pytest.raises(KafkaError) as caught:
            commit(broker, member_id, epoch, version)
        assert caught.value.name == name
    fetched = broker.engine.call(broker.engine.groups.fetch_offsets, "g", [("t", 0)], False, "a", 1,
                                 timeout=DEADLINE_S)
    assert fetched[("t", 0)].offset == 5
    with pytest.raises(KafkaError) as caught:
        broker.engine.call(broker.engine.groups.fetch_offsets, "g", [("t", 0)], False, "a", 7, timeout=DEADLINE_S)
    assert caught.value.name == "STALE_MEMBER_EPOCH"


def test_an_empty_consumer_group_takes_commits_without_a_member(broker):
    heartbeat(broker, "a", 0)
    heartbeat(broker, "a", -1)
    commit(broker, "", -1)


# -- persistence -----------------------------------------------------------------------------------


def test_a_restart_recovers_epochs_members_and_assignments(open_broker, broker):
    heartbeat(broker, "a", 0, instance_id="i", server_assignor="range")
    heartbeat(broker, "b", 0)
    heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3), instance_id="i")
    commit(broker, "b", 2)
    before = consumer(broker)
    snapshot = (before.group_epoch, before.assignment_epoch, dict(before.members), dict(before.target),
                before.subscription_hash)
    broker.close()
    reopened = open_broker()
    after = consumer(reopened)
    assert (after.group_epoch, after.assignment_epoch, after.members, after.target,
            after.subscription_hash) == snapshot
    # the members go on where they were
    assert heartbeat(reopened, "b", 2).member_epoch == 2
    fetched = reopened.engine.call(reopened.engine.groups.fetch_offsets, "g", [("t", 0)], timeout=DEADLINE_S)
    assert fetched[("t", 0)].offset == 5


def test_a_member_told_to_revoke_before_a_restart_is_fenced_after_its_rebalance_timeout(open_broker, broker, clock):
    heartbeat(broker, "a", 0, rebalance_timeout_ms=1_000)
    heartbeat(broker, "b", 0)
    heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3))  # told to revoke; the broker dies
    broker.close()
    reopened = open_broker()
    tick(reopened)  # the timers of the members loaded from the log
    clock.advance(1_000)
    heartbeat(reopened, "b", 2)  # b's session is fine; a is alive but never revokes
    heartbeat(reopened, "a", 1, owned=partitions(0, 1, 2, 3))
    tick(reopened)
    eventually(lambda: "a" not in consumer(reopened).members, DEADLINE_S, "a fenced")
    assert heartbeat(reopened, "b", 2).assignment == partitions(0, 1, 2, 3)


def test_a_member_whose_last_answer_a_crash_swallowed_goes_on_from_its_previous_epoch(open_broker, broker):
    heartbeat(broker, "a", 0)
    heartbeat(broker, "b", 0)
    kept = heartbeat(broker, "a", 1, owned=partitions(0, 1, 2, 3)).assignment
    heartbeat(broker, "a", 1, owned=kept)  # durable at epoch 2; the broker dies before a hears it
    broker.close()
    reopened = open_broker()
    refused(reopened, "FENCED_MEMBER_EPOCH", "a", 1)  # not saying what it owns: it may own more
    assert heartbeat(reopened, "a", 1, owned=kept).member_epoch == 2
    refused(reopened, "FENCED_MEMBER_EPOCH", "a", 3, owned=kept)  # an epoch it was never given


def test_a_deleted_consumer_group_stays_deleted_after_a_restart(open_broker, broker):
    heartbeat(broker, "a", 0)
    with pytest.raises(KafkaError) as caught:
        broker.engine.call(broker.engine.groups.delete_group, "g", timeout=DEADLINE_S)
    assert caught.value.name == "NON_EMPTY_GROUP"
    heartbeat(broker, "a", -1)
    broker.engine.call(broker.engine.groups.delete_group, "g", timeout=DEADLINE_S)
    broker.close()
    assert open_broker().engine.groups.coordinator.describe("g") is None


# -- the assignors and the records, as properties ------------------------------------------------------

members_st = st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True)


@settings(max_examples=200, deadline=None)
@given(members=members_st, count=st.integers(0, 40), previous_members=members_st)
def test_uniform_gives_every_partition_once_balanced_and_keeps_what_it_can(members, count, previous_members):
    subscriptions = {m: frozenset({"t"}) for m in members}
    previous = uniform({m: frozenset({"t"}) for m in previous_members}, {"t": count}, {})
    result = uniform(subscriptions, {"t": count}, previous)
    owned = [tp for tps in result.values() for tp in tps]
    assert sorted(owned) == [("t", p) for p in range(count)]
    sizes = [len(tps) for tps in result.values()]
    assert max(sizes) - min(sizes) <= 1
    for m in set(members) & set(previous_members):
        # a member keeps its old partitions up to its share
        assert len(result[m] & previous[m]) >= min(len(previous[m]), count // len(members))


@settings(max_examples=100, deadline=None)
@given(members=members_st, counts=st.lists(st.integers(0, 9), min_size=1, max_size=3))
def test_range_gives_each_topic_once_in_contiguous_ranges(members, counts):
    topics = {f"t{i}": c for i, c in enumerate(counts)}
    result = range_({m: frozenset(topics) for m in members}, topics, {})
    for topic, count in topics.items():
        owned = sorted(p for tps in result.values() for t, p in tps if t == topic)
        assert owned == list(range(count))
        for tps in result.values():
            mine = sorted(p for t, p in tps if t == topic)
            assert mine == list(range(mine[0], mine[0] + len(mine))) if mine else True


def test_records_replay_to_the_same_group():
    import uuid

    ids = {"t": uuid.uuid4(), "u": uuid.uuid4()}
    names = {v: k for k, v in ids.items()}
    group = ConsumerGroup("g", group_epoch=3, assignment_epoch=3, subscription_hash=42)
    from exactly.coordinator.consumer_group import ConsumerMember
    group.members = {"a": ConsumerMember("a", instance_id="i", client_id="c", subscribed_topic_names=("t", "u"),
                                         rebalance_timeout_ms=5, member_epoch=3, previous_member_epoch=2,
                                         state=MemberState.UNREVOKED_PARTITIONS, assigned=partitions(0),
                                         pending_revocation=partitions(1, topic="u")),
                     "b": ConsumerMember("b", subscribed_topic_regex="t.*", member_epoch=3)}
    group.target = {"a": partitions(0), "b": partitions(1, topic="u")}
    rebuilt: dict[str, ConsumerGroup] = {}
    for key, value in consumer_group_records.records_between(None, group, ids.get):
        consumer_group_records.replay(rebuilt, key, value, names.get)
    again = rebuilt["g"]
    assert (again.group_epoch, again.assignment_epoch, again.subscription_hash, again.members, again.target) == (
        group.group_epoch, group.assignment_epoch, group.subscription_hash, group.members, group.target)
    for key, value in consumer_group_records.records_between(group, None, ids.get):
        consumer_group_records.replay(rebuilt, key, value, names.get)
    assert rebuilt == {}
