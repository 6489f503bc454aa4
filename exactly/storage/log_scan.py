"""A partition's transactions as its log holds them, read off the broker's loop.

A :class:`LogView` is taken on the loop (:func:`view_of`): duplicated descriptors of
the partition's ``.log`` files, each with its size then, and the log start offset,
high watermark and last stable offset of that moment. Reading it needs no loop: a
thread walks the files with ``pread`` (:func:`scan`), and a segment deleted or
cleaned meanwhile stays readable through its descriptor (until retention frees its
blocks: then the walk stops at its shortened end, as at a torn tail).

:func:`scan` groups the batches below the high watermark as Kafka's producer state
does: a producer's transactional data batches since its previous marker on the
partition form one :class:`TransactionSpan`, sealed by its next control batch (COMMIT
or ABORT; the marker may carry a higher epoch than the data when the transaction was
fenced). Spans come in the order of their markers; a span with no marker yet is
*open*. Batches without the transactional bit (plain produce, or a plain
OffsetCommit on ``__consumer_offsets``) are listed apart.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from exactly.storage.record_batch import BatchHeader, ControlType, Record, decode_batch, decode_control_record
from exactly.storage.segment import walk_headers

if TYPE_CHECKING:
    from exactly.storage.partition_log import PartitionLog


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One ``.log`` file of a view: a duplicated descriptor, read up to ``size``."""

    fd: int
    base_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class LogView:
    """A partition's files and offsets at one moment; close it (or use ``with``)."""

    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    segments: tuple[SegmentFile, ...]

    def close(self) -> None:
        for segment in self.segments:
            with contextlib.suppress(OSError):
                os.close(segment.fd)

    def __enter__(self) -> "LogView":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batches(self, with_records: bool | Callable[[BatchHeader], bool]
                ) -> Iterator[tuple[BatchHeader, tuple[Record, ...]]]:
        """Every whole batch from the log start to the high watermark, in order; the
        records of data batches are decoded only ``with_records`` (or those of the
        batches for whose header it is true; a marker's always)."""
        for segment in self.segments:
            for location in walk_headers(segment.fd, 0, segment.size):
                header = location.header
                if header.base_offset >= self.high_watermark:
                    return
                if header.last_offset < self.log_start_offset:
                    continue
                records: tuple[Record, ...] = ()
                if header.is_control or (with_records(header) if callable(with_records) else with_records):
                    records = decode_batch(os.pread(segment.fd, header.size, location.position)).records
                yield header, records


def view_of(log: "PartitionLog") -> LogView:
    """The view of ``log`` now (on the loop: it only duplicates descriptors)."""
    files: list[SegmentFile] = []
    try:
        for segment in log.segments:
            files.append(SegmentFile(segment.sync_fds(include_indexes=False)[0], segment.base_offset, segment.size))
    except OSError:
        LogView(log.topic, log.partition, 0, 0, 0, tuple(files)).close()
        raise
    return LogView(log.topic, log.partition, log.log_start_offset, log.high_watermark,
                   log.last_stable_offset, tuple(files))


@dataclass(frozen=True, slots=True)
class Marker:
    """The control batch that ended a span."""

    offset: int
    control_type: ControlType
    producer_epoch: int
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class ScannedBatch:
    header: BatchHeader
    #: decoded records (empty unless the scan asked for them)
    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class TransactionSpan:
    """One producer's transaction on one partition: its data batches and the marker
    that sealed them (None while it is open)."""

    producer_id: int
    batches: tuple[ScannedBatch, ...]
    marker: Marker | None

    @property
    def first_offset(self) -> int:
        return self.batches[0].header.base_offset if self.batches else self._lone_marker().offset

    @property
    def first_epoch(self) -> int:
        """The producer epoch of its first data batch, or of its marker when it has none."""
        return self.batches[0].header.producer_epoch if self.batches else self._lone_marker().producer_epoch

    def _lone_marker(self) -> Marker:
        """The marker of a span without data batches."""
        assert self.marker is not None, "a span holds data batches, a marker or both"
        return self.marker

    @property
    def epochs(self) -> tuple[int, ...]:
        """The producer epochs of its data batches, in order, without repeats."""
        return tuple(dict.fromkeys(b.header.producer_epoch for b in self.batches))

    @property
    def record_count(self) -> int:
        return sum(b.header.record_count for b in self.batches)


@dataclass(frozen=True, slots=True)
class PartitionScan:
    """What :func:`scan` found in one partition."""

    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    #: sealed spans in marker order, then the open ones in the order they began
    spans: tuple[TransactionSpan, ...]
    #: data batches without the transactional bit
    plain: tuple[ScannedBatch, ...]


@dataclass
class _Scanning:
    sealed: list[TransactionSpan] = field(default_factory=list)
    open: dict[int, list[ScannedBatch]] = field(default_factory=dict)
    plain: list[ScannedBatch] = field(default_factory=list)

    def add(self, header: BatchHeader, records: tuple[Record, ...]) -> None:
        if header.is_control:
            control_type, coordinator_epoch = decode_control_record(records[0])
            if coordinator_epoch is None:  # a control type that ends nothing
                return
            marker = Marker(header.base_offset, ControlType(control_type), header.producer_epoch, coordinator_epoch)
            self.sealed.append(TransactionSpan(header.producer_id, tuple(self.open.pop(header.producer_id, ())),
                                               marker))
        elif header.is_transactional:
            self.open.setdefault(header.producer_id, []).append(ScannedBatch(header, records))
        else:
            self.plain.append(ScannedBatch(header, records))


def scan(view: LogView, with_records: bool | Callable[[BatchHeader], bool] = False) -> PartitionScan:
    """The spans and plain batches of ``view`` (off the loop: it reads the files), with
    the records of every data batch, or of those for whose header ``with_records`` is true."""
    found = _Scanning()
    for header, records in view.batches(with_records):
        found.add(header, records)
    open_spans = sorted((TransactionSpan(pid, tuple(batches), None) for pid, batches in found.open.items()),
                        key=lambda span: span.first_offset)
    return PartitionScan(view.topic, view.partition, view.log_start_offset, view.high_watermark,
                         view.last_stable_offset, tuple(found.sealed) + tuple(open_spans), tuple(found.plain))
