"""Whether the data directory's disk is full: one log line when writes start to be
refused for lack of space, one when they succeed again -- never one per request.

A full disk is recoverable in place: every write that finds no space is undone
(``LogSegment.append`` is all or nothing) and refused with KAFKA_STORAGE_ERROR (56),
so nothing refused was acknowledged, and the same write succeeds once space is
freed -- nobody has to restart anything. (An fsync that fails is another matter:
that log goes offline until a restart, ``PartitionLog.flush_failed``.)

The disk counts as full from the first refused write until a log append succeeds
while the filesystem has room for the largest write refused meanwhile: a disk with a
few bytes left that takes a small append but not the batch refused before it is
still full, so the state does not flap with the size of the writes. Used from any
thread (the loop, the maintenance threads, the scheduler's jobs).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from exactly.storage.errors import LogDirFullError, is_no_space

log = logging.getLogger(__name__)

#: SQLite's answers when it finds no space: SQLITE_FULL for a write, and
#: SQLITE_IOERR_SHMSIZE when its WAL index (``-shm``, memory-mapped) cannot grow
SQLITE_NO_SPACE = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_SHMSIZE})


@dataclass(frozen=True, slots=True)
class DiskFull:
    """The state while writes are refused for lack of space (the console's banner)."""

    since: float
    refused_writes: int
    error: str


class DiskSpace:
    """Watches the writes of one data directory for ENOSPC (see the module docstring)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._lock = threading.Lock()
        self._full: DiskFull | None = None
        self._largest_refused = 0

    @property
    def full(self) -> DiskFull | None:
        """None while writes succeed."""
        return self._full

    def refused(self, error: BaseException, size: int = 0) -> None:
        """A write of ``size`` bytes found no space (``error`` says where)."""
        with self._lock:
            self._largest_refused = max(self._largest_refused, size)
            if self._full is not None:
                self._full = DiskFull(self._full.since, self._full.refused_writes + 1, self._full.error)
                return
            self._full = full = DiskFull(time.time(), 1, (str(error).splitlines() or [type(error).__name__])[0])
        log.error("data directory %s is full (%s): writes are refused with KAFKA_STORAGE_ERROR (56) "
                  "until space is freed; nothing refused was acknowledged", self.data_dir, full.error)

    def wrote(self) -> None:
        """A log append succeeded: if the disk was full and has room again, say so once."""
        if self._full is None:  # the hot path: no lock while the disk is fine
            return
        with self._lock:
            full = self._full
            if full is None or self._free_bytes() < self._largest_refused:
                return
            self._full, self._largest_refused = None, 0
        log.info("data directory %s has space again: writes resume (%d refused in %.0f s)",
                    self.data_dir, full.refused_writes, time.time() - full.since)

    def _free_bytes(self) -> int:
        """Free space for this process (only asked while the disk is full): root may
        write into the blocks a filesystem reserves for it, others may not."""
        try:
            stat = os.statvfs(self.data_dir)
        except OSError:
            return 0
        return (stat.f_bfree if os.geteuid() == 0 else stat.f_bavail) * stat.f_frsize


@dataclass(frozen=True, slots=True)
class VolumeUsage:
    """The job reading the size of the volume ``path`` is on and the bytes this process
    may still write there (Kafka's TotalBytes / UsableBytes); (-1, -1) if unknown."""

    path: Path

    def run(self) -> tuple[int, int]:
        try:
            stat = os.statvfs(self.path)
        except OSError:
            return -1, -1
        return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def is_disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` -- or what caused it, SQLAlchemy's wrapped driver error included
    (the SQLite mirror's) -- is a full disk."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, LogDirFullError) or is_no_space(error):
            return True
        if isinstance(error, sqlite3.Error) and getattr(error, "sqlite_errorcode", None) in SQLITE_NO_SPACE:
            return True
        error = getattr(error, "orig", None) or error.__cause__ or error.__context__
    return False
