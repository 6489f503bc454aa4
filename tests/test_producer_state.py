"""ProducerStateManager against the sequence/epoch table in its module docstring.

Headers are real ones: ``read_header(encode_batch(...))`` with the broker's offset
stamped in by ``with_base_offset``. :class:`Appender` drives the manager the way
``PartitionLog`` does (check, then update with the stored header), so every test
goes through the public check/update pair and never pokes at internals.
A state machine then compares the manager with a tiny independent model of the
table over random producers, epochs and sequence choices.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from exactly.storage import producer_snapshot
from exactly.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from exactly.storage.producer_state import (
    BATCHES_TO_RETAIN,
    LATE_TRANSACTION_BUFFER_MS,
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    ProducerStateManager,
)
from exactly.storage.record_batch import (
    MAX_SEQUENCE,
    BatchHeader,
    SimpleRecord,
    encode_batch,
    read_header,
    with_base_offset,
)

PID = 1000
OTHER = 2000
SEQ_SPACE = MAX_SEQUENCE + 1  # sequences live on a ring of 2**31


def header(pid: int, epoch: int, seq: int, count: int = 1, *, offset: int = 0,
           transactional: bool = False, timestamp: int = 1_000) -> BatchHeader:
    raw = encode_batch([SimpleRecord(f"r{i}".encode(), timestamp=timestamp) for i in range(count)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       transactional=transactional)
    return read_header(with_base_offset(raw, offset))


@dataclass(frozen=True)
class Appended:
    base_offset: int
    last_offset: int
    duplicate: bool = False


class Appender:
    """A log of nothing but offsets around a ProducerStateManager, appending as
    ``PartitionLog.append_data`` / ``append_end_txn_marker`` do."""

    def __init__(self, state: ProducerStateManager | None = None, next_offset: int = 0) -> None:
        self.state = state or ProducerStateManager()
        self.next_offset = next_offset

    def append(self, pid: int, epoch: int, seq: int, count: int = 1, *,
               transactional: bool = False, timestamp: int = 1_000) -> Appended:
        incoming = header(pid, epoch, seq, count, transactional=transactional, timestamp=timestamp)
        duplicate = self.state.check_data_batch(incoming)
        if duplicate is not None:
            return Appended(duplicate.first_offset, duplicate.last_offset, duplicate=True)
        stored = header(pid, epoch, seq, count, offset=self.next_offset,
                        transactional=transactional, timestamp=timestamp)
        self.state.update_data_batch(stored)
        self.next_offset = stored.next_offset
        return Appended(stored.base_offset, stored.last_offset)

    def skip(self, n: int) -> None:
        """Other producers' (non-idempotent) batches take ``n`` offsets."""
        self.next_offset += n

    def marker(self, pid: int, epoch: int, coordinator_epoch: int = 0, *, commit: bool = True,
               timestamp: int = 2_000) -> CompletedTxn:
        self.state.check_end_txn_marker(pid, epoch, coordinator_epoch)
        offset = self.next_offset
        self.next_offset += 1
        return self.state.update_end_txn_marker(pid, epoch, coordinator_epoch, commit, offset,
                                                timestamp)


def assert_rejected(log: Appender, error: type[KafkaError], pid: int, epoch: int, seq: int,
                    count: int = 1, **kwargs: object) -> None:
    """The batch raises ``error`` in the check, and neither state nor offsets move."""
    before = log.state.fingerprint(), log.state.ongoing_transactions(), log.next_offset
    with pytest.raises(error) as caught:
        log.append(pid, epoch, seq, count, **kwargs)
    assert type(caught.value) is error
    assert (log.state.fingerprint(), log.state.ongoing_transactions(), log.next_offset) == before


def retained(state: ProducerStateManager, pid: int) -> list[tuple[int, int, int, int]]:
    """(first seq, last seq, first offset, last offset) of each retained batch, oldest first."""
    return [(b.first_seq, b.last_seq, b.first_offset, b.last_offset)
            for b in state.producers[pid].batches]


