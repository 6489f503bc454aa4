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
:class:`~app.client.record_accumulator.FutureRecordMetadata` at once; ``get(timeout)``
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
"""

from __future__ import annotations

import enum
import functools
import logging
import queue
import random
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn, Sequence

from app.client.record_accumulator import (
    DeliveryCallback,
    FutureRecordMetadata,
    PartitionQueue,
    ProducerBatch,
    RecordAccumulator,
    TopicPartition,
)
from app.client.types import (
    ConsumerGroupMetadata,
    IllegalStateError,
    OffsetAndMetadata,
    TransactionAbortedError,
)
from coordinator.group_metadata import CommittedOffset
from storage.compression import Compression, compress
from storage.errors import (
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from app.engine import Engine

log = logging.getLogger(__name__)

#: backoff between coordinator retries (Kafka retries CONCURRENT_TRANSACTIONS this fast)
COORDINATOR_BACKOFF_S = 0.02
#: a sender thread with nothing to do for this long ends; the next send starts another
SENDER_IDLE_S = 1.0
#: Kafka's Short.MAX_VALUE: the last epoch of a producer id
MAX_PRODUCER_EPOCH = 32767
FATAL_ERRORS = (ProducerFencedError, InvalidProducerEpochError, InvalidTransactionTimeoutError,
                TransactionalIdAuthorizationFailedError)
#: the broker refused the batch for its sequence: it was not appended
SEQUENCE_ERRORS = (OutOfOrderSequenceNumberError, UnknownProducerIdError)
_STOP = object()


class TxnState(enum.Enum):
    """The producer's side of a transaction (Kafka's ``TransactionManager.State``)."""

    UNINITIALIZED = "Uninitialized"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING_TRANSACTION = "CommittingTransaction"
    ABORTING_TRANSACTION = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


#: states in which a transactional producer's batches may go out
_SENDING = (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the default partitioner's hash), as a signed int32."""
    length = len(data)
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


#: a batch to complete outside the lock: (batch, base offset, log append time, error)
_Outcome = tuple[ProducerBatch, int, int, "BaseException | None"]


