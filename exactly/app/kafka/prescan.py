"""Every count and length of a request checked against the bytes left, before ``kio``
reads it.

kio's native reader trusts the counts it reads: a compact array claiming 2^32-2
elements in a 22-byte frame makes it reserve ~34 GB, and the process aborts. So
before kio sees a frame, :func:`prescan` walks it once by the same schema kio
reads it by (the entity classes' fields and their ``kafka_type`` metadata) and
refuses any array count, string, bytes or records length, tagged-field count or
size that claims more than the bytes left (every array element counting as one byte
at least, as in Kafka's generated readers), and any null where the schema allows
none. It allocates nothing but its own position and never loops more often than the
frame has bytes, so a hostile frame costs at most its own length in work. The walk
reads lengths only: a Produce of 1 MB of records costs what a small request does.

Unknown tagged fields are what tagged fields exist for (a newer client may send
them; Kafka skips them), but kio refuses them; :func:`prescan` returns the frame
with them removed, so kio reads only the tags it knows.

Plans (what to read, field by field) are derived once per entity class and cached.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import struct
import types
import typing
from dataclasses import dataclass

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field
from kio.static.constants import EntityType
from kio.static.protocol import Entity

from exactly.storage.errors import InvalidRecordError
from exactly.storage.varint import decode_uvarint, encode_uvarint

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

#: bytes of each fixed-size ``kafka_type``
_FIXED_SIZES = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
    "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16,
}
#: ``kafka_type``s read as a length and that many bytes
_SIZED = {"string": _INT16, "bytes": _INT32, "records": _INT32}


class FrameError(ValueError):
    """A count or length in a request that the frame cannot hold, or a cut-off frame."""


class _Kind(enum.Enum):
    FIXED = "fixed"        # ``size`` bytes
    SIZED = "sized"        # a length (compact: uvarint n+1; legacy: ``legacy``), then n bytes
    ARRAY = "array"        # a count (compact: uvarint n+1; legacy: int32), then n ``element``s
    ENTITY = "entity"      # a nested struct, read by ``plan``


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: _Kind
    compact: bool = False
    #: may be null (-1, or 0 compact); a null where the schema allows none is refused, as
    #: Kafka's generated readers refuse it
    nullable: bool = False
    #: FIXED: its size; otherwise the fewest bytes it can take (to bound a count)
    size: int = 0
    legacy: struct.Struct | None = None
    element: "_Field | None" = None
    plan: "_Plan | None" = None


@dataclass(frozen=True, slots=True)
class _Plan:
    name: str
    fields: tuple[_Field, ...]
    flexible: bool
    tagged: dict[int, _Field]
    min_size: int


def prescan(cls: type[Entity], frame: bytes | memoryview, offset: int) -> tuple[int, bytes | memoryview]:
    """Check the ``cls`` entity at ``frame[offset:]``; returns where it ends and the frame
    without unknown tagged fields (the same object when it has none). Raises FrameError."""
    drops: list[tuple[int, int, bytes]] = []
    end = _scan_entity(_plan(cls), frame, offset, len(frame), drops)
    if not drops:
        return end, frame
    return end - sum(stop - start - len(kept) for start, stop, kept in drops), _splice(frame, drops)


@functools.cache
def _plan(cls: type[Entity]) -> _Plan:
    flexible = bool(cls.__flexible__)
    # the request header's ClientId stays a legacy string in header v2 (flexibleVersions "none")
    compact = flexible and cls.__type__ is not EntityType.header
    fields, tagged = [], {}
    for field in dataclasses.fields(cls):
        compiled = _field(field, compact)
        if "tag" in field.metadata:
            tagged[field.metadata["tag"]] = compiled
        else:
            fields.append(compiled)
    min_size = sum(f.size for f in fields) + (1 if flexible else 0)
    return _Plan(cls.__name__, _merge_fixed(fields), flexible, tagged, min_size)


def _merge_fixed(fields: list[_Field]) -> tuple[_Field, ...]:
    """Runs of fixed-size fields as one (``acks+timeout``): one bounds check instead of several."""
    merged: list[_Field] = []
    for field in fields:
        if merged and field.kind is _Kind.FIXED and merged[-1].kind is _Kind.FIXED:
            last = merged.pop()
            field = _Field(f"{last.name}+{field.name}", _Kind.FIXED, size=last.size + field.size)
        merged.append(field)
    return tuple(merged)


def _field(field: dataclasses.Field, compact: bool) -> _Field:
    shape = classify_field(field)
    nullable = _is_nullable(field.type)
    if isinstance(shape, EntityTupleField):
        plan = _plan(shape.type_)
        if not plan.flexible and len(plan.fields) == 1 and plan.fields[0].kind is _Kind.FIXED:
            element = plan.fields[0]  # a struct of fixed-size fields: the array is skipped in one step
        else:
            element = _Field(field.name, _Kind.ENTITY, plan=plan, size=plan.min_size)
        return _array(field.name, compact, nullable, element)
    if isinstance(shape, EntityField):
        plan = _plan(shape.type_)  # nullable (DescribeTopicPartitions' Cursor): an int8 marker first, -1 null
        return _Field(field.name, _Kind.ENTITY, nullable=nullable, plan=plan,
                      size=1 if nullable else plan.min_size)
    if isinstance(shape, PrimitiveTupleField):
        element_type = typing.get_args(typing.get_args(field.type)[0] if nullable else field.type)[0]
        element = _primitive(field.name, field.metadata["kafka_type"], compact, _is_nullable(element_type))
        return _array(field.name, compact, nullable, element)
    return _primitive(field.name, field.metadata["kafka_type"], compact, nullable)


def _is_nullable(kind: object) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in typing.get_args(kind)


def _array(name: str, compact: bool, nullable: bool, element: _Field) -> _Field:
    return _Field(name, _Kind.ARRAY, compact=compact, nullable=nullable, size=1 if compact else 4,
                  element=element)


def _primitive(name: str, kafka_type: str, compact: bool, nullable: bool) -> _Field:
    if kafka_type in _FIXED_SIZES:
        return _Field(name, _Kind.FIXED, size=_FIXED_SIZES[kafka_type])
    legacy = _SIZED[kafka_type]
    return _Field(name, _Kind.SIZED, compact=compact, nullable=nullable, size=1 if compact else legacy.size,
                  legacy=legacy)


def _scan_entity(plan: _Plan, buf: bytes | memoryview, pos: int, end: int,
                 drops: list[tuple[int, int, bytes]]) -> int:
    for field in plan.fields:
        if field.kind is _Kind.FIXED and pos + field.size <= end:
            pos += field.size  # the common case, without a call
        else:
            pos = _scan_field(plan, field, buf, pos, end, drops)
    if plan.flexible:
        pos = _scan_tags(plan, buf, pos, end, drops)
    return pos


def _scan_field(plan: _Plan, field: _Field, buf: bytes | memoryview, pos: int, end: int,
                drops: list[tuple[int, int, bytes]]) -> int:
    kind = field.kind
    if kind is _Kind.FIXED:
        if pos + field.size > end:
            raise FrameError(f"{plan.name}.{field.name}: the request ends {pos + field.size - end} bytes early")
        return pos + field.size
    if kind is _Kind.ENTITY:
        assert field.plan is not None, "an ENTITY field has its plan"
        if field.nullable:
            if pos >= end:
                raise FrameError(f"{plan.name}.{field.name}: the request ends 1 byte early")
            marker, pos = buf[pos], pos + 1
            if marker == 0xFF:
                return pos  # null
        return _scan_entity(field.plan, buf, pos, end, drops)
    count, pos = _length(plan, field, buf, pos, end)
    if count <= 0:
        return pos  # null or empty
    if kind is _Kind.SIZED:
        return pos + count
    element = field.element
    assert element is not None, "an ARRAY field has its element"
    if element.kind is _Kind.FIXED:
        return pos + count * element.size
    for _ in range(count):
        pos = _scan_field(plan, element, buf, pos, end, drops)
    return pos


def _length(plan: _Plan, field: _Field, buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """A length or count (-1: null) that the bytes left can hold, and the position after it."""
    if field.compact:
        value, pos = _uvarint(plan, field, buf, pos, end)
        value -= 1
    else:
        legacy = field.legacy or _INT32
        if pos + legacy.size > end:
            raise FrameError(f"{plan.name}.{field.name}: the request ends inside its length")
        (value,) = legacy.unpack_from(buf, pos)
        pos += legacy.size
        if value < -1:
            raise FrameError(f"{plan.name}.{field.name}: negative length {value}")
    if value == -1 and not field.nullable:
        raise FrameError(f"{plan.name}.{field.name}: null, which it may not be")
    # every element (only an ARRAY has them) takes a byte at least, as Kafka's generated
    # readers assume
    unit = max(field.element.size, 1) if field.element is not None else 1
    if value * unit > end - pos:
        what = "elements" if field.kind is _Kind.ARRAY else "bytes"
        raise FrameError(f"{plan.name}.{field.name}: {value} {what} claimed, {end - pos} bytes left")
    return value, pos


def _uvarint(plan: _Plan, field: _Field | None, buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    try:
        value, after = decode_uvarint(buf, pos)
        if after <= end:
            return value, after
    except InvalidRecordError:
        pass  # cut off by the end of the frame, longer than 5 bytes, or past uint32
    where = f"{plan.name}.{field.name}" if field is not None else f"{plan.name} tagged fields"
    raise FrameError(f"{where}: an unsigned varint runs past the request or past 5 bytes")


def _scan_tags(plan: _Plan, buf: bytes | memoryview, pos: int, end: int,
               drops: list[tuple[int, int, bytes]]) -> int:
    """The tagged-field section: each size within the bytes left, known tags read by their
    schema within their size, unknown ones noted in ``drops`` (start, stop, what remains)."""
    start = pos
    count, pos = _uvarint(plan, None, buf, pos, end)
    if count > end - pos:
        raise FrameError(f"{plan.name}: {count} tagged fields claimed, {end - pos} bytes left")
    kept, kept_count = [], 0
    for _ in range(count):
        field_start = pos
        tag, pos = _uvarint(plan, None, buf, pos, end)
        size, pos = _uvarint(plan, None, buf, pos, end)
        stop = pos + size
        if stop > end:
            raise FrameError(f"{plan.name}: tagged field {tag} claims {size} bytes, {end - pos} left")
        field = plan.tagged.get(tag)
        if field is not None:
            # a known tag is kept whole: an unknown tag nested in it is left for kio to refuse
            _scan_field(plan, field, buf, pos, stop, [])
            kept.append(bytes(buf[field_start:stop]))
            kept_count += 1
        pos = stop
    if kept_count < count:
        drops.append((start, pos, encode_uvarint(kept_count) + b"".join(kept)))
    return pos


def _splice(buf: bytes | memoryview, drops: list[tuple[int, int, bytes]]) -> bytes:
    """``buf`` with each (start, stop) range replaced by its kept bytes (the walk notes
    them in order, and they never overlap)."""
    out: list[bytes | memoryview] = []
    pos = 0
    for start, stop, kept in drops:
        out += (buf[pos:start], kept)
        pos = stop
    out.append(buf[pos:])
    return b"".join(out)
