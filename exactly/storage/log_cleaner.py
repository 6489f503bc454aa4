"""The log cleaner: Kafka's log compaction (``LogCleaner``), transaction-aware.

A topic whose ``cleanup.policy`` includes ``compact`` keeps, for every key, at
least the last value written to it. :func:`clean` (``PartitionLog.clean``) does one
round on one partition; the log manager runs it on every compacted partition every
``log.cleaner.backoff.ms``.

**What is cleaned.** Whole non-active segments below the *first uncleanable
offset*, the smallest of

* the last stable offset -- nothing at or beyond it is touched, so neither data of
  an open transaction nor anything not yet fsynced (the LSO is capped by the high
  watermark);
* the active segment's base offset;
* the base offset of the first dirty segment holding a batch newer than
  ``now - min.compaction.lag.ms`` (Kafka's per-segment rule; for whole segments it
  is the same as "the first offset of any batch newer than that").

The cleaner checkpoint (Kafka's ``cleaner-offset-checkpoint`` file, persisted by the
log manager) is the end of the last round's range: offsets below it are *clean*,
the rest of the range is *dirty*. A round runs only when some whole segment is
dirty, or when a delete horizon stamped by an earlier round has passed; otherwise
it costs a few comparisons. The checkpoint is an optimisation, never a premise of
correctness: a lost or stale one only makes a round do more work or keep a
duplicate that a later round removes.

**A round.** (1) The *offset map*, key -> highest offset, is built over the dirty
part of the range, skipping aborted transactional data (the read_committed walk over
the ``.txnindex`` entries, ``exactly/storage/aborted_transactions.py``) and control
batches. (2) Every batch of the range, clean part included, is filtered in offset
order:

* a record is kept only if no higher offset in the map has its key; keyless
  records are dropped (the produce path rejects them with INVALID_RECORD, as Kafka
  does: "Compacted topic cannot accept message without key");
* a *tombstone* (null value) that is the latest for its key is kept until its
  batch's delete horizon (KIP-534): the first round that keeps it stamps the batch
  -- attribute bit 6, BaseTimestamp = now + ``delete.retention.ms`` -- and the
  first round at or after that time drops it, so a consumer that is behind by less
  than ``delete.retention.ms`` still sees the delete;
* data of an *aborted* transaction is dropped entirely; committed transactional
  data is compacted like any other;
* a COMMIT or ABORT *marker* stays, unchanged, while any batch of its transaction
  is still in the log. Once none is, it is stamped with a delete horizon and
  dropped at that horizon, so a reader never meets aborted data without its ABORT
  marker, and one that is behind still sees the marker for ``delete.retention.ms``;
* *producer state survives*: the batches producer state remembers for each
  producer (its last five, for duplicate detection) keep at least their header --
  an empty batch (RecordCount 0, same BaseOffset, LastOffsetDelta, producer id,
  epoch, BaseSequence; Kafka's ``writeEmptyHeader``) when all their records go --
  and each producer's last marker in the range is kept whole (it carries the
  epoch and coordinator epoch). Producer state rebuilt from the cleaned log
  is therefore the state it had, and a retry of a recent batch is still a
  duplicate. Producers no longer in producer state (expired) keep nothing.

A batch that keeps some records is rewritten with those records only: the same
BaseOffset, offset deltas (v2 allows gaps), LastOffsetDelta, BaseSequence,
producer fields, timestamps and codec, a new RecordCount and CRC
(``record_batch.encode_retained``). A batch that keeps everything is copied as it
is. Offsets never change; the log start offset, producer state, LSO and high
watermark are untouched.

Consecutive segments are grouped (Kafka's ``groupSegmentsBySize``: together at most
``segment.bytes`` and within one segment's index and offset limits) and each
group is written as one cleaned segment at the group's base offset. A lone segment
whose batches would all come out unchanged is left alone.

**Indexes.** A cleaned segment's ``.index`` and ``.timeindex`` are rebuilt as its
batches are written (MaxTimestamp is kept, so the time index still finds what it
found). Its ``.txnindex`` keeps exactly the entries whose ABORT marker is kept: an
entry whose marker is gone must go too -- a read_committed reader would otherwise
mark the producer aborted and never see the marker that ends it.

**Swap protocol** (Kafka's ``replaceSegments``; ``segment_swap.SegmentSwap``).
The cleaned segment is written as ``<base>.log.cleaned`` and
``.index/.timeindex/.txnindex.cleaned`` (all four, an empty ``.txnindex`` too),
fsynced, its indexes renamed to ``.swap``, the directory fsynced, then the
``.log.cleaned`` renamed to ``.log.swap``: the commit point. Then the old segments
at other base offsets are deleted, each ``.swap`` renamed over the old file of the
same name (indexes first, the ``.log`` last) and the directory fsynced. On open
(``exactly/storage/log_loader.py``) every ``.cleaned`` file, and every ``.swap``
file without its ``.log.swap``, is deleted; a ``.log.swap`` replaces every segment
whose base offset lies in the offsets it holds. A crash at any point leaves the old
segments or the cleaned one -- or, if the group's last segments were emptied
entirely, the cleaned one followed by those old segments, which is still a valid,
merely less compacted, log. A failure before the commit point deletes the
``.cleaned`` files and leaves the log as it was.

**Off the loop, out of the interpreter.** A round is steps
(``exactly/storage/background.py``), as Kafka's cleaner runs on its own threads. What it
needs of the log's state -- producer state, the aborted transactions and
``.txnindex`` entries of the range, the segments' base offsets and sizes, the
grouping -- is captured on the owner's thread as a :class:`Plan` of plain values.
Its CPU work -- the offset map, filtering and re-encoding every batch, writing and
syncing each group's cleaned segment -- is one :class:`~exactly.storage.background.ProcessJob`
(:func:`write_cleaned`), which the engine runs in its worker process
(``exactly/app/engine/worker_process.py``): decoding 1 GiB of records in the broker's own
interpreter would hold the GIL the event loop needs. Then each group's swap runs on
the engine's maintenance thread and is installed on the owner's thread. Appends only
touch the active segment, which is never in the range; retention is never run on the
log during a round (the engine runs one maintenance job per partition at a time), and
should the segments of a group still have changed, ``PartitionLog.prepare_swap``
says so and the round stops, deleting what it wrote. A job that fails -- or a worker
killed mid-write -- leaves ``.cleaned`` files only, which the round deletes.

**Where this differs from Kafka.** No ``min.cleanable.dirty.ratio``: any dirty
segment makes a round. The map is an unbounded dict, not a fixed dedupe buffer,
so a round always covers the whole range. A marker's horizon starts when the last batch of its
transaction leaves the log, in that same round (Kafka waits for the next round).
Five batches per producer keep their headers, not one, as this broker's
snapshots keep five. A producer's last marker is kept whole, not as an empty
control batch (our readers, and producer-state replay, need its record).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol, Sequence, TypeVar

from exactly.storage import filenames
from exactly.storage.aborted_transactions import AbortedTransactionTracker
from exactly.storage.background import ProcessJob, Steps
from exactly.storage.errors import CorruptMessageError
from exactly.storage.log_config import LogConfig
from exactly.storage.producer_state import ProducerStateManager
from exactly.storage.record_batch import (
    BatchHeader,
    ControlType,
    StoredRecord,
    decode_batch,
    decode_control_record,
    encode_retained,
    iter_headers,
    read_header,
    stored_records,
)
from exactly.storage.segment import LogSegment, walk_headers
from exactly.storage.segment_deletion import FileDeletion
from exactly.storage.segment_swap import SegmentClose, SegmentSwap
from exactly.storage.txn_index import AbortedTxn


class _HasBaseOffset(Protocol):
    @property
    def base_offset(self) -> int: ...


_S = TypeVar("_S", bound=_HasBaseOffset)

#: bytes read from a segment at a time while cleaning
_READ_CHUNK = 1 << 20
#: the cleaned segment is synced every this many bytes written, so that its last sync
#: is short and no produce fsync queues behind one large one
_SYNC_EVERY_BYTES = 4 << 20
_INT32_MAX = 2**31 - 1
#: the larger of the offset (8) and time (12) index entries, as PartitionLog rolls
_INDEX_ENTRY_BYTES = 12


@dataclass
class CleanerState:
    """What the cleaner remembers of one partition between rounds."""

    #: the first dirty offset: below it the log has been cleaned (persisted in the
    #: data directory's cleaner-offset-checkpoint)
    checkpoint: int = 0
    #: the earliest delete horizon still ahead in the clean part; None if there is none
    next_horizon_ms: int | None = None
    #: False until the first round after opening the log has looked for horizons
    horizons_known: bool = False


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """What one round did; all zero when there was nothing to clean."""

    #: size of the cleanable range before and after the round
    bytes_before: int = 0
    bytes_after: int = 0
    #: data records dropped (superseded, expired tombstones, aborted, keyless)
    records_removed: int = 0
    #: batches dropped whole, markers included
    batches_removed: int = 0
    #: old segments replaced by cleaned ones
    segments_rewritten: int = 0
    #: the process that read the range and wrote the cleaned segments (the engine's
    #: worker process, or this one under run_inline)
    pid: int = 0


class CleanableLog(Protocol):
    """What a round needs of the log it cleans (``PartitionLog`` is one): the cleaner
    is called by the log and never imports it."""

    directory: Path
    config: LogConfig
    cleaner_state: CleanerState
    segments: list[LogSegment]
    log_start_offset: int
    producer_state: ProducerStateManager

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def active_segment(self) -> LogSegment: ...

    def collect_aborted(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]: ...

    def prepare_swap(self, old: list[LogSegment]) -> SegmentSwap | None: ...

    def complete_swap(self, old: list[LogSegment], cleaned: LogSegment) -> SegmentClose: ...

    def file_deletion(self, segments: list[LogSegment]) -> FileDeletion: ...


class CleaningAbortedError(Exception):
    """A round was cancelled (its partition is being deleted, the broker is closing);
    Kafka's ``LogCleaningAbortedException``. The log is as it was before the group
    being written."""


def clean(log: CleanableLog, now_ms: int) -> Steps[CleanerStats]:
    """One cleaning round on ``log`` at time ``now_ms`` (see the module docstring), as
    steps (``exactly/storage/background.py``): the round is planned on the owner's thread; one
    :class:`ProcessJob` reads the range and writes every group's cleaned segment
    (:func:`write_cleaned`); then, group by group, each is swapped in on disk and
    installed on the owner's thread once ``prepare_swap`` of the log has found
    the segments it replaces still in the log (else the round stops, and what it
    wrote is deleted)."""
    if not log.config.compact:
        return CleanerStats()
    state = log.cleaner_state
    first_dirty = state.checkpoint
    if not log.log_start_offset <= first_dirty <= log.log_end_offset:
        first_dirty = log.log_start_offset  # as Kafka does with an out-of-range checkpoint
    segments = cleanable_segments(log, now_ms, first_dirty)
    if not segments:
        return CleanerStats()
    end = log.segments[len(segments)].base_offset
    if not state.horizons_known:
        files = tuple(SegmentFile(segment.base_offset, segment.size) for segment in segments)
        state.next_horizon_ms = yield ProcessJob(earliest_horizon, log.directory, files)
        state.horizons_known = True
    horizon_due = state.next_horizon_ms is not None and state.next_horizon_ms <= now_ms
    if end <= first_dirty and not horizon_due:
        return CleanerStats()
    groups = _groups(segments, end, log.config)
    plan = _plan(log, now_ms, first_dirty, end, groups)
    try:
        written: Written = yield ProcessJob(write_cleaned, plan)
    except Exception:  # a worker process that died could not delete what it wrote
        yield _DeleteFiles(plan.cleaned_paths(0))
        raise
    before = sum(segment.size for segment in segments)
    after = rewritten = 0
    for i, group in enumerate(groups):
        if not written.groups[i]:
            after += sum(segment.size for segment in group)
            continue
        swap = log.prepare_swap(group)
        if swap is None:  # retention (or anything else) changed the log under the round
            yield _DeleteFiles(plan.cleaned_paths(i))
            return written.stats(before, after, rewritten)
        try:
            cleaned = yield swap
            yield log.complete_swap(group, cleaned)
        except Exception:
            yield _DeleteFiles(plan.cleaned_paths(i))
            raise
        yield log.file_deletion(group)
        after += cleaned.size
        rewritten += len(group)
    state.checkpoint = max(first_dirty, end)
    state.next_horizon_ms = written.next_horizon_ms
    return written.stats(before, after, rewritten)


def cleanable_segments(log: CleanableLog, now_ms: int, first_dirty: int) -> list[LogSegment]:
    """The leading segments of ``log`` that lie wholly below its first uncleanable
    offset (Kafka's ``LogCleanerManager.cleanableOffsets``)."""
    uncleanable = min(log.last_stable_offset, log.active_segment.base_offset)
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for segment, following in zip(log.segments, log.segments[1:]):
            if following.base_offset > first_dirty and segment.max_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    count = 0
    for following in log.segments[1:]:
        if following.base_offset > uncleanable:
            break
        count += 1
    return log.segments[:count]


# -- planned on the owner's thread ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A sealed segment as a round's job reads it: its ``.log`` up to ``size``, what
    the log held when the round was planned (a sealed segment never grows)."""

    base_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class Plan:
    """What a round's job needs, captured on the owner's thread: plain values only, so
    that it pickles to a worker process."""

    directory: Path
    #: the cleanable range, grouped: each group becomes one cleaned segment
    groups: tuple[tuple[SegmentFile, ...], ...]
    first_dirty: int
    end: int
    now_ms: int
    delete_retention_ms: int
    index_interval_bytes: int
    #: the aborted transactions of [first_dirty, end) (their data stays out of the map)
    dirty_aborted: tuple[AbortedTxn, ...]
    #: the aborted transactions of the whole range (their data is dropped)
    aborted: tuple[AbortedTxn, ...]
    #: the ``.txnindex`` entries of the range's segments
    txn_entries: tuple[AbortedTxn, ...]
    #: the producers producer state knows
    producers: frozenset[int]
    #: (producer id, last offset) of every batch producer state remembers
    remembered: frozenset[tuple[int, int]]

    @property
    def files(self) -> list[SegmentFile]:
        return [file for group in self.groups for file in group]

    def cleaned_paths(self, first_group: int) -> list[Path]:
        """The cleaned files of the groups from ``first_group`` on."""
        return [path for group in self.groups[first_group:]
                for path in _cleaned_paths(self.directory, group[0].base_offset)]


def _plan(log: CleanableLog, now_ms: int, first_dirty: int, end: int,
          groups: list[list[LogSegment]]) -> Plan:
    segments = [segment for group in groups for segment in group]
    producers = log.producer_state.producers
    return Plan(
        directory=log.directory,
        groups=tuple(tuple(SegmentFile(segment.base_offset, segment.size) for segment in group)
                     for group in groups),
        first_dirty=first_dirty, end=end, now_ms=now_ms,
        delete_retention_ms=log.config.delete_retention_ms,
        index_interval_bytes=log.config.index_interval_bytes,
        dirty_aborted=tuple(log.collect_aborted(first_dirty, end)),
        aborted=tuple(log.collect_aborted(segments[0].base_offset, end)),
        txn_entries=tuple(txn for segment in segments for txn in segment.txn_index.all_entries()),
        producers=frozenset(producers),
        remembered=frozenset((pid, batch.last_offset)
                             for pid, entry in producers.items() for batch in entry.batches))


def _with_following_bases(segments: Sequence[_S], end: int) -> Iterator[tuple[_S, int]]:
    """Each segment with the base offset of the one after it (``end`` for the last)."""
    return zip(segments, [segment.base_offset for segment in segments[1:]] + [end])


def _groups(segments: list[LogSegment], end: int, config: LogConfig) -> list[list[LogSegment]]:
    """Consecutive segments that one cleaned segment can hold: at most segment.bytes
    before cleaning, offsets within 2^31-1 of the base, index entries within
    segment.index.bytes (Kafka's ``groupSegmentsBySize``)."""
    max_entries = config.segment_index_bytes // _INDEX_ENTRY_BYTES
    groups: list[list[LogSegment]] = []
    size = entries = 0
    for segment, following_base in _with_following_bases(segments, end):
        segment_entries = max(len(segment.offset_index), len(segment.time_index)) + 1
        if (groups and size + segment.size <= config.segment_bytes
                and following_base - 1 - groups[-1][0].base_offset <= _INT32_MAX
                and entries + segment_entries <= max_entries):
            groups[-1].append(segment)
            size += segment.size
            entries += segment_entries
        else:
            groups.append([segment])
            size, entries = segment.size, segment_entries
    return groups


def _cleaned_paths(directory: Path, base_offset: int) -> list[Path]:
    return [filenames.segment_path(directory, base_offset, suffix + filenames.CLEANED_SUFFIX)
            for suffix in filenames.SEGMENT_SUFFIXES]


class _DeleteFiles:
    """Delete the files of work a round discards."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def run(self) -> None:
        for path in self.paths:
            path.unlink(missing_ok=True)


# -- the jobs: in a worker process under the engine -----------------------------------------


@dataclass(frozen=True, slots=True)
class Written:
    """What :func:`write_cleaned` did."""

    #: per group of the plan, whether a cleaned segment was written for it
    groups: tuple[bool, ...]
    #: the earliest delete horizon the round stamped or kept
    next_horizon_ms: int | None
    records_removed: int
    batches_removed: int
    #: the process that did it
    pid: int

    def stats(self, bytes_before: int, bytes_after: int, segments_rewritten: int) -> CleanerStats:
        return CleanerStats(bytes_before, bytes_after, self.records_removed, self.batches_removed,
                            segments_rewritten, self.pid)


def earliest_horizon(is_cancelled: Callable[[], bool], directory: Path,
                     files: tuple[SegmentFile, ...]) -> int | None:
    """The earliest delete horizon stamped in ``files``, from the batch headers."""
    with _Reader(directory, is_cancelled) as reader:
        return min((header.base_timestamp for header in reader.headers(files)
                    if header.delete_horizon_ms is not None), default=None)


def write_cleaned(is_cancelled: Callable[[], bool], plan: Plan) -> Written:
    """A round's work on the files: build the offset map and find each known
    producer's last marker, then filter every batch of the range in offset order and
    write each group's cleaned segment as ``.cleaned`` files, synced. What it wrote is
    left for the owner to swap in, or to delete if this raises."""
    with _Reader(plan.directory, is_cancelled) as reader:
        last_markers = {header.producer_id: header.base_offset for header in reader.headers(plan.files)
                        if header.is_control and header.producer_id in plan.producers}
        round_ = _Round(plan, _offset_map(reader, plan), last_markers)
        written = tuple(_GroupWriter(reader, plan, round_, group).run() for group in plan.groups)
    return Written(written, round_.next_horizon_ms, round_.records_removed, round_.batches_removed,
                   os.getpid())


def _offset_map(reader: _Reader, plan: Plan) -> dict[bytes, int]:
    """Key -> highest offset of a record with that key in [first_dirty, end), aborted
    data left out: it must never make committed data go."""
    offset_map: dict[bytes, int] = {}
    first_dirty = plan.first_dirty
    aborted = AbortedTransactionTracker.of(plan.dirty_aborted)
    for file, following_base in _with_following_bases(plan.files, plan.end):
        if following_base <= first_dirty:
            continue
        for _, header, batch in reader.batches(file):
            if header.last_offset < first_dirty:
                continue
            if header.is_control:
                aborted.is_aborted(header, abort_marker=(
                    header.has_producer_id and _control_type(batch) == ControlType.ABORT))
                continue
            if aborted.is_aborted(header):
                continue
            base_offset = header.base_offset
            for record in stored_records(batch)[1]:
                offset = base_offset + record.offset_delta
                if record.key is not None and offset >= first_dirty:
                    offset_map[record.key] = offset
    return offset_map


class _Reader:
    """The sealed segments of one partition directory, as a job reads them. Before
    each batch it checks ``is_cancelled`` and raises CleaningAbortedError once it is
    true. Unlike recovery it never stops quietly: a segment it cannot read whole
    raises, and the round leaves the log as it was."""

    def __init__(self, directory: Path, is_cancelled: Callable[[], bool]) -> None:
        self.directory = directory
        self._is_cancelled = is_cancelled
        self._fds: dict[int, int] = {}

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def log_path(self, file: SegmentFile) -> Path:
        return filenames.segment_path(self.directory, file.base_offset, filenames.LOG_SUFFIX)

    def pread(self, file: SegmentFile, position: int, size: int) -> bytes:
        return os.pread(self._fd(file), size, position)

    def _fd(self, file: SegmentFile) -> int:
        fd = self._fds.get(file.base_offset)
        if fd is None:
            fd = self._fds[file.base_offset] = os.open(self.log_path(file), os.O_RDONLY)
        return fd

    def headers(self, files: Iterable[SegmentFile]) -> Iterator[BatchHeader]:
        """The header of every batch of ``files``, in order."""
        for file in files:
            for location in walk_headers(self._fd(file), 0, file.size):
                self._check()
                yield location.header

    def batches(self, file: SegmentFile) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """``(position, header, bytes)`` of every batch of ``file``, a chunk at a time."""
        position = 0
        while position < file.size:
            chunk = self.pread(file, position, min(_READ_CHUNK, file.size - position))
            consumed = 0
            for at, header in iter_headers(chunk):
                self._check()
                yield position + at, header, chunk[at:at + header.size]
                consumed = at + header.size
            if consumed == 0:  # one batch larger than a chunk, or a damaged tail
                header = read_header(chunk)
                if position + header.size > file.size:
                    raise CorruptMessageError(
                        f"{self.log_path(file)}: batch at position {position} runs past the end")
                self._check()
                yield position, header, self.pread(file, position, header.size)
                consumed = header.size
            position += consumed

    def _check(self) -> None:
        if self._is_cancelled():
            raise CleaningAbortedError(f"cleaning of {self.directory} was cancelled")


def _control_type(batch: bytes) -> ControlType | int:
    return decode_control_record(decode_batch(batch).records[0])[0]


class _GroupWriter:
    """Writes one group's cleaned segment, as ``.cleaned`` files, synced; ``run``
    returns whether it wrote one. A lone segment is written only once one of its
    batches changes (the unchanged ones before it are copied then), so a segment that
    comes out as it went in is left alone. On failure its files stay: the round
    deletes them (a worker killed mid-write could not)."""

    def __init__(self, reader: _Reader, plan: Plan, round_: _Round, group: tuple[SegmentFile, ...]) -> None:
        self.reader = reader
        self.plan = plan
        self.round = round_
        self.group = group
        self.cleaned: LogSegment | None = None
        #: bytes of the cleaned segment synced so far
        self._synced = 0
        #: unchanged batches not written yet: (segment, position, header, its .txnindex entry)
        self._pending: list[tuple[SegmentFile, int, BatchHeader, AbortedTxn | None]] = []

    def run(self) -> bool:
        try:
            if len(self.group) > 1:
                self._open()
            aborts = self.round.aborts_by_marker
            for file in self.group:
                for position, header, batch in self.reader.batches(file):
                    out = self.round.filter(header, batch)
                    txn = aborts.get(header.base_offset) if header.is_control and out is not None else None
                    self._add(file, position, header, batch, out, txn)
            if self.cleaned is None:
                return False
            self._finish()
            return True
        finally:
            if self.cleaned is not None:
                self.cleaned.close()

    def _add(self, file: SegmentFile, position: int, header: BatchHeader, batch: bytes,
             out: bytes | None, txn: AbortedTxn | None) -> None:
        """``out`` is what becomes of ``batch``: the same object when it is unchanged,
        new bytes when it was rewritten, None when it is dropped."""
        if self.cleaned is None:
            if out is batch:
                self._pending.append((file, position, header, txn))
                return
            self._open()
        if out is not None:
            self._append(out, header if out is batch else read_header(out), txn)

    def _open(self) -> None:
        base = self.group[0].base_offset
        for path in _cleaned_paths(self.plan.directory, base):  # a failed earlier round may have left some
            path.unlink(missing_ok=True)
        self.cleaned = LogSegment(self.plan.directory, base, self.plan.index_interval_bytes,
                                  created_ms=self.plan.now_ms, file_suffix=filenames.CLEANED_SUFFIX)
        for file, position, header, txn in self._pending:
            self._append(self.reader.pread(file, position, header.size), header, txn)
        self._pending = []

    def _append(self, batch: bytes, header: BatchHeader, txn: AbortedTxn | None) -> None:
        assert self.cleaned is not None
        self.cleaned.append(batch, header)
        if txn is not None:
            self.cleaned.append_aborted_txn(txn)
        if self.cleaned.size - self._synced >= _SYNC_EVERY_BYTES:
            self.cleaned.flush()
            self._synced = self.cleaned.size

    def _finish(self) -> None:
        """Sync the cleaned segment, with every index file (so a swap is unambiguous)
        and the old segments' modification time (retention by mtime sees the old age)."""
        assert self.cleaned is not None
        self.cleaned.flush()
        self.cleaned.path(filenames.TXN_INDEX_SUFFIX).touch()
        modified = max(os.stat(self.reader.log_path(file)).st_mtime_ns for file in self.group)
        os.utime(self.cleaned.log_path, ns=(modified, modified))


class _Round:
    """The filter of a round: every batch of the cleanable range, in offset order,
    group by group (its writers call :meth:`filter` one after another)."""

    def __init__(self, plan: Plan, offset_map: dict[bytes, int], last_markers: dict[int, int]) -> None:
        self.now_ms = plan.now_ms
        #: key -> the highest offset of a record with that key in the dirty part
        self.offset_map = offset_map
        self.horizon_ms = plan.now_ms + plan.delete_retention_ms
        self.aborted = AbortedTransactionTracker.of(plan.aborted)
        #: the ``.txnindex`` entries of the range, by the offset of their ABORT marker
        self.aborts_by_marker = {txn.last_offset: txn for txn in plan.txn_entries}
        #: (producer id, last offset) of every batch producer state remembers
        self.remembered = plan.remembered
        #: each known producer's last marker in the range
        self.last_markers = last_markers
        #: producer id -> whether a batch of its current transaction is kept
        self.txn_kept: dict[int, bool] = {}
        self.next_horizon_ms: int | None = None
        self.records_removed = self.batches_removed = 0

    def filter(self, header: BatchHeader, batch: bytes) -> bytes | None:
        """What becomes of one batch: ``batch`` itself, a rewrite, or None (dropped)."""
        out = self._filter(header, batch)
        if out is None:
            self.batches_removed += 1
        return out

    def _filter(self, header: BatchHeader, batch: bytes) -> bytes | None:
        if header.is_control:
            return self._filter_marker(header, batch)
        aborted = self.aborted.is_aborted(header)
        remembered = header.has_producer_id and (header.producer_id, header.last_offset) in self.remembered
        if aborted or header.record_count == 0:
            kept: list[StoredRecord] = []
        else:
            kept = [record for record in stored_records(batch)[1] if self._keeps(header, record)]
        self.records_removed += header.record_count - len(kept)
        out: bytes | None
        stamp = None
        if kept:
            tombstones = any(record.is_tombstone for record in kept)
            if tombstones:
                if header.delete_horizon_ms is None:
                    stamp = self.horizon_ms
                self._horizon_ahead(stamp if stamp is not None else header.delete_horizon_ms)
            if len(kept) == header.record_count and stamp is None:
                out = batch
            else:
                out = encode_retained(header, kept, delete_horizon_ms=stamp)
        elif remembered:
            out = batch if header.record_count == 0 else encode_retained(header, [])
        else:
            out = None
        if header.is_transactional:
            self.txn_kept[header.producer_id] = self.txn_kept.get(header.producer_id, False) or out is not None
        return out

    def _keeps(self, header: BatchHeader, record: StoredRecord) -> bool:
        if record.key is None:
            return False
        if header.base_offset + record.offset_delta < self.offset_map.get(record.key, -1):
            return False  # a later record has this key
        if record.is_tombstone:
            horizon = header.delete_horizon_ms
            return horizon is None or self.now_ms < horizon
        return True

    def _filter_marker(self, header: BatchHeader, batch: bytes) -> bytes | None:
        if not header.has_producer_id:
            return batch
        control_type = _control_type(batch)
        self.aborted.is_aborted(header, abort_marker=control_type == ControlType.ABORT)
        if control_type not in (ControlType.ABORT, ControlType.COMMIT):
            return batch
        producer_id = header.producer_id
        if self.txn_kept.pop(producer_id, False):
            return batch  # its transaction still has data in the log
        horizon = header.delete_horizon_ms
        if horizon is None:
            self._horizon_ahead(self.horizon_ms)
            return encode_retained(header, stored_records(batch)[1], delete_horizon_ms=self.horizon_ms)
        if self.now_ms < horizon:
            self._horizon_ahead(horizon)
            return batch
        if self.last_markers.get(producer_id) == header.base_offset:
            return batch  # producer state needs it: epoch, coordinator epoch
        return None

    def _horizon_ahead(self, horizon: int | None) -> None:
        """Remember the earliest horizon a later round must act on (one stamped now
        with delete.retention.ms=0 is due at once; a kept batch is never past it)."""
        if horizon is not None and horizon >= self.now_ms and (
                self.next_horizon_ms is None or horizon < self.next_horizon_ms):
            self.next_horizon_ms = horizon