def load_at_sequence(last_seq: int, epoch: int = 0, last_offset: int = 99) -> Appender:
    """A manager that knows PID with one retained single-record batch ending at
    ``last_seq`` -- how a snapshot brings back a producer deep into its sequence."""
    state = ProducerStateManager()
    state.load([ProducerStateEntry(PID, epoch, batches=deque(
        [BatchMetadata(last_seq=last_seq, last_offset=last_offset, offset_delta=0)],
        maxlen=BATCHES_TO_RETAIN))])
    return Appender(state, next_offset=last_offset + 1)


# --- unknown producer ----------------------------------------------------------


def test_unknown_producer_starting_at_sequence_zero_is_appended_and_becomes_known() -> None:
    log = Appender()
    assert log.append(PID, 3, 0, count=2) == Appended(0, 1)
    entry = log.state.producers[PID]
    assert entry.producer_epoch == 3
    assert entry.last_seq == 1
    assert entry.last_data_offset == 1
    assert log.append(PID, 3, 2) == Appended(2, 2)


@pytest.mark.parametrize("seq", [1, 7, MAX_SEQUENCE])
def test_unknown_producer_not_starting_at_zero_is_unknown_producer_id(seq: int) -> None:
    log = Appender()
    log.append(OTHER, 0, 0)
    assert_rejected(log, UnknownProducerIdError, PID, 0, seq)
    assert PID not in log.state.producers
    assert UnknownProducerIdError.code == 59


# --- epochs --------------------------------------------------------------------


@pytest.mark.parametrize("seq", [0, 1, 2, 5])
def test_older_epoch_is_invalid_producer_epoch(seq: int) -> None:
    """Whatever the sequence -- even one that was in sequence, or a retry of a batch
    the old epoch really wrote -- a batch from an older epoch is fenced."""
    log = Appender()
    log.append(PID, 0, 0)
    log.append(PID, 0, 1)
    log.append(PID, 1, 0)
    assert_rejected(log, InvalidProducerEpochError, PID, 0, seq)
    assert InvalidProducerEpochError.code == 47


def test_higher_epoch_at_sequence_zero_is_appended_and_forgets_older_batches() -> None:
    log = Appender()
    for seq in range(3):
        log.append(PID, 0, seq)
    # Same range as the old epoch's first batch, but a new epoch: new data, not a retry.
    assert log.append(PID, 1, 0) == Appended(3, 3)
    assert log.state.producers[PID].producer_epoch == 1
    assert retained(log.state, PID) == [(0, 0, 3, 3)]
    # The new epoch continues from its own batch, not from the old epoch's sequence 2.
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 1, 3)
    assert log.append(PID, 1, 1) == Appended(4, 4)


@pytest.mark.parametrize("seq", [1, 3, 4, MAX_SEQUENCE])
def test_higher_epoch_not_at_sequence_zero_is_out_of_order(seq: int) -> None:
    log = Appender()
    for s in range(3):
        log.append(PID, 0, s)
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 1, seq)
    assert log.state.producers[PID].producer_epoch == 0


# --- duplicates ------------------------------------------------------------------

# Seven batches of different sizes, so every sequence range is distinct.
SIZES = [1, 2, 3, 1, 4, 2, 3]


def seven_batches() -> tuple[Appender, list[tuple[int, int, Appended]]]:
    """(log, [(first seq, count, where it went)]) after appending SIZES from PID,
    interleaved with other writers so offsets and sequences differ."""
    log = Appender()
    batches = []
    seq = 0
    for count in SIZES:
        log.skip(2)
        batches.append((seq, count, log.append(PID, 0, seq, count)))
        seq += count
    return log, batches


