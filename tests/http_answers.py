"""Every answer of a REST route checked against what its ``Route`` declares
(``exactly/app/http/api/route.py``): a success has one of the route's statuses and its body
is the route's answer model -- every field of the right type, none it does not declare --
or empty when the route answers none; an error is the JSON error body (``models.Error``).

``tests/conftest.py`` runs :func:`check` on every answer a Flask test client gets, in
every test; ``tests/test_http_routes.py`` drives every route to a success over a real
server. A streamed produce's answer (several delivery reports one after another) is
checked report by report, each the route's model or an error body.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

from pydantic import BaseModel, ValidationError
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, MapAdapter, Rule

JSON = "application/json"


@functools.cache
def _routes() -> tuple[MapAdapter, list[Any]]:
    """The declared routes, and their rules to match a request's path against."""
    from exactly.app.http.api import clusters  # noqa: F401 -- the root blueprint: it imports every route
    from exactly.app.http.api.route import ROUTES

    rules = Map([Rule(route.rule, methods=[route.method.upper()], endpoint=str(i)) for i, route in enumerate(ROUTES)],
                merge_slashes=False)
    return rules.bind("localhost"), list(ROUTES)


def route_of(method: str, path: str) -> Any:
    """The ``Route`` a request asked for, or None (not a REST route, or no such method)."""
    adapter, routes = _routes()
    try:
        endpoint, _ = adapter.match(path, method)
    except HTTPException:
        return None
    return routes[int(endpoint)]


def undeclared(model: BaseModel, data: Any, where: str = "") -> list[str]:
    """The fields of ``data`` (the JSON ``model`` was validated from) that no model declares."""
    if not isinstance(data, dict):
        return []
    fields = {field.alias or name: name for name, field in type(model).model_fields.items()}
    found = [f"{where}.{key}" for key in data if key not in fields]
    for key, name in fields.items():
        if key in data:
            found += _undeclared_in(getattr(model, name), data[key], f"{where}.{key}")
    return found


def _undeclared_in(value: Any, data: Any, where: str) -> list[str]:
    if isinstance(value, BaseModel):
        return undeclared(value, data, where)
    if isinstance(value, (list, tuple)) and isinstance(data, list):
        return [found for i, (v, d) in enumerate(zip(value, data)) for found in _undeclared_in(v, d, f"{where}[{i}]")]
    if isinstance(value, dict) and isinstance(data, dict):
        return [found for key in value if key in data for found in _undeclared_in(value[key], data[key],
                                                                                  f"{where}.{key}")]
    return []


def _values(text: str) -> list[Any]:
    """The JSON values of a body, one after another (a streamed produce's reports)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        at += len(text[at:]) - len(text[at:].lstrip())
    return values


def _matches(model: type[BaseModel], value: Any, what: str) -> None:
    try:
        validated = model.model_validate_json(json.dumps(value), strict=True)
    except ValidationError as error:
        raise AssertionError(f"{what} is not its declared {model.__name__}: {error}") from None
    extra = undeclared(validated, value)
    assert not extra, f"{what} answers fields its declared {model.__name__} does not have: {extra}"


def check(method: str, path: str, status: int, mimetype: str, body: bytes) -> Any:
    """:raise AssertionError: the answer is not what its route declares. The route, or None."""
    from exactly.app.http.api import models

    route = route_of(method, path)
    if route is None or 300 <= status < 400:
        return None
    what = f"{method} {path} ({status})"
    if status >= 400:
        assert mimetype == JSON, f"{what}: an error's body is JSON, not {mimetype}"
        _matches(models.Error, json.loads(body), what)
        return route
    assert status in route.statuses, f"{what}: its Route declares {route.statuses}"
    if route.answer is None:
        assert body == b"", f"{what}: its Route declares no body, got {body[:200]!r}"
        return route
    assert mimetype == JSON, f"{what}: its Route declares JSON, got {mimetype}"
    values = _values(body.decode())
    if len(values) == 1:
        _matches(route.answer, values[0], what)
    for i, value in enumerate(values if len(values) > 1 else ()):  # a streamed produce: a report per record
        _matches(route.answer if value.get("error_code") == 200 else models.Error, value, f"{what} report {i}")
    return route


def checked(open_: Callable[..., Any]) -> Callable[..., Any]:
    """A test client's ``open`` that checks each answer (the request it was for is on it)."""
    @functools.wraps(open_)
    def open_and_check(client: Any, *args: Any, **kwargs: Any) -> Any:
        response = open_(client, *args, **kwargs)
        streamed = response.is_streamed
        body = response.get_data()
        if streamed:  # reading it made it a list: a stream again, for the test
            response.response = iter((body,))
        check(response.request.method, response.request.path, response.status_code, response.mimetype, body)
        return response
    return open_and_check
