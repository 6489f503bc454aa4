"""KIP-447 (seed 003) and the seed's Consumer Coordinator: transactional offsets.

* A zombie whose consumer's generation is gone is fenced at TxnOffsetCommit.
* Offsets committed inside a transaction are pending until its COMMIT marker lands
  on the group's ``__consumer_offsets`` partition (an ABORT drops them);
  OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT meanwhile, so a
  read_committed consumer taking over the partition waits the transaction out.
* Pending offsets are rebuilt from the log on start (Consumer Coordinator Startup).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from exactly.app import Broker
from exactly.app.client.types import ConsumerGroupMetadata
from exactly.app.client.consumer import Consumer
from exactly.app.client.producer import Producer
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage.clock import FakeClock
from exactly.storage.errors import KafkaError, TransactionAbortableError
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS, jobs_config
from tests.waiting import eventually, returns_within

DEADLINE_S = 10
TP = ("in", 0)


@pytest.fixture
def open_broker(tmp_path: Path, clock: FakeClock,
                request: pytest.FixtureRequest) -> Iterator[Callable[[], Broker]]:
    opened: list[Broker] = []

    def open_() -> Broker:
        b = Broker(tmp_path / "data", clock=clock, **SMALL_INTERNAL_TOPICS, **jobs_config(request))
        opened.append(b)
        return b

    yield open_
    for b in opened:
        b.close()


def prepare(b: Broker) -> Broker:
    b.create_topic("in", 1)
    b.create_topic("out", 1)
    return b


@pytest.fixture
def broker(open_broker) -> Broker:
    return prepare(open_broker())


@pytest.fixture
def consumer(broker) -> Iterator[Callable[..., Consumer]]:
    made: list[Consumer] = []

    def make(**config: Any) -> Consumer:
        c = broker.consumer(**{"group_id": "g", "enable_auto_commit": False, "auto_offset_reset": "earliest",
                               "isolation_level": "read_committed", "heartbeat_interval_ms": 20, **config})
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except Exception:
            pass


def fetch(broker: Broker, require_stable: bool, tp=TP):
    got = broker.engine.call(broker.engine.groups.coordinator.fetch_offsets, "g", [tp], require_stable,
                             timeout=DEADLINE_S)
    return got[tp]


def committed_offset(broker: Broker, tp=TP) -> int:
    f = fetch(broker, require_stable=False, tp=tp)
    assert f.error is None
    return f.offset


def is_unstable(broker: Broker, tp=TP) -> bool:
    error = fetch(broker, require_stable=True, tp=tp).error
    assert error is None or (error.name, error.code) == ("UNSTABLE_OFFSET_COMMIT", 88), repr(error)
    return error is not None


def fill(broker: Broker, count: int) -> None:
    p = broker.producer()
    for i in range(count):
        p.send("in", b"in-%d" % i, partition=0).get(timeout=10)


def commit_standalone(broker: Broker, offset: int, tp=TP) -> None:
    errors = broker.engine.call(broker.engine.groups.coordinator.commit_offsets, "g",
                                {tp: CommittedOffset(offset)}, timeout=DEADLINE_S)
    assert errors == {tp: None}


def transactional(broker: Broker, txn_id: str = "app-1", **config: Any) -> Producer:
    p = broker.producer(transactional_id=txn_id, **config)
    p.init_transactions()
    return p


def open_transaction_with_offsets(broker: Broker, offset: int, group: ConsumerGroupMetadata | str = "g",
                                  txn_id: str = "app-1", **config: Any) -> Producer:
    p = transactional(broker, txn_id, **config)
    p.begin_transaction()
    p.send("out", b"result", partition=0).get(timeout=10)
    p.send_offsets_to_transaction({TP: offset}, group)
    return p


def poll_until(c: Consumer, count: int) -> list:
    got: list = []
    eventually(lambda: got.extend(c.poll(timeout_ms=100)) or len(got) >= count, DEADLINE_S, f"{count} records",
               interval=0)
    return got


def subscribed(c: Consumer) -> Consumer:
    c.subscribe(["in"])
    return c


def test_offsets_in_the_very_first_transaction_do_not_need_an_earlier_offset_commit(open_broker):
    b = open_broker()  # nothing has created __consumer_offsets yet
    b.create_topic("in", 1)
    p = b.producer(transactional_id="first", delivery_timeout_ms=2_000)
    p.init_transactions()
    p.begin_transaction()
    p.send_offsets_to_transaction({TP: 1}, "g")
    p.commit_transaction()
    assert committed_offset(b) == 1


# -- fencing zombies by generation ----------------------------------------------------------------


def test_a_zombie_with_the_old_generation_is_fenced_at_txn_offset_commit(broker, consumer):
    fill(broker, 10)
    commit_standalone(broker, 2)
    zombie = subscribed(consumer(client_id="zombie"))
    records = poll_until(zombie, 8)
    assert [r.offset for r in records] == list(range(2, 10))
    stale = zombie.group_metadata()  # taken before the rebalance, as a slow zombie would
    assert stale.generation_id >= 1 and stale.member_id

    # a newcomer's join rebalances the group; the zombie rejoins, so its member id is
    # still known, but the generation it processed its records in is gone
    newcomer = consumer(client_id="new")
    newcomer.subscribe(["in"])
    joiner = threading.Thread(target=lambda: newcomer.poll(timeout_ms=3000), daemon=True)
    joiner.start()

    def rebalanced() -> bool:
        if zombie.group_metadata().generation_id != stale.generation_id and not joiner.is_alive():
            return True
        zombie.poll(timeout_ms=20)
        return False
    eventually(rebalanced, DEADLINE_S, "the rebalance to complete", interval=0)
    group = broker.engine.groups.coordinator.describe("g")
    assert stale.member_id in group.members and group.generation > stale.generation_id

    p = transactional(broker)
    p.begin_transaction()
    p.send("out", b"from the zombie", partition=0).get(timeout=10)
    with pytest.raises(KafkaError) as info:
        p.send_offsets_to_transaction({TP: records[-1].offset + 1}, stale)
    assert (info.value.name, info.value.code) == ("ILLEGAL_GENERATION", 22)
    assert not is_unstable(broker), "the fenced offsets must not be pending"
    assert committed_offset(broker) == 2
    assert not group.pending
    with pytest.raises(TransactionAbortableError):
        p.commit_transaction()
    p.abort_transaction()
    assert committed_offset(broker) == 2 and not is_unstable(broker)
    # the producer carries on with the current generation
    p.begin_transaction()
    p.send_offsets_to_transaction({TP: 7}, zombie.group_metadata())
    p.commit_transaction()
    assert committed_offset(broker) == 7


def test_a_zombie_removed_from_the_group_is_fenced_as_an_unknown_member(broker):
    gc = broker.engine.groups.coordinator
    joined = broker.engine.call(gc.join_group, "g", "", "consumer", [("range", b"")], 10_000,
                                timeout=DEADLINE_S)
    broker.engine.call(gc.sync_group, "g", joined.generation, joined.member_id, {}, timeout=DEADLINE_S)
    broker.engine.call(gc.leave_group, "g", joined.member_id, timeout=DEADLINE_S)
    p = transactional(broker)
    p.begin_transaction()
    with pytest.raises(KafkaError) as info:
        p.send_offsets_to_transaction({TP: 5}, ConsumerGroupMetadata("g", joined.generation, joined.member_id))
    assert (info.value.name, info.value.code) == ("UNKNOWN_MEMBER_ID", 25)
    with pytest.raises(TransactionAbortableError):
        p.commit_transaction()
    p.abort_transaction()
    assert committed_offset(broker) == -1 and not is_unstable(broker)


def test_offsets_without_group_metadata_are_not_fenced(broker):
    """A producer that names only the group id (generation -1) is a standalone one."""
    p = open_transaction_with_offsets(broker, 4, group="g")
    p.commit_transaction()
    assert committed_offset(broker) == 4


# -- pending until the marker ---------------------------------------------------------------------


def test_transactional_offsets_are_pending_until_the_commit_marker(broker):
    commit_standalone(broker, 3)
    p = open_transaction_with_offsets(broker, 8)
    assert committed_offset(broker) == 3  # without require_stable: the last committed offset
    assert is_unstable(broker)
    unstable = fetch(broker, require_stable=True)
    assert (unstable.offset, unstable.metadata, unstable.leader_epoch) == (-1, "", -1)  # Kafka: no offset
    other = ("in", 1)  # a partition the transaction did not touch is stable
    assert not is_unstable(broker, other)
    p.commit_transaction()
    assert committed_offset(broker) == 8
    assert not is_unstable(broker)


def test_an_abort_marker_drops_the_pending_offsets(broker):
    commit_standalone(broker, 3)
    p = open_transaction_with_offsets(broker, 8)
    assert is_unstable(broker)
    p.abort_transaction()
    assert committed_offset(broker) == 3 and not is_unstable(broker)
    # and a later transaction of the same producer commits normally
    p.begin_transaction()
    p.send_offsets_to_transaction({TP: 9}, "g")
    p.commit_transaction()
    assert committed_offset(broker) == 9


def test_a_plain_commit_appended_after_a_transactions_offsets_outlives_its_commit(open_broker):
    """Kafka keeps whichever offset was appended last: a transaction's COMMIT marker
    does not bring back offsets older than a plain commit made meanwhile."""
    b = prepare(open_broker())
    p = open_transaction_with_offsets(b, 5)
    commit_standalone(b, 10)
    assert committed_offset(b) == 10 and is_unstable(b)
    p.commit_transaction()
    assert committed_offset(b) == 10 and not is_unstable(b)
    b.close()
    b = open_broker()
    assert committed_offset(b) == 10, "replaying the log must give the same answer"


def test_a_transactions_offsets_appended_after_a_plain_commit_win_at_its_commit(open_broker):
    b = prepare(open_broker())
    commit_standalone(b, 10)
    p = open_transaction_with_offsets(b, 5)
    p.commit_transaction()
    assert committed_offset(b) == 5
    b.close()
    b = open_broker()
    assert committed_offset(b) == 5


def test_two_producers_pending_offsets_complete_independently(broker):
    a = open_transaction_with_offsets(broker, 5, txn_id="a")
    b = transactional(broker, "b")
    b.begin_transaction()
    b.send_offsets_to_transaction({("in", 1): 6}, "g")
    assert is_unstable(broker) and is_unstable(broker, ("in", 1))
    b.abort_transaction()
    assert is_unstable(broker) and not is_unstable(broker, ("in", 1))
    a.commit_transaction()
    assert committed_offset(broker) == 5 and committed_offset(broker, ("in", 1)) == -1


def test_a_stale_producer_epoch_cannot_commit_offsets(broker):
    old = transactional(broker)
    old.begin_transaction()
    transactional(broker)  # a new instance fences the old epoch
    with pytest.raises(KafkaError) as info:
        old.send_offsets_to_transaction({TP: 5}, "g")
    assert info.value.name in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
    assert committed_offset(broker) == -1 and not is_unstable(broker)


# -- a consumer taking over waits the transaction out ---------------------------------------------


def test_a_consumer_taking_over_waits_for_the_open_transaction_to_commit(broker, consumer):
    fill(broker, 10)
    owner = subscribed(consumer(client_id="owner"))
    processed = poll_until(owner, 5)[:5]
    p = transactional(broker)
    p.begin_transaction()
    p.send("out", b"processed 0-4", partition=0).get(timeout=10)
    p.send_offsets_to_transaction({TP: processed[-1].offset + 1}, owner.group_metadata())
    owner.close()  # the owner goes away with its transaction still open

    successor = consumer(client_id="successor")
    successor.subscribe(["in"])
    assert successor.poll(timeout_ms=300) == []
    assert successor.assignment() == [TP]
    assert successor.poll(timeout_ms=300) == []  # still blocked: OffsetFetch is unstable
    p.commit_transaction()
    got = poll_until(successor, 5)
    assert [r.offset for r in got] == [5, 6, 7, 8, 9]


def test_a_consumer_taking_over_resumes_from_the_old_offset_when_the_transaction_times_out(
        broker, consumer, clock):
    fill(broker, 10)
    commit_standalone(broker, 2)
    owner = subscribed(consumer(client_id="owner"))
    poll_until(owner, 5)
    p = transactional(broker, transaction_timeout_ms=5_000)
    p.begin_transaction()
    p.send("out", b"processed", partition=0).get(timeout=10)
    p.send_offsets_to_transaction({TP: 7}, owner.group_metadata())
    owner.close()

    successor = consumer(client_id="successor")
    successor.subscribe(["in"])
    assert successor.poll(timeout_ms=300) == []
    assert successor.assignment() == [TP]
    clock.advance(5_001)
    aborted = broker.engine.call(broker.engine.jobs.abort_timed_out_transactions, timeout=DEADLINE_S)
    assert aborted == ["app-1"]
    got = poll_until(successor, 8)
    assert [r.offset for r in got] == list(range(2, 10))
    assert committed_offset(broker) == 2
    with pytest.raises(KafkaError):  # the zombie producer was fenced by the timeout's epoch bump
        p.commit_transaction()


def test_position_waits_for_pending_offsets_and_gives_up_at_its_timeout(broker, consumer):
    fill(broker, 10)
    p = open_transaction_with_offsets(broker, 6)
    c = consumer()
    c.assign([TP])
    started = time.monotonic()
    with pytest.raises(KafkaError) as info:
        returns_within(lambda: c.position(TP, timeout_ms=200), DEADLINE_S, "position")
    assert (info.value.name, info.value.code) == ("UNSTABLE_OFFSET_COMMIT", 88)
    assert time.monotonic() - started >= 0.15  # it waited (a lower bound: load only makes it longer)
    p.commit_transaction()
    assert c.position(TP, timeout_ms=5_000) == 6


def test_a_read_uncommitted_consumer_does_not_wait(broker, consumer):
    fill(broker, 4)
    commit_standalone(broker, 1)
    p = open_transaction_with_offsets(broker, 3)
    c = consumer(isolation_level="read_uncommitted")
    c.assign([TP])
    assert [r.offset for r in poll_until(c, 3)] == [1, 2, 3]
    p.abort_transaction()


# -- rebuilt on restart ---------------------------------------------------------------------------


def test_pending_offsets_survive_a_restart_and_a_producer_reinit_aborts_them(open_broker):
    b = prepare(open_broker())
    commit_standalone(b, 3)
    open_transaction_with_offsets(b, 8)
    assert is_unstable(b)
    b.close()

    b = open_broker()
    assert is_unstable(b), "the transactional offsets must be pending again after the restart"
    assert committed_offset(b) == 3
    transactional(b)  # the same transactional id again: its open transaction is aborted
    assert not is_unstable(b)
    assert committed_offset(b) == 3
    b.close()

    b = open_broker()
    assert not is_unstable(b) and committed_offset(b) == 3


def test_pending_offsets_rebuilt_on_restart_become_committed_by_the_commit_marker(open_broker):
    b = prepare(open_broker())
    p = open_transaction_with_offsets(b, 8)
    txn = ("app-1", p.producer_id, p.producer_epoch)
    b.close()

    b = open_broker()
    assert is_unstable(b) and committed_offset(b) == -1
    b.engine.call(b.engine.transactions.coordinator.end_txn, *txn, True, timeout=DEADLINE_S)
    assert not is_unstable(b) and committed_offset(b) == 8


def test_offsets_replay_the_same_after_the_log_cleaner_compacted_consumer_offsets(tmp_path, clock):
    """Compaction keeps the last record per key and drops aborted data; replaying what
    it leaves must give the same committed and pending offsets."""
    config = {**SMALL_INTERNAL_TOPICS, **FROZEN, "transaction.state.log.segment.bytes": 300,
              "offsets.topic.segment.bytes": 300}
    tps = [("in", p) for p in range(4)]
    with Broker(tmp_path / "data", clock=clock, **config) as b:
        prepare(b)
        for round_ in range(3):
            for i, tp in enumerate(tps):
                commit_standalone(b, 10 * round_ + i, tp)
        committed = transactional(b, "committer")
        committed.begin_transaction()
        committed.send_offsets_to_transaction({tps[0]: 100, tps[1]: 101}, "g")
        committed.commit_transaction()
        aborted = transactional(b, "aborter")
        aborted.begin_transaction()
        aborted.send_offsets_to_transaction({tps[1]: 201, tps[2]: 202}, "g")
        aborted.abort_transaction()
        open_ = transactional(b, "open")
        open_.begin_transaction()
        open_.send_offsets_to_transaction({tps[3]: 303}, "g")
        for i in range(6):  # roll more segments so the ones above become cleanable
            commit_standalone(b, i, ("other", i))
        before = {tp: (committed_offset(b, tp), is_unstable(b, tp)) for tp in tps}
        assert before == {tps[0]: (100, False), tps[1]: (101, False), tps[2]: (22, False), tps[3]: (23, True)}
        assert b.engine.call(b.engine.jobs.compact_logs, timeout=DEADLINE_S) > 0
    with Broker(tmp_path / "data", clock=clock, **config) as b:
        assert {tp: (committed_offset(b, tp), is_unstable(b, tp)) for tp in tps} == before


def test_committed_and_aborted_transactional_offsets_replay_the_same_after_restart(open_broker):
    b = prepare(open_broker())
    committed = open_transaction_with_offsets(b, 5, txn_id="committer")
    committed.commit_transaction()
    aborted = transactional(b, "aborter")
    aborted.begin_transaction()
    aborted.send_offsets_to_transaction({TP: 9, ("in", 1): 9}, "g")
    aborted.abort_transaction()
    before = (committed_offset(b), committed_offset(b, ("in", 1)))
    assert before == (5, -1)
    b.close()

    b = open_broker()
    assert (committed_offset(b), committed_offset(b, ("in", 1))) == before
    assert not is_unstable(b) and not is_unstable(b, ("in", 1))
    assert not b.engine.groups.coordinator.describe("g").pending
