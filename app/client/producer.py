"""The embedded producer: Kafka's producer API, in-process, with the seed's error rules.

::

    p = broker.producer(transactional_id="billing-1", transaction_timeout_ms=60000)
    p.init_transactions(); p.begin_transaction()
    md = p.send("out", b"value", key=b"k")          # RecordMetadata(topic, partition, offset)
    p.send_offsets_to_transaction({("in", 0): 42}, consumer.group_metadata())
    p.commit_transaction()                          # or p.abort_transaction()

``send`` is synchronous: it returns once the record is durable (acks=all), so there
is nothing left in flight and ``flush`` has nothing to wait for. Records are
partitioned as Kafka's default partitioner does (murmur2 of the key; round robin
without a key).

Errors, as the seed's Transactional Producer Error Handling and today's clients:

* fatal -- PRODUCER_FENCED / INVALID_PRODUCER_EPOCH (another instance took over the
  transactional id, or a timed-out transaction was aborted with an epoch bump),
  INVALID_TRANSACTION_TIMEOUT, INVALID_TXN_STATE from the coordinator: the producer
  is unusable; this call and every later one raise the error;
* abortable -- any other error of a send or of sending offsets inside a transaction
  (including a consumer-group rebalance fencing the offsets, KIP-447): the call
  raises it, ``commit_transaction`` then raises TRANSACTION_ABORTABLE, and after
  ``abort_transaction`` the producer carries on;
* retriable -- CONCURRENT_TRANSACTIONS, COORDINATOR_NOT_AVAILABLE and friends are
  retried with backoff within ``delivery_timeout_ms``.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from app.client.types import ConsumerGroupMetadata, IllegalStateError, OffsetAndMetadata, RecordMetadata
from coordinator.group_metadata import CommittedOffset
from storage.errors import (
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
    UnknownProducerIdError,
)
from storage.producer_state import next_sequence
from storage.record_batch import SimpleRecord, encode_batch

if TYPE_CHECKING:
    from app.engine import Engine

RETRY_BACKOFF_S = 0.02
FATAL_ERRORS = (ProducerFencedError, InvalidProducerEpochError, InvalidTransactionTimeoutError,
                TransactionalIdAuthorizationFailedError)


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


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


class Producer:
    """An idempotent or transactional producer bound to an engine."""

    def __init__(self, engine: "Engine", *, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, enable_idempotence: bool = True,
                 acks: int = -1, delivery_timeout_ms: int = 120_000) -> None:
        if transactional_id is not None and not enable_idempotence:
            raise ValueError("a transactional producer needs enable_idempotence=True")
        self.engine = engine
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.idempotent = enable_idempotence
        self.acks = -1 if enable_idempotence else acks
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.producer_id, self.producer_epoch = -1, -1
        self._state = TxnState.UNINITIALIZED
        self._error: KafkaError | None = None
        self._sequences: dict[tuple[str, int], int] = {}
        self._txn_partitions: set[tuple[str, int]] = set()
        self._txn_groups: set[str] = set()
        self._needs_epoch_bump = False
        self._round_robin: dict[str, itertools.count] = {}
        self._lock = threading.RLock()

    # -- transactions ---------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Get a producer id and epoch for the transactional id, fencing any older
        instance and finishing its transaction (InitProducerId)."""
        with self._lock:
            if self.transactional_id is None:
                raise IllegalStateError("init_transactions needs a transactional_id")
            self._check_not_fatal()
            if self._state is not TxnState.UNINITIALIZED:  # Kafka: only from UNINITIALIZED
                raise IllegalStateError(f"init_transactions was already called (state {self._state.value})")
            self._init_producer_id()
            self._state = TxnState.READY

    def begin_transaction(self) -> None:
        with self._lock:
            self._check_not_fatal()
            if self._state is not TxnState.READY:
                raise IllegalStateError(f"cannot begin a transaction in state {self._state.value}")
            self._state = TxnState.IN_TRANSACTION

    def commit_transaction(self) -> None:
        """EndTxn(commit): returns once every record and offset of the transaction is
        committed and visible to read_committed consumers."""
        with self._lock:
            self._check_not_fatal()
            if self._state is TxnState.ABORTABLE_ERROR:
                raise TransactionAbortableError(
                    f"the transaction failed ({self._error}); abort it before going on")
            self._require(TxnState.IN_TRANSACTION, "commit")
            self._end(commit=True)

    def abort_transaction(self) -> None:
        with self._lock:
            self._check_not_fatal()
            if self._state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
                raise IllegalStateError(f"no transaction to abort in state {self._state.value}")
            self._end(commit=False)
            if self._needs_epoch_bump:  # KIP-360: a new epoch restarts every sequence
                self._init_producer_id(bump=True)

    def _end(self, commit: bool) -> None:
        if self._txn_partitions or self._txn_groups:
            try:
                self._coordinator(self.engine.transaction_coordinator.end_txn, self.transactional_id,
                                  self.producer_id, self.producer_epoch, commit)
            except InvalidTxnStateError as e:  # the coordinator disagrees about our transaction: fatal
                self._state, self._error = TxnState.FATAL_ERROR, e
                raise
        self._txn_partitions.clear()
        self._txn_groups.clear()
        self._error = None
        self._state = TxnState.READY

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
                                    group_metadata: ConsumerGroupMetadata | str) -> None:
        """Commit consumer offsets as part of the transaction (AddOffsetsToTxn, then
        TxnOffsetCommit with the group's generation, so a zombie is fenced)."""
        with self._lock:
            self._check_not_fatal()
            self._require(TxnState.IN_TRANSACTION, "send offsets")
            meta = _group_metadata(group_metadata)
            try:
                if meta.group_id not in self._txn_groups:
                    self._coordinator(self.engine.transaction_coordinator.add_offsets, self.transactional_id,
                                      self.producer_id, self.producer_epoch, meta.group_id)
                    self._txn_groups.add(meta.group_id)
                committed = {tp: CommittedOffset(o.offset, o.metadata, o.leader_epoch,
                                                 self.engine.clock.now_ms())
                             for tp, o in ((tp, _offset(v)) for tp, v in offsets.items())}
                errors = self._coordinator(
                    self.engine.group_coordinator.txn_commit_offsets, self.transactional_id, meta.group_id,
                    self.producer_id, self.producer_epoch, committed, meta.generation_id, meta.member_id,
                    meta.group_instance_id)
                first = next((e for e in errors.values() if e is not None), None)
                if first is not None:
                    raise first
            except KafkaError as e:
                self._fail(e)
                raise

    # -- sending --------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             partition: int | None = None, headers: Sequence[tuple[str, bytes | None]] | None = None,
             timestamp: int | None = None) -> RecordMetadata:
        """Append one record; returns where it went once it is durable."""
        with self._lock:
            self._check_not_fatal()
            if self.transactional_id is not None:
                self._require(TxnState.IN_TRANSACTION, "send")
            elif self.idempotent and self.producer_id < 0:
                self._init_producer_id()
            record = SimpleRecord(value, key=key, headers=tuple(headers or ()),
                                  timestamp=self.engine.clock.now_ms() if timestamp is None else timestamp)
            try:
                # inside the try: an unknown topic fails the transaction like any send error
                partition = self._partition(topic, key) if partition is None else partition
                tp = (topic, partition)
                if self.transactional_id is not None and tp not in self._txn_partitions:
                    self._add_partition(tp)
                result = self._produce(tp, record)
            except KafkaError as e:
                if self.transactional_id is not None:
                    self._fail(e)
                elif isinstance(e, FATAL_ERRORS):
                    self._state, self._error = TxnState.FATAL_ERROR, e
                if self._error is not None and self._error is not e and self._error.__cause__ is e:
                    raise self._error from e  # a stale epoch from the partition: ProducerFenced
                raise
            return RecordMetadata(topic, partition, result.base_offset, record.timestamp)

    def _add_partition(self, tp: tuple[str, int]) -> None:
        errors = self._coordinator(self.engine.transaction_coordinator.add_partitions, self.transactional_id,
                                   self.producer_id, self.producer_epoch, [tp])
        if errors[tp] is not None:
            raise errors[tp]
        self._txn_partitions.add(tp)

    def _produce(self, tp: tuple[str, int], record: SimpleRecord):
        for attempt in (0, 1):
            sequence = self._sequences.get(tp, 0) if self.idempotent else -1
            batch = encode_batch([record], producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                 base_sequence=sequence, transactional=self.transactional_id is not None)
            try:
                result = self.engine.submit(self.engine.start_produce, tp[0], tp[1], batch,
                                            self.acks).result(self.delivery_timeout_s)
            except (OutOfOrderSequenceNumberError, UnknownProducerIdError):
                if self.transactional_id is not None or attempt:
                    self._needs_epoch_bump = True
                    raise
                self._bump_epoch_locally()  # KIP-360 for idempotent producers
                continue
            if self.idempotent:
                self._sequences[tp] = next_sequence(sequence)
            return result
        raise AssertionError("unreachable")

    def _bump_epoch_locally(self) -> None:
        self.producer_epoch += 1
        self._sequences.clear()

    def _partition(self, topic: str, key: bytes | None) -> int:
        count = self.engine.call(self.engine.partition_count, topic)
        if key is not None:
            return (murmur2(key) & 0x7FFFFFFF) % count
        counter = self._round_robin.setdefault(topic, itertools.count())
        return next(counter) % count

    def flush(self, timeout: float | None = None) -> None:
        """Every send has returned durable already; nothing is buffered."""
        self._check_not_fatal()

    def close(self, timeout: float | None = None) -> None:
        with self._lock:
            if (self._state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR)
                    and self._txn_partitions | self._txn_groups):
                try:
                    self._end(commit=False)
                except KafkaError:
                    pass  # the coordinator aborts it on timeout anyway
            self._state = TxnState.FATAL_ERROR
            self._error = self._error or KafkaError("the producer is closed")

    # -- plumbing ---------------------------------------------------------------------------

    def _init_producer_id(self, bump: bool = False) -> None:
        expected = (self.producer_id, self.producer_epoch) if bump else (-1, -1)
        timeout = self.transaction_timeout_ms if self.transactional_id is not None else -1
        try:
            self.producer_id, self.producer_epoch = self._coordinator(
                self.engine.transaction_coordinator.init_producer_id, self.transactional_id, timeout, *expected)
        except FATAL_ERRORS as e:
            self._state, self._error = TxnState.FATAL_ERROR, e
            raise
        self._sequences.clear()
        self._needs_epoch_bump = False

    def _coordinator(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a coordinator coroutine, retrying retriable errors until the delivery timeout."""
        deadline = time.monotonic() + self.delivery_timeout_s
        while True:
            try:
                return self.engine.call(fn, *args, timeout=self.delivery_timeout_s)
            except KafkaError as e:
                if e.retriable and time.monotonic() + RETRY_BACKOFF_S < deadline:
                    time.sleep(RETRY_BACKOFF_S)  # Kafka's retry.backoff.ms, against a broker that said "retry"
                    continue
                if isinstance(e, FATAL_ERRORS):
                    self._state, self._error = TxnState.FATAL_ERROR, _as_fenced(e)
                    raise self._error from e
                raise

    def _fail(self, error: KafkaError) -> None:
        if self._state is TxnState.FATAL_ERROR:
            return
        if isinstance(error, FATAL_ERRORS):
            self._state, self._error = TxnState.FATAL_ERROR, _as_fenced(error)
        else:
            self._state, self._error = TxnState.ABORTABLE_ERROR, error

    def _check_not_fatal(self) -> None:
        if self._state is TxnState.FATAL_ERROR:
            raise self._error if self._error is not None else IllegalStateError("the producer failed")

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
