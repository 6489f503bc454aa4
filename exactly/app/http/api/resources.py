"""REST Proxy v3 envelopes shared by the API modules: ``kind``, ``metadata`` (``self``
and ``resource_name``), lists with ``data``, and ``{"related": url}`` links.

Every URL is under ``/v3/clusters/<cluster_id>``; path segments are percent-quoted,
so a transactional id with spaces or slashes still makes a working link. The
``self`` of what a request asked for carries the request's query string
(``.../transactions?state=Ongoing``), so following it asks the same question again;
resources inside a list have their own plain URL. ``resource_name`` is Confluent's
CRN, ``crn:///kafka=<cluster>/topic=<name>/...``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from flask import abort, request

from exactly.app.http import current_engine


def cluster_id() -> str:
    return current_engine().topics.cluster_id


def check_broker(broker_id: int) -> None:
    """404 unless ``broker_id`` is this node's (the cluster's one broker)."""
    node = current_engine().topics.node_id
    if broker_id != node:
        abort(404, f"broker {broker_id} not found; this cluster is broker {node} alone")


def url(*segments: Any) -> str:
    """The absolute URL of ``/v3/clusters/<this cluster>/<segments...>``."""
    path = "/".join(quote(str(s), safe="") for s in ("v3", "clusters", cluster_id(), *segments))
    return f"{request.host_url}{path}"


def self_url(*segments: Any) -> str:
    """:func:`url`, with the query string when it is the URL this request asked for."""
    address = url(*segments)
    query = request.query_string.decode("latin-1")
    return f"{address}?{query}" if query and address == request.base_url else address


def related(*segments: Any) -> dict[str, str]:
    return {"related": url(*segments)}


def crn(*parts: tuple[str, Any], **named: Any) -> str:
    """Confluent's resource name: ``crn:///kafka=<cluster>/topic=<name>/...``; ``parts``
    for names that are not Python identifiers (``("consumer-group", id)``)."""
    pairs = (("kafka", cluster_id()), *parts, *named.items())
    return "crn:///" + "/".join(f"{k}={v}" for k, v in pairs)


def resource(kind: str, segments: tuple[Any, ...], resource_name: str | None, /, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"self": self_url(*segments), "resource_name": resource_name}, **fields}


def listing(kind: str, segments: tuple[Any, ...], data: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"self": self_url(*segments), "next": None}, "data": data}
