"""The aborted transaction index ``<base offset>.txnindex`` (docs/formats.md §5).

There is one entry for each transaction whose ABORT marker was written in this
segment. A READ_COMMITTED fetch uses the index to tell the consumer which
producers' records to drop in the range it reads. The transaction itself may
have started in an earlier segment. The file is a bare run of 34-byte entries
(KIP-98's ``TransactionEntry``, Kafka's ``AbortedTxn``)::

    entry := version            int16   0; readers reject anything else
             producer_id        int64
             first_offset       int64   offset of the transaction's first batch
             last_offset        int64   offset of its ABORT marker
             last_stable_offset int64   the partition's LSO when the abort was written

All fields are big-endian. Entry ``n`` is at byte ``34 * n``, and
``last_offset`` strictly increases. Nothing is checksummed: the index is
rebuilt from the log on doubt.

Worked example: producer 7 aborts a transaction that spans offsets 100..150
while the LSO is 100. The index gains these 34 bytes::

    00 00                       version 0
    00 00 00 00 00 00 00 07     producer id 7
    00 00 00 00 00 00 00 64     first offset 100
    00 00 00 00 00 00 00 96     last offset 150
    00 00 00 00 00 00 00 64     last stable offset 100

Aborts are rare, so (as in Kafka) the file is created only by the first append.
The entries are kept in memory once loaded.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO, NamedTuple, Self

from exactly.storage.index_file import (
    dup_for_sync,
    MEMORY_PATH,
    CorruptIndexError,
    IndexInvariantError,
    fsync_file,
)

__all__ = ["AbortedTxn", "CorruptIndexError", "IndexInvariantError", "TransactionIndex",
           "TxnIndexSearchResult"]

CURRENT_VERSION = 0

ENTRY = struct.Struct(
    ">"
    "h"  # version: CURRENT_VERSION
    "q"  # producer id
    "q"  # first offset: the transaction's first batch
    "q"  # last offset: the ABORT marker
    "q"  # last stable offset when the abort was written
)


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: who, which offsets, and the LSO when it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        """The 34-byte index entry, at the current version."""
        return ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset,
                          self.last_offset, self.last_stable_offset)


class TxnIndexSearchResult(NamedTuple):
    """What ``collect_aborted`` found, and whether later segments need not be searched."""

    aborted: list[AbortedTxn]
    is_complete: bool


def _parse(data: bytes) -> list[tuple[int, AbortedTxn]]:
    """``(version, txn)`` for every whole entry in ``data``."""
    whole = data[: len(data) - len(data) % ENTRY.size]
    return [(version, AbortedTxn(*fields)) for version, *fields in ENTRY.iter_unpack(whole)]


class TransactionIndex:
    """The aborted transactions of one segment."""

    def __init__(self, file: BinaryIO | None, base_offset: int, path: str = MEMORY_PATH) -> None:
        """Load the entries of ``file``.

        ``file`` is None for an index whose file does not exist yet. That file
        is created at ``path`` by the first append.
        """
        if file is None and path == MEMORY_PATH:
            raise ValueError("an index without a file object needs a path to create it at")
        self._file = file
        self.base_offset = base_offset
        self.path = path
        self._entries: list[AbortedTxn] = []
        #: appended to since the last sync_fds (the partition log fsyncs it with the marker)
        self.dirty = False
        if file is not None:
            self._entries = [txn for _, txn in _parse(self._read_all(file))]

    @classmethod
    def open(cls, path: str | os.PathLike[str], base_offset: int) -> Self:
        """Open the index at ``path`` if it exists; else create nothing until the first append."""
        file_path = Path(path)
        file = file_path.open("r+b") if file_path.exists() else None
        return cls(file, base_offset, str(file_path))

    @staticmethod
    def _read_all(file: BinaryIO) -> bytes:
        file.seek(0)
        return file.read()

    def _writable_file(self) -> BinaryIO:
        if self._file is None:
            file_path = Path(self.path)
            file_path.touch()
            self._file = file_path.open("r+b")
        return self._file

    def append(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction.

        :raise IndexInvariantError: if ``txn.last_offset`` is not greater than
            the previous entry's (Kafka requires a strict increase) or is below
            the base offset.
        """
        def require(ok: bool, rule: str, bound: int) -> None:
            if not ok:
                raise IndexInvariantError(self.path, "last_offset", txn.last_offset, rule, bound)

        require(txn.last_offset >= self.base_offset, "must be at least the base offset",
                self.base_offset)
        if self._entries:
            previous = self._entries[-1].last_offset
            require(txn.last_offset > previous, "must be greater than the previous last offset",
                    previous)
        file = self._writable_file()
        file.seek(len(self._entries) * ENTRY.size)
        file.write(txn.to_bytes())
        self._entries.append(txn)
        self.dirty = True

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions that overlap ``[fetch_offset, upper_bound_offset)``.

        As in Kafka's ``collectAbortedTxns``, the search stops at the first
        entry whose last stable offset is >= ``upper_bound_offset``. That entry
        was written after every transaction that could overlap the range was
        already open, so nothing later can matter. ``is_complete`` then says
        that the caller need not search later segments' indexes.
        """
        aborted = []
        for txn in self._entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                aborted.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(aborted, True)
        return TxnIndexSearchResult(aborted, False)

    def all_entries(self) -> list[AbortedTxn]:
        """Every entry, oldest first."""
        return list(self._entries)

    def _truncate_to_entries(self, count: int) -> None:
        if self._file is not None:
            self._file.truncate(count * ENTRY.size)
        del self._entries[count:]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose last offset is >= ``offset``."""
        kept = next((n for n, txn in enumerate(self._entries) if txn.last_offset >= offset),
                    len(self._entries))
        self._truncate_to_entries(kept)

    def sanity_check(self) -> None:
        """Check the file on disk.

        :raise CorruptIndexError: if the file ends mid-entry, an entry has a
            version other than 0 (a newer format we cannot read), an entry ends
            before the base offset, or last offsets do not increase.
        """
        if self._file is None:
            return
        data = self._read_all(self._file)
        if len(data) % ENTRY.size:
            raise CorruptIndexError(self.path, f"length {len(data)} is not a multiple of "
                                               f"the entry size {ENTRY.size}")
        parsed = _parse(data)
        for n, (version, txn) in enumerate(parsed):
            if version != CURRENT_VERSION:
                raise CorruptIndexError(self.path, f"entry {n} has version {version}, "
                                                   f"expected {CURRENT_VERSION}")
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(self.path, f"entry {n} last offset {txn.last_offset} is "
                                                   f"below the base offset {self.base_offset}")
        for n, ((_, previous), (_, txn)) in enumerate(pairwise(parsed), start=1):
            if txn.last_offset <= previous.last_offset:
                raise CorruptIndexError(self.path, f"entry {n} last offset {txn.last_offset} "
                                                   f"does not exceed the previous "
                                                   f"{previous.last_offset}")

    def reset(self) -> None:
        """Remove every entry, ready for a rebuild."""
        self._truncate_to_entries(0)

    def flush(self) -> None:
        """Make every appended entry durable (nothing to do before the first append)."""
        if self._file is not None:
            fsync_file(self._file)

    def sync_fds(self) -> list[int]:
        self.dirty = False
        return dup_for_sync(self._file)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def delete(self) -> bool:
        """Close the index and delete its file, returning whether a file was deleted."""
        self.close()
        self._file = None
        self._entries.clear()
        if self.path == MEMORY_PATH:
            return False
        try:
            Path(self.path).unlink()
        except FileNotFoundError:
            return False
        return True
