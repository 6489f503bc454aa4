"""Frames in, frames out: Kafka's request and response encoding, done by ``kio``.

A frame is ``int32 size`` followed by ``size`` bytes. A request is a request header
(v1, or v2 with a tagged-field section for flexible API versions) and a body; a
response is a response header (v0, or v1 for flexible versions -- except
ApiVersions, whose responses always use v0) and a body. ``kio`` generates the
header and body types of every API version from Kafka's JSON message definitions
and reads and writes them natively; which header a message travels with is its
class's ``__header_schema__``. Record batches are plain bytes fields, so they pass
through untouched: stored verbatim, served verbatim.

Handlers build responses as plain mappings, one shape for every version of an API
(as Kafka's generated ``*Data`` classes are): :func:`build` turns a mapping into the
kio entity of the requested version. A field that version does not have is left
out; a field the mapping does not give gets the schema's default (or Kafka's zero
value). Milliseconds become the ``timedelta`` / ``datetime`` kio uses for ``*Ms``
fields, ints the ``ErrorCode`` it uses for error codes.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import TZAware

#: ApiKey int16, ApiVersion int16, CorrelationId int32: the start of every request header
HEADER_PREFIX = struct.Struct(">hhi")
SIZE = struct.Struct(">i")
_MS = datetime.timedelta(milliseconds=1)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class MalformedRequestError(Exception):
    """A frame that is not a request this broker can read (the connection is closed)."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """The fixed start of a request header, readable for any API and version."""

    api_key: int
    api_version: int
    correlation_id: int


def read_head(frame: bytes | memoryview) -> RequestHead:
    if len(frame) < HEADER_PREFIX.size:
        raise MalformedRequestError(f"a request of {len(frame)} bytes is shorter than a request header")
    return RequestHead(*HEADER_PREFIX.unpack_from(frame, 0))


@functools.cache
def _request_readers(api_key: int, version: int) -> tuple[Callable, Callable]:
    body = load_request_schema(api_key, version)
    return entity_reader(body.__header_schema__), entity_reader(body)


def decode_request(frame: bytes, head: RequestHead) -> tuple[str | None, Any]:
    """``(client id, request body entity)`` of a frame whose API and version are served."""
    header_reader, body_reader = _request_readers(head.api_key, head.api_version)
    view = memoryview(frame)
    try:
        header, used = header_reader(view, 0)
        body, _ = body_reader(view, used)
    except Exception as e:  # kio's DecodeError and whatever a truncated buffer raises
        raise MalformedRequestError(f"undecodable request: {type(e).__name__}: {e}") from None
    return header.client_id, body


@functools.cache
def _response_writers(api_key: int, version: int) -> tuple[type, Callable, type, Callable]:
    body = load_response_schema(api_key, version)
    header = body.__header_schema__
    return body, entity_writer(body), header, entity_writer(header)


def has_error_code(api_key: int, version: int) -> bool:
    """Does this response carry a top-level ``error_code`` (one error for the whole request)?"""
    return "error_code" in _response_writers(api_key, version)[0].__dataclass_fields__


def encode_response(api_key: int, version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
    """The whole frame (size, response header, body) answering one request."""
    body_cls, body_writer, header_cls, header_writer = _response_writers(api_key, version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header_writer(out, header_cls(correlation_id=correlation_id))
    body_writer(out, build(body_cls, body))
    frame = out.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - SIZE.size)
    del frame
    return out.getvalue()


# -- mapping -> entity ------------------------------------------------------------------


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """The kio entity ``cls`` from ``values`` (see the module docstring)."""
    kwargs = {}
    for name, convert, default in _plan(cls):
        value = values.get(name, _MISSING)
        if value is _MISSING:
            kwargs[name] = default
        elif value is None or convert is None:
            kwargs[name] = value
        else:
            kwargs[name] = convert(value)
    return cls(**kwargs)


_MISSING = object()


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, Callable | None, Any], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for field in dataclasses.fields(cls):
        kind, nullable = _strip_optional(hints[field.name])
        default = field.default if field.default is not dataclasses.MISSING else _zero(kind, nullable)
        plan.append((field.name, _converter(kind), default))
    return tuple(plan)


def _strip_optional(kind: Any) -> tuple[Any, bool]:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(kind))
    return kind, False


def _is_entity(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _converter(kind: Any) -> Callable | None:
    if _is_entity(kind):
        return functools.partial(build, kind)
    if typing.get_origin(kind) is tuple:
        element = typing.get_args(kind)[0]
        if _is_entity(element):
            return lambda values, element=element: tuple(build(element, v) for v in values)
        return tuple
    if isinstance(kind, type) and issubclass(kind, ErrorCode):
        return ErrorCode
    if isinstance(kind, type) and issubclass(kind, datetime.timedelta):
        return lambda ms: ms if isinstance(ms, datetime.timedelta) else ms * _MS
    if isinstance(kind, type) and issubclass(kind, datetime.datetime):
        return lambda ms: ms if isinstance(ms, datetime.datetime) else _EPOCH + ms * _MS
    return None


def _zero(kind: Any, nullable: bool) -> Any:
    """Kafka's default for a field with no default of its own."""
    if nullable:
        return None
    if _is_entity(kind):
        return build(kind, {})  # entities are frozen: one shared instance will do
    if typing.get_origin(kind) is tuple:
        return ()
    if isinstance(kind, type):
        if issubclass(kind, ErrorCode):
            return ErrorCode.none
        if issubclass(kind, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(kind, TZAware):
            return _EPOCH
        for base, zero in ((bool, False), (int, 0), (float, 0.0), (str, ""), (bytes, b"")):
            if issubclass(kind, base):
                return zero
    raise TypeError(f"no zero value for {kind!r}")


def millis(value: datetime.timedelta | int) -> int:
    """A kio ``*Ms`` duration as Kafka's integer milliseconds."""
    return value if isinstance(value, int) else value // _MS
