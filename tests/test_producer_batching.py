"""Batching in the embedded producer, against its module docstring and Kafka's client.

Records accumulate per partition and go out as one v2 batch (batch_size / linger_ms);
at most max_in_flight_requests_per_connection batches per partition are in flight;
flush waits for everything sent before it; commit flushes; abort fails what was not
sent; a batch the broker refuses or asks to retry is sent again in order; and a
delivery that timed out while its batch may be at the broker bumps the epoch
(KIP-360), so no later record can be taken for a duplicate of it.

To make batches wait in flight and deliveries time out for real, the engine's loop
is held busy (``engine_held``: a callable that blocks the loop until released, as a
slow disk operation on the loop would): the producer's batches queue up in the
engine behind it, exactly as they would behind slow work.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from exactly.app import Broker
from exactly.app.client.producer import Producer
from exactly.app.client.types import IllegalStateError, TransactionAbortedError
from exactly.storage.clock import FakeClock
from exactly.storage.errors import (
    KafkaStorageError,
    MessageTooLargeError,
    RequestTimedOutError,
    TransactionAbortableError,
)
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import RecordBatch, decode_batch, iter_headers
from tests.conftest import SMALL_INTERNAL_TOPICS
from tests.waiting import eventually

T = "orders"
DEADLINE_S = 10


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    with Broker(tmp_path / "data", clock=clock, **SMALL_INTERNAL_TOPICS) as b:
        b.create_topic(T, partitions=3)
        yield b


def stored_batches(broker: Broker, partition: int, topic: str = T) -> list[RecordBatch]:
    """Every data batch of the partition as stored, in log order."""
    raw = broker.fetch(topic, partition, 0, max_bytes=1 << 30).records
    batches = [decode_batch(raw[pos:pos + header.size]) for pos, header in iter_headers(raw)]
    return [batch for batch in batches if not batch.header.is_control]


def stored_values(broker: Broker, partition: int, topic: str = T) -> list[bytes | None]:
    return [record.value for batch in stored_batches(broker, partition, topic) for record in batch.records]


def committed_values(broker: Broker, partition: int, topic: str = T) -> list[bytes | None]:
    r = broker.fetch(topic, partition, 0, max_bytes=1 << 30, isolation_level="read_committed")
    return [record.value for record in read_records(r.records, 0, True, r.aborted_transactions or ()).records]


def stable(broker: Broker, partitions: int = 3, topic: str = T) -> bool:
    return all(broker.list_offsets(topic, p, -1, "read_committed") == broker.list_offsets(topic, p, -1)
               for p in range(partitions))


def assert_contiguous_sequences(batches: list[RecordBatch]) -> None:
    """Within each producer id and epoch, every batch starts where the last one ended,
    from 0 (a new epoch starts again at 0)."""
    next_sequence: dict[tuple[int, int], int] = {}
    for batch in batches:
        key = (batch.header.producer_id, batch.header.producer_epoch)
        assert batch.header.base_sequence == next_sequence.get(key, 0), (key, batch.header)
        next_sequence[key] = batch.header.base_sequence + batch.header.record_count


@contextmanager
def engine_held(broker: Broker) -> Iterator[None]:
    """Keep the engine's loop busy until the block ends (30 s at most: never hang)."""
    release, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait(30)

    broker.engine.submit(hold)
    assert holding.wait(DEADLINE_S), "the engine's loop never got to the hold"
    try:
        yield
    finally:
        release.set()


def in_flight(producer: Producer, tp: tuple[str, int]) -> int:
    """Batches of the partition sent and not yet answered (the producer's own count)."""
    return len(producer._acc.queues[tp].in_flight)


def queued(producer: Producer, tp: tuple[str, int]) -> int:
    return len(producer._acc.queues[tp].batches)


# -- batching ------------------------------------------------------------------------------------

