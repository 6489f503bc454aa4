"""The one aborted-transaction tracker against a reference model.

For random logs of interleaved transactional and non-transactional batches, with
transactions ended by COMMIT or ABORT markers (or left open), the tracker's verdict
on every data batch -- fed the ``.txnindex`` entries of the range, as fetch, the
cleaner, lag counts and the console do -- is the reference's: the batch belongs to a
transaction whose marker is an ABORT. On a real log, a read_committed fetch delivers,
and the lag counts count, exactly the records the reference says are delivered.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactly.storage import visibility
from exactly.storage.aborted_transactions import AbortedTransactionTracker
from exactly.storage.clock import FakeClock
from exactly.storage.partition_log import PartitionLog
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import CONTROL_BIT, NO_PRODUCER_ID, TRANSACTIONAL_BIT, BatchHeader
from exactly.storage.txn_index import AbortedTxn
from tests.conftest import data_batch
from tests.storage_log import DurableLogs

T = "orders"
TXN_PRODUCERS = (1, 2, 3)
IDEMPOTENT_PRODUCER = 9


@dataclass(frozen=True)
class Batch:
    header: BatchHeader
    #: for a data batch: whether its transaction ended in ABORT (the reference verdict)
    aborted: bool = False
    #: for a marker: whether it is an ABORT
    abort_marker: bool = False


def header(base_offset: int, records: int, producer_id: int, attributes: int) -> BatchHeader:
    return BatchHeader(base_offset=base_offset, batch_length=0, partition_leader_epoch=0, magic=2, crc=0,
                       attributes=attributes, last_offset_delta=records - 1, base_timestamp=0,
                       max_timestamp=0, producer_id=producer_id, producer_epoch=0, base_sequence=0,
                       record_count=records)


# an event: ("data", producer, records) | ("plain", with_pid, records) | ("end", producer, commit)
events = st.lists(st.one_of(
    st.tuples(st.just("data"), st.sampled_from(TXN_PRODUCERS), st.integers(1, 3)),
    st.tuples(st.just("plain"), st.booleans(), st.integers(1, 3)),
    st.tuples(st.just("end"), st.sampled_from(TXN_PRODUCERS), st.booleans()),
), max_size=60)


def build_log(script: list[tuple]) -> tuple[list[Batch], list[AbortedTxn]]:
    """The batches of ``script`` in offset order, each data batch with the reference
    verdict, and the ``.txnindex`` entries of its aborted transactions."""
    offset = 0
    open_txns: dict[int, list[int]] = {}  # producer -> indexes of its open transaction's batches
    first_offsets: dict[int, int] = {}
    batches: list[Batch] = []
    index: list[AbortedTxn] = []
    for kind, who, arg in script:
        if kind == "data":
            open_txns.setdefault(who, []).append(len(batches))
            first_offsets.setdefault(who, offset)
            batches.append(Batch(header(offset, arg, who, TRANSACTIONAL_BIT)))
            offset += arg
        elif kind == "plain":
            batches.append(Batch(header(offset, arg, IDEMPOTENT_PRODUCER if who else NO_PRODUCER_ID, 0)))
            offset += arg
        elif who in open_txns:  # a marker ends an open transaction only
            commit = arg
            if not commit:
                for i in open_txns[who]:
                    batches[i] = Batch(batches[i].header, aborted=True)
                index.append(AbortedTxn(who, first_offsets[who], offset, 0))
            del open_txns[who], first_offsets[who]
            batches.append(Batch(header(offset, 1, who, TRANSACTIONAL_BIT | CONTROL_BIT), abort_marker=not commit))
            offset += 1
    return batches, index


def overlapping(index: list[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    """What ``collect_aborted(start, end)`` returns: the entries overlapping the range."""
    return [txn for txn in index if txn.last_offset >= start and txn.first_offset < end]


@settings(max_examples=300, deadline=None)
@given(script=events, data=st.data())
def test_the_tracker_says_aborted_exactly_for_batches_whose_transaction_ended_in_abort(script, data) -> None:
    batches, index = build_log(script)
    first = data.draw(st.integers(0, len(batches)), label="first batch read")
    read = batches[first:]
    start = read[0].header.base_offset if read else 0
    end = read[-1].header.next_offset if read else 0
    headers_only = data.draw(st.booleans(), label="a walk over headers only")
    tracker = AbortedTransactionTracker.of(overlapping(index, start, end))
    for batch in read:
        marker = None if headers_only or not batch.header.is_control else batch.abort_marker
        verdict = tracker.is_aborted(batch.header, abort_marker=marker)
        assert verdict == batch.aborted, (batch, start)


@settings(max_examples=100, deadline=None)
@given(script=events)
def test_the_fetch_form_of_the_aborted_list_gives_the_same_verdicts(script) -> None:
    """A fetch response carries ``(producer id, first offset)`` pairs, not entries."""
    batches, index = build_log(script)
    tracker = AbortedTransactionTracker((txn.producer_id, txn.first_offset) for txn in index)
    verdicts = [tracker.is_aborted(b.header, abort_marker=b.abort_marker if b.header.is_control else None)
                for b in batches]
    assert verdicts == [b.aborted for b in batches]



def write_log(logs: DurableLogs, script: list[tuple]) -> list[bytes]:
    """Write ``script`` to partition 0 of topic ``T`` -- each data batch's records
    valued by its position in the script -- commit what is left open, and return the
    values a read_committed consumer must receive: those of non-transactional batches
    and of committed transactions, in offset order."""
    sequences: dict[int, int] = {}
    pending: dict[int, list[bytes]] = {}  # producer -> values of its open transaction
    outcome: dict[bytes, bool] = {}  # value -> delivered
    order: list[bytes] = []

    def produce(values: list[bytes], producer: int, transactional: bool) -> None:
        sequence = sequences.get(producer, 0) if producer >= 0 else -1
        logs.produce(T, 0, data_batch(values, producer, 0 if producer >= 0 else -1, sequence, transactional))
        if producer >= 0:
            sequences[producer] = sequence + len(values)
        order.extend(values)

    for n, (kind, who, arg) in enumerate(script):
        if kind == "data":
            values = [b"%d.%d" % (n, i) for i in range(arg)]
            produce(values, who, True)
            pending.setdefault(who, []).extend(values)
        elif kind == "plain":
            values = [b"%d.%d" % (n, i) for i in range(arg)]
            produce(values, IDEMPOTENT_PRODUCER if who else -1, False)
            outcome.update(dict.fromkeys(values, True))
        elif who in pending:
            logs.write_txn_marker(T, 0, who, 0, 0, commit=arg)
            outcome.update(dict.fromkeys(pending.pop(who), arg))
    for who, values in pending.items():
        logs.write_txn_marker(T, 0, who, 0, 0, commit=True)
        outcome.update(dict.fromkeys(values, True))
    return [value for value in order if outcome[value]]


def consumed(log: PartitionLog) -> list[bytes]:
    """What a read_committed consumer fetches from the log start to the LSO."""
    values: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.last_stable_offset:
        result = log.read(offset, 1 << 10, read_committed=True)
        values.extend(r.value for r in read_records(result.records, offset, True,
                                                    result.aborted_transactions or ()).records)
        offset = result.next_offset
    return values


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=events)
def test_fetch_and_lag_deliver_and_count_what_the_reference_says(script) -> None:
    """A real log: a read_committed fetch delivers exactly the reference's records,
    and the lag counts -- kept as batches arrive, and counted from disk after a
    restart -- count exactly them."""
    with tempfile.TemporaryDirectory() as data:
        with DurableLogs(data, clock=FakeClock()) as logs:
            logs.create_topic(T, 1, {"segment.bytes": 600})
            expected = write_log(logs, script)
            log = logs.log(T)
            assert consumed(log) == expected
            assert visibility.data_records(log, log.log_start_offset, log.last_stable_offset) == (len(expected), True)
        with DurableLogs(data, clock=FakeClock()) as logs:
            log = logs.log(T)
            assert consumed(log) == expected
            assert visibility.data_records(log, log.log_start_offset, log.last_stable_offset) == (len(expected), True)
