"""A REST route declared once: one :class:`Route` per method and path gives the Flask
rule, the OpenAPI operation, what the request needs (``exactly/app/http/access.py``) and the
model its answer is checked against in the tests::

    @declare(bp, Route("get", P + "/records", "Read records", "Records", 200, m.RecordList,
                       (404, 416), query=m.ReadQuery, needs=kafka(ApiKey.FETCH, ON_TOPIC)))
    def read(topic_name: str, partition_id: int): ...

The path is OpenAPI's (``{partition_id}``); the Flask rule is made from it, each
parameter with the converter of its type in ``models.PathParameters`` (``<int:partition_id>``).
``document.py`` builds ``/openapi.json`` from :data:`ROUTES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from flask import Blueprint
from pydantic import BaseModel

from exactly.app.http import access
from exactly.app.http.api import models as m

V = TypeVar("V", bound=Callable[..., Any])

#: the paths the resources share (OpenAPI's spelling)
CLUSTER_PATH = "/v3/clusters/{cluster_id}"
BROKER_PATH = CLUSTER_PATH + "/brokers/{broker_id}"
TOPIC_PATH = CLUSTER_PATH + "/topics/{topic_name}"
PARTITION_PATH = TOPIC_PATH + "/partitions/{partition_id}"
TRANSACTION_PATH = CLUSTER_PATH + "/transactions/{transactional_id}"
GROUP_PATH = CLUSTER_PATH + "/consumer-groups/{group_id}"
#: the errors of a change, besides the 400, 401, 403 and 413 of every route
CHANGES = (404, 503)
#: the errors of a transactional producer's call (409: fenced, wrong epoch or state)
TXN_ERRORS = (404, 409, 503)

#: the request names the resource in a REST path argument
ON_TOPIC = access.path(access.TOPIC, "topic_name")
ON_GROUP = access.path(access.GROUP, "group_id")
ON_TXN = access.path(access.TXN, "transactional_id")


@dataclass(frozen=True)
class Route:
    """One method on one path: its words, its models, its statuses and its needs."""

    method: str
    path: str
    summary: str
    tag: str
    ok: int
    answer: type[BaseModel] | None
    errors: tuple[int, ...] = (404,)
    body: type[BaseModel] | None = None
    body_required: bool = True
    query: type[m.Query] | None = None
    idempotent: bool = False
    description: str = ""
    #: another success status with the same answer (create topic's dry run: 200)
    also_ok: int | None = None
    #: what the request needs (``exactly/app/http/access.py``: Kafka's rule for the same act)
    needs: access.Needs = field(kw_only=True)

    @property
    def rule(self) -> str:
        """The Flask rule: ``{name}`` as ``<name>``, or ``<int:name>`` for an integer parameter."""
        return re.sub(r"{([a-z_]+)}", lambda found: f"<{_converter(found[1])}{found[1]}>", self.path)

    @property
    def statuses(self) -> tuple[int, ...]:
        """The success statuses, each answered with :attr:`answer`."""
        return (self.ok,) if self.also_ok is None else (self.ok, self.also_ok)


def _converter(name: str) -> str:
    return "int:" if m.PathParameters.model_fields[name].annotation is int else ""


#: every declared route, in the order declared
ROUTES: list[Route] = []


def declare(bp: Blueprint, *routes: Route) -> Callable[[V], V]:
    """Register the view at each route's rule on ``bp``, with the route's needs."""
    def register(view: V) -> V:
        for declared in routes:
            bp.add_url_rule(declared.rule, view.__name__, view, methods=[declared.method.upper()])
            access.declare(view, declared.needs)
            ROUTES.append(declared)
        return view
    return register