def test_sends_share_batches_in_order_under_one_producer_id_with_contiguous_sequences(broker):
    p = broker.producer(linger_ms=60_000)  # batches fill to batch_size before they go
    values = [b"record-%04d" % i + b"x" * 100 for i in range(1000)]
    futures = [p.send(T, value, partition=0) for value in values]
    p.flush()
    assert [f.get(timeout=0).offset for f in futures] == list(range(1000))
    batches = stored_batches(broker, 0)
    assert len(batches) <= 1000 * 125 // 16_384 + 1  # ~16 KiB each: 9 batches, not 1000
    assert [r.value for b in batches for r in b.records] == values
    assert {(b.header.producer_id, b.header.producer_epoch) for b in batches} == {
        (p.producer_id, p.producer_epoch)}
    assert all(b.size <= 16_384 for b in (b.header for b in batches))
    assert_contiguous_sequences(batches)


def test_every_record_gets_its_callback_once_with_what_its_future_says(broker):
    delivered: list[tuple[BaseException | None, object, str]] = []
    p = broker.producer(batch_size=500)

    def on_delivery(error, metadata):
        delivered.append((error, metadata, threading.current_thread().name))

    futures = [p.send(T, b"v%d" % i, partition=i % 3, on_delivery=on_delivery) for i in range(60)]
    p.flush()
    assert len(delivered) == 60 and all(error is None for error, _, _ in delivered)
    assert sorted(md for _, md, _ in delivered) == sorted(f.get(timeout=0) for f in futures)
    for partition in range(3):  # per partition, callbacks come in offset order
        offsets = [md.offset for _, md, _ in delivered if md.partition == partition]
        assert offsets == list(range(20))
    assert {thread for _, _, thread in delivered} == {"exactly-producer-sender"}


def test_flush_and_close_inside_a_delivery_callback_do_not_deadlock(broker):
    p = broker.producer()
    raised: list[BaseException] = []

    def flush_inside(error, metadata):
        try:
            p.flush()
        except BaseException as e:  # what flush did in the callback is the answer
            raised.append(e)
        p.send(T, b"from the callback", partition=0)
        p.close()  # from the sender thread: closes at once, failing what is left

    p.send(T, b"first", partition=0, on_delivery=flush_inside).get(timeout=DEADLINE_S)
    eventually(lambda: p._closed, DEADLINE_S, "the callback closed the producer")
    assert [type(e) for e in raised] == [IllegalStateError]
    assert stored_values(broker, 0)[0] == b"first"


def test_a_batch_goes_after_linger_ms_without_a_flush(broker):
    p = broker.producer(linger_ms=20)
    md = p.send(T, b"alone", partition=1).get(timeout=DEADLINE_S)
    assert (md.partition, md.offset) == (1, 0)
    assert stored_values(broker, 1) == [b"alone"]


def test_flush_waits_for_every_record_sent_before_it(broker):
    p = broker.producer(linger_ms=60_000)
    futures = [p.send(T, b"v%d" % i, partition=i % 3) for i in range(90)]
    assert not any(f.done() for f in futures)  # lingering: nothing went yet
    p.flush()
    assert all(f.done() for f in futures)
    assert [stored_values(broker, partition) for partition in range(3)] == [
        [b"v%d" % i for i in range(partition, 90, 3)] for partition in range(3)]


@pytest.mark.parametrize("limit", [5, 1])
def test_at_most_max_in_flight_batches_per_partition(broker, limit):
    p = broker.producer(batch_size=150, linger_ms=60_000, max_in_flight_requests_per_connection=limit)
    p.send(T, b"first", partition=0)
    p.flush()  # the producer id, before the hold
    with engine_held(broker):
        futures = [p.send(T, b"v" * 100, partition=0) for _ in range(12)]  # one record per batch
        # each send closes the batch before it and sends what it may: the rest wait
        assert in_flight(p, (T, 0)) == limit
        assert queued(p, (T, 0)) == 12 - limit
    p.flush()
    assert [f.get(timeout=0).offset for f in futures] == list(range(1, 13))
    batches = stored_batches(broker, 0)
    assert [b.header.record_count for b in batches] == [1] * 13
    assert_contiguous_sequences(batches)


def test_max_in_flight_above_five_is_refused_under_idempotence(broker):
    with pytest.raises(ValueError):
        broker.producer(max_in_flight_requests_per_connection=6)
    assert broker.producer(enable_idempotence=False, acks=1, max_in_flight_requests_per_connection=6)


