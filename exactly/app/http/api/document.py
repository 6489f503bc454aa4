"""``/openapi.json``: the OpenAPI 3.1 document, derived from the routes' declarations.

It holds no shapes and no list of operations: each operation is a declared
:class:`~exactly.app.http.api.route.Route` (its models, statuses and words, beside its
view), and every schema is pydantic's JSON Schema of a model in
``exactly/app/http/api/models.py`` (the same models that validate the requests). Pinned by
tests: every Flask rule under ``/v3`` is a path here and every path here is a rule
(tests/test_http_api.py), every answer of the tests matches its route's model
(tests/http_answers.py), and schemathesis fuzzes the API from this document
(tests/test_http_fuzz.py).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from flask import Blueprint, jsonify
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from exactly.app.http import access
from exactly.app.http.api import models as m
from exactly.app.http.api.route import ROUTES, Route

bp = Blueprint("openapi", __name__)

REF = "#/components/schemas/{model}"

ERROR_TEXT = {
    400: "invalid input (INVALID_REQUEST, TOPIC_ALREADY_EXISTS, INVALID_CONFIG and other Kafka client errors)",
    401: "missing or wrong bearer token (or Basic user and password)",
    403: "not authorized: the principal may not do this (TOPIC_AUTHORIZATION_FAILED, "
         "GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED), "
         "or a write sent by a browser from another site's page",
    404: "unknown cluster, topic, partition, transactional id or group",
    409: "refused by the broker's state: fenced producer, wrong epoch or sequence, transaction state",
    413: "request body or record too large",
    415: "the body is not application/json",
    416: "offset outside the partition (OFFSET_OUT_OF_RANGE)",
    422: "Idempotency-Key reused for another request",
    429: "a new Idempotency-Key past the principal's quota (THROTTLING_QUOTA_EXCEEDED); retry after Retry-After",
    503: "coordinator or storage unavailable; retry (Retry-After)",
}


@bp.get("/openapi.json")
@access.requires(access.OPEN)
def openapi_json():
    return jsonify(document())


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": REF.format(model=model.__name__)}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without the null an optional field allows (absent is its null)."""
    variants = [s for s in schema.get("anyOf", ()) if s.get("type") != "null"]
    if len(variants) == 1:
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        return {**variants[0], **rest}
    return {k: v for k, v in schema.items() if not (k == "default" and v is None)}


def _parameters(model: type[BaseModel], where: str, names: Any = None) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF)
    required = set(schema.get("required", ()))
    found = []
    for name, prop in schema["properties"].items():
        if names is not None and name not in names:
            continue
        prop = _not_null(prop)
        prop.pop("title", None)
        description = prop.pop("description", None)
        parameter = {"name": name, "in": where, "required": where == "path" or name in required, "schema": prop}
        if description:
            parameter["description"] = description
        if prop.get("type") == "array":
            parameter.update(style="form", explode=True)
        found.append(parameter)
    return found


def _operation(op: Route) -> dict[str, Any]:
    names = re.findall(r"{([a-z_]+)}", op.path)  # "{transactional_id}:fence" names one too
    parameters = sorted(_parameters(m.PathParameters, "path", names), key=lambda p: names.index(p["name"]))
    parameters += _parameters(op.query, "query") if op.query else []
    parameters += _parameters(m.IdempotencyHeader, "header") if op.idempotent else []
    responses: dict[str, Any] = {str(ok): {"description": "OK", **(_json(_ref(op.answer)) if op.answer else {})}
                                 for ok in sorted(op.statuses)}
    # any request whose body passes MAX_CONTENT_LENGTH is refused 413 before it is read
    codes = {400, 401, 403, 413, *op.errors, *((415,) if op.body else ()),
             *((422, 429) if op.idempotent else ())}
    for code in sorted(codes):
        responses[str(code)] = {"$ref": f"#/components/responses/{code}"}
    responses["default"] = {"$ref": "#/components/responses/default"}
    operation: dict[str, Any] = {"summary": op.summary, "tags": [op.tag], "operationId": _operation_id(op.summary),
                                 "parameters": parameters, "responses": responses}
    if op.description:
        operation["description"] = op.description
    if op.body:
        operation["requestBody"] = {"required": op.body_required, **_json(_ref(op.body))}
    return operation


def _operation_id(summary: str) -> str:
    return "".join(w.capitalize() if i else w.lower() for i, w in enumerate(summary.replace("-", " ").split()))


def _schemas(routes: list[Route]) -> dict[str, Any]:
    """Every body and answer model's JSON Schema, the models they use beside them."""
    used = {model for op in routes for model in (op.body, op.answer) if model is not None} | {m.Error}
    _, top = models_json_schema([(model, "validation") for model in sorted(used, key=lambda c: c.__name__)],
                                ref_template=REF)
    return top["$defs"]


def _monitoring(operation_id: str, summary: str, ok: dict[str, Any]) -> dict[str, Any]:
    return {"get": {"summary": summary, "tags": ["Monitoring"], "operationId": operation_id,
                    "responses": {"200": ok, "401": {"$ref": "#/components/responses/401"}}}}


#: the order of an operation's methods in its path's entry
METHODS = ("get", "post", "put", "patch", "delete")


@functools.cache
def document() -> dict[str, Any]:
    """The document of every declared route, by path."""
    from exactly.app.http.api import clusters  # noqa: F401 -- the root blueprint: it imports every route

    routes = sorted(ROUTES, key=lambda op: (op.path, METHODS.index(op.method)))
    paths: dict[str, dict[str, Any]] = {}
    for op in routes:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    paths["/openapi.json"] = _monitoring("openapi", "This document",
                                         {"description": "OpenAPI 3.1", **_json({"type": "object"})})
    paths["/metrics"] = _monitoring("metrics", "Prometheus metrics", {
        "description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}})
    responses = {str(code): {"description": text, **_json(_ref(m.Error))} for code, text in ERROR_TEXT.items()}
    responses["default"] = {"description": "error", **_json(_ref(m.Error))}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Exactly HTTP API", "version": "1",
                 "description": "Confluent REST Proxy v3 names and shapes where they exist, plus transactions "
                                "over HTTP. Errors are the proxy's JSON {error_code, message}, with Kafka's "
                                "error_name and kafka_error_code beside them."},
        "security": [{}, {"bearerAuth": []}, {"basicAuth": []}],
        "paths": paths,
        "components": {"schemas": _schemas(routes), "responses": responses,
                       "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer",
                                                          "description": "needed when the broker has "
                                                                         "http.auth.token set"},
                                           "basicAuth": {"type": "http", "scheme": "basic",
                                                         "description": "a user and password; the token is "
                                                                        "the password of "
                                                                        "http.auth.token.principal"}}},
    }
