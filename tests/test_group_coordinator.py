"""The group coordinator (exactly/coordinator/group_coordinator.py): every request branch and its error.

The coordinator's coroutines run on the engine's loop. Members that have to wait
for each other (JoinGroup, SyncGroup) are started as tasks on the loop
(:func:`spawn`) and their outcome is awaited with a deadline (:func:`outcome`);
session and rebalance timeouts are driven by advancing the FakeClock and
ticking the coordinator (:func:`tick`), never by waiting in real time.
"""

from __future__ import annotations

import asyncio
import itertools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.coordinator import offsets_log
from exactly.coordinator.group_coordinator import JoinResult
from exactly.coordinator.group_metadata import (
    VALID_PREVIOUS,
    CommittedOffset,
    GroupMetadata,
    GroupState,
    IllegalGroupTransitionError,
)
from exactly.storage.errors import KafkaError
from tests.conftest import SMALL_INTERNAL_TOPICS

#: the longest any single blocking call may take before the test fails instead of hanging
DEADLINE_S = 10
SESSION_MS = 10_000
PROTOCOLS = [("range", b"meta")]
G = GroupState


# -- harness ------------------------------------------------------------------------------------


@pytest.fixture
def broker(open_broker) -> Broker:
    return open_broker()


def call(broker: Broker, fn, *args: Any, **kwargs: Any) -> Any:
    """Run one coordinator coroutine on the loop; fail rather than hang."""
    return broker.engine.call(fn, *args, timeout=DEADLINE_S, **kwargs)


def spawn(broker: Broker, fn, *args: Any, **kwargs: Any) -> asyncio.Task:
    """Start ``fn(*args)`` as a task on the loop and let it run to its first wait."""
    async def start() -> asyncio.Task:
        task = asyncio.ensure_future(fn(*args, **kwargs))
        for _ in range(3):
            await asyncio.sleep(0)
        return task
    return call(broker, start)


def outcome(broker: Broker, task: asyncio.Task) -> Any:
    """The result of a spawned task (its exception is raised), within the deadline."""
    async def wait() -> Any:
        return await asyncio.wait_for(asyncio.shield(task), DEADLINE_S - 1)
    return call(broker, wait)


def still_waiting(broker: Broker, task: asyncio.Task) -> bool:
    async def check() -> bool:
        await asyncio.sleep(0)
        return not task.done()
    return call(broker, check)


def tick(broker: Broker) -> None:
    """One pass of the coordinator's timers at the FakeClock's current time."""
    async def run() -> None:
        broker.engine.groups.coordinator.tick()
    call(broker, run)


def gc(broker: Broker):
    return broker.engine.groups.coordinator


def group(broker: Broker, group_id: str) -> GroupMetadata:
    found = gc(broker).describe(group_id)
    assert found is not None
    return found


@contextmanager
def kafka_error(name: str, code: int) -> Iterator[pytest.ExceptionInfo]:
    with pytest.raises(KafkaError) as info:
        yield info
    assert (info.value.name, info.value.code) == (name, code), repr(info.value)


def join(broker: Broker, group_id: str, member_id: str = "", *, protocol_type: str = "consumer",
         protocols=PROTOCOLS, session_ms: int = SESSION_MS, rebalance_ms: int = -1,
         instance_id: str | None = None, client_id: str = "", require_known: bool = False,
         skipping: bool = False) -> asyncio.Task:
    """JoinGroup; ``require_known``: as v4+ asks (KIP-394); ``skipping``: as v9 allows."""
    return spawn(broker, gc(broker).join_group, group_id, member_id, protocol_type, list(protocols),
                 session_ms, rebalance_ms, instance_id, client_id, "", require_known, skipping)


def finish_rebalance(broker: Broker, group_id: str, members: list[str], *waiting: asyncio.Task,
                     **join_kwargs: Any) -> list[JoinResult]:
    """Rejoin ``members`` at once, then collect every join (theirs and ``waiting``)."""
    rejoins = [join(broker, group_id, m, **join_kwargs) for m in members]
    return [outcome(broker, t) for t in [*rejoins, *waiting]]


@dataclass
class Formed:
    generation: int
    leader: str
    members: list[str]  # in join order


def sync_everyone(broker: Broker, group_id: str, results: list[JoinResult]) -> dict[str, bytes]:
    """SyncGroup for every member at once; the leader assigns ``b"to:" + member id``."""
    leader = next(r for r in results if r.member_id == r.leader)
    assignments = {m: b"to:" + m.encode() for m, _, _ in leader.members}

    async def sync_all() -> list[bytes]:
        return await asyncio.gather(*(
            gc(broker).sync_group(group_id, r.generation, r.member_id,
                                  assignments if r is leader else None) for r in results))
    got = call(broker, sync_all)
    return {r.member_id: a for r, a in zip(results, got)}


def form_group(broker: Broker, group_id: str, n: int, **join_kwargs: Any) -> Formed:
    """Grow a Stable group to ``n`` members the way clients do: each newcomer's join
    starts a rebalance that completes when the existing members have rejoined."""
    members: list[str] = []
    results: list[JoinResult] = []
    instance_ids = join_kwargs.pop("instance_ids", [None] * n)
    for i in range(n):
        newcomer = join(broker, group_id, instance_id=instance_ids[i], client_id=f"c{i}", **join_kwargs)
        rejoins = [join(broker, group_id, m, instance_id=instance_ids[j], **join_kwargs)
                   for j, m in enumerate(members)]
        results = [outcome(broker, t) for t in [*rejoins, newcomer]]
        members.append(results[-1].member_id)
        sync_everyone(broker, group_id, results)
    assert group(broker, group_id).state is G.STABLE
    return Formed(results[0].generation, results[0].leader, members)


# -- JoinGroup ------------------------------------------------------------------------------------


def test_join_with_empty_group_id_is_invalid_group_id(broker):
    with kafka_error("INVALID_GROUP_ID", 24):
        outcome(broker, join(broker, ""))


@pytest.mark.parametrize("session_ms", [5_999, 1_800_001, 0, -1])
def test_join_with_session_timeout_outside_the_broker_range_is_rejected(broker, session_ms):
    with kafka_error("INVALID_SESSION_TIMEOUT", 26):
        outcome(broker, join(broker, "g", session_ms=session_ms))
    assert gc(broker).describe("g") is None or not group(broker, "g").members


@pytest.mark.parametrize("session_ms", [6_000, 1_800_000])
def test_join_at_the_session_timeout_bounds_is_accepted(broker, session_ms):
    assert outcome(broker, join(broker, "g", session_ms=session_ms)).generation == 1


def test_session_timeout_bounds_follow_the_broker_config(open_broker):
    b = open_broker(**{"group.min.session.timeout.ms": 1000, "group.max.session.timeout.ms": 2000})
    assert outcome(b, join(b, "g", session_ms=1000)).generation == 1
    with kafka_error("INVALID_SESSION_TIMEOUT", 26):
        outcome(b, join(b, "h", session_ms=2001))


@pytest.mark.parametrize("protocol_type, protocols", [
    ("connect", PROTOCOLS),                   # another protocol type
    ("consumer", [("roundrobin", b"")]),      # no protocol in common
    ("consumer", []),                         # no protocol at all
])
def test_join_with_a_protocol_no_member_shares_is_inconsistent(broker, protocol_type, protocols):
    first = outcome(broker, join(broker, "g"))
    with kafka_error("INCONSISTENT_GROUP_PROTOCOL", 23):
        outcome(broker, join(broker, "g", protocol_type=protocol_type, protocols=protocols))
    g = group(broker, "g")
    assert list(g.members) == [first.member_id] and g.state is G.COMPLETING_REBALANCE


def test_first_member_of_an_empty_group_may_use_any_protocol_type(broker):
    assert outcome(broker, join(broker, "g", protocol_type="connect")).protocol_type == "connect"


def test_join_with_an_unknown_member_id_is_rejected(broker):
    outcome(broker, join(broker, "g"))
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        outcome(broker, join(broker, "g", "nobody"))
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        outcome(broker, join(broker, "other-group", "nobody"))


