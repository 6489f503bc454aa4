"""What the two fixed-width indexes (``.index`` and ``.timeindex``) share.

Both files are a bare run of fixed-width, big-endian entries: no header, no
version, no checksum. Entry ``n`` starts at byte ``n * ENTRY.size``. Each entry
is a pair of integers ``(key, value)``. Keys strictly increase and values never
decrease, so the entries can be binary-searched by either one. A subclass
declares its layout once as ``ENTRY`` (a two-field ``struct.Struct``) and
converts between absolute and relative offsets. Everything else lives here.

Kafka (``AbstractIndex``) preallocates each index file (10 MiB by default),
memory-maps it and trims it to the valid length when the segment rolls or
closes. We do neither. The file only ever holds whole entries that were
appended, so a closed index has the same bytes as Kafka's. All entries are kept
in memory in two ``array``s, read once when the index is opened, so lookups
never touch the disk. Appends write through to the file object (buffered);
``flush()`` makes them durable.

These files are derived data. On any doubt, ``sanity_check`` raises
``CorruptIndexError``, and the caller calls ``reset()`` and rebuilds the index
from the ``.log``.
"""

from __future__ import annotations

import contextlib
import io
from abc import ABC, abstractmethod
import os
import struct
from array import array
from bisect import bisect_right
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO, ClassVar, Self

from exactly.storage.errors import InvariantViolation

#: The ``path`` of an index whose file object is not a file on disk (tests use io.BytesIO).
MEMORY_PATH = "<memory>"

#: Relative offsets are stored in 4 signed bytes.
INT32_MAX = 2**31 - 1


class CorruptIndexError(Exception):
    """An index file failed its sanity check, so the caller rebuilds it from the log.

    This is an internal error (Kafka's ``CorruptIndexException``) and never
    goes to a client.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt index {path}: {reason}")
        self.path = path
        self.reason = reason


class IndexInvariantError(InvariantViolation):
    """An append that would break an index's ordering. It is a bug in the caller, not a Kafka error.

    ``field`` is the offending field, ``value`` its value, and ``bound`` the
    limit it broke (for example, the last offset in the index). ``rule`` reads
    between the two: ``offset 5 must be greater than the last offset 7``.
    """

    def __init__(self, path: str, field: str, value: int, rule: str, bound: int) -> None:
        super().__init__(f"{path}: {field} {value} {rule} {bound}")
        self.path = path
        self.field = field
        self.value = value
        self.rule = rule
        self.bound = bound


def fsync_file(file: BinaryIO) -> None:
    """Flush Python's buffer and fsync a real file; an in-memory one has nothing to sync."""
    file.flush()
    try:
        descriptor = file.fileno()
    except io.UnsupportedOperation:
        return
    os.fsync(descriptor)


def dup_for_sync(file: BinaryIO | None, flush: bool = True) -> list[int]:
    """Flush Python's buffer (unless ``flush`` is false: the caller did) and return a
    duplicated descriptor to fsync on another thread (the caller closes it); none for
    an in-memory or absent file."""
    if file is None:
        return []
    if flush:
        file.flush()
    try:
        return [os.dup(file.fileno())]
    except io.UnsupportedOperation:
        return []


