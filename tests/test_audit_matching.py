"""How the audit ties a producer's spans on different partitions to one transaction
(``exactly.coordinator.offsets_chain.match_spans``): by the producer id's sequence of decided
transactions, from the newest, whatever epochs the spans carry."""

from __future__ import annotations

import pytest

from exactly.coordinator.offsets_chain import DecidedTransaction, match_spans
from exactly.storage.log_scan import Marker, TransactionSpan
from exactly.storage.record_batch import ControlType

pytestmark = pytest.mark.timeout(10)

PID = 7
OFFSETS, OUT = ("__consumer_offsets", 1), ("out", 0)


def decided(epoch: int, *partitions: tuple[str, int], complete: bool = True) -> DecidedTransaction:
    return DecidedTransaction("t", PID, epoch, ControlType.COMMIT, frozenset(partitions), None, 0, complete)


def sealed(offset: int, epoch: int = 0) -> TransactionSpan:
    return TransactionSpan(PID, (), Marker(offset, ControlType.COMMIT, epoch, 0))


def still_open() -> TransactionSpan:
    return TransactionSpan(PID, (), None)


def test_each_span_goes_to_the_transaction_at_its_place_in_the_producers_sequence() -> None:
    first, second, third = decided(0, OFFSETS, OUT), decided(0, OUT), decided(3, OFFSETS, OUT)
    matched = match_spans([first, second, third], {OFFSETS: [sealed(10), sealed(20, epoch=3)],
                                                   OUT: [sealed(5), sealed(8), sealed(12, epoch=3)]})
    assert matched == {(PID, *OFFSETS, 10): first, (PID, *OUT, 5): first, (PID, *OUT, 8): second,
                       (PID, *OFFSETS, 20): third, (PID, *OUT, 12): third}


def test_a_compacted_beginning_leaves_only_the_oldest_spans_unmatched() -> None:
    newest = decided(0, OFFSETS, OUT)  # the records of the older transactions were compacted away
    matched = match_spans([newest], {OFFSETS: [sealed(10), sealed(20)], OUT: [sealed(5), sealed(12)]})
    assert matched == {(PID, *OFFSETS, 20): newest, (PID, *OUT, 12): newest}


def test_a_transaction_writing_its_markers_seals_only_where_the_marker_is() -> None:
    done, completing = decided(0, OFFSETS, OUT), decided(0, OFFSETS, OUT, complete=False)
    matched = match_spans([done, completing], {OFFSETS: [sealed(10), sealed(20)], OUT: [sealed(5), still_open()]})
    assert matched == {(PID, *OFFSETS, 10): done, (PID, *OFFSETS, 20): completing, (PID, *OUT, 5): done}


def test_an_open_span_after_a_complete_transaction_belongs_to_a_newer_undecided_one() -> None:
    done = decided(0, OFFSETS, OUT)
    matched = match_spans([done], {OFFSETS: [sealed(10)], OUT: [sealed(5), still_open()]})
    assert matched == {(PID, *OFFSETS, 10): done, (PID, *OUT, 5): done}