def test_join_chooses_the_protocol_every_member_supports(broker):
    a = outcome(broker, join(broker, "g", protocols=[("roundrobin", b"ra"), ("range", b"na")]))
    b_task = join(broker, "g", protocols=[("range", b"nb")])
    a_task = join(broker, "g", a.member_id, protocols=[("roundrobin", b"ra"), ("range", b"na")])
    a2, b = outcome(broker, a_task), outcome(broker, b_task)
    assert a2.protocol == b.protocol == "range"
    leader = a2 if a2.member_id == a2.leader else b
    assert {m: meta for m, _, meta in leader.members} == {a.member_id: b"na", b.member_id: b"nb"}


def test_two_members_joining_together_share_a_generation_and_one_leader_sees_all(open_broker, clock):
    # group.initial.rebalance.delay.ms holds the first rebalance open for more joiners; a
    # joiner during a delay earns another one (Kafka's InitialDelayedJoin)
    b = open_broker(**{"group.initial.rebalance.delay.ms": 3000})
    t1 = join(b, "g", protocols=[("range", b"meta-1")], client_id="one")
    t2 = join(b, "g", protocols=[("range", b"meta-2")], client_id="two")
    tick(b)
    assert still_waiting(b, t1) and still_waiting(b, t2)
    clock.advance(3000)
    tick(b)
    assert still_waiting(b, t1) and still_waiting(b, t2)  # "two" joined during the first delay
    clock.advance(3000)
    tick(b)
    r1, r2 = outcome(b, t1), outcome(b, t2)
    assert r1.generation == r2.generation == 1
    assert r1.leader == r2.leader and r1.leader in (r1.member_id, r2.member_id)
    assert r1.member_id != r2.member_id
    assert r1.member_id.startswith("one-") and r2.member_id.startswith("two-")
    leader, follower = (r1, r2) if r1.member_id == r1.leader else (r2, r1)
    assert follower.members == []
    assert sorted((m, meta) for m, _, meta in leader.members) == sorted(
        [(r1.member_id, b"meta-1"), (r2.member_id, b"meta-2")])
    assert r1.protocol == r2.protocol == "range" and r1.protocol_type == "consumer"
    assert group(b, "g").state is G.COMPLETING_REBALANCE


def test_a_newcomer_waits_until_existing_members_rejoin(broker):
    a = outcome(broker, join(broker, "g"))
    sync_everyone(broker, "g", [a])
    newcomer = join(broker, "g")
    assert still_waiting(broker, newcomer)
    assert group(broker, "g").state is G.PREPARING_REBALANCE
    rejoined = outcome(broker, join(broker, "g", a.member_id))
    joined = outcome(broker, newcomer)
    assert rejoined.generation == joined.generation == a.generation + 1
    assert rejoined.leader == joined.leader == a.member_id  # the leader keeps its role


def cancel(broker: Broker, task: asyncio.Task) -> None:
    async def run() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    call(broker, run)


def test_a_new_member_that_gives_up_its_join_is_forgotten(broker):
    formed = form_group(broker, "g", 1)
    newcomer = join(broker, "g")
    assert len(group(broker, "g").members) == 2
    cancel(broker, newcomer)  # the client closed while waiting
    assert list(group(broker, "g").members) == formed.members
    r = outcome(broker, join(broker, "g", formed.members[0]))  # completes without waiting for it
    assert [m for m, _, _ in r.members] == formed.members


def test_a_known_member_that_gives_up_its_rejoin_has_not_rejoined(broker, clock):
    formed = form_group(broker, "g", 2, rebalance_ms=20_000, session_ms=30_000)
    stays, quits = formed.members
    newcomer = join(broker, "g", rebalance_ms=20_000, session_ms=30_000)
    cancel(broker, join(broker, "g", quits, rebalance_ms=20_000, session_ms=30_000))
    rejoin = join(broker, "g", stays, rebalance_ms=20_000, session_ms=30_000)
    assert still_waiting(broker, newcomer) and still_waiting(broker, rejoin)
    clock.advance(20_000)
    tick(broker)
    assert outcome(broker, rejoin).generation == outcome(broker, newcomer).generation == formed.generation + 1
    assert quits not in group(broker, "g").members


def test_a_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation(broker):
    """Kafka answers such a JoinGroup at once with the generation the follower already
    has (a client that lost a JoinGroup answer sends it again): no rebalance."""
    formed = form_group(broker, "g", 2)
    leader, follower = formed.members
    again = outcome(broker, join(broker, "g", follower))
    assert (again.generation, again.leader, again.members) == (formed.generation, leader, [])
    g = group(broker, "g")
    assert g.state is G.STABLE and g.generation == formed.generation
    assert call(broker, gc(broker).sync_group, "g", again.generation, follower) == b"to:" + follower.encode()


def test_a_member_rejoining_unchanged_while_the_generation_syncs_gets_it_again(broker):
    formed = form_group(broker, "g", 1)
    (leader,) = formed.members
    newcomer = join(broker, "g")
    r_leader, r_new = finish_rebalance(broker, "g", [leader], newcomer)
    assert group(broker, "g").state is G.COMPLETING_REBALANCE
    again = outcome(broker, join(broker, "g", leader))  # the leader lost its JoinGroup answer
    assert (again.generation, again.leader) == (r_leader.generation, leader)
    assert {m for m, _, _ in again.members} == {leader, r_new.member_id}
    assert group(broker, "g").state is G.COMPLETING_REBALANCE


@pytest.mark.parametrize("who, protocols", [("leader", PROTOCOLS), ("follower", [("range", b"changed")])])
def test_the_leader_or_a_changed_follower_rejoining_a_stable_group_rebalances(broker, who, protocols):
    formed = form_group(broker, "g", 2)
    rejoining = formed.members[0 if who == "leader" else 1]
    waiting = join(broker, "g", rejoining, protocols=protocols)
    assert still_waiting(broker, waiting) and group(broker, "g").state is G.PREPARING_REBALANCE
    other = [m for m in formed.members if m != rejoining]
    results = finish_rebalance(broker, "g", other, waiting)
    assert {r.generation for r in results} == {formed.generation + 1}


# -- SyncGroup ------------------------------------------------------------------------------------


def test_sync_hands_every_member_the_leaders_assignment(broker):
    formed = form_group(broker, "g", 3)
    g = group(broker, "g")
    assert {m: g.members[m].assignment for m in formed.members} == {
        m: b"to:" + m.encode() for m in formed.members}
    # a late SyncGroup of a Stable group gets the assignment again
    for m in formed.members:
        assert call(broker, gc(broker).sync_group, "g", formed.generation, m) == b"to:" + m.encode()


def test_a_follower_syncing_first_waits_for_the_leader(broker):
    a = outcome(broker, join(broker, "g"))
    sync_everyone(broker, "g", [a])
    t_new = join(broker, "g")
    r_a, r_new = outcome(broker, join(broker, "g", a.member_id)), outcome(broker, t_new)
    follower = spawn(broker, gc(broker).sync_group, "g", r_new.generation, r_new.member_id)
    assert still_waiting(broker, follower)
    assert call(broker, gc(broker).sync_group, "g", r_a.generation, r_a.member_id,
                {r_a.member_id: b"A", r_new.member_id: b"N"}) == b"A"
    assert outcome(broker, follower) == b"N"


def test_sync_naming_another_protocol_than_the_generations_is_inconsistent(broker):
    """SyncGroup v5: Kafka checks the protocol type and name the member names."""
    formed = form_group(broker, "g", 1)
    (a,) = formed.members
    for protocol_type, protocol_name in [("connect", None), (None, "roundrobin")]:
        with kafka_error("INCONSISTENT_GROUP_PROTOCOL", 23):
            call(broker, gc(broker).sync_group, "g", formed.generation, a, None, None, protocol_type, protocol_name)
    assert call(broker, gc(broker).sync_group, "g", formed.generation, a, None, None,
                "consumer", "range") == b"to:" + a.encode()


