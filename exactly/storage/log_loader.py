"""Opening a partition directory (Kafka's ``LogLoader``): leftovers, swaps, recovery, producer state.

:meth:`LogLoader.load` turns a directory into the segments and producer state of a
log (``exactly/storage/partition_log.py``):

1. what interrupted writes left is deleted (``.deleted``, ``.tmp``, ``.cleaned``, and
   ``.swap`` files of a swap that never committed) and every committed swap is
   completed (``exactly/storage/segment_swap.py``); index files without their ``.log`` go;
2. after an unclean shutdown every segment from the one holding the last flushed
   offset (the recovery point - 1) onwards is re-validated batch by batch (CRC and
   offsets); the first bad or torn batch and everything after it is truncated and
   the indexes of those segments are rebuilt. A segment whose index fails its
   sanity check is recovered too, even after a clean shutdown;
3. producer state is loaded from the newest valid snapshot at or below the first
   segment that needs recovery (corrupt ones are deleted on the way) and batch
   headers are replayed from there to the end; an ABORT marker replayed in a
   recovered segment gets its ``.txnindex`` entry again. Snapshots above the log
   end offset go.
"""

from __future__ import annotations

import bisect
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from exactly.storage import filenames, producer_snapshot
from exactly.storage.clock import Clock
from exactly.storage.errors import CorruptMessageError, InvalidRecordError
from exactly.storage.log_config import LogConfig
from exactly.storage.offset_index import CorruptIndexError
from exactly.storage.producer_snapshot import CorruptSnapshotError
from exactly.storage.producer_state import CompletedTxn, ProducerStateManager
from exactly.storage.record_batch import BatchHeader, ControlType, decode_batch, decode_control_record
from exactly.storage.segment import LogSegment, walk_headers
from exactly.storage.segment_swap import complete_swap_files, swap_path


def segment_holding(segments: Sequence[LogSegment], offset: int) -> int:
    """Index in ``segments`` (in offset order) of the segment that holds ``offset``."""
    bases = [segment.base_offset for segment in segments]
    return max(0, bisect.bisect_right(bases, offset) - 1)