@pytest.mark.parametrize("age", range(BATCHES_TO_RETAIN))
def test_retry_of_each_of_the_last_five_batches_answers_its_original_offsets(age: int) -> None:
    log, batches = seven_batches()
    seq, count, original = batches[-1 - age]
    before = log.state.fingerprint(), log.next_offset
    retry = log.append(PID, 0, seq, count)
    assert retry == Appended(original.base_offset, original.last_offset, duplicate=True)
    assert (log.state.fingerprint(), log.next_offset) == before


def test_sixth_oldest_batch_is_no_longer_a_duplicate() -> None:
    log, batches = seven_batches()
    seq, count, _ = batches[-1 - BATCHES_TO_RETAIN]
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 0, seq, count)


def test_only_the_last_five_batches_are_retained() -> None:
    log, batches = seven_batches()
    assert len(log.state.producers[PID].batches) == BATCHES_TO_RETAIN
    assert retained(log.state, PID) == [
        (seq, seq + count - 1, a.base_offset, a.last_offset) for seq, count, a in batches[-5:]]


@pytest.mark.parametrize("seq,count", [(3, 2), (3, 4), (4, 2), (2, 2)])
def test_retry_must_match_a_whole_sequence_range(seq: int, count: int) -> None:
    """Batches (0), (1-2), (3-5): a range that only overlaps one is out of order."""
    log = Appender()
    log.append(PID, 0, 0, 1)
    log.append(PID, 0, 1, 2)
    log.append(PID, 0, 3, 3)
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 0, seq, count)


def test_retry_is_checked_before_the_open_transaction() -> None:
    """A transactional batch retried while its transaction is open is a duplicate,
    and so is a non-transactional retry of a batch written before the transaction."""
    log = Appender()
    plain = log.append(PID, 0, 0)
    txn = log.append(PID, 0, 1, transactional=True)
    assert log.append(PID, 0, 1, transactional=True) == Appended(txn.base_offset, txn.last_offset, True)
    assert log.append(PID, 0, 0) == Appended(plain.base_offset, plain.last_offset, True)


# --- sequences -----------------------------------------------------------------------


def test_in_sequence_batches_are_appended() -> None:
    log = Appender()
    assert log.append(PID, 0, 0, 3) == Appended(0, 2)
    log.skip(5)
    assert log.append(PID, 0, 3, 1) == Appended(8, 8)
    assert log.append(PID, 0, 4, 2) == Appended(9, 10)
    assert log.state.producers[PID].last_seq == 5


@pytest.mark.parametrize("seq", [7, 8, 100, MAX_SEQUENCE], ids=["gap1", "gap2", "far", "max"])
def test_gap_in_sequence_is_out_of_order(seq: int) -> None:
    log = Appender()
    log.append(PID, 0, 0, 3)
    log.append(PID, 0, 3, 3)
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 0, seq)
    assert OutOfOrderSequenceNumberError.code == 45


@pytest.mark.parametrize("seq,count", [(5, 1), (4, 1), (1, 1), (0, 2), (4, 3)])
def test_sequence_going_backwards_is_out_of_order(seq: int, count: int) -> None:
    log = Appender()
    log.append(PID, 0, 0, 3)
    log.append(PID, 0, 3, 3)
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 0, seq, count)


def test_batch_crossing_the_sequence_wrap_is_appended_and_continues_at_its_end() -> None:
    log = load_at_sequence(MAX_SEQUENCE - 3)
    # sequences MAX-2, MAX-1, MAX, 0, 1
    crossing = log.append(PID, 0, MAX_SEQUENCE - 2, 5)
    assert crossing == Appended(100, 104)
    assert log.state.producers[PID].last_seq == 1
    assert retained(log.state, PID)[-1] == (MAX_SEQUENCE - 2, 1, 100, 104)
    # A retry of the crossing batch is recognised across the wrap.
    assert log.append(PID, 0, MAX_SEQUENCE - 2, 5) == Appended(100, 104, duplicate=True)
    # Sequence 2 is next; restarting at 0 or continuing past MAX is out of order.
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 0, 0)
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 0, MAX_SEQUENCE)
    assert log.append(PID, 0, 2) == Appended(105, 105)


