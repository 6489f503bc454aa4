"""The sparse offset index ``<base offset>.index`` (docs/formats.md §3), Kafka's ``OffsetIndex``.

The index maps an offset to the byte position in the segment's ``.log`` where
its batch starts. It is sparse: only some batches get an entry. A reader jumps
to the greatest indexed offset at or below the one it wants, then scans the log
forward from that position. The file is a bare run of 8-byte entries with no
header, no version and no checksum. After a crash it is rebuilt from the log::

    entry := relative_offset int32   offset - base_offset, big-endian
             position        int32   byte position of the batch in the .log

Entry ``n`` is at byte ``8 * n``. Offsets strictly increase and positions never
decrease.

Worked example: a segment with base offset 100 that indexes offset 105 at
position 100 and offset 110 at position 4096 holds 16 bytes::

    00 00 00 05  00 00 00 64    (105 - 100, 100)
    00 00 00 0a  00 00 10 00    (110 - 100, 4096)

Kafka preallocates this file and memory-maps it. We do not, but the bytes of a
closed index are the same (see ``exactly/storage/index_file.py``).
"""

from __future__ import annotations

import struct
from bisect import bisect_left

from exactly.storage.index_file import (
    INT32_MAX,
    CorruptIndexError,
    FixedWidthIndex,
    IndexInvariantError,
)

__all__ = ["CorruptIndexError", "IndexInvariantError", "OffsetIndex"]


class OffsetIndex(FixedWidthIndex):
    """Offset -> ``.log`` position for one segment, with entries held in memory."""

    ENTRY = struct.Struct(
        ">"
        "i"  # relative offset: offset - base_offset
        "i"  # position: byte position of the batch in the segment's .log
    )

    def _entry(self, slot: int) -> tuple[int, int]:
        return self.base_offset + self._keys[slot], self._values[slot]

    @property
    def last_offset(self) -> int:
        """The last indexed offset, or ``base_offset`` when the index is empty (as in Kafka)."""
        return self.base_offset + self._keys[-1] if self._keys else self.base_offset

    def append(self, offset: int, position: int) -> None:
        """Index ``offset`` at ``position``.

        :raise IndexInvariantError: if ``offset`` is not greater than the last
            indexed offset, does not fit in a 4-byte relative offset, or
            ``position`` is below the last indexed position or above int32.
        """
        if self._keys:
            self._require(offset > self.last_offset, "offset", offset,
                          "must be greater than the last offset", self.last_offset)
        relative = self._relative(offset)
        lowest = self._values[-1] if self._values else 0
        self._require(position >= lowest, "position", position, "must be at least", lowest)
        self._require(position <= INT32_MAX, "position", position, "must be at most", INT32_MAX)
        self._append_entry(relative, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the greatest entry with offset <= ``target_offset``.

        Returns ``(base_offset, 0)`` when there is no such entry: the scan then
        starts at the beginning of the segment.
        """
        slot = self._slot_at_or_below(target_offset - self.base_offset)
        return self._entry(slot) if slot >= 0 else (self.base_offset, 0)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        self._truncate_to_entries(bisect_left(self._keys, offset - self.base_offset))

    def sanity_check(self, log_size: int) -> None:
        """Check the file against the ``.log`` it indexes, which is ``log_size`` bytes long.

        :raise CorruptIndexError: if the file ends mid-entry, offsets do not
            increase, positions decrease, an entry lies before the base offset or
            the start of the log, or the last position is not inside the log.
        """
        self._check_layout()
        if not self._keys:
            return
        if self._keys[0] < 0:
            raise self._corrupt(f"first offset {self.base_offset + self._keys[0]} "
                                f"is below the base offset {self.base_offset}")
        if self._values[0] < 0:
            raise self._corrupt(f"first position {self._values[0]} is negative")
        if self._values[-1] >= log_size:
            raise self._corrupt(f"last position {self._values[-1]} is not inside "
                                f"the {log_size}-byte log")
