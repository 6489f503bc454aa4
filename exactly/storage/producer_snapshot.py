"""Producer-state snapshot files: ``<offset>.snapshot`` (docs/formats.md §6).

The seed's ``PidSnapshot`` (version, CRC, [PidEntry]) in the byte layout of
Kafka's ``ProducerStateManager`` version 1, so Kafka's own tools read our files
(Version and Crc are the framing of ``exactly/storage/checked_file.py``)::

    Snapshot       => Version Crc ProducerEntries
      Version      => int16          1
      Crc          => uint32         CRC-32C of every byte after this field
      ProducerEntries => int32 count, then count x ProducerEntry
    ProducerEntry  (46 bytes)
      ProducerId            int64
      Epoch                 int16
      LastSequence          int32    -1 if the producer has no retained batch
      LastOffset            int64    -1 likewise
      OffsetDelta           int32    LastOffset - first offset of that batch
      Timestamp             int64
      CoordinatorEpoch      int32
      CurrentTxnFirstOffset int64    -1 if no transaction is open

Kafka writes one entry per producer and so keeps only its last batch across a
restart. We write one entry per *retained batch* (up to 5 per producer, oldest
first, producer fields repeated), so duplicate detection survives a restart in
full; a Kafka reader keeps the last entry of each producer and sees exactly what
Kafka would have written. Worked example: producer 7, epoch 0, one batch of
sequences 0..2 at offsets 10..12 -> one entry ``(7, 0, 2, 12, 2, ts, -1, -1)``.

The file's name is the offset the snapshot was taken at: it holds the state of
every batch below that offset. A file that fails its CRC, has a version we do not
know or a bad length raises :class:`CorruptSnapshotError`; the log then deletes it
and falls back to an older snapshot or a full scan.
"""

from __future__ import annotations

import struct
from collections import deque
from pathlib import Path

from exactly.storage.atomic_file import write_atomically
from exactly.storage.checked_file import CorruptFileError, frame, unframe
from exactly.storage.producer_state import BATCHES_TO_RETAIN, NO_OFFSET, BatchMetadata, ProducerStateEntry
from exactly.storage.record_batch import NO_SEQUENCE

VERSION = 1

#: after the Version and Crc of exactly/storage/checked_file.py's framing
COUNT = struct.Struct(
    ">"
    "i"  # ProducerEntries: array length
)

ENTRY = struct.Struct(
    ">"
    "q"  # ProducerId
    "h"  # Epoch
    "i"  # LastSequence
    "q"  # LastOffset
    "i"  # OffsetDelta
    "q"  # Timestamp
    "i"  # CoordinatorEpoch
    "q"  # CurrentTxnFirstOffset
)


class CorruptSnapshotError(CorruptFileError):
    """A snapshot file cannot be trusted; the caller deletes it and falls back."""


def encode(entries: list[ProducerStateEntry]) -> bytes:
    rows = [row for entry in entries for row in _rows(entry)]
    return frame(VERSION, COUNT.pack(len(rows)) + b"".join(ENTRY.pack(*row) for row in rows))


def _rows(entry: ProducerStateEntry) -> list[tuple[int, ...]]:
    txn = entry.current_txn_first_offset if entry.current_txn_first_offset is not None else NO_OFFSET
    common = (entry.last_timestamp, entry.coordinator_epoch, txn)
    if not entry.batches:
        return [(entry.producer_id, entry.producer_epoch, NO_SEQUENCE, NO_OFFSET, 0) + common]
    return [(entry.producer_id, entry.producer_epoch, b.last_seq, b.last_offset, b.offset_delta) + common
            for b in entry.batches]


def decode(data: bytes, path: Path | str = "<memory>") -> list[ProducerStateEntry]:
    try:
        body = unframe(data, VERSION, path)
    except CorruptFileError as e:
        raise CorruptSnapshotError(path, e.reason) from None
    if len(body) < COUNT.size:
        raise CorruptSnapshotError(path, f"{len(data)} bytes is shorter than the header")
    (count,) = COUNT.unpack_from(body)
    if count < 0 or len(body) != COUNT.size + count * ENTRY.size:
        raise CorruptSnapshotError(path, f"{count} entries do not fit {len(data)} bytes")
    entries: dict[int, ProducerStateEntry] = {}
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn in ENTRY.iter_unpack(body[COUNT.size:]):
        entry = entries.get(pid)
        if entry is None or entry.producer_epoch != epoch:
            entry = entries[pid] = ProducerStateEntry(
                pid, epoch, batches=deque(maxlen=BATCHES_TO_RETAIN))
        entry.coordinator_epoch = coord
        entry.last_timestamp = ts
        entry.current_txn_first_offset = None if txn == NO_OFFSET else txn
        if last_seq != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(last_seq, last_offset, delta))
    return list(entries.values())


def write(path: Path, entries: list[ProducerStateEntry]) -> None:
    """Write a snapshot atomically (temp file, fsync, rename, fsync the directory)."""
    write_atomically(path, encode(entries))


def read(path: Path) -> list[ProducerStateEntry]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptSnapshotError(path, f"cannot read: {e}") from e
    return decode(data, path)
