"""The log of one partition (Kafka's ``UnifiedLog``/``LocalLog``): append, read, roll, flush, retention, the LSO.

A partition is a directory ``<topic>-<partition>/`` of segments
(``exactly/storage/segment.py``) and producer-state snapshots
(``exactly/storage/producer_snapshot.py``). This class is what every append and read goes
through; it is not thread-safe -- one owner (the engine's event loop) calls it.
Around it, as Kafka splits them: ``exactly/storage/log_validator.py`` checks and stamps a
produced batch, ``exactly/storage/log_loader.py`` opens the directory (recovery),
``exactly/storage/segment_swap.py`` swaps cleaned segments in and lets old ones go, and
``exactly/storage/log_cleaner.py`` compacts.

Offsets, as Kafka names them:

* log start offset -- the first offset still held (moves when retention deletes
  whole segments, and when DeleteRecords moves it: :meth:`delete_records`);
* log end offset -- the offset the next batch gets;
* high watermark -- the end of the *durable* log. On a single node "replicated to
  the ISR" becomes "fsynced", so the high watermark is the fsynced end and no
  consumer ever reads a record that a crash could take back;
* last stable offset (LSO) -- the first offset of the earliest transaction that
  is still open (or ended by a marker that is not durable yet), capped by the
  high watermark. ``read_committed`` reads stop there.

Durability is two-step so that an fsync never runs on the owner's thread:
:meth:`prepare_flush` (owner thread) captures what to sync, :meth:`FlushPlan.run`
(any thread) fsyncs, :meth:`complete_flush` (owner thread) advances the high
watermark and the recovery point. Maintenance works the same way, as steps of jobs
(``exactly/storage/background.py``): :meth:`take_snapshot` encodes producer state at once
and yields the job that writes it; :meth:`delete_old_segments` drops segments from
the log at once and yields the job that deletes their files; :meth:`clean` yields
the log cleaner's jobs. A roll hands its snapshot to :attr:`PartitionLog.background`.

Recovery on open (``exactly/storage/log_loader.py``, Kafka's ``LogLoader``): after an
unclean shutdown every segment from the one holding the last flushed offset (the
recovery point - 1) onwards is re-validated batch by batch (CRC and offsets); the
first bad or torn batch and everything after it is truncated and the indexes of
those segments are rebuilt. Producer state is loaded from the newest valid snapshot
at or below the first segment that needs recovery, and batch headers are replayed
from there to the end.

Compaction (``cleanup.policy=compact``): :meth:`PartitionLog.clean` is the log
cleaner's round (``exactly/storage/log_cleaner.py``), which writes cleaned segments as
``.cleaned`` files; :meth:`prepare_swap` checks that the segments they replace are
still in the log, ``segment_swap.SegmentSwap`` swaps them in on disk and
:meth:`complete_swap` in memory; the loader finishes or discards a swap a crash
interrupted. Cleaning changes no offset, neither the log start offset,
producer state, LSO nor high watermark. Sealed segments change only through
retention and cleaning, so the owner must not run both on one log at once.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from exactly.storage import filenames, log_cleaner, log_validator, producer_snapshot
from exactly.storage.atomic_file import fsync_dir, write_atomically
from exactly.storage.background import RunSteps, Steps, run_inline
from exactly.storage.clock import Clock
from exactly.storage.errors import (
    CorruptMessageError,
    KafkaError,
    LogDirFullError,
    LogOfflineError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordListTooLargeError,
    storage_error,
)
from exactly.storage.log_config import LogConfig
from exactly.storage.log_loader import LogLoader, segment_holding, snapshot_offsets_in
from exactly.storage.producer_state import CompletedTxn, ProducerStateManager
from exactly.storage.record_batch import BatchHeader, encode_end_txn_marker, iter_headers, read_header, with_base_offset
from exactly.storage.segment import LogSegment
from exactly.storage.segment_deletion import FileDeletion, segment_files
from exactly.storage.segment_swap import SegmentClose, SegmentDeletion, SegmentSwap, holds_run
from exactly.storage.txn_index import AbortedTxn
from exactly.storage.visible_records import CountSegment, VisibleRecordIndex

log = logging.getLogger(__name__)

#: Snapshots not at a segment boundary (periodic, shutdown) kept besides the per-segment ones.
PERIODIC_SNAPSHOTS_TO_KEEP = 2
#: refusals of a batch the log could not read or hold: answered without the log's start
#: offset, as Kafka's ReplicaManager answers them (every other refusal carries it)
_UNREAD_BATCH = (CorruptMessageError, MessageTooLargeError, RecordListTooLargeError)
#: DeleteRecords' offset meaning "up to the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK)
HIGH_WATERMARK = -1
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a batch went. ``duplicate`` means a retry of a batch already in the log:
    nothing was appended and the offsets are the original's."""

    base_offset: int
    last_offset: int
    log_append_time: int = -1
    duplicate: bool = False
    completed_txn: CompletedTxn | None = None


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None
    #: the offset after the last batch returned (the fetch position to continue from)
    next_offset: int