def test_batch_ending_at_max_sequence_is_followed_by_sequence_zero() -> None:
    log = load_at_sequence(MAX_SEQUENCE - 3)
    assert log.append(PID, 0, MAX_SEQUENCE - 2, 3) == Appended(100, 102)
    assert log.state.producers[PID].last_seq == MAX_SEQUENCE
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 0, 1)
    assert log.append(PID, 0, 0, 2) == Appended(103, 104)
    assert log.append(PID, 0, 2) == Appended(105, 105)
    # Both sides of the wrap are still retries of what was written.
    assert log.append(PID, 0, MAX_SEQUENCE - 2, 3) == Appended(100, 102, duplicate=True)
    assert log.append(PID, 0, 0, 2) == Appended(103, 104, duplicate=True)


def test_batch_starting_at_max_sequence_after_max_minus_one() -> None:
    log = load_at_sequence(MAX_SEQUENCE - 1)
    assert log.append(PID, 0, MAX_SEQUENCE, 1) == Appended(100, 100)
    assert log.append(PID, 0, 0, 1) == Appended(101, 101)


# --- transactions ----------------------------------------------------------------------


def test_non_transactional_batch_while_a_transaction_is_open_is_invalid_txn_state() -> None:
    log = Appender()
    log.append(PID, 0, 0, transactional=True)
    assert_rejected(log, InvalidTxnStateError, PID, 0, 1)
    assert InvalidTxnStateError.code == 48
    # Nothing was consumed: the transactional batch at sequence 1 still fits.
    assert log.append(PID, 0, 1, transactional=True) == Appended(1, 1)


def test_transactional_batches_open_a_transaction_at_their_first_offset() -> None:
    log = Appender()
    log.append(PID, 0, 0)
    assert log.state.first_unstable_offset() is None
    assert log.state.producers[PID].current_txn_first_offset is None
    log.skip(4)
    assert log.append(PID, 0, 1, 2, transactional=True) == Appended(5, 6)
    log.append(PID, 0, 3, transactional=True)
    assert log.state.producers[PID].current_txn_first_offset == 5
    assert log.state.ongoing_transactions() == [(PID, 5)]
    assert log.state.first_unstable_offset() == 5


def test_transactions_of_several_producers_are_ordered_by_first_offset() -> None:
    log = Appender()
    log.skip(3)
    log.append(OTHER, 0, 0, transactional=True)
    log.append(PID, 0, 0, transactional=True)
    assert log.state.ongoing_transactions() == [(OTHER, 3), (PID, 4)]
    assert log.state.first_unstable_offset() == 3


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_marker_ends_the_transaction_with_its_first_and_last_offsets(commit: bool) -> None:
    log = Appender()
    log.append(PID, 0, 0)
    log.skip(2)
    log.append(PID, 0, 1, 2, transactional=True)  # offsets 3-4
    log.skip(1)
    log.append(PID, 0, 3, transactional=True)     # offset 6
    completed = log.marker(PID, 0, coordinator_epoch=4, commit=commit)
    assert completed == CompletedTxn(PID, first_offset=3, last_offset=7, is_aborted=not commit)
    entry = log.state.producers[PID]
    assert entry.current_txn_first_offset is None
    assert entry.coordinator_epoch == 4
    assert entry.last_timestamp == 2_000
    assert log.state.ongoing_transactions() == []
    # Non-transactional batches are fine again; the next transaction opens where it starts.
    assert log.append(PID, 0, 4) == Appended(8, 8)
    assert log.append(PID, 0, 5, transactional=True) == Appended(9, 9)
    assert log.state.ongoing_transactions() == [(PID, 9)]


