"""Deleting segment files the way Kafka does (``LocalLog.deleteSegmentFiles``): rename
them to ``.deleted`` at once, and remove them ``file.delete.delay.ms`` later.

The rename is a metadata step: the segment is out of the log from then on, and a
crash leaves only ``.deleted`` files, which the next open removes. The delay lets a
read still holding a replaced segment finish on its file. The removal itself gives
the file's blocks back at most :data:`FREE_BYTES_PER_SECOND`, :data:`FREE_STEP` at a
time: freeing a large file in one go (a 1 GiB cleaning round's replaced segments, a
retention pass's) holds the filesystem's journal -- on a disk mounted with online
discard, while the freed range is trimmed -- and every acks=all fsync of the broker
waits behind it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from exactly.storage import filenames

#: how much of a file one truncation gives back
FREE_STEP = 1 << 20
#: how fast a deletion gives blocks back (a 1 GiB round's replaced segments: 16 s)
FREE_BYTES_PER_SECOND = 64 << 20


def deleted_path(path: Path) -> Path:
    return path.with_name(path.name + filenames.DELETED_SUFFIX)


def segment_files(directory: Path, base_offsets: Iterable[int]) -> list[Path]:
    """The files of the segments at ``base_offsets``, under their ``.deleted`` names."""
    return [deleted_path(filenames.segment_path(directory, base, suffix))
            for base in base_offsets for suffix in filenames.SEGMENT_SUFFIXES]


def mark_deleted(path: Path) -> None:
    """Rename ``path`` to its ``.deleted`` name (replacing an older one); a file
    already gone is fine."""
    try:
        os.replace(path, deleted_path(path))
    except FileNotFoundError:
        pass


class Throttle:
    """Kafka's ``Throttler``: :meth:`spent` sleeps as long as it takes to keep the
    bytes spent at or under ``bytes_per_second`` since the throttle was made."""

    def __init__(self, bytes_per_second: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.bytes_per_second = bytes_per_second
        self._clock, self._sleep = clock, sleep
        self._started = clock()
        self._bytes = 0

    def spent(self, size: int) -> None:
        self._bytes += size
        ahead = self._bytes / self.bytes_per_second - (self._clock() - self._started)
        if ahead > 0:
            self._sleep(ahead)  # pacing the disk work, not waiting for a condition


@dataclass(eq=False)
class FileDeletion:
    """A job: remove ``paths`` (``.deleted`` files; one already gone is fine), giving
    their blocks back :data:`FREE_STEP` at a time through a throttle ``run`` makes
    (so the delay before it counts for nothing); ``run`` may
    execute on any thread. The driver starts it ``delay_ms`` after it was yielded;
    :meth:`cancel` (a broker closing) stops it at its next step, and the next open
    removes what is left."""

    paths: tuple[Path, ...]
    delay_ms: int = 0
    throttle: Callable[[], Throttle] = lambda: Throttle(FREE_BYTES_PER_SECOND)
    _cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self._cancelled.set()

    def run(self) -> None:
        throttle = self.throttle()
        for path in self.paths:
            if self._cancelled.is_set():
                return
            self._free(path, throttle)

    def _free(self, path: Path, throttle: Throttle) -> None:
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            while size > 0 and not self._cancelled.is_set():
                step = min(FREE_STEP, size)
                size -= step
                os.ftruncate(fd, size)
                throttle.spent(step)
        finally:
            os.close(fd)
        if not self._cancelled.is_set():
            path.unlink(missing_ok=True)
