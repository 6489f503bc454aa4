"""Frames in, frames out: Kafka's request and response encoding, done by ``kio``.

A frame is ``int32 size`` followed by ``size`` bytes. A request is a request header
(v1, or v2 with a tagged-field section for flexible API versions) and a body; a
response is a response header (v0, or v1 for flexible versions -- except
ApiVersions, whose responses always use v0) and a body. ``kio`` generates the
header and body types of every API version from Kafka's JSON message definitions
and reads and writes them natively; which header a message travels with is its
class's ``__header_schema__``. Record batches are plain bytes fields, so they pass
through untouched: stored verbatim, served verbatim. kio trusts the counts it reads,
so every request is first walked by ``exactly/app/kafka/prescan.py``, which refuses any count
or length the frame cannot hold before kio allocates for it.

Handlers build responses as plain mappings, one shape for every version of an API
(as Kafka's generated ``*Data`` classes are): ``exactly/app/kafka/wire.py``'s :func:`build` turns a
mapping into the kio entity of the requested version (and Kafka-protocol clients use
the same module to frame requests).
"""

from __future__ import annotations

import functools
import io
import struct
from dataclasses import dataclass
from typing import Any, Mapping

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import Reader
from kio.serial.writers import Writer
from kio.static.primitive import i32
from kio.static.protocol import RequestHeader, RequestPayload, ResponseHeader, ResponsePayload

from exactly.app.kafka.prescan import FrameError, prescan
from exactly.app.kafka.wire import build, millis  # noqa: F401  (millis: the handlers' *Ms fields)

#: ApiKey int16, ApiVersion int16, CorrelationId int32: the start of every request header
HEADER_PREFIX = struct.Struct(">hhi")
SIZE = struct.Struct(">i")


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
def _request_readers(api_key: int, version: int
                     ) -> tuple[type[RequestHeader], Reader[Any], type[RequestPayload], Reader[Any]]:
    body = load_request_schema(api_key, version)
    header = body.__header_schema__
    return header, entity_reader(header), body, entity_reader(body)


def decode_request(frame: bytes | memoryview, head: RequestHead) -> tuple[str | None, Any]:
    """``(client id, request body entity)`` of a frame whose API and version are served.

    The frame is :func:`~exactly.app.kafka.prescan.prescan`-ned first: kio would reserve
    memory for whatever count a frame claims."""
    header_cls, header_reader, body_cls, body_reader = _request_readers(head.api_key, head.api_version)
    try:
        used, frame = prescan(header_cls, frame, 0)
        _, frame = prescan(body_cls, frame, used)
    except FrameError as e:
        raise MalformedRequestError(f"undecodable request: {e}") from None
    view = memoryview(frame)
    try:
        header, used = header_reader(view, 0)
        body, _ = body_reader(view, used)
    except Exception as e:  # kio's DecodeError and whatever a truncated buffer raises
        raise MalformedRequestError(f"undecodable request: {type(e).__name__}: {e}") from None
    return header.client_id, body


@functools.cache
def _response_writers(api_key: int, version: int
                      ) -> tuple[type[ResponsePayload], Writer[Any], type[ResponseHeader], Writer[Any]]:
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
    header_writer(out, header_cls(correlation_id=i32(correlation_id)))
    body_writer(out, build(body_cls, body))
    frame = out.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - SIZE.size)
    del frame
    return out.getvalue()
