"""Producer ids that are never handed out twice: across restarts, crashes, and a
deleted SQLite mirror.

Ids are allocated in blocks of ``BLOCK_SIZE``; the end of the current block is
made durable (``producer-id-block``, docs/formats.md §11, written atomically)
*before* the first id of the block is handed out. After a crash the unused rest
of the block is skipped, never reused. Kafka keeps the same block record in its
metadata log (``ProducerIdsRecord``). The file::

    Version  int16   0
    Crc      uint32  CRC-32C of NextBlockStart
    NextBlockStart int64  every id below it may have been handed out

As a second guard the caller passes ``floor``, one more than the largest producer
id found in the logs, so even a lost file cannot make an id come back.
"""

from __future__ import annotations

import struct
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

    def next_id(self) -> int:
        """A producer id no one has had before."""
        if self._next >= self._block_end:
            block_end = self._next + BLOCK_SIZE
            body = struct.pack(">q", block_end)
            write_atomically(self.path, struct.pack(">hI", VERSION, crc32c.crc32c(body)) + body)
            self._block_end = block_end
        producer_id = self._next
        self._next += 1
        return producer_id

    def raise_floor(self, floor: int) -> None:
        """Never hand out anything below ``floor`` (a producer id seen in a log)."""
        self._next = max(self._next, floor)