def test_records_are_compressed_when_asked(broker):
    p = broker.producer(compression_type="gzip", linger_ms=60_000)  # one batch, however slow the sends
    futures = [p.send(T, b"a" * 1000, partition=0) for _ in range(10)]
    p.flush()
    assert [f.get(timeout=0).offset for f in futures] == list(range(10))
    (batch,) = stored_batches(broker, 0)
    assert batch.header.compression.name == "GZIP" and batch.header.size < 1000
    assert [r.value for r in batch.records] == [b"a" * 1000] * 10
    with pytest.raises(ValueError):
        broker.producer(compression_type="brotli")


def test_records_waiting_when_the_broker_closes_fail_instead_of_hanging(tmp_path):
    broker = Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS)
    broker.create_topic(T, partitions=1)
    p = broker.producer(linger_ms=60_000)
    p.send(T, b"sent", partition=0)
    p.flush()
    waiting = p.send(T, b"waiting", partition=0)
    broker.close()
    p.close()  # quiet: there is nothing left to deliver to
    with pytest.raises(KafkaStorageError):
        waiting.get(timeout=DEADLINE_S)
    with pytest.raises(KafkaStorageError):
        p.send(T, b"after", partition=0)


# -- transactions ------------------------------------------------------------------------------

@pytest.fixture
def txn(broker: Broker) -> Producer:
    p = broker.producer(transactional_id="app", linger_ms=60_000)  # records wait for flush or commit
    p.init_transactions()
    return p


def test_commit_flushes_first(broker, txn):
    txn.begin_transaction()
    futures = [txn.send(T, b"v%d" % i, partition=i % 2) for i in range(6)]
    assert not any(f.done() for f in futures)
    txn.commit_transaction()
    assert all(f.get(timeout=0) for f in futures)
    assert committed_values(broker, 0) == [b"v0", b"v2", b"v4"]
    assert committed_values(broker, 1) == [b"v1", b"v3", b"v5"]
    assert stable(broker)


def test_abort_fails_the_records_not_sent_and_appends_nothing_of_them(broker, txn):
    txn.begin_transaction()
    sent = txn.send(T, b"sent", partition=0)
    txn.flush()
    waiting = [txn.send(T, b"w%d" % i, partition=1) for i in range(3)]
    txn.abort_transaction()
    assert sent.get(timeout=0).offset == 0
    for future in waiting:
        with pytest.raises(TransactionAbortedError):
            future.get(timeout=0)
    assert stored_values(broker, 1) == [] and committed_values(broker, 0) == [] and stable(broker)
    txn.begin_transaction()
    txn.send(T, b"next", partition=1)
    txn.commit_transaction()
    assert committed_values(broker, 1) == [b"next"]


def test_a_record_that_failed_makes_commit_abortable(broker, txn):
    broker.create_topic("small", 1, {"max.message.bytes": 500})
    txn.begin_transaction()
    txn.send(T, b"fine", partition=0)
    too_large = txn.send("small", b"x" * 1_000, partition=0)
    with pytest.raises(TransactionAbortableError):
        txn.commit_transaction()  # the flush found the refused record
    with pytest.raises(MessageTooLargeError):
        too_large.get(timeout=0)
    txn.abort_transaction()
    assert committed_values(broker, 0) == [] and stable(broker)


# -- retries and failures keep the order ----------------------------------------------------------

