"""The transaction coordinator: the seed's Transaction Coordinator Request Handling.

It owns the state of every transactional id (``exactly/coordinator/transaction_state.py``),
persists every change to ``__transaction_state`` before applying it
(``exactly/coordinator/transaction_log.py``), hands out producer ids
(``exactly/coordinator/producer_id_manager.py``) and completes transactions by writing
COMMIT/ABORT markers to every partition in them. It runs on the engine's event
loop; the engine gives it four capabilities (:class:`CoordinatorIO`): append a
record to a transaction-log partition and wait until durable, write a marker to a
partition and wait until durable, say whether a partition exists, and run a file
write off the loop (a block of producer ids is made durable that way before any
id of it is handed out).

How each request is answered (PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH
to request versions that predate it, at the wire):

* InitProducerId -- no transactional id: a fresh producer id, epoch 0. Empty id:
  INVALID_REQUEST. Timeout <= 0 or above ``transaction.max.timeout.ms``:
  INVALID_TRANSACTION_TIMEOUT. A new id: a fresh producer id at epoch 0. An
  existing one: an open transaction is fenced (epoch + 1) and aborted, a prepared
  one is waited for, then the epoch is bumped (a new producer id once the epoch
  is exhausted). With the KIP-360 fields (the caller's current id and epoch): a
  different producer is PRODUCER_FENCED, a retry of a bump that happened gets the
  bumped epoch back.
* InitProducerId with KIP-939's enable2Pc (``transaction.two.phase.commit.enable``,
  else TRANSACTIONAL_ID_AUTHORIZATION_FAILED): as above, and the producer's
  transactions never time out (Int32.MAX, as Kafka stores it): a prepared transaction
  waits for the external coordinator that holds its outcome. With keepPreparedTxn
  (``keep_prepared_transaction``): an Ongoing two-phase transaction is kept, data and
  partitions untouched, and, as KIP-939 specifies, the caller gets the epoch bumped
  (a new producer id at epoch 0 once it is exhausted) and, as OngoingTxnProducerId/
  Epoch, the producer id and epoch the transaction was written with, to compare with
  what it recorded at prepare time before it sends EndTxn (commit or abort) with the
  new pair. The writer that prepared the transaction is fenced: its later batches
  are INVALID_PRODUCER_EPOCH, its EndTxn and AddPartitionsToTxn PRODUCER_FENCED. The
  bump is persisted beside the transaction's own pair, in the transaction log
  value's tagged fields NextProducerId/NextProducerEpoch (``transaction_log.py``),
  which its markers still carry. The kept transaction takes no more partitions or
  data (INVALID_TXN_STATE): only EndTxn ends it. Anything else (nothing open, or an
  ordinary transaction) is an ordinary InitProducerId.
* AddPartitionsToTxn / AddOffsetsToTxn -- unknown transactional id or another
  producer id: INVALID_PRODUCER_ID_MAPPING; another epoch: PRODUCER_FENCED; a
  transaction still completing: CONCURRENT_TRANSACTIONS; an unknown partition:
  UNKNOWN_TOPIC_OR_PARTITION for it and OPERATION_NOT_ATTEMPTED for the rest.
  Otherwise the transaction becomes (or stays) Ongoing with the partitions added;
  its timer starts with the first.
* EndTxn -- the same producer checks; Ongoing: PREPARE_* is written (the point of
  no return), markers go out, COMPLETE_* is written, and only then does it answer,
  so a read_committed consumer sees the outcome as soon as commit returns. A
  retry with the same command while completing or after completion: OK. Anything
  else: INVALID_TXN_STATE. A marker a partition refuses keeps the transaction
  Prepare* and EndTxn never answers OK for it (``_complete``): after
  COMPLETION_WAIT_S of waiting, CONCURRENT_TRANSACTIONS (retriable).
* Produce of a transactional batch, and TxnOffsetCommit (for the group's
  ``__consumer_offsets`` partition) -- KIP-890 verification (``verify_transaction``):
  the producer id and epoch must be those of the transactional id's Ongoing
  transaction, and it must have the partition; otherwise nothing is written. A
  non-transactional batch may not carry a transactional id's producer id
  (``verify_idempotent``).
* The partition-level abort (KIP-664, ``Partitions.abort_hanging_transaction``) of a
  producer this coordinator knows: its transaction is aborted with an epoch bump
  (``abort_for_partition``), the partition added first if it was not in it.

Every abort says why and who (an :class:`AbortReason`: EndTxn from the producer, the
timeout, a new instance's InitProducerId, an operator's transaction or partition
abort): the PrepareAbort and CompleteAbort records carry it as headers
(``transaction_log.py``), it is one INFO line in the log (``_prepare_abort``), and a
call with the epoch it fenced is told it in the error (a producer whose transaction
timed out learns that, not only that it is fenced).

The state of a transactional id moves only along these edges (``VALID_PREVIOUS`` in
``exactly/coordinator/transaction_state.py``; tests/test_transaction_state.py pins this
table to it both ways)::

    state              <- entered from                               : by
    Empty              <- Empty, CompleteCommit, CompleteAbort        : InitProducerId
    Ongoing            <- Empty, Ongoing, CompleteCommit, CompleteAbort
                                                                     : AddPartitionsToTxn, AddOffsetsToTxn
    PrepareCommit      <- Ongoing                                     : EndTxn(commit)
    PrepareAbort       <- Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort
                                                                     : EndTxn(abort), fencing, timeout;
                                                                       the last three: EndTxn v5(abort)
    CompleteCommit     <- PrepareCommit                               : every COMMIT marker durable
    CompleteAbort      <- PrepareAbort                                : every ABORT marker durable
    Dead               <- Empty, CompleteCommit, CompleteAbort        : transactional.id.expiration.ms
    PrepareEpochFence  <- Ongoing                                     : InitProducerId or timeout with a
                                                                       transaction open (memory only)

A crash anywhere is rolled forward on load: every PREPARE_* found in the log is
completed again (markers are idempotent for the reader). The coordinator epoch,
carried in every marker, is bumped at every load, so a zombie coordinator's late
markers are fenced by the partitions (TRANSACTION_COORDINATOR_FENCED). It is kept in
``transaction-coordinator-epoch`` and never starts below the highest coordinator
epoch a partition's producer state holds, so losing that file fences no one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol

from exactly.coordinator import features, offsets_log, transaction_log
from exactly.coordinator.producer_id_manager import BLOCK_SIZE, ProducerIdBlock, ProducerIdManager
from exactly.coordinator.schema import MAX_STRING_BYTES, SchemaError
from exactly.coordinator.transaction_state import (
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    AbortCause,
    AbortReason,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from exactly.storage.checked_file import CorruptFileError, read_fields, write_fields
from exactly.storage.clock import Clock
from exactly.storage.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionCoordinatorFencedError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from exactly.storage.filenames import COORDINATOR_EPOCH, PRODUCER_ID_BLOCK
from exactly.storage.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, is_epoch_exhausted

log = logging.getLogger(__name__)
S = TransactionState
TopicPartition = tuple[str, int]

#: ``transaction-coordinator-epoch``, framed as exactly/storage/checked_file.py says (version 0)
EPOCH_FILE_VERSION = 0
EPOCH_FILE_BODY = struct.Struct(
    ">"
    "i"  # CoordinatorEpoch: the epoch of the coordinator's latest start
)
#: how long to wait before writing a failed marker again
MARKER_RETRY_BACKOFF_S = 0.1
#: the longest wait between writes of a marker that a partition refuses (see ``_complete``)
MARKER_REFUSED_MAX_BACKOFF_S = 30.0
#: how long a request waits for a transaction to complete before it answers
#: CONCURRENT_TRANSACTIONS, which clients retry (Kafka's request.timeout.ms default)
COMPLETION_WAIT_S = 30.0
_KEPT_TAKES_NOTHING = ("the transaction of {txn_id!r} was kept prepared by keepPreparedTxn (KIP-939): "
                       "it takes no more partitions or records; only EndTxn ends it")


@dataclass(frozen=True)
class MarkerRefusal:
    """A partition refused a transaction's marker (see ``TransactionCoordinator._complete``)."""

    topic: str
    partition: int
    error: str
    message: str
    at_ms: int


