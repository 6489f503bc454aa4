"""REST Proxy v3 record data: ``{"type": ..., "data": ...}`` for keys and values.

A produce request may send a key or value as

* ``BINARY`` -- ``data`` is base64 (standard alphabet, padded) of the bytes;
* ``STRING`` -- ``data`` is a string, stored as UTF-8;
* ``JSON``   -- ``data`` is any JSON value, stored as compact UTF-8 JSON;

or omit it / send null for a null key or value. There is no schema registry, so
reads always answer ``BINARY``: the broker stores bytes and does not know how they
were meant. Headers are ``[{"name": str, "value": base64 or null}]`` both ways.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime, timezone

#: 9999-12-31T23:59:59.999Z, the last instant ISO 8601 (and a produce's timestamp) can name
MAX_TIME_MS = 253_402_300_799_999
from typing import Any

from exactly.storage.errors import InvalidRequestError

Headers = tuple[tuple[str, bytes | None], ...]


def decode_data(obj: Any, where: str) -> bytes | None:
    """The bytes of a key or value (a validated ``models.RecordData``); None for a null one."""
    if obj is None:
        return None
    data = obj.data
    if obj.type == "BINARY":
        return decode_base64(data, f"{where}.data")
    if obj.type == "STRING":
        return _utf8(data, where)
    try:
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as e:
        raise InvalidRequestError(f"{where}.data is not JSON: {e}") from None
    return _utf8(text, where)


def decode_base64(data: str, where: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(f"{where} is not valid base64") from None


def _utf8(text: str, where: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate escaped in the JSON ("\ud800")
        raise InvalidRequestError(f"{where}.data is not valid Unicode") from None


def decode_headers(items: Any, where: str) -> Headers:
    """The headers of validated ``models.Header`` items (None: no headers)."""
    return tuple((item.name, None if item.value is None else decode_base64(item.value, f"{where}[{i}].value"))
                 for i, item in enumerate(items or ()))


def encode_data(data: bytes | None) -> dict[str, str] | None:
    return None if data is None else {"type": "BINARY", "data": base64.b64encode(data).decode()}


def encode_headers(headers: Headers) -> list[dict[str, str | None]]:
    return [{"name": name, "value": None if value is None else base64.b64encode(value).decode()}
            for name, value in headers]


def summary(obj: Any, data: bytes | None) -> dict[str, Any] | None:
    """The produce response's ``{"type", "size"}`` of a key or value (REST v3)."""
    return None if data is None else {"type": obj.type, "size": len(data)}


def iso_time(ms: int) -> str | None:
    """Milliseconds since the epoch as the proxy writes an instant: ISO 8601 in UTC,
    milliseconds shown when there are some (``2021-02-05T19:14:42.120Z``); None for
    -1 (no timestamp)."""
    if ms < 0:
        return None
    moment = datetime.fromtimestamp(ms // 1000, tz=timezone.utc)
    text = (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
            f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}")
    return f"{text}.{ms % 1000:03d}Z" if ms % 1000 else f"{text}Z"
