"""Records out of fetched batches, as a Kafka consumer sees them.

The consumer side of the seed's read_committed algorithm (Consumer section,
refined as the Java client does it): the fetch returns the aborted transactions
``(producer id, first offset)`` overlapping the data, and an
:class:`~exactly.storage.aborted_transactions.AbortedTransactionTracker` walks the batches
in offset order: a transactional data batch it finds aborted is dropped; every
control batch is dropped too (consumers never see control records, but their
position moves past).

With read_uncommitted every data record is returned. The HTTP API and the
embedded consumer both read through :func:`read_records`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from exactly.storage.aborted_transactions import AbortedTransactionTracker
from exactly.storage.record_batch import (
    BatchHeader, ControlType, Record, decode_batch, decode_control_record, iter_headers)


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """A data record with the batch facts a consumer reports."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    is_transactional: bool


@dataclass(frozen=True, slots=True)
class ReadRecords:
    records: list[ConsumedRecord]
    #: the position after the last whole batch read (past control batches too)
    next_offset: int


def read_records(data: bytes, start_offset: int, read_committed: bool,
                 aborted_transactions: Iterable[tuple[int, int]] = ()) -> ReadRecords:
    """Decode whole batches in ``data`` and return the records at or after
    ``start_offset`` that a consumer at this isolation level may see."""
    tracker = AbortedTransactionTracker(aborted_transactions if read_committed else ())
    records: list[ConsumedRecord] = []
    next_offset = start_offset
    for position, header in iter_headers(data):
        next_offset = max(next_offset, header.next_offset)
        if header.is_control:
            control = decode_batch(data[position:position + header.size]).records
            tracker.is_aborted(header, abort_marker=_is_abort(control))
            continue
        if tracker.is_aborted(header):
            continue  # dropped by its header alone: aborted data is never decoded
        batch = decode_batch(data[position:position + header.size])
        records.extend(_consumed(batch.header, record) for record in batch.records
                       if record.offset >= start_offset)
    return ReadRecords(records, next_offset)


def _is_abort(records: tuple[Record, ...]) -> bool:
    return bool(records) and decode_control_record(records[0])[0] == ControlType.ABORT


def _consumed(header: BatchHeader, record: Record) -> ConsumedRecord:
    timestamp = header.max_timestamp if header.timestamp_type == 1 else record.timestamp
    return ConsumedRecord(record.offset, timestamp, header.timestamp_type, record.key, record.value,
                          record.headers, header.producer_id, header.is_transactional)
