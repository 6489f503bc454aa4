"""REST Proxy v3 envelopes shared by the API modules: ``kind``, ``metadata`` (``self``
and ``resource_name``), lists with ``data``, and ``{"related": url}`` links.

Every URL is under ``/v3/clusters/<cluster_id>``; path segments are percent-quoted,
so a transactional id with spaces or slashes still makes a working link.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from flask import request

from app.http import current_engine


def cluster_id() -> str:
    return current_engine().logs.cluster_id


def url(*segments: Any) -> str:
    """The absolute URL of ``/v3/clusters/<this cluster>/<segments...>``."""
    path = "/".join(quote(str(s), safe="") for s in ("v3", "clusters", cluster_id(), *segments))
    return f"{request.host_url}{path}"


def related(*segments: Any) -> dict[str, str]:
    return {"related": url(*segments)}


def crn(**parts: Any) -> str:
    """Confluent's resource name: ``crn:///kafka=<cluster>/topic=<name>/...``."""
    return "crn:///" + "/".join(f"{k}={v}" for k, v in (("kafka", cluster_id()), *parts.items()))


def resource(kind: str, segments: tuple[Any, ...], name: str | None, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"self": url(*segments), "resource_name": name}, **fields}


def listing(kind: str, segments: tuple[Any, ...], data: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"self": url(*segments), "next": None}, "data": data}
