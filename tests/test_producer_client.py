"""The embedded Producer API against its module docstring and Kafka's client rules.

Calls out of order are IllegalStateError; an error inside a transaction is
abortable (the call raises it, records still waiting fail with it, commit raises
TRANSACTION_ABORTABLE, abort clears it); an idempotent producer partitions keys with
Kafka's murmur2, records without a key with the sticky partitioner, and never drops a
record as a duplicate that is not one; close flushes and aborts what is open.
Batching, flush, in-flight limits, retries and delivery timeouts:
tests/test_producer_batching.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from exactly.app import Broker
from exactly.app.client.partitioner import murmur2
from exactly.app.client.types import IllegalStateError
from exactly.coordinator.transaction_state import TransactionState, TxnTransitMetadata
from exactly.storage.clock import FakeClock
from exactly.storage.errors import (
    KafkaError,
    OutOfOrderSequenceNumberError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import MAX_PRODUCER_EPOCH
from tests.conftest import SMALL_INTERNAL_TOPICS, data_batch
from tests.test_transaction_coordinator import append_txn_log

T = "orders"
SMALL = SMALL_INTERNAL_TOPICS


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    with Broker(tmp_path / "data", clock=clock, **SMALL) as b:
        b.create_topic(T, partitions=3)
        yield b


def records(broker: Broker, partition: int, read_committed: bool = True, topic: str = T):
    r = broker.fetch(topic, partition, 0, isolation_level="read_committed" if read_committed else "read_uncommitted")
    return read_records(r.records, 0, read_committed, r.aborted_transactions or ()).records


def values(broker: Broker, partition: int, read_committed: bool = True) -> list[bytes]:
    return [r.value for r in records(broker, partition, read_committed)]


def stable(broker: Broker) -> bool:
    return all(broker.list_offsets(T, p, -1, "read_committed") == broker.list_offsets(T, p, -1)
               for p in range(3))


def state_of(broker: Broker, txn_id: str):
    async def run():
        return broker.engine.transactions.coordinator.describe(txn_id)
    return broker.engine.call(run).state.display


@pytest.fixture
def txn(broker: Broker):
    p = broker.producer(transactional_id="app", delivery_timeout_ms=2_000)
    p.init_transactions()
    return p


# -- state errors ------------------------------------------------------------------------

def test_calls_before_init_transactions_are_illegal_state(broker):
    p = broker.producer(transactional_id="app")
    for call in (p.begin_transaction, p.commit_transaction, p.abort_transaction,
                 lambda: p.send(T, b"x", partition=0)):
        with pytest.raises(IllegalStateError):
            call()
    p.init_transactions()
    p.begin_transaction()


def test_send_outside_a_transaction_is_illegal_state(txn, broker):
    with pytest.raises(IllegalStateError):
        txn.send(T, b"x", partition=0)
    txn.begin_transaction()
    txn.send(T, b"in", partition=0)
    txn.commit_transaction()
    with pytest.raises(IllegalStateError):
        txn.send(T, b"after", partition=0)
    assert values(broker, 0, read_committed=False) == [b"in"]


def test_begin_twice_is_illegal_state(txn):
    txn.begin_transaction()
    with pytest.raises(IllegalStateError):
        txn.begin_transaction()
    txn.send(T, b"x", partition=0)
    txn.commit_transaction()  # the first transaction is unharmed


def test_commit_or_abort_without_begin_is_illegal_state(txn):
    for call in (txn.commit_transaction, txn.abort_transaction):
        with pytest.raises(IllegalStateError):
            call()
    txn.begin_transaction()
    txn.commit_transaction()
    for call in (txn.commit_transaction, txn.abort_transaction):
        with pytest.raises(IllegalStateError):
            call()


def test_init_transactions_twice_is_illegal_state(txn, broker):
    epoch = txn.producer_epoch
    with pytest.raises(IllegalStateError):
        txn.init_transactions()
    txn.begin_transaction()
    with pytest.raises(IllegalStateError):
        txn.init_transactions()  # would otherwise abort its own transaction behind its back
    txn.send(T, b"x", partition=0)
    txn.commit_transaction()
    assert txn.producer_epoch == epoch + 1 and values(broker, 0) == [b"x"]  # transaction version 2: EndTxn bumped it


def test_a_record_that_is_not_bytes_or_has_a_negative_timestamp_is_refused_at_send(broker):
    p = broker.producer()
    with pytest.raises(TypeError):
        p.send(T, "text", partition=0)
    with pytest.raises(TypeError):
        p.send(T, b"v", key=42, partition=0)
    with pytest.raises(ValueError):
        p.send(T, b"v", partition=0, timestamp=-5)
    assert p.send(T, None, key=b"tombstone", partition=0).get(timeout=5).offset == 0


def test_transactional_apis_need_a_transactional_id(broker):
    p = broker.producer()
    with pytest.raises(IllegalStateError):
        p.init_transactions()
    with pytest.raises(IllegalStateError):
        p.begin_transaction()
    with pytest.raises(ValueError):
        broker.producer(transactional_id="x", enable_idempotence=False)


def test_an_empty_transaction_commits_and_aborts_without_the_coordinator(txn, broker):
    txn.begin_transaction()
    txn.commit_transaction()
    txn.begin_transaction()
    txn.abort_transaction()
    assert state_of(broker, "app") == "Empty"


# -- abortable errors ------------------------------------------------------------------

@pytest.mark.parametrize("target", [(T, 7), ("no-such-topic", None)], ids=["unknown partition", "unknown topic"])
def test_an_error_inside_a_transaction_is_abortable(broker, target):
    txn = broker.producer(transactional_id="app", linger_ms=60_000)  # records wait for flush
    txn.init_transactions()
    txn.begin_transaction()
    txn.send(T, b"before", partition=0)
    txn.flush()  # in the log, uncommitted
    waiting = txn.send(T, b"waiting", partition=1)  # still in its batch when the error comes
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        txn.send(target[0], b"bad", partition=target[1])
    assert raised.value.code == 3
    with pytest.raises(UnknownTopicOrPartitionError):
        waiting.get(timeout=5)  # failed with the transaction's error, never sent
    with pytest.raises(TransactionAbortableError):
        txn.send(T, b"more", partition=0)
    with pytest.raises(TransactionAbortableError) as raised:
        txn.commit_transaction()
    assert (raised.value.code, raised.value.name) == (120, "TRANSACTION_ABORTABLE")
    with pytest.raises(TransactionAbortableError):
        txn.commit_transaction()  # still: only abort gets out of it
    txn.abort_transaction()
    assert values(broker, 0) == [] and stable(broker)
    txn.begin_transaction()
    txn.send(T, b"after", partition=0)
    txn.commit_transaction()
    assert values(broker, 0) == [b"after"]
    assert values(broker, 0, read_committed=False) == [b"before", b"after"]
    assert values(broker, 1, read_committed=False) == []


def test_an_abortable_error_on_the_first_send_needs_no_coordinator_to_abort(txn, broker):
    txn.begin_transaction()
    with pytest.raises(UnknownTopicOrPartitionError):
        txn.send(T, b"bad", partition=9)
    txn.abort_transaction()
    txn.begin_transaction()
    txn.send(T, b"ok", partition=1)
    txn.commit_transaction()
    assert values(broker, 1) == [b"ok"]


def test_send_offsets_commits_the_offsets_with_the_transaction(txn, broker):
    """On a broker where no group has written anything yet: __consumer_offsets is
    created by the transaction's own offset commit."""
    txn.begin_transaction()
    txn.send(T, b"out", partition=0)
    txn.send_offsets_to_transaction({(T, 1): 42}, "group-a")
    fetch = broker.engine.groups.coordinator.fetch_offsets
    assert broker.engine.call(fetch, "group-a", [(T, 1)])[(T, 1)].offset == -1  # pending
    txn.commit_transaction()
    assert broker.engine.call(fetch, "group-a", [(T, 1)])[(T, 1)].offset == 42
    assert values(broker, 0) == [b"out"]