@dataclass(frozen=True)
class KeptTransaction:
    """What keepPreparedTxn answers (KIP-939): the producer id and epoch the caller
    uses from now on, and those the kept transaction was written with."""

    producer_id: int
    producer_epoch: int
    ongoing_producer_id: int
    ongoing_producer_epoch: int


class TransactionObserver(Protocol):
    """What the coordinator reports for metrics (the engine's counters implement it)."""

    def transaction_ended(self, commit: bool, seconds: float) -> None:
        """An EndTxn took ``seconds`` from its arrival until its markers and COMPLETE were durable."""

    def producer_fenced(self, error_name: str) -> None:
        """A producer was answered PRODUCER_FENCED or INVALID_PRODUCER_EPOCH (``error_name``)."""

    def transaction_timed_out(self) -> None:
        """A transaction open past its timeout was aborted."""

    def transaction_admin_aborted(self) -> None:
        """An operator's abort (``admin_abort``, ``abort_for_partition``) aborted a transaction."""


class CoordinatorIO(Protocol):
    """What the coordinator needs from the engine (all on the engine's loop)."""

    async def append_txn_log(self, partition: int, key: bytes, value: bytes | None,
                             headers: transaction_log.Headers = ()) -> int: ...

    async def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, commit: bool) -> None: ...

    async def write_fencing_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> int:
        """Write the marker at epochs the partition accepts whatever it has seen of the
        producer: one above the producer's epoch there (fencing whoever wrote it) and
        at least its coordinator epoch; returns the producer epoch written."""
        ...

    def partition_exists(self, topic: str, partition: int) -> bool: ...

    def offsets_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (the group coordinator's
        partitioning, as Kafka's ``groupCoordinator.partitionFor``)."""

    async def persist(self, write: ProducerIdBlock) -> None:
        """Run ``write.run()`` (file I/O and fsync) off the loop; return once it is done."""
        ...


@dataclass(frozen=True)
class CoordinatorConfig:
    """The transaction coordinator's configs: Kafka's names (dots as underscores) and
    defaults. Declared here only; ``exactly/app/config.py``'s BrokerConfig includes them."""

    transaction_state_log_num_partitions: int = 50
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    #: KIP-939's broker switch for InitProducerId's enable2Pc, off as in Kafka: a
    #: two-phase transaction never times out (the Kafka face also asks TwoPhaseCommit on
    #: the transactional id); the Spark sink needs it on.
    transaction_two_phase_commit_enable: bool = False
    #: the finalized level of the ``transaction.version`` feature (KIP-584), as Kafka's
    #: ``kafka-storage format --feature transaction.version=N`` sets it: 2 is KIP-890 part 2
    #: (clients add partitions implicitly, EndTxn bumps the epoch), 1 and 0 make clients
    #: use the earlier protocol (``exactly/coordinator/features.py``)
    transaction_version: int = 2


class TransactionCoordinator:
    """Transaction state for every transactional id; runs on one event loop."""

    def __init__(self, data_dir: Path, config: CoordinatorConfig, io: CoordinatorIO,
                 clock: Clock, observer: TransactionObserver, max_seen_coordinator_epoch: int = -1) -> None:
        """``max_seen_coordinator_epoch``: the highest coordinator epoch any partition's
        producer state holds (from the markers it has); this start's epoch is above it.
        ``observer`` is told what metrics count (latency, fencing, timeouts, admin aborts)."""
        self.data_dir = Path(data_dir)
        self.observer = observer
        self.config = config
        self.io = io
        self.clock = clock
        self.txns: dict[str, TransactionMetadata] = {}
        self._by_producer_id: dict[int, str] = {}
        #: transaction-log partitions whose load found an inconsistency: NOT_COORDINATOR
        self.disabled_partitions: dict[int, str] = {}
        self._completions: dict[str, asyncio.Task[None]] = {}
        #: the partitions that refuse the markers of a completion in progress (see ``_complete``)
        self._refused: dict[str, set[TopicPartition]] = {}
        #: the last refusal of each transactional id's markers (for the console: why it was stuck)
        self.last_refusal: dict[str, MarkerRefusal] = {}
        #: completions an operator's abort forces past their refused markers (``admin_abort``)
        self._forced: set[str] = set()
        #: wakes a completion waiting to write refused markers again
        self._wakeups: dict[str, asyncio.Event] = {}
        #: transactions completed since start, by outcome (for metrics)
        self.completed = {"commit": 0, "abort": 0}
        self.coordinator_epoch = self._bump_coordinator_epoch(max_seen_coordinator_epoch)
        self.producer_ids = self._producer_id_manager()
        self._id_block_lock = asyncio.Lock()
        #: transactional ids with a transition to Ongoing being written (``_write_add``)
        self._adding: dict[str, asyncio.Event] = {}

    # -- start-up -----------------------------------------------------------------------

    def _bump_coordinator_epoch(self, max_seen: int) -> int:
        """Every load is a new coordinator incarnation, with an epoch above every earlier
        one: above the file's and above ``max_seen``, so a lost or damaged file cannot
        make the partitions refuse this coordinator's markers (a marker whose epoch is
        below the one a partition saw last is TRANSACTION_COORDINATOR_FENCED). It is
        persisted before any marker carries it."""
        path = self.data_dir / COORDINATOR_EPOCH
        try:
            fields = read_fields(path, EPOCH_FILE_VERSION, EPOCH_FILE_BODY)
        except CorruptFileError as e:
            log.warning("%s; the coordinator epoch goes on from the partitions' producer state (%d)",
                        e, max_seen)
            fields = None
        epoch = max(-1 if fields is None else fields[0], max_seen) + 1
        write_fields(path, EPOCH_FILE_VERSION, EPOCH_FILE_BODY, epoch)
        return epoch

    def _producer_id_manager(self) -> ProducerIdManager:
        try:
            return ProducerIdManager(self.data_dir)
        except CorruptFileError as e:
            log.warning("%s; skipping ahead so no producer id can repeat", e)
            (self.data_dir / PRODUCER_ID_BLOCK).unlink()
            manager = ProducerIdManager(self.data_dir)
            manager.raise_floor(BLOCK_SIZE * 1000)
            return manager

    def load_records(self, partition: int,
                     records: Iterable[tuple[int, bytes | None, bytes | None, transaction_log.Headers]]) -> None:
        """Materialise one transaction-log partition from its ``(offset, key, value,
        headers)`` records, with the seed's consistency check: a record with a lower
        epoch after a higher one for the same producer disables the partition
        (NOT_COORDINATOR)."""
        for offset, key, value, headers in records:
            try:
                record = transaction_log.decode(key, value, headers)
            except SchemaError as e:
                self._disable(partition, f"undecodable record at offset {offset}: {e}")
                return
            if record.transit is None:
                self._forget(record.transactional_id)
                continue
            current = self.txns.get(record.transactional_id)
            transit = record.transit
            if (current is not None and current.producer_id == transit.producer_id
                    and transit.producer_epoch < current.producer_epoch):
                self._disable(partition, f"transactional id {record.transactional_id!r} goes from epoch "
                                         f"{current.producer_epoch} back to {transit.producer_epoch} at offset {offset}")
                return
            self._materialise(record.transactional_id, transit, current)

    def _disable(self, partition: int, reason: str) -> None:
        log.error("transaction log partition %d disabled: %s", partition, reason)
        self.disabled_partitions[partition] = reason
        for txn_id in [t for t in self.txns if self._partition(t) == partition]:
            self._forget(txn_id)

    def _materialise(self, txn_id: str, transit: TxnTransitMetadata,
                     current: TransactionMetadata | None) -> None:
        last_pid = transit.last_producer_id
        if last_pid == NO_PRODUCER_ID:  # a value v0: derived from the records before it
            last_pid = current.producer_id if current and current.producer_id != transit.producer_id else (
                current.last_producer_id if current else NO_PRODUCER_ID)
        # the last epoch is not in the log (value v0): -1, as Kafka loads it, so no
        # instance fenced before the restart can pass for a retried KIP-360 bump
        meta = TransactionMetadata(
            txn_id, transit.producer_id, last_pid, transit.producer_epoch,
            NO_PRODUCER_EPOCH, transit.txn_timeout_ms,
            transit.state, set(transit.partitions), transit.txn_start_timestamp,
            transit.txn_last_update_timestamp, abort_reason=transit.abort_reason,
            next_producer_id=transit.next_producer_id, next_producer_epoch=transit.next_producer_epoch,
            client_transaction_version=transit.client_transaction_version,
            fenced=_fenced_by(transit) or (current.fenced if current is not None
                                           and current.producer_id == transit.producer_id else None))
        if current is not None and current.producer_id != meta.producer_id:
            self._forget(txn_id)  # the rotated-away producer id maps to nothing, as in _write
        self._install(meta)

    def _install(self, meta: TransactionMetadata) -> None:
        self.txns[meta.transactional_id] = meta
        self._by_producer_id[meta.producer_id] = meta.transactional_id
        self.producer_ids.raise_floor(meta.producer_id + 1)

    def _forget(self, txn_id: str) -> None:
        self.last_refusal.pop(txn_id, None)
        meta = self.txns.pop(txn_id, None)
        if meta is not None and self._by_producer_id.get(meta.producer_id) == txn_id:
            del self._by_producer_id[meta.producer_id]

    def resume(self) -> None:
        """After loading: roll every prepared transaction forward (a crash may have
        stopped it between PREPARE and COMPLETE)."""
        for meta in self.txns.values():
            if meta.state.is_prepared:
                self._start_completion(meta)

    # -- helpers ------------------------------------------------------------------------

    def _partition(self, txn_id: str) -> int:
        return transaction_log.partition_for(txn_id, self.config.transaction_state_log_num_partitions)

    def offsets_partition(self, group_id: str) -> int:
        return self.io.offsets_partition(group_id)

    def _check_coordinator(self, txn_id: str) -> None:
        reason = self.disabled_partitions.get(self._partition(txn_id))
        if reason is not None:
            raise NotCoordinatorError(f"transaction log partition of {txn_id!r} is disabled: {reason}")

    async def _write(self, meta: TransactionMetadata, transit: TxnTransitMetadata) -> None:
        """Append the transit, then apply it; on failure the pending state is dropped."""
        value = None if transit.state is S.DEAD else transaction_log.encode_value(transit)
        try:
            await self.io.append_txn_log(self._partition(meta.transactional_id),
                                         transaction_log.encode_key(meta.transactional_id), value,
                                         transaction_log.encode_headers(transit))
        except KafkaError as e:
            meta.abort_transition()
            raise CoordinatorNotAvailableError(f"could not write the transaction log: {e}") from e
        except BaseException:
            meta.abort_transition()
            raise
        previous_pid = meta.producer_id
        meta.complete_transition(transit)
        if meta.producer_id != previous_pid:
            self._by_producer_id.pop(previous_pid, None)
            meta.fenced = None  # it named an epoch of the previous producer id
        self._by_producer_id[meta.producer_id] = meta.transactional_id

    def _validate_producer(self, txn_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        self._check_coordinator(txn_id)
        meta = self.txns.get(txn_id)
        if meta is None or producer_id not in (meta.producer_id, meta.client_producer_id):
            raise InvalidProducerIdMappingError(
                f"transactional id {txn_id!r} is not mapped to producer id {producer_id}")
        if (producer_id, producer_epoch) != (meta.client_producer_id, meta.client_producer_epoch):
            raise self._fenced(ProducerFencedError(
                f"producer {producer_id} epoch {producer_epoch} is fenced by producer {meta.client_producer_id} "
                f"epoch {meta.client_producer_epoch} of transactional id {txn_id!r}"
                f"{_fenced_because(meta, producer_epoch)}"))
        return meta

    def _fenced(self, error: KafkaError) -> KafkaError:
        """``error`` (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH), counted as a fenced producer."""
        self.observer.producer_fenced(error.name)
        return error

    # -- InitProducerId -----------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str | None, transaction_timeout_ms: int,
                               producer_id: int = NO_PRODUCER_ID,
                               producer_epoch: int = NO_PRODUCER_EPOCH,
                               enable_2pc: bool = False, instance: str | None = None) -> tuple[int, int]:
        """InitProducerId: ``(producer id, epoch)`` for this producer instance;
        ``instance`` names who fences the previous one, for the abort's reason."""
        if transactional_id is None:
            if enable_2pc:
                raise InvalidRequestError("two-phase commit needs a transactional id")
            return await self._new_producer_id(), 0
        if transactional_id == "":
            raise InvalidRequestError("the transactional id must not be empty")
        if len(transactional_id.encode("utf-8")) > MAX_STRING_BYTES:
            raise InvalidRequestError(f"the transactional id is longer than {MAX_STRING_BYTES} bytes "
                                      f"(a key of {transaction_log.TOPIC})")
        if enable_2pc:
            self._check_two_phase_commit_enabled()
            transaction_timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS
        elif not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {transaction_timeout_ms} must be in (0, "
                f"{self.config.transaction_max_timeout_ms}] (transaction.max.timeout.ms)")
        self._check_coordinator(transactional_id)
        kip360 = producer_id != NO_PRODUCER_ID
        expected = kip360  # KIP-360: checked once, before any fencing
        while True:
            meta = self.txns.get(transactional_id)
            if self.producer_ids.exhausted and (meta is None or is_epoch_exhausted(meta.producer_epoch)):
                await self._durable_id_block()
                continue  # the world may have moved while the block was written
            if meta is None:
                return await self._init_new(transactional_id, transaction_timeout_ms)
            if meta.pending_state is not None or meta.state.is_ending:
                await self._await_completion(meta)
                continue
            if expected:
                expected = False
                retried = self._check_expected_producer(meta, producer_id, producer_epoch)
                if retried is not None:
                    return retried
            if meta.state is S.ONGOING:
                caller = f" (producer {producer_id} epoch {producer_epoch})" if kip360 else ""
                await self._fence_and_abort(meta, AbortReason(
                    AbortCause.FENCED, instance or f"InitProducerId of a new instance{caller}"))
                continue
            if is_epoch_exhausted(meta.producer_epoch):
                transit = meta.prepare_new_producer_id(self._take_producer_id(), transaction_timeout_ms,
                                                       self.clock.now_ms(), remember_last_epoch=kip360)
            else:
                transit = meta.prepare_increment_epoch(transaction_timeout_ms, self.clock.now_ms(),
                                                       remember_last_epoch=kip360)
            await self._write(meta, transit)
            return meta.producer_id, meta.producer_epoch

    def _check_two_phase_commit_enabled(self) -> None:
        if not self.config.transaction_two_phase_commit_enable:
            raise TransactionalIdAuthorizationFailedError(
                "two-phase commit (enable2Pc) is disabled: transaction.two.phase.commit.enable=false")

    async def keep_prepared_transaction(self, transactional_id: str) -> KeptTransaction | None:
        """KIP-939 keepPreparedTxn on the transactional id's Ongoing two-phase
        transaction: kept as it is, with the caller given the epoch bumped (every
        earlier holder fenced; a new producer id once the epoch is exhausted), durably.
        None when there is none (after waiting for one being completed), and the
        caller initialises as usual."""
        if not transactional_id:
            raise InvalidRequestError("keepPreparedTxn needs a transactional id")
        self._check_two_phase_commit_enabled()
        self._check_coordinator(transactional_id)
        while (meta := self.txns.get(transactional_id)) is not None:
            if meta.pending_state is not None or meta.state.is_ending:
                await self._await_completion(meta)
                continue
            if not (meta.state is S.ONGOING and meta.two_phase_commit):
                return None
            rotate = is_epoch_exhausted(meta.client_producer_epoch)
            if rotate and self.producer_ids.exhausted:
                await self._durable_id_block()
                continue  # the world may have moved while the block was written
            await self._write(meta, meta.prepare_keep_prepared(
                self.clock.now_ms(), self._take_producer_id() if rotate else None))
            log.info("kept the prepared transaction of %r (producer %d epoch %d) for producer %d epoch %d "
                     "(keepPreparedTxn); earlier epochs are fenced", transactional_id, meta.producer_id,
                     meta.producer_epoch, meta.client_producer_id, meta.client_producer_epoch)
            return KeptTransaction(meta.client_producer_id, meta.client_producer_epoch,
                                   meta.producer_id, meta.producer_epoch)
        return None

    async def _new_producer_id(self) -> int:
        """A producer id never handed out before, from a block that is durable."""
        while (producer_id := self.producer_ids.next_id()) is None:
            await self._durable_id_block()
        return producer_id

    async def _durable_id_block(self) -> None:
        """Make the next block of producer ids durable (the file is written off the
        loop), unless another request already has."""
        async with self._id_block_lock:
            if self.producer_ids.exhausted:
                block = self.producer_ids.next_block()
                await self.io.persist(block)
                self.producer_ids.install(block)

    def _take_producer_id(self) -> int:
        """A producer id from the durable block, which the caller has made sure has one
        (in the same loop callback: nothing can take it in between)."""
        producer_id = self.producer_ids.next_id()
        assert producer_id is not None, "the caller made a block durable first"
        return producer_id

    async def _init_new(self, txn_id: str, timeout_ms: int) -> tuple[int, int]:
        meta = TransactionMetadata(txn_id, self._take_producer_id(), NO_PRODUCER_ID,
                                   NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY)
        transit = meta.prepare_increment_epoch(timeout_ms, self.clock.now_ms())
        self.txns[txn_id] = meta
        try:
            await self._write(meta, transit)
        except BaseException:
            self._forget(txn_id)
            raise
        return meta.producer_id, meta.producer_epoch

    def _check_expected_producer(self, meta: TransactionMetadata, producer_id: int,
                                 producer_epoch: int) -> tuple[int, int] | None:
        """KIP-360: the caller names the producer it is; fence a stranger, and answer
        a retried bump with the bumped epoch (returned) instead of bumping again."""
        current_id, current_epoch = meta.client_producer_id, meta.client_producer_epoch
        known = (current_epoch == NO_PRODUCER_EPOCH or producer_id == current_id
                 or (producer_id == meta.last_producer_id and is_epoch_exhausted(producer_epoch)))
        if not known:
            raise self._fenced(ProducerFencedError(
                f"producer {producer_id} is not the current producer {current_id} of "
                f"{meta.transactional_id!r}"))
        if producer_id == current_id and producer_epoch == current_epoch:
            return None
        # a retry: only a KIP-360 bump records the epoch it bumped from (an ordinary
        # InitProducerId, a fence or a reload leave -1), so a fenced instance never
        # gets here with its old epoch
        if producer_epoch == meta.last_producer_epoch != NO_PRODUCER_EPOCH:
            return meta.producer_id, meta.producer_epoch
        raise self._fenced(ProducerFencedError(
            f"producer {producer_id} epoch {producer_epoch} is fenced by epoch {current_epoch}"))

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
        """AddPartitionsToTxn: the error per partition (None for success)."""
        return await self._add_partitions(transactional_id, producer_id, producer_epoch, set(partitions))

    async def add_partition_implicitly(self, producer_id: int, producer_epoch: int, topic: str, partition: int,
                                       transactional_id: str | None = None) -> None:
        """Transaction version 2 (KIP-890 part 2): a Produce v12+ batch, or a
        TxnOffsetCommit v5+ (the group's ``__consumer_offsets`` partition), adds its
        partition to the producer's transaction itself -- starting one, after an
        EndTxn -- as Kafka's broker does through AddPartitionsToTxn. The producer must
        be the transactional id's current one at its current epoch, so a late write of
        an earlier transaction (whose EndTxn bumped the epoch) is refused, never added
        to the next: answered as :meth:`verify_transaction` answers. Adds of one
        transaction in flight at once (a producer's pipelined batches to several
        partitions) wait for each other instead of answering CONCURRENT_TRANSACTIONS."""
        await self.add_partitions_implicitly(producer_id, producer_epoch, {(topic, partition)}, transactional_id)

    async def add_partitions_implicitly(self, producer_id: int, producer_epoch: int,
                                        partitions: Iterable[TopicPartition],
                                        transactional_id: str | None = None) -> None:
        """:meth:`add_partition_implicitly` of several partitions in one transition, as
        AddPartitionsToTxn v4+ (not ``VerifyOnly``) asks it: Kafka's broker-side add,
        transaction version 2."""
        wanted = set(partitions)
        while True:
            meta = self._verified_meta(producer_id, producer_epoch, transactional_id)
            adding = self._adding.get(meta.transactional_id)
            if adding is not None:
                await adding.wait()
                continue
            if meta.state is S.ONGOING and wanted <= meta.partitions:
                return
            if meta.state is S.DEAD:
                raise InvalidProducerIdMappingError(f"transactional id {meta.transactional_id!r} has expired")
            await self._write_add(meta, meta.prepare_add_partitions(wanted, self.clock.now_ms(),
                                                                    features.TRANSACTION_VERSION_2))

    async def _write_add(self, meta: TransactionMetadata, transit: TxnTransitMetadata) -> None:
        """Write a transition to Ongoing, letting implicit adds wait for it (``_adding``)."""
        done = self._adding[meta.transactional_id] = asyncio.Event()
        try:
            await self._write(meta, transit)
        finally:
            del self._adding[meta.transactional_id]
            done.set()

    async def _add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              wanted: set[TopicPartition], check_exists: bool = True,
                              ) -> dict[TopicPartition, KafkaError | None]:
        meta = self._validate_producer(transactional_id, producer_id, producer_epoch)
        unknown = {tp for tp in wanted if check_exists and not self.io.partition_exists(*tp)}
        if unknown:
            return {tp: (UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} does not exist") if tp in unknown
                         else OperationNotAttemptedError()) for tp in wanted}
        if meta.pending_state is not None or meta.state.is_ending:
            raise ConcurrentTransactionsError(
                f"the previous transaction of {transactional_id!r} is still completing")
        if meta.state is S.DEAD:
            raise InvalidProducerIdMappingError(f"transactional id {transactional_id!r} has expired")
        if meta.kept:
            raise InvalidTxnStateError(_KEPT_TAKES_NOTHING.format(txn_id=transactional_id))
        if not (meta.state is S.ONGOING and wanted <= meta.partitions):
            await self._write_add(meta, meta.prepare_add_partitions(wanted, self.clock.now_ms()))
        return {tp: None for tp in wanted}

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> TopicPartition:
        """AddOffsetsToTxn: add the group's ``__consumer_offsets`` partition; returns it."""
        tp = (offsets_log.TOPIC, self.offsets_partition(group_id))
        # not checked for existence: ``__consumer_offsets`` is created by its first write
        # (the TxnOffsetCommit that follows), as Kafka creates it on first use; a marker
        # for a partition that never came to exist is skipped by the completion
        errors = await self._add_partitions(transactional_id, producer_id, producer_epoch, {tp},
                                            check_exists=False)
        error = errors[tp]
        if error is not None:
            raise error
        return tp

    # -- EndTxn ---------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool, transaction_version: int = 0) -> tuple[int, int]:
        """EndTxn: commit or abort, returning once the outcome is durable everywhere;
        returns the producer id and epoch the client goes on with. ``transaction_version``
        is the request's (2 from EndTxn v5, Kafka's ``transactionVersionForEndTxn``):
        then the epoch is bumped (a new producer id once it is exhausted), a retry is
        one naming the epoch before the bump, and an abort with no transaction open
        still bumps it (``_validate_end_txn``)."""
        started = time.perf_counter()
        tv2 = transaction_version >= features.TRANSACTION_VERSION_2
        meta, retry = self._validate_end_txn(transactional_id, producer_id, producer_epoch, tv2)
        command = "commit" if commit else "abort"
        matching_prepare = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        matching_complete = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        while True:
            state = meta.state
            if meta.pending_state is not None:
                if transactional_id not in self._completions:
                    raise ConcurrentTransactionsError(
                        f"transactional id {transactional_id!r} is being updated")
                await self._await_completion(meta)
                continue
            if state is S.ONGOING and not retry or tv2 and not commit and not retry and state in (
                    S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                if tv2 and is_epoch_exhausted(meta.producer_epoch) and self.producer_ids.exhausted:
                    await self._durable_id_block()
                    continue  # the world may have moved while the block was written
                next_id = self._take_producer_id() if tv2 and is_epoch_exhausted(meta.producer_epoch) \
                    else NO_PRODUCER_ID
                version = transaction_version if tv2 else None
                if commit:
                    await self._write(meta, meta.prepare_abort_or_commit(True, self.clock.now_ms(),
                                                                         transaction_version=version,
                                                                         next_producer_id=next_id))
                else:
                    await self._prepare_abort(meta, AbortReason(
                        AbortCause.CLIENT, f"EndTxn(abort) from producer {producer_id} epoch {producer_epoch}"),
                        version, next_id)
                self._start_completion(meta)
                await self._await_completion(meta)
                self.observer.transaction_ended(commit, time.perf_counter() - started)
                return meta.client_producer_id, meta.client_producer_epoch
            if state is matching_prepare and (retry or not tv2):
                await self._await_completion(meta)
                return meta.client_producer_id, meta.client_producer_epoch
            if state is matching_complete and (retry or not tv2):
                # a retry after completion: the seed's "return OK"
                return meta.client_producer_id, meta.client_producer_epoch
            raise InvalidTxnStateError(
                f"cannot {command} transactional id {transactional_id!r} in state {state.display}"
                f"{' (a retry of an earlier EndTxn)' if retry else ''}")

    def _validate_end_txn(self, txn_id: str, producer_id: int, producer_epoch: int,
                          tv2: bool) -> tuple[TransactionMetadata, bool]:
        """The transactional id's metadata, and whether the EndTxn is a retry of one
        that already bumped the epoch (transaction version 2, Kafka's
        retryOnEpochBump/retryOnOverflow): it names the epoch before the bump, or the
        previous producer id at its last epoch when the bump moved to a new id. Every
        other epoch is fenced -- also the epoch an abort of the coordinator (timeout,
        a new instance) fenced, which a retry would otherwise resemble."""
        if not tv2:
            return self._validate_producer(txn_id, producer_id, producer_epoch), False
        self._check_coordinator(txn_id)
        meta = self.txns.get(txn_id)
        fenced = meta is not None and meta.fenced is not None and meta.fenced[0] == producer_epoch
        if meta is not None and not fenced and not meta.kept and meta.state is not S.ONGOING:
            if (producer_id == meta.producer_id and producer_epoch + 1 == meta.producer_epoch
                    or producer_id == meta.last_producer_id and is_epoch_exhausted(producer_epoch)
                    and meta.producer_epoch == 0):
                return meta, True
        return self._validate_producer(txn_id, producer_id, producer_epoch), False

    # -- completion (markers) ----------------------------------------------------------

    def _start_completion(self, meta: TransactionMetadata) -> asyncio.Task[None]:
        task = self._completions.get(meta.transactional_id)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._complete(meta))
            self._completions[meta.transactional_id] = task
            task.add_done_callback(functools.partial(self._completion_done, meta.transactional_id))
        return task

    def _completion_done(self, txn_id: str, task: asyncio.Task[None]) -> None:
        if self._completions.get(txn_id) is task:
            del self._completions[txn_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("completing transaction %r failed: %s", txn_id, task.exception())

    async def _await_completion(self, meta: TransactionMetadata) -> None:
        task = self._completions.get(meta.transactional_id)
        if task is None and meta.state.is_prepared and meta.pending_state is None:
            task = self._start_completion(meta)
        if task is None:
            raise ConcurrentTransactionsError(
                f"transactional id {meta.transactional_id!r} is being updated; retry")
        try:
            await asyncio.wait_for(asyncio.shield(task), COMPLETION_WAIT_S)
        except asyncio.TimeoutError:
            raise ConcurrentTransactionsError(
                f"the transaction of {meta.transactional_id!r} is still completing "
                f"({len(self._refused.get(meta.transactional_id, ()))} partition(s) refuse its markers); "
                f"retry") from None

    async def _complete(self, meta: TransactionMetadata) -> None:
        """Write the markers of a prepared transaction until every one is durable,
        then COMPLETE_*. PREPARE was the point of no return, so a marker that fails
        is written again -- except UNKNOWN_TOPIC_OR_PARTITION: the topic was deleted,
        there is nothing left to mark.

        A partition that *refuses* the marker (INVALID_PRODUCER_EPOCH: it has seen a
        newer epoch of the producer; TRANSACTION_COORDINATOR_FENCED: a newer
        coordinator epoch) breaks an invariant: verification (``verify_transaction``)
        lets into a partition only batches of this very epoch, the engine only
        producer ids this broker handed out (``verify_idempotent``), and only this
        coordinator writes markers. The outcome is then not in that partition, so the
        transaction is not Complete: it stays Prepare*, the refusal is logged as an
        error each time and kept (``last_refusal``, which the console shows), and the
        marker is written again with a backoff doubling up to
        MARKER_REFUSED_MAX_BACKOFF_S (as Kafka's coordinator, which stops sending and
        leaves the transaction prepared). EndTxn and InitProducerId waiting for it
        answer CONCURRENT_TRANSACTIONS after COMPLETION_WAIT_S -- never OK. An
        operator's abort of the transactional id (``admin_abort``) forces it: the
        refused markers are written at epochs the partition accepts, one above the
        producer's epoch there, fencing whoever wrote it, as the partition-level abort
        does (``CoordinatorIO.write_fencing_marker``), and the transaction completes
        at the highest epoch those markers carried, so the producer's next epoch is one
        every partition accepts."""
        txn_id = meta.transactional_id
        commit = meta.state is S.PREPARE_COMMIT
        remaining = sorted(meta.partitions)
        backoff = MARKER_RETRY_BACKOFF_S
        refused: set[TopicPartition] = set()
        fenced_epoch = NO_PRODUCER_EPOCH  # the highest epoch a forced marker carried
        try:
            while remaining:
                forced = refused if txn_id in self._forced else set()
                results = await asyncio.gather(*(
                    self._write_marker(meta, tp, commit, fencing=tp in forced)
                    for tp in remaining), return_exceptions=True)
                fenced_epoch = max([fenced_epoch, *(r for r in results if isinstance(r, int))])
                failed = [(tp, e) for tp, e in zip(remaining, results) if isinstance(e, BaseException)]
                refused = {tp for tp, e in failed
                           if isinstance(e, (InvalidProducerEpochError, TransactionCoordinatorFencedError))}
                for tp, error in failed:
                    self._marker_failed(meta, tp, error, refused, commit)
                remaining = [tp for tp, e in failed if not isinstance(e, UnknownTopicOrPartitionError)]
                self._refused[txn_id] = refused
                if remaining:
                    backoff = (min(backoff * 2, MARKER_REFUSED_MAX_BACKOFF_S) if refused
                               else MARKER_RETRY_BACKOFF_S)
                    await self._backoff(txn_id, backoff)
        finally:
            self._refused.pop(txn_id, None)
            self._forced.discard(txn_id)
            self._wakeups.pop(txn_id, None)
        while True:
            try:
                await self._write(meta, meta.prepare_complete(self.clock.now_ms(), fenced_epoch))
                self.completed["commit" if commit else "abort"] += 1
                return
            except CoordinatorNotAvailableError as e:
                quiet = isinstance(e.__cause__, KafkaStorageError)  # the engine logs storage trouble once
                log.log(logging.DEBUG if quiet else logging.WARNING, "writing COMPLETE for %r failed, retrying: %s",
                        txn_id, e)
                await asyncio.sleep(MARKER_RETRY_BACKOFF_S)

    async def _write_marker(self, meta: TransactionMetadata, tp: TopicPartition, commit: bool,
                            fencing: bool) -> int | None:
        """One marker; a ``fencing`` one (forced) returns the epoch it carried."""
        if not fencing:
            await self.io.write_marker(tp[0], tp[1], meta.producer_id, meta.producer_epoch,
                                       self.coordinator_epoch, commit)
            return None
        epoch = await self.io.write_fencing_marker(tp[0], tp[1], meta.producer_id, meta.producer_epoch,
                                                   self.coordinator_epoch, commit)
        log.warning("wrote the refused %s marker of %r on %s-%s at producer epoch %d (an operator's abort; "
                    "producer %d is fenced there)", "COMMIT" if commit else "ABORT", meta.transactional_id,
                    tp[0], tp[1], epoch, meta.producer_id)
        return epoch

    def _marker_failed(self, meta: TransactionMetadata, tp: TopicPartition, error: BaseException,
                       refused: set[TopicPartition], commit: bool) -> None:
        txn_id = meta.transactional_id
        if isinstance(error, UnknownTopicOrPartitionError):
            log.warning("marker for %r on %s-%s not needed: %s", txn_id, tp[0], tp[1], error)
        elif tp in refused:
            assert isinstance(error, KafkaError)
            self.last_refusal[txn_id] = MarkerRefusal(tp[0], tp[1], error.name, str(error), self.clock.now_ms())
            log.error("invariant broken: %s-%s refuses the %s marker of %r (producer %d epoch "
                      "%d, coordinator epoch %d): %s; the transaction stays %s and the marker "
                      "is retried (an operator's Abort of the transaction forces it)", tp[0], tp[1],
                      "COMMIT" if commit else "ABORT", txn_id, meta.producer_id,
                      meta.producer_epoch, self.coordinator_epoch, error, meta.state.display)
        elif isinstance(error, KafkaStorageError):  # the engine logs a full disk or offline log once
            log.debug("marker for %r on %s-%s refused by storage, retrying: %s", txn_id, tp[0], tp[1], error)
        else:
            log.warning("marker for %r on %s-%s failed, retrying: %s", txn_id, tp[0], tp[1], error)

    async def _backoff(self, txn_id: str, seconds: float) -> None:
        """Wait ``seconds`` before writing markers again, or until an operator forces them."""
        wakeup = self._wakeups.setdefault(txn_id, asyncio.Event())
        try:
            await asyncio.wait_for(wakeup.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        wakeup.clear()

    async def _fence_and_abort(self, meta: TransactionMetadata, reason: AbortReason) -> None:
        """Bump the epoch of an open transaction (fencing its producer at every
        partition through the markers) and abort it for ``reason``; returns once aborted."""
        fenced_epoch = meta.producer_epoch
        fence = meta.prepare_fence_epoch(self.clock.now_ms())
        meta.complete_transition(fence)  # in memory only: the PrepareAbort below carries the epoch
        meta.fenced = (fenced_epoch, reason)
        self._by_producer_id[meta.producer_id] = meta.transactional_id
        await self._prepare_abort(meta, reason)
        self._start_completion(meta)
        await self._await_completion(meta)

    async def _prepare_abort(self, meta: TransactionMetadata, reason: AbortReason,
                             transaction_version: int | None = None, next_producer_id: int = NO_PRODUCER_ID) -> None:
        """Write PrepareAbort with ``reason`` (the decision), and say so in one log line;
        ``transaction_version`` and ``next_producer_id`` as for
        :meth:`TransactionMetadata.prepare_abort_or_commit`."""
        await self._write(meta, meta.prepare_abort_or_commit(False, self.clock.now_ms(), reason,
                                                             transaction_version, next_producer_id))
        log.info("aborting transaction %r (producer %d epoch %d; %s): cause=%s actor=%s",
                 meta.transactional_id, meta.producer_id, meta.producer_epoch,
                 ", ".join(f"{t}-{p}" for t, p in sorted(meta.partitions)) or "no partitions",
                 reason.cause.value, reason.actor)

    async def admin_abort(self, transactional_id: str, actor: str = "an operator") -> None:
        """An operator's abort of an open transaction (the console's or the API's Abort;
        ``actor`` says which, and from where): fence its producer with an epoch bump,
        write ABORT markers, complete. One whose outcome is decided (Prepare*) is
        completed: markers a partition refuses are forced (see :meth:`_complete`), so
        no transactional id stays stuck."""
        meta = self._known(transactional_id)
        if meta.pending_state is not None or meta.state.is_prepared:
            if self._refused.get(transactional_id):
                self._force(meta, actor)
            await self._await_completion(meta)
            return
        if meta.state is not S.ONGOING:
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r} has no open transaction ({meta.state.display})")
        await self._fence_and_abort(meta, AbortReason(AbortCause.ADMIN, actor))
        self.observer.transaction_admin_aborted()

    def _force(self, meta: TransactionMetadata, actor: str) -> None:
        """Have the completion of ``meta`` write its refused markers at epochs the
        partitions accept, now."""
        txn_id = meta.transactional_id
        log.warning("%s forces the %s of %r past the partitions refusing its markers (%s)", actor,
                    meta.state.display, txn_id,
                    ", ".join(f"{t}-{p}" for t, p in sorted(self._refused.get(txn_id, ()))))
        self._forced.add(txn_id)
        wakeup = self._wakeups.get(txn_id)
        if wakeup is not None:
            wakeup.set()

    async def settle_for_partition_abort(self, transactional_id: str, topic_partition: TopicPartition) -> bool:
        """Before the partition-level abort (KIP-664) of this id's producer on
        ``topic_partition``: wait for a completion in progress to finish. False when
        it cannot finish there -- that partition refuses its marker (see
        :meth:`_complete`) -- so only a marker on the partition itself can free it."""
        meta = self.txns.get(transactional_id)
        while meta is not None and (meta.pending_state is not None or meta.state.is_ending):
            if topic_partition in self._refused.get(transactional_id, ()):
                return False
            await self._await_completion(meta)
            meta = self.txns.get(transactional_id)
        return True

    async def abort_for_partition(self, transactional_id: str, topic_partition: TopicPartition,
                                  actor: str = "an operator") -> int:
        """The partition-level abort (KIP-664) of a producer this coordinator knows,
        holding ``topic_partition``'s transaction open: its transactional id's
        transaction is aborted with an epoch bump, so the producer is fenced
        everywhere and the ABORT marker lands on every partition of it. A partition
        the transaction does not have -- a batch written before verification, or the
        transaction already ended -- joins a transaction first, so the same markers
        end it. Returns the epoch that fences the producer now."""
        meta = self._known(transactional_id)
        if meta.state is not S.ONGOING or topic_partition not in meta.partitions:
            await self._write(meta, meta.prepare_add_partitions({topic_partition}, self.clock.now_ms()))
        await self._fence_and_abort(meta, AbortReason(
            AbortCause.ADMIN_PARTITION, f"{actor}, on {topic_partition[0]}-{topic_partition[1]}"))
        self.observer.transaction_admin_aborted()
        return meta.producer_epoch

    # -- events on demand (exactly/app/server.py, the HTTP API's :fence and :timeout) -------------

    def _known(self, transactional_id: str) -> TransactionMetadata:
        """The metadata of ``transactional_id`` (TRANSACTIONAL_ID_NOT_FOUND when there is none)."""
        self._check_coordinator(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise TransactionalIdNotFoundError(f"no transactional id {transactional_id!r}")
        return meta

    async def fence(self, transactional_id: str, actor: str = "an operator") -> tuple[int, int]:
        """Fence the transactional id's producer now, exactly as a new instance's
        InitProducerId does (its open transaction aborted with an epoch bump, then the
        epoch bumped again for the "new instance"): the old producer's next request is
        INVALID_PRODUCER_EPOCH or PRODUCER_FENCED. Returns the new producer id and epoch,
        which nobody holds."""
        meta = self._known(transactional_id)
        return await self.init_producer_id(transactional_id, meta.txn_timeout_ms, enable_2pc=meta.two_phase_commit,
                                           instance=f"{actor}: fenced on demand")

    async def time_out(self, transactional_id: str, actor: str = "an operator") -> None:
        """Time the open transaction out now, exactly as ``transaction.timeout.ms``
        expiring does (:meth:`abort_timed_out_transactions`): aborted with the timeout's
        epoch bump, cause ``timeout``."""
        meta = self._known(transactional_id)
        if meta.pending_state is not None or meta.state is not S.ONGOING:
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r} has no open transaction ({meta.state.display})")
        open_ms = self.clock.now_ms() - meta.txn_start_timestamp
        await self._abort_timed_out(meta, f"{actor}: timed out on demand, open {open_ms} ms")

    async def _abort_timed_out(self, meta: TransactionMetadata, actor: str) -> None:
        await self._fence_and_abort(meta, AbortReason(AbortCause.TIMEOUT, actor))
        self.observer.transaction_timed_out()

    # -- scheduled work ----------------------------------------------------------------

    async def abort_timed_out_transactions(self) -> list[str]:
        """Abort (with an epoch bump, fencing the zombie) every transaction open longer
        than its timeout; finish any prepared one nobody is completing."""
        now = self.clock.now_ms()
        aborted = []
        for meta in list(self.txns.values()):
            if meta.pending_state is not None:
                continue
            if (meta.state is S.ONGOING and not meta.two_phase_commit
                    and now > meta.txn_start_timestamp + meta.txn_timeout_ms):
                aborted.append(meta.transactional_id)
                try:
                    await self._abort_timed_out(meta, f"the transaction coordinator: open "
                                                      f"{now - meta.txn_start_timestamp} ms, "
                                                      f"transaction.timeout.ms {meta.txn_timeout_ms}")
                except KafkaError as e:
                    log.warning("aborting timed-out %r failed: %s", meta.transactional_id, e)
            elif meta.state is S.PREPARE_EPOCH_FENCE:  # an earlier abort's PrepareAbort write failed
                try:
                    await self._prepare_abort(meta, meta.fenced[1] if meta.fenced else AbortReason(
                        AbortCause.TIMEOUT, "the transaction coordinator"))
                except KafkaError as e:  # as above: the next run tries again; the others go on
                    log.warning("aborting fenced %r failed: %s", meta.transactional_id, e)
                    continue
                aborted.append(meta.transactional_id)
                self._start_completion(meta)
                try:
                    await self._await_completion(meta)
                except KafkaError as e:  # a refused marker: _complete says so and goes on trying
                    log.warning("aborting fenced %r has not completed: %s", meta.transactional_id, e)
            elif meta.state.is_prepared and meta.transactional_id not in self._completions:
                self._start_completion(meta)
        return aborted

    async def expire_transactional_ids(self) -> list[str]:
        """Tombstone ids idle past transactional.id.expiration.ms with nothing open."""
        now = self.clock.now_ms()
        expired = []
        for meta in list(self.txns.values()):
            if (meta.pending_state is None and meta.state.expiration_allowed
                    and now - meta.txn_last_update_timestamp >= self.config.transactional_id_expiration_ms):
                try:
                    await self._write(meta, meta.prepare_dead(now))
                except KafkaError as e:  # the seed: "do not care if it fails"
                    log.warning("expiring %r failed: %s", meta.transactional_id, e)
                    continue
                self._forget(meta.transactional_id)
                expired.append(meta.transactional_id)
        return expired

    # -- queries -------------------------------------------------------------------------

    def transactional_id_of(self, producer_id: int) -> str | None:
        return self._by_producer_id.get(producer_id)

    def verify_transaction(self, producer_id: int, producer_epoch: int, topic: str, partition: int,
                           transactional_id: str | None = None) -> None:
        """KIP-890 part 1: a transactional batch (or a TxnOffsetCommit, for the group's
        ``__consumer_offsets`` partition) is let in only when its producer id and epoch
        are exactly those of an Ongoing transaction that has ``topic-partition``;
        otherwise a stray batch would open a transaction nobody ends (or, one epoch
        ahead, make the partition refuse the coordinator's marker). ``transactional_id``
        is the request's, when it names one; else the producer id's.

        The answers are Kafka's: TransactionCoordinator.handleVerifyPartitionsInTransaction
        says INVALID_PRODUCER_ID_MAPPING for an unknown transactional id or another
        producer id, PRODUCER_FENCED for another epoch (older or newer), which
        AddPartitionsToTxnManager turns into INVALID_PRODUCER_EPOCH for a Produce,
        CONCURRENT_TRANSACTIONS while the transaction is in PrepareCommit/PrepareAbort
        (retriable; ReplicaManager shows pre-TV2 producers NOT_ENOUGH_REPLICAS -- the
        wire's business), and TRANSACTION_ABORTABLE for a partition not in an Ongoing
        transaction, which requests of clients that predate that error (Produce below
        v11, TxnOffsetCommit below v4) get as INVALID_TXN_STATE, as Kafka's
        AddPartitionsToTxnManager answers them. An id that expired is forgotten, so its
        producer id is unknown: INVALID_PRODUCER_ID_MAPPING.
        """
        meta = self._verified_meta(producer_id, producer_epoch, transactional_id)
        if meta.state is not S.ONGOING or (topic, partition) not in meta.partitions:
            raise TransactionAbortableError(
                f"{topic}-{partition} is not part of an ongoing transaction of {meta.transactional_id!r} "
                f"(state {meta.state.display}); call AddPartitionsToTxn first")

    def needs_partition(self, producer_id: int, producer_epoch: int, topic: str, partition: int,
                        transactional_id: str | None = None) -> bool:
        """Whether a transactional batch must wait for :meth:`add_partition_implicitly`
        (transaction version 2): its partition is not in the producer's Ongoing
        transaction yet, or a transition to Ongoing is being written."""
        meta = self._verified_meta(producer_id, producer_epoch, transactional_id)
        return (meta.transactional_id in self._adding or meta.state is not S.ONGOING
                or (topic, partition) not in meta.partitions)

    def _verified_meta(self, producer_id: int, producer_epoch: int,
                       transactional_id: str | None) -> TransactionMetadata:
        """The metadata of the producer's transactional id, if the producer id and epoch
        are its current ones and it may take data (see :meth:`verify_transaction`)."""
        txn_id = self._by_producer_id.get(producer_id) if transactional_id is None else transactional_id
        if txn_id is not None:
            self._check_coordinator(txn_id)
        meta = self.txns.get(txn_id) if txn_id is not None else None
        if meta is None or producer_id not in (meta.producer_id, meta.client_producer_id):
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} is not the producer of "
                f"{'any transactional id' if txn_id is None else repr(txn_id)}")
        if (producer_id, producer_epoch) != (meta.client_producer_id, meta.client_producer_epoch):
            raise self._fenced(InvalidProducerEpochError(
                f"producer {producer_id} epoch {producer_epoch} is not the current producer "
                f"{meta.client_producer_id} epoch {meta.client_producer_epoch} of {txn_id!r}"
                f"{_fenced_because(meta, producer_epoch)}"))
        if meta.kept:
            raise InvalidTxnStateError(_KEPT_TAKES_NOTHING.format(txn_id=txn_id))
        if meta.state.is_prepared or (meta.pending_state is not None and meta.pending_state.is_prepared):
            raise ConcurrentTransactionsError(f"the transaction of {txn_id!r} is completing")
        return meta

    def verify_idempotent(self, producer_id: int) -> None:
        """An idempotent batch must carry a producer id this broker handed out, and not
        the producer id of a transactional id.

        A producer id nobody was given is INVALID_PRODUCER_ID_MAPPING: the id maps to
        no producer of this broker. Not UNKNOWN_PRODUCER_ID, which says the partition
        lost a real producer's state (retention, expiration) and which clients answer
        by resetting their sequence and retrying -- nothing a retry can fix here; and it
        is what KIP-890 verification answers a transactional batch whose producer id
        no transactional id has. Kafka's partitions accept any id, as only clients
        write them; here a raw or HTTP client could name the id the coordinator hands
        out next, and the transactional id given it would then find its markers
        refused by that partition (a newer epoch), or pick an id near 2^63 that
        allocation would have to skip past.

        A transactional id's producer id with a higher epoch would move a partition
        past this coordinator's epoch, and the partition would then refuse the
        transaction's markers. (Kafka leaves this to its clients, which never do it;
        here any HTTP or raw client could, so it is INVALID_TXN_STATE, as for such a
        batch inside a transaction.)"""
        if not self.producer_ids.allocated(producer_id):
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} was never handed out by this broker; "
                f"call InitProducerId for one")
        txn_id = self._by_producer_id.get(producer_id)
        if txn_id is not None:
            raise InvalidTxnStateError(
                f"producer id {producer_id} is the producer of transactional id {txn_id!r}: "
                f"its batches must be transactional")

    def describe(self, transactional_id: str) -> TxnTransitMetadata | None:
        meta = self.txns.get(transactional_id)
        return meta.snapshot() if meta else None

    def list_transactions(self, states: Iterable[str] = ()) -> list[tuple[str, TxnTransitMetadata]]:
        wanted = {s.lower() for s in states}
        return [(txn_id, meta.snapshot()) for txn_id, meta in sorted(self.txns.items())
                if not wanted or meta.state.display.lower() in wanted]

    async def wait_for_completions(self) -> None:
        """Let markers in flight finish (shutdown); after COMPLETION_WAIT_S the rest are
        cancelled -- their PREPARE is durable, so the next start rolls them forward."""
        tasks = [t for t in self._completions.values() if not t.done()]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=COMPLETION_WAIT_S)
        for task in pending:
            log.error("shutting down with a transaction still completing; the next start rolls it forward")
            task.cancel()
        if pending:
            await asyncio.wait(pending)


def _fenced_by(transit: TxnTransitMetadata) -> tuple[int, AbortReason] | None:
    """The epoch an abort record fenced and why (its producer's epoch before the bump)."""
    reason = transit.abort_reason
    return (transit.producer_epoch - 1, reason) if reason is not None and reason.cause.fences else None


def _fenced_because(meta: TransactionMetadata, producer_epoch: int) -> str:
    """Why ``producer_epoch`` is fenced, when an abort fenced exactly it: a producer
    whose transaction timed out is told so, not only that it is fenced."""
    if meta.fenced is None or meta.fenced[0] != producer_epoch:
        return ""
    return f": {meta.fenced[1].describe()}"