def snapshot_offsets_in(directory: Path) -> set[int]:
    """The offsets of the ``.snapshot`` files in ``directory``."""
    return {parsed[0] for path in directory.iterdir()
            if (parsed := filenames.parse_offset_name(path.name)) and parsed[1] == filenames.SNAPSHOT_SUFFIX}


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What :meth:`LogLoader.load` found: the log's segments (its producer state is
    in the manager it was given)."""

    segments: list[LogSegment]
    log_start_offset: int
    #: the offsets of the ``.snapshot`` files kept
    snapshots: set[int]
    #: bytes truncated from a torn or corrupt tail
    truncated_bytes: int


class LogLoader:
    """Loads one partition directory; see the module docstring. ``index_abort`` writes
    the ``.txnindex`` entry of an aborted transaction whose marker recovery replays."""

    def __init__(self, directory: Path, config: LogConfig, clock: Clock, producer_state: ProducerStateManager,
                 *, log_start_offset: int, recovery_point: int,
                 index_abort: Callable[[LogSegment, CompletedTxn], None]) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self.producer_state = producer_state
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self._index_abort = index_abort
        self.segments: list[LogSegment] = []
        self._snapshots: set[int] = set()

    def load(self, clean_shutdown: bool) -> LoadedLog:
        self._remove_leftovers()
        bases = sorted({parsed[0] for path in self.directory.iterdir()
                        if (parsed := filenames.parse_offset_name(path.name))
                        and parsed[1] == filenames.LOG_SUFFIX})
        self._remove_orphan_indexes(set(bases))
        self.segments = [self._new_segment(base) for base in bases]
        if not self.segments:
            self.segments = [self._new_segment(self.log_start_offset)]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._snapshots = snapshot_offsets_in(self.directory)
        first_to_recover = self._first_segment_to_recover(clean_shutdown)
        truncated = self._recover(first_to_recover)
        self._drop_snapshots_above(self.segments[-1].next_offset)
        for segment in self.segments[first_to_recover:]:
            segment.flush()
        return LoadedLog(self.segments, self.log_start_offset, self._snapshots, truncated)

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, self.config.index_interval_bytes,
                          created_ms=self.clock.now_ms())

    def _remove_leftovers(self) -> None:
        """Delete what interrupted writes left (``.deleted``, ``.tmp``, ``.cleaned``, and
        ``.swap`` files whose ``.log.swap`` was never renamed: an uncommitted swap), and
        complete every committed swap: its ``.log.swap`` replaces each segment whose
        base offset lies in the offsets it holds (Kafka's ``LogLoader``)."""
        committed: list[int] = []
        for path in self.directory.iterdir():
            if path.name.endswith((filenames.TEMP_SUFFIX, filenames.CLEANED_SUFFIX)):
                path.unlink()
            elif (parsed := filenames.parse_swap_name(path.name)) and parsed[1] == filenames.LOG_SUFFIX:
                committed.append(parsed[0])
        for path in self.directory.iterdir():
            parsed = filenames.parse_swap_name(path.name)
            if parsed and parsed[0] not in committed:
                path.unlink()
        for base in sorted(committed):
            end = self._swap_end(base)
            replaced = [parsed[0] for path in self.directory.iterdir()
                        if (parsed := filenames.parse_offset_name(path.name))
                        and parsed[1] == filenames.LOG_SUFFIX and base <= parsed[0] < max(end, base + 1)]
            complete_swap_files(self.directory, base, replaced)
        for path in self.directory.iterdir():  # after the swaps: completing one makes some
            if path.name.endswith(filenames.DELETED_SUFFIX):
                path.unlink()

    def _swap_end(self, base: int) -> int:
        """The offset after the last batch of the swap segment ``base`` (``base`` if empty)."""
        fd = os.open(swap_path(self.directory, base, filenames.LOG_SUFFIX), os.O_RDONLY)
        try:
            end = base
            for location in walk_headers(fd, 0, os.fstat(fd).st_size):
                end = location.header.next_offset
            return end
        finally:
            os.close(fd)

    def _remove_orphan_indexes(self, bases: set[int]) -> None:
        for path in self.directory.iterdir():
            parsed = filenames.parse_offset_name(path.name)
            if parsed and parsed[1] in filenames.SEGMENT_SUFFIXES[1:] and parsed[0] not in bases:
                path.unlink()

    def _first_segment_to_recover(self, clean_shutdown: bool) -> int:
        """Segments before the returned index are trusted as they are; an index that
        fails its sanity check sends its segment (and those after) to recovery.

        After an unclean shutdown recovery starts at the segment holding the last
        flushed offset (recovery point - 1): a flush syncs the active segment's
        ``.log`` only, so when the recovery point sits exactly at the next
        segment's base the segment below it may still lack index entries."""
        limit = len(self.segments)
        if not clean_shutdown:
            limit = segment_holding(self.segments, self.recovery_point - 1) if self.recovery_point > 0 else 0
        for i, segment in enumerate(self.segments[:limit]):
            try:
                segment.load_tail()
            except (CorruptIndexError, CorruptMessageError, InvalidRecordError, ValueError):
                return i
        return limit

    def _recover(self, first_to_recover: int) -> int:
        """Rebuild producer state from the best snapshot and recover the segments
        from ``first_to_recover`` on. Returns the bytes truncated."""
        bound = (self.segments[first_to_recover].base_offset if first_to_recover < len(self.segments)
                 else self.segments[-1].next_offset)
        start = self._load_snapshot(bound)
        for segment in self.segments[:first_to_recover]:
            if segment.next_offset > start:
                self._replay(segment, start)
        truncated = 0
        for i in range(first_to_recover, len(self.segments)):
            segment = self.segments[i]
            truncated += segment.recover(functools.partial(self._replay_batch, segment=segment,
                                                           index_aborts=True))
            if truncated:
                self._delete_after(i)
                break
        return truncated

    def _delete_after(self, i: int) -> None:
        for segment in self.segments[i + 1:]:
            segment.delete()
        self.segments = self.segments[:i + 1]

    def _load_snapshot(self, bound: int) -> int:
        """Load the newest valid snapshot at or below ``bound``; return the offset to
        replay from. Corrupt snapshots are deleted on the way."""
        for offset in sorted(self._snapshots, reverse=True):
            if offset > bound or offset < self.log_start_offset:
                continue
            path = filenames.snapshot_path(self.directory, offset)
            try:
                self.producer_state.load(producer_snapshot.read(path))
                return offset
            except CorruptSnapshotError:
                self._delete_snapshot(offset)
        self.producer_state.truncate()
        return self.log_start_offset

    def _replay(self, segment: LogSegment, from_offset: int) -> None:
        """Replay producer state from the batch headers of a trusted segment."""
        start = segment.find(from_offset)
        if start is None:
            return
        for location in segment.headers_from(start.position):
            header = location.header
            if header.base_offset < from_offset:
                continue
            batch = segment.pread(location.position, header.size) if header.is_control else b""
            self._replay_batch(batch, header, segment, index_aborts=False)

    def _replay_batch(self, batch: bytes | memoryview, header: BatchHeader, segment: LogSegment,
                      index_aborts: bool) -> None:
        if not header.has_producer_id:
            return
        if not header.is_control:
            self.producer_state.update_data_batch(header)
            return
        record = decode_batch(bytes(batch)).records[0]
        control_type, coordinator_epoch = decode_control_record(record)
        if control_type not in (ControlType.ABORT, ControlType.COMMIT):
            return
        completed = self.producer_state.update_end_txn_marker(
            header.producer_id, header.producer_epoch, coordinator_epoch or 0,
            control_type == ControlType.COMMIT, header.base_offset, header.max_timestamp)
        if index_aborts and completed.is_aborted:
            self._index_abort(segment, completed)
        self.producer_state.on_high_watermark(header.next_offset)  # replayed data is on disk

    def _drop_snapshots_above(self, offset: int) -> None:
        for snapshot in sorted(self._snapshots):
            if snapshot > offset:
                self._delete_snapshot(snapshot)

    def _delete_snapshot(self, offset: int) -> None:
        filenames.snapshot_path(self.directory, offset).unlink(missing_ok=True)
        self._snapshots.discard(offset)
