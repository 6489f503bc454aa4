"""The one aborted-transaction tracker against a reference model.

For random logs of interleaved transactional and non-transactional batches, with
transactions ended by COMMIT or ABORT markers (or left open), the tracker's verdict
on every data batch -- fed the ``.txnindex`` entries of the range, as fetch, the
cleaner, lag counts and the console do -- is the reference's: the batch belongs to a
transaction whose marker is an ABORT.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.aborted_transactions import AbortedTransactionTracker
from storage.record_batch import CONTROL_BIT, NO_PRODUCER_ID, TRANSACTIONAL_BIT, BatchHeader
from storage.txn_index import AbortedTxn

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

