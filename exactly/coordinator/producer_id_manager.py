"""Producer ids that are never handed out twice: across restarts, crashes, and a
deleted SQLite mirror.

Ids are allocated in blocks of ``BLOCK_SIZE``; the end of the current block is
made durable (``producer-id-block``, docs/formats.md §11, written atomically)
*before* the first id of the block is handed out. After a crash the unused rest
of the block is skipped, never reused. Kafka keeps the same block record in its
metadata log (``ProducerIdsRecord``). The file, framed as ``exactly/storage/checked_file.py``
says (version 0)::

    Version        int16   0
    Crc            uint32  CRC-32C of the body
    NextBlockStart int64   every id below it may have been handed out

Producer ids belong to the broker: what it may hand out next comes from this file
and from the transaction log (ids it gave transactional ids), never from the
producer ids in partition logs -- clients write those, and an id a client made up
(2^63-10, say) must not move allocation. The engine refuses batches with an id
that :meth:`ProducerIdManager.allocated` denies (at or above the next id to hand
out), so every id a log holds was handed out. Only when the file is lost (missing or
damaged) are the logs the last witness of idempotent producers' ids:
:meth:`ProducerIdManager.raise_floor` takes their largest, unless it leaves no room
for a block -- no broker hands out such an id, so a client wrote it (before ids were
checked) and it is ignored.

The file is written off the owner's thread: when :meth:`ProducerIdManager.next_id`
has no durable id left it answers None, and the owner runs the job
:meth:`ProducerIdManager.next_block` returns (on a worker; its ``run`` writes and
syncs the file), then :meth:`ProducerIdManager.install` s it and asks again.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path

from exactly.storage.checked_file import read_fields, write_fields
from exactly.storage.filenames import PRODUCER_ID_BLOCK

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000
#: the largest producer id (int64); a floor above ``MAX_PRODUCER_ID - BLOCK_SIZE``
#: leaves no room for a block
MAX_PRODUCER_ID = 2**63 - 1
VERSION = 0
BODY = struct.Struct(
    ">"
    "q"  # NextBlockStart
)


@dataclass(frozen=True)
class ProducerIdBlock:
    """The file that makes every id below ``end`` usable; ``run`` writes it durably
    (any thread)."""

    path: Path
    end: int

    def run(self) -> None:
        write_fields(self.path, VERSION, BODY, self.end)


class ProducerIdManager:
    """Hands out producer ids from durable blocks. Not thread-safe (one owner)."""

    def __init__(self, data_dir: Path) -> None:
        """:raise CorruptFileError: the file is damaged (the caller skips far ahead)."""
        self.path = Path(data_dir) / PRODUCER_ID_BLOCK
        fields = read_fields(self.path, VERSION, BODY)
        #: whether the file said where allocation stands (else the logs may have to)
        self.from_file = fields is not None
        self._next = 0 if fields is None else fields[0]
        self._block_end = self._next  # nothing of a new block is durable yet

    def allocated(self, producer_id: int) -> bool:
        """Whether ``producer_id`` may have been handed out by this broker (now or
        before a restart: the file makes a block's ids durable before the first goes)."""
        return 0 <= producer_id < self._next

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
        """Never hand out anything below ``floor`` (one more than an id the broker
        handed out); a floor that leaves no room for a block is no broker's and is
        ignored (see the module docstring)."""
        if floor > MAX_PRODUCER_ID - BLOCK_SIZE:
            log.warning("ignoring producer id floor %d: no broker hands out ids that high", floor)
            return
        self._next = max(self._next, floor)
