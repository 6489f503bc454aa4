"""The embedded consumer (exactly/app/client/consumer.py): Kafka's consumer API in-process.

Consumers that share a group run on their own threads (a JoinGroup waits for
every member), and every wait in these tests is on a condition or a thread with a
deadline. Session timeouts follow the FakeClock, which these tests never move, so
no member times out behind a test's back.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import pytest

from exactly.app import Broker
from exactly.app.client.types import ConsumerRecord, IllegalStateError, OffsetAndMetadata
from exactly.app.client.consumer import Consumer
from exactly.storage.errors import OffsetOutOfRangeError
from tests.waiting import eventually, returns_within

DEADLINE_S = 10
#: a poll timeout no test waits out: a poll given it must return for another reason
FAR_MS = 60_000
FAST = {"heartbeat_interval_ms": 20}  # members notice a rebalance quickly


@pytest.fixture
def consumer(broker) -> Iterator[Callable[..., Consumer]]:
    """Make consumers; every one is closed at the end (without auto-commit surprises)."""
    made: list[Consumer] = []

    def make(**config: Any) -> Consumer:
        c = broker.consumer(**config)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except Exception:  # a test may have left it failing; the broker closes anyway
            pass


def send(broker: Broker, topic: str, partition: int, values: list[bytes], **config: Any) -> list[int]:
    """Send ``values`` at once (they share batches) and wait for them; their offsets."""
    producer = broker.producer(**config)
    futures = [producer.send(topic, v, partition=partition) for v in values]
    return [future.get(timeout=DEADLINE_S).offset for future in futures]


def values(records: list[ConsumerRecord]) -> list[bytes]:
    return [r.value for r in records]


def poll_until(c: Consumer, count: int, deadline_s: float = DEADLINE_S) -> list[ConsumerRecord]:
    """Poll until ``count`` records came back; fail at the deadline."""
    got: list[ConsumerRecord] = []
    eventually(lambda: got.extend(c.poll(timeout_ms=100)) or len(got) >= count, deadline_s, f"{count} records",
               interval=0)
    return got


def log_end(broker: Broker, topic: str, partition: int) -> int:
    return broker.engine.partitions.log(topic, partition).log_end_offset


# -- assign, poll, seek, position, commit, committed -----------------------------------------------


def test_assign_poll_seek_position_commit_committed(broker, consumer):
    broker.create_topic("t", 2)
    send(broker, "t", 0, [b"a0", b"a1", b"a2", b"a3"])
    send(broker, "t", 1, [b"b0", b"b1"])
    c = consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.assign([("t", 0), ("t", 1)])
    assert c.assignment() == [("t", 0), ("t", 1)]
    assert c.position(("t", 0)) == 0
    got = poll_until(c, 6)
    assert sorted(values(got)) == [b"a0", b"a1", b"a2", b"a3", b"b0", b"b1"]
    assert [(r.topic, r.partition, r.offset) for r in got if r.partition == 0] == [("t", 0, i) for i in range(4)]
    assert c.position(("t", 0)) == 4 and c.position(("t", 1)) == 2
    assert c.poll(timeout_ms=0) == []

    c.seek(("t", 0), 1)
    assert c.position(("t", 0)) == 1
    assert values(poll_until(c, 3)) == [b"a1", b"a2", b"a3"]

    assert c.committed([("t", 0)]) == {("t", 0): None}
    c.commit()
    assert c.committed([("t", 0), ("t", 1)]) == {("t", 0): 4, ("t", 1): 2}
    c.commit({("t", 0): OffsetAndMetadata(2, "half way")})
    assert c.committed([("t", 0)]) == {("t", 0): 2}
    fetched = broker.engine.call(broker.engine.groups.coordinator.fetch_offsets, "g", [("t", 0)])
    assert fetched[("t", 0)].metadata == "half way"

    # a new consumer of the group starts from the committed offsets
    c2 = consumer(group_id="g", auto_offset_reset="latest", enable_auto_commit=False)
    c2.assign([("t", 0)])
    assert c2.position(("t", 0)) == 2
    assert values(poll_until(c2, 2)) == [b"a2", b"a3"]


def test_max_records_limits_a_poll_and_the_rest_follows(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"%d" % i for i in range(10)])
    c = consumer(auto_offset_reset="earliest", max_poll_records=3)
    c.assign([("t", 0)])
    assert values(c.poll(timeout_ms=1000)) == [b"0", b"1", b"2"]
    assert c.position(("t", 0)) == 3
    assert values(c.poll(timeout_ms=1000, max_records=5)) == [b"3", b"4", b"5", b"6", b"7"]
    assert values(poll_until(c, 2)) == [b"8", b"9"]


def test_api_misuse_is_an_illegal_state(broker, consumer):
    broker.create_topic("t", 1)
    c = consumer()
    with pytest.raises(IllegalStateError):
        c.subscribe(["t"])  # no group
    with pytest.raises(IllegalStateError):
        c.commit({("t", 0): 1})
    with pytest.raises(IllegalStateError):
        c.group_metadata()
    c.assign([("t", 0)])
    with pytest.raises(IllegalStateError):
        c.seek(("t", 1), 0)
    with pytest.raises(IllegalStateError):
        c.position(("t", 1))
    c.close()
    with pytest.raises(IllegalStateError):
        c.poll(timeout_ms=0)
    with pytest.raises(ValueError):
        consumer(isolation_level="read_some")
    with pytest.raises(ValueError):
        consumer(auto_offset_reset="middle")


# -- auto_offset_reset and OffsetOutOfRange -------------------------------------------------------


def test_auto_offset_reset_earliest_reads_from_the_log_start(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"old-0", b"old-1"])
    c = consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.assign([("t", 0)])
    assert values(poll_until(c, 2)) == [b"old-0", b"old-1"]


def test_auto_offset_reset_latest_reads_only_new_records(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"old-0", b"old-1"])
    c = consumer(group_id="g", auto_offset_reset="latest", enable_auto_commit=False)
    c.assign([("t", 0)])
    assert c.position(("t", 0)) == 2
    assert c.poll(timeout_ms=0) == []
    send(broker, "t", 0, [b"new"])
    assert values(poll_until(c, 1)) == [b"new"]


def test_auto_offset_reset_none_without_a_committed_offset_raises(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"x"])
    c = consumer(group_id="g", auto_offset_reset="none", enable_auto_commit=False)
    c.assign([("t", 0)])
    with pytest.raises(OffsetOutOfRangeError):
        c.poll(timeout_ms=100)
    # with a committed offset there is nothing to reset
    c.commit({("t", 0): 1})
    c2 = consumer(group_id="g", auto_offset_reset="none", enable_auto_commit=False)
    c2.assign([("t", 0)])
    assert c2.position(("t", 0)) == 1


def test_a_committed_offset_wins_over_auto_offset_reset(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"0", b"1", b"2", b"3"])
    consumer(group_id="g").commit({("t", 0): 3})
    for reset in ("earliest", "latest", "none"):
        c = consumer(group_id="g", auto_offset_reset=reset, enable_auto_commit=False)
        c.assign([("t", 0)])
        assert values(poll_until(c, 1)) == [b"3"]


@pytest.mark.parametrize("reset, expected_position, expected_values", [
    ("earliest", 3, [b"0", b"1", b"2"]),
    ("latest", 3, []),
])
def test_a_position_out_of_range_is_reset_by_policy(broker, consumer, reset, expected_position,
                                                     expected_values):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"0", b"1", b"2"])
    c = consumer(auto_offset_reset=reset)
    c.assign([("t", 0)])
    c.seek(("t", 0), 1000)
    got = poll_until(c, len(expected_values)) if expected_values else c.poll(timeout_ms=100)
    assert values(got) == expected_values
    assert c.position(("t", 0)) == expected_position


@pytest.mark.parametrize("reset, expected_first", [("earliest", 18), ("latest", None), ("none", "raises")])
def test_a_committed_offset_deleted_by_retention_is_reset_by_policy(broker, consumer, clock, reset,
                                                                    expected_first):
    broker.create_topic("t", 1, {"segment.bytes": 200, "retention.ms": 1000})
    send(broker, "t", 0, [b"v%02d" % i for i in range(20)], batch_size=0)  # a batch per record
    consumer(group_id="g").commit({("t", 0): 3})
    clock.advance(10_000)
    broker.engine.call(broker.engine.jobs.apply_retention, timeout=DEADLINE_S)
    start = broker.engine.partitions.log("t", 0).log_start_offset
    assert 3 < start == 18
    c = consumer(group_id="g", auto_offset_reset=reset, enable_auto_commit=False)
    c.assign([("t", 0)])
    if expected_first == "raises":
        with pytest.raises(OffsetOutOfRangeError):
            c.poll(timeout_ms=100)
    elif expected_first is None:
        assert c.poll(timeout_ms=100) == [] and c.position(("t", 0)) == 20
    else:
        assert [r.offset for r in poll_until(c, 2)] == [18, 19]


def test_seek_to_a_negative_offset_is_refused(broker, consumer):
    broker.create_topic("t", 1)
    c = consumer()
    c.assign([("t", 0)])
    with pytest.raises(ValueError):
        c.seek(("t", 0), -1)


def test_a_position_out_of_range_with_reset_none_raises(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"0"])
    c = consumer(auto_offset_reset="none")
    c.assign([("t", 0)])
    c.seek(("t", 0), 5)
    with pytest.raises(OffsetOutOfRangeError):
        c.poll(timeout_ms=100)


# -- read_committed -------------------------------------------------------------------------------


def interleaved_transactions(broker: Broker) -> None:
    """n0, a1(T1), n1, b1(T2), a2(T1), ABORT(T1), b2(T2), COMMIT(T2), n2 on t-0."""
    plain = broker.producer()
    t1 = broker.producer(transactional_id="t1")
    t2 = broker.producer(transactional_id="t2")
    t1.init_transactions()
    t2.init_transactions()
    plain.send("t", b"n0", partition=0).get(timeout=10)
    t1.begin_transaction()
    t1.send("t", b"a1", partition=0).get(timeout=10)
    plain.send("t", b"n1", partition=0).get(timeout=10)
    t2.begin_transaction()
    t2.send("t", b"b1", partition=0).get(timeout=10)
    t1.send("t", b"a2", partition=0).get(timeout=10)
    t1.abort_transaction()
    t2.send("t", b"b2", partition=0).get(timeout=10)
    t2.commit_transaction()
    plain.send("t", b"n2", partition=0).get(timeout=10)


def test_read_committed_skips_aborted_and_control_records(broker, consumer):
    broker.create_topic("t", 1)
    interleaved_transactions(broker)
    committed = consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    committed.assign([("t", 0)])
    got = poll_until(committed, 5)
    assert values(got) == [b"n0", b"n1", b"b1", b"b2", b"n2"]
    assert [r.offset for r in got] == sorted(r.offset for r in got)
    assert committed.poll(timeout_ms=0) == []
    assert committed.position(("t", 0)) == log_end(broker, "t", 0) == 9

    uncommitted = consumer(isolation_level="read_uncommitted", auto_offset_reset="earliest")
    uncommitted.assign([("t", 0)])
    got = poll_until(uncommitted, 7)
    assert values(got) == [b"n0", b"a1", b"n1", b"b1", b"a2", b"b2", b"n2"]
    assert uncommitted.poll(timeout_ms=0) == []  # markers are never records
    assert uncommitted.position(("t", 0)) == 9


def test_read_committed_position_moves_past_an_aborted_transaction_to_the_log_end(broker, consumer):
    broker.create_topic("t", 1)
    p = broker.producer(transactional_id="tx")
    p.init_transactions()
    p.begin_transaction()
    for v in (b"x", b"y", b"z"):
        p.send("t", v, partition=0).get(timeout=10)
    p.abort_transaction()
    c = consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    c.assign([("t", 0)])
    # Kafka: poll returns at once when the position advanced past aborted/control records
    assert returns_within(lambda: c.poll(timeout_ms=FAR_MS), DEADLINE_S, "the poll") == []
    assert c.position(("t", 0)) == log_end(broker, "t", 0) == 4


def test_read_committed_waits_for_an_open_transaction_then_sees_it(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"before"])
    p = broker.producer(transactional_id="tx")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"inside", partition=0).get(timeout=10)
    send(broker, "t", 0, [b"after"])  # behind the open transaction: not yet visible
    c = consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    c.assign([("t", 0)])
    assert values(poll_until(c, 1)) == [b"before"]
    assert c.poll(timeout_ms=100) == []
    assert c.position(("t", 0)) == 1
    p.commit_transaction()
    assert values(poll_until(c, 2)) == [b"inside", b"after"]


def test_seek_to_end_is_the_lso_under_read_committed(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"0", b"1", b"2"])
    p = broker.producer(transactional_id="tx")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"open-3", partition=0).get(timeout=10)
    send(broker, "t", 0, [b"4"])
    committed = consumer(isolation_level="read_committed")
    committed.assign([("t", 0)])
    committed.seek_to_end()
    assert committed.position(("t", 0)) == 3 == broker.list_offsets("t", 0, -1, "read_committed")
    uncommitted = consumer(isolation_level="read_uncommitted")
    uncommitted.assign([("t", 0)])
    uncommitted.seek_to_end([("t", 0)])
    assert uncommitted.position(("t", 0)) == 5
    uncommitted.seek_to_beginning()
    assert uncommitted.position(("t", 0)) == 0
    p.commit_transaction()
    assert values(poll_until(committed, 2)) == [b"open-3", b"4"]


# -- commits --------------------------------------------------------------------------------------


def test_close_auto_commits_the_positions(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"0", b"1", b"2"])
    c = consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=True,
                 auto_commit_interval_ms=3_600_000)
    c.assign([("t", 0)])
    poll_until(c, 3)
    assert consumer(group_id="g").committed([("t", 0)]) == {("t", 0): None}  # not yet: interval not reached
    c.close()
    assert consumer(group_id="g").committed([("t", 0)]) == {("t", 0): 3}


def test_close_without_auto_commit_commits_nothing(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"0"])
    c = consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.assign([("t", 0)])
    poll_until(c, 1)
    c.close()
    assert consumer(group_id="g").committed([("t", 0)]) == {("t", 0): None}


def test_auto_commit_at_the_interval_commits_what_the_last_poll_returned(broker, consumer):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"0", b"1"])
    c = consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=True,
                 auto_commit_interval_ms=0)
    c.assign([("t", 0)])
    poll_until(c, 2)
    c.poll(timeout_ms=0)
    assert consumer(group_id="g").committed([("t", 0)]) == {("t", 0): 2}


# -- poll wakes up --------------------------------------------------------------------------------


def test_poll_returns_as_soon_as_data_arrives(broker, consumer):
    broker.create_topic("t", 1)
    c = consumer(auto_offset_reset="earliest")
    c.assign([("t", 0)])
    assert c.position(("t", 0)) == 0
    engine = broker.engine
    errors: list[BaseException] = []

    def produce_once_the_consumer_waits() -> None:
        try:
            eventually(lambda: bool(engine.partitions._data_waiters), DEADLINE_S, "the consumer to wait for data")
            send(broker, "t", 0, [b"hello"])
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    producer = threading.Thread(target=produce_once_the_consumer_waits)
    producer.start()
    got = returns_within(lambda: c.poll(timeout_ms=FAR_MS), DEADLINE_S, "the poll, data produced while it waited")
    producer.join(DEADLINE_S)
    assert not errors and not producer.is_alive()
    assert values(got) == [b"hello"]


def test_poll_without_data_waits_out_its_timeout(broker, consumer):
    broker.create_topic("t", 1)
    c = consumer(auto_offset_reset="earliest")
    c.assign([("t", 0)])
    c.position(("t", 0))
    started = time.monotonic()
    assert returns_within(lambda: c.poll(timeout_ms=300), DEADLINE_S, "the poll") == []
    assert time.monotonic() - started >= 0.25  # a lower bound: a busy machine only makes it longer


# -- group membership -----------------------------------------------------------------------------


class Member(threading.Thread):
    """A consumer polling on its own thread, recording (generation, record) pairs."""

    def __init__(self, c: Consumer, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.c = c
        self.records: list[tuple[int, ConsumerRecord]] = []
        #: every (generation, assignment) this member had while polling
        self.assignments: dict[int, tuple] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                got = self.c.poll(timeout_ms=50)
                generation = self.c.group_metadata().generation_id
                with self.lock:
                    if generation >= 0:
                        self.assignments[generation] = tuple(sorted(self.c.assignment()))
                    self.records += [(generation, r) for r in got]
            self.c.close()
        except BaseException as e:
            self.error = e

    def snapshot(self) -> tuple[int, tuple]:
        with self.lock:
            if not self.assignments:
                return -1, ()
            generation = max(self.assignments)
            return generation, self.assignments[generation]

    def finish(self) -> None:
        self.stop.set()
        self.join(DEADLINE_S)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error


def settled(members: list[Member], partitions: int) -> bool:
    """Every member is in the same generation and together they own every partition once."""
    snapshots = [m.snapshot() for m in members]
    if len({g for g, _ in snapshots}) != 1 or snapshots[0][0] < 0:
        return False
    owned = [tp for _, a in snapshots for tp in a]
    return len(owned) == len(set(owned)) == partitions


def test_subscribers_split_partitions_by_range_and_rebalance_as_members_come_and_go(broker, consumer):
    broker.create_topic("t", 6)
    produced: set[bytes] = set()

    def produce_round(tag: str) -> None:
        for p in range(6):
            vs = [b"%s-%d-%d" % (tag.encode(), p, i) for i in range(3)]
            send(broker, "t", p, vs)
            produced.update(vs)

    produce_round("r0")
    config = dict(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False, **FAST)
    members = [Member(consumer(client_id=f"c{i}", **config), f"c{i}") for i in range(2)]
    for m in members:
        m.c.subscribe(["t"])
        m.start()
    try:
        eventually(lambda: settled(members, 6) and sorted(len(m.snapshot()[1]) for m in members) == [3, 3],
                   DEADLINE_S, "two members to settle with 3 partitions each")  # (the race below)
        generation, _ = members[0].snapshot()
        by_member = {m.c.group_metadata().member_id: m.snapshot()[1] for m in members}
        first, second = sorted(by_member)
        assert by_member[first] == (("t", 0), ("t", 1), ("t", 2))
        assert by_member[second] == (("t", 3), ("t", 4), ("t", 5))
        produce_round("r1")

        third = Member(consumer(client_id="c2", **config), "c2")
        third.c.subscribe(["t"])
        third.start()
        members.append(third)
        # a member's generation changes with its JoinGroup answer, its assignment with its
        # SyncGroup answer: in between a snapshot pairs the new generation with the old
        # assignment (two members holding 3 each, the newcomer none), so wait for the split
        # (above too: the first member holding all 6, the second none)
        eventually(lambda: settled(members, 6) and members[0].snapshot()[0] > generation
                   and sorted(len(m.snapshot()[1]) for m in members) == [2, 2, 2],
                   DEADLINE_S, "three members to settle with 2 partitions each")
        produce_round("r2")
        eventually(lambda: produced <= consumed_values(members), DEADLINE_S, "every record to be consumed")

        generation = members[0].snapshot()[0]
        third.finish()
        eventually(lambda: settled(members[:2], 6) and members[0].snapshot()[0] > generation,
                   DEADLINE_S, "the two remaining members to settle")
        produce_round("r3")
        eventually(lambda: produced <= consumed_values(members), DEADLINE_S, "every record to be consumed")
    finally:
        for m in members:
            m.finish()
    assert_no_partition_consumed_twice_in_a_generation(members)


def consumed_values(members: list[Member]) -> set[bytes]:
    found = set()
    for m in members:
        with m.lock:
            found.update(r.value for _, r in m.records)
    return found


def assert_no_partition_consumed_twice_in_a_generation(members: list[Member]) -> None:
    owner: dict[tuple[int, tuple[str, int]], str] = {}
    for m in members:
        for generation, r in m.records:
            key = (generation, (r.topic, r.partition))
            assert owner.setdefault(key, m.name) == m.name, (
                f"{key[1]} consumed by {owner[key]} and {m.name} in generation {generation}")
        for generation, assignment in m.assignments.items():
            for tp in assignment:
                key = (generation, tp)
                assert owner.setdefault(key, m.name) == m.name, f"{tp} owned twice in generation {generation}"


def test_auto_commit_before_a_rebalance_hands_partitions_over_without_duplicates(broker, consumer):
    broker.create_topic("t", 4)
    for p in range(4):
        send(broker, "t", p, [b"%d-%d" % (p, i) for i in range(5)])
    config = dict(group_id="g", auto_offset_reset="earliest", enable_auto_commit=True,
                  auto_commit_interval_ms=3_600_000, **FAST)
    first = Member(consumer(client_id="a", **config), "a")
    first.c.subscribe(["t"])
    first.start()
    second = None
    try:
        eventually(lambda: len(consumed_values([first])) == 20, DEADLINE_S, "the first member to read everything")
        for p in range(4):
            send(broker, "t", p, [b"late-%d" % p])
        second = Member(consumer(client_id="b", **config), "b")
        second.c.subscribe(["t"])
        second.start()
        eventually(lambda: settled([first, second], 4), DEADLINE_S, "two members to settle")
        eventually(lambda: len(consumed_values([first, second])) == 24, DEADLINE_S, "the late records")
    finally:
        first.finish()
        if second is not None:
            second.finish()
    every = [r.value for m in (first, second) for _, r in m.records]
    assert len(every) == len(set(every)) == 24, "a record was consumed twice across the rebalance"


def test_poll_returns_within_its_timeout_while_the_group_waits_for_another_member(broker, consumer):
    """A rebalance outlives a short poll: one thread can drive two members of a group
    (Kafka's poll returns within its timeout; the join goes on in the background)."""
    broker.create_topic("t", 2)
    a = consumer(group_id="g", auto_offset_reset="earliest", **FAST)
    b = consumer(group_id="g", auto_offset_reset="earliest", **FAST)
    a.subscribe(["t"])
    eventually(lambda: a.poll(timeout_ms=100) == [] and a.assignment() == [("t", 0), ("t", 1)], DEADLINE_S,
               "a's first join (alone: both partitions)")
    b.subscribe(["t"])
    outcome: list[Any] = []
    poller = threading.Thread(target=lambda: outcome.append(b.poll(timeout_ms=200)), daemon=True)
    poller.start()
    poller.join(DEADLINE_S)
    assert not poller.is_alive(), "b.poll(200 ms) blocked on a rebalance that needs a.poll()"
    assert outcome == [[]]

    def shared() -> bool:
        if a.assignment() and b.assignment() and len(set(a.assignment()) | set(b.assignment())) == 2:
            return True
        a.poll(timeout_ms=20)
        b.poll(timeout_ms=20)
        return False
    eventually(shared, DEADLINE_S, "a and b to share the partitions", interval=0)
    assert a.group_metadata().generation_id == b.group_metadata().generation_id


def test_subscribe_to_two_topics_uses_the_range_assignor_per_topic(broker, consumer):
    broker.create_topic("t0", 3)
    broker.create_topic("t1", 3)
    config = dict(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False, **FAST)
    members = [Member(consumer(client_id=f"c{i}", **config), f"c{i}") for i in range(2)]
    for m in members:
        m.c.subscribe(["t0", "t1"])
        m.start()
    try:  # (both holding some: a snapshot may pair a new generation with an old assignment)
        eventually(lambda: settled(members, 6) and all(m.snapshot()[1] for m in members), DEADLINE_S,
                   "two members to settle")
        by_member = {m.c.group_metadata().member_id: m.snapshot()[1] for m in members}
    finally:
        for m in members:
            m.finish()
    first, second = sorted(by_member)
    assert by_member[first] == (("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1))
    assert by_member[second] == (("t0", 2), ("t1", 2))


def test_closing_a_member_whose_join_is_still_waiting_lets_the_group_carry_on(broker, consumer):
    broker.create_topic("t", 2)
    a = consumer(group_id="g", auto_offset_reset="earliest", **FAST)
    b = consumer(group_id="g", auto_offset_reset="earliest", **FAST)
    a.subscribe(["t"])
    a.poll(timeout_ms=100)
    b.subscribe(["t"])
    assert b.poll(timeout_ms=50) == []  # its join waits for a to rejoin
    b.close()
    a_id = a.group_metadata().member_id

    def settled_without_b() -> Any:
        a.poll(timeout_ms=20)
        group = broker.engine.groups.coordinator.describe("g")
        return group if group.state.value == "Stable" and a.group_metadata().generation_id == group.generation else None
    group = eventually(settled_without_b, DEADLINE_S, "the group to settle without b", interval=0)
    assert list(group.members) == [a_id]
    assert a.assignment() == [("t", 0), ("t", 1)]


def test_a_member_that_lost_its_membership_resumes_from_the_committed_offsets(broker, consumer, clock):
    broker.create_topic("t", 1)
    send(broker, "t", 0, [b"%d" % i for i in range(10)])
    c = consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                 session_timeout_ms=6_000, **FAST)
    c.subscribe(["t"])
    c.commit({("t", 0): 2})
    assert [r.offset for r in poll_until(c, 8)] == list(range(2, 10))
    old = c.group_metadata()

    async def expire_the_session() -> None:  # atomic on the loop: no heartbeat in between
        clock.advance(6_001)
        broker.engine.groups.coordinator.tick()
    broker.engine.call(expire_the_session, timeout=DEADLINE_S)
    assert not broker.engine.groups.coordinator.describe("g").members
    # the heartbeat learns UNKNOWN_MEMBER_ID; the consumer rejoins as a new member and,
    # as Kafka does for lost partitions, starts over from the committed offset
    got = poll_until(c, 8)
    assert got[0].offset == 2
    assert c.group_metadata().member_id != old.member_id


def test_a_closed_static_member_keeps_its_place_and_a_restart_takes_it_back(broker, consumer):
    """KIP-345: a static member's close sends no LeaveGroup, so the group does not
    rebalance; the same instance id rejoining gets the same partitions in the same
    generation."""
    broker.create_topic("t", 2)
    config = dict(group_id="g", group_instance_id="app-0", auto_offset_reset="earliest", **FAST)
    first = consumer(**config)
    first.subscribe(["t"])
    eventually(lambda: first.poll(timeout_ms=20) is not None and len(first.assignment()) == 2,
               DEADLINE_S, "the static member's assignment")
    generation = first.group_metadata().generation_id
    first.close()
    group = broker.engine.call(broker.engine.groups.describe_group, "g")
    assert [m.group_instance_id for m in group.members] == ["app-0"]
    again = consumer(**config)
    again.subscribe(["t"])
    eventually(lambda: again.poll(timeout_ms=20) is not None and len(again.assignment()) == 2,
               DEADLINE_S, "the restarted member's assignment")
    assert sorted(again.assignment()) == [("t", 0), ("t", 1)]
    assert broker.engine.call(broker.engine.groups.describe_group, "g").generation == generation