def test_a_sequence_error_is_abortable_and_the_abort_bumps_the_epoch(txn, broker):
    """KIP-360: the partition refuses a sequence gap; after abort the producer gets
    a new epoch from the coordinator (a bump of its own epoch, not a new instance)
    and every sequence starts over."""
    txn.begin_transaction()
    txn.send(T, b"one", partition=0).get(timeout=5)
    pid, epoch = txn.producer_id, txn.producer_epoch
    # another writer takes sequences 1-3 under our producer id: the producer's next
    # batch (sequence 1, one record) is neither next nor a duplicate
    broker.produce(T, 0, data_batch([b"x", b"y", b"z"], pid, epoch, 1, transactional=True))
    with pytest.raises(OutOfOrderSequenceNumberError):
        txn.send(T, b"gap", partition=0).get(timeout=5)
    with pytest.raises(TransactionAbortableError):
        txn.commit_transaction()
    txn.abort_transaction()
    assert (txn.producer_id, txn.producer_epoch) == (pid, epoch + 1)
    txn.begin_transaction()
    txn.send(T, b"two", partition=0)
    txn.commit_transaction()
    assert values(broker, 0) == [b"two"]


# -- idempotent producer -----------------------------------------------------------------

@pytest.mark.parametrize(("key", "expected"), [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_kafkas_own_vectors(key, expected):
    assert murmur2(key) == expected


def test_an_abort_bump_from_the_last_usable_epoch_moves_to_a_new_producer_id(tmp_path, clock):
    """Epoch exhaustion, client side (Kafka's KIP-360 bump after an abort): from the last
    epoch InitProducerId hands out (Short.MAX_VALUE - 1) the coordinator answers the bump
    with a new producer id at epoch 0, and the producer carries on under it. The epoch is
    reached through a transaction-log record loaded at open: no limit is patched."""
    data = tmp_path / "data"
    with Broker(data, clock=clock, **SMALL) as b:
        b.create_topic(T, partitions=3)
        first = b.producer(transactional_id="app")
        first.init_transactions()
        pid = first.producer_id
        first.close()
        append_txn_log(b, "app", TxnTransitMetadata(pid, -1, MAX_PRODUCER_EPOCH - 2, -1, 60_000,
                                                    TransactionState.EMPTY, frozenset(), -1, clock.now_ms()))
    with Broker(data, clock=clock, **SMALL) as b:
        txn = b.producer(transactional_id="app", delivery_timeout_ms=2_000)
        txn.init_transactions()
        assert (txn.producer_id, txn.producer_epoch) == (pid, MAX_PRODUCER_EPOCH - 1)
        txn.begin_transaction()
        txn.send(T, b"one", partition=0).get(timeout=5)
        b.produce(T, 0, data_batch([b"x", b"y"], pid, txn.producer_epoch, 1, transactional=True))
        with pytest.raises(OutOfOrderSequenceNumberError):
            txn.send(T, b"gap", partition=0).get(timeout=5)
        txn.abort_transaction()
        assert txn.producer_id != pid and txn.producer_epoch == 0
        txn.begin_transaction()
        txn.send(T, b"two", partition=0)
        txn.commit_transaction()
        assert values(b, 0) == [b"two"]
        assert {r.producer_id for r in records(b, 0, read_committed=False) if r.value == b"two"} == {
            txn.producer_id}



def test_keys_go_to_kafkas_murmur2_partitions(broker):
    p = broker.producer()
    keys = [b"21", b"foobar", b"a-little-bit-long-string", b"abc", b"k-%d" % 7, b""]
    for key in keys:
        md = p.send(T, b"v-" + key, key=key).get(timeout=5)
        assert md.partition == (murmur2(key) & 0x7FFFFFFF) % 3
        assert md.topic == T
    for key in keys:
        partition = (murmur2(key) & 0x7FFFFFFF) % 3
        assert (key, b"v-" + key) in [(r.key, r.value) for r in records(broker, partition)]
    # the same key always goes to the same partition
    assert {p.send(T, b"again", key=b"foobar").get(timeout=5).partition
            for _ in range(3)} == {(murmur2(b"foobar") & 0x7FFFFFFF) % 3}


def test_an_idempotent_producer_keeps_every_distinct_record(broker):
    first = broker.producer()
    second = broker.producer()
    offsets = [first.send(T, b"same", partition=0).get(timeout=5).offset for _ in range(3)]
    offsets += [second.send(T, b"same", partition=0).get(timeout=5).offset for _ in range(2)]
    assert offsets == [0, 1, 2, 3, 4]
    stored = records(broker, 0, read_committed=False)
    assert [r.value for r in stored] == [b"same"] * 5
    assert first.producer_id != second.producer_id
    assert {r.producer_id for r in stored} == {first.producer_id, second.producer_id}
    assert not any(r.is_transactional for r in stored)


def test_records_without_a_key_stick_to_a_partition_for_a_batch(broker):
    """Kafka's built-in partitioner: batch_size bytes to one partition, then the next."""
    p = broker.producer(batch_size=1_000, linger_ms=0)
    futures = [p.send(T, b"v" * 100) for _ in range(30)]
    partitions = [f.get(timeout=5).partition for f in futures]
    first = partitions[0]
    assert partitions == [(first + i // 10) % 3 for i in range(30)]


def test_flush_of_an_idle_producer_returns(txn, broker):
    assert broker.producer().flush() is None
    txn.begin_transaction()
    assert txn.flush() is None
    txn.commit_transaction()


# -- close ------------------------------------------------------------------------------

def test_close_aborts_an_open_transaction(txn, broker):
    txn.begin_transaction()
    txn.send(T, b"open", partition=0)
    txn.send(T, b"open", partition=2)
    txn.close()
    assert state_of(broker, "app") == "CompleteAbort"
    assert values(broker, 0) == [] and values(broker, 2) == [] and stable(broker)
    with pytest.raises(KafkaError):
        txn.send(T, b"closed", partition=0)


def test_close_aborts_a_transaction_that_hit_an_abortable_error(txn, broker):
    txn.begin_transaction()
    txn.send(T, b"open", partition=0).get(timeout=5)  # in the log, so the abort needs markers
    with pytest.raises(UnknownTopicOrPartitionError):
        txn.send(T, b"bad", partition=9)
    txn.close()
    assert state_of(broker, "app") == "CompleteAbort"
    assert values(broker, 0) == [] and stable(broker)


def test_close_after_commit_leaves_the_transaction_committed(txn, broker):
    txn.begin_transaction()
    txn.send(T, b"done", partition=0)
    txn.commit_transaction()
    txn.close()
    txn.close()  # twice is fine
    assert state_of(broker, "app") == "CompleteCommit" and values(broker, 0) == [b"done"]