def test_marker_without_an_open_transaction_completes_an_empty_one_at_the_marker() -> None:
    log = Appender()
    log.append(PID, 0, 0)
    assert log.marker(PID, 0, commit=False) == CompletedTxn(PID, 1, 1, is_aborted=True)


def test_marker_for_an_unknown_producer_creates_it() -> None:
    log = Appender()
    assert log.marker(PID, 2, coordinator_epoch=5) == CompletedTxn(PID, 0, 0, is_aborted=False)
    entry = log.state.producers[PID]
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.last_seq) == (2, 5, -1)
    # Known now, with epoch 2 and no batches: only sequence 0 fits.
    assert_rejected(log, OutOfOrderSequenceNumberError, PID, 2, 3)
    assert_rejected(log, InvalidProducerEpochError, PID, 1, 0)
    assert log.append(PID, 2, 0) == Appended(1, 1)


def test_marker_with_older_producer_epoch_is_invalid_producer_epoch() -> None:
    log = Appender()
    log.append(PID, 3, 0, transactional=True)
    before = log.state.fingerprint(), log.state.ongoing_transactions()
    with pytest.raises(InvalidProducerEpochError):
        log.state.check_end_txn_marker(PID, 2, 0)
    assert (log.state.fingerprint(), log.state.ongoing_transactions()) == before


def test_marker_from_older_coordinator_epoch_is_coordinator_fenced() -> None:
    log = Appender()
    log.append(PID, 0, 0, transactional=True)
    log.marker(PID, 0, coordinator_epoch=5)
    log.append(PID, 0, 1, transactional=True)
    with pytest.raises(TransactionCoordinatorFencedError) as caught:
        log.state.check_end_txn_marker(PID, 0, 4)
    assert caught.value.code == 52
    assert log.state.ongoing_transactions() == [(PID, 2)]
    # The same coordinator epoch and a newer one are both fine.
    log.state.check_end_txn_marker(PID, 0, 5)
    log.state.check_end_txn_marker(PID, 0, 6)


def test_marker_with_higher_epoch_bumps_the_epoch_and_fences_the_zombie() -> None:
    log = Appender()
    log.append(PID, 0, 0, transactional=True)
    log.append(PID, 0, 1, transactional=True)
    # The coordinator aborts on behalf of a new incarnation with epoch 1.
    assert log.marker(PID, 1, commit=False) == CompletedTxn(PID, 0, 2, is_aborted=True)
    entry = log.state.producers[PID]
    assert entry.producer_epoch == 1
    assert not entry.batches
    # The zombie at epoch 0: its next batch, its retry and its marker are all fenced.
    assert_rejected(log, InvalidProducerEpochError, PID, 0, 2, transactional=True)
    assert_rejected(log, InvalidProducerEpochError, PID, 0, 1, transactional=True)
    with pytest.raises(InvalidProducerEpochError):
        log.state.check_end_txn_marker(PID, 0, 0)
    # The new incarnation starts at sequence 0 in the bumped epoch.
    assert log.append(PID, 1, 0, transactional=True) == Appended(3, 3)


# --- last stable offset ------------------------------------------------------------------


def test_completed_transaction_holds_the_lso_until_the_high_watermark_passes_its_marker() -> None:
    log = Appender()
    log.skip(3)
    log.append(PID, 0, 0, transactional=True)  # offset 3
    log.skip(2)
    completed = log.marker(PID, 0)             # offset 6
    assert completed.last_offset == 6
    assert log.state.ongoing_transactions() == []
    assert log.state.first_unstable_offset() == 3
    log.state.on_high_watermark(5)
    assert log.state.first_unstable_offset() == 3
    log.state.on_high_watermark(6)             # the marker itself is not below it yet
    assert log.state.first_unstable_offset() == 3
    log.state.on_high_watermark(7)
    assert log.state.first_unstable_offset() is None