class FixedWidthIndex(ABC):
    """A sorted index of ``(key, value)`` entries laid out by ``ENTRY``, cached in memory."""

    #: Big-endian, exactly two fields. Subclasses declare it.
    ENTRY: ClassVar[struct.Struct]

    def __init__(self, file: BinaryIO, base_offset: int, path: str = MEMORY_PATH) -> None:
        """Load every whole entry of ``file``; a partial trailing entry is left for sanity_check."""
        self._file = file
        self.base_offset = base_offset
        self.path = path
        # struct's "i" and "q" are also array typecodes for 4- and 8-byte signed ints.
        key_type, value_type = list(self.ENTRY.format.removeprefix(">"))
        self._keys = array(key_type)
        self._values = array(value_type)
        file.seek(0)
        data = file.read()
        for key, value in self.ENTRY.iter_unpack(data[: len(data) - len(data) % self.ENTRY.size]):
            self._keys.append(key)
            self._values.append(value)

    @classmethod
    def open(cls, path: str | os.PathLike[str], base_offset: int) -> Self:
        """Open the index file at ``path``, creating it empty if it does not exist."""
        file_path = Path(path)
        file = file_path.open("r+b" if file_path.exists() else "w+b")
        return cls(file, base_offset, str(file_path))

    def __len__(self) -> int:
        return len(self._keys)

    @abstractmethod
    def _entry(self, slot: int) -> tuple[int, int]:
        """Entry ``slot`` in the caller's terms (absolute offsets)."""

    def entries(self) -> list[tuple[int, int]]:
        """Every entry, oldest first, in absolute offsets."""
        return [self._entry(slot) for slot in range(len(self))]

    def _slot_at_or_below(self, key: int) -> int:
        """Slot of the greatest entry whose key is <= ``key``, or -1 if there is none."""
        return bisect_right(self._keys, key) - 1

    def _require(self, ok: bool, field: str, value: int, rule: str, bound: int) -> None:
        if not ok:
            raise IndexInvariantError(self.path, field, value, rule, bound)

    def _relative(self, offset: int) -> int:
        """``offset - base_offset``, checked to fit the 4-byte relative offset field."""
        self._require(offset >= self.base_offset, "offset", offset,
                      "must be at least the base offset", self.base_offset)
        self._require(offset - self.base_offset <= INT32_MAX, "offset", offset,
                      "must be at most base offset + 2^31-1 =", self.base_offset + INT32_MAX)
        return offset - self.base_offset

    def _append_entry(self, key: int, value: int) -> None:
        """Write one entry after the last whole one, over any partial tail (as Kafka does)."""
        self._file.seek(len(self) * self.ENTRY.size)
        self._file.write(self.ENTRY.pack(key, value))
        self._keys.append(key)
        self._values.append(value)

    def forget_from(self, slot: int) -> None:
        """Drop the entries from ``slot`` on, for an append that was undone. The file is
        cut back too if it can be; if not (its buffer cannot be written out: a full
        disk), the next append overwrites the slot, and an entry left past the end of
        the log is harmless -- lookups only ever start a scan at or before the offset
        sought, and the file is derived data, rebuilt on doubt."""
        if slot >= len(self):
            return
        del self._keys[slot:]
        del self._values[slot:]
        with contextlib.suppress(OSError):
            self._file.truncate(slot * self.ENTRY.size)

    def _truncate_to_entries(self, count: int) -> None:
        self._file.truncate(count * self.ENTRY.size)
        del self._keys[count:]
        del self._values[count:]

    def _corrupt(self, reason: str) -> CorruptIndexError:
        return CorruptIndexError(self.path, reason)

    def _check_layout(self) -> None:
        """Check the file holds whole entries, keys strictly increase and values never decrease."""
        self._file.seek(0, io.SEEK_END)
        length = self._file.tell()
        if length % self.ENTRY.size:
            raise self._corrupt(f"length {length} is not a multiple of "
                                f"the entry size {self.ENTRY.size}")
        for slot, (previous, key) in enumerate(pairwise(self._keys), start=1):
            if key <= previous:
                raise self._corrupt(f"entry {slot} key {key} does not exceed "
                                    f"the previous key {previous}")
        for slot, (previous, value) in enumerate(pairwise(self._values), start=1):
            if value < previous:
                raise self._corrupt(f"entry {slot} value {value} is below "
                                    f"the previous value {previous}")

    def reset(self) -> None:
        """Remove every entry (file truncated to empty), ready for a rebuild."""
        self._truncate_to_entries(0)

    def flush(self) -> None:
        """Make every appended entry durable."""
        fsync_file(self._file)

    def sync_fds(self) -> list[int]:
        """A descriptor to fsync. An entry whose buffer cannot be written out (a full
        disk) stays buffered for a later flush: this index is sparse and derived, so a
        crash that loses trailing entries only lengthens a scan -- and entries reach the
        file in order (the next append's seek writes the buffer first, or fails)."""
        with contextlib.suppress(OSError):
            self._file.flush()
        return dup_for_sync(self._file, flush=False)

    def close(self) -> None:
        self._file.close()
