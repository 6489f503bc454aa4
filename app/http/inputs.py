"""Reading request input: every value is checked here before it reaches the engine.

A missing field, a wrong JSON type, a number out of range or an unknown choice is
raised as ``InvalidRequestError`` (INVALID_REQUEST, HTTP 400) with a message naming
the field (``records[2].partition_id``), so handlers see only well-typed values and
nothing a client sends can end as a 500. The bounds are Kafka's wire types: int16
epochs, int32 partitions and sequences, int64 offsets and producer ids. The OpenAPI
document (``app/http/openapi.py``) states the same bounds.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flask import g, request

from storage.errors import InvalidRequestError

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_MISSING = object()
_DIGITS = re.compile(r"^[0-9]{1,19}$")


def json_body(required: bool = True) -> dict[str, Any]:
    """The request body as a JSON object (``{}`` for an empty optional body); parsed
    once per request."""
    if "json_body" in g:
        return g.json_body
    raw = request.get_data(cache=True)  # RequestEntityTooLarge (413) past MAX_CONTENT_LENGTH
    if not raw:  # whitespace is a body, and not JSON: 400
        if required:
            raise InvalidRequestError("the request needs a JSON object body")
        body = {}
    else:
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
            raise InvalidRequestError(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a JSON object")
    g.json_body = body
    return body


def json_values() -> list[Any]:
    """The request body as one or more JSON values written one after another (the
    proxy's streaming produce: concatenated JSON, any whitespace between). A body
    that does not parse to the end is refused whole, before anything is done."""
    raw = request.get_data(cache=True)
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise InvalidRequestError("the body is not UTF-8") from None
    decoder = json.JSONDecoder()
    values, at = [], _skip_space(text, 0)
    while at < len(text):
        try:
            value, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError) as e:
            raise InvalidRequestError(f"the body is not JSON values one after another: {e}") from None
        values.append(value)
        at = _skip_space(text, at)
    if not values:
        raise InvalidRequestError("the request needs a JSON object body")
    return values


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _get(obj: dict[str, Any], name: str, where: str, required: bool, nullable: bool) -> Any:
    """The field's value; _MISSING when it is absent (or null where null means absent)."""
    value = obj.get(name, _MISSING)
    if value is None and nullable:
        value = _MISSING
    if value is _MISSING and required:
        raise InvalidRequestError(f"{where}{name} is required")
    return value


def integer(obj: dict[str, Any], name: str, *, where: str = "", required: bool = True,
            default: int | None = None, minimum: int = 0, maximum: int = INT64_MAX,
            nullable: bool = False) -> int | None:
    """An integer field in ``[minimum, maximum]`` (booleans and floats are refused);
    ``nullable``: null is taken as absent."""
    value = _get(obj, name, where, required, nullable)
    if value is _MISSING:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidRequestError(f"{where}{name} must be an integer in [{minimum}, {maximum}], got {value!r}")
    return value


def boolean(obj: dict[str, Any], name: str, *, where: str = "", default: bool = False) -> bool:
    """An optional true/false field (null: the default)."""
    value = _get(obj, name, where, required=False, nullable=True)
    if value is _MISSING:
        return default
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{where}{name} must be true or false, got {value!r:.100}")
    return value


def string(obj: dict[str, Any], name: str, *, where: str = "", required: bool = True,
           default: str | None = None, min_length: int = 1, max_length: int = 32767,
           nullable: bool = False) -> str | None:
    value = _get(obj, name, where, required, nullable)
    if value is _MISSING:
        return default
    if not isinstance(value, str) or not min_length <= len(value) <= max_length:
        raise InvalidRequestError(
            f"{where}{name} must be a string of {min_length} to {max_length} characters, got {value!r:.100}")
    try:
        value.encode()
    except UnicodeEncodeError:  # a lone surrogate escaped in the JSON ("\ud800")
        raise InvalidRequestError(f"{where}{name} is not valid Unicode") from None
    return value


def array(obj: dict[str, Any], name: str, *, where: str = "", required: bool = True,
          min_items: int = 0, max_items: int = 10_000) -> list[Any]:
    value = _get(obj, name, where, required, nullable=False)
    if value is _MISSING:
        return []
    if not isinstance(value, list) or not min_items <= len(value) <= max_items:
        raise InvalidRequestError(f"{where}{name} must be an array of {min_items} to {max_items} items")
    return value


def objects(obj: dict[str, Any], name: str, *, required: bool = True, min_items: int = 0,
            max_items: int = 10_000) -> list[tuple[str, dict[str, Any]]]:
    """An array of JSON objects, each with its path for messages (``records[0].``)."""
    items = array(obj, name, required=required, min_items=min_items, max_items=max_items)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequestError(f"{name}[{i}] must be an object")
    return [(f"{name}[{i}].", item) for i, item in enumerate(items)]


def query_integer(name: str, *, default: int | None = None, minimum: int = 0,
                  maximum: int = INT64_MAX) -> int | None:
    """A non-negative integer query parameter in ``[minimum, maximum]``."""
    raw = request.args.get(name)
    if raw is None:
        return default
    if not _DIGITS.match(raw) or not minimum <= int(raw) <= maximum:
        raise InvalidRequestError(f"query parameter {name} must be an integer in [{minimum}, {maximum}], "
                                  f"got {raw!r:.100}")
    return int(raw)


def query_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    raw = request.args.get(name)
    if raw is None:
        return default
    if raw not in choices:
        raise InvalidRequestError(f"query parameter {name} must be one of {', '.join(choices)}, got {raw!r:.100}")
    return raw


def query_choice_or_integer(name: str, choices: tuple[str, ...], default: str) -> str | int:
    """One of ``choices`` or a non-negative integer (``timestamp=latest|earliest|<ms>``)."""
    raw = request.args.get(name)
    if raw is None or raw in choices:
        return raw or default
    if not _DIGITS.match(raw) or int(raw) > INT64_MAX:
        raise InvalidRequestError(f"query parameter {name} must be one of {', '.join(choices)} or an integer "
                                  f">= 0, got {raw!r:.100}")
    return int(raw)