def test_sync_with_the_wrong_generation_is_illegal(broker):
    formed = form_group(broker, "g", 2)
    for generation in (formed.generation - 1, formed.generation + 1, -1):
        with kafka_error("ILLEGAL_GENERATION", 22):
            call(broker, gc(broker).sync_group, "g", generation, formed.members[0])


def test_sync_of_an_unknown_member_is_rejected(broker):
    formed = form_group(broker, "g", 1)
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).sync_group, "g", formed.generation, "nobody")


def test_sync_while_a_rebalance_is_preparing_is_rebalance_in_progress(broker):
    formed = form_group(broker, "g", 2)
    newcomer = join(broker, "g")
    assert group(broker, "g").state is G.PREPARING_REBALANCE
    with kafka_error("REBALANCE_IN_PROGRESS", 27):
        call(broker, gc(broker).sync_group, "g", formed.generation, formed.members[1])
    finish_rebalance(broker, "g", formed.members, newcomer)


def test_a_waiting_sync_fails_when_a_new_rebalance_starts(broker):
    a = outcome(broker, join(broker, "g"))
    sync_everyone(broker, "g", [a])
    t_b = join(broker, "g")
    outcome(broker, join(broker, "g", a.member_id))
    b = outcome(broker, t_b)
    follower = b if b.member_id != b.leader else a
    waiting = spawn(broker, gc(broker).sync_group, "g", follower.generation, follower.member_id)
    newcomer = join(broker, "g")  # starts another rebalance before the leader synced
    with kafka_error("REBALANCE_IN_PROGRESS", 27):
        outcome(broker, waiting)
    results = finish_rebalance(broker, "g", [a.member_id, b.member_id], newcomer)
    assert {r.generation for r in results} == {b.generation + 1}


def test_a_failed_store_of_the_assignment_fails_every_waiting_member(broker):
    """The leader's SyncGroup stores the assignment in __consumer_offsets; a disk that
    refuses it fails the leader and every waiting follower with NOT_COORDINATOR (Kafka's
    answer to a failed group write: the members find the coordinator and rejoin)."""
    a = outcome(broker, join(broker, "g"))
    sync_everyone(broker, "g", [a])
    t_b = join(broker, "g")
    ra, rb = finish_rebalance(broker, "g", [a.member_id], t_b)
    leader, follower = (ra, rb) if ra.member_id == ra.leader else (rb, ra)
    waiting = spawn(broker, gc(broker).sync_group, "g", follower.generation, follower.member_id)

    disk = broker.faults.add(api="Produce", topic=offsets_log.TOPIC, error="KAFKA_STORAGE_ERROR")
    with kafka_error("NOT_COORDINATOR", 16):
        call(broker, gc(broker).sync_group, "g", leader.generation, leader.member_id,
             {leader.member_id: b"L", follower.member_id: b"F"})
    with kafka_error("NOT_COORDINATOR", 16):
        outcome(broker, waiting)
    assert group(broker, "g").state is G.PREPARING_REBALANCE  # Kafka rebalances at once
    disk.remove()
    # the members rejoin and the next generation completes normally
    results = finish_rebalance(broker, "g", [leader.member_id, follower.member_id])
    got = sync_everyone(broker, "g", results)
    assert got == {m: b"to:" + m.encode() for m in got}
    assert group(broker, "g").state is G.STABLE


# -- Heartbeat ------------------------------------------------------------------------------------


def test_heartbeat_of_a_current_member_succeeds(broker):
    formed = form_group(broker, "g", 2)
    for m in formed.members:
        assert call(broker, gc(broker).heartbeat, "g", formed.generation, m) is None


def test_heartbeat_of_an_unknown_member_is_rejected(broker):
    formed = form_group(broker, "g", 1)
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).heartbeat, "g", formed.generation, "nobody")
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).heartbeat, "no-such-group", 1, formed.members[0])


def test_heartbeat_with_the_wrong_generation_is_illegal(broker):
    formed = form_group(broker, "g", 2)
    with kafka_error("ILLEGAL_GENERATION", 22):
        call(broker, gc(broker).heartbeat, "g", formed.generation - 1, formed.members[0])


def test_heartbeat_while_rebalancing_asks_the_member_to_rejoin(broker):
    formed = form_group(broker, "g", 2)
    newcomer = join(broker, "g")
    for m in formed.members:
        with kafka_error("REBALANCE_IN_PROGRESS", 27):
            call(broker, gc(broker).heartbeat, "g", formed.generation, m)
    finish_rebalance(broker, "g", formed.members, newcomer)


# -- session and rebalance timeouts ---------------------------------------------------------------


def test_a_member_silent_past_its_session_timeout_is_removed_and_the_group_rebalances(broker, clock):
    formed = form_group(broker, "g", 2)
    alive, silent = formed.members
    clock.advance(SESSION_MS * 6 // 10)
    call(broker, gc(broker).heartbeat, "g", formed.generation, alive)
    tick(broker)
    assert set(group(broker, "g").members) == {alive, silent}  # not silent long enough yet
    clock.advance(SESSION_MS * 6 // 10)
    tick(broker)
    g = group(broker, "g")
    assert set(g.members) == {alive}
    assert g.state is G.PREPARING_REBALANCE
    with kafka_error("REBALANCE_IN_PROGRESS", 27):
        call(broker, gc(broker).heartbeat, "g", formed.generation, alive)
    rejoined = outcome(broker, join(broker, "g", alive))
    assert rejoined.generation == formed.generation + 1
    assert rejoined.leader == alive and [m for m, _, _ in rejoined.members] == [alive]
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).heartbeat, "g", formed.generation, silent)


def test_every_member_timing_out_empties_the_group_with_a_new_generation(broker, clock):
    formed = form_group(broker, "g", 2)
    clock.advance(SESSION_MS + 1)
    tick(broker)
    g = group(broker, "g")
    assert g.state is G.EMPTY and not g.members
    assert g.generation == formed.generation + 1


def test_a_member_that_does_not_rejoin_in_the_rebalance_timeout_is_dropped(broker, clock):
    formed = form_group(broker, "g", 2, rebalance_ms=20_000, session_ms=30_000)
    keen, slow = formed.members
    newcomer = join(broker, "g", rebalance_ms=20_000, session_ms=30_000)
    rejoin = join(broker, "g", keen, rebalance_ms=20_000, session_ms=30_000)
    clock.advance(19_000)
    tick(broker)
    assert still_waiting(broker, newcomer) and still_waiting(broker, rejoin)
    clock.advance(1_000)
    tick(broker)
    r_keen, r_new = outcome(broker, rejoin), outcome(broker, newcomer)
    assert r_keen.generation == r_new.generation == formed.generation + 1
    assert set(group(broker, "g").members) == {keen, r_new.member_id}
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).heartbeat, "g", formed.generation, slow)


