"""Reading request input into the models of ``exactly/app/http/api/models.py``.

A body that is not JSON, a missing field, a wrong JSON type, a number out of range
or an unknown choice is raised as ``InvalidRequestError`` (INVALID_REQUEST, HTTP 400)
with a message naming the field (``records[2].partition_id: ...``), so handlers see
only well-typed values and nothing a client sends can end as a 500.
"""

from __future__ import annotations

import json
import typing
from typing import Any, TypeVar

from flask import g, request
from pydantic import BaseModel, ValidationError

from exactly.app.http.api import models
from exactly.storage.errors import InvalidRequestError

M = TypeVar("M", bound=BaseModel)

#: every field name of every model: a location part that is none of them is a union
#: member's label (``int``, ``BINARY``), not part of the path a client wrote
_FIELDS = frozenset(name for model in vars(models).values()
                    if isinstance(model, type) and issubclass(model, BaseModel) for name in model.model_fields)


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


def parse(model: type[M], value: Any, where: str = "") -> M:
    """``value`` as ``model``; INVALID_REQUEST naming the field (after the prefix
    ``where``, e.g. ``records[2].``) if it is not one."""
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{where.rstrip('. ') or 'the body'} must be a JSON object")
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise InvalidRequestError(_message(e, where)) from None
    except RecursionError:  # absurdly deep JSON inside a free-form value
        raise InvalidRequestError(f"{where.rstrip('. ') or 'the body'} nests too deeply") from None


def body(model: type[M], required: bool = True) -> M:
    """The JSON object body as ``model``."""
    return parse(model, json_body(required))


def query(model: type[M]) -> M:
    """The query string as ``model`` (a list field takes every value of its parameter)."""
    args = {name: request.args.getlist(name) if typing.get_origin(field.annotation) is list else request.args[name]
            for name, field in model.model_fields.items() if name in request.args}
    try:
        return model.model_validate(args)
    except ValidationError as e:
        raise InvalidRequestError(_message(e, "query parameter ")) from None


def _message(error: ValidationError, where: str) -> str:
    """The first problem as ``path: reason, got value`` (``records[2].partition_id: ...``)."""
    first = error.errors(include_url=False)[0]
    path = where
    for part in first["loc"]:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _FIELDS:
            path += f".{part}" if path and path[-1] not in ". " else part
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        path += ".type"  # the discriminator of a key or value
    path = path.rstrip(". ") or "the body"
    if first["type"] == "missing":
        return f"{path} is required"
    return f"{path}: {first['msg']}, got {first.get('input')!r:.100}"
