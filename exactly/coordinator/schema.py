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

A record's *flexible* version (KIP-482: Kafka's ``flexibleVersions``) is derived
from the same declaration by :func:`flexible`: strings and arrays become compact
(unsigned-varint lengths, +1 so that 0 is null) and every struct ends with tagged
fields -- optional fields a reader that does not know them skips, which is how
Kafka adds to a record without breaking older readers.
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
#: Kafka's ``uuid``: 16 bytes, most significant first (kept as bytes)
UUID = _Fixed(struct.Struct(">16s"))


@dataclass(frozen=True)
class _UnsignedVarint(Type):
    """Kafka's unsigned varint (7 bits a byte, low group first), at most 5 bytes (int32)."""

    def encode(self, value: int, out: bytearray) -> None:
        if not 0 <= value < 1 << 32:
            raise SchemaError(f"unsigned varint out of range: {value}")
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)

    def decode(self, data: memoryview, pos: int) -> tuple[int, int]:
        value = 0
        for shift in range(0, 35, 7):
            if pos >= len(data):
                raise SchemaError("unsigned varint runs past the end")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
        raise SchemaError(f"unsigned varint longer than 5 bytes at {pos - 5}")


UNSIGNED_VARINT = _UnsignedVarint()


def _encode_length(length: int, compact: bool, out: bytearray, plain: _Fixed = INT16) -> None:
    """A length (-1: null) as ``plain`` (int16 or int32), or -- ``compact``, in a
    flexible version -- as an unsigned varint of the length + 1 (0: null)."""
    if compact:
        UNSIGNED_VARINT.encode(length + 1, out)
    else:
        out += plain.fmt.pack(length)


def _decode_length(data: memoryview, pos: int, compact: bool, plain: _Fixed = INT16) -> tuple[int, int]:
    if compact:
        length, pos = UNSIGNED_VARINT.decode(data, pos)
        return length - 1, pos
    return plain.decode(data, pos)


#: the longest string an int16 length can carry (Kafka's ``Short.MAX_VALUE``): the
#: limit of a transactional or group id, which are keys of the internal topics
MAX_STRING_BYTES = 0x7FFF


@dataclass(frozen=True)
class _String(Type):
    """UTF-8 text after its byte length (see ``_encode_length``; -1 is null)."""

    nullable: bool
    compact: bool = False

    def encode(self, value: str | None, out: bytearray) -> None:
        if value is None:
            if not self.nullable:
                raise SchemaError("null for a non-nullable string")
            _encode_length(-1, self.compact, out)
            return
        raw = value.encode("utf-8")
        if not self.compact and len(raw) > MAX_STRING_BYTES:
            raise SchemaError(f"string of {len(raw)} bytes is longer than {MAX_STRING_BYTES}")
        _encode_length(len(raw), self.compact, out)
        out += raw

    def decode(self, data: memoryview, pos: int) -> tuple[str | None, int]:
        length, pos = _decode_length(data, pos, self.compact)
        if length < 0:
            if self.nullable and length == -1:
                return None, pos
            raise SchemaError(f"string length {length} before {pos}")
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
    """Bytes after their length: int32 (-1: null), or -- ``compact``, in a flexible
    version -- an unsigned varint of the length + 1 (0: null)."""

    compact: bool = False

    def encode(self, value: bytes | None, out: bytearray) -> None:
        if value is None:
            _encode_length(-1, self.compact, out, INT32)
        else:
            _encode_length(len(value), self.compact, out, INT32)
            out += value

    def decode(self, data: memoryview, pos: int) -> tuple[bytes | None, int]:
        start = pos
        length, pos = _decode_length(data, pos, self.compact, INT32)
        if length == -1:
            return None, pos
        if length < 0 or pos + length > len(data):
            raise SchemaError(f"bytes of length {length} at {start}")
        return bytes(data[pos:pos + length]), pos + length


NULLABLE_BYTES = _Bytes()


@dataclass(frozen=True)
class Array(Type):
    """A count then the elements; a null array (count -1) decodes as None. The count is
    an int32, or ``compact`` (a flexible version's) an unsigned varint of count + 1."""

    element: Type
    compact: bool = False

    def encode(self, value: list[Any] | None, out: bytearray) -> None:
        _encode_length(-1 if value is None else len(value), self.compact, out, INT32)
        for item in value or ():
            self.element.encode(item, out)

    def decode(self, data: memoryview, pos: int) -> tuple[list[Any] | None, int]:
        count, pos = _decode_length(data, pos, self.compact, INT32)
        if count == -1:
            return None, pos
        if count < 0 or count > len(data) - pos:
            raise SchemaError(f"array count {count} before {pos}")
        items = []
        for _ in range(count):
            item, pos = self.element.decode(data, pos)
            items.append(item)
        return items, pos


@dataclass(frozen=True)
class TaggedField:
    """A tagged field of a flexible version: written only when not ``default``."""

    tag: int
    name: str
    kind: Type
    default: Any


