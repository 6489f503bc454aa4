"""A log segment: one ``.log`` file of v2 record batches and its three indexes.

``<base offset>.log`` holds batches back to back exactly as producers sent them
(``exactly/storage/record_batch.py``), with the broker's base offset written in. Every
``index.interval.bytes`` of appended data the segment adds a sparse entry to
``.index`` (last offset of the batch -> its byte position) and, when the batch
raised the largest timestamp, to ``.timeindex`` (timestamp -> offset), as Kafka's
``LogSegment.append`` does. ``.txnindex`` gets an entry per aborted transaction
whose ABORT marker lands in this segment. The indexes are derived data: when in
doubt they are rebuilt from the ``.log`` (:meth:`LogSegment.recover`).

The segment appends through an ``O_APPEND`` descriptor and reads with ``pread``,
so a reader never disturbs a writer and an fsync can run on another thread
(``sync_fds`` hands out duplicated descriptors for that).
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from exactly.storage import filenames
from exactly.storage.errors import CorruptMessageError, InvalidRecordError, InvariantViolation, KafkaError
from exactly.storage.offset_index import CorruptIndexError, OffsetIndex
from exactly.storage.record_batch import HEADER_SIZE, BatchHeader, read_header, record_times, validate_batch
from exactly.storage.time_index import TimeIndex
from exactly.storage.txn_index import AbortedTxn, TransactionIndex

_SCAN_CHUNK = 1 << 16
#: batches larger than this are stepped over by reading only the next header
_HEADER_ONLY_ABOVE = 4096
_RECOVERY_CHUNK = 1 << 20
#: how much of a deleted segment's .log is freed at a time (LogSegment.release)
_FREE_STEP = 8 << 20


@dataclass(frozen=True, slots=True)
class BatchLocation:
    position: int
    header: BatchHeader


def walk_headers(fd: int, position: int, end: int) -> Iterator[BatchLocation]:
    """The batch headers of the open ``.log`` file ``fd`` from ``position`` to ``end``
    (see :meth:`LogSegment.headers_from`)."""
    read_size = _SCAN_CHUNK
    while position + HEADER_SIZE <= end:
        chunk = os.pread(fd, min(read_size, end - position), position)
        pos_in_chunk = 0
        while pos_in_chunk + HEADER_SIZE <= len(chunk):
            header = read_header(chunk, pos_in_chunk)
            if position + header.size > end:
                return
            yield BatchLocation(position, header)
            position += header.size
            pos_in_chunk += header.size
        if pos_in_chunk == 0:
            return
        read_size = HEADER_SIZE if header.size > _HEADER_ONLY_ABOVE else _SCAN_CHUNK


class LogSegment:
    """One segment of a partition log. Not thread-safe: its partition log owns it."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int,
                 created_ms: int, file_suffix: str = "") -> None:
        """Open (or create) the segment's files; ``file_suffix`` is appended to every
        name (Kafka's ``fileSuffix``: the log cleaner writes ``.cleaned`` segments)."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.file_suffix = file_suffix
        self.log_path = self.path(filenames.LOG_SUFFIX)
        with contextlib.ExitStack() as opened:  # a failure part-way (EMFILE) closes what was opened
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            opened.callback(os.close, self._fd)
            self.size = os.fstat(self._fd).st_size
            index_path = self.path(filenames.INDEX_SUFFIX)
            time_index_path = self.path(filenames.TIME_INDEX_SUFFIX)
            #: index files absent on open (created empty): load_tail sends the segment to recovery.
            #: (A missing .txnindex is normal: it is created by the first abort.)
            self._missing_indexes = [str(p) for p in (index_path, time_index_path) if not p.exists()]
            self.offset_index = OffsetIndex.open(index_path, base_offset)
            opened.callback(self.offset_index.close)
            self.time_index = TimeIndex.open(time_index_path, base_offset)
            opened.callback(self.time_index.close)
            self.txn_index = TransactionIndex.open(self.path(filenames.TXN_INDEX_SUFFIX), base_offset)
            opened.pop_all()
        #: the offset after the last batch in this segment (base_offset when empty)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index_entry = 0
        #: where segment.ms counts from: the broker's clock when this process made the
        #: segment, or the first batch's timestamp for a segment found on disk. (Kafka
        #: counts from the first batch's timestamp even for a new segment, so a producer
        #: whose clock is far behind rolls a segment on every append; we do not.)
        self.rolling_base_ms = created_ms

    def path(self, suffix: str) -> Path:
        """The file of this segment with ``suffix`` (one of ``filenames.SEGMENT_SUFFIXES``)."""
        return filenames.segment_path(self.directory, self.base_offset, suffix + self.file_suffix)

    # -- appending --------------------------------------------------------------

    def append(self, batch: bytes | memoryview, header: BatchHeader) -> int:
        """Write one batch (its base offset already assigned); returns its position.

        All or nothing: when a write fails -- the ``.log``'s, or an index entry's (a
        full disk) -- the ``.log`` is cut back and the indexes forget the entries, as
        if the batch had never come, and the OSError is raised."""
        if header.base_offset < self.next_offset:
            raise InvariantViolation(  # the log assigns offsets: only a bug gets here
                f"{self.log_path}: offset {header.base_offset} is below the segment's next offset "
                f"{self.next_offset}")
        position = self.size
        before = self._tail_state()
        try:
            written = os.write(self._fd, batch)
            if written != len(batch):  # a short write to a regular file means the disk is full
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(batch)} bytes)", str(self.log_path))
            self.size += written
            self._index(position, header)
        except OSError:
            self._undo_append(position, before)
            raise
        return position

    def _tail_state(self) -> tuple[int, int, int, int, int, int]:
        return (self.next_offset, self.max_timestamp, self._offset_of_max_timestamp,
                self._bytes_since_index_entry, len(self.offset_index), len(self.time_index))

    def _undo_append(self, position: int, before: tuple[int, int, int, int, int, int]) -> None:
        """Put the segment back as :meth:`_tail_state` saw it before a failed append."""
        os.ftruncate(self._fd, position)  # cutting a file back needs no space
        self.size = position
        (self.next_offset, self.max_timestamp, self._offset_of_max_timestamp,
         self._bytes_since_index_entry, offset_entries, time_entries) = before
        self.offset_index.forget_from(offset_entries)
        self.time_index.forget_from(time_entries)

    def _index(self, position: int, header: BatchHeader) -> None:
        self.next_offset = header.next_offset
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.last_offset
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self.txn_index.append(txn)

    # -- reading ----------------------------------------------------------------

    def pread(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def headers_from(self, position: int = 0, end: int | None = None) -> Iterator[BatchLocation]:
        """Walk the batch headers from ``position`` (a batch boundary) to ``end``.

        Small batches are read a chunk at a time; after a batch larger than
        ``_HEADER_ONLY_ABOVE`` only the next 61-byte header is read, so walking a
        log of large batches does not read their bodies. Stops quietly at a trailing
        partial batch; raises CorruptMessageError on a header that cannot be a batch
        (callers that recover catch it)."""
        return walk_headers(self._fd, position, self.size if end is None else end)

    def find(self, offset: int) -> BatchLocation | None:
        """The first batch whose last offset is >= ``offset``, found through the index."""
        _, position = self.offset_index.lookup(offset)
        for location in self.headers_from(position):
            if location.header.last_offset >= offset:
                return location
        return None

    def find_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with a timestamp >= ``timestamp``
        at ``starting_offset`` (the log start) or after; None if every record is older.

        As Kafka's ``LogSegment.findOffsetByTimestamp``: the time index points at a
        batch at or before the first candidate; the batches from there are stepped
        over by header until one whose max timestamp is new enough, and that batch's
        records are walked for the first record that is (a batch's first record may
        well be older than the time asked for). Control batches count: Kafka's
        markers carry the time they were written, and a lookup may answer one."""
        _, from_offset = self.time_index.lookup(timestamp)
        start = self.find(max(from_offset, starting_offset))
        if start is None:
            return None
        for location in self.headers_from(start.position):
            if location.header.max_timestamp >= timestamp:
                found = self._first_record(location, lambda offset, ts: ts >= timestamp and offset >= starting_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record carrying the segment's max
        timestamp (KIP-734's ListOffsets -3, as Kafka 3.8+ answers it: the record's
        own offset, not its batch's); None for a segment without timestamps."""
        if self.max_timestamp < 0:
            return None
        target = self.max_timestamp
        start = self.find(self._offset_of_max_timestamp)
        for location in self.headers_from(start.position if start else 0):
            if location.header.max_timestamp == target:
                return self._first_record(location, lambda _, ts: ts == target)
        return None

    def _first_record(self, location: BatchLocation,
                      wanted: Callable[[int, int], bool]) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record of the batch at ``location`` that
        is ``wanted`` (with LogAppendTime every record has the batch's max timestamp)."""
        times = record_times(self.pread(location.position, location.header.size))
        return next(((offset, ts) for offset, ts in times if wanted(offset, ts)), None)

    # -- durability and lifecycle -----------------------------------------------

    def sync_fds(self, include_indexes: bool) -> list[int]:
        """Duplicated descriptors to fsync (the caller closes them), so an fsync
        on another thread survives this segment being closed or deleted meanwhile."""
        fds = [os.dup(self._fd)]
        try:
            if include_indexes:
                for index in (self.offset_index, self.time_index, self.txn_index):
                    fds.extend(index.sync_fds())
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Close the files; closing again does nothing (a descriptor number may be reused).
        Every file is closed even if one fails to (an index whose buffered entry cannot
        be written out on a full disk); the first error is raised after."""
        first: OSError | None = None
        for close in (self.offset_index.close, self.time_index.close, self.txn_index.close, self._close_log):
            try:
                close()
            except OSError as e:
                first = first or e
        if first is not None:
            raise first

    def _close_log(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        """Remove every file of this segment and close it."""
        for suffix in filenames.SEGMENT_SUFFIXES:
            self.path(suffix).unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        """Close the segment; if its ``.log`` is deleted already (retention, a swap),
        first give its blocks back ``_FREE_STEP`` at a time: freeing a large file in
        one go holds the filesystem's journal, and every fsync of the broker waits."""
        if self._fd >= 0 and os.fstat(self._fd).st_nlink == 0:
            size = self.size
            while size > _FREE_STEP:
                size -= _FREE_STEP
                os.ftruncate(self._fd, size)
        self.close()

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or above ``offset`` (a batch boundary)."""
        location = self.find(offset)
        if location is None:
            return
        os.ftruncate(self._fd, location.position)
        self.size = location.position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._reload_tail()

    # -- recovery -----------------------------------------------------------------

    def load_tail(self) -> None:
        """After a clean shutdown: trust the files, learn the next offset and max
        timestamp from the last indexed entries and the batches after them.

        :raise CorruptIndexError: an index fails its sanity check, or the ``.log``
            holds data but its ``.index`` or ``.timeindex`` file was missing (an
            empty index would pass the checks and lose every entry, and the
            max timestamp would be learnt from the unindexed tail alone).
        """
        if self.size and self._missing_indexes:
            raise CorruptIndexError(self._missing_indexes[0], "missing; rebuilding it from the log")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()
        self._reload_tail()

    def _reload_tail(self) -> None:
        last_offset, position = self.offset_index.lookup(2**63 - 1)
        ts_entry = self.time_index.last_entry
        self.max_timestamp, self._offset_of_max_timestamp = ts_entry if ts_entry else (-1, self.base_offset)
        self.next_offset = self.base_offset
        first = True
        position = 0 if not len(self.offset_index) else position
        end = position
        for location in self.headers_from(position):
            header = location.header
            if first and location.position == 0 and header.max_timestamp >= 0:
                self.rolling_base_ms = header.max_timestamp
            first = False
            self.next_offset = header.next_offset
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
            end = location.position + header.size
        # as if every batch since the last indexed one had just been appended, so
        # appends after a restart index the same offsets a rebuild would
        self._bytes_since_index_entry = end - position

    def recover(self, on_batch: Callable[[bytes, BatchHeader], None]) -> int:
        """Validate every batch, rebuild the indexes, truncate a torn or corrupt tail.

        ``on_batch(batch, header)`` sees each valid batch in order (the partition
        log replays producer state with it and re-adds aborted transactions).
        Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self._missing_indexes = []
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._bytes_since_index_entry = 0
        valid_end = 0
        for position, batch, header in self._valid_batches():
            if position == 0 and header.max_timestamp >= 0:
                self.rolling_base_ms = header.max_timestamp
            self._index(position, header)
            on_batch(batch, header)
            valid_end = position + header.size
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        return truncated

    def _valid_batches(self) -> Iterator[tuple[int, bytes, BatchHeader]]:
        position, next_offset = 0, self.base_offset
        buffer, buffer_start = b"", 0
        while position + HEADER_SIZE <= self.size:
            if position + HEADER_SIZE > buffer_start + len(buffer):
                buffer, buffer_start = self.pread(position, _RECOVERY_CHUNK), position
            try:
                header = read_header(buffer, position - buffer_start)
            except KafkaError:
                return
            end = position + header.size
            if end > self.size or header.base_offset < next_offset:
                return
            if end > buffer_start + len(buffer):
                buffer, buffer_start = self.pread(position, max(_RECOVERY_CHUNK, header.size)), position
            batch = buffer[position - buffer_start:end - buffer_start]
            try:
                validate_batch(batch)
            except (CorruptMessageError, InvalidRecordError):
                return
            yield position, batch, header
            position, next_offset = end, header.next_offset