class Producer:
    """An idempotent or transactional producer bound to an engine; thread-safe."""

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
        self.acks = -1 if enable_idempotence else acks
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.producer_id, self.producer_epoch = -1, -1
        self._state = TxnState.UNINITIALIZED
        self._error: BaseException | None = None
        self._closed = False
        self._acc = RecordAccumulator(batch_size, linger_ms / 1000, self.delivery_timeout_s,
                                      max_in_flight_requests_per_connection)
        # transactions: partitions added to the coordinator's transaction, partitions
        # waiting for the sender to add them, whether it is adding some now
        self._txn_partitions: set[TopicPartition] = set()
        self._partitions_to_add: set[TopicPartition] = set()
        self._adding = False
        self._txn_groups: set[str] = set()
        # KIP-360: an idempotent producer bumps its epoch once nothing is in flight; a
        # transactional one after its abort
        self._bump_required = False
        self._forcing = 0  # flushes in progress and sends waiting for buffer memory
        self._partition_counts: dict[str, int] = {}
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes sent to it]
        # one lock for the accumulator and every state field, never held while waiting
        # for the engine; _api_lock serialises the transactional calls, which do wait
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._api_lock = threading.RLock()
        self._wakeups: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        self._sender_wake_at = float("inf")

    @property
    def _transactional(self) -> bool:
        return self.transactional_id is not None

    # -- transactions ---------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Get a producer id and epoch for the transactional id, fencing any older
        instance and finishing its transaction (InitProducerId)."""
        with self._api_lock:
            if self.transactional_id is None:
                raise IllegalStateError("init_transactions needs a transactional_id")
            self._check_not_fatal()
            if self._state is not TxnState.UNINITIALIZED:  # Kafka: only from UNINITIALIZED
                raise IllegalStateError(f"init_transactions was already called (state {self._state.value})")
            self._init_producer_id()
            with self._lock:
                self._state = TxnState.READY

    def begin_transaction(self) -> None:
        with self._api_lock, self._lock:
            self._check_not_fatal()
            if self._state is not TxnState.READY:
                raise IllegalStateError(f"cannot begin a transaction in state {self._state.value}")
            self._state = TxnState.IN_TRANSACTION

    def commit_transaction(self) -> None:
        """Flush, then EndTxn(commit): returns once every record and offset of the
        transaction is committed and visible to read_committed consumers."""
        self._not_in_callback("commit_transaction")
        with self._api_lock:
            with self._lock:
                self._check_not_fatal()
                self._raise_if_abortable()
                self._require(TxnState.IN_TRANSACTION, "commit")
                self._state = TxnState.COMMITTING_TRANSACTION
            self._flush(None)
            with self._lock:
                self._check_not_fatal()
                self._raise_if_abortable()
            try:
                self._end(commit=True)
            except KafkaError:
                with self._lock:
                    if self._state is TxnState.COMMITTING_TRANSACTION:
                        self._state = TxnState.IN_TRANSACTION  # commit or abort may be tried again
                raise

    def abort_transaction(self) -> None:
        """Fail the records not sent yet, wait for those in flight, EndTxn(abort); then
        bump the epoch if a sequence was left unknown (KIP-360)."""
        self._not_in_callback("abort_transaction")
        with self._api_lock:
            with self._lock:
                self._check_not_fatal()
                if self._state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
                    raise IllegalStateError(f"no transaction to abort in state {self._state.value}")
                self._state = TxnState.ABORTING_TRANSACTION
                aborted = self._abort_undrained(self._error or TransactionAbortedError(
                    "the transaction was aborted before the record was sent"))
            self._complete(aborted)
            self._wait_until_quiet()
            try:
                self._end(commit=False)
            except KafkaError as e:
                with self._lock:
                    if self._state is TxnState.ABORTING_TRANSACTION:
                        self._state, self._error = TxnState.ABORTABLE_ERROR, e  # abort may be tried again
                raise
            if self._bump_required:
                self._init_producer_id(bump=True)

    def _end(self, commit: bool) -> None:
        if self._txn_partitions or self._txn_groups:
            try:
                self._coordinator(self.engine.end_txn, self.transactional_id,
                                  self.producer_id, self.producer_epoch, commit)
            except InvalidTxnStateError as e:  # the coordinator disagrees about our transaction: fatal
                with self._lock:
                    self._set_fatal(e)
                raise
        with self._lock:
            self._txn_partitions.clear()
            self._partitions_to_add.clear()
            self._txn_groups.clear()
            self._error = None
            self._state = TxnState.READY

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
                                    group_metadata: ConsumerGroupMetadata | str) -> None:
        """Commit consumer offsets as part of the transaction (AddOffsetsToTxn, then
        TxnOffsetCommit with the group's generation, so a zombie is fenced)."""
        with self._api_lock:
            with self._lock:
                self._check_not_fatal()
                self._require(TxnState.IN_TRANSACTION, "send offsets")
            meta = _group_metadata(group_metadata)
            try:
                if meta.group_id not in self._txn_groups:
                    self._coordinator(self.engine.add_offsets_to_txn, self.transactional_id,
                                      self.producer_id, self.producer_epoch, meta.group_id)
                    self._txn_groups.add(meta.group_id)
                committed = {tp: CommittedOffset(o.offset, o.metadata, o.leader_epoch,
                                                 self.engine.clock.now_ms())
                             for tp, o in ((tp, _offset(v)) for tp, v in offsets.items())}
                errors = self._coordinator(
                    self.engine.txn_offset_commit, self.transactional_id, meta.group_id,
                    self.producer_id, self.producer_epoch, committed, meta.generation_id, meta.member_id,
                    meta.group_instance_id)
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
        if self.producer_id < 0 and self.idempotent and not self._transactional:
            self._idempotent_producer_id()
        try:
            partition = self._partition(topic, key, value, partition)
        except KafkaError as e:
            with self._lock:
                self._check_can_send()  # an error of state comes first
            self._raise_failed(e)
        headers = tuple(headers) if headers else ()
        if timestamp is None:
            timestamp = self._now_ms()
        tp = (topic, partition)
        with self._lock:
            self._check_can_send()
            if self._acc.buffered >= self.buffer_memory:
                self._wait_for_buffer()
            now = time.monotonic()
            future, partition_queue, created = self._acc.append(tp, timestamp, key, value, headers,
                                                                on_delivery, now)
            failed = (self._drain(tp, partition_queue, now, self._forcing > 0)
                      if partition_queue.batches[0].closed or self._forcing or self._acc.linger_s == 0
                      else ())
            wake = created and self._sender_needed(partition_queue)
            if self._transactional and tp not in self._txn_partitions and tp not in self._partitions_to_add:
                self._partitions_to_add.add(tp)
                wake = True
        if wake:
            self._wakeups.put(None)
        if failed:
            self._complete(failed)
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
            self._forcing += 1
            failed = self._drain_all(time.monotonic())
        self._wakeups.put(None)
        self._complete(failed)
        try:
            for result in results:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not result.wait(left):
                    raise TimeoutError(f"flush did not finish within {timeout} s")
        finally:
            with self._lock:
                self._forcing -= 1
        self._check_not_fatal()

    def close(self, timeout: float | None = None) -> None:
        """Flush, abort a transaction left open, stop the sender. After ``timeout``
        seconds (at once from a delivery callback) the records still incomplete fail instead."""
        if threading.current_thread() is self._sender:
            timeout = 0
        with self._api_lock:
            if self._closed:
                return
            try:
                self._flush(timeout)
            except TimeoutError:
                with self._lock:
                    forced = [(batch, -1, -1, KafkaError("the producer was closed before the record was "
                                                        "acknowledged")) for batch in self._acc.abort_all()]
                    for batch, *_ in forced:
                        self._acc.done(batch)
                self._complete(forced)
            except KafkaError:
                pass  # a fatal error: nothing more can be sent anyway
            if self._state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
                try:
                    self.abort_transaction()
                except KafkaError:
                    pass  # the coordinator aborts it on timeout anyway
            with self._lock:
                self._closed = True
                self._state = TxnState.FATAL_ERROR
                self._error = self._error or KafkaError("the producer is closed")
                sender, self._sender = self._sender, None
            if sender is not None:
                self._wakeups.put(_STOP)
                if sender is not threading.current_thread():
                    sender.join()

    # -- the accumulator side of send (under the lock) -----------------------------------

    def _check_can_send(self) -> None:
        if self._state is TxnState.IN_TRANSACTION:
            return
        self._check_not_fatal()
        if self._transactional:
            self._raise_if_abortable()
            self._require(TxnState.IN_TRANSACTION, "send")

    def _wait_for_buffer(self) -> None:
        """Block while buffer.memory is used up (every waiting batch goes out meanwhile)."""
        deadline = time.monotonic() + self.max_block_s
        self._forcing += 1
        try:
            while self._acc.buffered >= self.buffer_memory:
                self._complete_later(self._drain_all(time.monotonic()))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimedOutError(
                        f"no room in buffer.memory={self.buffer_memory} within max.block.ms")
                self._changed.wait(left)
                self._check_can_send()
        finally:
            self._forcing -= 1

    def _complete_later(self, outcomes: list[_Outcome]) -> None:
        """Hand outcomes found under the lock to the sender thread to complete."""
        if outcomes:
            self._wakeups.put(outcomes)

    def _sender_needed(self, partition_queue: PartitionQueue) -> bool:
        """A batch was created: start the sender if it is not running; True if it must
        wake up earlier than it planned to (for the new batch's linger)."""
        if self._sender is None:
            self._sender = threading.Thread(target=self._run_sender, name="exactly-producer-sender",
                                            daemon=True)
            self._sender.start()
            return False  # it plans its first wake-up itself
        batch = partition_queue.open_batch()
        return batch is not None and batch.created + self._acc.linger_s < self._sender_wake_at

    def _partition(self, topic: str, key: bytes | None, value: bytes | None, partition: int | None) -> int:
        count = self._partition_counts.get(topic)
        if count is None or (partition is not None and partition >= count):
            count = self._partition_counts[topic] = self.engine.call(self.engine.partition_count, topic)
        if partition is not None:
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition} "
                                                   f"(it has {count})")
            return partition
        if key is not None:
            return (murmur2(key) & 0x7FFFFFFF) % count
        return self._sticky_partition(topic, count, len(value or b""))

    def _sticky_partition(self, topic: str, count: int, size: int) -> int:
        """Kafka's built-in partitioner for records without a key: stay on one partition
        until ``batch_size`` bytes went to it, then move to the next."""
        sticky = self._sticky.get(topic)
        if sticky is None:
            sticky = self._sticky[topic] = [random.randrange(count), 0]
        elif sticky[1] >= self.batch_size or sticky[0] >= count:
            sticky[0], sticky[1] = (sticky[0] + 1) % count, 0
        sticky[1] += size
        return sticky[0]

    def _drain_all(self, now: float) -> list[_Outcome]:
        failed: list[_Outcome] = []
        for tp, partition_queue in self._acc.queues.items():
            failed += self._drain(tp, partition_queue, now, self._forcing > 0)
        return failed

    def _drain(self, tp: TopicPartition, partition_queue: PartitionQueue, now: float,
               force: bool) -> list[_Outcome]:
        """Send the partition's ready batches, if it may send; submitted in sequence
        order under the lock, so the engine gets them in that order."""
        if not partition_queue.batches or not self._may_send(tp):
            return []
        failed: list[_Outcome] = []
        for batch in self._acc.drain(partition_queue, now, force):
            if self.idempotent:
                partition_queue.assign_sequence(batch, self.producer_id, self.producer_epoch)
            data = batch.encode(self._transactional, self.compression)
            try:
                future = self.engine.submit(self.engine.start_produce, batch.topic, batch.partition,
                                            data, self.acks)
            except (KafkaError, RuntimeError) as e:  # the engine (or its loop) is closed: nothing will go
                error = e if isinstance(e, KafkaError) else KafkaStorageError(f"the broker is closed: {e}")
                self._acc.landed(partition_queue, batch)
                self._acc.done(batch)
                self._set_fatal(error)
                failed.append((batch, -1, -1, error))
                continue
            future.add_done_callback(functools.partial(self._answered, batch))
        return failed

    def _may_send(self, tp: TopicPartition) -> bool:
        if self._transactional:
            return self._state in _SENDING and tp in self._txn_partitions
        if self._state is TxnState.FATAL_ERROR or self._bump_required:
            return False
        return self.producer_id >= 0 or not self.idempotent

    def _answered(self, batch: ProducerBatch, future: Future) -> None:
        """On the engine's loop: hand the answer to the sender thread, nothing more."""
        self._wakeups.put((batch, future))

    # -- the sender thread ------------------------------------------------------------------

    def _run_sender(self) -> None:
        """Complete answered batches, expire late ones, add partitions to the transaction,
        bump the epoch, and send what becomes ready: Kafka's Sender, one per producer."""
        while True:
            with self._lock:  # send what is ready, then sleep until the next batch will be
                now = time.monotonic()
                failed = self._drain_all(now)
                timer = self._acc.next_timer(now, self._forcing > 0)
                self._sender_wake_at = timer if timer is not None else float("inf")
            self._complete(failed)
            wait = SENDER_IDLE_S if timer is None else max(0.0, timer - now)
            items = []
            try:
                items.append(self._wakeups.get(timeout=wait))
                while True:
                    items.append(self._wakeups.get_nowait())
            except queue.Empty:
                pass
            if _STOP in items:
                return
            if not items and timer is None and self._stop_when_idle():
                return
            try:
                self._sender_round(items)
            except Exception:  # a bug must not stop every later delivery: batches still expire
                log.exception("a round of the producer's sender failed")

    def _stop_when_idle(self) -> bool:
        with self._lock:
            if self._acc.incomplete or not self._wakeups.empty():
                return False
            if self._sender is threading.current_thread():
                self._sender = None
            return True

    def _sender_round(self, items: list[Any]) -> None:
        """Everything but sending (the loop sends next, under the same lock as its timer)."""
        outcomes: list[_Outcome] = []
        with self._lock:
            now = time.monotonic()
            for item in items:
                if isinstance(item, tuple):  # (batch, engine future): the engine answered
                    outcomes += self._landed(*item, now)
                elif item is not None:  # outcomes found under the lock by a sending thread
                    outcomes += item
            outcomes += self._expire(now)
            if self._state in (TxnState.ABORTABLE_ERROR, TxnState.ABORTING_TRANSACTION, TxnState.FATAL_ERROR):
                outcomes += self._abort_undrained(self._error or TransactionAbortedError())
            self._changed.notify_all()
        self._complete(outcomes)
        self._add_partitions()
        self._bump_idempotent_epoch()

    def _landed(self, batch: ProducerBatch, future: Future, now: float) -> list[_Outcome]:
        """The engine answered a batch: done, sent again, or failed (under the lock)."""
        partition_queue = self._acc.queue(batch.tp)
        if not self._acc.landed(partition_queue, batch):
            return []  # it expired while in flight; its future failed then
        error = future.exception()
        if error is None:
            result = future.result()
            self._acc.done(batch)
            return [(batch, result.base_offset, result.log_append_time, None)]
        if self._send_again(partition_queue, batch, error, now):
            return []
        if isinstance(error, UnknownTopicOrPartitionError):
            self._partition_counts.pop(batch.topic, None)
        return [self._failed(partition_queue, batch, error)]

    def _send_again(self, partition_queue: PartitionQueue, batch: ProducerBatch, error: BaseException,
                    now: float) -> bool:
        """Put the batch back in its queue if it can still be delivered without a duplicate."""
        if self._state not in (_SENDING if self._transactional else (TxnState.UNINITIALIZED, TxnState.READY)):
            return False
        if isinstance(error, SEQUENCE_ERRORS):
            # refused, so not appended: either a batch before it is being sent again or
            # failed, or (idempotent only) the partition lost track of us (KIP-360: bump)
            if not (partition_queue.sequence_unknown or self._acc.has_earlier(partition_queue, batch)):
                if self._transactional:
                    return False
                self._bump_required = True
            self._acc.reenqueue(partition_queue, batch, now)
            return True
        if isinstance(error, KafkaError) and error.retriable and now < batch.deadline:
            batch.last_error = error
            self._acc.reenqueue(partition_queue, batch, now + self.retry_backoff_s)
            return True
        return False

    def _failed(self, partition_queue: PartitionQueue, batch: ProducerBatch,
                error: BaseException) -> _Outcome:
        """A batch that will not be delivered (under the lock): if it went out, where the
        partition's sequence stands is unknown (KIP-360)."""
        self._acc.done(batch)
        if self.idempotent and batch.producer_id >= 0:
            partition_queue.sequence_unknown = True
            self._bump_required = True
        if isinstance(error, KafkaError):
            error = self._fail(error)
        return batch, -1, -1, error

    def _expire(self, now: float) -> list[_Outcome]:
        return [self._failed(partition_queue, batch, self._expiry_error(batch, now))
                for partition_queue, batch, _ in self._acc.expire(now)]

    def _expiry_error(self, batch: ProducerBatch, now: float) -> KafkaError:
        """REQUEST_TIMED_OUT -- or, for a batch the broker kept refusing with a retriable
        error, that error (KAFKA_STORAGE_ERROR while the disk is full): it is why the
        batch is late, and what the caller can act on, as Kafka's Sender fails a batch
        whose delivery timeout ran out on a retriable answer with the broker's error."""
        message = (f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
                   f"{now - batch.created:.3f} s have passed since the batch was created "
                   f"(delivery_timeout_ms={self.delivery_timeout_s * 1000:.0f})")
        if batch.last_error is None:
            return RequestTimedOutError(message)
        return type(batch.last_error)(f"{message}; the broker last answered {batch.last_error.name}: "
                                      f"{batch.last_error}")

    def _abort_undrained(self, error: BaseException) -> list[_Outcome]:
        """Fail every batch not in flight (the transaction is failing or aborting)."""
        outcomes = []
        for partition_queue, batch in self._acc.abort_undrained():
            self._acc.done(batch)
            if batch.producer_id >= 0:  # it went out before and came back: sequence unknown
                partition_queue.sequence_unknown = True
                self._bump_required = True
            outcomes.append((batch, -1, -1, error))
        return outcomes

    def _add_partitions(self) -> None:
        """AddPartitionsToTxn for every partition a send of this transaction went to."""
        with self._lock:
            if self._adding or not self._partitions_to_add or self._state not in _SENDING:
                return
            partitions = sorted(self._partitions_to_add)
            self._adding = True
        error: KafkaError | None = None
        try:
            errors = self._coordinator(self.engine.add_partitions_to_txn,
                                       self.transactional_id, self.producer_id, self.producer_epoch,
                                       partitions)
            error = next((e for e in errors.values() if e is not None), None)
        except KafkaError as e:
            error = e
        with self._lock:
            self._adding = False
            if error is None:
                self._txn_partitions.update(partitions)
                self._partitions_to_add.difference_update(partitions)
            else:
                self._fail(error)
            self._changed.notify_all()

    def _bump_idempotent_epoch(self) -> None:
        """KIP-360 for an idempotent producer: once nothing is in flight, the next epoch
        (or a new producer id when the epoch is exhausted) and every sequence from 0."""
        with self._lock:
            if self._transactional or not self._bump_required or self._acc.in_flight:
                return
            if self.producer_epoch < MAX_PRODUCER_EPOCH:
                self._reset_producer(self.producer_id, self.producer_epoch + 1)
                return
        try:
            producer_id, epoch = self._coordinator(self.engine.init_producer_id, None, -1)
        except KafkaError as e:
            with self._lock:
                self._set_fatal(e)
            return
        with self._lock:
            self._reset_producer(producer_id, epoch)

    def _reset_producer(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        for partition_queue in self._acc.queues.values():
            partition_queue.reset_sequences()
        self._bump_required = False

    def _complete(self, outcomes: list[_Outcome]) -> None:
        """Settle futures and run callbacks, outside the lock."""
        for batch, base_offset, log_append_time, error in outcomes:
            batch.complete(base_offset, log_append_time, error)

    def _wait_until_quiet(self) -> None:
        """Wait until no batch is in flight and no partition is being added (each batch
        in flight is answered or expires by its delivery deadline)."""
        self._wakeups.put(None)
        with self._lock:
            while self._acc.in_flight or self._adding:
                self._changed.wait(self.delivery_timeout_s)

    # -- plumbing ---------------------------------------------------------------------------

    def _idempotent_producer_id(self) -> None:
        with self._api_lock:
            if self.producer_id < 0:
                self._init_producer_id()
                with self._lock:
                    if self._state is TxnState.UNINITIALIZED:
                        self._state = TxnState.READY

    def _init_producer_id(self, bump: bool = False) -> None:
        expected = (self.producer_id, self.producer_epoch) if bump else (-1, -1)
        timeout = self.transaction_timeout_ms if self._transactional else -1
        producer_id, epoch = self._coordinator(
            self.engine.init_producer_id, self.transactional_id, timeout, *expected)
        with self._lock:
            self._reset_producer(producer_id, epoch)

    def _coordinator(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a coordinator coroutine, retrying retriable errors until the delivery
        timeout; a fatal error makes the producer fatal (and is raised as ProducerFenced
        when it is a stale epoch)."""
        deadline = time.monotonic() + self.delivery_timeout_s
        while True:
            try:
                return self.engine.call(fn, *args, timeout=self.delivery_timeout_s)
            except KafkaError as e:
                if e.retriable and time.monotonic() + COORDINATOR_BACKOFF_S < deadline:
                    time.sleep(COORDINATOR_BACKOFF_S)  # Kafka's retry.backoff.ms, against a broker that said "retry"
                    continue
                if isinstance(e, FATAL_ERRORS):
                    with self._lock:
                        fenced = self._set_fatal(e)
                    raise fenced from e
                raise

    def _raise_failed(self, error: KafkaError) -> NoReturn:
        """Raise the error of a call after recording it (ProducerFenced for a stale epoch)."""
        with self._lock:
            raised = self._fail(error)
        if raised is not error:
            raise raised from error
        raise error

    def _fail(self, error: KafkaError) -> KafkaError:
        """Record an error of a send or of the transaction (under the lock); returns the
        error to report (ProducerFenced for a stale epoch)."""
        if isinstance(error, FATAL_ERRORS):
            return self._set_fatal(error)
        if self._transactional and self._state in _SENDING:
            self._state, self._error = TxnState.ABORTABLE_ERROR, error
            self._wakeups.put(None)  # the sender fails the records still waiting
        return error

    def _set_fatal(self, error: KafkaError) -> KafkaError:
        if self._state is not TxnState.FATAL_ERROR:
            self._state, self._error = TxnState.FATAL_ERROR, _as_fenced(error)
            self._wakeups.put(None)
        return self._error if isinstance(self._error, KafkaError) else error

    def _not_in_callback(self, call: str) -> None:
        if threading.current_thread() is self._sender:
            raise IllegalStateError(f"{call}() inside a delivery callback would deadlock: "
                                    "the sender thread would wait for itself")

    def _check_not_fatal(self) -> None:
        if self._state is TxnState.FATAL_ERROR:
            raise self._error if self._error is not None else IllegalStateError("the producer failed")

    def _raise_if_abortable(self) -> None:
        if self._state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"the transaction failed ({self._error}); abort it before going on") from self._error

    def _require(self, state: TxnState, action: str) -> None:
        if self._state is not state:
            raise IllegalStateError(f"cannot {action} in state {self._state.value}")


def _as_fenced(error: KafkaError) -> KafkaError:
    """The seed: a stale epoch means another instance is alive -- ProducerFenced."""
    if isinstance(error, InvalidProducerEpochError):
        fenced = ProducerFencedError(str(error))
        fenced.__cause__ = error
        return fenced
    return error


def _offset(value: int | OffsetAndMetadata) -> OffsetAndMetadata:
    return value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))


def _group_metadata(value: ConsumerGroupMetadata | str) -> ConsumerGroupMetadata:
    return ConsumerGroupMetadata(value) if isinstance(value, str) else value