def test_a_refused_batch_in_flight_leaves_the_batches_behind_it_in_order(broker):
    """The batch in the middle is refused (MESSAGE_TOO_LARGE, for good); the batches
    sent behind it come back OUT_OF_ORDER_SEQUENCE_NUMBER and go again, in order, under
    a bumped epoch."""
    broker.create_topic("small", 1, {"max.message.bytes": 1_000})
    p = broker.producer(batch_size=300, linger_ms=60_000)
    p.send("small", b"first", partition=0)
    p.flush()
    epoch = p.producer_epoch
    small = [b"s%d" % i + b"." * 100 for i in range(6)]
    with engine_held(broker):
        futures = [p.send("small", value, partition=0) for value in small[:3]]
        too_large = p.send("small", b"x" * 2_000, partition=0)
        futures += [p.send("small", value, partition=0) for value in small[3:]]
        assert in_flight(p, ("small", 0)) == 4  # the refused one, with a batch on each side
    p.flush()
    with pytest.raises(MessageTooLargeError) as raised:
        too_large.get(timeout=0)
    assert raised.value.code == 10
    assert [f.get(timeout=0).offset for f in futures] == list(range(1, 7))
    assert stored_values(broker, 0, "small") == [b"first"] + small
    assert p.producer_epoch == epoch + 1
    batches = stored_batches(broker, 0, "small")
    assert_contiguous_sequences(batches)
    assert {b.header.producer_epoch for b in batches} == {epoch, epoch + 1}


def test_retriable_errors_are_retried_and_the_records_stay_in_order(broker):
    """The topic is deleted under batches in flight and created again: they come back
    UNKNOWN_TOPIC_OR_PARTITION (retriable), are retried, then UNKNOWN_PRODUCER_ID from the
    new partition (KIP-360: a new epoch, sequences from 0), and land in send order."""
    broker.create_topic("gone", 1)
    p = broker.producer(batch_size=150, linger_ms=60_000, retry_backoff_ms=10)
    p.send("gone", b"before", partition=0)
    p.flush()
    epoch = p.producer_epoch
    values = [b"v%d" % i + b"." * 100 for i in range(8)]
    broker.delete_topic("gone")  # the producer still knows it has one partition
    with engine_held(broker):
        futures = [p.send("gone", value, partition=0) for value in values]
        assert in_flight(p, ("gone", 0)) == 5
    broker.create_topic("gone", 1)  # the engine takes it after the batches in flight
    p.flush()
    assert [f.get(timeout=0).offset for f in futures] == list(range(8))
    assert stored_values(broker, 0, "gone") == values
    batches = stored_batches(broker, 0, "gone")
    assert {(b.header.producer_id, b.header.producer_epoch) for b in batches} == {(p.producer_id, epoch + 1)}
    assert_contiguous_sequences(batches)


# -- a delivery that timed out (KIP-360) ----------------------------------------------------------

def test_an_idempotent_delivery_timeout_bumps_the_epoch_so_no_later_record_is_a_duplicate(broker):
    """The timed-out batch still lands after its future failed; the next record, the
    same bytes at the same place in the stream, must be appended, not answered with
    the timed-out batch's offset."""
    p = broker.producer(delivery_timeout_ms=300, linger_ms=0)
    assert p.send(T, b"same", partition=0).get(timeout=DEADLINE_S).offset == 0
    pid, epoch = p.producer_id, p.producer_epoch
    with engine_held(broker):
        late = p.send(T, b"same", partition=0)
        with pytest.raises(RequestTimedOutError) as raised:
            late.get(timeout=DEADLINE_S)
        assert raised.value.code == 7
        after = p.send(T, b"same", partition=0)
    assert after.get(timeout=DEADLINE_S).offset == 2
    assert stored_values(broker, 0) == [b"same"] * 3  # the late one is in too: its outcome was unknown
    assert (p.producer_id, p.producer_epoch) == (pid, epoch + 1)
    batches = stored_batches(broker, 0)
    assert [(b.header.producer_epoch, b.header.base_sequence) for b in batches] == [
        (epoch, 0), (epoch, 1), (epoch + 1, 0)]


def test_a_transactional_delivery_timeout_makes_the_transaction_abortable_and_the_abort_bumps(broker):
    p = broker.producer(transactional_id="slow-disk", delivery_timeout_ms=1_000, linger_ms=0)
    p.init_transactions()
    p.begin_transaction()
    p.send(T, b"first", partition=0).get(timeout=DEADLINE_S)
    pid, epoch = p.producer_id, p.producer_epoch
    with engine_held(broker):
        late = p.send(T, b"late", partition=0)
        with pytest.raises(RequestTimedOutError):
            late.get(timeout=DEADLINE_S)
        with pytest.raises(TransactionAbortableError):
            p.send(T, b"refused", partition=0)
    with pytest.raises(TransactionAbortableError):
        p.commit_transaction()
    p.abort_transaction()
    assert (p.producer_id, p.producer_epoch) == (pid, epoch + 1)
    p.begin_transaction()
    assert p.send(T, b"next", partition=0).get(timeout=DEADLINE_S).offset == 3  # after the ABORT marker
    p.commit_transaction()
    assert committed_values(broker, 0) == [b"next"]
    assert stored_values(broker, 0) == [b"first", b"late", b"next"] and stable(broker)


