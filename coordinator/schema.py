"""Kafka's non-flexible wire types, declared as schemas and decoded from them.

The records the coordinators keep in ``__transaction_state`` and
``__consumer_offsets`` are Kafka's "message format" structs (the generated
``TransactionLogKey``/``Value``, ``OffsetCommitKey``/``Value``, ...): big-endian
fixed-width integers, strings with an int16 length (-1 for null), arrays with an
int32 count. A record type is declared once as a :class:`Schema` of named, typed
fields; encode and decode are derived from that declaration::

    KEY = Schema(("version", INT16), ("transactional_id", STRING))
    KEY.encode({"version": 0, "transactional_id": "t1"})
    KEY.decode(data)  -> {"version": 0, "transactional_id": "t1"}

Decoding is strict: a short buffer, a negative length or bytes left over raise
:class:`SchemaError`, which the loaders turn into a disabled partition rather
than a guess.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


class SchemaError(ValueError):
    """Bytes that do not match the schema they are decoded with."""


class Type(ABC):
    @abstractmethod
    def encode(self, value: Any, out: bytearray) -> None: ...

    @abstractmethod
    def decode(self, data: memoryview, pos: int) -> tuple[Any, int]: ...


@dataclass(frozen=True)
class _Fixed(Type):
    fmt: struct.Struct

    def encode(self, value: Any, out: bytearray) -> None:
        out += self.fmt.pack(value)

    def decode(self, data: memoryview, pos: int) -> tuple[Any, int]:
        end = pos + self.fmt.size
        if end > len(data):
            raise SchemaError(f"need {self.fmt.size} bytes at {pos}, have {len(data) - pos}")
        return self.fmt.unpack_from(data, pos)[0], end


INT8 = _Fixed(struct.Struct(">b"))
INT16 = _Fixed(struct.Struct(">h"))
INT32 = _Fixed(struct.Struct(">i"))
INT64 = _Fixed(struct.Struct(">q"))


@dataclass(frozen=True)
class _String(Type):
    nullable: bool

    def encode(self, value: str | None, out: bytearray) -> None:
        if value is None:
            if not self.nullable:
                raise SchemaError("null for a non-nullable string")
            out += INT16.fmt.pack(-1)
            return
        raw = value.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise SchemaError(f"string of {len(raw)} bytes is longer than 32767")
        out += INT16.fmt.pack(len(raw)) + raw

    def decode(self, data: memoryview, pos: int) -> tuple[str | None, int]:
        length, pos = INT16.decode(data, pos)
        if length < 0:
            if self.nullable and length == -1:
                return None, pos
            raise SchemaError(f"string length {length} at {pos - 2}")
        end = pos + length
        if end > len(data):
            raise SchemaError(f"string of {length} bytes runs past the end")
        try:
            return bytes(data[pos:end]).decode("utf-8"), end
        except UnicodeDecodeError as e:
            raise SchemaError(f"string is not UTF-8: {e}") from None


STRING = _String(nullable=False)
NULLABLE_STRING = _String(nullable=True)


@dataclass(frozen=True)
class _Bytes(Type):
    def encode(self, value: bytes | None, out: bytearray) -> None:
        if value is None:
            out += INT32.fmt.pack(-1)
        else:
            out += INT32.fmt.pack(len(value)) + value

    def decode(self, data: memoryview, pos: int) -> tuple[bytes | None, int]:
        length, pos = INT32.decode(data, pos)
        if length == -1:
            return None, pos
        if length < 0 or pos + length > len(data):
            raise SchemaError(f"bytes of length {length} at {pos - 4}")
        return bytes(data[pos:pos + length]), pos + length


NULLABLE_BYTES = _Bytes()


@dataclass(frozen=True)
class Array(Type):
    """An int32 count then the elements; -1 is a null array (decoded as None)."""

    element: Type

    def encode(self, value: list | None, out: bytearray) -> None:
        if value is None:
            out += INT32.fmt.pack(-1)
            return
        out += INT32.fmt.pack(len(value))
        for item in value:
            self.element.encode(item, out)

    def decode(self, data: memoryview, pos: int) -> tuple[list | None, int]:
        count, pos = INT32.decode(data, pos)
        if count == -1:
            return None, pos
        if count < 0 or count > len(data) - pos:
            raise SchemaError(f"array count {count} at {pos - 4}")
        items = []
        for _ in range(count):
            item, pos = self.element.decode(data, pos)
            items.append(item)
        return items, pos


class Schema(Type):
    """An ordered struct of named fields; values are plain dicts."""

    def __init__(self, *fields: tuple[str, Type]) -> None:
        self.fields = fields
        self.names = tuple(name for name, _ in fields)

    def encode(self, value: dict[str, Any], out: bytearray | None = None) -> bytes:  # type: ignore[override]
        target = bytearray() if out is None else out
        for name, kind in self.fields:
            try:
                kind.encode(value[name], target)
            except (KeyError, struct.error) as e:
                raise SchemaError(f"field {name}: {e}") from None
        return bytes(target)

    def decode(self, data: bytes | memoryview, pos: int = 0) -> tuple[dict[str, Any], int]:  # type: ignore[override]
        view = memoryview(data)
        result = {}
        for name, kind in self.fields:
            result[name], pos = kind.decode(view, pos)
        return result, pos

    def decode_all(self, data: bytes) -> dict[str, Any]:
        """Decode ``data`` whole: every byte must belong to the struct."""
        value, end = self.decode(data)
        if end != len(data):
            raise SchemaError(f"{len(data) - end} bytes left after the struct")
        return value


def versioned(data: bytes | None) -> tuple[int, bytes]:
    """Split the leading int16 version of a key or value from the rest."""
    if data is None or len(data) < 2:
        raise SchemaError("record too short for a version")
    return INT16.fmt.unpack_from(data)[0], data[2:]


def decode_versioned(data: bytes | None, version: int, schema: Schema, what: str) -> dict[str, Any]:
    """Decode a key or value that must be ``version`` of ``schema``, every byte of it."""
    found, body = versioned(data)
    if found != version:
        raise SchemaError(f"unsupported {what} version {found}")
    return schema.decode_all(body)