def test_a_leader_that_never_syncs_times_out_and_the_followers_rejoin(broker, clock):
    a = outcome(broker, join(broker, "g"))
    sync_everyone(broker, "g", [a])
    t_b = join(broker, "g")
    ra, rb = outcome(broker, join(broker, "g", a.member_id)), outcome(broker, t_b)
    follower = rb if rb.member_id != rb.leader else ra
    waiting = spawn(broker, gc(broker).sync_group, "g", follower.generation, follower.member_id)
    clock.advance(SESSION_MS // 2)
    call(broker, gc(broker).heartbeat, "g", follower.generation, follower.member_id)
    clock.advance(SESSION_MS // 2 + 1)
    tick(broker)  # the leader is silent past its session; the follower heartbeated
    with kafka_error("REBALANCE_IN_PROGRESS", 27):
        outcome(broker, waiting)
    again = outcome(broker, join(broker, "g", follower.member_id))
    assert again.leader == follower.member_id and again.generation == follower.generation + 1


# -- timers as Kafka counts them ------------------------------------------------------------------
#
# Kafka restarts a member's session when a join completes, when its SyncGroup is answered,
# on Heartbeat and on OffsetCommit; the session does not run while a known member waits in
# JoinGroup or SyncGroup (GroupCoordinator's completeAndScheduleNextHeartbeatExpiration and
# MemberMetadata.hasSatisfiedHeartbeat).

SHORT_SESSION_MS = 6_000  # the broker's group.min.session.timeout.ms
SLOW = {"session_ms": SHORT_SESSION_MS, "rebalance_ms": 60_000}


def heartbeat(broker: Broker, group_id: str, generation: int, member_id: str) -> None:
    call(broker, gc(broker).heartbeat, group_id, generation, member_id)


def test_a_member_that_waited_in_join_longer_than_its_session_stays_after_the_rebalance(broker, clock):
    """The reported case: b joins while a is still consuming, and a rejoins only after
    10 s (inside its rebalance timeout), so b waited in JoinGroup longer than its 6 s
    session. The completed join starts b's session afresh: b is still a member at the
    engine's next tick and through its heartbeats, and the group settles after exactly
    this one rebalance."""
    formed = form_group(broker, "g", 1, **SLOW)
    (a,) = formed.members
    b_join = join(broker, "g", **SLOW)
    for _ in range(5):  # a consumes for 10 s more; its heartbeats tell it to rejoin
        clock.advance(2_000)
        with kafka_error("REBALANCE_IN_PROGRESS", 27):
            heartbeat(broker, "g", formed.generation, a)
        tick(broker)
    assert still_waiting(broker, b_join)
    results = finish_rebalance(broker, "g", [a], b_join, **SLOW)
    b = results[1].member_id
    clock.advance(100)  # the engine ticks every 100 ms
    tick(broker)
    assert set(group(broker, "g").members) == {a, b}
    sync_everyone(broker, "g", results)
    for _ in range(6):  # two sessions' worth of heartbeats every 2 s
        clock.advance(2_000)
        for member_id in (a, b):
            heartbeat(broker, "g", formed.generation + 1, member_id)
        tick(broker)
    g = group(broker, "g")
    assert (g.state, g.generation, set(g.members)) == (G.STABLE, formed.generation + 1, {a, b})


def test_a_member_waiting_for_the_leaders_assignment_longer_than_its_session_stays(broker, clock):
    formed = form_group(broker, "g", 1, **SLOW)
    (leader,) = formed.members
    newcomer = join(broker, "g", **SLOW)
    r_leader, r_new = finish_rebalance(broker, "g", [leader], newcomer, **SLOW)
    follower_sync = spawn(broker, gc(broker).sync_group, "g", r_new.generation, r_new.member_id)
    for _ in range(5):  # the leader computes the assignment for 10 s, heartbeating
        clock.advance(2_000)
        heartbeat(broker, "g", r_leader.generation, leader)
        tick(broker)
    assert still_waiting(broker, follower_sync)
    call(broker, gc(broker).sync_group, "g", r_leader.generation, leader,
         {leader: b"L", r_new.member_id: b"F"})
    assert outcome(broker, follower_sync) == b"F"
    clock.advance(100)
    tick(broker)  # the answered sync started the follower's session
    assert set(group(broker, "g").members) == {leader, r_new.member_id}


@pytest.mark.parametrize("request_", ["heartbeat", "offset_commit", "sync_group"])
def test_a_request_of_a_current_member_restarts_its_session(broker, clock, request_):
    formed = form_group(broker, "g", 1)
    (m,) = formed.members
    for i in range(3):
        clock.advance(SESSION_MS * 6 // 10)
        if request_ == "heartbeat":
            heartbeat(broker, "g", formed.generation, m)
        elif request_ == "offset_commit":
            assert commit(broker, "g", {("t", 0): i}, formed.generation, m) == {("t", 0): None}
        else:
            assert call(broker, gc(broker).sync_group, "g", formed.generation, m) == b"to:" + m.encode()
        tick(broker)
    g = group(broker, "g")
    assert g.state is G.STABLE and list(g.members) == [m]


def test_a_heartbeat_of_a_stale_generation_is_illegal_and_keeps_nothing_alive(broker, clock):
    """Kafka checks the generation before the state: during a rebalance a member of an
    older generation hears ILLEGAL_GENERATION, and its session is not restarted."""
    formed = form_group(broker, "g", 2)
    stale, rejoins = formed.members
    newcomer, rejoin = join(broker, "g"), join(broker, "g", rejoins)
    clock.advance(SESSION_MS * 6 // 10)
    with kafka_error("ILLEGAL_GENERATION", 22):
        heartbeat(broker, "g", formed.generation - 1, stale)
    clock.advance(SESSION_MS * 6 // 10)
    tick(broker)  # stale is gone, so the join completes without it
    assert outcome(broker, rejoin).generation == outcome(broker, newcomer).generation == formed.generation + 1
    assert stale not in group(broker, "g").members


def test_a_member_that_sends_no_sync_group_in_the_rebalance_timeout_is_removed(broker, clock):
    """Kafka's pending-sync timeout: a member that got the new generation but sends no
    SyncGroup within the rebalance timeout is removed -- even while it heartbeats --
    and the group rebalances without it."""
    kwargs = {"session_ms": 30_000, "rebalance_ms": 10_000}
    formed = form_group(broker, "g", 1, **kwargs)
    (leader,) = formed.members
    newcomer = join(broker, "g", **kwargs)
    r_leader, r_new = finish_rebalance(broker, "g", [leader], newcomer, **kwargs)
    assert call(broker, gc(broker).sync_group, "g", r_leader.generation, leader,
                {leader: b"L", r_new.member_id: b"N"}) == b"L"
    clock.advance(5_000)
    heartbeat(broker, "g", r_new.generation, r_new.member_id)
    tick(broker)
    assert set(group(broker, "g").members) == {leader, r_new.member_id}
    clock.advance(5_000)
    heartbeat(broker, "g", r_leader.generation, leader)
    tick(broker)
    g = group(broker, "g")
    assert set(g.members) == {leader} and g.state is G.PREPARING_REBALANCE
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        heartbeat(broker, "g", r_new.generation, r_new.member_id)
    again = outcome(broker, join(broker, "g", leader, **kwargs))
    assert again.generation == r_leader.generation + 1 and [m for m, _, _ in again.members] == [leader]


def test_a_static_member_that_does_not_rejoin_stays_through_the_join(broker, clock):
    """Kafka removes only dynamic members that have not rejoined when a join completes;
    a static one keeps its place (its session or the sync deadline decides)."""
    kwargs = {"session_ms": 30_000, "rebalance_ms": 10_000}
    formed = form_group(broker, "g", 2, instance_ids=["i-a", "i-b"], **kwargs)
    a, b = formed.members
    newcomer = join(broker, "g", **kwargs)
    rejoin = join(broker, "g", a, instance_id="i-a", **kwargs)
    clock.advance(10_000)
    tick(broker)
    r_a, r_new = outcome(broker, rejoin), outcome(broker, newcomer)
    assert r_a.generation == r_new.generation == formed.generation + 1
    g = group(broker, "g")
    assert set(g.members) == {a, b, r_new.member_id} and g.static_members == {"i-a": a, "i-b": b}
    assert r_a.leader == a and {m for m, _, _ in r_a.members} == {a, b, r_new.member_id}


def test_a_join_with_only_static_members_missing_waits_another_rebalance_timeout(broker, clock):
    kwargs = {"session_ms": 30_000, "rebalance_ms": 10_000}
    formed = form_group(broker, "g", 1, instance_ids=["i-a"], **kwargs)
    (a,) = formed.members
    cancel(broker, join(broker, "g", **kwargs))  # a newcomer starts a rebalance, then gives up
    assert group(broker, "g").state is G.PREPARING_REBALANCE
    clock.advance(10_000)
    tick(broker)  # nobody has rejoined, and a is static: the join waits on
    g = group(broker, "g")
    assert g.state is G.PREPARING_REBALANCE and list(g.members) == [a]
    rejoined = outcome(broker, join(broker, "g", a, instance_id="i-a", **kwargs))
    assert rejoined.generation == formed.generation + 1 and rejoined.leader == a


def test_the_initial_delay_extends_for_newcomers_up_to_the_rebalance_timeout(open_broker, clock):
    """Kafka's InitialDelayedJoin: a delay during which a new member joined is followed
    by another, but the delays together stay within the first member's rebalance timeout."""
    b = open_broker(**{"group.initial.rebalance.delay.ms": 3000})
    kwargs = {"session_ms": 6_000, "rebalance_ms": 6_000}
    first = join(b, "g", **kwargs)
    clock.advance(1_000)
    second = join(b, "g", **kwargs)
    clock.advance(2_000)
    tick(b)  # 3 s: second joined during the first delay, so a second one runs
    assert still_waiting(b, first) and still_waiting(b, second)
    clock.advance(1_000)
    third = join(b, "g", **kwargs)
    clock.advance(1_999)
    tick(b)
    assert still_waiting(b, third)
    clock.advance(1)
    tick(b)  # 6 s: the rebalance timeout is used up, however many joined meanwhile
    results = [outcome(b, t) for t in (first, second, third)]
    assert {r.generation for r in results} == {1} and len(group(b, "g").members) == 3


def test_a_new_members_join_expires_after_five_minutes(broker, clock):
    """Kafka's NewMemberJoinTimeoutMs: a new member's first JoinGroup is not held for
    ever by a long rebalance timeout; it is answered UNKNOWN_MEMBER_ID after 5 minutes."""
    kwargs = {"session_ms": 30_000, "rebalance_ms": 600_000}
    formed = form_group(broker, "g", 1, **kwargs)
    (a,) = formed.members
    newcomer = join(broker, "g", **kwargs)
    for _ in range(15):  # a heartbeats for 5 minutes but does not rejoin
        clock.advance(20_000)
        with kafka_error("REBALANCE_IN_PROGRESS", 27):
            heartbeat(broker, "g", formed.generation, a)
        tick(broker)
    assert still_waiting(broker, newcomer)
    clock.advance(1)
    tick(broker)
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        outcome(broker, newcomer)
    assert list(group(broker, "g").members) == [a]
    assert outcome(broker, join(broker, "g", a, **kwargs)).generation == formed.generation + 1


_groups = itertools.count()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(session_a=st.integers(6_000, 30_000), session_b=st.integers(6_000, 30_000),
       rejoin_after=st.integers(0, 59_000), sync_after=st.integers(0, 59_000))
def test_one_membership_change_is_one_rebalance_however_long_members_wait(
        broker, clock, session_a, session_b, rejoin_after, sync_after):
    """Whatever the session timeouts, and however long (within the rebalance timeout) the
    incumbent takes to rejoin and, as leader, to send the assignment -- heartbeating at a
    third of its session meanwhile -- a newcomer makes exactly one rebalance: afterwards
    both stay members of that generation through two sessions of heartbeats."""
    group_id = f"g{next(_groups)}"

    async def scenario() -> tuple[GroupState, int, set[str], int]:
        coordinator = gc(broker)
        a = (await coordinator.join_group(group_id, "", "consumer", PROTOCOLS, session_a, 60_000)).member_id
        first = coordinator.groups[group_id].generation
        await coordinator.sync_group(group_id, first, a, {a: b"A"})
        b_join = asyncio.ensure_future(coordinator.join_group(group_id, "", "consumer", PROTOCOLS,
                                                              session_b, 60_000))
        await asyncio.sleep(0)
        await live(coordinator, {a: (first, session_a // 3)}, rejoin_after)
        a_join = asyncio.ensure_future(coordinator.join_group(group_id, a, "consumer", PROTOCOLS,
                                                              session_a, 60_000))
        b = (await b_join).member_id
        generation = (await a_join).generation
        b_sync = asyncio.ensure_future(coordinator.sync_group(group_id, generation, b))
        await asyncio.sleep(0)
        await live(coordinator, {a: (generation, session_a // 3)}, sync_after)
        await coordinator.sync_group(group_id, generation, a, {a: b"A", b: b"B"})
        assert await b_sync == b"B"
        await live(coordinator, {a: (generation, session_a // 3), b: (generation, session_b // 3)},
                   2 * max(session_a, session_b))
        g = coordinator.groups[group_id]
        return g.state, g.generation - first, set(g.members), len({a, b})

    async def live(coordinator, beats: dict[str, tuple[int, int]], duration_ms: int) -> None:
        """Let ``duration_ms`` pass in 100 ms ticks, each member heartbeating at its interval."""
        last = {m: clock.now_ms() for m in beats}
        end = clock.now_ms() + duration_ms
        while clock.now_ms() < end:
            clock.advance(min(100, end - clock.now_ms()))
            for member_id, (generation, interval) in beats.items():
                if clock.now_ms() - last[member_id] >= interval:
                    last[member_id] = clock.now_ms()
                    try:
                        await coordinator.heartbeat(group_id, generation, member_id)
                    except KafkaError as e:
                        assert e.name == "REBALANCE_IN_PROGRESS", e
            coordinator.tick()

    state, rebalances, members, distinct = call(broker, scenario)
    assert (state, rebalances, len(members)) == (G.STABLE, 1, distinct)


# -- LeaveGroup -----------------------------------------------------------------------------------


def test_leave_rebalances_the_remaining_members(broker):
    formed = form_group(broker, "g", 2)
    stays, leaves = formed.members
    call(broker, gc(broker).leave_group, "g", leaves)
    assert group(broker, "g").state is G.PREPARING_REBALANCE
    with kafka_error("REBALANCE_IN_PROGRESS", 27):
        call(broker, gc(broker).heartbeat, "g", formed.generation, stays)
    r = outcome(broker, join(broker, "g", stays))
    assert r.generation == formed.generation + 1 and [m for m, _, _ in r.members] == [stays]


def test_the_last_member_leaving_empties_the_group_with_a_bumped_generation(broker):
    formed = form_group(broker, "g", 1)
    call(broker, gc(broker).leave_group, "g", formed.members[0])
    g = group(broker, "g")
    assert g.state is G.EMPTY and not g.members and g.leader is None
    assert g.generation == formed.generation + 1


def test_leave_of_an_unknown_member_is_rejected(broker):
    form_group(broker, "g", 1)
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).leave_group, "g", "nobody")


def test_a_member_leaving_mid_rebalance_lets_the_rebalance_complete(broker):
    formed = form_group(broker, "g", 2)
    newcomer = join(broker, "g")
    rejoin = join(broker, "g", formed.members[0])
    assert still_waiting(broker, newcomer)
    call(broker, gc(broker).leave_group, "g", formed.members[1])
    assert outcome(broker, newcomer).generation == outcome(broker, rejoin).generation == formed.generation + 1


# -- static membership ----------------------------------------------------------------------------


def test_a_rejoin_with_the_same_instance_id_fences_the_old_member_id(broker):
    formed = form_group(broker, "g", 1, instance_ids=["instance-1"])
    old = formed.members[0]
    new = outcome(broker, join(broker, "g", instance_id="instance-1"))
    assert new.member_id != old and new.member_id.startswith("instance-1-")
    assert group(broker, "g").static_members == {"instance-1": new.member_id}
    with kafka_error("FENCED_INSTANCE_ID", 82):
        call(broker, gc(broker).heartbeat, "g", new.generation, old, "instance-1")
    with kafka_error("FENCED_INSTANCE_ID", 82):
        outcome(broker, join(broker, "g", old, instance_id="instance-1"))
    with kafka_error("FENCED_INSTANCE_ID", 82):
        call(broker, gc(broker).sync_group, "g", new.generation, old, None, "instance-1")
    with kafka_error("FENCED_INSTANCE_ID", 82):
        call(broker, gc(broker).commit_offsets, "g", {("t", 0): CommittedOffset(1)}, new.generation,
             old, "instance-1")
    with kafka_error("FENCED_INSTANCE_ID", 82):
        call(broker, gc(broker).leave_group, "g", old, "instance-1")
    # the new incarnation is the member now, with the old one's assignment
    assert call(broker, gc(broker).sync_group, "g", new.generation, new.member_id, None,
                "instance-1") == b"to:" + old.encode()
    assert call(broker, gc(broker).heartbeat, "g", new.generation, new.member_id, "instance-1") is None


def test_a_waiting_join_of_the_old_instance_is_fenced(broker):
    formed = form_group(broker, "g", 2, instance_ids=["i-a", "i-b"])
    a, b = formed.members
    pending = join(broker, "g", a, instance_id="i-a")  # a rebalance; a waits for b
    assert still_waiting(broker, pending)
    replacement = join(broker, "g", instance_id="i-a")
    with kafka_error("FENCED_INSTANCE_ID", 82):
        outcome(broker, pending)
    r_b = outcome(broker, join(broker, "g", b, instance_id="i-b"))
    r_new = outcome(broker, replacement)
    assert r_b.generation == r_new.generation and set(group(broker, "g").members) == {b, r_new.member_id}


def test_a_member_id_with_an_instance_id_that_is_not_its_own_is_fenced(broker):
    formed = form_group(broker, "g", 2, instance_ids=["i-a", "i-b"])
    with kafka_error("FENCED_INSTANCE_ID", 82):
        call(broker, gc(broker).heartbeat, "g", formed.generation, formed.members[0], "i-b")


def test_an_instance_id_the_group_does_not_know_is_an_unknown_member(broker):
    formed = form_group(broker, "g", 1, instance_ids=["i-a"])
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).heartbeat, "g", formed.generation, formed.members[0], "i-other")


@pytest.mark.parametrize("restarted", [0, 1], ids=["leader", "follower"])
def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance(broker, restarted):
    """KIP-345: a known instance joining without a member id is the member restarted. In
    a Stable group it gets the same generation -- the others see no rebalance -- and its
    old assignment at SyncGroup. The answer names the old leader id, so a restarted
    leader does not take itself for the leader and assigns nothing (JoinGroup < v9)."""
    instances = ["i-a", "i-b"]
    formed = form_group(broker, "g", 2, instance_ids=instances)
    old, other = formed.members[restarted], formed.members[1 - restarted]
    new = outcome(broker, join(broker, "g", instance_id=instances[restarted]))
    assert (new.generation, new.leader, new.members) == (formed.generation, formed.leader, [])
    assert new.member_id not in (old, new.leader)
    g = group(broker, "g")
    assert (g.state, g.generation, set(g.members)) == (G.STABLE, formed.generation, {other, new.member_id})
    assert g.leader == (new.member_id if old == formed.leader else formed.leader)
    assert call(broker, gc(broker).sync_group, "g", new.generation, new.member_id, None,
                instances[restarted]) == b"to:" + old.encode()
    heartbeat(broker, "g", formed.generation, other)  # not REBALANCE_IN_PROGRESS: nothing happened
    heartbeat(broker, "g", formed.generation, new.member_id)
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        heartbeat(broker, "g", formed.generation, old)


@pytest.mark.parametrize("restarted", [0, 1], ids=["leader", "follower"])
def test_from_join_group_v9_a_restarted_static_leader_is_told_it_leads_and_to_skip_assigning(broker, restarted):
    """Kafka's v9 answer: the current leader id, so a restarted leader knows it leads
    (and keeps watching metadata), with every member's metadata and skip_assignment."""
    instances = ["i-a", "i-b"]
    formed = form_group(broker, "g", 2, instance_ids=instances)
    new = outcome(broker, join(broker, "g", instance_id=instances[restarted], skipping=True))
    other = formed.members[1 - restarted]
    leads = formed.members[restarted] == formed.leader
    assert (new.generation, new.leader, new.skip_assignment) == (
        formed.generation, new.member_id if leads else formed.leader, leads)
    assert {m for m, _, _ in new.members} == ({new.member_id, other} if leads else set())
    assert group(broker, "g").state is G.STABLE
    assert call(broker, gc(broker).sync_group, "g", new.generation, new.member_id, None,
                instances[restarted]) == b"to:" + formed.members[restarted].encode()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(1, 3), restarts=st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=8))
def test_static_members_restarting_in_any_order_keep_the_generation_and_their_assignments(broker, size, restarts):
    """However often, in whatever order, and at whichever JoinGroup version static
    members of a Stable group restart, the group stays Stable in its generation, each
    instance gets back the assignment it had, and instance ids and member ids stay one
    to one with the leader among them."""
    group_id = f"g{next(_groups)}"
    instances = [f"i-{i}" for i in range(size)]

    async def scenario() -> None:
        coordinator = gc(broker)
        for i, instance in enumerate(instances):  # one at a time: the others rejoin
            joins = [coordinator.join_group(group_id, "", "consumer", PROTOCOLS, SESSION_MS, -1, instance)]
            joins += [coordinator.join_group(group_id, coordinator.groups[group_id].static_members[known],
                                             "consumer", PROTOCOLS, SESSION_MS, -1, known)
                      for known in instances[:i]]
            results = await asyncio.gather(*joins)
            leader = next(r for r in results if r.member_id == r.leader)
            await asyncio.gather(*(coordinator.sync_group(
                group_id, r.generation, r.member_id,
                {m: str(instance_id).encode() for m, instance_id, _ in leader.members} if r is leader else None)
                for r in results))
        g = coordinator.groups[group_id]
        generation = g.generation
        for index, skipping in restarts:
            instance = instances[index % size]
            joined = await coordinator.join_group(group_id, "", "consumer", PROTOCOLS, SESSION_MS, -1, instance,
                                                  support_skipping_assignment=skipping)
            assert joined.generation == generation and joined.skip_assignment == (
                skipping and joined.member_id == g.leader)
            assert await coordinator.sync_group(group_id, generation, joined.member_id, None,
                                                instance) == instance.encode()
            assert g.state is G.STABLE and g.generation == generation
            assert sorted(g.static_members) == instances and set(g.static_members.values()) == set(g.members)
            assert g.leader in g.members

    call(broker, scenario)


def test_a_restarted_static_members_new_id_is_durable(open_broker):
    b = open_broker()
    formed = form_group(b, "g", 1, instance_ids=["i-a"])
    new = outcome(b, join(b, "g", instance_id="i-a"))
    b.close()
    b = open_broker()
    g = group(b, "g")
    assert g.static_members == {"i-a": new.member_id} and g.leader == new.member_id
    assert g.members[new.member_id].assignment == b"to:" + formed.members[0].encode()


def test_a_failed_store_of_a_static_members_new_id_keeps_the_old_one(broker):
    """Kafka reverts the replacement when the group cannot be stored: the old member id
    stays the instance's, and the JoinGroup gets the error (the client joins again)."""
    formed = form_group(broker, "g", 1, instance_ids=["i-a"])
    (old,) = formed.members
    broker.faults.add(api="Produce", topic=offsets_log.TOPIC, error="KAFKA_STORAGE_ERROR")  # the disk refuses the group's write
    with kafka_error("NOT_COORDINATOR", 16):
        outcome(broker, join(broker, "g", instance_id="i-a"))
    g = group(broker, "g")
    assert (g.state, list(g.members), g.static_members, g.leader) == (G.STABLE, [old], {"i-a": old}, old)
    assert g.members[old].join_waiter is None
    heartbeat(broker, "g", formed.generation, old)


def test_a_static_member_restarting_with_a_protocol_the_group_would_switch_to_rebalances(broker):
    """Kafka: the protocol the next generation would select changes, so the assignment
    the member would get back no longer fits -- a rebalance."""
    formed = form_group(broker, "g", 1, instance_ids=["i-a"])
    new = outcome(broker, join(broker, "g", instance_id="i-a", protocols=[("roundrobin", b""), *PROTOCOLS]))
    assert (new.generation, new.leader, group(broker, "g").protocol) == (formed.generation + 1, new.member_id,
                                                                         "roundrobin")


def test_a_static_member_restarting_while_the_generation_syncs_rebalances(broker):
    """Kafka: the leader may be assigning to the old member id, so the group rebalances;
    the old incarnation's waiting SyncGroup is fenced."""
    formed = form_group(broker, "g", 2, instance_ids=["i-a", "i-b"])
    a, b = formed.members
    t_a, t_b = join(broker, "g", a, instance_id="i-a"), join(broker, "g", b, instance_id="i-b")
    r_a, r_b = outcome(broker, t_a), outcome(broker, t_b)
    waiting = spawn(broker, gc(broker).sync_group, "g", r_b.generation, b, None, "i-b")
    assert group(broker, "g").state is G.COMPLETING_REBALANCE
    restarted = join(broker, "g", instance_id="i-b")
    with kafka_error("FENCED_INSTANCE_ID", 82):
        outcome(broker, waiting)
    assert group(broker, "g").state is G.PREPARING_REBALANCE and still_waiting(broker, restarted)
    again = outcome(broker, join(broker, "g", a, instance_id="i-a"))
    new_b = outcome(broker, restarted)
    assert again.generation == new_b.generation == r_a.generation + 1
    assert {m for m, _, _ in again.members} == {a, new_b.member_id}


def test_a_static_member_silent_past_its_session_timeout_is_removed(broker, clock):
    formed = form_group(broker, "g", 2, instance_ids=["i-a", "i-b"])
    a, b = formed.members
    clock.advance(SESSION_MS)
    heartbeat(broker, "g", formed.generation, a)
    tick(broker)
    assert set(group(broker, "g").members) == {a, b}
    clock.advance(1)
    tick(broker)
    g = group(broker, "g")
    assert (list(g.members), g.static_members, g.state) == ([a], {"i-a": a}, G.PREPARING_REBALANCE)
    with kafka_error("REBALANCE_IN_PROGRESS", 27):
        heartbeat(broker, "g", formed.generation, a)
    # the instance coming back now is a new member: it joins the rebalance
    comeback = join(broker, "g", instance_id="i-b")
    r_a, r_b = outcome(broker, join(broker, "g", a, instance_id="i-a")), outcome(broker, comeback)
    assert r_a.generation == r_b.generation == formed.generation + 1


def test_leave_by_instance_id_alone_removes_the_static_member(broker):
    """LeaveGroup v3+ without a member id: an admin removing a static member (Kafka's
    ``kafka-consumer-groups --delete ... --members`` path)."""
    formed = form_group(broker, "g", 2, instance_ids=["i-a", "i-b"])
    a, _ = formed.members
    call(broker, gc(broker).leave_group, "g", "", "i-b")
    g = group(broker, "g")
    assert (list(g.members), g.static_members, g.state) == ([a], {"i-a": a}, G.PREPARING_REBALANCE)
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).leave_group, "g", "", "i-b")
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        call(broker, gc(broker).leave_group, "no-such-group", "", "i-a")


# -- MEMBER_ID_REQUIRED (KIP-394) -----------------------------------------------------------------


def member_id_required(broker: Broker, group_id: str, **join_kwargs: Any) -> str:
    """A JoinGroup v4+ without a member id: MEMBER_ID_REQUIRED, and the id it hands out."""
    with kafka_error("MEMBER_ID_REQUIRED", 79) as info:
        outcome(broker, join(broker, group_id, require_known=True, **join_kwargs))
    return info.value.member_id


def test_a_join_that_must_know_its_member_id_gets_one_then_joins_with_it(broker):
    member_id = member_id_required(broker, "g", client_id="c")
    g = group(broker, "g")
    assert member_id.startswith("c-") and (g.state, g.members, list(g.pending_members)) == (G.EMPTY, {}, [member_id])
    joined = outcome(broker, join(broker, "g", member_id, require_known=True))
    assert (joined.member_id, joined.generation, joined.leader) == (member_id, 1, member_id)
    assert not group(broker, "g").pending_members


def test_a_static_member_is_never_asked_for_a_member_id(broker):
    assert outcome(broker, join(broker, "g", instance_id="i-a", require_known=True)).generation == 1


def test_the_join_phase_waits_for_a_pending_member(broker):
    """Kafka's hasAllMembersJoined counts pending members: handing out a member id does
    not rebalance, but a rebalance then waits for that member's JoinGroup."""
    formed = form_group(broker, "g", 1)
    (a,) = formed.members
    pending = member_id_required(broker, "g")
    assert group(broker, "g").state is G.STABLE
    rejoin = join(broker, "g", a)  # the leader rejoining: a rebalance
    assert still_waiting(broker, rejoin)
    r_p = outcome(broker, join(broker, "g", pending, require_known=True))
    r_a = outcome(broker, rejoin)
    assert r_a.generation == r_p.generation == formed.generation + 1
    assert {m for m, _, _ in r_a.members} == {a, pending}


def test_a_pending_member_that_does_not_come_back_is_forgotten_after_its_session_timeout(broker, clock):
    formed = form_group(broker, "g", 1, rebalance_ms=60_000)
    (a,) = formed.members
    pending = member_id_required(broker, "g", session_ms=SESSION_MS)
    rejoin = join(broker, "g", a, rebalance_ms=60_000)
    clock.advance(SESSION_MS)
    tick(broker)
    assert still_waiting(broker, rejoin)
    clock.advance(1)
    tick(broker)
    r_a = outcome(broker, rejoin)
    assert r_a.generation == formed.generation + 1 and [m for m, _, _ in r_a.members] == [a]
    assert not group(broker, "g").pending_members
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        outcome(broker, join(broker, "g", pending, require_known=True))


def test_a_pending_member_that_leaves_is_forgotten(broker):
    pending = member_id_required(broker, "g")
    call(broker, gc(broker).leave_group, "g", pending)
    assert not group(broker, "g").pending_members
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        outcome(broker, join(broker, "g", pending, require_known=True))


# -- OffsetCommit / OffsetFetch -------------------------------------------------------------------


def fetch(broker: Broker, group_id: str, partitions=None, require_stable: bool = False):
    return call(broker, gc(broker).fetch_offsets, group_id, partitions, require_stable)


def commit(broker: Broker, group_id: str, offsets: dict, generation: int = -1, member_id: str = "",
           instance_id: str | None = None):
    committed = {tp: o if isinstance(o, CommittedOffset) else CommittedOffset(o) for tp, o in offsets.items()}
    return call(broker, gc(broker).commit_offsets, group_id, committed, generation, member_id, instance_id)


def test_offset_fetch_of_nothing_committed_is_minus_one(broker):
    got = fetch(broker, "nobody-here", [("t", 0)])
    assert (got[("t", 0)].offset, got[("t", 0)].metadata, got[("t", 0)].leader_epoch,
            got[("t", 0)].error) == (-1, "", -1, None)
    commit(broker, "g", {("t", 0): 5})
    assert fetch(broker, "g", [("t", 1), ("u", 0)])[("t", 1)].offset == -1
    assert fetch(broker, "nobody-here") == {}


def test_standalone_commit_of_an_unknown_or_empty_group_is_fetched_back(broker):
    assert commit(broker, "g", {("t", 0): CommittedOffset(7, "meta", 3), ("t", 1): 9}) == {
        ("t", 0): None, ("t", 1): None}
    got = fetch(broker, "g", [("t", 0), ("t", 1)])
    assert (got[("t", 0)].offset, got[("t", 0)].metadata, got[("t", 0)].leader_epoch) == (7, "meta", 3)
    assert got[("t", 1)].offset == 9
    assert set(fetch(broker, "g")) == {("t", 0), ("t", 1)}  # all partitions: topics null
    commit(broker, "g", {("t", 0): 8})
    assert fetch(broker, "g", [("t", 0)])[("t", 0)].offset == 8  # the latest commit wins


def test_standalone_commit_after_the_group_emptied_is_allowed(broker):
    formed = form_group(broker, "g", 1)
    call(broker, gc(broker).leave_group, "g", formed.members[0])
    commit(broker, "g", {("t", 0): 4})
    assert fetch(broker, "g", [("t", 0)])[("t", 0)].offset == 4


def test_standalone_commit_while_the_group_has_members_is_unknown_member(broker):
    form_group(broker, "g", 1)
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        commit(broker, "g", {("t", 0): 4})
    assert fetch(broker, "g", [("t", 0)])[("t", 0)].offset == -1


def test_member_commit_with_the_current_generation_is_accepted(broker):
    formed = form_group(broker, "g", 2)
    commit(broker, "g", {("t", 0): 11}, formed.generation, formed.members[1])
    assert fetch(broker, "g", [("t", 0)])[("t", 0)].offset == 11


def test_member_commit_with_a_stale_generation_is_illegal(broker):
    formed = form_group(broker, "g", 2)
    commit(broker, "g", {("t", 0): 1}, formed.generation, formed.members[0])
    with kafka_error("ILLEGAL_GENERATION", 22):
        commit(broker, "g", {("t", 0): 2}, formed.generation - 1, formed.members[0])
    assert fetch(broker, "g", [("t", 0)])[("t", 0)].offset == 1


def test_commit_by_an_unknown_member_is_rejected(broker):
    formed = form_group(broker, "g", 1)
    with kafka_error("UNKNOWN_MEMBER_ID", 25):
        commit(broker, "g", {("t", 0): 2}, formed.generation, "nobody")


def test_commit_with_a_generation_to_a_group_that_does_not_exist_is_illegal(broker):
    with kafka_error("ILLEGAL_GENERATION", 22):
        commit(broker, "nothing", {("t", 0): 2}, 3, "someone")
    assert gc(broker).describe("nothing") is None


def test_commit_while_completing_a_rebalance_is_rebalance_in_progress(broker):
    formed = form_group(broker, "g", 1)
    newcomer = join(broker, "g")
    r = outcome(broker, join(broker, "g", formed.members[0]))
    outcome(broker, newcomer)
    assert group(broker, "g").state is G.COMPLETING_REBALANCE
    with kafka_error("REBALANCE_IN_PROGRESS", 27):
        commit(broker, "g", {("t", 0): 2}, r.generation, r.member_id)


def test_offset_metadata_over_the_limit_fails_only_that_partition(broker):
    limit = broker.config.offset_metadata_max_bytes
    result = commit(broker, "g", {
        ("t", 0): CommittedOffset(1, "x" * limit),
        ("t", 1): CommittedOffset(2, "x" * (limit + 1)),
        ("t", 2): CommittedOffset(3, "é" * (limit // 2 + 1)),  # few characters, too many UTF-8 bytes
    })
    assert result[("t", 0)] is None
    for tp in (("t", 1), ("t", 2)):
        assert (result[tp].name, result[tp].code) == ("OFFSET_METADATA_TOO_LARGE", 12)
    got = fetch(broker, "g", [("t", 0), ("t", 1), ("t", 2)])
    assert [got[("t", p)].offset for p in range(3)] == [1, -1, -1]


def test_offset_metadata_limit_follows_the_broker_config(open_broker):
    b = open_broker(**{"offset.metadata.max.bytes": 3})
    result = commit(b, "g", {("t", 0): CommittedOffset(1, "abc"), ("t", 1): CommittedOffset(1, "abcd")})
    assert result[("t", 0)] is None and result[("t", 1)].code == 12


# -- persistence ------------------------------------------------------------------------------------


def test_group_and_offsets_survive_a_restart(open_broker):
    b = open_broker()
    formed = form_group(b, "g", 2)
    commit(b, "g", {("t", 0): CommittedOffset(42, "m", 2), ("t", 1): 7}, formed.generation, formed.members[0])
    commit(b, "standalone", {("u", 3): 99})
    before = group(b, "g")
    snapshot = (before.generation, before.protocol_type, before.protocol, before.leader,
                {m: (x.assignment, x.session_timeout_ms, x.metadata_for("range")) for m, x in before.members.items()})
    b.close()

    b = open_broker()
    after = group(b, "g")
    assert after.state is G.STABLE
    assert (after.generation, after.protocol_type, after.protocol, after.leader,
            {m: (x.assignment, x.session_timeout_ms, x.metadata_for("range"))
             for m, x in after.members.items()}) == snapshot
    got = fetch(b, "g", [("t", 0), ("t", 1)])
    assert (got[("t", 0)].offset, got[("t", 0)].metadata, got[("t", 0)].leader_epoch) == (42, "m", 2)
    assert got[("t", 1)].offset == 7
    assert fetch(b, "standalone", [("u", 3)])[("u", 3)].offset == 99
    # the loaded members carry on in their generation
    for m in formed.members:
        assert call(b, gc(b).heartbeat, "g", formed.generation, m) is None
    with kafka_error("ILLEGAL_GENERATION", 22):
        commit(b, "g", {("t", 0): 1}, formed.generation - 1, formed.members[0])


def test_an_emptied_group_keeps_its_generation_across_a_restart(open_broker):
    b = open_broker()
    formed = form_group(b, "g", 1)
    call(b, gc(b).leave_group, "g", formed.members[0])
    bumped = group(b, "g").generation
    b.close()
    b = open_broker()
    g = group(b, "g")
    assert g.state is G.EMPTY and g.generation == bumped == formed.generation + 1
    assert outcome(b, join(b, "g")).generation == bumped + 1


def test_a_restarted_group_whose_members_stay_silent_times_out(open_broker, clock):
    b = open_broker()
    formed = form_group(b, "g", 2)
    b.close()
    b = open_broker()
    clock.advance(SESSION_MS + 1)
    tick(b)
    g = group(b, "g")
    assert g.state is G.EMPTY and g.generation == formed.generation + 1


def test_a_cancelled_request_does_not_wedge_the_partition_it_appended_to(tmp_path, clock):
    """A coroutine awaiting a durable append (the leader's SyncGroup storing the
    group, a produce) is cancelled before the fsync completes; later appends to the
    partition still complete and close is clean (once a bug in exactly/app/engine/group_commit.py)."""
    from tests.conftest import data_batch
    b = Broker(tmp_path / "wedged", clock=clock, **SMALL_INTERNAL_TOPICS)
    try:
        b.create_topic("t", 1)

        async def cancel_a_durable_append() -> None:
            task = asyncio.ensure_future(b.engine.partitions.produce("t", 0, data_batch([b"x"])))
            await asyncio.sleep(0)  # appended; now waiting for its fsync
            task.cancel()
        call(b, cancel_a_durable_append)
        b.engine.submit(b.engine.partitions.start_produce, "t", 0, data_batch([b"y"]), -1).result(3)
    finally:
        b.close()


# -- the group state machine ------------------------------------------------------------------------

KAFKA_VALID_PREVIOUS = {  # Kafka's GroupState.validPreviousStates
    G.PREPARING_REBALANCE: {G.STABLE, G.COMPLETING_REBALANCE, G.EMPTY},
    G.COMPLETING_REBALANCE: {G.PREPARING_REBALANCE},
    G.STABLE: {G.COMPLETING_REBALANCE},
    G.DEAD: {G.STABLE, G.PREPARING_REBALANCE, G.COMPLETING_REBALANCE, G.EMPTY, G.DEAD},
    G.EMPTY: {G.PREPARING_REBALANCE},
}

#: how to reach each state from a new (Empty) group by valid transitions only
PATHS = {
    G.EMPTY: [],
    G.PREPARING_REBALANCE: [G.PREPARING_REBALANCE],
    G.COMPLETING_REBALANCE: [G.PREPARING_REBALANCE, G.COMPLETING_REBALANCE],
    G.STABLE: [G.PREPARING_REBALANCE, G.COMPLETING_REBALANCE, G.STABLE],
    G.DEAD: [G.DEAD],
}


def test_the_transition_table_is_kafkas():
    assert {s: set(p) for s, p in VALID_PREVIOUS.items()} == KAFKA_VALID_PREVIOUS
    assert set(VALID_PREVIOUS) == set(GroupState)


@pytest.mark.parametrize("source, target", list(itertools.product(GroupState, GroupState)),
                         ids=lambda s: s.value)
def test_every_transition_is_allowed_exactly_when_the_table_says(source, target):
    g = GroupMetadata("g")
    for step, state in enumerate(PATHS[source]):
        g.transition(state, step)
    assert g.state is source
    if source in KAFKA_VALID_PREVIOUS[target]:
        g.transition(target, 100)
        assert (g.state, g.state_timestamp_ms) == (target, 100)
    else:
        with pytest.raises(IllegalGroupTransitionError):
            g.transition(target, 100)
        assert g.state is source and g.state_timestamp_ms != 100
