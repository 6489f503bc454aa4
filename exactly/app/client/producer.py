"""The embedded producer: Kafka's producer API, in-process, batching as Kafka's does.

::

    p = broker.producer(transactional_id="billing-1", transaction_timeout_ms=60000)
    p.init_transactions(); p.begin_transaction()
    future = p.send("out", b"value", key=b"k")       # returns at once
    p.send("out", b"v2", on_delivery=lambda err, md: print(err or md))
    p.send_offsets_to_transaction({("in", 0): 42}, consumer.group_metadata())
    p.commit_transaction()                            # flushes, then commits
    future.get(timeout=10)                            # RecordMetadata(topic, partition, offset, timestamp)

**Sending.** ``send`` appends the record to its partition's open batch and returns a
:class:`~exactly.app.client.record_accumulator.FutureRecordMetadata` at once; ``get(timeout)``
waits for the record's ``RecordMetadata`` or raises the Kafka error that failed it, and
``on_delivery(error, metadata)`` (confluent-kafka's signature) is called once the
outcome is known, on the producer's sender thread: keep it short and never block in
it (``flush``, ``commit_transaction`` and ``abort_transaction`` there raise
IllegalStateError; ``close`` there closes at once). A batch goes to the broker as one v2 batch when it holds ``batch_size`` bytes
(16384), when ``linger_ms`` (5) has passed since its first record, or at once on
``flush``; at most ``max_in_flight_requests_per_connection`` (5) batches per partition
are in flight, so the broker's duplicate window (5 batches) covers every retry.
``flush`` waits for every record sent before it; ``commit_transaction`` flushes first
and ``close`` flushes. ``buffer_memory`` (32 MiB) bounds what waits: ``send`` then
blocks up to ``max_block_ms``. Batches are appended with acks=all (the engine answers
once the batch is fsynced; group commit lets the batches in flight share fsyncs), and
optionally compressed (``compression_type``: none, gzip, snappy, lz4, zstd).

``send`` raises at once what it can know at once: an earlier fatal error, a call out
of order (IllegalStateError), an unknown topic or partition, no buffer space within
``max_block_ms`` (REQUEST_TIMED_OUT). Everything the broker answers arrives through
the future and the callback. Records are partitioned as Kafka's default partitioner
does: murmur2 of the key; without a key, one partition until ``batch_size`` bytes
went to it, then the next (the sticky partitioner, KIP-480/KIP-794).

**Ordering and duplicates.** An idempotent producer numbers each partition's records
with contiguous sequences, fixed per batch when it is first sent, in partition order;
a batch sent again keeps its sequence, and the broker answers a batch it already
holds with the original offsets. Retriable errors (``retriable`` on the error class)
are retried every ``retry_backoff_ms`` until ``delivery_timeout_ms`` (120000) after
the batch was created (then it fails with the retriable error the broker last
answered -- KAFKA_STORAGE_ERROR while the disk is full -- or REQUEST_TIMED_OUT); the batches behind a retried one come back with
OUT_OF_ORDER_SEQUENCE_NUMBER and are sent again behind it, in order. A batch that
fails for good, or whose delivery times out while it may be at the broker, leaves the
partition's sequence unknown; so does OUT_OF_ORDER_SEQUENCE_NUMBER or
UNKNOWN_PRODUCER_ID from the broker. Then, as Kafka's producer does (KIP-360):

* an idempotent producer waits until nothing is in flight and bumps its epoch (a new
  producer id once the epoch is exhausted); every sequence starts again at 0 and the
  batches still waiting, and those refused for their sequence, go out under the new
  epoch. A timed-out record's future has failed (REQUEST_TIMED_OUT) and it may or may
  not be in the log, but no later record can be taken for a duplicate of it;
* a transactional producer's transaction becomes abortable, and
  ``abort_transaction`` bumps the epoch through the coordinator (InitProducerId with
  the current producer id and epoch) after the ABORT.

Errors of a transactional producer, as the seed's Transactional Producer Error
Handling and today's clients:

* fatal -- PRODUCER_FENCED / INVALID_PRODUCER_EPOCH (another instance took over the
  transactional id, or a timed-out transaction was aborted with an epoch bump),
  INVALID_TRANSACTION_TIMEOUT, INVALID_TXN_STATE from the coordinator: the producer
  is unusable; the failing call or record and every later call raise the error;
* abortable -- any other error of a record or of sending offsets inside a transaction
  (including a consumer-group rebalance fencing the offsets, KIP-447, and a delivery
  timeout): the record's future fails with it, later sends raise
  TRANSACTION_ABORTABLE, the records still waiting fail with it, ``commit_transaction``
  raises TRANSACTION_ABORTABLE, and after ``abort_transaction`` the producer carries on;
* retriable -- CONCURRENT_TRANSACTIONS, COORDINATOR_NOT_AVAILABLE and friends are
  retried with backoff within ``delivery_timeout_ms``.

``abort_transaction`` fails the records not yet sent (TransactionAbortedError), waits
for those in flight, then ends the transaction.

**Layout** (Kafka's client split): :mod:`exactly.app.client.partitioner` picks partitions,
:mod:`exactly.app.client.record_accumulator` holds the batches, :mod:`exactly.app.client.transaction_manager`
holds the producer id, epoch and transaction state (its transition table),
:mod:`exactly.app.client.sender` sends, completes and retries on its thread; this module is the API.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Mapping, NoReturn, Sequence

from exactly.app.client.partitioner import BuiltInPartitioner
from exactly.app.client.record_accumulator import DeliveryCallback, FutureRecordMetadata, RecordAccumulator
from exactly.app.client.sender import Outcome, Sender, SenderConfig, complete
from exactly.app.client.transaction_manager import State, TransactionManager
from exactly.app.client.types import (
    ConsumerGroupMetadata,
    IllegalStateError,
    OffsetAndMetadata,
    TransactionAbortedError,
)
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage.compression import Compression, compress
from exactly.storage.errors import InvalidTxnStateError, KafkaError, RequestTimedOutError

if TYPE_CHECKING:
    from exactly.app.engine import Engine


class Producer:
    """An idempotent or transactional producer bound to an engine; thread-safe. The
    API calls only: the partitioner, the accumulator, the transaction manager and the
    sender do the work."""

    def __init__(self, engine: "Engine", *, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, enable_idempotence: bool = True,
                 acks: int = -1, delivery_timeout_ms: int = 120_000, batch_size: int = 16_384,
                 linger_ms: float = 5, max_in_flight_requests_per_connection: int = 5,
                 compression_type: str = "none", buffer_memory: int = 33_554_432,
                 max_block_ms: int = 60_000, retry_backoff_ms: int = 100) -> None:
        if transactional_id is not None and not enable_idempotence:
            raise ValueError("a transactional producer needs enable_idempotence=True")
        if enable_idempotence and not 1 <= max_in_flight_requests_per_connection <= 5:
            raise ValueError("an idempotent producer needs max_in_flight_requests_per_connection "
                             f"in [1, 5], got {max_in_flight_requests_per_connection}")
        if min(batch_size, linger_ms, max_block_ms, retry_backoff_ms) < 0 or min(
                delivery_timeout_ms, buffer_memory, max_in_flight_requests_per_connection) <= 0:
            raise ValueError("batch_size, linger_ms, max_block_ms and retry_backoff_ms must be >= 0; "
                             "delivery_timeout_ms, buffer_memory and max_in_flight_requests_per_connection > 0")
        try:
            self.compression = Compression[compression_type.upper()]
        except KeyError:
            raise ValueError(f"compression_type must be one of none, gzip, snappy, lz4, zstd; "
                             f"got {compression_type!r}") from None
        compress(self.compression, b"")  # UNSUPPORTED_COMPRESSION_TYPE now if its codec is missing
        self.engine = engine
        self._now_ms = engine.clock.now_ms
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.idempotent = enable_idempotence
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self._closed = False
        # one lock for the accumulator and the transaction manager, never held while
        # waiting for the engine; _api_lock serialises the transactional calls, which do wait
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._api_lock = threading.RLock()
        self._acc = RecordAccumulator(batch_size, linger_ms / 1000, self.delivery_timeout_s,
                                      max_in_flight_requests_per_connection)
        self._partitioner = BuiltInPartitioner(
            batch_size, lambda topic: engine.call(engine.topics.partition_count, topic))
        self._txn = TransactionManager(transactional_id, enable_idempotence, on_error=lambda: self._sender.wake())
        self._sender = Sender(engine, SenderConfig(-1 if enable_idempotence else acks, self.compression,
                                                   self.delivery_timeout_s, retry_backoff_ms / 1000),
                              self._acc, self._txn, self._partitioner, self._lock, self._changed)

    @property
    def producer_id(self) -> int:
        return self._txn.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._txn.producer_epoch

    # -- transactions ---------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Get a producer id and epoch for the transactional id, fencing any older
        instance and finishing its transaction (InitProducerId)."""
        with self._api_lock:
            if self.transactional_id is None:
                raise IllegalStateError("init_transactions needs a transactional_id")
            self._txn.check_not_fatal()
            if self._txn.state is not State.UNINITIALIZED:  # Kafka: only from UNINITIALIZED
                raise IllegalStateError(f"init_transactions was already called (state {self._txn.state.value})")
            self._init_producer_id()
            with self._lock:
                self._txn.transaction_version = self.engine.features.transaction_version
                self._txn.transition_to(State.READY)

    def begin_transaction(self) -> None:
        with self._api_lock, self._lock:
            self._txn.check_not_fatal()
            if self._txn.state is not State.READY:
                raise IllegalStateError(f"cannot begin a transaction in state {self._txn.state.value}")
            self._txn.transition_to(State.IN_TRANSACTION)

    def commit_transaction(self) -> None:
        """Flush, then EndTxn(commit): returns once every record and offset of the
        transaction is committed and visible to read_committed consumers."""
        self._not_in_callback("commit_transaction")
        with self._api_lock:
            with self._lock:
                self._txn.check_not_fatal()
                self._txn.raise_if_abortable()
                self._txn.require(State.IN_TRANSACTION, "commit")
                self._txn.transition_to(State.COMMITTING_TRANSACTION)
            self._flush(None)
            with self._lock:
                self._txn.check_not_fatal()
                self._txn.raise_if_abortable()
            try:
                self._end(commit=True)
            except KafkaError:
                with self._lock:
                    if self._txn.state is State.COMMITTING_TRANSACTION:
                        self._txn.transition_to(State.IN_TRANSACTION)  # commit or abort may be tried again
                raise

    def abort_transaction(self) -> None:
        """Fail the records not sent yet, wait for those in flight, EndTxn(abort); then
        bump the epoch if a sequence was left unknown (KIP-360)."""
        self._not_in_callback("abort_transaction")
        with self._api_lock:
            with self._lock:
                self._txn.check_not_fatal()
                if self._txn.state not in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
                    raise IllegalStateError(f"no transaction to abort in state {self._txn.state.value}")
                self._txn.transition_to(State.ABORTING_TRANSACTION)
                aborted = self._sender.abort_undrained(self._txn.error or TransactionAbortedError(
                    "the transaction was aborted before the record was sent"))
            complete(aborted)
            self._sender.wait_until_quiet()
            try:
                self._end(commit=False)
            except KafkaError as e:
                with self._lock:
                    if self._txn.state is State.ABORTING_TRANSACTION:
                        self._txn.transition_to(State.ABORTABLE_ERROR, e)  # abort may be tried again
                raise
            if self._txn.bump_required:
                self._init_producer_id(bump=True)

    def _end(self, commit: bool) -> None:
        """EndTxn, if the coordinator knows of the transaction; with transaction version
        2 its answer is the epoch (or producer id) the next transaction uses."""
        if self._txn.has_transaction_data:
            try:
                bumped = self._sender.call_coordinator(self.engine.transactions.end_txn, self.transactional_id,
                                                       self.producer_id, self.producer_epoch, commit,
                                                       self._txn.transaction_version)
            except InvalidTxnStateError as e:  # the coordinator disagrees about our transaction: fatal
                with self._lock:
                    self._txn.set_fatal(e)
                raise
            if self._txn.implicit_adds:
                with self._lock:
                    self._sender.reset_producer(*bumped)
        with self._lock:
            self._txn.transaction_ended()

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
                                    group_metadata: ConsumerGroupMetadata | str) -> None:
        """Commit consumer offsets as part of the transaction (AddOffsetsToTxn, then
        TxnOffsetCommit with the group's generation, so a zombie is fenced)."""
        with self._api_lock:
            with self._lock:
                self._txn.check_not_fatal()
                self._txn.require(State.IN_TRANSACTION, "send offsets")
            meta = _group_metadata(group_metadata)
            try:
                if meta.group_id not in self._txn.txn_groups and not self._txn.implicit_adds:
                    self._sender.call_coordinator(self.engine.transactions.add_offsets_to_txn,
                                                  self.transactional_id, self.producer_id, self.producer_epoch,
                                                  meta.group_id)
                self._txn.txn_groups.add(meta.group_id)  # (version 2: the TxnOffsetCommit adds it)
                committed = {tp: CommittedOffset(o.offset, o.metadata, o.leader_epoch,
                                                 self.engine.clock.now_ms())
                             for tp, o in ((tp, _offset(v)) for tp, v in offsets.items())}
                errors = self._sender.call_coordinator(
                    self.engine.transactions.txn_offset_commit, self.transactional_id, meta.group_id,
                    self.producer_id, self.producer_epoch, committed, meta.generation_id, meta.member_id,
                    meta.group_instance_id, None, self._txn.implicit_adds)
                first = next((e for e in errors.values() if e is not None), None)
                if first is not None:
                    raise first
            except KafkaError as e:
                self._raise_failed(e)

    # -- sending --------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             partition: int | None = None, headers: Sequence[tuple[str, bytes | None]] | None = None,
             timestamp: int | None = None, on_delivery: DeliveryCallback | None = None
             ) -> FutureRecordMetadata:
        """Append one record to its partition's batch; returns its future at once."""
        if not (isinstance(value, (bytes, bytearray)) or value is None) or not (
                isinstance(key, (bytes, bytearray)) or key is None):
            raise TypeError(f"key and value must be bytes or None, got {type(key).__name__} "
                            f"and {type(value).__name__} (serialize them first)")
        if timestamp is not None and timestamp < 0:
            raise ValueError(f"invalid timestamp {timestamp}: must be >= 0")
        if not self._txn.has_producer_id and self.idempotent and self.transactional_id is None:
            self._idempotent_producer_id()
        try:
            partition = self._partitioner.partition(topic, key, len(value or b""), partition)
        except KafkaError as e:
            with self._lock:
                self._txn.check_can_send()  # an error of state comes first
            self._raise_failed(e)
        headers = tuple(headers) if headers else ()
        if timestamp is None:
            timestamp = self._now_ms()
        tp = (topic, partition)
        with self._lock:
            self._txn.check_can_send()
            if self._acc.buffered >= self.buffer_memory:
                self._wait_for_buffer()
            now = time.monotonic()
            future, partition_queue, created = self._acc.append(tp, timestamp, key, value, headers,
                                                                on_delivery, now)
            failed = (self._sender.drain(tp, partition_queue, now)
                      if partition_queue.batches[0].closed or self._acc.flush_in_progress
                      or self._acc.linger_s == 0 else ())
            wake = created and self._sender.needed(partition_queue)
            wake = self._txn.maybe_add_partition(tp) or wake
        if wake:
            self._sender.wake()
        if failed:
            complete(failed)
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send every waiting batch now and wait until each record sent before this call
        is acknowledged or failed (their futures say which); raises a fatal error, and
        ``TimeoutError`` if ``timeout`` seconds pass first. Not from a delivery callback:
        the sender thread would wait for itself (IllegalStateError, as Kafka's)."""
        self._not_in_callback("flush")
        self._flush(timeout)

    def _flush(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            results = [batch.result for batch in self._acc.incomplete]
            self._acc.flushes_in_progress += 1
            failed = self._sender.drain_all(time.monotonic())
        self._sender.wake()
        complete(failed)
        try:
            for result in results:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not result.wait(left):
                    raise TimeoutError(f"flush did not finish within {timeout} s")
        finally:
            with self._lock:
                self._acc.flushes_in_progress -= 1
        self._txn.check_not_fatal()

    def close(self, timeout: float | None = None) -> None:
        """Flush, abort a transaction left open, stop the sender. After ``timeout``
        seconds (at once from a delivery callback) the records still incomplete fail instead."""
        if self._sender.in_sender_thread():
            timeout = 0
        with self._api_lock:
            if self._closed:
                return
            try:
                self._flush(timeout)
            except TimeoutError:
                with self._lock:
                    forced: list[Outcome] = [
                        (batch, -1, -1, KafkaError("the producer was closed before the record was acknowledged"))
                        for batch in self._acc.abort_all()]
                    for batch, *_ in forced:
                        self._acc.done(batch)
                complete(forced)
            except KafkaError:
                pass  # a fatal error: nothing more can be sent anyway
            if self._txn.state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
                try:
                    self.abort_transaction()
                except KafkaError:
                    pass  # the coordinator aborts it on timeout anyway
            with self._lock:
                self._closed = True
                self._txn.transition_to(State.FATAL_ERROR, self._txn.error or KafkaError("the producer is closed"))
            self._sender.stop()

    # -- plumbing ---------------------------------------------------------------------------

    def _wait_for_buffer(self) -> None:
        """Block while buffer.memory is used up (every waiting batch goes out meanwhile)."""
        deadline = time.monotonic() + self.max_block_s
        self._acc.flushes_in_progress += 1
        try:
            while self._acc.buffered >= self.buffer_memory:
                self._sender.complete_later(self._sender.drain_all(time.monotonic()))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimedOutError(
                        f"no room in buffer.memory={self.buffer_memory} within max.block.ms")
                self._changed.wait(left)
                self._txn.check_can_send()
        finally:
            self._acc.flushes_in_progress -= 1

    def _idempotent_producer_id(self) -> None:
        with self._api_lock:
            if not self._txn.has_producer_id:
                self._init_producer_id()
                with self._lock:
                    if self._txn.state is State.UNINITIALIZED:
                        self._txn.transition_to(State.READY)

    def _init_producer_id(self, bump: bool = False) -> None:
        expected = (self.producer_id, self.producer_epoch) if bump else (-1, -1)
        timeout = self.transaction_timeout_ms if self.transactional_id is not None else -1
        producer_id, epoch = self._sender.call_coordinator(
            self.engine.transactions.init_producer_id, self.transactional_id, timeout, *expected)
        with self._lock:
            self._sender.reset_producer(producer_id, epoch)

    def _raise_failed(self, error: KafkaError) -> NoReturn:
        """Raise the error of a call after recording it (ProducerFenced for a stale epoch)."""
        with self._lock:
            raised = self._txn.fail(error)
        if raised is not error:
            raise raised from error
        raise error

    def _not_in_callback(self, call: str) -> None:
        if self._sender.in_sender_thread():
            raise IllegalStateError(f"{call}() inside a delivery callback would deadlock: "
                                    "the sender thread would wait for itself")


def _offset(value: int | OffsetAndMetadata) -> OffsetAndMetadata:
    return value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))


def _group_metadata(value: ConsumerGroupMetadata | str) -> ConsumerGroupMetadata:
    return ConsumerGroupMetadata(value) if isinstance(value, str) else value