def test_first_unstable_offset_is_the_earliest_of_open_and_undurable() -> None:
    log = Appender()
    log.append(PID, 0, 0, transactional=True)    # 0
    log.append(OTHER, 0, 0, transactional=True)  # 1
    log.marker(PID, 0)                           # 2: PID done, not durable
    assert log.state.first_unstable_offset() == 0
    log.state.on_high_watermark(3)
    assert log.state.first_unstable_offset() == 1
    log.append(PID, 0, 1, transactional=True)    # 3: a new one behind OTHER's
    assert log.state.first_unstable_offset() == 1
    log.marker(OTHER, 0, commit=False)           # 4
    log.state.on_high_watermark(5)
    assert log.state.first_unstable_offset() == 3


def test_last_stable_offset_after_is_the_next_other_open_transaction() -> None:
    log = Appender()
    log.append(PID, 0, 0, transactional=True)      # 0
    log.skip(1)
    log.append(OTHER, 0, 0, transactional=True)    # 2
    log.append(3000, 0, 0, transactional=True)     # 3
    first = log.marker(PID, 0, commit=False)       # 4
    assert log.state.last_stable_offset_after(first) == 2
    second = log.marker(3000, 0, commit=False)     # 5
    assert log.state.last_stable_offset_after(second) == 2
    third = log.marker(OTHER, 0, commit=False)     # 6
    assert log.state.last_stable_offset_after(third) == 7


def test_last_stable_offset_after_ignores_the_completed_producers_own_transaction() -> None:
    """Asked before the marker is recorded (as Kafka does), the producer's own open
    transaction is not "another" one."""
    log = Appender()
    log.append(PID, 0, 0, transactional=True)
    pending = CompletedTxn(PID, 0, 1, is_aborted=True)
    assert log.state.last_stable_offset_after(pending) == 2


# --- expiry and lifecycle ------------------------------------------------------------------


def test_remove_expired_drops_idle_producers_without_open_transactions() -> None:
    log = Appender()
    log.append(1, 0, 0, timestamp=1_000)
    log.append(2, 0, 0, timestamp=1_001)
    log.append(3, 0, 0, timestamp=500, transactional=True)
    log.append(4, 0, 0, timestamp=5_000)
    assert sorted(log.state.remove_expired(now_ms=2_000, expiration_ms=1_000)) == [1]
    assert sorted(log.state.producers) == [2, 3, 4]
    assert log.state.remove_expired(now_ms=2_000, expiration_ms=1_000) == []
    # Expired means unknown: only a fresh sequence 0 is accepted.
    assert_rejected(log, UnknownProducerIdError, 1, 0, 1)
    log.append(1, 0, 0, timestamp=2_000)
    # The open transaction keeps producer 3 however old it is, until it ends.
    assert 3 not in log.state.remove_expired(now_ms=10**9, expiration_ms=1_000)
    log.marker(3, 0, timestamp=10_000)
    assert 3 in log.state.remove_expired(now_ms=11_000, expiration_ms=1_000)


def test_load_restores_open_transactions() -> None:
    log = Appender()
    log.append(PID, 0, 0)
    log.append(OTHER, 0, 0, transactional=True)
    restored = ProducerStateManager()
    restored.load(producer_snapshot.decode(producer_snapshot.encode(list(log.state))))
    assert restored.fingerprint() == log.state.fingerprint()
    assert restored.ongoing_transactions() == [(OTHER, 1)]
    assert restored.first_unstable_offset() == 1
    restored.truncate()
    assert restored.fingerprint() == {} and restored.first_unstable_offset() is None


# --- the table as an independent model ------------------------------------------------------


@dataclass
class ModelProducer:
    epoch: int
    # (first seq, last seq, first offset, last offset), oldest first, at most 5
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)


