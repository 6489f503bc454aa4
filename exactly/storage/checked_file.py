"""Whole files the broker owns, each behind a version and a CRC-32C.

The framing, shared by every such file::

    File     => Version Crc Body
      Version   int16    the layout of Body; a reader rejects any other
      Crc       uint32   CRC-32C of Body (every byte after this field)
      Body      the file's own fields, big-endian

Files framed this way: ``producer-id-block`` (exactly/coordinator/producer_id_manager.py),
``transaction-coordinator-epoch`` (exactly/coordinator/transaction_coordinator.py) and
``<offset>.snapshot`` (exactly/storage/producer_snapshot.py: Kafka's snapshot has exactly
this framing). The version is outside the CRC, as in Kafka's snapshot, so a file of
a newer version is reported as such rather than as damage.

Worked example: ``transaction-coordinator-epoch`` at version 0 holding epoch 3 is the
10 bytes ``00 00 | 5b 37 b8 33 | 00 00 00 03`` -- version 0, the CRC-32C of the
body, the body (one int32).

A file is replaced whole (``exactly/storage/atomic_file.py``): a crash leaves the old file or
the new one. What can still go wrong -- a truncated, garbled, foreign or unreadable
file -- raises :class:`CorruptFileError`; each owner decides what to fall back on.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import crc32c

from exactly.storage.atomic_file import write_atomically

HEADER = struct.Struct(
    ">"
    "h"  # Version
    "I"  # Crc: CRC-32C of the body
)


class CorruptFileError(Exception):
    """A framed file cannot be trusted: wrong version, CRC, length, or unreadable."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def frame(version: int, body: bytes) -> bytes:
    """The file's bytes: ``body`` behind its version and CRC-32C."""
    return HEADER.pack(version, crc32c.crc32c(body)) + body


def unframe(data: bytes, version: int, path: Path | str = "<memory>") -> bytes:
    """The body of ``data``.

    :raise CorruptFileError: shorter than the header, another version, or a CRC mismatch.
    """
    if len(data) < HEADER.size:
        raise CorruptFileError(path, f"{len(data)} bytes is shorter than the {HEADER.size}-byte header")
    found, crc = HEADER.unpack_from(data)
    if found != version:
        raise CorruptFileError(path, f"unknown version {found} (this broker reads version {version})")
    body = data[HEADER.size:]
    if crc32c.crc32c(body) != crc:
        raise CorruptFileError(path, "CRC-32C mismatch")
    return body


def read_fields(path: Path, version: int, layout: struct.Struct) -> tuple[Any, ...] | None:
    """The fields of a file whose body is one ``layout``; None if there is no file.

    :raise CorruptFileError: unreadable, damaged, or a body of another size.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CorruptFileError(path, f"cannot read: {e.strerror}") from e
    body = unframe(data, version, path)
    if len(body) != layout.size:
        raise CorruptFileError(path, f"a body of {len(body)} bytes, expected {layout.size}")
    return layout.unpack(body)


def write_fields(path: Path, version: int, layout: struct.Struct, *fields: Any) -> None:
    """Replace ``path`` atomically and durably with ``fields`` packed by ``layout``."""
    write_atomically(path, frame(version, layout.pack(*fields)))
