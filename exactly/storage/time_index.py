"""The sparse time index ``<base offset>.timeindex`` (docs/formats.md §4), Kafka's ``TimeIndex``.

An entry ``(timestamp, offset)`` means that ``timestamp`` is the largest
timestamp seen in the segment before ``offset``, so any record with a greater
timestamp comes after ``offset``. Entries are added only when the timestamp
goes up, so timestamps strictly increase and offsets never decrease. The file
is a bare run of 12-byte entries with no header, no version and no checksum.
After a crash it is rebuilt from the log::

    entry := timestamp       int64   max timestamp so far, ms since the epoch, big-endian
             relative_offset int32   offset - base_offset

Entry ``n`` is at byte ``12 * n``.

Worked example: a segment with base offset 100 whose max timestamp
1700000000000 (0x18bcfe56800) was reached at offset 105 holds::

    00 00 01 8b cf e5 68 00  00 00 00 05

To find records by time, ``lookup(ts)`` returns the greatest entry with
timestamp <= ``ts``. The caller then scans the log forward from that entry's
offset for the first record with timestamp >= ``ts``.

Kafka preallocates this file and memory-maps it. We do not, but the bytes of a
closed index are the same (see ``exactly/storage/index_file.py``).
"""

from __future__ import annotations

import struct
from bisect import bisect_left

from exactly.storage.index_file import CorruptIndexError, FixedWidthIndex, IndexInvariantError

__all__ = ["NO_TIMESTAMP", "CorruptIndexError", "IndexInvariantError", "TimeIndex"]

#: Kafka's ``RecordBatch.NO_TIMESTAMP``: the timestamp of "no entry".
NO_TIMESTAMP = -1


class TimeIndex(FixedWidthIndex):
    """Timestamp -> offset for one segment, with entries held in memory."""

    ENTRY = struct.Struct(
        ">"
        "q"  # timestamp: the segment's max timestamp so far, ms since the epoch
        "i"  # relative offset: offset - base_offset, where that max was reached
    )

    def _entry(self, slot: int) -> tuple[int, int]:
        return self._keys[slot], self.base_offset + self._values[slot]

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry; ``(NO_TIMESTAMP, base_offset)`` if empty."""
        return self._entry(-1) if self._keys else (NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Index ``(timestamp, offset)`` if ``timestamp`` exceeds the last one; say whether it did.

        As in Kafka, an entry whose timestamp equals the last one is skipped
        without error (a segment rolls or closes with its last entry again),
        and ``NO_TIMESTAMP`` is never indexed.

        :raise IndexInvariantError: if ``offset`` is below the last indexed
            offset or does not fit in a 4-byte relative offset, or if
            ``timestamp`` is below the last indexed timestamp.
        """
        last_timestamp, last_offset = self.last_entry
        if self._keys:
            self._require(offset >= last_offset, "offset", offset,
                          "must be at least the last offset", last_offset)
            self._require(timestamp >= last_timestamp, "timestamp", timestamp,
                          "must be at least the last timestamp", last_timestamp)
        if timestamp <= last_timestamp:
            return False
        self._append_entry(timestamp, self._relative(offset))
        return True

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the greatest entry with timestamp <= ``target_timestamp``.

        Returns ``(NO_TIMESTAMP, base_offset)`` when there is no such entry. In
        both cases the caller scans forward from the returned offset.
        """
        slot = self._slot_at_or_below(target_timestamp)
        return self._entry(slot) if slot >= 0 else (NO_TIMESTAMP, self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        self._truncate_to_entries(bisect_left(self._values, offset - self.base_offset))

    def sanity_check(self) -> None:
        """Check the file's structure.

        :raise CorruptIndexError: if the file ends mid-entry, timestamps do not
            increase, offsets decrease, or an entry lies before the base offset.
        """
        self._check_layout()
        if self._values and self._values[0] < 0:
            raise self._corrupt(f"first offset {self.base_offset + self._values[0]} "
                                f"is below the base offset {self.base_offset}")