class Schema(Type):
    """An ordered struct of named fields; values are plain dicts. A flexible one
    (:func:`flexible`) ends with its tagged fields: a count, then per field its tag,
    its size and its bytes (unsigned varints), in tag order; a tag it does not
    declare is skipped, a declared one that is absent decodes as its default."""

    def __init__(self, *fields: tuple[str, Type], tagged: tuple[TaggedField, ...] | None = None) -> None:
        self.fields = fields
        #: None: not flexible (no tagged-field section)
        self.tagged = None if tagged is None else tuple(sorted(tagged, key=lambda f: f.tag))
        self.names = tuple(name for name, _ in fields) + tuple(f.name for f in self.tagged or ())

    # override: as a field of another struct it appends to ``out`` like every Type (its
    # result unused); on its own it also returns the bytes, which a Type's None does not
    def encode(self, value: dict[str, Any], out: bytearray | None = None) -> bytes:  # type: ignore[override]
        target = bytearray() if out is None else out
        for name, kind in self.fields:
            try:
                kind.encode(value[name], target)
            except (KeyError, struct.error) as e:
                raise SchemaError(f"field {name}: {e}") from None
        if self.tagged is not None:
            self._encode_tagged(value, target)
        return bytes(target)

    def _encode_tagged(self, value: dict[str, Any], out: bytearray) -> None:
        present = [f for f in self.tagged or () if value.get(f.name, f.default) != f.default]
        UNSIGNED_VARINT.encode(len(present), out)
        for f in present:
            body = bytearray()
            try:
                f.kind.encode(value[f.name], body)
            except struct.error as e:
                raise SchemaError(f"field {f.name}: {e}") from None
            UNSIGNED_VARINT.encode(f.tag, out)
            UNSIGNED_VARINT.encode(len(body), out)
            out += body

    def decode(self, data: bytes | memoryview, pos: int = 0) -> tuple[dict[str, Any], int]:
        view = memoryview(data)
        result = {}
        for name, kind in self.fields:
            result[name], pos = kind.decode(view, pos)
        if self.tagged is not None:
            pos = self._decode_tagged(view, pos, result)
        return result, pos

    def _decode_tagged(self, data: memoryview, pos: int, result: dict[str, Any]) -> int:
        by_tag = {f.tag: f for f in self.tagged or ()}
        result.update((f.name, f.default) for f in by_tag.values())
        count, pos = UNSIGNED_VARINT.decode(data, pos)
        last = -1
        for _ in range(count):
            tag, pos = UNSIGNED_VARINT.decode(data, pos)
            size, pos = UNSIGNED_VARINT.decode(data, pos)
            if tag <= last:
                raise SchemaError(f"tagged field {tag} after {last}: tags must ascend")
            last, end = tag, pos + size
            if end > len(data):
                raise SchemaError(f"tagged field {tag} of {size} bytes runs past the end")
            known = by_tag.get(tag)
            if known is not None:
                result[known.name], used = known.kind.decode(data[:end], pos)
                if used != end:
                    raise SchemaError(f"tagged field {tag} has {end - used} bytes left over")
            pos = end
        return pos

    def decode_all(self, data: bytes | memoryview) -> dict[str, Any]:
        """Decode ``data`` whole: every byte must belong to the struct."""
        value, end = self.decode(data)
        if end != len(data):
            raise SchemaError(f"{len(data) - end} bytes left after the struct")
        return value


@dataclass(frozen=True)
class NullableStruct(Type):
    """A struct that may be null (Kafka's ``nullableVersions`` on a struct field): an int8
    marker, -1 for null or 1, then the struct."""

    struct: Schema

    def encode(self, value: dict[str, Any] | None, out: bytearray) -> None:
        if value is None:
            INT8.encode(-1, out)
            return
        INT8.encode(1, out)
        self.struct.encode(value, out)

    def decode(self, data: memoryview, pos: int) -> tuple[dict[str, Any] | None, int]:
        marker, pos = INT8.decode(data, pos)
        if marker < 0:
            return None, pos
        return self.struct.decode(data, pos)


def flexible(schema: Schema, tagged: tuple[TaggedField, ...] = ()) -> Schema:
    """The flexible version of ``schema`` (KIP-482): the same fields with compact
    strings and arrays, every nested struct flexible, and ``tagged`` at the end."""
    return Schema(*((name, _flexible_type(kind)) for name, kind in schema.fields), tagged=tagged)


def _flexible_type(kind: Type) -> Type:
    if isinstance(kind, _String):
        return _String(kind.nullable, compact=True)
    if isinstance(kind, Array):
        return Array(_flexible_type(kind.element), compact=True)
    if isinstance(kind, Schema):
        return flexible(kind)
    if isinstance(kind, _Bytes):
        return _Bytes(compact=True)
    return kind


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