def model_outcome(producer: ModelProducer | None, epoch: int, first: int, count: int):
    """The table, written out: ("append",), ("duplicate", first offset, last offset)
    or the error class."""
    last = (first + count - 1) % SEQ_SPACE
    if producer is None:
        return ("append",) if first == 0 else UnknownProducerIdError
    if epoch < producer.epoch:
        return InvalidProducerEpochError
    if epoch > producer.epoch:
        return ("append",) if first == 0 else OutOfOrderSequenceNumberError
    for b_first, b_last, b_first_offset, b_last_offset in producer.batches:
        if (b_first, b_last) == (first, last):
            return ("duplicate", b_first_offset, b_last_offset)
    expected = (producer.batches[-1][1] + 1) % SEQ_SPACE if producer.batches else 0
    return ("append",) if first == expected else OutOfOrderSequenceNumberError


PIDS = [11, 12, 13]


class ProducerStateMachine(RuleBasedStateMachine):
    """ProducerStateManager and the model must agree on every data batch."""

    def __init__(self) -> None:
        super().__init__()
        self.log = Appender()
        self.model: dict[int, ModelProducer] = {}

    @initialize(start=st.lists(
        st.none() | st.tuples(st.integers(0, 3),
                              st.integers(0, 20) | st.integers(MAX_SEQUENCE - 6, MAX_SEQUENCE)),
        min_size=len(PIDS), max_size=len(PIDS)))
    def start(self, start: list[tuple[int, int] | None]) -> None:
        """Each producer unknown, or loaded (as from a snapshot) with one batch that
        ended at some sequence, possibly close to the wrap."""
        entries = []
        for offset, (pid, known) in enumerate(zip(PIDS, start)):
            if known is None:
                continue
            epoch, last_seq = known
            entries.append(ProducerStateEntry(pid, epoch, batches=deque(
                [BatchMetadata(last_seq, offset, 0)], maxlen=BATCHES_TO_RETAIN)))
            self.model[pid] = ModelProducer(epoch, [(last_seq, last_seq, offset, offset)])
        self.log.state.load(entries)
        self.log.next_offset = len(PIDS)

    def produce(self, pid: int, epoch: int, first: int, count: int) -> None:
        expected = model_outcome(self.model.get(pid), epoch, first, count)
        event(expected[0] if isinstance(expected, tuple) else expected.__name__)
        if first + count - 1 > MAX_SEQUENCE:
            event("range crosses the sequence wrap")
        try:
            got = self.log.append(pid, epoch, first, count)
        except KafkaError as exc:
            assert type(exc) is expected, (pid, epoch, first, count, expected, exc)
            return
        if got.duplicate:
            assert expected == ("duplicate", got.base_offset, got.last_offset), (
                pid, epoch, first, count, expected, got)
            return
        assert expected == ("append",), (pid, epoch, first, count, expected, got)
        producer = self.model.get(pid)
        if producer is None or epoch != producer.epoch:
            producer = self.model[pid] = ModelProducer(epoch)
        producer.batches.append((first, (first + count - 1) % SEQ_SPACE,
                                 got.base_offset, got.last_offset))
        del producer.batches[:-5]  # the table's "last 5", not the module's constant

    def current(self, pid: int) -> tuple[int, int]:
        """(epoch, next expected sequence) of ``pid`` in the model."""
        producer = self.model.get(pid)
        if producer is None:
            return 0, 0
        if not producer.batches:
            return producer.epoch, 0
        return producer.epoch, (producer.batches[-1][1] + 1) % SEQ_SPACE

    @rule(pid=st.sampled_from(PIDS), count=st.integers(1, 4))
    def next_in_sequence(self, pid: int, count: int) -> None:
        epoch, seq = self.current(pid)
        self.produce(pid, epoch, seq, count)

    @rule(pid=st.sampled_from(PIDS), data=st.data())
    def retry_recent(self, pid: int, data: st.DataObject) -> None:
        producer = self.model.get(pid)
        if producer is None or not producer.batches:
            return
        first, last, _, _ = data.draw(st.sampled_from(producer.batches))
        self.produce(pid, producer.epoch, first, (last - first) % SEQ_SPACE + 1)

    @rule(pid=st.sampled_from(PIDS), delta=st.integers(1, 12), count=st.integers(1, 4),
          forward=st.booleans())
    def wrong_sequence(self, pid: int, delta: int, count: int, forward: bool) -> None:
        """A gap ahead of, or a step back behind, the expected sequence."""
        epoch, seq = self.current(pid)
        seq = (seq + delta) % SEQ_SPACE if forward else (seq - delta) % SEQ_SPACE
        self.produce(pid, epoch, seq, count)

    @rule(pid=st.sampled_from(PIDS), back=st.integers(1, 2), data=st.data())
    def old_epoch(self, pid: int, back: int, data: st.DataObject) -> None:
        epoch, seq = self.current(pid)
        seq = data.draw(st.sampled_from([seq, 0, (seq - 1) % SEQ_SPACE]))
        self.produce(pid, max(epoch - back, 0), seq, 1)

    @rule(pid=st.sampled_from(PIDS), up=st.integers(1, 2),
          seq=st.just(0) | st.integers(1, 5), count=st.integers(1, 3))
    def new_epoch(self, pid: int, up: int, seq: int, count: int) -> None:
        epoch, _ = self.current(pid)
        self.produce(pid, epoch + up, seq, count)

    @rule(pid=st.sampled_from(PIDS), epoch=st.integers(0, 4),
          seq=st.integers(0, 8) | st.integers(MAX_SEQUENCE - 3, MAX_SEQUENCE),
          count=st.integers(1, 4))
    def anything(self, pid: int, epoch: int, seq: int, count: int) -> None:
        self.produce(pid, epoch, seq, count)

    @rule(others=st.integers(1, 3))
    def other_writers(self, others: int) -> None:
        self.log.skip(others)

    @precondition(lambda self: bool(self.model))
    @rule()
    def restart_from_snapshot(self) -> None:
        """A snapshot round trip must not change any later outcome."""
        restored = ProducerStateManager()
        restored.load(producer_snapshot.decode(producer_snapshot.encode(list(self.log.state))))
        self.log.state = restored

    @invariant()
    def state_matches_model(self) -> None:
        assert set(self.log.state.producers) == set(self.model)
        for pid, producer in self.model.items():
            assert self.log.state.producers[pid].producer_epoch == producer.epoch
            assert retained(self.log.state, pid) == producer.batches


ProducerStateMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30,
                                                  deadline=None)
TestProducerStateMachine = ProducerStateMachine.TestCase


# -- late transactions (Kafka's PartitionsWithLateTransactionsCount) ----------------------------


def test_a_transaction_is_late_by_its_oldest_open_producer_s_last_write() -> None:
    """Kafka's hasLateTransaction: the producer of the oldest open transaction (the one
    holding the LSO) silent for more than max timeout + LATE_TRANSACTION_BUFFER_MS; a
    younger transaction's recent writes do not make the partition look healthy."""
    max_timeout, late_after = 60_000, 60_000 + LATE_TRANSACTION_BUFFER_MS
    log = Appender()
    assert not log.state.has_late_transaction(10**12, max_timeout)
    log.append(PID, 0, 0, transactional=True, timestamp=1_000)  # the oldest: holds the LSO
    log.append(OTHER, 0, 0, transactional=True, timestamp=1_000 + late_after)
    assert not log.state.has_late_transaction(1_000 + late_after, max_timeout)  # Kafka's test is ">"
    assert log.state.has_late_transaction(1_000 + late_after + 1, max_timeout)
    log.marker(PID, 0)  # the oldest ends: the younger one's producer wrote just now
    assert not log.state.has_late_transaction(1_000 + late_after + 1, max_timeout)
    log.marker(OTHER, 0)
    assert not log.state.has_late_transaction(10**12, max_timeout)