@dataclass
class FlushPlan:
    """What one fsync round covers; ``run`` may execute on any thread."""

    target_offset: int
    fds: list[int] = field(default_factory=list)
    directory: Path | None = None
    #: how long ``run`` took (Kafka's LogFlushRateAndTimeMs measures the same)
    seconds: float = 0.0
    #: a buffered write that failed while the plan was made (a ``.txnindex`` entry):
    #: ``run`` fails with it, as a failed fsync
    error: OSError | None = None

    def run(self) -> None:
        started = time.perf_counter()
        try:
            if self.error is not None:
                raise self.error
            for fd in self.fds:
                os.fsync(fd)
            if self.directory is not None:
                fsync_dir(self.directory)
        finally:
            self.close()
            self.seconds = time.perf_counter() - started

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


@dataclass(frozen=True, slots=True)
class SnapshotWrite:
    """Write one producer-state snapshot (encoded on the owner's thread) and delete the
    snapshots it makes redundant; ``run`` may execute on any thread."""

    path: Path
    data: bytes
    stale: tuple[Path, ...] = ()

    def run(self) -> None:
        write_atomically(self.path, self.data)
        for path in self.stale:
            path.unlink(missing_ok=True)


class PartitionLog:
    """One partition's log. See the module docstring for the offsets it keeps."""

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig,
                 clock: Clock, *, recovery_point: int = 0, log_start_offset: int = 0,
                 clean_shutdown: bool = False, cleaner_checkpoint: int = 0) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.producer_state = ProducerStateManager()
        self.segments: list[LogSegment] = []
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.high_watermark = 0
        self._dirty: set[LogSegment] = set()
        #: offsets of the ``.snapshot`` files, listed from the directory once, then kept here
        self._snapshots: set[int] | None = None
        self._dir_dirty = False
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        #: what the log cleaner knows of this log (the checkpoint is persisted by the log manager)
        self.cleaner_state = log_cleaner.CleanerState(cleaner_checkpoint)
        #: how the snapshot a roll takes is written: at once by default; the owner
        #: hands it to another thread (the engine: its metadata worker)
        self.background: RunSteps = run_inline
        #: what each batch gives a read_committed reader, kept for lag (built by _load)
        self.visible_records = VisibleRecordIndex()
        self._counting_opened = False
        directory.mkdir(parents=True, exist_ok=True)
        #: set when a write or fsync failed with an I/O error (not a full disk): every
        #: write is refused with it until a restart reloads the log (see ``_write``)
        self.offline: LogOfflineError | None = None
        #: bytes truncated from a torn or corrupt tail during recovery (for logs and tests)
        self.truncated_bytes = self._load(clean_shutdown)

    def _load(self, clean_shutdown: bool) -> int:
        """Open the directory (``exactly/storage/log_loader.py``); returns the bytes truncated."""
        loaded = LogLoader(self.directory, self.config, self.clock, self.producer_state,
                           log_start_offset=self.log_start_offset, recovery_point=self.recovery_point,
                           index_abort=self._index_abort).load(clean_shutdown)
        self.segments, self.log_start_offset, self._snapshots = (
            loaded.segments, loaded.log_start_offset, loaded.snapshots)
        self.high_watermark = self.recovery_point = self.log_end_offset
        self.producer_state.on_high_watermark(self.high_watermark)
        ends = [segment.base_offset for segment in self.segments[1:]] + [self.log_end_offset]
        self.visible_records = VisibleRecordIndex.opened(
            (segment.base_offset, end) for segment, end in zip(self.segments, ends))
        return loaded.truncated_bytes

    # -- offsets ------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def last_stable_offset(self) -> int:
        """The first unstable offset -- never below the log start offset, which
        DeleteRecords may move past an open transaction's first offset (Kafka's
        ``maybeIncrementFirstUnstableOffset``) -- capped by the high watermark."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return min(max(first_unstable, self.log_start_offset), self.high_watermark)

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    def first_unflushed_ms(self) -> int | None:
        return self._first_unflushed_ms

    # -- appends --------------------------------------------------------------------

    def append_data(self, batch: bytes) -> AppendResult:
        """Validate and append one producer batch (exactly one v2 batch, as Produce
        v3+ requires); raise the Kafka error and leave the log untouched otherwise."""
        self._check_online()
        now = self.clock.now_ms()
        try:
            header, max_timestamp = log_validator.validate(batch, self.config, f"{self.topic}-{self.partition}", now)
            duplicate = self.producer_state.check_data_batch(header) if header.has_producer_id else None
        except KafkaError as e:
            if not isinstance(e, _UNREAD_BATCH):
                e.log_start_offset = self.log_start_offset
            raise
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, duplicate=True)
        batch, header = log_validator.recompressed(batch, header, self.config)
        batch, header = log_validator.stamped(batch, header, max_timestamp, now, self.config)
        base_offset = self.log_end_offset
        stored = with_base_offset(batch, base_offset)
        header = read_header(stored)
        self._write(stored, header, now)
        if header.has_producer_id:
            self.producer_state.update_data_batch(header)
        self._appended(header, now)
        return AppendResult(base_offset, header.last_offset,
                            log_append_time=now if self.config.log_append_time else -1)

    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                              commit: bool) -> AppendResult:
        """Write a COMMIT or ABORT marker for ``producer_id`` (WriteTxnMarkers);
        an ABORT also goes to the segment's ``.txnindex``. The marker's write is undone
        on a full disk (LogDirFullError); if its ``.txnindex`` entry cannot be written
        after it, producer state has moved past the marker already, so the log goes
        offline and a restart rebuilds the index from the marker."""
        self._check_online()
        self.producer_state.check_end_txn_marker(producer_id, producer_epoch, coordinator_epoch)
        now = self.clock.now_ms()
        marker = encode_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                       timestamp_ms=now, base_offset=self.log_end_offset)
        header = read_header(marker)
        self._write(marker, header, now)
        offset = header.base_offset
        completed = self.producer_state.update_end_txn_marker(
            producer_id, producer_epoch, coordinator_epoch, commit, offset, now)
        if completed.is_aborted:
            try:
                self._index_abort(self.active_segment, completed)
            except OSError as e:
                raise self._take_offline(e, f"the .txnindex entry of the ABORT at {offset}") from e
        self._appended(header, now)
        self.visible_records.end_transaction(producer_id, commit)
        return AppendResult(offset, offset, completed_txn=completed)

    def _write(self, batch: bytes, header: BatchHeader, now: int) -> None:
        """Roll if due, then write ``batch`` (its base offset is the log end offset,
        which a roll does not move) to the active segment.

        A failed write leaves the log as it was (``LogSegment.append`` is all or
        nothing). A full disk raises LogDirFullError: the same write succeeds once space
        is freed. Any other I/O error takes the log offline (LogOfflineError): Kafka
        marks its log directory offline on any IOException."""
        try:
            self._maybe_roll(len(batch), header, now)
            self.active_segment.append(batch, header)
        except OSError as e:
            error = storage_error(e, f"cannot append to {self.topic}-{self.partition}")
            if isinstance(error, LogDirFullError):
                raise error from e
            raise self._take_offline(e, "an append") from e

    def _check_online(self) -> None:
        if self.offline is not None:
            raise LogOfflineError(f"{self.topic}-{self.partition} is offline ({self.offline}); "
                                  f"restart the broker to reload it from disk")

    def _take_offline(self, error: BaseException, what: str) -> LogOfflineError:
        """Refuse every write from now on; returns the error to raise."""
        if self.offline is None:
            self.offline = LogOfflineError(f"{what} failed: {getattr(error, 'strerror', None) or error}")
        return LogOfflineError(f"{self.topic}-{self.partition} went offline: {self.offline}")

    def _appended(self, header: BatchHeader, now: int) -> None:
        self.visible_records.append(header, self.active_segment.base_offset)
        self._dirty.add(self.active_segment)
        self._unflushed_messages += header.record_count
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now

    def _index_abort(self, segment: LogSegment, completed: CompletedTxn) -> None:
        self._dir_dirty = True  # the first abort of a segment creates its .txnindex
        segment.append_aborted_txn(AbortedTxn(
            producer_id=completed.producer_id, first_offset=completed.first_offset,
            last_offset=completed.last_offset,
            last_stable_offset=self.producer_state.last_stable_offset_after(completed)))

    # -- segments ---------------------------------------------------------------------

    def _maybe_roll(self, size: int, header: BatchHeader, now: int) -> None:
        segment = self.active_segment
        if segment.size == 0:
            return
        max_entries = self.config.segment_index_bytes // 12
        if (segment.size + size > self.config.segment_bytes
                or now - segment.rolling_base_ms >= self.config.segment_ms
                or len(segment.offset_index) >= max_entries
                or len(segment.time_index) >= max_entries
                or self.log_end_offset + header.last_offset_delta - segment.base_offset > _INT32_MAX):
            self.roll()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset and snapshot producer
        state there (Kafka takes one snapshot per segment)."""
        base = self.log_end_offset
        if self.active_segment.base_offset == base:
            return self.active_segment
        # The outgoing segment's index entries may be in no flush yet (while it was
        # active only its .log was synced): the next flush syncs it with its indexes,
        # before the recovery point can pass it and a restart trusts its files.
        self._dirty.add(self.active_segment)
        segment = self._new_segment(base)
        self.segments.append(segment)
        self._dir_dirty = True
        self.background(self.take_snapshot())
        return segment

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, self.config.index_interval_bytes,
                          created_ms=self.clock.now_ms())

    def _segment_for(self, offset: int) -> int:
        """Index in ``segments`` of the segment that holds ``offset``."""
        return segment_holding(self.segments, offset)

    # -- reads --------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, read_committed: bool = False) -> ReadResult:
        """Whole batches from ``offset`` (at least one, even if larger than
        ``max_bytes``), up to the high watermark, or the LSO when read_committed."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic}-{self.partition}")
        upper = self.last_stable_offset if read_committed else self.high_watermark
        records, next_offset = self._read_batches(offset, max(max_bytes, 0), upper)
        aborted = None
        if read_committed:
            aborted = [] if not records else [
                (t.producer_id, t.first_offset) for t in self.collect_aborted(offset, next_offset)]
        return ReadResult(records, self.high_watermark, self.last_stable_offset,
                          self.log_start_offset, aborted, next_offset if records else offset)

    def _read_batches(self, offset: int, max_bytes: int, upper: int) -> tuple[bytes, int]:
        """One read of at most ``max_bytes`` (or the first batch, if larger) from the
        segment holding ``offset``, cut at the last whole batch below ``upper``."""
        if offset >= upper:
            return b"", offset
        for segment in self.segments[self._segment_for(offset):]:
            start = segment.find(offset)
            if start is None:
                continue
            size = min(segment.size - start.position, max(max_bytes, start.header.size))
            data = segment.pread(start.position, size)
            end, next_offset = 0, offset
            for position, header in iter_headers(data):
                if header.base_offset >= upper or (end and position + header.size > max_bytes):
                    break
                end, next_offset = position + header.size, header.next_offset
            return data[:end], next_offset
        return b"", offset

    def collect_aborted(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap ``[start_offset, upper_offset)``, from the
        ``.txnindex`` of the segment holding ``start_offset`` and those after it."""
        found: list[AbortedTxn] = []
        for segment in self.segments[self._segment_for(start_offset):]:
            entries, complete = segment.txn_index.collect_aborted(start_offset, upper_offset)
            found.extend(entries)
            if complete:
                break
        return found

    def count_visible(self, start: int, upper: int) -> tuple[int, bool, bool]:
        """What ``visible_records.count`` says (records, split, exact). The first call
        has the batches the log was opened with counted, by :attr:`background`: on
        the owner's thread when that runs steps inline, else off it -- meanwhile
        their offsets count as records and the answer is not exact."""
        if not self._counting_opened:
            self._counting_opened = True
            self.background(self._count_opened())
        return self.visible_records.count(start, upper)

    def _count_opened(self) -> Steps[None]:
        """Count the batches the log was opened with, segment by segment, each read by a job."""
        for piece in self.visible_records.uncounted():
            segment = next((s for s in self.segments if s.base_offset == piece.base_offset), None)
            if segment is None:  # retention or the cleaner took it, and its counts with it
                continue
            job = CountSegment(segment, piece.base_offset, piece.end,
                               self.collect_aborted(piece.base_offset, piece.end),
                               dict(self.producer_state.ongoing_transactions()), self.visible_records.marker_seq)
            yield job
            self.visible_records.install(job)

    def offset_for_timestamp(self, timestamp: int, read_committed: bool = False) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with a timestamp >= ``timestamp``
        that a reader at this isolation level may see; None if there is none."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            found = segment.find_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return self._fetchable(found, read_committed)
        return None

    def offset_of_max_timestamp(self, read_committed: bool = False) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with the log's largest timestamp
        (ListOffsets -3, KIP-734), None if a reader at this isolation level may not see
        it yet. As Kafka's, from the segment with the largest max timestamp (the first
        of equals), whatever the log start offset."""
        segment = max(self.segments, key=lambda s: s.max_timestamp, default=None)
        found = segment.max_timestamp_record() if segment is not None else None
        return self._fetchable(found, read_committed) if found is not None else None

    def _fetchable(self, found: tuple[int, int], read_committed: bool) -> tuple[int, int] | None:
        """``found`` if its offset is below the high watermark (the LSO when read_committed)."""
        upper = self.last_stable_offset if read_committed else self.high_watermark
        return found if found[0] < upper else None

    # -- durability ---------------------------------------------------------------------

    def prepare_flush(self) -> FlushPlan:
        """Capture what is unflushed; the high watermark moves only in complete_flush.
        Never raises: a buffered ``.txnindex`` entry that cannot be written out now
        becomes the plan's ``error``, so the flush fails as a failed fsync does."""
        plan = FlushPlan(self.log_end_offset)
        for segment in self._dirty:
            rolled = segment is not self.active_segment
            try:
                plan.fds.extend(segment.sync_fds(include_indexes=rolled))
                if not rolled and segment.txn_index.dirty:
                    plan.fds.extend(segment.txn_index.sync_fds())
            except OSError as e:
                plan.error = plan.error or e
        if self._dir_dirty:
            plan.directory = self.directory
        self._dirty = set()
        self._dir_dirty = False
        self._unflushed_messages = 0
        self._first_unflushed_ms = None
        return plan

    def complete_flush(self, plan: FlushPlan) -> None:
        if plan.target_offset > self.high_watermark:
            self.high_watermark = plan.target_offset
            self.recovery_point = max(self.recovery_point, plan.target_offset)
            self.producer_state.on_high_watermark(self.high_watermark)

    def flush(self) -> None:
        """Fsync everything appended so far and advance the high watermark (blocking)."""
        plan = self.prepare_flush()
        try:
            plan.run()
        except OSError as e:
            raise self.flush_failed(plan, e) from e
        self.complete_flush(plan)

    def flush_failed(self, plan: FlushPlan, error: BaseException) -> LogOfflineError:
        """An fsync failed: nothing it covered may be acknowledged, and the log goes
        offline (returns the error to raise). A later fsync of the same file may well
        succeed -- Linux reports a writeback error once and may have dropped the dirty
        pages -- so success then would prove nothing: only a restart, which re-reads
        and re-validates the log from its recovery point, makes it writable again.
        The high watermark stays where it was, so no reader sees what was not synced."""
        self._dirty.update(s for s in self.segments if s.base_offset <= plan.target_offset)
        self._dir_dirty = True
        return self._take_offline(error, "an fsync")

    # -- producer snapshots -------------------------------------------------------------

    def take_snapshot(self) -> Steps[None]:
        """Snapshot the producer state at the log end offset: encoded now, written to
        ``<offset>.snapshot`` (and older snapshots pruned) by the one job the returned
        steps yield. Recovery never needs the newest snapshot: a crash before the file
        is durable only means replaying from an older one."""
        offset = self.log_end_offset
        write = SnapshotWrite(filenames.snapshot_path(self.directory, offset),
                              producer_snapshot.encode(list(self.producer_state)),
                              self._prune_snapshots(offset))
        return self._snapshot_steps(offset, write)

    def _snapshot_steps(self, offset: int, write: SnapshotWrite) -> Steps[None]:
        yield write
        self._snapshot_set().add(offset)

    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshot_set())

    def _snapshot_set(self) -> set[int]:
        if self._snapshots is None:
            self._snapshots = snapshot_offsets_in(self.directory)
        return self._snapshots

    def _prune_snapshots(self, new: int | None = None) -> tuple[Path, ...]:
        """Keep one snapshot per segment base at or above the log start offset, plus
        the newest PERIODIC_SNAPSHOTS_TO_KEEP others (counting ``new``, one about to be
        written): forget the rest, and return their files for the caller's job to delete."""
        offsets = sorted(self._snapshot_set() | ({new} if new is not None else set()))
        bases = {segment.base_offset for segment in self.segments}
        periodic = [o for o in offsets if o not in bases]
        doomed = {o for o in offsets if o < self.log_start_offset}
        doomed.update(periodic[:-PERIODIC_SNAPSHOTS_TO_KEEP])
        doomed.discard(new)
        self._snapshot_set().difference_update(doomed)
        return tuple(filenames.snapshot_path(self.directory, offset) for offset in sorted(doomed))

    # -- retention ----------------------------------------------------------------------

    def deletable_segments(self, now_ms: int) -> list[LogSegment]:
        """Oldest segments wholly below the log start offset (DeleteRecords moved it:
        Kafka's ``deleteLogStartOffsetBreachedSegments``), past ``retention.ms`` or
        beyond ``retention.bytes``; never the active segment, nor one that reaches the
        LSO (read_committed still needs it)."""
        doomed: list[LogSegment] = []
        remaining = self.size_bytes
        lso = self.last_stable_offset
        for segment, following in zip(self.segments, self.segments[1:]):
            if following.base_offset > lso:
                break
            below_start = following.base_offset <= self.log_start_offset
            too_old = (self.config.retention_ms >= 0
                       and now_ms - self._segment_time(segment) > self.config.retention_ms)
            too_big = (self.config.retention_bytes >= 0
                       and remaining - segment.size >= self.config.retention_bytes)
            if not (below_start or too_old or too_big):
                break
            doomed.append(segment)
            remaining -= segment.size
        return doomed

    def delete_records(self, offset: int) -> int:
        """DeleteRecords (Kafka's ``maybeIncrementLogStartOffset``, ClientRecordDeletion):
        move the log start offset up to ``offset`` -- :data:`HIGH_WATERMARK` (-1) means
        the high watermark -- and return it (the partition's low watermark). Reads
        below it are OFFSET_OUT_OF_RANGE at once; the segments wholly below it go at
        the next retention pass. OFFSET_OUT_OF_RANGE past the high watermark or below
        -1; POLICY_VIOLATION on a topic whose cleanup.policy lacks delete. Producer
        state stays as it is, as in Kafka since KIP-360: a producer whose batches are
        all below the new start is forgotten only by producer-id expiry. The caller
        persists the log start offset."""
        self._check_online()
        if not self.config.delete:
            raise PolicyViolationError(f"records of {self.topic}-{self.partition} cannot be deleted: "
                                       f"cleanup.policy is {self.config.cleanup_policy}")
        new_start = self.high_watermark if offset == HIGH_WATERMARK else offset
        if new_start < 0 or new_start > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.topic}-{self.partition} to {offset}: "
                f"it must be within [0, {self.high_watermark}] (the high watermark)")
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            log.info("%s-%d: log start offset moved to %d (DeleteRecords)", self.topic, self.partition, new_start)
        return self.log_start_offset

    @staticmethod
    def _segment_time(segment: LogSegment) -> int:
        if segment.max_timestamp >= 0:
            return segment.max_timestamp
        return int(os.stat(segment.log_path).st_mtime * 1000)

    def delete_old_segments(self, now_ms: int) -> Steps[int]:
        """Retention: drop the :meth:`deletable_segments` from the log now (no read
        reaches them again, the log start offset moves past them) and yield the job
        that deletes their files. Returns how many went; the caller persists the log
        start offset."""
        doomed = self.deletable_segments(now_ms)
        if not doomed:
            return 0
        for segment in doomed:
            self.segments.remove(segment)
            self._dirty.discard(segment)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.visible_records.drop_before(self.segments[0].base_offset)
        yield SegmentDeletion(tuple(doomed), self._prune_snapshots())
        yield self.file_deletion(doomed)
        return len(doomed)

    def file_deletion(self, segments: list[LogSegment]) -> FileDeletion:
        """The job that removes the ``.deleted`` files of ``segments`` (retention's, or
        those a swap replaced), ``file.delete.delay.ms`` after it is yielded."""
        return FileDeletion(tuple(segment_files(self.directory, (s.base_offset for s in segments))),
                            self.config.file_delete_delay_ms)

    # -- compaction ---------------------------------------------------------------------

    def clean(self, now_ms: int) -> Steps[log_cleaner.CleanerStats]:
        """One round of the log cleaner on this log (``exactly/storage/log_cleaner.py``); it
        does nothing unless the topic's cleanup.policy includes compact."""
        return log_cleaner.clean(self, now_ms)

    def prepare_swap(self, old: list[LogSegment]) -> SegmentSwap | None:
        """The job that swaps the cleaned segment written for ``old`` (at the base offset
        of ``old[0]``) in on disk; None when ``old`` is no longer a run of this log's
        segments, so what was cleaned from them is stale."""
        if not holds_run(self.segments, old):
            return None
        return SegmentSwap(self.directory, old[0].base_offset, tuple(s.base_offset for s in old),
                           self.config.index_interval_bytes, self.clock.now_ms())

    def complete_swap(self, old: list[LogSegment], cleaned: LogSegment) -> SegmentClose:
        """Install ``cleaned`` (what :class:`SegmentSwap` returned) in place of ``old``;
        returns the job that closes them."""
        if not holds_run(self.segments, old) or cleaned.base_offset != old[0].base_offset:
            raise ValueError(f"{self.directory}: cleaned segment {cleaned.base_offset} does not "
                             f"replace consecutive segments starting there")
        first = self.segments.index(old[0])
        start, end = old[0].base_offset, self.segments[first + len(old)].base_offset
        recount = CountSegment(cleaned, start, end, self.collect_aborted(start, end))
        self.visible_records.replace_when_counted(start, end, recount)
        self._dirty.difference_update(old)
        self.segments[first:first + len(old)] = [cleaned]
        return SegmentClose(tuple(old), recount)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self, clean: bool = True) -> bool:
        """Flush, snapshot producer state at the log end, close the files; returns
        whether the close was clean. The files are closed whatever fails. An offline
        log closes uncleanly; so does one whose final fsync fails (it goes offline) or
        whose files do not close without an error: the next start recovers it from its
        recovery point. A snapshot that cannot be written (a full disk) only makes the
        next start replay producer state from an older one."""
        try:
            clean = clean and self.offline is None and self._final_flush()
        finally:
            closed = self._close_segments()
        return clean and closed

    def _final_flush(self) -> bool:
        """Fsync every segment with its indexes; False (and the log offline) if one fails."""
        try:
            for segment in self.segments:
                segment.flush()
            fsync_dir(self.directory)
        except OSError as e:
            self._take_offline(e, "the final fsync")
            return False
        self.complete_flush(FlushPlan(self.log_end_offset))
        if self.log_end_offset not in self.snapshot_offsets():
            try:
                run_inline(self.take_snapshot())
            except OSError as e:
                log.warning("%s-%d: no producer-state snapshot at shutdown (%s); the next start "
                            "replays from an older one", self.topic, self.partition, e.strerror or e)
        return True

    def _close_segments(self) -> bool:
        """Close every segment, even after one fails to; returns whether all closed cleanly."""
        closed = True
        for segment in self.segments:
            try:
                segment.close()
            except OSError:
                closed = False
        self.segments = []
        return closed

    def headers(self, start: int, upper: int) -> Iterator[BatchHeader]:
        """The headers of the stored batches holding offsets in ``[start, upper)``, in
        order, found through the offset index; their bodies are not read."""
        for segment in self.segments[self._segment_for(start):]:
            first = segment.find(start)
            if first is None:
                continue
            for location in segment.headers_from(first.position):
                if location.header.base_offset >= upper:
                    return
                yield location.header

    def batches(self, from_offset: int | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every stored batch from ``from_offset`` (default: the log start), in order;
        the offset index finds where to start in the first segment."""
        offset = self.log_start_offset if from_offset is None else from_offset
        for n, segment in enumerate(self.segments[self._segment_for(offset):]):
            position = segment.offset_index.lookup(offset)[1] if n == 0 else 0
            for location in segment.headers_from(position):
                if location.header.last_offset >= offset:
                    yield location.header, segment.pread(location.position, location.header.size)
