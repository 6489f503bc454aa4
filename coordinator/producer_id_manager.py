"""Producer ids that are never handed out twice: across restarts, crashes, and a
deleted SQLite mirror.

Ids are allocated in blocks of ``BLOCK_SIZE``; the end of the current block is
made durable (``producer-id-block`` in the data directory, written atomically)
*before* the first id of the block is handed out. After a crash the unused rest
of the block is skipped, never reused. Kafka keeps the same block record in its
metadata log (``ProducerIdsRecord``). The file::

    Version  int16   0
    Crc      uint32  CRC-32C of NextBlockStart
    NextBlockStart int64  every id below it may have been handed out

As a second guard the caller passes ``floor``, one more than the largest producer
id found in the logs, so even a lost file cannot make an id come back.

The file is written off the owner's thread: when :meth:`ProducerIdManager.next_id`
has no durable id left it answers None, and the owner runs the job
:meth:`ProducerIdManager.next_block` returns (on a worker; its ``run`` writes and
syncs the file), then :meth:`ProducerIdManager.install` s it and asks again.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from storage.atomic_file import write_atomically

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"
VERSION = 0

LAYOUT = struct.Struct(
    ">"
    "h"  # Version
    "I"  # Crc: CRC-32C of the NextBlockStart bytes
    "q"  # NextBlockStart
)


class CorruptProducerIdBlockError(Exception):
    pass


@dataclass(frozen=True)
class ProducerIdBlock:
    """The file that makes every id below ``end`` usable; ``run`` writes it durably
    (any thread)."""

    path: Path
    end: int

    def run(self) -> None:
        body = struct.pack(">q", self.end)
        write_atomically(self.path, struct.pack(">hI", VERSION, crc32c.crc32c(body)) + body)


class ProducerIdManager:
    """Hands out producer ids from durable blocks. Not thread-safe (one owner)."""

    def __init__(self, data_dir: Path, floor: int = 0) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._next = max(self._read(), floor)
        self._block_end = self._next  # nothing of a new block is durable yet

    def _read(self) -> int:
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        if len(data) != LAYOUT.size:
            raise CorruptProducerIdBlockError(f"{self.path}: {len(data)} bytes, expected {LAYOUT.size}")
        version, crc, next_block_start = LAYOUT.unpack(data)
        if version != VERSION or crc != crc32c.crc32c(data[6:]):
            raise CorruptProducerIdBlockError(f"{self.path}: bad version or CRC")
        return next_block_start

    def next_id(self) -> int | None:
        """A producer id no one has had before, or None when the durable block is used
        up and :meth:`next_block` must be made durable first."""
        if self.exhausted:
            return None
        producer_id = self._next
        self._next += 1
        return producer_id

    @property
    def exhausted(self) -> bool:
        return self._next >= self._block_end

    def next_block(self) -> ProducerIdBlock:
        """The write that makes the next ``BLOCK_SIZE`` ids durable."""
        return ProducerIdBlock(self.path, self._next + BLOCK_SIZE)

    def install(self, block: ProducerIdBlock) -> None:
        """``block`` is durable: hand out the ids below its end."""
        self._block_end = max(self._block_end, block.end)

    def raise_floor(self, floor: int) -> None:
        """Never hand out anything below ``floor`` (a producer id seen in a log)."""
        self._next = max(self._next, floor)
