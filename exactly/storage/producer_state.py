"""Producer state of one partition: who wrote what, and which transactions are open.

For each producer id the partition remembers its epoch, the last
``BATCHES_TO_RETAIN`` (5) batches it appended (sequence range and offsets, for
duplicate detection of the up to 5 requests a client keeps in flight), the
coordinator epoch of its last marker, the first offset of its open transaction and
its last timestamp. The log is the source of truth: this state is rebuilt by
replaying batch headers, and checkpointed to ``.snapshot`` files
(``exactly/storage/producer_snapshot.py``).

Sequence and epoch rules for a data batch from producer ``pid`` with epoch ``e``
and sequence range ``[first, last]`` -- the seed's ProduceRequest handling as
today's Kafka applies it (``ProducerAppendInfo``):

=====================================  ==========================================
state of ``pid`` on this partition      outcome
=====================================  ==========================================
unknown, ``first == 0``                 append; the producer becomes known
unknown, ``first != 0``                 UNKNOWN_PRODUCER_ID (59)
``e`` < current epoch                   INVALID_PRODUCER_EPOCH (47)
``e`` == current, same range as one     duplicate: answer the original base offset,
of the last 5 batches                   append nothing
``e`` == current, ``first`` ==          append
last sequence + 1 (wrapping at
2**31-1 to 0)
``e`` == current, anything else         OUT_OF_ORDER_SEQUENCE_NUMBER (45)
``e`` > current, ``first == 0``         append; the older epoch's batches are
                                        forgotten (clients bump their own epoch)
``e`` > current, ``first != 0``         OUT_OF_ORDER_SEQUENCE_NUMBER (45)
=====================================  ==========================================

The unknown-producer row is a choice. Kafka >= 2.5 accepts any sequence there
(to spare clients a round trip after retention deleted a producer's batches),
older brokers answered UNKNOWN_PRODUCER_ID, and the seed says InvalidSequence.
We answer UNKNOWN_PRODUCER_ID: every client in scope recovers from it by resetting
its sequence (KIP-360 epoch bump), and accepting a mid-stream sequence from a
producer we know nothing about could append a retry whose original was already
written -- a silent duplicate, which is what this broker exists to prevent.

A data batch without the transactional bit from a producer with an open
transaction is INVALID_TXN_STATE, as in Kafka.

End-transaction markers (``WriteTxnMarkers``): a marker with an older producer
epoch is INVALID_PRODUCER_EPOCH; one from a coordinator whose epoch is older than
the last one seen for the producer is TRANSACTION_COORDINATOR_FENCED (a zombie
coordinator). A marker ends the producer's open transaction; the completed
transaction (first offset, marker offset, aborted or not) goes to the caller,
which records aborts in ``.txnindex``.

Every check happens in ``check_*`` before anything is written; ``update_*``
applies an append after the log write succeeded, so a failed write never leaves
state behind.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from exactly.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from exactly.storage.record_batch import MAX_SEQUENCE, NO_SEQUENCE, BatchHeader

#: Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: clients keep up to 5 requests in flight.
BATCHES_TO_RETAIN = 5

NO_OFFSET = -1
#: Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS: a transaction is *late* once its
#: producer has been silent this long past transaction.max.timeout.ms -- after the
#: coordinator's own timeout abort should have ended it
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000


def next_sequence(sequence: int) -> int:
    """The sequence after ``sequence``; wraps from 2**31-1 to 0 (Kafka's incrementSequence)."""
    return 0 if sequence == MAX_SEQUENCE else sequence + 1


def sequence_minus(sequence: int, delta: int) -> int:
    """``sequence - delta`` on the wrapping sequence ring (Kafka's decrementSequence)."""
    return sequence - delta if sequence >= delta else MAX_SEQUENCE - (delta - sequence) + 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What duplicate detection needs of one appended data batch."""

    last_seq: int
    last_offset: int
    offset_delta: int

    @property
    def first_seq(self) -> int:
        return sequence_minus(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerStateEntry:
    """One producer id's state on one partition."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == header.last_sequence:
                return batch
        return None

    def key(self) -> tuple[object, ...]:
        """Everything that defines this entry, for equality checks between rebuilds."""
        return (self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
                self.current_txn_first_offset, tuple(self.batches))


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateManager:
    """All producers of one partition, their open transactions, and the
    completed ones whose markers are not yet durable (they still hold the LSO)."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id, for every open transaction
        self._ongoing: dict[int, int] = {}
        # completed, but the marker is not below the high watermark yet
        self._undurable: list[CompletedTxn] = []

    # -- data batches ---------------------------------------------------------

    def check_data_batch(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a producer's batch before it is appended.

        Returns the original batch if ``header`` duplicates one of the last five,
        None if it may be appended; raises the Kafka error otherwise.
        """
        entry = self.producers.get(header.producer_id)
        if entry is None:
            if header.base_sequence != 0:
                raise UnknownProducerIdError(
                    f"no state for producer {header.producer_id} on this partition and its batch "
                    f"starts at sequence {header.base_sequence}, not 0")
            return None
        epoch = header.producer_epoch
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {epoch} is older than current epoch "
                f"{entry.producer_epoch}")
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return duplicate
        if epoch > entry.producer_epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceNumberError(
                    f"producer {header.producer_id} new epoch {epoch} must start at sequence 0, "
                    f"got {header.base_sequence}")
        elif header.base_sequence != next_sequence(entry.last_seq):
            raise OutOfOrderSequenceNumberError(
                f"producer {header.producer_id} epoch {epoch}: expected sequence "
                f"{next_sequence(entry.last_seq)}, got {header.base_sequence}")
        if not header.is_transactional and entry.current_txn_first_offset is not None:
            raise InvalidTxnStateError(
                f"producer {header.producer_id} has an open transaction; expected a transactional batch")
        return None

    def update_data_batch(self, header: BatchHeader) -> None:
        """Record an appended data batch (``header`` carries its assigned offsets)."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(
                header.producer_id, header.producer_epoch)
        elif header.producer_epoch != entry.producer_epoch:
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        entry.batches.append(BatchMetadata(
            last_seq=header.last_sequence, last_offset=header.last_offset,
            offset_delta=header.last_offset_delta))
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = header.base_offset
            self._ongoing[header.base_offset] = header.producer_id

    # -- transaction markers --------------------------------------------------

    def check_end_txn_marker(self, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int) -> None:
        """Validate a COMMIT/ABORT marker before it is appended."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than "
                f"current epoch {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}; "
                f"epoch {entry.coordinator_epoch} was seen already")

    def update_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                              is_commit: bool, offset: int, timestamp: int) -> CompletedTxn:
        """Record an appended marker at ``offset`` and return the transaction it ends."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, producer_epoch)
        elif producer_epoch != entry.producer_epoch:
            entry.producer_epoch = producer_epoch
            entry.batches.clear()
        first_offset = entry.current_txn_first_offset
        if first_offset is None:
            first_offset = offset
        else:
            del self._ongoing[first_offset]
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        completed = CompletedTxn(producer_id, first_offset, offset, is_aborted=not is_commit)
        self._undurable.append(completed)
        return completed

    # -- last stable offset ---------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of a transaction that is open, or ended by a
        marker that is not durable yet; None if there is none."""
        candidates = [txn.first_offset for txn in self._undurable]
        if self._ongoing:
            candidates.append(min(self._ongoing))
        return min(candidates) if candidates else None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is out of the way, for its ``.txnindex`` entry:
        the first offset of the earliest other open transaction (Kafka's
        ``ProducerStateManager.lastStableOffset``)."""
        others = [first for first, pid in self._ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is now below the high watermark."""
        if self._undurable:
            self._undurable = [t for t in self._undurable if t.last_offset >= high_watermark]

    def has_late_transaction(self, now_ms: int, max_transaction_timeout_ms: int) -> bool:
        """Kafka's ``hasLateTransaction``: the producer of the oldest open transaction (the
        one holding the LSO) last wrote here more than ``max_transaction_timeout_ms`` +
        LATE_TRANSACTION_BUFFER_MS ago (by its batches' timestamps, as Kafka measures)."""
        if not self._ongoing:
            return False
        entry = self.producers.get(self._ongoing[min(self._ongoing)])
        last = entry.last_timestamp if entry is not None else -1
        return last > 0 and now_ms - last > max_transaction_timeout_ms + LATE_TRANSACTION_BUFFER_MS

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``(producer id, first offset)`` of every open transaction, by first offset."""
        return sorted(((pid, first) for first, pid in self._ongoing.items()), key=lambda t: t[1])

    # -- lifecycle ------------------------------------------------------------

    def load(self, entries: Iterable[ProducerStateEntry]) -> None:
        """Replace all state with ``entries`` (from a snapshot)."""
        self.producers = {}
        self._ongoing = {}
        self._undurable = []
        for entry in entries:
            self.producers[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                self._ongoing[entry.current_txn_first_offset] = entry.producer_id

    def truncate(self) -> None:
        """Forget everything (before a full rebuild from the log)."""
        self.load(())

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop producers idle for ``producer.id.expiration.ms`` with no open
        transaction; return their ids."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return expired

    def __iter__(self) -> Iterator[ProducerStateEntry]:
        return iter(self.producers.values())

    def fingerprint(self) -> dict[int, tuple[object, ...]]:
        """A comparable picture of the whole state (tests compare rebuilds with it)."""
        return {pid: entry.key() for pid, entry in self.producers.items()}