# -- a state machine: random sends, flushes, commits and aborts ------------------------------------

class TransactionalProducerMachine(RuleBasedStateMachine):
    """Any sequence of sends, flushes, commits and aborts: read_committed shows exactly
    the committed records in send order, every future agrees with the log, a
    committed record's future and callback succeeded, no record is stored twice, and
    every batch has the producer's id and a contiguous sequence."""

    PARTITIONS = 2

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="producer-machine-")
        self.broker = Broker(Path(self.directory) / "data", clock=FakeClock(), **SMALL_INTERNAL_TOPICS)
        self.broker.create_topic(T, partitions=self.PARTITIONS)
        self.open: list[tuple[int, bytes, object]] = []  # (partition, value, future) of this transaction
        self.committed: dict[int, list[bytes]] = {p: [] for p in range(self.PARTITIONS)}
        self.callbacks: dict[bytes, object] = {}
        self.count = 0

    @initialize(linger_ms=st.sampled_from([0, 5, 60_000]), batch_size=st.sampled_from([0, 200, 16_384]))
    def start(self, linger_ms: int, batch_size: int) -> None:
        self.producer = self.broker.producer(transactional_id="machine", linger_ms=linger_ms,
                                             batch_size=batch_size)
        self.producer.init_transactions()
        self.producer.begin_transaction()

    @rule(partition=st.integers(0, PARTITIONS - 1), padding=st.integers(0, 150))
    def send(self, partition: int, padding: int) -> None:
        value = b"%05d" % self.count + b"." * padding
        self.count += 1
        future = self.producer.send(T, value, partition=partition,
                                    on_delivery=lambda error, md, value=value: self.callbacks.__setitem__(
                                        value, error or md))
        self.open.append((partition, value, future))

    @rule()
    def flush(self) -> None:
        self.producer.flush()
        assert all(future.done() for _, _, future in self.open)

    @rule()
    def commit(self) -> None:
        self.producer.commit_transaction()
        for partition, value, future in self.open:
            md = future.get(timeout=0)
            assert (md.partition, self.callbacks[value]) == (partition, md)
            self.committed[partition].append(value)
        self._next_transaction()

    @rule()
    def abort(self) -> None:
        self.producer.abort_transaction()
        for _, value, future in self.open:
            error = future.exception(timeout=0)
            assert error is None or isinstance(error, TransactionAbortedError), error
        self._next_transaction()

    def _next_transaction(self) -> None:
        self.open = []
        for partition in range(self.PARTITIONS):
            assert committed_values(self.broker, partition) == self.committed[partition]
        assert stable(self.broker, self.PARTITIONS)
        self.producer.begin_transaction()

    @invariant()
    def the_log_agrees(self) -> None:
        delivered = [(partition, value, future.get(timeout=0)) for partition, value, future in self.open
                     if future.done() and future.exception(timeout=0) is None]  # before reading the log
        for partition in range(self.PARTITIONS):
            batches = stored_batches(self.broker, partition)
            by_offset = {r.offset: r.value for b in batches for r in b.records}
            assert len(by_offset) == len(set(by_offset.values())), "a record is stored twice"
            assert {b.header.producer_id for b in batches} <= {self.producer.producer_id}
            assert_contiguous_sequences(batches)
            for partition_, value, md in delivered:
                if partition_ == partition:
                    assert by_offset[md.offset] == value

    def teardown(self) -> None:
        try:
            if hasattr(self, "producer"):
                self.producer.close()
        finally:
            self.broker.close()
            shutil.rmtree(self.directory, ignore_errors=True)


TransactionalProducerMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=15, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_transactional_producer_machine = TransactionalProducerMachine.TestCase
