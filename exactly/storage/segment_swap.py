"""Putting segments in place of others, and letting the replaced ones go (Kafka's
``LocalLog.replaceSegments`` and its deletion of old segments).

A cleaned segment is written as ``.cleaned`` files by the log cleaner
(``exactly/storage/log_cleaner.py``, whose docstring has the swap protocol); the
:class:`SegmentSwap` job swaps it in on disk, crash-safely, and
:func:`complete_swap_files` finishes a committed swap -- the same function the loader
(``exactly/storage/log_loader.py``) runs on open for a swap a crash interrupted. Segments the
log no longer holds go by :class:`SegmentClose` (replaced by a swap) or
:class:`SegmentDeletion` (retention). Every job here is one step of
``exactly/storage/background.py``: ``run`` may execute on any thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from exactly.storage import filenames
from exactly.storage.atomic_file import fsync_dir
from exactly.storage.segment import LogSegment
from exactly.storage.segment_deletion import mark_deleted
from exactly.storage.visible_records import CountSegment


@dataclass(frozen=True, slots=True)
class SegmentDeletion:
    """Rename the files of segments the log no longer holds to ``.deleted`` (a
    :class:`FileDeletion` removes them later) and close them, and delete stale
    snapshots; ``run`` may execute on any thread. A crash half way leaves files below
    the log start offset, which the next open ignores or removes."""

    segments: tuple[LogSegment, ...]
    snapshots: tuple[Path, ...]

    def run(self) -> None:
        for segment in self.segments:
            for suffix in filenames.SEGMENT_SUFFIXES:
                mark_deleted(segment.path(suffix))
            segment.release()
        for path in self.snapshots:
            path.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class SegmentClose:
    """Close segments the log no longer holds (any thread): the last close of a
    deleted file frees its blocks, which is disk work too. First, ``recount``: the
    cleaned segment's counts for the log's ``visible_records``."""

    segments: tuple[LogSegment, ...]
    recount: CountSegment | None = None

    def run(self) -> None:
        if self.recount is not None:
            self.recount.run()
        for segment in self.segments:
            segment.release()


@dataclass(frozen=True, slots=True)
class SegmentSwap:
    """Swap the cleaned segment ``base_offset`` (written as ``.cleaned`` files, synced)
    in for the segments at ``replaced`` on disk, crash-safely (Kafka's
    ``replaceSegments``): rename its indexes and then its ``.log`` to ``.swap`` (that
    last rename is the commit point), then complete the swap as
    :func:`complete_swap_files` does on open. ``run`` may execute on any thread; it
    returns the new segment, opened, for ``PartitionLog.complete_swap``. The
    replaced segments stay open: whoever reads them keeps reading the old files."""

    directory: Path
    base_offset: int
    replaced: tuple[int, ...]
    index_interval_bytes: int
    created_ms: int

    def run(self) -> LogSegment:
        base, directory = self.base_offset, self.directory
        cleaned = [filenames.segment_path(directory, base, suffix + filenames.CLEANED_SUFFIX)
                   for suffix in filenames.SEGMENT_SUFFIXES]
        try:
            for suffix, path in zip(filenames.SEGMENT_SUFFIXES[1:], cleaned[1:]):
                os.rename(path, swap_path(directory, base, suffix))
            fsync_dir(directory)
            os.rename(cleaned[0], swap_path(directory, base, filenames.LOG_SUFFIX))  # the commit point
            fsync_dir(directory)
        except BaseException:  # the old segments are untouched: forget the cleaned one
            for suffix, path in zip(filenames.SEGMENT_SUFFIXES, cleaned):
                path.unlink(missing_ok=True)
                swap_path(directory, base, suffix).unlink(missing_ok=True)
            raise
        complete_swap_files(directory, base, self.replaced)
        segment = LogSegment(directory, base, self.index_interval_bytes, created_ms=self.created_ms)
        segment.load_tail()
        return segment


def swap_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return filenames.segment_path(directory, base_offset, suffix + filenames.SWAP_SUFFIX)


def complete_swap_files(directory: Path, base: int, replaced: tuple[int, ...] | list[int]) -> None:
    """Put the committed swap segment ``base`` in place of the segments ``replaced``:
    rename the files of those at other base offsets to ``.deleted``, then for each
    index ``.swap`` and the ``.log.swap`` last, the old file at ``base`` to
    ``.deleted`` and the ``.swap`` over it (one already gone was renamed before a
    crash). Repeating it after a crash at any step finishes the same swap."""
    for old_base in replaced:
        if old_base != base:
            for suffix in filenames.SEGMENT_SUFFIXES:
                mark_deleted(filenames.segment_path(directory, old_base, suffix))
    for suffix in (*filenames.SEGMENT_SUFFIXES[1:], filenames.LOG_SUFFIX):
        swap = swap_path(directory, base, suffix)
        if swap.exists():
            mark_deleted(filenames.segment_path(directory, base, suffix))
            os.replace(swap, filenames.segment_path(directory, base, suffix))
    fsync_dir(directory)


def holds_run(segments: Sequence[LogSegment], run: Sequence[LogSegment]) -> bool:
    """Whether ``run`` is a run of consecutive ``segments``, not the last (active) one."""
    if not run or run[0] not in segments:
        return False
    first = segments.index(run[0])
    return list(segments[first:first + len(run)]) == list(run) and first + len(run) < len(segments)
