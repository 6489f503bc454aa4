"""Variable-length integers as Kafka writes them.

Both encodings share protobuf's base-128 byte layout: 7 value bits per byte,
least-significant group first, the high bit set on every byte except the last::

    300  ->  0b10_0101100  ->  ac 02      (0x2c | 0x80, then 0x02)

* **Signed varint / varlong** (record fields, docs/formats.md §2.3). The value is
  zigzag-mapped first (0, -1, 1, -2, 2 ... -> 0, 1, 2, 3, 4 ...) so small negative
  numbers stay short. Kafka's int32 varint takes at most 5 bytes and its int64
  varlong at most 10. Python ints have no width, so one pair of functions covers
  both: it accepts any int64 and reads up to 10 bytes.
* **Unsigned varint** (``UNSIGNED_VARINT`` in flexible protocol messages: compact
  lengths and tagged fields). No zigzag; an unsigned 32-bit value in at most 5 bytes.

Decoders take ``(buf, pos)`` and return ``(value, new_pos)``, so callers walk a
buffer without slicing it. A varint cut off by the end of the buffer, longer than
its maximum, or outside its integer range raises ``InvalidRecordError``: inside a
batch whose CRC matched, a bad varint is a structural fault, which Kafka
answers with INVALID_RECORD (its ``DefaultRecord.readFrom`` turns both the
underflow and the "varint is too long" error into ``InvalidRecordException``).
"""

from __future__ import annotations

from exactly.storage.errors import InvalidRecordError

MAX_VARLONG_BYTES = 10
MAX_UVARINT_BYTES = 5

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1

# Values below 0x80 encode as themselves in one byte; most lengths and deltas do.
_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def _encode_unsigned(n: int) -> bytes:
    """Base-128 bytes of ``n >= 0``."""
    if n < 0x80:
        return _ONE_BYTE[n]
    if n < 0x4000:  # two bytes: record lengths and value lengths up to 8 KiB
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _decode_unsigned(buf: bytes | bytearray | memoryview, pos: int,
                     max_bytes: int) -> tuple[int, int]:
    """The raw base-128 value at ``pos`` (at most ``max_bytes`` long) and the position after it."""
    result = 0
    shift = 0
    for i in range(pos, pos + max_bytes):
        try:
            byte = buf[i]
        except IndexError:
            raise InvalidRecordError(
                f"varint at position {pos} is cut off by the end of the buffer "
                f"({len(buf)} bytes)") from None
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i + 1
        shift += 7
    raise InvalidRecordError(f"varint at position {pos} is longer than {max_bytes} bytes")


def encode_varint(n: int) -> bytes:
    """Zigzag varint/varlong bytes of a signed 64-bit ``n`` (record fields)."""
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"varint value {n} is outside the int64 range")
    return _encode_unsigned((n << 1) ^ (n >> 63))


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The zigzag varint/varlong at ``pos`` and the position after it."""
    try:
        byte = buf[pos]
    except IndexError:
        raise InvalidRecordError(
            f"varint at position {pos} is past the end of the buffer ({len(buf)} bytes)") from None
    if byte < 0x80:  # one byte: the common case on the record decode path
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, MAX_VARLONG_BYTES)
    if raw >> 64:
        raise InvalidRecordError(f"varint ending at position {pos} is outside the int64 range")
    return (raw >> 1) ^ -(raw & 1), pos


def encode_uvarint(n: int) -> bytes:
    """Unsigned varint bytes of a 32-bit ``n`` (protocol ``UNSIGNED_VARINT``)."""
    if not 0 <= n <= _UINT32_MAX:
        raise ValueError(f"unsigned varint value {n} is outside the uint32 range")
    return _encode_unsigned(n)


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned 32-bit varint at ``pos`` and the position after it."""
    value, pos = _decode_unsigned(buf, pos, MAX_UVARINT_BYTES)
    if value > _UINT32_MAX:
        raise InvalidRecordError(
            f"unsigned varint ending at position {pos} is outside the uint32 range")
    return value, pos
